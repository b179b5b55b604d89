import pytest
import torch
from torch.testing import assert_close

from seqlab.models.interfaces import select_rows
from seqlab.nn.kv_cache import MIN_CAPACITY, KVCache, StaticKVCache
from seqlab.nn.multi_head_attention import MultiHeadAttention

B, N, DH = 2, 3, 4


def _rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64)


def test_empty_holds_zero_steps():
    cache = KVCache.empty(B, N, DH, dtype=torch.float64)
    assert cache.keys.shape == cache.values.shape == (B, N, 0, DH)
    assert cache.keys.dtype == torch.float64
    assert cache.length == 0


def test_append_concatenates_and_leaves_earlier_caches_unchanged():
    torch.manual_seed(0)
    k1, v1, k2, v2 = _rand(B, N, 2, DH), _rand(B, N, 2, DH), _rand(B, N, 1, DH), _rand(B, N, 1, DH)
    empty = KVCache.empty(B, N, DH, dtype=torch.float64)
    first = empty.append(k1, v1)
    second = first.append(k2, v2)
    branch = first.append(v2, k2)  # a second branch from the same cache
    assert (empty.length, first.length, second.length, branch.length) == (0, 2, 3, 3)
    assert_close(second.keys, torch.cat([k1, k2], dim=2))
    assert_close(second.values, torch.cat([v1, v2], dim=2))
    assert_close(branch.keys, torch.cat([k1, v2], dim=2))
    assert_close(first.keys, k1)
    assert_close(first.values, v1)


def test_append_rejects_wrong_shape_and_dtype():
    cache = KVCache.empty(B, N, DH)
    with pytest.raises(ValueError, match=r"k \(2, 3, 1, 5\) and v \(2, 3, 1, 5\) must both be .*= \(2, 3, 4\)"):
        cache.append(torch.ones(B, N, 1, 5), torch.ones(B, N, 1, 5))
    with pytest.raises(ValueError, match=r"k \(2, 3, 1, 4\) and v \(2, 3, 2, 4\)"):
        cache.append(torch.ones(B, N, 1, DH), torch.ones(B, N, 2, DH))
    with pytest.raises(ValueError, match=r"must have the cache's dtype \(torch.float32\)"):
        cache.append(_rand(B, N, 1, DH), _rand(B, N, 1, DH))


def test_empty_rejects_nonpositive_sizes():
    with pytest.raises(ValueError, match=r"^head_dim \(0\) must be an integer >= 1$"):
        KVCache.empty(B, N, 0)
    with pytest.raises(ValueError, match=r"^batch_size \(0\) must be an integer >= 1$"):
        KVCache.empty(0, N, DH)


def test_select_rows_reorders_the_batch():
    torch.manual_seed(1)
    k, v = _rand(B, N, 3, DH), _rand(B, N, 3, DH)
    cache = KVCache.empty(B, N, DH, dtype=torch.float64).append(k, v)
    index = torch.tensor([1, 0, 1])
    beams = select_rows(cache, index)
    assert isinstance(beams, KVCache) and beams.length == 3
    assert_close(beams.keys, k[index])
    assert_close(beams.values, v[index])


def test_backward_through_two_appends_equals_the_uncached_computation():
    """Gradients flow through the cache: a prompt of 3 steps, then 2 more, equals one causal pass of 5."""
    torch.manual_seed(2)
    D, T = N * DH, 5
    mha = MultiHeadAttention(D, N).double()
    x = _rand(B, T, D)

    x_full = x.clone().requires_grad_()
    full = mha(x_full, causal=True).output
    full.square().sum().backward()
    expected = [x_full.grad, *(p.grad.clone() for p in mha.parameters())]
    mha.zero_grad()

    x_cached = x.clone().requires_grad_()
    cache = KVCache.empty(B, N, DH, dtype=torch.float64)
    first = mha(x_cached[:, :3], causal=True, cache=cache)
    second = mha(x_cached[:, 3:], causal=True, cache=first.cache)
    assert second.cache.length == T
    cached = torch.cat([first.output, second.output], dim=1)
    assert_close(cached, full)
    cached.square().sum().backward()
    for got, want in zip([x_cached.grad, *(p.grad for p in mha.parameters())], expected, strict=True):
        assert_close(got, want)
    assert x_cached.grad[:, :3].abs().sum() > 0  # the first chunk's keys were reached through the cache


