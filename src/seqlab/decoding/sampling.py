"""Ancestral sampling of the next token from warped logits (temperature, top-k, top-p, min-p)."""

from __future__ import annotations

import torch
from torch import Tensor

from seqlab.decoding.processors import logits_processor

__all__ = ["sample", "sample_from"]


def sample(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Draw one token per row from softmax(warp(logits)), the warpers applied in transformers' order:
    temperature, top-k, top-p, min-p (see ``seqlab.decoding.processors``).

    Args:
        logits: (B, V) unnormalised next-token scores.
        temperature: tau > 0; logits are divided by it.
        top_k: keep the k most probable tokens (None: all).
        top_p: keep the smallest set whose mass reaches p, p in (0, 1] (None: all).
        min_p: keep tokens with probability >= min_p * the top probability, in [0, 1] (None: all).
        generator: the source of randomness; the same seed gives the same tokens.
    Returns: (B,) long, the sampled token ids.
    Raises: ConfigError for temperature <= 0, top_k < 1, top_p outside (0, 1] or min_p outside [0, 1]
        (e.g. ``top_p (1.5) must be a finite number > 0.0 and <= 1.0``).

    >>> g = torch.Generator().manual_seed(0)
    >>> sample(torch.tensor([[0.0, 5.0, 1.0], [9.0, 0.0, 0.0]]), top_k=1, generator=g)
    tensor([1, 0])
    """
    warp = logits_processor(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    return sample_from(warp(logits, logits.new_zeros(logits.shape[0], 0, dtype=torch.long), None), generator=generator)


def sample_from(logits: Tensor, *, generator: torch.Generator | None = None) -> Tensor:
    """Draw one token per row from softmax(logits), computed in float32 at least; logits (B, V), already warped
    (``sample`` and ``generate`` warp them first). Returns (B,) long."""
    probs = torch.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)
