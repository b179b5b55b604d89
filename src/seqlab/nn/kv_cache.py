"""Key/value cache for incremental decoding with self-attention.

At decoder step t, self-attention needs the keys and values of steps 0..t; they do not change once computed,
so the cache keeps them and each step computes only its own. The cache is a value passed in and returned:
``append`` returns a new cache, an earlier cache value never changes, two branches can grow from one cache, and
gradients flow through every append. Its batch dimension is 0 in every tensor, so ``select_rows`` (or the
cheaper ``KVCache.select_rows``) reorders it for beam search.

How ``append`` stores the steps:
- While autograd records (a key or value requires grad), with ``torch.cat`` into a new tensor of exactly S + t
  steps, so the graph reaches every appended step.
- Otherwise (``torch.no_grad`` / ``torch.inference_mode``, i.e. decoding) into a ``KVBuffer`` with spare steps:
  the new steps are written in place after the S held ones, and the buffer doubles when full (a dynamic array,
  Cormen et al., "Introduction to Algorithms", sec. 17.4), so a sequence of n steps copies O(n) key/value steps
  in all instead of the O(n^2) of one ``torch.cat`` per step. The buffer
  records how many steps were written; only the cache that holds all of them may write in place, so appending
  to an older cache value (a second branch) copies into a new buffer and the first branch stays intact.

Beam search reorders the rows at every step, and most of what it reorders changes nothing: beams that descend
from one hypothesis hold copies of the same keys and values up to the step where they parted, usually a few steps
back. A ``KVBuffer`` therefore records, for every pair of rows, how many leading steps they hold as copies of each
other (``common``); ``select_rows(index, in_place=True)`` then permutes the rows in place over the steps after the
last one that every moved row shares with its source, and only those (copied through a gathered temporary, so
that cycles and repeated sources are safe), instead of copying every step into a new buffer.

``StaticKVCache`` is the other layout, for a compiled decoding step (``torch.compile``): buffers of a fixed
capacity C whose length is a tensor, so that every step has the same shapes and one graph serves them all
(what transformers calls a static cache; gpt-fast's ``KVCache``). Attention then runs over all C steps, the
caller masking those not yet written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from seqlab.validation import check_int

MIN_CAPACITY = 16  # steps of the smallest buffer a no-grad append allocates


class KVBuffer:
    """Preallocated keys and values, (B, N, capacity, Dh) each, of which steps [0, written) hold data.

    Shared by the caches of one decoding chain; each cache's keys and values are views of its first S steps.
    common: (B, B) long, common[i, j] the leading steps that rows i and j hold as copies of one another (equal
    bit for bit because one was copied from the other, or both from one row), or None when nothing is known
    (as if 0 everywhere). ``KVCache.select_rows`` sets it; appended steps leave it as it is. least: its smallest
    entry (0 for None), the steps that every row shares, kept as an int so that a step reads it without a sync.
    """

    def __init__(
        self, keys: Tensor, values: Tensor, written: int, common: Tensor | None = None, least: int = 0
    ) -> None:
        self.keys, self.values, self.written, self.common, self.least = keys, values, written, common, least

    @property
    def capacity(self) -> int:
        """The most steps the buffer holds."""
        return self.keys.shape[2]

    @classmethod
    def holding(
        cls, keys: Tensor, values: Tensor, capacity: int, common: Tensor | None = None, least: int = 0
    ) -> KVBuffer:
        """A buffer of ``capacity`` >= S steps whose first S steps are copies of keys, values (B, N, S, Dh), whose
        rows share ``common`` steps, ``least`` of them all (see the class)."""
        B, N, S, Dh = keys.shape
        buffer = cls(keys.new_empty(B, N, capacity, Dh), values.new_empty(B, N, capacity, Dh), S, common, least)
        buffer.keys[:, :, :S] = keys
        buffer.values[:, :, :S] = values
        return buffer

    def cache(self) -> KVCache:
        """The cache of the ``written`` steps: views into this buffer."""
        S = self.written
        return KVCache(self.keys.narrow(2, 0, S), self.values.narrow(2, 0, S), self)


class KVCache(NamedTuple):
    """Keys and values of one self-attention layer for the S steps seen so far.

    keys: (B, N, S, Dh).  values: (B, N, S, Dh).  ``length`` is S.
    buffer: the ``KVBuffer`` whose first S steps keys and values are views of, or None (exactly-sized tensors);
        an implementation detail of ``append``, which any cache may ignore.
    """

    keys: Tensor
    values: Tensor
    buffer: KVBuffer | None = None

    @classmethod
    def empty(
        cls,
        batch_size: int,
        num_heads: int,
        head_dim: int,
        *,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        capacity: int | None = None,
    ) -> KVCache:
        """A cache of S = 0 steps: keys and values (B, N, 0, Dh).

        capacity: steps to reserve for no-grad appends (e.g. the model's context length), so decoding writes in
            place from the first step; None reserves nothing until the first no-grad append.
        Raises: ValueError if batch_size, num_heads, head_dim or capacity is not an integer >= 1.
        """
        check_int("batch_size", batch_size)
        check_int("num_heads", num_heads)
        check_int("head_dim", head_dim)
        check_int("capacity", capacity, optional=True)
        keys = torch.zeros(batch_size, num_heads, 0, head_dim, dtype=dtype, device=device)  # (B, N, 0, Dh)
        if capacity is None:
            return cls(keys, torch.zeros_like(keys))
        return KVBuffer.holding(keys, keys, capacity).cache()

    @property
    def length(self) -> int:
        """S, the steps held."""
        return self.keys.shape[2]

    def append(self, k: Tensor, v: Tensor) -> KVCache:
        """A new cache holding this one's steps followed by k, v (B, N, t, Dh): S + t steps. This cache is unchanged.

        Raises:
            ValueError: if k or v is not (B, N, t, Dh) with the cache's B, N, Dh (message shows both shapes),
                or their dtype is not the cache's.
        """
        keys, values, buffer = self
        S = keys.shape[2]
        _check_step(keys, k, v)
        shape = k.shape
        # An exported graph takes and returns caches of exactly S steps: no buffer, no writes in place.
        exporting = torch.compiler.is_exporting()
        if exporting or (torch.is_grad_enabled() and (keys.requires_grad or k.requires_grad or v.requires_grad)):
            return KVCache(torch.cat([keys, k], dim=2), torch.cat([values, v], dim=2))  # (B, N, S + t, Dh)
        t = shape[2]
        if not self._owns(buffer) or S + t > buffer.capacity:
            common, least = (None, 0) if buffer is None else (buffer.common, buffer.least)  # the same rows, copied
            buffer = KVBuffer.holding(keys, values, max(2 * (S + t), MIN_CAPACITY), common, least)
        buffer.keys[:, :, S : S + t] = k  # one call each (narrow and copy_ are two)
        buffer.values[:, :, S : S + t] = v
        buffer.written = S + t
        return buffer.cache()

    def select_rows(self, index: Tensor, *, in_place: bool = False) -> KVCache:
        """The cache of rows ``index`` (B',), in that order (what ``seqlab.models.select_rows`` computes), keeping
        this cache's spare capacity so that the next no-grad ``append`` still writes in place.

        in_place: give this cache up (beam search's reorder, whose caller never reads the old state again). Where
        the rows keep their number (B' = B), no gradient is recorded and this cache may write into its buffer (as
        for ``append``), the rows are permuted within the buffer, over the steps after the last one that every
        moved row shares with its source (``KVBuffer.common``), and the result shares the buffer: this cache's
        tensors, and any other view of the buffer, then hold the reordered rows. Otherwise (and by default) the
        rows are copied into a new buffer and this cache is unchanged.
        """
        return self._select_rows(index, in_place, {})

    @staticmethod
    def select_rows_of(caches: Sequence[KVCache], index: Tensor, *, in_place: bool = False) -> list[KVCache]:
        """``[cache.select_rows(index, in_place=in_place) for cache in caches]``, with the rows' common steps after
        the reorder, and the first step to move, worked out once for all the caches whose buffers hold one
        ``common`` at one length (a model's layers, which beam search reorders together; their buffers then share
        the new ``common`` too), instead of once per cache."""
        plans: dict[tuple[int, int], _Reorder] = {}
        return [cache._select_rows(index, in_place, plans) for cache in caches]

    def _select_rows(self, index: Tensor, in_place: bool, plans: dict[tuple[int, int], _Reorder]) -> KVCache:
        """``select_rows``, taking the reorder's plan from ``plans`` (keyed by the buffer's ``common`` and S) or
        adding it there."""
        keys, values, buffer = self
        if buffer is None or keys.requires_grad:
            return KVCache(keys.index_select(0, index), values.index_select(0, index))
        B, N, S, Dh = keys.shape
        key = (id(buffer.common), S)
        plan = plans.get(key)
        if plan is None or plan.source is not buffer.common:
            plan = plans[key] = _Reorder.of(buffer.common, index, S)
        if in_place and index.shape[0] == B and self._owns(buffer):
            start = plan.start
            if start < S:  # steps [start, S) differ between some row and its source
                for held in (keys, values):
                    differing = held.narrow(2, start, S - start)
                    differing.copy_(differing.index_select(0, index))  # gathered first: cycles and repeats are safe
            buffer.common, buffer.least = plan.common, plan.least
            return self
        shape = (index.shape[0], N, buffer.capacity, Dh)
        selected = KVBuffer(keys.new_empty(shape), values.new_empty(shape), S, plan.common, plan.least)
        cache = selected.cache()
        torch.index_select(keys, 0, index, out=cache.keys)
        torch.index_select(values, 0, index, out=cache.values)
        return cache

    def shared_steps(self) -> int:
        """The leading steps that every row holds as copies of one another (``KVBuffer.common``), which attention
        may read from one row for all; 0 when unknown or with fewer than 2 rows."""
        buffer = self.buffer
        if buffer is None or buffer.common is None or self.keys.shape[0] < 2:
            return 0
        return min(buffer.least, self.keys.shape[2])

    def _owns(self, buffer: KVBuffer | None) -> bool:
        """Whether this cache may write in place into ``buffer``: its keys and values are the buffer's first S steps
        (with S = 0 there is nothing to compare: torch gives empty tensors no address) and no other cache has
        written past them; for a buffer made under ``torch.inference_mode``, that mode must still be on (torch
        allows no in-place write to its tensors outside it)."""
        keys, values = self.keys, self.values
        return (
            buffer is not None
            and buffer.written == keys.shape[2]
            and keys.shape[0] == buffer.keys.shape[0]
            and (
                keys.shape[2] == 0
                or (keys.data_ptr() == buffer.keys.data_ptr() and values.data_ptr() == buffer.values.data_ptr())
            )
            and (torch.is_inference_mode_enabled() or not buffer.keys.is_inference())
        )


class StaticKVCache(NamedTuple):
    """Keys and values of one self-attention layer in buffers of a fixed capacity C, of which the first S steps
    hold data.

    keys: (B, N, C, Dh).  values: (B, N, C, Dh).  length: (1,) long, S, the steps held and the slot that the next
        ``append`` writes; a tensor, not an int, since an int would be a constant of a compiled step's graph (one
        graph per position).
    Attention over a static cache runs over all C steps: the caller's keep_mask (B, C) must be False at the steps
    not written (at and after S). Those hold zeros or stale steps, always finite numbers, so a masked step weighs
    exactly 0.

    ``append`` writes in place, at slot S, and returns the cache of S + t steps over the same buffers. An older
    value of the cache still holds its own S steps (nothing before slot S changes), but only one chain of appends
    may grow from one buffer: a second branch would write the same slots. ``select_rows`` gives new buffers, so
    beam search's reordered caches are each a chain of their own.
    """

    keys: Tensor
    values: Tensor
    length: Tensor

    @classmethod
    def holding(cls, cache: KVCache, capacity: int) -> StaticKVCache:
        """A static cache of ``capacity`` steps whose first S steps are copies of ``cache``'s (keys and values
        (B, N, S, Dh)); the others are zeros.

        Raises: ValueError if capacity is not an integer > S (no room for another step; the message shows both).
        """
        check_int("capacity", capacity)
        B, N, S, Dh = cache.keys.shape
        if capacity <= S:
            raise ValueError(f"capacity ({capacity}) must exceed the {S} steps the cache holds")
        keys = cache.keys.new_zeros(B, N, capacity, Dh)
        values = cache.values.new_zeros(B, N, capacity, Dh)
        keys[:, :, :S] = cache.keys
        values[:, :, :S] = cache.values
        return cls(keys, values, torch.tensor([S], device=keys.device))

    @property
    def capacity(self) -> int:
        """C, the most steps the buffers hold."""
        return self.keys.shape[2]

    def append(self, k: Tensor, v: Tensor) -> StaticKVCache:
        """Write k, v (B, N, t, Dh) into slots S .. S + t - 1 in place; return the cache of S + t steps.

        S + t must not exceed C: the cache's owner checks it (S is data here, and an index past C fails in the
        copy, or is undefined in a compiled graph).

        Raises:
            ValueError: if k or v is not (B, N, t, Dh) with the cache's B, N, Dh (message shows both shapes), or
                their dtype is not the cache's.
        """
        keys, values, length = self
        _check_step(keys, k, v)
        shape = k.shape
        t = shape[2]
        slots = length + torch.arange(t, device=length.device)  # (t,)
        keys.index_copy_(2, slots, k)
        values.index_copy_(2, slots, v)
        return StaticKVCache(keys, values, length + t)

    def select_rows(self, index: Tensor) -> StaticKVCache:
        """The cache of rows ``index`` (B',), in that order, in new buffers of the same capacity."""
        keys, values, length = self
        return StaticKVCache(keys.index_select(0, index), values.index_select(0, index), length)


class _Reorder(NamedTuple):
    """What selecting rows ``index`` (B',) works out from a buffer's ``common`` (``source``, (B, B) or None) and its
    S steps; the same for every buffer that holds that ``common`` at S steps.

    common: (B', B') the reordered rows' common steps; least: its smallest entry (S for one row); start: the first
    step where some row differs from its source (S when none does), from which an in-place reorder (B' = B) moves
    the rows.
    """

    source: Tensor | None
    common: Tensor
    least: int
    start: int

    @classmethod
    def of(cls, source: Tensor | None, index: Tensor, steps: int) -> _Reorder:
        common = _common_steps(source, index, steps)
        if source is not None and source.shape[0] != index.shape[0]:  # B' != B: no in-place reorder, no start
            return cls(source, common, int(common.min()), 0)
        # (B,) the steps row j shares with its source index[j]
        shared = torch.zeros_like(index) if source is None else source.gather(1, index.unsqueeze(1)).squeeze(1)
        rows = torch.arange(index.shape[0], device=index.device)
        least, start = torch.stack([common.min(), shared.masked_fill(index == rows, steps).amin()]).tolist()
        return cls(source, common, least, start)


def _common_steps(common: Tensor | None, index: Tensor, steps: int) -> Tensor:
    """``KVBuffer.common`` (B', B') of rows ``index`` (B',) of a buffer whose rows share ``common`` (B, B) steps
    (None: 0) and hold ``steps`` steps: rows taken from one row share all of them, others what their sources
    shared."""
    same = index.unsqueeze(1) == index.unsqueeze(0)  # (B', B')
    if common is None:
        return same.long() * steps
    return common.index_select(0, index).index_select(1, index).masked_fill(same, steps)


def _check_step(keys: Tensor, k: Tensor, v: Tensor) -> None:
    """Refuse a step k, v that is not (B, N, t, Dh) in the dtype of a cache whose keys are ``keys`` (B, N, S, Dh).

    Raises: ValueError showing both shapes, or the dtypes.
    """
    B, N, _, Dh = keys.shape
    shape = k.shape
    if len(shape) != 4 or shape != v.shape or shape[0] != B or shape[1] != N or shape[3] != Dh:
        raise ValueError(
            f"k {tuple(shape)} and v {tuple(v.shape)} must both be (B, N, t, Dh) with (B, N, Dh) = ({B}, {N}, {Dh})"
        )
    if k.dtype != keys.dtype or v.dtype != keys.dtype:
        raise ValueError(f"k ({k.dtype}) and v ({v.dtype}) must have the cache's dtype ({keys.dtype})")