def test_appends_without_autograd_write_in_place_into_one_growing_buffer():
    """Step-by-step appends equal one torch.cat of all steps; the buffer doubles only when full, and every cache
    value along the way still holds exactly its own steps."""
    torch.manual_seed(3)
    steps = [(_rand(B, N, 1, DH), _rand(B, N, 1, DH)) for _ in range(MIN_CAPACITY + 1)]
    caches = [KVCache.empty(B, N, DH, dtype=torch.float64)]
    with torch.no_grad():
        for k, v in steps:
            caches.append(caches[-1].append(k, v))
    first_buffer = caches[1].buffer
    assert all(c.buffer is first_buffer for c in caches[1 : MIN_CAPACITY + 1])  # written in place
    assert caches[-1].buffer is not first_buffer and caches[-1].buffer.capacity == 2 * (MIN_CAPACITY + 1)
    for n, cache in enumerate(caches):
        assert_close(
            cache.keys, torch.cat([KVCache.empty(B, N, DH, dtype=torch.float64).keys, *(k for k, _ in steps[:n])], 2)
        )
        assert_close(
            cache.values,
            torch.cat([KVCache.empty(B, N, DH, dtype=torch.float64).values, *(v for _, v in steps[:n])], 2),
        )


def test_appending_to_an_older_cache_copies_instead_of_overwriting_a_newer_one():
    torch.manual_seed(4)
    k1, k2, k3 = _rand(B, N, 2, DH), _rand(B, N, 1, DH), _rand(B, N, 1, DH)
    with torch.inference_mode():
        first = KVCache.empty(B, N, DH, dtype=torch.float64, capacity=8).append(k1, k1)
        second = first.append(k2, k2)
        branch = first.append(k3, k3)  # first no longer holds every step its buffer wrote
        assert second.buffer is first.buffer and branch.buffer is not first.buffer
        assert_close(second.keys, torch.cat([k1, k2], dim=2))
        assert_close(branch.values, torch.cat([k1, k3], dim=2))


def test_select_rows_keeps_the_capacity_and_equals_the_generic_select_rows():
    torch.manual_seed(5)
    k, v, k_new = _rand(B, N, 3, DH), _rand(B, N, 3, DH), _rand(3, N, 1, DH)
    index = torch.tensor([1, 0, 1])
    with torch.no_grad():
        cache = KVCache.empty(B, N, DH, dtype=torch.float64, capacity=10).append(k, v)
        beams = cache.select_rows(index)
        assert beams.buffer.capacity == 10 and beams.buffer is not cache.buffer
        generic = select_rows(cache, index)
        assert_close(beams.keys, generic.keys)
        assert_close(beams.values, generic.values)
        grown = beams.append(k_new, k_new)
    assert grown.buffer is beams.buffer  # the next step writes in place
    assert_close(grown.keys, torch.cat([k[index], k_new], dim=2))
    assert_close(cache.keys, k)  # the original rows are untouched


def test_a_buffer_made_in_inference_mode_is_copied_when_appended_to_outside_it():
    """torch forbids in-place writes to inference tensors outside inference mode, so append copies instead."""
    k = _rand(B, N, 1, DH)
    with torch.inference_mode():
        cache = KVCache.empty(B, N, DH, dtype=torch.float64, capacity=4).append(k, k)
    with torch.no_grad():
        grown = cache.append(k, k)
    assert grown.buffer is not cache.buffer
    assert_close(grown.keys, torch.cat([k, k], dim=2))


