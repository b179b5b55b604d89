import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from seqlab.nn.functional.attention import AttentionOutput, linear_attention, local_attention

B, N, DH, DV = 2, 2, 3, 4
SHAPES = [(6, 6), (4, 7), (7, 4)]  # (T, S): aligned, a cache of earlier keys, more queries than keys


def _qkv(T, S, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, N, T, DH, generator=g, dtype=torch.float64)
    k = torch.randn(B, N, S, DH, generator=g, dtype=torch.float64)
    v = torch.randn(B, N, S, DV, generator=g, dtype=torch.float64)
    return q, k, v


def _key_padding(S, lengths):
    return torch.arange(S).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)  # (B, S)


def _allowed(T, S, *, window=None, causal, keep_mask):
    """allowed[b, i, j]: may query i attend key j, by the definitions, one (i, j) pair at a time."""
    allowed = torch.zeros(B, T, S, dtype=torch.bool)
    for b in range(B):
        for i in range(T):
            p = i + S - T  # bottom-right aligned position of query i
            for j in range(S):
                if keep_mask is not None and not keep_mask[b, j]:
                    continue
                if causal and j > p:
                    continue
                if window is not None and not (p - window < j if causal else abs(p - j) < window):
                    continue
                allowed[b, i, j] = True
    return allowed


def _reference_softmax(q, k, v, allowed):
    """Softmax attention over the allowed keys, one query row at a time; rows with no key stay 0."""
    T, S = q.shape[2], k.shape[2]
    output = torch.zeros(B, N, T, DV, dtype=torch.float64)
    weights = torch.zeros(B, N, T, S, dtype=torch.float64)
    for b in range(B):
        for n in range(N):
            for i in range(T):
                keys = [j for j in range(S) if allowed[b, i, j]]
                if not keys:
                    continue
                scores = torch.stack([q[b, n, i] @ k[b, n, j] for j in keys]) / math.sqrt(DH)
                alpha = torch.exp(scores - scores.max())
                alpha = alpha / alpha.sum()
                for a, j in zip(alpha, keys, strict=True):
                    weights[b, n, i, j] = a
                    output[b, n, i] += a * v[b, n, j]
    return output, weights


def _reference_linear(q, k, v, allowed):
    """out_i = sum_j phi(q_i).phi(k_j) v_j / sum_j phi(q_i).phi(k_j) over the allowed keys (O(T S) form)."""
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    T, S = q.shape[2], k.shape[2]
    output = torch.zeros(B, N, T, DV, dtype=torch.float64)
    for b in range(B):
        for n in range(N):
            for i in range(T):
                similarity = [phi_q[b, n, i] @ phi_k[b, n, j] for j in range(S) if allowed[b, i, j]]
                values = [v[b, n, j] for j in range(S) if allowed[b, i, j]]
                if similarity:
                    numerator = sum(s * x for s, x in zip(similarity, values, strict=True))
                    output[b, n, i] = numerator / sum(similarity)
    return output


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("window", [1, 3, 6, 10])
@pytest.mark.parametrize("T, S", SHAPES)
@pytest.mark.parametrize("causal", [True, False])
def test_local_matches_softmax_attention_with_a_band_mask(causal, T, S, window, padded):
    q, k, v = _qkv(T, S)
    keep_mask = _key_padding(S, [S, S - 2]) if padded else None
    allowed = _allowed(T, S, window=window, causal=causal, keep_mask=keep_mask)
    expected_output, expected_weights = _reference_softmax(q, k, v, allowed)

    result = local_attention(q, k, v, window=window, causal=causal, keep_mask=keep_mask, need_weights=True)
    assert isinstance(result, AttentionOutput)
    assert_close(result.output, expected_output)
    assert_close(result.weights, expected_weights)
    assert (result.weights[~allowed.unsqueeze(1).expand(B, N, T, S)] == 0).all()
    fast = local_attention(q, k, v, window=window, causal=causal, keep_mask=keep_mask)
    assert fast.weights is None
    assert_close(fast.output, expected_output)


