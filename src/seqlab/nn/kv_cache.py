"""Key/value cache for incremental decoding with self-attention.

At decoder step t, self-attention needs the keys and values of steps 0..t; they do not change once computed,
so the cache keeps them and each step computes only its own. The cache is an immutable value passed in and
returned (no module state, no in-place writes): ``append`` builds a new cache with ``torch.cat``, so an earlier
cache value never changes, two branches can grow from one cache, and gradients flow through every append. Its
batch dimension is 0 in every tensor, so ``select_rows`` reorders it for beam search.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from seqlab.validation import check_int


class KVCache(NamedTuple):
    """Keys and values of one self-attention layer for the S steps seen so far.

    keys: (B, N, S, Dh).  values: (B, N, S, Dh).  ``length`` is S.
    """

    keys: Tensor
    values: Tensor

    @classmethod
    def empty(
        cls,
        batch_size: int,
        num_heads: int,
        head_dim: int,
        *,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> KVCache:
        """A cache of S = 0 steps: keys and values (B, N, 0, Dh).

        Raises: ValueError if batch_size, num_heads or head_dim is not an integer >= 1.
        """
        check_int("batch_size", batch_size)
        check_int("num_heads", num_heads)
        check_int("head_dim", head_dim)
        keys = torch.zeros(batch_size, num_heads, 0, head_dim, dtype=dtype, device=device)  # (B, N, 0, Dh)
        return cls(keys, torch.zeros_like(keys))

    @property
    def length(self) -> int:
        """S, the steps held."""
        return self.keys.shape[2]

    def append(self, k: Tensor, v: Tensor) -> KVCache:
        """A new cache holding this one's steps followed by k, v (B, N, t, Dh): S + t steps. This cache is unchanged.

        Raises: ValueError if k or v is not (B, N, t, Dh) with the cache's B, N, Dh (message shows both shapes),
            or their dtype is not the cache's.
        """
        B, N, _, Dh = self.keys.shape
        if k.dim() != 4 or k.shape != v.shape or (k.shape[0], k.shape[1], k.shape[3]) != (B, N, Dh):
            raise ValueError(
                f"k {tuple(k.shape)} and v {tuple(v.shape)} must both be (B, N, t, Dh) "
                f"with (B, N, Dh) = ({B}, {N}, {Dh})"
            )
        if k.dtype != self.keys.dtype or v.dtype != self.keys.dtype:
            raise ValueError(f"k ({k.dtype}) and v ({v.dtype}) must have the cache's dtype ({self.keys.dtype})")
        return KVCache(torch.cat([self.keys, k], dim=2), torch.cat([self.values, v], dim=2))  # (B, N, S + t, Dh)
