import pytest
import torch
from torch.testing import assert_close

from seqlab.decoding.interface import select_rows
from seqlab.nn.kv_cache import KVCache

B, N, S_MAX, DH = 2, 3, 5, 4


def _rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64)


def test_empty_is_zero_with_length_zero():
    cache = KVCache.empty(B, N, S_MAX, DH, dtype=torch.float64)
    assert cache.keys.shape == cache.values.shape == (B, N, S_MAX, DH)
    assert cache.keys.dtype == torch.float64
    assert cache.length == 0 and cache.max_length == S_MAX
    assert cache.keys_so_far.shape == (B, N, 0, DH)
    assert not cache.keys.any() and not cache.values.any()


def test_append_fills_consecutive_slots_and_earlier_views_keep_their_length():
    torch.manual_seed(0)
    k1, v1, k2, v2 = _rand(B, N, 2, DH), _rand(B, N, 2, DH), _rand(B, N, 1, DH), _rand(B, N, 1, DH)
    first = KVCache.empty(B, N, S_MAX, DH, dtype=torch.float64).append(k1, v1)
    second = first.append(k2, v2)
    assert (first.length, second.length) == (2, 3)
    assert_close(second.keys_so_far, torch.cat([k1, k2], dim=2))
    assert_close(second.values_so_far, torch.cat([v1, v2], dim=2))
    assert_close(first.keys_so_far, k1)
    assert not second.keys[:, :, 3:].any()  # slots past length untouched


def test_append_past_max_length_raises():
    cache = KVCache.empty(B, N, S_MAX, DH).append(torch.ones(B, N, 4, DH), torch.ones(B, N, 4, DH))
    with pytest.raises(ValueError, match=r"^KVCache overflow: length \(4\) \+ new steps \(2\) > max_length \(5\)$"):
        cache.append(torch.ones(B, N, 2, DH), torch.ones(B, N, 2, DH))


def test_append_rejects_wrong_shape_and_dtype():
    cache = KVCache.empty(B, N, S_MAX, DH)
    with pytest.raises(ValueError, match=r"k \(2, 3, 1, 5\) and v \(2, 3, 1, 5\) must both be .*= \(2, 3, 4\)"):
        cache.append(torch.ones(B, N, 1, 5), torch.ones(B, N, 1, 5))
    with pytest.raises(ValueError, match=r"k \(2, 3, 1, 4\) and v \(2, 3, 2, 4\)"):
        cache.append(torch.ones(B, N, 1, DH), torch.ones(B, N, 2, DH))
    with pytest.raises(ValueError, match=r"must have the cache's dtype \(torch.float32\)"):
        cache.append(_rand(B, N, 1, DH), _rand(B, N, 1, DH))


def test_empty_rejects_nonpositive_sizes():
    with pytest.raises(ValueError, match=r"^max_length must be >= 1, got 0$"):
        KVCache.empty(B, N, 0, DH)


def test_select_rows_reorders_batch_and_copies():
    torch.manual_seed(1)
    k, v = _rand(B, N, 3, DH), _rand(B, N, 3, DH)
    cache = KVCache.empty(B, N, S_MAX, DH, dtype=torch.float64).append(k, v)
    index = torch.tensor([1, 0, 1])
    beams = select_rows(cache, index)
    assert isinstance(beams, KVCache) and beams.length == 3
    assert_close(beams.keys_so_far, k[index])
    assert_close(beams.values_so_far, v[index])
    # the reordered cache owns its buffers: appending to it leaves the original alone
    beams.append(_rand(3, N, 1, DH), _rand(3, N, 1, DH))
    assert not cache.keys[:, :, 3].any()
