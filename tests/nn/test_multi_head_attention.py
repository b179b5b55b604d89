import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from seqlab.nn.functional.attention import causal_keep_mask, scaled_dot_product_attention
from seqlab.nn.kv_cache import KVCache
from seqlab.nn.multi_head_attention import MultiHeadAttention
from seqlab.nn.positional import RotaryEmbedding

B, N, DH = 2, 2, 4
D = N * DH


def _rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64)


def _mask(*shape: int, p_keep: float = 0.7) -> torch.Tensor:
    return torch.rand(*shape) < p_keep


def _brute_force(q, k, v, keep, scale):
    """Per-element softmax over the allowed keys: out[b,n,i] = sum_j w_ij v_j, w_ij = e^{s_ij} / sum e^{s_ij'}."""
    Bq, Nq, T, _ = q.shape
    out = torch.zeros(Bq, Nq, T, v.shape[-1], dtype=q.dtype)
    for b in range(Bq):
        for n in range(Nq):
            for i in range(T):
                allowed = [j for j in range(k.shape[2]) if keep[b, n, i, j]]
                scores = [math.exp(float(q[b, n, i] @ k[b, n, j]) * scale) for j in allowed]
                for j, s in zip(allowed, scores, strict=True):
                    out[b, n, i] += s / sum(scores) * v[b, n, j]
    return out


# ---- scaled_dot_product_attention ----------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_reference_matches_brute_force_loop(causal):
    torch.manual_seed(0)
    T, S = 3, 5
    q, k, v = _rand(B, N, T, DH), _rand(B, N, S, DH), _rand(B, N, S, 3)
    keep_mask = _mask(B, 1, T, S)
    keep_mask[0, 0, 1] = False  # a query with no key: output row 0
    keep = keep_mask.expand(B, N, T, S).clone()
    if causal:
        keep &= torch.tensor([[j <= i + S - T for j in range(S)] for i in range(T)])
    result = scaled_dot_product_attention(q, k, v, keep_mask=keep_mask, causal=causal, need_weights=True)
    assert_close(result.output, _brute_force(q, k, v, keep, 1 / math.sqrt(DH)))
    assert result.weights.shape == (B, N, T, S)
    assert (result.weights[~keep] == 0).all()
    assert_close(result.weights.sum(-1), keep.any(-1).double())


def test_causal_keep_mask_is_bottom_right_aligned():
    expected = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)  # T=2 queries after 2 cached keys
    assert torch.equal(causal_keep_mask(2, 4), expected)
    assert torch.equal(causal_keep_mask(3, 2), torch.tensor([[0, 0], [1, 0], [1, 1]], dtype=torch.bool))


