"""What the sinusoidal positional encoding encodes: relative positions by fixed rotations.

With PE(p, 2i) = sin(p w_i), PE(p, 2i+1) = cos(p w_i), w_i = 10000^(-2i/D) (Vaswani et al., 2017, section 3.5):

    PE(p + k) = M_k PE(p),  M_k = blockdiag_i [[cos k w_i, sin k w_i], [-sin k w_i, cos k w_i]]   (one map per k)
    PE(p) . PE(q) = sum_i cos((p - q) w_i)                                                 (depends on |p - q| only)

``positional_analysis`` measures both on the table of ``seqlab.nn.SinusoidalPositionalEncoding``; ``plot_positional``
draws them.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from seqlab.analysis.figures import new_figure, save_figure
from seqlab.nn import SinusoidalPositionalEncoding
from seqlab.validation import check_int


class PositionalAnalysis(NamedTuple):
    """table: PE (L, D), float64. distance: 0 .. L - 1 (positions). dot: mean over p of PE(p) . PE(p + d), (L,).
    dot_spread: max - min over p of PE(p) . PE(p + d), (L,) (0 when the product depends on d alone).
    shift_error: max over p and channels of |PE(p + k) - M_k PE(p)| for k = distance, (L,) (0 at k = 0).
    max_shift_error: its maximum over k."""

    table: Tensor
    distance: Tensor
    dot: Tensor
    dot_spread: Tensor
    shift_error: Tensor
    max_shift_error: float


def rotation(k: int, d_model: int, *, base: float = 10000.0) -> Tensor:
    """M_k (D, D), float64: block diagonal, one 2x2 rotation [[cos k w_i, sin k w_i], [-sin k w_i, cos k w_i]]
    per channel pair (2i, 2i+1), w_i = base^(-2i/D)."""
    w = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (D/2,)
    cos, sin = torch.cos(k * w), torch.sin(k * w)
    blocks = torch.stack([torch.stack([cos, sin], dim=-1), torch.stack([-sin, cos], dim=-1)], dim=-2)  # (D/2, 2, 2)
    return torch.block_diag(*blocks)


def positional_analysis(d_model: int, max_length: int) -> PositionalAnalysis:
    """Dot products against distance and the shift check PE(p + k) = M_k PE(p) for every k < max_length.

    Args: d_model: D, even, >= 2. max_length: L >= 2 positions.
    Raises: ConfigError if max_length < 2; ValueError if d_model is odd or < 2 (from SinusoidalPositionalEncoding).
    """
    check_int("max_length", max_length, minimum=2)
    table = SinusoidalPositionalEncoding(d_model, max_length=max_length).table.double()  # (L, D)
    gram = table @ table.T  # (L, L): PE(p) . PE(q)
    dot, spread, error = [], [], []
    for k in range(max_length):
        diagonal = torch.diagonal(gram, offset=k)  # PE(p) . PE(p + k) for p = 0 .. L - 1 - k
        dot.append(diagonal.mean())
        spread.append(diagonal.max() - diagonal.min())
        shifted = table[: max_length - k] @ rotation(k, d_model).T  # rows M_k PE(p)
        error.append((table[k:] - shifted).abs().max())
    shift_error = torch.stack(error)
    return PositionalAnalysis(
        table,
        torch.arange(max_length),
        torch.stack(dot),
        torch.stack(spread),
        shift_error,
        float(shift_error.max()),
    )


def plot_positional(result: PositionalAnalysis, path: Path) -> None:
    """Three panels: the encoding matrix, PE(p) . PE(q) against |p - q|, and the shift error against k; a PNG."""
    fig = new_figure(figsize=(15, 4.5), layout="constrained")
    matrix, dots, shifts = fig.subplots(1, 3)
    D = result.table.shape[1]
    image = matrix.imshow(result.table.T.numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, origin="lower")
    matrix.set(xlabel="position p (tokens)", ylabel="channel (2i: sin, 2i+1: cos)", title=f"PE(p), D = {D}")
    fig.colorbar(image, ax=matrix, label="PE(p, channel)")
    d = result.distance.numpy()
    dots.plot(d, result.dot.numpy(), color="C0", label="mean over p")
    low, high = result.dot - result.dot_spread / 2, result.dot + result.dot_spread / 2
    dots.fill_between(d, low.numpy(), high.numpy(), color="C0", alpha=0.3, label="max - min over p")
    dots.set(xlabel="|p - q| (positions)", ylabel="PE(p) . PE(q)", title="dot product depends on |p - q| only")
    dots.legend()
    # k = 0 has error 0 exactly; log axes show k >= 1.
    shifts.semilogy(d[1:], result.shift_error[1:].clamp_min(1e-18).numpy(), color="C3")
    shifts.set(
        xlabel="offset k (positions)",
        ylabel="max |PE(p + k) - M_k PE(p)|",
        title=f"shift is a rotation: max error {result.max_shift_error:.1e}",
    )
    save_figure(fig, path, dpi=110)