def test_empty_rejects_a_nonpositive_capacity():
    with pytest.raises(ValueError, match=r"^capacity \(0\) must be None or an integer >= 1$"):
        KVCache.empty(B, N, DH, capacity=0)


def test_select_rows_of_a_state_reorders_its_caches_in_their_buffers_as_index_select_would():
    """The generic ``select_rows`` hands a KVCache to ``KVCache.select_rows`` (capacity kept, so the next no-grad
    append writes in place); the rows equal plain indexing."""
    torch.manual_seed(6)
    k, v, k_new = _rand(B, N, 3, DH), _rand(B, N, 3, DH), _rand(3, N, 1, DH)
    index = torch.tensor([1, 1, 0])
    with torch.no_grad():
        cache = KVCache.empty(B, N, DH, dtype=torch.float64, capacity=10).append(k, v)
        picked = select_rows({"caches": [cache], "position": torch.arange(B)}, index)
        beams = picked["caches"][0]
        assert beams.buffer.capacity == 10
        assert torch.equal(beams.keys, k[index]) and torch.equal(beams.values, v[index])
        assert torch.equal(picked["position"], index)
        assert beams.append(k_new, k_new).buffer is beams.buffer
    assert torch.equal(cache.keys, k)


def _reordered_in_place(cache: KVCache, index: list[int]) -> KVCache:
    """cache.select_rows(index, in_place=True), checked against index_select of a copy taken before."""
    keys, values = cache.keys.clone(), cache.values.clone()
    reordered = cache.select_rows(torch.tensor(index), in_place=True)
    assert reordered.buffer is cache.buffer  # no new buffer
    assert torch.equal(reordered.keys, keys[index]) and torch.equal(reordered.values, values[index])
    return reordered


def test_in_place_select_rows_follows_cycles_and_repeated_sources_over_a_beam_search_like_chain():
    """Every reorder of a chain of reorders and appends equals plain indexing of the rows, although only the steps
    after those that each moved row shares with its source are moved: a cycle (0 -> 1 -> 2 -> 0), a swap, repeated
    sources, rows that keep their place, and sources whose steps differ from the first one (nothing shared)."""
    torch.manual_seed(7)
    R = 5
    with torch.no_grad():
        cache = KVCache.empty(1, N, DH, dtype=torch.float64, capacity=4).append(_rand(1, N, 3, DH), _rand(1, N, 3, DH))
        cache = cache.select_rows(torch.zeros(R, dtype=torch.long))  # beams: copies of one row share its 3 steps
        assert torch.equal(cache.buffer.common, torch.full((R, R), 3)) and cache.shared_steps() == 3
        reference_k, reference_v = cache.keys.clone(), cache.values.clone()
        indices = [[1, 2, 0, 3, 4], [0, 0, 1, 3, 3], [4, 3, 2, 1, 0], [0, 1, 2, 3, 4], [2, 2, 2, 2, 2], [3, 0, 4, 1, 2]]
        for step, index in enumerate(indices * 2):
            k, v = _rand(R, N, 1 + step % 2, DH), _rand(R, N, 1 + step % 2, DH)  # the buffer grows past its capacity
            cache = cache.append(k, v)
            reference_k, reference_v = torch.cat([reference_k, k], dim=2), torch.cat([reference_v, v], dim=2)
            cache = _reordered_in_place(cache, index)
            reference_k, reference_v = reference_k[index], reference_v[index]
            assert torch.equal(cache.keys, reference_k) and torch.equal(cache.values, reference_v)