@pytest.mark.parametrize(("T", "S"), [(4, 4), (3, 5), (5, 3), (1, 4)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mask_kind", ["none", "key_padding", "full"])
def test_fast_path_matches_reference(T, S, causal, mask_kind):
    torch.manual_seed(T * 10 + S)
    q, k, v = _rand(B, N, T, DH), _rand(B, N, S, DH), _rand(B, N, S, DH)
    keep_mask = {"none": None, "key_padding": _mask(B, 1, 1, S), "full": _mask(B, N, T, S)}[mask_kind]
    reference = scaled_dot_product_attention(q, k, v, keep_mask=keep_mask, causal=causal, need_weights=True)
    fast = scaled_dot_product_attention(q, k, v, keep_mask=keep_mask, causal=causal)
    assert fast.weights is None
    assert_close(fast.output, reference.output)
    assert_close(reference.output, reference.weights @ v)
    assert torch.isfinite(fast.output).all()


@pytest.mark.parametrize("need_weights", [False, True])
def test_query_without_keys_gives_zero_output_and_finite_gradients(need_weights):
    torch.manual_seed(2)
    q, k, v = (_rand(1, 1, 3, DH).requires_grad_() for _ in range(3))
    keep_mask = torch.tensor([[True, False, True], [False, False, False], [True, True, True]])
    result = scaled_dot_product_attention(q, k, v, keep_mask=keep_mask, need_weights=need_weights)
    assert (result.output[0, 0, 1] == 0).all()
    result.output.sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in (q, k, v))


def test_scale_argument_replaces_one_over_sqrt_dh():
    torch.manual_seed(3)
    q, k, v = _rand(B, N, 3, DH), _rand(B, N, 3, DH), _rand(B, N, 3, DH)
    result = scaled_dot_product_attention(q, k, v, scale=0.3, need_weights=True)
    assert_close(result.weights, torch.softmax(0.3 * q @ k.transpose(-2, -1), dim=-1))
    assert_close(scaled_dot_product_attention(q, k, v, scale=0.3).output, result.output)


def test_dropout_zeroes_or_rescales_weights_that_make_the_output():
    torch.manual_seed(4)
    q, k, v = _rand(B, N, 6, DH), _rand(B, N, 6, DH), _rand(B, N, 6, DH)
    clean = scaled_dot_product_attention(q, k, v, need_weights=True).weights
    dropped = scaled_dot_product_attention(q, k, v, dropout_p=0.5, need_weights=True)
    kept = dropped.weights != 0
    assert kept.any() and not kept.all()
    assert_close(dropped.weights[kept], clean[kept] / 0.5)
    assert_close(dropped.output, dropped.weights @ v)


def test_keep_mask_errors_name_both_shapes():
    q = k = v = _rand(B, N, 3, DH)
    with pytest.raises(
        ValueError, match=r"^keep_mask shape \(2, 4\) does not broadcast to \(B, N, T, S\) = \(2, 2, 3, 3\)$"
    ):
        scaled_dot_product_attention(q, k, v, keep_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"keep_mask must be a bool tensor"):
        scaled_dot_product_attention(q, k, v, keep_mask=torch.ones(3, 3))


def test_qkv_shape_errors():
    with pytest.raises(ValueError, match=r"disagree in \(B, N\), S or Dh: q \(2, 2, 3, 4\), k \(2, 2, 3, 5\)"):
        scaled_dot_product_attention(_rand(B, N, 3, DH), _rand(B, N, 3, 5), _rand(B, N, 3, 5))
    with pytest.raises(ValueError, match=r"must be \(B, N, T, Dh\)"):
        scaled_dot_product_attention(_rand(B, 3, DH), _rand(B, 3, DH), _rand(B, 3, DH))


# ---- MultiHeadAttention against torch.nn.MultiheadAttention ----------------------------------------


def _torch_mha(**kwargs) -> nn.MultiheadAttention:
    module = nn.MultiheadAttention(D, N, batch_first=True, dtype=torch.float64, **kwargs)
    with torch.no_grad():  # non-zero biases, so copying them is tested too
        module.in_proj_bias.normal_()
        module.out_proj.bias.normal_()
    return module.eval()


def test_d_model_not_divisible_by_num_heads():
    with pytest.raises(ValueError, match=r"^d_model \(10\) must be divisible by num_heads \(4\)$"):
        MultiHeadAttention(10, 4)


@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_matches_torch(causal):
    torch.manual_seed(5)
    reference = _torch_mha()
    mha = MultiHeadAttention.from_torch(reference).eval()
    x = _rand(B, 5, D)
    keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    attn_mask = ~causal_keep_mask(5, 5) if causal else None  # torch: True = may NOT attend
    expected, expected_weights = reference(
        x, x, x, key_padding_mask=~keep, attn_mask=attn_mask, need_weights=True, average_attn_weights=False
    )
    ours = mha(x, keep_mask=keep, causal=causal, need_weights=True)
    assert_close(ours.output, expected)
    assert_close(ours.weights, expected_weights)
    assert ours.cache is None
    assert_close(mha(x, keep_mask=keep, causal=causal).output, expected)  # SDPA path
    _, averaged = reference(x, x, x, key_padding_mask=~keep, attn_mask=attn_mask)
    assert_close(ours.weights.mean(dim=1), averaged)


def test_cross_attention_with_kdim_vdim_matches_torch():
    torch.manual_seed(6)
    reference = _torch_mha(kdim=5, vdim=3)
    mha = MultiHeadAttention.from_torch(reference).eval()
    query, key, value = _rand(B, 4, D), _rand(B, 6, 5), _rand(B, 6, 3)
    keep = torch.tensor([[True] * 6, [True] * 2 + [False] * 4])
    expected, expected_weights = reference(
        query, key, value, key_padding_mask=~keep, need_weights=True, average_attn_weights=False
    )
    ours = mha(query, key, value, keep_mask=keep, need_weights=True)
    assert_close(ours.output, expected)
    assert_close(ours.weights, expected_weights)
    k, v = mha.project_key_value(key, value)
    assert k.shape == v.shape == (B, N, 6, DH)
    assert_close(mha(query, keep_mask=keep, precomputed_kv=(k, v)).output, expected)


def test_from_torch_batch_second_and_to_torch_round_trip():
    torch.manual_seed(7)
    seq_first = nn.MultiheadAttention(D, N, dtype=torch.float64).eval()
    mha = MultiHeadAttention.from_torch(seq_first).eval()
    x = _rand(B, 3, D)
    assert_close(mha(x).output, seq_first(x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1))[0].transpose(0, 1))
    for module in (mha, MultiHeadAttention(D, N, kdim=5, vdim=3, bias=False).double().eval()):
        back = module.to_torch().eval()
        key, value = _rand(B, 3, module.kdim), _rand(B, 3, module.vdim)
        assert_close(back(x, key, value)[0], module(x, key, value).output)


