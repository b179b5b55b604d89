"""Transformer layers and stacks against torch.nn (float64, eval mode) and against their own invariants."""

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from seqlab.nn.decoder_only import TransformerDecoderOnlyLayer
from seqlab.nn.kv_cache import KVCache
from seqlab.nn.positional import RotaryEmbedding
from seqlab.nn.transformer import (
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from seqlab.nn.transformer_sublayers import FeedForward

B, S, T, D, N, D_FF = 3, 5, 4, 8, 2, 16
EXACT = {"rtol": 1e-12, "atol": 1e-12}
LAYER_OPTIONS = [(norm_first, act) for norm_first in (False, True) for act in ("relu", "gelu")]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _randomize(module: nn.Module) -> nn.Module:
    """Random values for every parameter, so zero biases and unit norm gains cannot hide a missed copy."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.4)
    return module.double()


def _keep_mask(lengths: list[int], size: int) -> torch.Tensor:
    return torch.arange(size)[None, :] < torch.tensor(lengths)[:, None]  # (B, size)


def _torch_encoder_layer(norm_first: bool, activation: str, dropout: float = 0.1) -> nn.TransformerEncoderLayer:
    layer = nn.TransformerEncoderLayer(
        D, N, D_FF, dropout=dropout, activation=activation, norm_first=norm_first, batch_first=True
    )
    return _randomize(layer).eval()


def _torch_decoder_layer(norm_first: bool, activation: str, dropout: float = 0.1) -> nn.TransformerDecoderLayer:
    layer = nn.TransformerDecoderLayer(
        D, N, D_FF, dropout=dropout, activation=activation, norm_first=norm_first, batch_first=True
    )
    return _randomize(layer).eval()


def _decoder(norm_first: bool, *, num_layers: int = 2, dropout: float = 0.0, **options) -> TransformerDecoder:
    layers = [
        TransformerDecoderLayer(D, N, D_FF, dropout=dropout, norm_first=norm_first, **options)
        for _ in range(num_layers)
    ]
    decoder = TransformerDecoder(layers, final_norm=nn.LayerNorm(D) if norm_first else None)
    return _randomize(decoder).eval()


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feed_forward_is_w2_act_w1x(activation):
    ff = _randomize(FeedForward(D, D_FF, activation=activation))
    x = torch.randn(B, T, D, dtype=torch.float64)
    inner = x @ ff.linear1.weight.T + ff.linear1.bias
    inner = inner.clamp(min=0) if activation == "relu" else 0.5 * inner * (1 + torch.erf(inner / 2**0.5))
    assert_close(ff(x), inner @ ff.linear2.weight.T + ff.linear2.bias, **EXACT)


def test_feed_forward_rejects_unknown_activation():
    with pytest.raises(ValueError, match=r"activation must be one of 'relu', 'gelu', 'gelu_tanh', got 'tanh'"):
        FeedForward(D, D_FF, activation="tanh")


@pytest.mark.parametrize(("norm_first", "activation"), LAYER_OPTIONS)
def test_encoder_layer_matches_torch(norm_first, activation):
    reference = _torch_encoder_layer(norm_first, activation)
    layer = TransformerEncoderLayer.from_torch(reference).eval()
    assert (layer.norm_first, layer.feed_forward.activation) == (norm_first, activation)
    x = torch.randn(B, S, D, dtype=torch.float64)
    keep = _keep_mask([5, 3, 1], S)
    # torch's key_padding_mask is True = ignore.
    expected = reference(x, src_key_padding_mask=~keep)
    assert_close(layer(x, keep_mask=keep).output, expected, **EXACT)
    assert_close(layer(x).output, reference(x), **EXACT)


def test_encoder_layer_causal_matches_torch_causal_mask():
    reference = _torch_encoder_layer(True, "relu")
    layer = TransformerEncoderLayer.from_torch(reference).eval()
    x = torch.randn(B, S, D, dtype=torch.float64)
    mask = nn.Transformer.generate_square_subsequent_mask(S, dtype=torch.float64)
    assert_close(layer(x, causal=True).output, reference(x, src_mask=mask, is_causal=True), **EXACT)


@pytest.mark.parametrize(("norm_first", "activation"), LAYER_OPTIONS)
def test_decoder_layer_matches_torch(norm_first, activation):
    reference = _torch_decoder_layer(norm_first, activation)
    layer = TransformerDecoderLayer.from_torch(reference).eval()
    assert (layer.norm_first, layer.feed_forward.activation) == (norm_first, activation)
    x = torch.randn(B, T, D, dtype=torch.float64)
    memory = torch.randn(B, S, D, dtype=torch.float64)
    memory_keep = _keep_mask([5, 2, 4], S)
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)
    expected = reference(x, memory, tgt_mask=tgt_mask, tgt_is_causal=True, memory_key_padding_mask=~memory_keep)
    out = layer(x, memory, memory_keep_mask=memory_keep)
    assert_close(out.output, expected, **EXACT)
    assert out.cache is None and out.cross_weights is None


def test_from_torch_copies_eps_dropout_and_missing_biases():
    reference = nn.TransformerEncoderLayer(D, N, D_FF, dropout=0.3, layer_norm_eps=1e-3, bias=False, batch_first=True)
    reference = _randomize(reference).eval()
    layer = TransformerEncoderLayer.from_torch(reference).eval()
    assert (layer.norm1.eps, layer.dropout1.p, layer.feed_forward.dropout.p) == (1e-3, 0.3, 0.3)
    assert layer.feed_forward.linear1.bias is None and layer.norm2.bias is None
    x = torch.randn(B, S, D, dtype=torch.float64)
    assert_close(layer(x).output, reference(x), **EXACT)


def test_from_torch_rejects_other_modules_and_activations():
    with pytest.raises(ValueError, match=r"expected torch.nn.TransformerEncoderLayer, got TransformerDecoderLayer"):
        TransformerEncoderLayer.from_torch(nn.TransformerDecoderLayer(D, N, D_FF, batch_first=True))
    with pytest.raises(ValueError, match=r"expected torch.nn.TransformerDecoderLayer, got TransformerEncoderLayer"):
        TransformerDecoderLayer.from_torch(nn.TransformerEncoderLayer(D, N, D_FF, batch_first=True))
    with pytest.raises(ValueError, match=r"TransformerEncoderLayer.activation must be relu or gelu"):
        TransformerEncoderLayer.from_torch(nn.TransformerEncoderLayer(D, N, D_FF, activation=torch.tanh))


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_stack_matches_torch(norm_first):
    torch_layer = nn.TransformerEncoderLayer(D, N, D_FF, norm_first=norm_first, batch_first=True)
    norm = nn.LayerNorm(D) if norm_first else None
    reference = _randomize(nn.TransformerEncoder(torch_layer, 2, norm=norm, enable_nested_tensor=False)).eval()
    encoder = TransformerEncoder.from_torch(reference).eval()
    assert len(encoder.layers) == 2 and (encoder.final_norm is None) == (not norm_first)
    x = torch.randn(B, S, D, dtype=torch.float64)
    keep = _keep_mask([4, 5, 2], S)
    assert_close(encoder(x, keep_mask=keep), reference(x, src_key_padding_mask=~keep), **EXACT)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_stack_matches_torch(norm_first):
    torch_layer = nn.TransformerDecoderLayer(D, N, D_FF, norm_first=norm_first, batch_first=True)
    norm = nn.LayerNorm(D) if norm_first else None
    reference = _randomize(nn.TransformerDecoder(torch_layer, 2, norm=norm)).eval()
    decoder = TransformerDecoder.from_torch(reference).eval()
    x = torch.randn(B, T, D, dtype=torch.float64)
    memory = torch.randn(B, S, D, dtype=torch.float64)
    memory_keep = _keep_mask([3, 5, 1], S)
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)
    expected = reference(x, memory, tgt_mask=tgt_mask, tgt_is_causal=True, memory_key_padding_mask=~memory_keep)
    out = decoder(x, memory, memory_keep_mask=memory_keep)
    assert_close(out.output, expected, **EXACT)
    assert out.caches is None and out.cross_weights is None
    weights = decoder(x, memory, memory_keep_mask=memory_keep, need_weights=True).cross_weights
    assert len(weights) == 2 and weights[1].shape == (B, N, T, S)
    assert_close(weights[1].sum(-1), torch.ones(B, N, T, dtype=torch.float64), **EXACT)
    assert (weights[1].masked_select(~memory_keep[:, None, None, :]) == 0).all()


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decoding_one_token_at_a_time_equals_full_forward(norm_first):
    decoder = _decoder(norm_first)
    x = torch.randn(B, T, D, dtype=torch.float64)
    memory = torch.randn(B, S, D, dtype=torch.float64)
    memory_keep = _keep_mask([5, 2, 3], S)
    full = decoder(x, memory, memory_keep_mask=memory_keep)

    memory_kv = decoder.project_memory(memory)  # once per source
    caches = decoder.empty_caches(B, dtype=torch.float64)
    steps = []
    for t in range(T):
        step = decoder(x[:, t : t + 1], memory_kv, memory_keep_mask=memory_keep, caches=caches)
        caches = step.caches
        steps.append(step.output)
    assert_close(torch.cat(steps, dim=1), full.output, **EXACT)
    assert [cache.length for cache in caches] == [T, T]


@pytest.mark.parametrize(("kind", "window"), [("local", 2), ("linear", None)])
def test_cached_decoding_with_efficient_self_attention_equals_full_forward(kind, window):
    decoder = _decoder(False, attention_kind=kind, window=window)
    x = torch.randn(B, T, D, dtype=torch.float64)
    memory = torch.randn(B, S, D, dtype=torch.float64)
    full = decoder(x, memory).output
    caches = decoder.empty_caches(B, dtype=torch.float64)
    steps = []
    for t in range(T):
        step = decoder(x[:, t : t + 1], memory, caches=caches)
        caches = step.caches
        steps.append(step.output)
    assert_close(torch.cat(steps, dim=1), full, **EXACT)


def test_cached_decoding_with_rotary_positions_equals_full_forward():
    decoder = _decoder(True, rotary=RotaryEmbedding(D // N))
    assert all(layer.self_attn.rotary is not None and layer.cross_attn.rotary is None for layer in decoder.layers)
    x = torch.randn(B, T, D, dtype=torch.float64)
    memory = torch.randn(B, S, D, dtype=torch.float64)
    full = decoder(x, memory).output
    caches = decoder.empty_caches(B, dtype=torch.float64)
    first = decoder(x[:, :2], memory, caches=caches)  # a two-token prompt, then one token per step
    second = decoder(x[:, 2:3], memory, caches=first.caches)
    third = decoder(x[:, 3:], memory, caches=second.caches)
    assert_close(torch.cat([first.output, second.output, third.output], dim=1), full, **EXACT)
    plain = _decoder(True)
    plain.load_state_dict(decoder.state_dict())
    assert (plain(x, memory).output[:, 1:] - full[:, 1:]).abs().max() > 1e-3  # the rotation did act


def test_decoder_layer_returns_cache_and_cross_weights():
    layer = _randomize(TransformerDecoderLayer(D, N, D_FF, dropout=0.0)).eval()
    x = torch.randn(B, T, D, dtype=torch.float64)
    memory = torch.randn(B, S, D, dtype=torch.float64)
    memory_keep = _keep_mask([5, 2, 3], S)
    cache = KVCache.empty(B, N, D // N, dtype=torch.float64)
    out = layer(x, memory, memory_keep_mask=memory_keep, cache=cache, need_weights=True)
    assert out.cache.length == T
    k, _ = layer.self_attn.project_key_value(x)  # post-LN: self-attention sees x itself
    assert_close(out.cache.keys, k, **EXACT)
    q = layer.cross_attn.q_proj(layer.norm1(x + layer.self_attn(x, causal=True).output))
    q = q.view(B, T, N, D // N).transpose(1, 2)  # (B, N, T, Dh)
    k_mem, _ = layer.project_memory(memory)
    scores = (q @ k_mem.transpose(-2, -1) / (D // N) ** 0.5).masked_fill(~memory_keep[:, None, None, :], -torch.inf)
    assert_close(out.cross_weights, scores.softmax(dim=-1), **EXACT)


def test_causal_changing_a_future_token_never_changes_earlier_outputs():
    decoder = _decoder(False)
    x = torch.randn(B, T, D, dtype=torch.float64)
    memory = torch.randn(B, S, D, dtype=torch.float64)
    base = decoder(x, memory).output
    for t in range(T):
        changed = x.clone()
        changed[:, t] = torch.randn(B, D, dtype=torch.float64)
        out = decoder(changed, memory).output
        assert_close(out[:, :t], base[:, :t], **EXACT)
        assert (out[:, t] - base[:, t]).abs().max() > 1e-3


def test_encoder_causal_changing_a_future_position_never_changes_earlier_outputs():
    encoder = TransformerEncoder([TransformerEncoderLayer(D, N, D_FF, dropout=0.0) for _ in range(2)])
    encoder = _randomize(encoder).eval()
    x = torch.randn(B, S, D, dtype=torch.float64)
    changed = x.clone()
    changed[:, 3] += 1.0
    assert_close(encoder(changed, causal=True)[:, :3], encoder(x, causal=True)[:, :3], **EXACT)
    assert (encoder(changed)[:, :3] - encoder(x)[:, :3]).abs().max() > 1e-3  # without causal, it would


@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_never_changes_real_positions(norm_first):
    layers = [TransformerEncoderLayer(D, N, D_FF, dropout=0.0, norm_first=norm_first) for _ in range(2)]
    encoder = _randomize(TransformerEncoder(layers, final_norm=nn.LayerNorm(D) if norm_first else None)).eval()
    decoder = _decoder(norm_first)
    lengths = [5, 2, 4]
    src = torch.randn(B, S, D, dtype=torch.float64)  # the padded positions hold random values, not zeros
    tgt = torch.randn(B, T, D, dtype=torch.float64)
    keep = _keep_mask(lengths, S)
    memory = encoder(src, keep_mask=keep)
    out = decoder(tgt, memory, memory_keep_mask=keep).output
    for b, length in enumerate(lengths):
        alone = encoder(src[b : b + 1, :length])
        assert_close(memory[b : b + 1, :length], alone, **EXACT)
        assert_close(out[b : b + 1], decoder(tgt[b : b + 1], alone).output, **EXACT)


LAYER_CLASSES = {
    "encoder": lambda dropout: TransformerEncoderLayer(D, N, D_FF, dropout=dropout),
    "decoder": lambda dropout: TransformerDecoderLayer(D, N, D_FF, dropout=dropout),
    "decoder_only": lambda dropout: TransformerDecoderOnlyLayer(D, N, D_FF, dropout=dropout),
}


@pytest.mark.parametrize("kind", LAYER_CLASSES)
def test_dropout_acts_in_training_only(kind):
    """Against a dropout-free twin with the same weights: different in training, equal in eval mode."""
    layer = _randomize(LAYER_CLASSES[kind](0.5)).train()
    twin = LAYER_CLASSES[kind](0.0).double().train()
    twin.load_state_dict(layer.state_dict())
    x = torch.randn(B, T, D, dtype=torch.float64)
    memory = (torch.randn(B, S, D, dtype=torch.float64),) if kind == "decoder" else ()
    assert (layer(x, *memory).output - twin(x, *memory).output).abs().max() > 1e-3
    layer.eval()
    assert_close(layer(x, *memory).output, twin(x, *memory).output, **EXACT)


def test_attention_kind_and_window_reach_self_attention_only():
    layer = TransformerDecoderLayer(D, N, D_FF, attention_kind="local", window=2)
    assert (layer.self_attn.attention_kind, layer.self_attn.window, layer.self_attn.dropout) == ("local", 2, 0.0)
    assert (layer.cross_attn.attention_kind, layer.cross_attn.dropout, layer.dropout1.p) == ("full", 0.1, 0.1)
    encoder_layer = TransformerEncoderLayer(D, N, D_FF, attention_kind="linear")
    assert encoder_layer.self_attn.attention_kind == "linear"


def test_local_attention_with_a_window_covering_every_key_equals_full_attention():
    full = _randomize(TransformerEncoderLayer(D, N, D_FF, dropout=0.0)).eval()
    local = TransformerEncoderLayer(D, N, D_FF, dropout=0.0, attention_kind="local", window=S).double().eval()
    local.load_state_dict(full.state_dict())
    narrow = TransformerEncoderLayer(D, N, D_FF, dropout=0.0, attention_kind="local", window=1).double().eval()
    narrow.load_state_dict(full.state_dict())
    x = torch.randn(B, S, D, dtype=torch.float64)
    assert_close(local(x).output, full(x).output, **EXACT)
    assert (narrow(x).output - full(x).output).abs().max() > 1e-3


def test_stack_errors():
    with pytest.raises(ValueError, match=r"a stack needs at least one TransformerEncoderLayer, got none"):
        TransformerEncoder([])
    with pytest.raises(ValueError, match=r"every layer must be a TransformerDecoderLayer, got TransformerEncoderLayer"):
        TransformerDecoder([TransformerEncoderLayer(D, N, D_FF)])
    decoder = _decoder(False)
    x = torch.randn(B, 1, D, dtype=torch.float64)
    memory = torch.randn(B, S, D, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"got 1 caches for a decoder of 2 layers"):
        decoder(x, memory, caches=decoder.empty_caches(B, dtype=torch.float64)[:1])
    with pytest.raises(ValueError, match=r"memory holds keys and values for 1 layers, the decoder has 2"):
        decoder(x, decoder.project_memory(memory)[:1])
    with pytest.raises(ValueError, match=r"d_model \(8\) must be divisible by num_heads \(3\)"):
        TransformerEncoderLayer(D, 3, D_FF)