def test_select_rows_of_layers_equals_each_cache_reordered_alone_and_shares_one_plan():
    """Three layers' caches reordered together, in place and by copy, over a chain like the one above: each equals
    plain indexing, the layers' buffers hold one ``common`` after every reorder, and it (with the steps every row
    shares) is what reordering one cache alone records."""
    torch.manual_seed(10)
    R = 4
    with torch.no_grad():
        start = KVCache.empty(1, N, DH, dtype=torch.float64, capacity=4)
        layers = [start.append(_rand(1, N, 2, DH), _rand(1, N, 2, DH)) for _ in range(3)]
        layers = KVCache.select_rows_of(layers, torch.zeros(R, dtype=torch.long), in_place=True)  # R != 1: copies
        alone = layers[0].select_rows(torch.arange(R))  # a copy, reordered by itself below
        references = [(c.keys.clone(), c.values.clone()) for c in layers]
        for index in [[1, 0, 3, 2], [0, 0, 2, 2], [3, 1, 1, 0], [0, 1, 2, 3]] * 2:
            index = torch.tensor(index)
            steps = [(_rand(R, N, 1, DH), _rand(R, N, 1, DH)) for _ in layers]  # the buffers grow past 4 steps
            layers = [c.append(k, v) for c, (k, v) in zip(layers, steps, strict=True)]
            alone = alone.append(*steps[0])
            references = [
                (torch.cat([rk, k], dim=2)[index], torch.cat([rv, v], dim=2)[index])
                for (rk, rv), (k, v) in zip(references, steps, strict=True)
            ]
            buffers = [c.buffer for c in layers]
            layers = KVCache.select_rows_of(layers, index, in_place=True)
            alone = alone.select_rows(index, in_place=True)
            assert [c.buffer for c in layers] == buffers  # in place
            for cache, (rk, rv) in zip(layers, references, strict=True):
                assert torch.equal(cache.keys, rk) and torch.equal(cache.values, rv)
                assert cache.buffer.common is layers[0].buffer.common
            assert torch.equal(layers[0].buffer.common, alone.buffer.common)
            assert layers[0].shared_steps() == alone.shared_steps() == int(alone.buffer.common.min())
        copied = KVCache.select_rows_of(layers, torch.tensor([2, 2, 1, 0]))
        assert all(c.buffer is not old.buffer for c, old in zip(copied, layers, strict=True))
        assert all(torch.equal(c.keys, old.keys[[2, 2, 1, 0]]) for c, old in zip(copied, layers, strict=True))


def test_in_place_select_rows_records_the_steps_rows_share_and_moves_only_the_others():
    """After the steps two rows share, a stale value there is left alone: only the differing steps move."""
    torch.manual_seed(8)
    with torch.no_grad():
        cache = KVCache.empty(2, N, DH, dtype=torch.float64, capacity=8).append(_rand(2, N, 2, DH), _rand(2, N, 2, DH))
        cache = cache.select_rows(torch.tensor([0, 0, 1]))  # rows 0 and 1 share 2 steps, row 2 none with them
        assert cache.buffer.common.tolist() == [[2, 2, 0], [2, 2, 0], [0, 0, 2]] and cache.shared_steps() == 0
        cache = cache.append(_rand(3, N, 1, DH), _rand(3, N, 1, DH))
        step = cache.keys[:, :, 2].clone()
        cache.keys[1, :, :2] = float("nan")  # not moved by a swap of rows 0 and 1, which share these steps
        swapped = cache.select_rows(torch.tensor([1, 0, 2]), in_place=True)
        assert swapped.keys[1, :, :2].isnan().all() and not swapped.keys[0].isnan().any()
        assert torch.equal(swapped.keys[:, :, 2], step[[1, 0, 2]])
        assert swapped.buffer.common.tolist() == [[3, 2, 0], [2, 3, 0], [0, 0, 3]]


def test_in_place_select_rows_copies_when_it_cannot_reorder_the_buffer():
    """A different number of rows, a cache that no longer holds every step of its buffer, or recorded gradients:
    a new buffer (or exact tensors), and the cache given is unchanged."""
    torch.manual_seed(9)
    k = _rand(B, N, 2, DH)
    with torch.no_grad():
        cache = KVCache.empty(B, N, DH, dtype=torch.float64, capacity=8).append(k, k)
        grown = cache.select_rows(torch.tensor([1, 1, 0]), in_place=True)
        assert grown.buffer is not cache.buffer and torch.equal(grown.keys, k[[1, 1, 0]])
        longer = cache.append(k, k)
        older = cache.select_rows(torch.tensor([1, 0]), in_place=True)  # longer wrote past cache's steps
        assert older.buffer is not cache.buffer and torch.equal(older.keys, k[[1, 0]])
        assert torch.equal(cache.keys, k) and torch.equal(longer.keys[:, :, :2], k)
    tracked = KVCache.empty(B, N, DH, dtype=torch.float64).append(k.requires_grad_(), k)
    assert tracked.select_rows(torch.tensor([1, 0]), in_place=True).buffer is None


