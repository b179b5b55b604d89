"""seqlab.models.GPT: invariants of a decoder-only language model.

Cached incremental decoding equals the full forward pass; left-padded prompts equal each prompt alone (learned,
sinusoidal and rotary positions); logits at t never depend on tokens after t; reorder_state picks rows; the context
length is enforced in one line for learned positions; the sinusoidal input is sqrt(D) W_e[x] + PE(pos) by the closed
form; the output projection is the token embedding when tied; save_pretrained round-trips.
"""

import re

import pytest
import torch
from torch.testing import assert_close

from seqlab.decoding import generate
from seqlab.errors import ConfigError
from seqlab.models import GPT, GPTConfig, GPTState, load_pretrained
from seqlab.models.language_model import gpt, gpt_char_small
from seqlab.nn import decoder_only

V = 13
POSITIONALS = ["learned", "sinusoidal", "rotary"]


def tiny(positional="learned", **overrides):
    torch.manual_seed(0)
    config = GPTConfig(
        vocab_size=V, context_length=12, d_model=16, num_heads=2, num_layers=2, positional=positional, **overrides
    )
    return GPT(config).double().eval()


def tokens(B, T, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("positional", POSITIONALS)
def test_cached_chunks_and_steps_equal_the_full_forward(positional):
    model = tiny(positional)
    x = tokens(2, 9)
    full = model(x).logits  # (B, T, V)
    first = model(x[:, :4])
    second = model(x[:, 4:7], first.state)
    step = model.step(x[:, 7], second.state)
    last = model.step(x[:, 8], step.state)
    assert_close(torch.cat([first.logits, second.logits], dim=1), full[:, :7])
    assert_close(step.logits, full[:, 7])
    assert_close(last.logits, full[:, 8])
    assert last.state.caches[0].length == 9
    assert last.state.next_position.tolist() == [9, 9]


@pytest.mark.parametrize("positional", POSITIONALS)
def test_logits_to_keep_are_the_last_logits_of_all_positions_and_the_state_holds_them_all(positional):
    model = tiny(positional)
    x = tokens(3, 9)
    full = model(x)
    for n in (1, 5, 9):
        kept = model(x, logits_to_keep=n)
        assert kept.logits.shape == (3, n, V)
        assert_close(kept.logits, full.logits[:, 9 - n :], rtol=1e-12, atol=1e-12)
        assert kept.state.next_position.tolist() == [9, 9, 9]
        assert_close(kept.state.caches[-1].keys, full.state.caches[-1].keys, rtol=1e-12, atol=1e-12)
    first = model(x[:, :4])  # continuing a state
    assert_close(model(x[:, 4:], first.state, logits_to_keep=2).logits, full.logits[:, 7:], rtol=1e-12, atol=1e-12)


def test_logits_to_keep_out_of_range_is_refused_in_one_line():
    model = tiny()
    for n in (0, 5, 1.5):
        with pytest.raises(
            ValueError, match=rf"^logits_to_keep \({n!r}\) must be None or an integer in \[1, T\] = \[1, 4\]$"
        ):
            model(tokens(1, 4), logits_to_keep=n)


@pytest.mark.parametrize("positional", POSITIONALS)
def test_left_padded_prefill_and_steps_equal_each_prompt_alone(positional):
    model = tiny(positional)
    prompts = [tokens(1, n, seed=n)[0] for n in (5, 2, 4)]
    T = max(len(p) for p in prompts)
    input_ids = torch.zeros(len(prompts), T, dtype=torch.long)
    keep_mask = torch.zeros(len(prompts), T, dtype=torch.bool)
    for b, p in enumerate(prompts):
        input_ids[b, T - len(p) :] = p
        keep_mask[b, T - len(p) :] = True
    batched = model.prefill(input_ids, keep_mask)
    following = tokens(3, 2, seed=7)
    steps = [model.step(following[:, 0], batched.state)]
    steps.append(model.step(following[:, 1], steps[0].state))
    for b, p in enumerate(prompts):
        alone = model(torch.cat([p, following[b]])[None]).logits[0]  # (len + 2, V)
        assert_close(batched.logits[b], alone[len(p) - 1])
        assert_close(steps[0].logits[b], alone[len(p)])
        assert_close(steps[1].logits[b], alone[len(p) + 1])
    assert batched.state.next_position.tolist() == [5, 2, 4]


@pytest.mark.parametrize("positional", POSITIONALS)
def test_steps_without_gradients_take_the_fast_path_and_equal_the_module_path(positional):
    model = tiny(positional)
    input_ids, keep_mask = tokens(3, 4), torch.ones(3, 4, dtype=torch.bool)
    keep_mask[1, :3] = False  # left pads in row 1 keep a keep_mask in the state
    following = tokens(3, 3, seed=5)
    runs = []
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            out = model.prefill(input_ids, keep_mask)
            assert (out.state.incremental_step is None) == grad
            logits = [out.logits]
            for t in range(3):
                out = model.step(following[:, t], out.state)
                assert (out.state.incremental_step is None) == grad
                logits.append(out.logits)
        runs.append((torch.stack(logits, 1), out.state))
    (module_logits, module_state), (fast_logits, fast_state) = runs
    assert_close(fast_logits, module_logits.detach())
    assert torch.equal(fast_state.next_position, module_state.next_position)
    assert torch.equal(fast_state.keep_mask, module_state.keep_mask)
    for fast, module in zip(fast_state.caches, module_state.caches, strict=True):
        assert_close(fast.keys, module.keys.detach())
    with torch.no_grad():
        reordered = model.reorder_state(fast_state, torch.tensor([2, 2, 0]))
        assert reordered.incremental_step is fast_state.incremental_step  # gathered once per decoding run
    dropping = tiny(positional, dropout=0.5).train()
    with torch.no_grad():  # dropout in effect: the modules, which drop
        assert dropping.step(following[:, 0], dropping.prefill(input_ids).state).state.incremental_step is None
        assert dropping.step(following[:, 0], fast_state).state.incremental_step is None
    with torch.no_grad():  # a state without one (from forward) still steps by the fast path
        state = model(input_ids).state
        assert state.incremental_step is None
        assert model.step(following[:, 0], state).state.incremental_step is not None


@pytest.mark.parametrize("positional", POSITIONALS)
@pytest.mark.parametrize("tie_embeddings", [True, False])
def test_one_row_steps_from_transposed_weights_equal_the_full_forward(positional, tie_embeddings):
    """At one row the widening products (q, k, v stacked, the first FFN layer, the head: V = 40 > D = 16) run from
    transposed copies; each step equals the module path in float64 (and the full forward), also after weights
    change in place mid-run."""
    torch.manual_seed(0)
    config = GPTConfig(
        vocab_size=40,
        context_length=12,
        d_model=16,
        num_heads=2,
        num_layers=2,
        positional=positional,
        tie_embeddings=tie_embeddings,
    )
    model = GPT(config).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)  # larger than GPT-2's init, so every weight moves the logits visibly
    sequence = torch.randint(0, 40, (1, 8), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = model.prefill(sequence[:, :4])
        derived = out.state.incremental_step.derived
        for t in range(4, 8):
            if t == 6:
                model.decoder.layers[0].self_attn.k_proj.weight.mul_(-2.0)
                model.decoder.layers[1].feed_forward.linear1.bias.add_(0.5)
                head = model.wte if tie_embeddings else model.lm_head
                head.weight.mul_(1.5)
            module_path = model(sequence[:, t : t + 1], out.state).logits[:, -1]  # the same caches, by the modules
            out = model.step(sequence[:, t], out.state)
            assert_close(out.logits, module_path, rtol=1e-12, atol=1e-12)
            if t < 6:  # before the change, the caches hold what the whole sequence gives
                assert_close(out.logits, model(sequence[:, : t + 1]).logits[:, -1], rtol=1e-12, atol=1e-12)
    assert len(derived) == 2 * 2 + 1  # per layer q, k, v stacked with their bias, linear1; the head


def test_the_fast_path_uses_the_models_layer_norm_eps():
    # eps = 0.5 is large against the unit-scale activations, so a fast path that normalised with 1e-5 would differ
    model = tiny(layer_norm_eps=0.5)
    input_ids, following = tokens(2, 4), tokens(2, 2, seed=3)
    runs = []
    for grad in (True, False):  # with gradients: the module path; without: the fast path
        with torch.set_grad_enabled(grad):
            out = model.prefill(input_ids)
            logits = [model.step(following[:, 0], out.state)]
            logits.append(model.step(following[:, 1], logits[0].state))
            assert (logits[1].state.incremental_step is None) == grad
        runs.append(torch.stack([step.logits.detach() for step in logits], dim=1))
    assert_close(runs[1], runs[0])


@pytest.mark.parametrize("positional", POSITIONALS)
def test_logits_at_t_do_not_depend_on_later_tokens(positional):
    model = tiny(positional)
    x = tokens(1, 8)
    changed = x.clone()
    changed[0, 5:] = (changed[0, 5:] + 1) % V
    assert_close(model(changed).logits[:, :5], model(x).logits[:, :5])
    assert not torch.allclose(model(changed).logits[:, 5:], model(x).logits[:, 5:])


def test_reorder_state_continues_the_chosen_rows():
    model = tiny()
    x = tokens(3, 5)
    state = model(x).state
    index = torch.tensor([2, 0, 2])
    reordered = model.reorder_state(state, index)
    assert isinstance(reordered, GPTState)
    nxt = tokens(3, 1, seed=3)[:, 0]
    expected = model.step(nxt, model(x[index]).state).logits
    assert_close(model.step(nxt, reordered).logits, expected)


@pytest.mark.parametrize("positional", POSITIONALS)
def test_reorder_state_in_place_continues_as_the_copying_reorder(positional):
    """Beam search's reorder (in place, moving only the steps where rows differ) gives the logits of the copying
    one over a chain of steps with a cycle, repeated rows and rows that stay, from left-padded prompts."""
    model = tiny(positional)
    x, keep = tokens(3, 4), torch.tensor([[True] * 4, [False, True, True, True], [True] * 4])
    indices = [[0, 0, 1], [1, 2, 0], [0, 1, 2], [2, 2, 0], [1, 0, 2]]
    with torch.no_grad():
        copied = in_place = model.prefill(x, keep).state
        for t, index in enumerate(indices):
            nxt = tokens(3, 1, seed=10 + t)[:, 0]
            copied = model.reorder_state(model.step(nxt, copied).state, torch.tensor(index))
            stepped = model.step(nxt, in_place).state
            in_place = model.reorder_state(stepped, torch.tensor(index), in_place=True)
            assert all(c.buffer is s.buffer for c, s in zip(in_place.caches, stepped.caches, strict=True))
            assert torch.equal(in_place.keep_mask, copied.keep_mask)
            assert_close(model.step(nxt, in_place).logits, model.step(nxt, copied).logits, rtol=0, atol=0)


@pytest.mark.parametrize("positional", POSITIONALS)
def test_beams_attend_their_shared_steps_once_and_match_the_uncached_forward(positional, monkeypatch):
    """Beams from one prompt share its steps and those of their common ancestors; a step reads those once for all
    rows (``decoder_only._attend_shared``) and its logits equal the full forward of each row's whole sequence."""
    monkeypatch.setattr(decoder_only, "SHARED_ATTENTION_STEPS", 1)
    calls = []
    attend = decoder_only._attend_shared
    monkeypatch.setattr(decoder_only, "_attend_shared", lambda *a: calls.append(a[-1]) or attend(*a))
    model = tiny(positional)
    rows = tokens(1, 3).tolist() * 4
    indices = [[0, 0, 1, 1], [1, 0, 3, 2], [2, 2, 2, 3], [0, 1, 1, 3], [3, 3, 0, 0], [0, 0, 0, 0]]
    with torch.no_grad():
        state = model.reorder_state(model.prefill(tokens(1, 3)).state, torch.zeros(4, dtype=torch.long))
        for t, index in enumerate(indices):
            nxt = tokens(4, 1, seed=20 + t)[:, 0]
            out = model.step(nxt, state)
            rows = [[*row, token] for row, token in zip(rows, nxt.tolist(), strict=True)]
            assert_close(out.logits, model(torch.tensor(rows)).logits[:, -1])
            state = model.reorder_state(out.state, torch.tensor(index), in_place=True)
            rows = [rows[i] for i in index]
    assert len(calls) == 2 * len(indices) and max(calls) > 3  # both layers, every step; ancestors' steps shared


def test_input_past_the_learned_context_length_is_refused_in_one_line():
    model = tiny()
    message = "a row reaches 13 tokens, past the context length (12) of this GPT"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        model(tokens(1, 13))
    state = model(tokens(1, 12)).state
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        model.step(tokens(1, 1)[:, 0], state)
    assert model.context_length == 12
    assert tiny("rotary").context_length is None
    assert tiny("sinusoidal").context_length is None


def test_sinusoidal_input_is_the_scaled_embedding_plus_the_closed_form_code_past_the_context_length():
    model = tiny("sinusoidal")  # context_length 12, D = 16
    x = tokens(2, 30)  # 2.5 context lengths
    seen = []
    model.decoder.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    model(x)
    position = torch.arange(30, dtype=torch.float64)[:, None]  # PE(p, 2i) = sin(p / 10000^(2i/D)), cos at 2i+1
    angle = position / 10000 ** (torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    pe = torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(30, 16)
    assert_close(seen[0], 4.0 * model.wte.weight[x] + pe)  # sqrt(16) = 4
    assert not any("sinusoidal" in name for name in model.state_dict())  # fixed, nothing to save or train


def test_tied_output_projection_is_the_token_embedding():
    model = tiny()
    assert model.lm_head is None
    h = torch.randn(2, 16, dtype=torch.float64)
    assert_close(model._project(h), h @ model.wte.weight.T)
    untied = tiny(tie_embeddings=False)
    assert untied.lm_head.weight.shape == (V, 16)
    assert not any(p is untied.wte.weight for p in untied.lm_head.parameters())


@pytest.mark.parametrize("positional", ["sinusoidal", "rotary"])
def test_save_pretrained_round_trip_gives_the_same_logits(tmp_path, positional):
    model = tiny(positional, tie_embeddings=False).float()
    model.save_pretrained(tmp_path)
    loaded = load_pretrained(tmp_path)
    assert isinstance(loaded, GPT)
    assert loaded.config == model.config
    x = tokens(2, 6)
    assert_close(loaded(x).logits, model(x).logits, rtol=0, atol=0)


def test_config_refuses_bad_values_with_the_value_in_the_message():
    with pytest.raises(
        ConfigError, match=r"^positional \('absolute'\) must be one of 'learned', 'sinusoidal', 'rotary'$"
    ):
        GPTConfig(positional="absolute")
    with pytest.raises(ValueError, match=r"^d_model \(10\) must be divisible by num_heads \(4\)$"):
        GPTConfig(d_model=10, num_heads=4)
    with pytest.raises(ValueError, match=r"^sinusoidal positions need an even d_model, got 9$"):
        GPTConfig(d_model=9, num_heads=3, positional="sinusoidal")
    with pytest.raises(ConfigError, match=r"^dropout \(1\.5\) must be in \[0, 1\)$"):
        GPTConfig(dropout=1.5)


def test_builders_fill_in_the_shape():
    model = gpt_char_small()
    c = model.config
    assert (c.num_layers, c.num_heads, c.d_model, c.context_length, c.vocab_size) == (4, 4, 128, 64, 65)
    assert c.inner_size == 512
    custom = gpt(vocab_size=5, context_length=4, d_model=8, num_heads=2, num_layers=1, d_ff=6)
    assert custom.decoder.layers[0].feed_forward.linear1.weight.shape == (6, 8)


def test_dropout_is_active_in_training_and_off_in_eval():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=V, context_length=8, d_model=16, num_heads=2, num_layers=1, dropout=0.5))
    x = tokens(2, 6)
    model.train()
    assert not torch.equal(model(x).logits, model(x).logits)
    model.eval()
    assert torch.equal(model(x).logits, model(x).logits)


def test_generate_refuses_a_token_id_outside_the_vocabulary_in_one_line():
    with pytest.raises(ConfigError, match=rf"^input_ids holds token id {V}, outside the vocabulary \[0, {V}\)$"):
        generate(tiny(), torch.tensor([[1, V]]), max_new_tokens=2)


@pytest.mark.parametrize("positional", POSITIONALS)
def test_forward_refuses_a_token_id_outside_the_vocabulary_in_one_line(positional):
    """The embedding lookup would raise a bare IndexError (or, for a negative id, read no row at all)."""
    model = tiny(positional)
    with pytest.raises(ConfigError, match=rf"^input_ids holds token id {V}, outside the vocabulary \[0, {V}\)$"):
        model(torch.tensor([[1, V]]))
    with pytest.raises(ConfigError, match=r"^input_ids holds token id -1; token ids are >= 0$"):
        model(torch.tensor([[-1, 2]]), model(tokens(1, 2)).state)
    with pytest.raises(TypeError, match=r"^input_ids must be an integer tensor of token ids, got torch.float32$"):
        model(torch.zeros(1, 2))
