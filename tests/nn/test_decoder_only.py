"""Decoder-only (GPT) layers and stack: causal, cached == full, and equal to causal encoder layers / torch.nn; the
incremental fast path equal to the module path, also over LoRA-wrapped (peft's and seqlab's), quantized and changed
modules."""

import copy

import peft
import pytest
import torch
from torch import nn
from torch.testing import assert_close

from seqlab.decoding import generate
from seqlab.models.language_model.gpt import GPT, gpt
from seqlab.nn.decoder_only import TransformerDecoderOnly, TransformerDecoderOnlyLayer
from seqlab.nn.lora import add_lora, lora_layers, merge_lora
from seqlab.nn.positional import RotaryEmbedding
from seqlab.nn.transformer import TransformerEncoder, TransformerEncoderLayer

B, T, D, N, D_FF, L = 3, 6, 8, 2, 16, 2
EXACT = {"rtol": 1e-12, "atol": 1e-12}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _randomize(module: nn.Module) -> nn.Module:
    """Random values for every parameter, so zero biases and unit norm gains cannot hide a missed copy."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.4)
    return module.double().eval()


def _stack(norm_first: bool, **options) -> TransformerDecoderOnly:
    layers = [TransformerDecoderOnlyLayer(D, N, D_FF, norm_first=norm_first, **options) for _ in range(L)]
    return _randomize(TransformerDecoderOnly(layers, final_norm=nn.LayerNorm(D) if norm_first else None))


def _x(steps: int = T) -> torch.Tensor:
    return torch.randn(B, steps, D, dtype=torch.float64)


@pytest.mark.parametrize("norm_first", [False, True])
def test_changing_a_later_token_never_changes_earlier_outputs(norm_first):
    stack = _stack(norm_first)
    x = _x()
    base = stack(x).output
    for t in range(T):
        changed = x.clone()
        changed[:, t] = torch.randn(B, D, dtype=torch.float64)
        out = stack(changed).output
        assert_close(out[:, :t], base[:, :t], **EXACT)
        assert (out[:, t] - base[:, t]).abs().max() > 1e-3


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("options", [{}, {"rotary": RotaryEmbedding(D // N)}, {"attention_kind": "local", "window": 2}])
def test_cached_incremental_equals_full_forward(norm_first, options):
    stack = _stack(norm_first, dropout=0.0, **options)
    x = _x()
    full = stack(x).output
    caches = stack.empty_caches(B, dtype=torch.float64)
    outputs = []
    for start, stop in [(0, 3), (3, 4), (4, 5), (5, 6)]:  # a three-token prompt, then one token per call
        step = stack(x[:, start:stop], caches=caches)
        caches = step.caches
        outputs.append(step.output)
    assert_close(torch.cat(outputs, dim=1), full, **EXACT)
    assert [cache.length for cache in caches] == [T] * L


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("options", [{}, {"rotary": RotaryEmbedding(D // N)}, {"attention_kind": "local", "window": 2}])
@pytest.mark.parametrize("cached", [0, 2])
def test_outputs_to_keep_equal_the_last_outputs_of_all_positions_and_cache_them_all(norm_first, options, cached):
    stack = _stack(norm_first, dropout=0.0, **options)
    x = _x(cached + T)
    keep_mask = torch.ones(B, cached + T, dtype=torch.bool)
    keep_mask[1, :3] = False  # a left-padded row
    full = stack(x, keep_mask=keep_mask, caches=stack.empty_caches(B, dtype=torch.float64))
    caches = stack.empty_caches(B, dtype=torch.float64)
    if cached:
        caches = stack(x[:, :cached], keep_mask=keep_mask[:, :cached], caches=caches).caches
    for n in (1, 4, T):
        kept = stack(x[:, cached:], keep_mask=keep_mask, caches=caches, outputs_to_keep=n)
        assert_close(kept.output, full.output[:, cached + T - n :], **EXACT)
        for ours, reference in zip(kept.caches, full.caches, strict=True):
            assert_close(ours.keys, reference.keys, **EXACT)
            assert_close(ours.values, reference.values, **EXACT)
    assert stack(x, outputs_to_keep=2).caches is None


def test_outputs_to_keep_runs_the_last_full_attention_layer_on_the_kept_positions_only():
    stack = _stack(True, dropout=0.0)
    rows = []
    stack.layers[-1].feed_forward.register_forward_hook(lambda module, inputs, output: rows.append(inputs[0].shape))
    stack(_x(), outputs_to_keep=2)
    assert rows == [(B, 2, D)]


@pytest.mark.parametrize("norm_first", [False, True])
def test_equals_an_encoder_stack_run_causal_with_copied_weights(norm_first):
    encoder_layers = [TransformerEncoderLayer(D, N, D_FF, norm_first=norm_first) for _ in range(L)]
    encoder = _randomize(TransformerEncoder(encoder_layers, final_norm=nn.LayerNorm(D) if norm_first else None))
    stack = TransformerDecoderOnly(
        [TransformerDecoderOnlyLayer(D, N, D_FF, norm_first=norm_first) for _ in range(L)],
        final_norm=nn.LayerNorm(D) if norm_first else None,
    ).double()
    stack.load_state_dict(encoder.state_dict())  # strict: the same parameter names
    stack.eval()
    x = _x()
    keep = torch.arange(T)[None, :] < torch.tensor([6, 4, 2])[:, None]  # (B, T)
    assert_close(stack(x, keep_mask=keep).output, encoder(x, keep_mask=keep, causal=True), **EXACT)


@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_equals_torch_encoder_layer_with_a_causal_mask(norm_first):
    reference = nn.TransformerEncoderLayer(D, N, D_FF, norm_first=norm_first, batch_first=True)
    reference = _randomize(reference)
    layer = TransformerDecoderOnlyLayer(D, N, D_FF, norm_first=norm_first).double()
    layer.load_state_dict(TransformerEncoderLayer.from_torch(reference).state_dict())
    layer.eval()
    x = _x()
    mask = nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)
    assert_close(layer(x).output, reference(x, src_mask=mask, is_causal=True), **EXACT)


def test_stack_errors():
    with pytest.raises(ValueError, match=r"^a stack needs at least one TransformerDecoderOnlyLayer, got none$"):
        TransformerDecoderOnly([])
    with pytest.raises(
        ValueError, match=r"every layer must be a TransformerDecoderOnlyLayer, got TransformerEncoderLayer"
    ):
        TransformerDecoderOnly([TransformerEncoderLayer(D, N, D_FF)])
    stack = _stack(True)
    with pytest.raises(ValueError, match=r"^got 1 caches for a decoder of 2 layers$"):
        stack(_x(1), caches=stack.empty_caches(B, dtype=torch.float64)[:1])
    for n in (0, T + 1, 2.0, True):
        with pytest.raises(
            ValueError, match=rf"^outputs_to_keep \({n!r}\) must be None or an integer in \[1, T\] = \[1, 6\]$"
        ):
            stack(_x(), outputs_to_keep=n)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("options", [{}, {"rotary": RotaryEmbedding(D // N)}])
@pytest.mark.parametrize("padded", [False, True])
def test_incremental_step_equals_a_one_position_forward(norm_first, options, padded):
    """The fast path against the modules (the reference), after a prompt, with and without left pads."""
    stack = _stack(norm_first, dropout=0.0, **options)
    x = _x()
    keep_mask = torch.ones(B, T, dtype=torch.bool)
    if padded:
        keep_mask[0, :2] = False  # row 0 starts with two pads
    prompt = stack(x[:, :4], keep_mask=keep_mask[:, :4], caches=stack.empty_caches(B, dtype=torch.float64))
    fast_step = stack.incremental_step()
    with torch.no_grad():
        fast, reference = prompt.caches, prompt.caches
        for t in (4, 5):
            mask = keep_mask[:, : t + 1] if padded else None
            got = fast_step(x[:, t : t + 1], caches=fast, keep_mask=mask)
            expected = stack(x[:, t : t + 1], keep_mask=mask, caches=reference)
            assert_close(got.output, expected.output, rtol=1e-10, atol=1e-10)
            for mine, theirs in zip(got.caches, expected.caches, strict=True):
                assert_close(mine.keys, theirs.keys, rtol=1e-10, atol=1e-10)
                assert_close(mine.values, theirs.values, rtol=1e-10, atol=1e-10)
            fast, reference = got.caches, expected.caches


def test_incremental_step_is_none_where_it_would_differ_from_forward():
    assert _stack(True, dropout=0.0, attention_kind="local", window=2).incremental_step() is None
    dropping = _stack(True, dropout=0.1)
    assert dropping.incremental_step() is not None  # eval: dropout is the identity
    assert dropping.train().incremental_step() is None
    assert _stack(True, dropout=0.0).train().incremental_step() is not None
    with pytest.raises(ValueError, match=r"^got 1 caches for a decoder of 2 layers$"):
        _stack(True).incremental_step()(_x(1), caches=_stack(True).empty_caches(B)[:1])


# IncrementalStep inside a GPT, driven by ``seqlab.decoding.generate``, against the module path (GPT.forward) for
# modules it does not hold plainly: LoRA adapters (peft), dynamic int8 quantization, and weights changed mid-run.


class _Recording:
    """A LanguageModelStepModel that forwards to a GPT and keeps every logits row it returns (prefill, then each
    step) and each step's ``state.incremental_step`` (None when the modules ran)."""

    def __init__(self, model: GPT) -> None:
        self.model, self.logits, self.fast_steps = model, [], []
        self.context_length = model.context_length

    def prefill(self, input_ids, keep_mask=None):
        out = self.model.prefill(input_ids, keep_mask)
        self.logits.append(out.logits.clone())
        return out

    def step(self, tokens, state):
        out = self.model.step(tokens, state)
        self.logits.append(out.logits.clone())
        self.fast_steps.append(out.state.incremental_step)
        return out

    def reorder_state(self, state, index):
        return self.model.reorder_state(state, index)


