"""Decoder-only (GPT) layers and stack: causal, cached == full, and equal to causal encoder layers / torch.nn."""

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from seqlab.nn.decoder_only import TransformerDecoderOnly, TransformerDecoderOnlyLayer
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