def test_local_masked_weights_are_exactly_zero_and_empty_rows_are_zero():
    T = S = 6
    q, k, v = _qkv(T, S)
    keep_mask = _key_padding(S, [S, 4])
    result = local_attention(q, k, v, window=2, causal=True, keep_mask=keep_mask, need_weights=True)
    allowed = _allowed(T, S, window=2, causal=True, keep_mask=keep_mask).unsqueeze(1).expand(B, N, T, S)
    assert (result.weights[~allowed] == 0).all()
    assert (result.weights[allowed] > 0).all()
    # Batch 1 has keys 0..3: with window 2, query 5 sees keys 4 and 5, both padding.
    assert_close(result.weights[1, :, 4].sum(-1), torch.ones(N, dtype=torch.float64))
    assert (result.weights[1, :, 5] == 0).all() and (result.output[1, :, 5] == 0).all()


def test_local_with_a_window_at_least_the_length_is_full_attention():
    T = S = 5
    q, k, v = _qkv(T, S)
    for window in (S, S + 1, 1000):
        causal = local_attention(q, k, v, window=window, causal=True).output
        assert_close(causal, F.scaled_dot_product_attention(q, k, v, is_causal=True))
        full = local_attention(q, k, v, window=window, causal=False).output
        assert_close(full, F.scaled_dot_product_attention(q, k, v))
    q, k, v = _qkv(3, 7)
    full = local_attention(q, k, v, window=7, causal=False).output
    assert_close(full, F.scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("T, S", SHAPES)
@pytest.mark.parametrize("causal", [True, False])
def test_linear_matches_the_quadratic_formula(causal, T, S, padded):
    q, k, v = _qkv(T, S)
    keep_mask = _key_padding(S, [S, S - 2]) if padded else None
    expected = _reference_linear(q, k, v, _allowed(T, S, causal=causal, keep_mask=keep_mask))
    result = linear_attention(q, k, v, causal=causal, keep_mask=keep_mask, chunk_size=3)
    assert isinstance(result, AttentionOutput) and result.weights is None
    assert_close(result.output, expected)


def test_linear_rows_without_keys_are_zero():
    q, k, v = _qkv(7, 4)
    out = linear_attention(q, k, v, causal=True, keep_mask=_key_padding(4, [4, 0])).output
    assert (out[0, :, :3] == 0).all() and (out[0, :, 3:] != 0).all()  # queries 0-2 sit before key 0
    assert (out[1] == 0).all()  # no real key at all


@pytest.mark.parametrize(
    "attend",
    [
        lambda q, k, v: local_attention(q, k, v, window=1, causal=True),
        lambda q, k, v: local_attention(q, k, v, window=3, causal=True, chunk_size=2),
        lambda q, k, v: linear_attention(q, k, v, causal=True, chunk_size=2),
    ],
    ids=["local-1", "local-3", "linear"],
)
def test_changing_a_future_token_never_changes_an_earlier_output(attend):
    T = S = 7
    q, k, v = _qkv(T, S)
    before = attend(q, k, v).output
    for t in range(1, T):
        q2, k2, v2 = q.clone(), k.clone(), v.clone()
        for x in (q2, k2, v2):
            x[:, :, t:] += 1.5
        after = attend(q2, k2, v2).output
        assert_close(after[:, :, :t], before[:, :, :t], rtol=0, atol=0)
        assert not torch.allclose(after[:, :, t], before[:, :, t])


@pytest.mark.parametrize("causal", [True, False])
def test_results_do_not_depend_on_chunk_size(causal):
    q, k, v = _qkv(7, 9)
    keep = _key_padding(9, [9, 6])
    local = [
        local_attention(q, k, v, window=3, causal=causal, keep_mask=keep, need_weights=True, chunk_size=c)
        for c in (1, 2, 3, 4, 7, 100, None)
    ]
    linear = [linear_attention(q, k, v, causal=causal, keep_mask=keep, chunk_size=c) for c in (1, 2, 7, 64)]
    for result in local[1:]:
        assert_close(result.output, local[0].output)
        assert_close(result.weights, local[0].weights)
    for result in linear[1:]:
        assert_close(result.output, linear[0].output)


@pytest.mark.parametrize(
    "attend",
    [
        lambda q, k, v, m: local_attention(q, k, v, window=2, causal=True, keep_mask=m),
        lambda q, k, v, m: local_attention(q, k, v, window=2, causal=False, keep_mask=m),
        lambda q, k, v, m: linear_attention(q, k, v, causal=True, keep_mask=m, chunk_size=2),
        lambda q, k, v, m: linear_attention(q, k, v, causal=False, keep_mask=m),
    ],
    ids=["local-causal", "local", "linear-causal", "linear"],
)
def test_padding_never_changes_real_positions(attend):
    q, k, v = _qkv(5, 5)
    expected = attend(q, k, v, None).output
    pq, pk, pv = _qkv(8, 8, seed=1)  # garbage in the three padded steps
    pq[:, :, :5], pk[:, :, :5], pv[:, :, :5] = q, k, v
    padded = attend(pq, pk, pv, _key_padding(8, [5, 5])).output
    assert_close(padded[:, :, :5], expected)


def test_a_broadcast_key_padding_mask_equals_the_b_s_mask():
    q, k, v = _qkv(4, 6)
    keep_mask = _key_padding(6, [6, 3])
    masks = (keep_mask, keep_mask[:, None, None])  # (B, S) and (B, 1, 1, S), as MultiHeadAttention passes it
    for causal in (True, False):
        local = [local_attention(q, k, v, window=2, causal=causal, keep_mask=m) for m in masks]
        linear = [linear_attention(q, k, v, causal=causal, keep_mask=m) for m in masks]
        assert_close(local[1].output, local[0].output)
        assert_close(linear[1].output, linear[0].output)


def test_gradients_are_finite_and_match_finite_differences_with_empty_rows():
    q, k, v = (x[:1, :1].requires_grad_() for x in _qkv(5, 4))
    keep_mask = torch.tensor([[True, False, True, True]])

    # Query 2 sits at key 1 (padding) with window 1, and query 0 before key 0: both rows are empty.
    def local(q, k, v):
        return local_attention(q, k, v, window=1, causal=True, keep_mask=keep_mask, chunk_size=2).output

    def linear(q, k, v):
        return linear_attention(q, k, v, causal=True, keep_mask=keep_mask, chunk_size=2).output

    assert torch.autograd.gradcheck(local, (q, k, v))
    assert torch.autograd.gradcheck(linear, (q, k, v))


GOOD = {"q": (B, N, 4, DH), "k": (B, N, 5, DH), "v": (B, N, 5, DV)}


@pytest.mark.parametrize(
    "bad, keep_mask, message",
    [
        (
            {"k": (B, N, 5, DH + 1)},
            None,
            r"^q shape \(2, 2, 4, 3\) does not match k shape \(2, 2, 5, 4\) in \(B, N, Dh\)$",
        ),
        (
            {"v": (B, N, 6, DV)},
            None,
            r"^v shape \(2, 2, 6, 4\) does not match k shape \(2, 2, 5, 3\) in \(B, N, S\)$",
        ),
        ({"q": (N, 4, DH)}, None, r"^q must be \(B, N, T, Dh\), got shape \(2, 4, 3\)$"),
        ({}, torch.ones(B, 4).bool(), r"^keep_mask shape \(2, 4\) is neither \(B, S\) = \(2, 5\) nor"),
        ({}, torch.ones(B, N, 4, 5).bool(), r"\(2, 2, 4, 5\) .*; only a key padding mask is supported$"),
        ({}, torch.ones(B, 5), r"^keep_mask must be a bool tensor \(True = real key\), got torch.float32$"),
    ],
)
def test_shape_errors(bad, keep_mask, message):
    q, k, v = (torch.zeros(bad.get(name, GOOD[name]), dtype=torch.float64) for name in ("q", "k", "v"))
    with pytest.raises(ValueError, match=message):
        local_attention(q, k, v, window=2, causal=True, keep_mask=keep_mask)
    with pytest.raises(ValueError, match=message):
        linear_attention(q, k, v, causal=True, keep_mask=keep_mask)


def test_argument_errors():
    q, k, v = _qkv(3, 3)
    with pytest.raises(ValueError, match=r"^window \(0\) must be >= 1$"):
        local_attention(q, k, v, window=0, causal=True)
    with pytest.raises(ValueError, match=r"^chunk_size \(0\) must be >= 1$"):
        local_attention(q, k, v, window=2, causal=False, chunk_size=0)
    with pytest.raises(ValueError, match=r"^chunk_size \(-1\) must be >= 1$"):
        linear_attention(q, k, v, causal=True, chunk_size=-1)