def test_from_torch_rejects_bias_kv():
    with pytest.raises(ValueError, match=r"^from_torch does not support add_bias_kv or add_zero_attn$"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(D, N, add_bias_kv=True))


# ---- invariants -------------------------------------------------------------------------------------


def _mha(**kwargs) -> MultiHeadAttention:
    torch.manual_seed(8)
    mha = MultiHeadAttention(D, N, **kwargs).double().eval()
    with torch.no_grad():
        for p in mha.parameters():
            if p.dim() == 1:
                p.normal_()
    return mha


def test_causal_changing_a_future_token_never_changes_earlier_outputs():
    mha = _mha()
    x = _rand(B, 6, D)
    changed = x.clone()
    changed[:, 4] = _rand(B, D)
    before, after = mha(x, causal=True).output, mha(changed, causal=True).output
    assert_close(after[:, :4], before[:, :4])
    assert not torch.allclose(after[:, 4:], before[:, 4:])


def test_padding_keys_never_change_real_outputs():
    mha = _mha()
    x = _rand(1, 6, D)
    padded = torch.cat([x[:, :4], _rand(1, 2, D)], dim=1)
    keep = torch.tensor([[True] * 4 + [False] * 2])
    assert_close(mha(padded, keep_mask=keep).output[:, :4], mha(x[:, :4]).output)
    assert_close(mha(padded, keep_mask=keep, causal=True).output[:, :4], mha(x[:, :4], causal=True).output)


@pytest.mark.parametrize("chunks", [[1] * 5, [2, 1, 2]])
def test_cached_incremental_self_attention_equals_full_causal(chunks):
    mha = _mha()
    x = _rand(B, 5, D)
    full = mha(x, causal=True).output
    cache = KVCache.empty(B, N, DH, dtype=torch.float64)
    outputs, start = [], 0
    with torch.no_grad():
        for t in chunks:
            out, _, cache = mha(x[:, start : start + t], causal=True, cache=cache)
            outputs.append(out)
            start += t
    assert cache.length == 5
    assert_close(torch.cat(outputs, dim=1), full)


def test_cached_key_padding_mask_covers_cached_keys():
    mha = _mha()
    x = _rand(B, 4, D)
    keep = torch.tensor([[True] * 4, [False] + [True] * 3])  # row 1 left-padded
    full = mha(x, keep_mask=keep, causal=True).output
    cache = KVCache.empty(B, N, DH, dtype=torch.float64)
    with torch.no_grad():
        first, _, cache = mha(x[:, :3], keep_mask=keep[:, :3], causal=True, cache=cache)
        last, _, cache = mha(x[:, 3:], keep_mask=keep, causal=True, cache=cache)
    assert_close(torch.cat([first, last], dim=1), full)


def test_mask_shape_mismatch_names_both_shapes():
    mha = _mha()
    with pytest.raises(ValueError, match=r"^keep_mask shape \(2, 3\) != \(B, S\) = \(2, 5\)$"):
        mha(_rand(B, 5, D), keep_mask=torch.ones(B, 3, dtype=torch.bool))


