import math

import pytest
import torch
from torch.testing import assert_close

from seqlab.nn.attention import AdditiveAttention, AttentionOutput, BilinearAttention, DotProductAttention
from seqlab.nn.multi_head_attention import MultiHeadAttention

B, T, S, HQ, HK, HV, A = 2, 3, 5, 4, 6, 7, 8


def _inputs(hq=HQ, hk=HK, seed=0):
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(B, T, hq, generator=g, dtype=torch.float64)
    keys = torch.randn(B, S, hk, generator=g, dtype=torch.float64)
    values = torch.randn(B, S, HV, generator=g, dtype=torch.float64)
    return query, keys, values


def _modules():
    torch.manual_seed(0)
    return {
        "additive": AdditiveAttention(HQ, HK, A).double(),
        "bilinear": BilinearAttention(HQ, HK).double(),
        "dot": DotProductAttention(),
        "scaled": DotProductAttention(scaled=True),
    }


def _sizes(name):
    return (HK, HK) if name in ("dot", "scaled") else (HQ, HK)


def _reference_scores(name, attn, query, keys):
    """e[b, t, s] by the papers' formulas, one (t, s) pair at a time."""
    e = torch.empty(query.shape[0], query.shape[1], keys.shape[1], dtype=torch.float64)
    for b in range(e.shape[0]):
        for t in range(e.shape[1]):
            for s in range(e.shape[2]):
                q, k = query[b, t], keys[b, s]
                if name == "additive":
                    W_q, W_k, v = attn.query_proj.weight, attn.key_proj.weight, attn.v.weight[0]
                    e[b, t, s] = v @ torch.tanh(W_q @ q + W_k @ k)
                elif name == "bilinear":
                    e[b, t, s] = q @ attn.key_proj.weight @ k
                elif name == "dot":
                    e[b, t, s] = q @ k
                else:
                    e[b, t, s] = q @ k / math.sqrt(k.shape[0])
    return e


@pytest.mark.parametrize("name", ["additive", "bilinear", "dot", "scaled"])
def test_score_and_forward_match_the_formulas(name):
    attn = _modules()[name]
    query, keys, values = _inputs(*_sizes(name))
    e = _reference_scores(name, attn, query, keys)
    assert_close(attn.score(query, keys), e)

    out = attn(query, keys, values)
    assert isinstance(out, AttentionOutput)
    alpha = torch.exp(e) / torch.exp(e).sum(-1, keepdim=True)
    assert_close(out.weights, alpha)
    assert_close(out.weights.sum(-1), torch.ones(B, T, dtype=torch.float64))
    assert_close(out.output, torch.einsum("bts,bsh->bth", alpha, values))


@pytest.mark.parametrize("name", ["additive", "bilinear", "dot", "scaled"])
def test_mask_gives_exact_zeros_and_ignores_masked_keys_and_values(name):
    attn = _modules()[name]
    query, keys, values = _inputs(*_sizes(name))
    mask = torch.tensor([[True, True, False, True, False], [True, False, False, False, False]])
    out = attn(query, keys, values, keep_mask=mask)

    masked = out.weights.masked_select(~mask.unsqueeze(1))  # every step's weights on masked positions
    assert masked.numel() == T * 6 and torch.all(masked == 0)
    assert_close(out.weights.sum(-1), torch.ones(B, T, dtype=torch.float64))
    # Row 1 has one real position: all weight on it, context = its value.
    assert_close(out.output[1], values[1, 0].expand(T, HV))

    noisy_keys = torch.where(mask.unsqueeze(-1), keys, torch.randn_like(keys) * 100)
    noisy_values = torch.where(mask.unsqueeze(-1), values, torch.randn_like(values) * 100)
    noisy = attn(query, noisy_keys, noisy_values, keep_mask=mask)
    assert_close(noisy.output, out.output)
    assert_close(noisy.weights, out.weights)


def test_masked_softmax_equals_softmax_over_the_real_positions_only():
    attn = DotProductAttention()
    query, keys, values = _inputs(HK, HK)
    mask = torch.tensor([[True, False, True, True, False], [False, True, True, True, True]])
    out = attn(query, keys, values, keep_mask=mask)
    for b in range(B):
        real = mask[b]
        expected = attn(query[b : b + 1], keys[b : b + 1, real], values[b : b + 1, real])
        assert_close(out.output[b], expected.output[0])
        assert_close(out.weights[b][:, real], expected.weights[0])


