import re

import pytest
import torch
from torch.testing import assert_close

from seqlab.nn.cells import LSTMState
from seqlab.nn.pooling import (
    AttentionPooling,
    LastPooling,
    MaxPooling,
    MeanPooling,
    PoolingOutput,
    make_pooling,
)
from seqlab.nn.recurrent import GRU, LSTM, RNN

B, T, F, A = 4, 6, 6, 5
LENGTHS = [6, 3, 1, 4]
GARBAGE = 100.0  # at padded steps: larger than any real value, so a pooling that reads padding fails


def prefix_mask(lengths, T=T):
    return torch.arange(T) < torch.tensor(lengths).unsqueeze(1)  # (B, T)


def padded_batch(seed=0, *, lengths=LENGTHS, fill=GARBAGE):
    """h (B, T, F) float64 with ``fill`` at padded steps, and its keep mask."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(len(lengths), T, F, generator=g, dtype=torch.float64)
    keep_mask = prefix_mask(lengths)
    return h.masked_fill(~keep_mask.unsqueeze(-1), fill), keep_mask


def make_attention(seed=0):
    torch.manual_seed(seed)
    return AttentionPooling(F, A).double()


def han_reference(pooling, x):
    """Yang et al. (2016), Sec. 2.2 word attention, on one unpadded sequence x (n, F): (s (F,), alpha (n,))."""
    W, b, u_w = pooling.attention.key_proj.weight, pooling.attention.key_proj.bias, pooling.context
    e = torch.stack([torch.tanh(W @ x_t + b) @ u_w for x_t in x])  # (n,)
    alpha = torch.exp(e) / torch.exp(e).sum()
    return sum(a * x_t for a, x_t in zip(alpha, x, strict=True)), alpha


@pytest.mark.parametrize("bidirectional", [False, True])
def test_last_pooling_matches_brute_force_indexing(bidirectional):
    h, keep_mask = padded_batch()
    out = LastPooling(bidirectional=bidirectional)(h, keep_mask)
    assert isinstance(out, PoolingOutput) and out.weights is None
    half = F // 2
    rows = []
    for b, n in enumerate(LENGTHS):
        rows.append(torch.cat([h[b, n - 1, :half], h[b, 0, half:]]) if bidirectional else h[b, n - 1])
    assert_close(out.pooled, torch.stack(rows))


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("layer_class", [RNN, GRU, LSTM])
def test_last_pooling_equals_the_layers_final_state(layer_class, bidirectional):
    torch.manual_seed(0)
    H, C = 3, 2 if bidirectional else 1
    layer = layer_class(4, H, num_layers=2, bidirectional=bidirectional).double()
    x = torch.randn(B, T, 4, dtype=torch.float64)
    outputs, state = layer(x, torch.tensor(LENGTHS))
    h_n = state.h if isinstance(state, LSTMState) else state  # (L*C, B, H)
    expected = h_n[-C:].transpose(0, 1).reshape(B, C * H)  # top layer, [forward; backward]
    pooled, _ = LastPooling(bidirectional=bidirectional)(outputs, prefix_mask(LENGTHS))
    assert_close(pooled, expected)


def test_mean_pooling_matches_per_row_mean_and_ignores_any_mask_pattern():
    h, _ = padded_batch()
    keep_mask = torch.tensor(
        [[True] * 6, [False, True, False, True, True, False], [False] * 5 + [True], [True, False] * 3]
    )
    h = h.masked_fill(~keep_mask.unsqueeze(-1), GARBAGE)
    out = MeanPooling()(h, keep_mask)
    assert out.weights is None
    assert_close(out.pooled, torch.stack([h[b][keep_mask[b]].mean(dim=0) for b in range(B)]))


def test_max_pooling_matches_per_row_max():
    h, keep_mask = padded_batch(fill=0.0)
    out = MaxPooling()(h, keep_mask)
    assert out.weights is None
    assert_close(out.pooled, torch.stack([h[b, :n].max(dim=0).values for b, n in enumerate(LENGTHS)]))


def test_max_pooling_never_picks_padding_when_every_real_value_is_negative():
    h, keep_mask = padded_batch(fill=0.0)  # padded steps hold 0, as a recurrent layer's outputs do
    h = torch.where(keep_mask.unsqueeze(-1), -h.abs() - 1.0, h)
    pooled, _ = MaxPooling()(h, keep_mask)
    expected = torch.stack([h[b, :n].max(dim=0).values for b, n in enumerate(LENGTHS)])
    assert torch.all(expected < 0)
    assert_close(pooled, expected)


def test_attention_pooling_matches_the_han_formula_per_row():
    pooling = make_attention()
    h, keep_mask = padded_batch()
    out = pooling(h, keep_mask)
    for b, n in enumerate(LENGTHS):
        s, alpha = han_reference(pooling, h[b, :n])
        assert_close(out.pooled[b], s)
        assert_close(out.weights[b, :n], alpha)


def test_attention_weights_sum_to_one_and_are_exactly_zero_on_padding():
    pooling = make_attention()
    h, keep_mask = padded_batch()
    _, weights = pooling(h, keep_mask)
    assert weights.shape == (B, T)
    assert_close(weights.sum(dim=1), torch.ones(B, dtype=torch.float64))
    assert torch.all(weights[~keep_mask] == 0.0)
    assert torch.all(weights[keep_mask] > 0.0)
    assert weights[2, 0] == 1.0  # a one-step sequence puts all its weight on that step


def test_attention_pooling_gradients_reach_every_parameter():
    pooling = make_attention()
    h, keep_mask = padded_batch()
    h.requires_grad_(True)
    pooling(h, keep_mask).pooled.square().sum().backward()
    for name, p in pooling.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert torch.all(h.grad[~keep_mask] == 0.0)


@pytest.mark.parametrize("name", ["last", "mean", "max", "attention"])
def test_pooling_of_a_row_does_not_depend_on_the_rest_of_the_batch(name):
    torch.manual_seed(0)
    pooling = make_pooling(name, F, bidirectional=True).double()
    h, keep_mask = padded_batch()
    batched = pooling(h, keep_mask)
    for b, n in enumerate(LENGTHS):
        alone = pooling(h[b : b + 1, :n], keep_mask[b : b + 1, :n])
        assert_close(batched.pooled[b : b + 1], alone.pooled)
        if name == "attention":
            assert_close(batched.weights[b : b + 1, :n], alone.weights)


def test_make_pooling_builds_each_kind():
    assert isinstance(make_pooling("last", F), LastPooling) and not make_pooling("last", F).bidirectional
    assert make_pooling("last", F, bidirectional=True).bidirectional
    assert isinstance(make_pooling("mean", F), MeanPooling)
    assert isinstance(make_pooling("max", F), MaxPooling)
    attention = make_pooling("attention", F)
    assert isinstance(attention, AttentionPooling) and attention.attention_size == F
    assert make_pooling("attention", F, attention_size=3).context.shape == (3,)


def test_make_pooling_rejects_an_unknown_name():
    with pytest.raises(ValueError, match=re.escape("pooling ('sum') must be one of last, mean, max, attention")):
        make_pooling("sum", F)


@pytest.mark.parametrize("name", ["last", "mean", "max", "attention"])
@pytest.mark.parametrize(
    ("h_shape", "keep_mask", "message"),
    [
        ((2, 3, F), torch.ones(2, 4, dtype=torch.bool), "keep_mask shape (2, 4) != (B, T) = (2, 3)"),
        ((2, 3, F), torch.ones(3, 3, dtype=torch.bool), "keep_mask shape (3, 3) != (B, T) = (2, 3)"),
        ((2, 3, F), torch.tensor([[True, True, False], [False] * 3]), "keep_mask row 1 has no real step"),
        ((2, 3, F), torch.ones(2, 3), "keep_mask must be a bool tensor (True = real step), got torch.float32"),
        ((2, F), torch.ones(2, 3, dtype=torch.bool), "h must be (B, T, C*H), got shape (2, 6)"),
    ],
)
def test_bad_inputs_give_clear_errors(name, h_shape, keep_mask, message):
    pooling = make_pooling(name, F)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        pooling(torch.randn(h_shape), keep_mask)


def test_last_pooling_rejects_padding_before_a_real_step():
    keep_mask = torch.tensor([[True, True, True], [True, False, True]])
    with pytest.raises(ValueError, match=re.escape("keep_mask row 1 has padding before a real step")):
        LastPooling(bidirectional=False)(torch.randn(2, 3, F), keep_mask)


def test_bidirectional_last_pooling_rejects_an_odd_feature_size():
    with pytest.raises(ValueError, match=re.escape("bidirectional h needs an even feature size C*H, got 5")):
        LastPooling(bidirectional=True)(torch.randn(2, 3, 5), torch.ones(2, 3, dtype=torch.bool))


def test_attention_pooling_rejects_a_wrong_feature_size():
    with pytest.raises(ValueError, match=re.escape("h feature size (4) != input_size (6)")):
        AttentionPooling(F, A)(torch.randn(2, 3, 4), torch.ones(2, 3, dtype=torch.bool))
