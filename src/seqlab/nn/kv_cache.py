"""Key/value cache for incremental decoding with self-attention.

At decoder step t, self-attention needs the keys and values of steps 0..t; they do not change once computed,
so the cache keeps them and each step computes only its own. The cache is an explicit value passed in and
returned (no module state); its batch dimension is 0 in every tensor, so ``seqlab.decoding.select_rows``
reorders it for beam search.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class KVCache(NamedTuple):
    """Preallocated keys and values of one self-attention layer; the first ``length`` steps are filled.

    keys: (B, N, S_max, Dh).  values: (B, N, S_max, Dh).  length: steps filled so far (0 <= length <= S_max).

    ``append`` writes into the buffers in place (no reallocation per step) and returns a cache with the new
    length. The views of a cache stop at its own length, so an earlier cache value still reads correctly, but
    appending twice to the same cache value overwrites the same slots: reorder or branch with ``select_rows``
    (which copies) before appending to both branches. The in-place writes make the cache an inference tool:
    autograd rejects a backward pass through more than one append.
    """

    keys: Tensor
    values: Tensor
    length: int

    @classmethod
    def empty(
        cls,
        batch_size: int,
        num_heads: int,
        max_length: int,
        head_dim: int,
        *,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> KVCache:
        """An empty cache with room for ``max_length`` steps (zeros, length 0).

        Raises: ValueError if any size is < 1.
        """
        sizes = {"batch_size": batch_size, "num_heads": num_heads, "max_length": max_length, "head_dim": head_dim}
        for name, size in sizes.items():
            if size < 1:
                raise ValueError(f"{name} must be >= 1, got {size}")
        shape = (batch_size, num_heads, max_length, head_dim)  # (B, N, S_max, Dh)
        keys = torch.zeros(shape, dtype=dtype, device=device)
        return cls(keys, torch.zeros_like(keys), 0)

    @property
    def max_length(self) -> int:
        """S_max, the steps the buffers can hold."""
        return self.keys.shape[2]

    @property
    def keys_so_far(self) -> Tensor:
        """(B, N, length, Dh) view of the filled keys."""
        return self.keys[:, :, : self.length]

    @property
    def values_so_far(self) -> Tensor:
        """(B, N, length, Dh) view of the filled values."""
        return self.values[:, :, : self.length]

    def append(self, k: Tensor, v: Tensor) -> KVCache:
        """Write k, v (B, N, t, Dh) at steps [length, length + t) and return the cache with length + t.

        Raises: ValueError if k or v is not (B, N, t, Dh) with the cache's B, N, Dh (message shows both shapes),
            their dtype is not the cache's, or length + t > max_length.
        """
        B, N, _, Dh = self.keys.shape
        if k.dim() != 4 or k.shape != v.shape or (k.shape[0], k.shape[1], k.shape[3]) != (B, N, Dh):
            raise ValueError(
                f"k {tuple(k.shape)} and v {tuple(v.shape)} must both be (B, N, t, Dh) "
                f"with (B, N, Dh) = ({B}, {N}, {Dh})"
            )
        if k.dtype != self.keys.dtype or v.dtype != self.keys.dtype:
            raise ValueError(f"k ({k.dtype}) and v ({v.dtype}) must have the cache's dtype ({self.keys.dtype})")
        t = k.shape[2]
        end = self.length + t
        if end > self.max_length:
            raise ValueError(
                f"KVCache overflow: length ({self.length}) + new steps ({t}) > max_length ({self.max_length})"
            )
        self.keys[:, :, self.length : end] = k
        self.values[:, :, self.length : end] = v
        return KVCache(self.keys, self.values, end)