# StaticKVCache: fixed-capacity buffers for a compiled step.


def test_static_cache_holds_a_copy_and_appends_in_place_at_its_length():
    torch.manual_seed(0)
    k0, v0, k1, v1, k2, v2 = _rand(B, N, 3, DH), _rand(B, N, 3, DH), *(_rand(B, N, 1, DH) for _ in range(4))
    dynamic = KVCache(k0, v0)
    static = StaticKVCache.holding(dynamic, 6)
    assert static.capacity == 6 and static.length.tolist() == [3]
    assert_close(static.keys, torch.cat([k0, torch.zeros(B, N, 3, DH, dtype=torch.float64)], dim=2))
    first = static.append(k1, v1)
    second = first.append(k2, v2)
    assert second.keys.data_ptr() == static.keys.data_ptr()  # in place, one buffer
    assert (first.length.tolist(), second.length.tolist()) == ([4], [5])
    grown = dynamic.append(k1, v1).append(k2, v2)
    assert_close(second.keys[:, :, :5], grown.keys)
    assert_close(second.values[:, :, :5], grown.values)
    assert_close(static.keys[:, :, :3], k0)  # an older value keeps its own steps
    assert not second.keys[:, :, 5:].any()


def test_attention_over_a_static_cache_masked_to_its_length_equals_attention_over_the_dynamic_cache():
    torch.manual_seed(0)
    attention = MultiHeadAttention(N * DH, N).double()
    x, y = _rand(B, 4, N * DH), _rand(B, 1, N * DH)
    dynamic = attention(x, cache=KVCache.empty(B, N, DH, dtype=torch.float64), causal=True).cache
    expected = attention(y, cache=dynamic, causal=True).output
    static = StaticKVCache.holding(dynamic, 8)
    keep = torch.zeros(B, 8, dtype=torch.bool)
    keep[:, :5] = True  # the 4 cached steps and slot 4, which this call writes
    out = attention(y, cache=static, causal=True, keep_mask=keep)
    assert_close(out.output, expected)
    assert out.cache.length.tolist() == [5]


def test_static_cache_refuses_a_capacity_without_room_and_a_wrong_shape():
    cache = KVCache(_rand(B, N, 3, DH), _rand(B, N, 3, DH))
    with pytest.raises(ValueError, match=r"^capacity \(3\) must exceed the 3 steps the cache holds$"):
        StaticKVCache.holding(cache, 3)
    static = StaticKVCache.holding(cache, 4)
    with pytest.raises(ValueError, match=r"k \(2, 3, 1, 5\) and v \(2, 3, 1, 5\) must both be .*= \(2, 3, 4\)"):
        static.append(_rand(B, N, 1, 5), _rand(B, N, 1, 5))


def test_static_select_rows_reorders_whole_buffers_into_new_ones():
    torch.manual_seed(0)
    static = StaticKVCache.holding(KVCache(_rand(3, N, 2, DH), _rand(3, N, 2, DH)), 5)
    index = torch.tensor([2, 0, 2])
    selected = static.select_rows(index)
    assert_close(selected.keys, static.keys[index])
    assert_close(selected.values, static.values[index])
    assert selected.keys.data_ptr() != static.keys.data_ptr()
    selected.append(_rand(3, N, 1, DH), _rand(3, N, 1, DH))
    assert not static.keys[:, :, 2].any()  # the original's buffers are not the reordered cache's