@pytest.mark.parametrize("name", ["additive", "bilinear", "dot", "scaled"])
def test_2d_query_equals_3d_query_with_one_step(name):
    attn = _modules()[name]
    query, keys, values = _inputs(*_sizes(name))
    mask = torch.tensor([[True, True, True, False, False], [True, True, True, True, True]])
    step = attn(query[:, 0], keys, values, keep_mask=mask)
    full = attn(query[:, :1], keys, values, keep_mask=mask)
    assert step.output.shape == (B, HV) and step.weights.shape == (B, S)
    assert_close(step.output, full.output.squeeze(1))
    assert_close(step.weights, full.weights.squeeze(1))


def test_values_default_to_keys():
    attn = DotProductAttention()
    query, keys, _ = _inputs(HK, HK)
    assert_close(attn(query, keys).output, attn(query, keys, keys).output)


def test_scaled_scores_are_dot_scores_over_sqrt_dk():
    query, keys, _ = _inputs(HK, HK)
    dot = DotProductAttention().score(query, keys)
    assert_close(DotProductAttention(scaled=True).score(query, keys), dot / math.sqrt(HK))


def test_gradients_flow_to_parameters_and_inputs():
    attn = AdditiveAttention(HQ, HK, A).double()
    query, keys, values = (x.requires_grad_() for x in _inputs())
    attn(query, keys, values, keep_mask=torch.tensor([[True] * 4 + [False], [True] * 5])).output.sum().backward()
    for p in (query, keys, values, *attn.parameters()):
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0


def test_errors():
    query, keys, values = _inputs()
    additive, dot = AdditiveAttention(HQ, HK, A).double(), DotProductAttention()
    bilinear = BilinearAttention(HQ, HK).double()
    with pytest.raises(ValueError, match=r"query feature size \(6\) != query_size \(4\)"):
        additive(keys, keys)
    with pytest.raises(ValueError, match=r"key feature size \(4\) != key_size \(6\)"):
        bilinear(query, query)
    with pytest.raises(ValueError, match=r"needs query size == key size, got Hq=4, Hk=6"):
        dot(query, keys)
    with pytest.raises(ValueError, match=r"query batch \(1\) != keys batch \(2\)"):
        additive(query[:1], keys)
    with pytest.raises(ValueError, match=r"query must be \(B, T, Hq\) or \(B, Hq\), got shape \(4,\)"):
        additive(query[0, 0], keys)
    with pytest.raises(ValueError, match=r"keys must be \(B, S, Hk\), got shape \(5, 6\)"):
        additive(query, keys[0])
    with pytest.raises(
        ValueError, match=r"values must be \(B, S, Hv\) with \(B, S\) = \(2, 5\), got shape \(2, 4, 7\)"
    ):
        additive(query, keys, values[:, :4])
    with pytest.raises(ValueError, match=r"keep_mask shape \(2, 4\) != \(B, S\) = \(2, 5\)"):
        additive(query, keys, values, keep_mask=torch.ones(B, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"keep_mask must be a bool tensor \(True = real position\), got torch.int64"):
        additive(query, keys, values, keep_mask=torch.ones(B, S, dtype=torch.long))


@pytest.mark.parametrize("make", [lambda: AdditiveAttention(4, 4, 3), lambda: DotProductAttention(scaled=True)])
def test_a_row_without_real_positions_gets_zero_weights_and_context_as_in_multi_head_attention(make):
    torch.manual_seed(0)
    query, keys = torch.randn(2, 3, 4, requires_grad=True), torch.randn(2, 5, 4)
    mask = torch.tensor([[True, True, False, False, False], [False] * 5])
    attention = make()
    out = attention(query, keys, keep_mask=mask)
    assert torch.equal(out.output[1], torch.zeros(3, 4)) and torch.equal(out.weights[1], torch.zeros(3, 5))
    reference = attention(query[:1], keys[:1], keep_mask=mask[:1])
    torch.testing.assert_close(out.output[:1], reference.output)
    out.output.sum().backward()
    assert torch.isfinite(query.grad).all()
    mha = MultiHeadAttention(4, 2)  # the same rule: a query that sees no real key gives a zero row
    assert torch.equal(mha(keys, keep_mask=mask).output[1], torch.zeros(5, 4))
