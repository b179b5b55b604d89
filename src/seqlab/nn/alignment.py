"""Monotonic-alignment priors for cross-attention, for transductions whose alignment runs near the diagonal
(grapheme-to-phoneme, text-to-speech):

- ``guided_attention_loss`` (training only; Tachibana et al. 2018, "Efficiently trainable text-to-speech ...
  with guided attention", eq. 1): a penalty on the attention a target step t gives source steps n far from the
  diagonal n / N = t / T,

      L_att = mean over (n, t) of A_nt W_nt,    W_nt = 1 - exp(-(n/N - t/T)^2 / (2 g^2));

- ``monotonic_alibi_bias`` (training and decoding): an ALiBi-style linear penalty (Press et al. 2022, sec. 3) added
  to the cross-attention scores, centred on the expected source position of each target step,

      bias_h(i, j) = -m_h |j - i / r|,    m_h = m_1 2^(-8 (h - 1) / N)   (h = 1..N, ``alibi_slopes``),

  where r (``length_ratio``) is the expected number of target tokens per source token (phonemes per letter), so
  target step i looks near source step i / r. The slopes follow ALiBi's geometric sequence, from m_1 down: one head
  held close to the diagonal, the others freer. A step i / r past the source's end penalises every source step by
  the same amount plus m_h (S - 1 - j), which the softmax sees as the bias of the last step.
"""

from __future__ import annotations

import torch
from torch import Tensor


def alibi_slopes(num_heads: int, max_slope: float) -> Tensor:
    """The N heads' slopes m_h = max_slope * 2^(-8 (h - 1) / N), h = 1..N (ALiBi's geometric sequence, Press et al.
    2022, sec. 3, started at max_slope instead of 2^(-8 / N)).

    Args:
        num_heads: N >= 1.
        max_slope: m_1 > 0, the first head's slope (nats of score per source step).
    Outputs: (N,) float32.
    Raises: ValueError if num_heads < 1 or max_slope <= 0.
    """
    if num_heads < 1:
        raise ValueError(f"num_heads must be >= 1, got {num_heads}")
    if not max_slope > 0:
        raise ValueError(f"max_slope must be > 0, got {max_slope}")
    return max_slope * 2.0 ** (-8.0 * torch.arange(num_heads, dtype=torch.float32) / num_heads)


def monotonic_alibi_bias(slopes: Tensor, query_positions: Tensor, num_keys: int, length_ratio: float) -> Tensor:
    """The cross-attention score bias -m_h |j - i / r| of target positions i against source positions j = 0..S-1.

    Args:
        slopes: (N,) m_h, e.g. ``alibi_slopes``.
        query_positions: (T,) the target positions i of the queries (offset by the cached steps when decoding).
        num_keys: S, source positions.
        length_ratio: r > 0, expected target tokens per source token.
    Outputs: (N, T, S), in slopes' dtype and device; add it to the scores of every sequence of the batch (padded
        source positions are masked separately).
    Raises: ValueError if slopes is not 1-D, query_positions not 1-D, num_keys < 1 or length_ratio <= 0.
    """
    if slopes.dim() != 1 or query_positions.dim() != 1:
        raise ValueError(
            f"slopes and query_positions must be 1-D, got shapes {tuple(slopes.shape)} and "
            f"{tuple(query_positions.shape)}"
        )
    if num_keys < 1:
        raise ValueError(f"num_keys must be >= 1, got {num_keys}")
    if not length_ratio > 0:
        raise ValueError(f"length_ratio must be > 0, got {length_ratio}")
    centre = query_positions.to(slopes) / length_ratio  # (T,)
    keys = torch.arange(num_keys, device=slopes.device, dtype=slopes.dtype)  # (S,)
    distance = (keys[None, :] - centre[:, None]).abs()  # (T, S)
    return -slopes[:, None, None] * distance  # (N, T, S)


def guided_attention_loss(weights: Tensor, src_lengths: Tensor, tgt_lengths: Tensor, sigma: float = 0.2) -> Tensor:
    """Tachibana et al. (2018), eq. 1: the mean of A_nt W_nt over every real (target step t, source step n) of
    every sequence and head, W_nt = 1 - exp(-(n/N - t/T)^2 / (2 sigma^2)), N and T each sequence's own lengths.

    Args:
        weights: (B, H, T, S) cross-attention weights A (rows sum to 1 over the real source steps), any H heads
            (e.g. several layers' heads concatenated).
        src_lengths: (B,) N_b, real source steps.
        tgt_lengths: (B,) T_b, real target steps (the decoder inputs: [BOS] + y, i.e. the phonemes plus one).
        sigma: g > 0, the width of the band around the diagonal without penalty (0.2 in the paper).
    Outputs: a scalar, in weights' dtype; differentiable in weights.
    Raises: ValueError if weights is not 4-D, the lengths are not (B,), or sigma <= 0.
    """
    if weights.dim() != 4:
        raise ValueError(f"weights must be (B, H, T, S), got shape {tuple(weights.shape)}")
    B, _, T, S = weights.shape
    if src_lengths.shape != (B,) or tgt_lengths.shape != (B,):
        raise ValueError(
            f"src_lengths and tgt_lengths must be (B,) = ({B},), got {tuple(src_lengths.shape)} and "
            f"{tuple(tgt_lengths.shape)}"
        )
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    n = torch.arange(S, device=weights.device, dtype=weights.dtype)  # (S,)
    t = torch.arange(T, device=weights.device, dtype=weights.dtype)  # (T,)
    N = src_lengths.to(weights)[:, None, None]  # (B, 1, 1)
    T_b = tgt_lengths.to(weights)[:, None, None]  # (B, 1, 1)
    penalty = 1.0 - torch.exp(-((n[None, None, :] / N - t[None, :, None] / T_b) ** 2) / (2.0 * sigma**2))  # (B, T, S)
    real = (n[None, None, :] < N) & (t[None, :, None] < T_b)  # (B, T, S)
    penalty = penalty * real
    total = (weights * penalty[:, None]).sum()
    return total / (real.sum() * weights.shape[1])
