"""Monotonic-alignment priors (issue 25): the ALiBi-style cross-attention bias and the guided attention loss of
Tachibana et al. (2018, eq. 1) against brute-force loops over their formulas, and their exact errors."""

import math
import re

import pytest
import torch
from torch.testing import assert_close

from seqlab.nn.alignment import alibi_slopes, guided_attention_loss, monotonic_alibi_bias
from seqlab.nn.functional.attention import scaled_dot_product_attention


def test_slopes_are_alibis_geometric_sequence():
    assert_close(alibi_slopes(4, 1.0), torch.tensor([1.0, 1 / 4, 1 / 16, 1 / 64]))
    # Started at 2^(-8/N), the sequence is ALiBi's own (Press et al. 2022): 1/2 ... 1/256 for 8 heads.
    assert_close(alibi_slopes(8, 0.5), torch.tensor([2.0**-k for k in range(1, 9)]))


@pytest.mark.parametrize("offset", [0, 5])
def test_bias_equals_the_formula_entry_by_entry(offset):
    slopes, T, S, r = torch.tensor([1.0, 0.25, 0.0625], dtype=torch.float64), 4, 6, 0.8
    bias = monotonic_alibi_bias(slopes, torch.arange(offset, offset + T), S, r)
    assert bias.shape == (3, T, S) and bias.dtype == torch.float64
    for h in range(3):
        for i in range(T):
            for j in range(S):
                assert bias[h, i, j].item() == pytest.approx(-slopes[h].item() * abs(j - (offset + i) / r))


def test_a_step_past_the_source_end_attends_as_at_the_last_source_step():
    """Past the end, the bias is the last step's plus a constant, which the softmax ignores."""
    slopes = alibi_slopes(2, 1.0)
    scores = torch.randn(2, 1, 5)
    inside = torch.softmax(scores + monotonic_alibi_bias(slopes, torch.tensor([4]), 5, 1.0), -1)
    past = torch.softmax(scores + monotonic_alibi_bias(slopes, torch.tensor([9]), 5, 1.0), -1)
    assert_close(past, inside)


def brute_force_guided_loss(weights, src_lengths, tgt_lengths, sigma):
    total, count = 0.0, 0
    for b in range(weights.shape[0]):
        N, T = int(src_lengths[b]), int(tgt_lengths[b])
        for h in range(weights.shape[1]):
            for t in range(T):
                for n in range(N):
                    w = 1.0 - math.exp(-((n / N - t / T) ** 2) / (2 * sigma**2))
                    total += weights[b, h, t, n].item() * w
                    count += 1
    return total / count


def test_guided_loss_equals_the_papers_mean_over_real_steps():
    g = torch.Generator().manual_seed(0)
    src_lengths, tgt_lengths = torch.tensor([5, 3, 4]), torch.tensor([4, 6, 2])
    weights = torch.rand(3, 2, 6, 5, generator=g, dtype=torch.float64)  # padded entries too: they must not count
    got = guided_attention_loss(weights, src_lengths, tgt_lengths, sigma=0.3)
    assert got.item() == pytest.approx(brute_force_guided_loss(weights, src_lengths, tgt_lengths, 0.3), rel=1e-12)


def test_guided_loss_is_zero_on_the_diagonal_and_grows_away_from_it():
    diagonal = torch.eye(4).reshape(1, 1, 4, 4)
    lengths = torch.tensor([4])
    assert guided_attention_loss(diagonal, lengths, lengths).item() == 0.0
    anti = diagonal.flip(-1)
    assert guided_attention_loss(anti, lengths, lengths).item() > 0.1


def test_guided_loss_has_the_gradient_of_its_penalty():
    weights = torch.rand(1, 1, 3, 2, dtype=torch.float64, requires_grad=True)
    guided_attention_loss(weights, torch.tensor([2]), torch.tensor([3]), sigma=0.2).backward()
    expected = torch.tensor(
        [[1 - math.exp(-((n / 2 - t / 3) ** 2) / 0.08) for n in range(2)] for t in range(3)], dtype=torch.float64
    )
    assert_close(weights.grad[0, 0], expected / 6)


def test_sdpa_adds_the_bias_to_the_scores_on_both_paths():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 4, 8, generator=g, dtype=torch.float64) for _ in range(3))
    keep = torch.tensor([[True] * 4, [True, True, False, False]])[:, None, None, :]  # (B, 1, 1, S)
    bias = monotonic_alibi_bias(alibi_slopes(3, 1.0).double(), torch.arange(4), 4, 0.85)  # (N, T, S)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8) + bias
    expected_weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), -1)
    reference = scaled_dot_product_attention(q, k, v, keep_mask=keep, attn_bias=bias, need_weights=True)
    fast = scaled_dot_product_attention(q, k, v, keep_mask=keep, attn_bias=bias)
    assert_close(reference.weights, expected_weights)
    assert_close(reference.output, expected_weights @ v)
    assert_close(fast.output, expected_weights @ v)
    causal = scaled_dot_product_attention(q, k, v, causal=True, attn_bias=bias)
    causal_weights = torch.softmax(scores.masked_fill(~torch.ones(4, 4, dtype=torch.bool).tril(), float("-inf")), -1)
    assert_close(causal.output, causal_weights @ v)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: alibi_slopes(0, 1.0), "num_heads must be >= 1, got 0"),
        (lambda: alibi_slopes(4, 0.0), "max_slope must be > 0, got 0.0"),
        (lambda: monotonic_alibi_bias(torch.ones(2), torch.arange(3), 4, 0.0), "length_ratio must be > 0, got 0.0"),
        (lambda: monotonic_alibi_bias(torch.ones(2), torch.arange(3), 0, 1.0), "num_keys must be >= 1, got 0"),
        (
            lambda: monotonic_alibi_bias(torch.ones(2, 1), torch.arange(3), 4, 1.0),
            "slopes and query_positions must be 1-D, got shapes (2, 1) and (3,)",
        ),
        (
            lambda: guided_attention_loss(torch.ones(2, 3, 4), torch.ones(2), torch.ones(2)),
            "weights must be (B, H, T, S), got shape (2, 3, 4)",
        ),
        (
            lambda: guided_attention_loss(torch.ones(2, 1, 3, 4), torch.ones(3), torch.ones(2)),
            "src_lengths and tgt_lengths must be (B,) = (2,), got (3,) and (2,)",
        ),
        (
            lambda: guided_attention_loss(torch.ones(1, 1, 3, 4), torch.ones(1), torch.ones(1), sigma=-0.2),
            "sigma must be > 0, got -0.2",
        ),
        (
            lambda: scaled_dot_product_attention(*(torch.ones(1, 2, 3, 4),) * 3, attn_bias=torch.ones(3, 3, 3)),
            "attn_bias shape (3, 3, 3) does not broadcast to (B, N, T, S) = (1, 2, 3, 3)",
        ),
        (
            lambda: scaled_dot_product_attention(
                *(torch.ones(1, 2, 3, 4),) * 3, attn_bias=torch.ones(3, 3, dtype=torch.bool)
            ),
            "attn_bias must be a float tensor (added to the scores), got torch.bool",
        ),
    ],
)
def test_errors(call, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        call()