def test_eval_disables_dropout_and_training_applies_it():
    mha = _mha(dropout=0.5)
    clean = _mha()
    x = _rand(B, 5, D)
    assert_close(mha(x).output, clean(x).output)
    mha.train()
    torch.manual_seed(9)
    assert not torch.allclose(mha(x).output, clean(x).output)


def test_argument_errors():
    mha = _mha()
    x = _rand(B, 3, D)
    with pytest.raises(ValueError, match=r"^query must be \(B, T, D=8\), got shape \(2, 3, 5\)$"):
        mha(_rand(B, 3, 5))
    with pytest.raises(ValueError, match=r"KV cache and rotary embeddings are for self-attention"):
        mha(x, x, cache=KVCache.empty(B, N, DH, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"^key must be \(B, S, kdim=8\), got shape \(2, 3, 5\)$"):
        mha(x, _rand(B, 3, 5))
    with pytest.raises(ValueError, match=r"^value was given without key$"):
        mha(x, value=x)
    with pytest.raises(ValueError, match=r"^pass either key/value or precomputed_kv, not both$"):
        mha(x, x, precomputed_kv=mha.project_key_value(x))
    with pytest.raises(ValueError, match=r"^keep_mask must be bool \(True = real key\), got torch.int64$"):
        mha(x, keep_mask=torch.ones(B, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^attention_kind \('sparse'\) must be one of 'full', 'local', 'linear'$"):
        MultiHeadAttention(D, N, attention_kind="sparse")
    with pytest.raises(ValueError, match=r"^attention_kind 'local' needs a window >= 1, got None$"):
        MultiHeadAttention(D, N, attention_kind="local")
    with pytest.raises(ValueError, match=r"^window \(0\) must be None or an integer >= 1$"):
        MultiHeadAttention(D, N, attention_kind="local", window=0)
    with pytest.raises(ValueError, match=r"^window \(3\) is only used by attention_kind 'local', got 'full'$"):
        MultiHeadAttention(D, N, window=3)
    with pytest.raises(ValueError, match=r"^attention dropout \(0.1\) needs attention_kind 'full', got 'linear'$"):
        MultiHeadAttention(D, N, attention_kind="linear", dropout=0.1)
    with pytest.raises(ValueError, match=r"^dropout \(1.0\) must be in \[0, 1\)$"):
        MultiHeadAttention(D, N, dropout=1.0)
    with pytest.raises(ValueError, match=r"^to_torch needs attention_kind 'full' without rotary"):
        MultiHeadAttention(D, N, attention_kind="linear").to_torch()


# ---- rotary positions ---------------------------------------------------------------------------------


def test_rotary_cached_equals_full_and_depends_only_on_relative_positions():
    mha = _mha(rotary=RotaryEmbedding(DH))
    x = _rand(B, 5, D)
    full = mha(x, causal=True).output
    assert not torch.allclose(full, _mha()(x, causal=True).output)  # the rotation is applied
    # RoPE scores depend on j - i only, so shifting every position leaves the output unchanged
    assert_close(mha(x, causal=True, offset=7).output, full)
    cache = KVCache.empty(B, N, DH, dtype=torch.float64)
    outputs = []
    with torch.no_grad():
        for start, stop in ((0, 2), (2, 3), (3, 5)):
            out, _, cache = mha(x[:, start:stop], causal=True, cache=cache)
            outputs.append(out)
    assert_close(torch.cat(outputs, dim=1), full)


def test_rotary_is_rejected_for_cross_attention():
    mha = _mha(rotary=RotaryEmbedding(DH))
    with pytest.raises(ValueError, match=r"KV cache and rotary embeddings are for self-attention"):
        mha(_rand(B, 2, D), _rand(B, 3, D))


# ---- kind "local" and "linear" ------------------------------------------------------------------------


def _projections(mha, x):
    return mha._split_heads(mha.q_proj(x)), *mha.project_key_value(x)  # (B, N, T, Dh) each


def _merge(mha, out):
    return mha.out_proj(out.transpose(1, 2).reshape(out.shape[0], -1, D))  # (B, T, D)


@pytest.mark.parametrize("causal", [False, True])
def test_local_kind_equals_full_attention_restricted_to_the_window(causal):
    mha = _mha(attention_kind="local", window=2)
    x = _rand(B, 6, D)
    keep = torch.tensor([[True] * 6, [True] * 5 + [False]])
    i, j = torch.arange(6).unsqueeze(1), torch.arange(6)
    band = ((j <= i) & (j > i - 2)) if causal else (i - j).abs() < 2
    q, k, v = _projections(mha, x)
    expected = scaled_dot_product_attention(q, k, v, keep_mask=band & keep[:, None, None, :], need_weights=True)
    ours = mha(x, keep_mask=keep, causal=causal, need_weights=True)
    assert_close(ours.output, _merge(mha, expected.output))
    assert_close(ours.weights, expected.weights)


@pytest.mark.parametrize("causal", [False, True])
def test_linear_kind_equals_the_kernel_formula(causal):
    mha = _mha(attention_kind="linear")
    x = _rand(B, 5, D)
    keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    q, k, v = _projections(mha, x)
    phi_q, phi_k = nn.functional.elu(q) + 1, nn.functional.elu(k) + 1
    similarity = phi_q @ phi_k.transpose(-1, -2) * keep[:, None, None, :]  # (B, N, T, S)
    if causal:
        similarity = similarity.tril()
    expected = similarity @ v / similarity.sum(-1, keepdim=True)  # Katharopoulos et al. 2020, eq. 4
    assert_close(mha(x, keep_mask=keep, causal=causal).output, _merge(mha, expected))
    with pytest.raises(
        ValueError, match=r"^attention_kind 'linear' forms no attention weights: need_weights must be False$"
    ):
        mha(x, need_weights=True)


@pytest.mark.parametrize(("kind", "window"), [("local", 2), ("linear", None)])
def test_cached_incremental_efficient_kinds_equal_full_causal(kind, window):
    mha = _mha(attention_kind=kind, window=window)
    x = _rand(B, 5, D)
    full = mha(x, causal=True).output
    cache = KVCache.empty(B, N, DH, dtype=torch.float64)
    outputs = []
    with torch.no_grad():
        for start, stop in ((0, 2), (2, 3), (3, 4), (4, 5)):
            out, _, cache = mha(x[:, start:stop], causal=True, cache=cache)
            outputs.append(out)
    assert_close(torch.cat(outputs, dim=1), full)


# ---- the previous release's keyword names ---------------------------------------------------------------


def test_old_keyword_names_warn_and_give_identical_output():
    B, T = 2, 5
    x = _rand(B, T, D)
    keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])  # seqlab's key_padding_mask was True = keep
    rotary = RotaryEmbedding(D // N)
    torch.manual_seed(3)
    new = MultiHeadAttention(D, N, attention_kind="local", window=2, rotary=rotary).double().eval()
    with pytest.warns(DeprecationWarning, match=r"'kind' is deprecated, use 'attention_kind'"):
        torch.manual_seed(3)
        old = MultiHeadAttention(D, N, kind="local", window=2, rotary=rotary).double().eval()
    assert old.attention_kind == "local"
    for p, q in zip(new.parameters(), old.parameters(), strict=True):
        assert torch.equal(p, q)
    expected = new(x, keep_mask=keep, causal=True, offset=4, need_weights=True)
    with pytest.warns(DeprecationWarning, match=r"'key_padding_mask' is deprecated, use 'keep_mask'"):
        padded = old(x, key_padding_mask=keep, causal=True, offset=4, need_weights=True)
    with pytest.warns(DeprecationWarning, match=r"'positions_offset' is deprecated, use 'offset'"):
        shifted = old(x, keep_mask=keep, causal=True, positions_offset=4, need_weights=True)
    for got in (padded, shifted):
        assert torch.equal(got.output, expected.output) and torch.equal(got.weights, expected.weights)
    assert not torch.equal(new(x, keep_mask=keep, causal=True).output, expected.output)  # offset 0 differs


def test_old_and_new_keyword_together_or_unknown_keyword_raise():
    x = _rand(2, 3, D)
    mha = _mha()
    keep = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(TypeError, match=r"got both 'key_padding_mask' \(deprecated\) and 'keep_mask'"):
        mha(x, keep_mask=keep, key_padding_mask=keep)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'mask'"):
        mha(x, mask=keep)