def _gpt() -> GPT:
    torch.manual_seed(0)
    model = gpt(vocab_size=11, context_length=16, d_model=16, num_heads=2, num_layers=2).eval()
    with torch.no_grad():  # larger than GPT-2's init, so every weight moves the logits visibly
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model


PROMPT = torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])
NEW_TOKENS = 6
# One row takes transposed copies of the widening weights, two rows q, k, v stacked (direct_calls.stacked_linear).
PROMPTS = pytest.mark.parametrize("prompt", [PROMPT[:1], PROMPT], ids=["one row", "two rows"])


def _fast_generate(
    model: GPT, prompt: torch.Tensor = PROMPT, **options
) -> tuple[torch.Tensor, torch.Tensor, _Recording]:
    """Greedy ``generate``: its tokens (B, T + NEW_TOKENS), the logits it chose from (B, NEW_TOKENS, V), and the
    recording, after checking that every step ran the fast path."""
    recording = _Recording(model)
    out = generate(recording, prompt, max_new_tokens=NEW_TOKENS, **options)
    assert len(recording.fast_steps) == NEW_TOKENS - 1
    assert all(step is not None for step in recording.fast_steps)
    return out.tokens, torch.stack(recording.logits, dim=1), recording


@torch.no_grad()
def _module_path_greedy(model: GPT, change=None, prompt=PROMPT, *, after=0) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding by ``GPT.forward`` (every module called) with the KV cache, one token per call:
    tokens (B, T + NEW_TOKENS) and logits (B, NEW_TOKENS, V); ``change()`` runs after the prompt and ``after``
    steps."""
    out, tokens, logits = model(prompt), prompt, []
    for i in range(NEW_TOKENS):
        if change is not None and i == after:
            change()
        logits.append(out.logits[:, -1])
        following = logits[-1].argmax(dim=-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, following], dim=1)
        if i + 1 < NEW_TOKENS:
            out = model(following, out.state)
    return tokens, torch.stack(logits, dim=1)


@PROMPTS
def test_generate_with_lora_adapters_uses_them_on_the_fast_path(prompt):
    model = _gpt()
    _, base_logits, _ = _fast_generate(copy.deepcopy(model), prompt)
    targets = ["q_proj", "v_proj", "out_proj", "linear1"]
    model = peft.inject_adapter_in_model(peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets), model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)  # B = 0 at init: the adapters would change nothing
    tokens, logits, recording = _fast_generate(model, prompt)
    T = prompt.shape[1]
    assert_close(logits, model(tokens[:, :-1]).logits[:, T - 1 :])  # the whole sequence through the modules
    expected_tokens, expected_logits = _module_path_greedy(model, prompt=prompt)
    assert torch.equal(tokens, expected_tokens)
    assert_close(logits, expected_logits)
    assert not torch.allclose(logits, base_logits, atol=1e-2)  # the adapters matter
    wrapped = [f"layers.{i}.{name}" for i in range(2) for name in ("self_attn.q_proj", "self_attn.v_proj")]
    wrapped += [f"layers.{i}.{name}" for i in range(2) for name in ("self_attn.out_proj", "feed_forward.linear1")]
    assert sorted(recording.fast_steps[-1].module_calls) == sorted(wrapped)
    assert _gpt().decoder.incremental_step().module_calls == []


@PROMPTS
def test_generate_with_seqlab_lora_layers_equals_the_module_path_unmerged_and_merged(prompt):
    model = _gpt()
    names = [f"decoder.layers.{i}.{n}" for i in range(2) for n in ("self_attn.q_proj", "feed_forward.linear2")]
    add_lora(model, names, rank=2, alpha=4.0)
    with torch.no_grad():
        for layer in lora_layers(model).values():
            layer.lora_B.normal_(0.0, 0.5)  # B = 0 at init: the adapters would change nothing
    tokens, logits, recording = _fast_generate(model, prompt)
    expected_tokens, expected_logits = _module_path_greedy(model, prompt=prompt)
    assert torch.equal(tokens, expected_tokens)
    assert_close(logits, expected_logits)
    assert sorted(recording.fast_steps[-1].module_calls) == sorted(n.removeprefix("decoder.") for n in names)
    merge_lora(model)
    merged_tokens, merged_logits, recording = _fast_generate(model, prompt)
    assert recording.fast_steps[-1].module_calls == []  # merged: plain Linear layers, inlined again
    assert torch.equal(merged_tokens, tokens)
    assert_close(merged_logits, logits, rtol=0, atol=1e-5)


@pytest.mark.filterwarnings("ignore:torch.ao.quantization is deprecated", "ignore:torch.quantize_per_tensor")
@PROMPTS
def test_generate_with_a_dynamically_quantized_gpt_equals_its_module_path(prompt):
    model = torch.ao.quantization.quantize_dynamic(_gpt(), {nn.Linear}, dtype=torch.qint8)
    tokens, logits, recording = _fast_generate(model, prompt)
    expected_tokens, expected_logits = _module_path_greedy(model, prompt=prompt)
    assert torch.equal(tokens, expected_tokens)
    assert_close(logits, expected_logits)
    assert len(recording.fast_steps[-1].module_calls) == 2 * 6  # every Linear of both layers is quantized


@PROMPTS
@pytest.mark.parametrize("after", [0, 2])
def test_generate_uses_weights_changed_in_place_after_the_prefill(prompt, after):
    """Weights changed after the prompt (after = 0) or after two steps, which at one row have built transposed
    copies of them: the next step reads the new weights."""

    def change(model: GPT) -> None:
        with torch.no_grad():  # W^Q (in the stacked q, k, v copy at one row) and an FFN weight
            model.decoder.layers[0].self_attn.q_proj.weight.mul_(-2.0)
            model.decoder.layers[1].feed_forward.linear1.weight.add_(0.5)

    model, chosen = _gpt(), []

    def change_once(_tokens):  # a streamer runs after each chosen token, before the step that feeds it
        chosen.append(True)
        if len(chosen) == after + 1:
            change(model)

    tokens, logits, recording = _fast_generate(model, prompt, streamer=change_once)
    one_row = prompt.shape[0] == 1  # then q, k, v stacked and linear1 ran transposed, per layer; else q, k, v stacked
    assert len(recording.fast_steps[-1].derived) == (2 * 2 if one_row else 2)
    reference = _gpt()
    expected_tokens, expected_logits = _module_path_greedy(reference, lambda: change(reference), prompt, after=after)
    assert torch.equal(tokens, expected_tokens)
    assert_close(logits, expected_logits)
    _, unchanged_logits = _module_path_greedy(_gpt(), prompt=prompt)
    changed = slice(after + 1, None)
    assert not torch.allclose(logits[:, changed], unchanged_logits[:, changed], atol=1e-3)  # the change matters


def test_incremental_step_calls_hooked_modules_and_names_them():
    """A forward hook changes what a module computes: the step calls that module (or, for a global hook, every
    layer) and still equals the modules' forward."""
    stack = _stack(True, dropout=0.0)
    x = _x()
    prompt = stack(x[:, :4], caches=stack.empty_caches(B, dtype=torch.float64))
    fast_step = stack.incremental_step()

    def double(module, inputs, output):
        return 2.0 * output

    def check(expected_calls):
        with torch.no_grad():
            got = fast_step(x[:, 4:5], caches=prompt.caches)
            expected = stack(x[:, 4:5], caches=prompt.caches)
        assert_close(got.output, expected.output, **EXACT)
        assert fast_step.module_calls == expected_calls

    check([])
    handle = stack.layers[1].feed_forward.linear2.register_forward_hook(double)
    check(["layers.1.feed_forward.linear2"])
    handle.remove()
    handle = nn.modules.module.register_module_forward_hook(lambda module, inputs, output: None)
    try:
        check(["layers.0", "layers.1", "final_norm"])
    finally:
        handle.remove()
