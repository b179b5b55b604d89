"""Gradient regimes: vanishing, the edge and exploding, set by the scale of the recurrent matrix, and what
gradient clipping does to an exploding run.

Scaling. ``scale_recurrent(cell, S, measure=...)`` multiplies each gate's H x H block of W_hh (the one block of
the Elman RNN; the r, z, n blocks of the GRU; the i, f, g, o blocks of the LSTM) so that its spectral norm
sigma_max (``measure="spectral_norm"``) or its spectral radius |lambda_max|, the largest eigenvalue modulus
(``measure="spectral_radius"``), equals S.

The bound, both ways the notes state it, for the Elman RNN h_t = phi(W_hh h_{t-1} + W_ih x_t + b) (Pascanu et al.,
2013, eq. 5-7; Bengio et al., 1994):

    ||d h_T / d h_k||_2 <= prod_j ||diag(phi'(a_j))||_2 ||W_hh||_2 <= (sigma_max(W_hh) max|phi'|)^(T-k)
    ||d h_T / d h_k||_2 ~ |lambda_max(W_hh)|^(T-k)  for a linear RNN (phi' = 1) and large T - k (Gelfand's
                                                     formula: ||W^n||^(1/n) -> |lambda_max|)

The first is an upper bound for every input; the second is the rate the notes give from the eigenvalues, exact in
the limit for a linear RNN, and below sigma_max for a non-normal W_hh (so not a bound: ||W^n|| may exceed
|lambda_max|^n for small n). Both are drawn beside the measured norm (``seqlab.analysis.gradients``).

The LSTM's direct path: along c_t = f_t * c_{t-1} + i_t * g_t alone, d c_T / d c_k = prod_{j=k+1..T} diag(f_j),
whose spectral norm is max over units of prod_j f_j; it is drawn beside the full ||d c_T / d c_k||_2 (every
path, through h as well).

Clipping (Pascanu et al., 2013, Algorithm 1): ``clipping_runs`` trains the same scaled cell with a linear read-out
twice from the same weights on the same batches, with and without the global-norm clip that the caller passes
(the CLI passes ``seqlab.training.clipping.clip_grad_norm``), and records loss and pre-clip gradient norm.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Literal, NamedTuple

import torch
from torch import Tensor, nn

from seqlab.analysis.figures import new_figure, save_figure
from seqlab.analysis.gradients import GradientFlow, architecture_of, decay_rate
from seqlab.errors import ConfigError
from seqlab.nn import LSTMCell

ScaleMeasure = Literal["spectral_norm", "spectral_radius"]
SCALE_MEASURES = ("spectral_norm", "spectral_radius")
MAX_SCALE = 100.0  # beyond this every regime is long decided, and float64 products overflow within a few steps


def check_scale(flag: str, value: float) -> None:
    """``value`` is a usable recurrent scale: finite, > 0 and <= MAX_SCALE.

    Raises: ConfigError naming ``flag`` and showing the value otherwise.
    """
    if not (math.isfinite(value) and 0 < value <= MAX_SCALE):
        raise ConfigError(f"{flag} ({value}) must be a number > 0 and <= {MAX_SCALE:g}")


def spectral_size(matrix: Tensor, measure: ScaleMeasure) -> Tensor:
    """sigma_max (``"spectral_norm"``) or max |eigenvalue| (``"spectral_radius"``) of a square (H, H) matrix,
    as a 0-dim tensor (torch.linalg). Raises: ConfigError for a non-square matrix with the spectral radius."""
    if measure == "spectral_norm":
        return torch.linalg.matrix_norm(matrix, ord=2)
    if matrix.shape[0] != matrix.shape[1]:
        raise ConfigError(f"the spectral radius needs a square recurrent block, got {tuple(matrix.shape)}")
    return torch.linalg.eigvals(matrix).abs().max()


def recurrent_blocks(cell: nn.Module) -> list[Tensor]:
    """The gate blocks of ``cell.weight_hh`` (views, G of shape (H, H) or (H, P)): 1 (RNN), 3 (GRU), 4 (LSTM).

    Raises: ValueError for a module that is not a seqlab RNN, GRU or LSTM cell.
    """
    gates = {"rnn": 1, "gru": 3, "gru_textbook": 3, "lstm": 4}[architecture_of(cell)]
    return list(cell.weight_hh.chunk(gates, dim=0))


def scale_recurrent(cell: nn.Module, scale: float, *, measure: ScaleMeasure = "spectral_norm") -> nn.Module:
    """A copy of ``cell`` whose every gate block of W_hh has ``measure`` equal to ``scale`` (module docstring).

    Raises: ConfigError for a bad scale (``check_scale``), an unknown measure, a block of size zero or the spectral
    radius of a non-square block; ValueError for a module that is not a seqlab RNN, GRU or LSTM cell.
    """
    check_scale("scale", scale)
    if measure not in SCALE_MEASURES:
        raise ConfigError(f"measure ({measure!r}) must be one of {', '.join(SCALE_MEASURES)}")
    scaled = copy.deepcopy(cell)
    with torch.no_grad():
        for block in recurrent_blocks(scaled):
            size = spectral_size(block.double(), measure)
            if not size > 0:
                raise ConfigError(f"a recurrent block has {measure} 0: it cannot be scaled to {scale}")
            block.mul_((scale / size).to(block.dtype))
    return scaled


class EigenRate(NamedTuple):
    """The Elman RNN's eigenvalue rate: rate (T + 1,) float64, (|lambda_max(W_hh)| max|phi'|)^(T-k) indexed by the
    distance T - k, and radius |lambda_max(W_hh)| (max|phi'| = 1 for tanh and relu). The sigma_max bound is
    ``GradientFlow.bound``."""

    rate: Tensor
    radius: float


def eigen_rate(cell: nn.Module, length: int) -> EigenRate:
    """The eigenvalue rate of an Elman RNN cell for distances 0 .. ``length`` (module docstring).

    Raises: ValueError if ``cell`` is not an RNNCell.
    """
    if architecture_of(cell) != "rnn":
        raise ValueError(f"the eigenvalue rate is the Elman RNN's, got a {architecture_of(cell)} cell")
    radius = float(spectral_size(cell.weight_hh.detach().double(), "spectral_radius"))
    return EigenRate(radius ** torch.arange(length + 1, dtype=torch.float64), radius)


class DirectPath(NamedTuple):
    """The LSTM's memory gradients, each (T + 1,) float64 indexed by the distance T - k.

    direct: ||prod_{j=k+1..T} diag(f_j)||_2 = max over units of the product of forget gates.
    full: ||d c_T / d c_k||_2 along every path.
    """

    direct: Tensor
    full: Tensor


def lstm_direct_path(cell: LSTMCell, x: Tensor) -> DirectPath:
    """The direct path and the full ||d c_T / d c_k||_2 of ``cell`` run on x (T, E) from a zero state, float64.

    Raises: ValueError if ``cell`` is not an LSTMCell without projection, or x is not (T, E), T >= 1.
    """
    if not isinstance(cell, LSTMCell) or cell.output_size != cell.hidden_size:
        raise ValueError("the direct path needs an LSTMCell without projection")
    if x.dim() != 2 or x.shape[1] != cell.input_size or x.shape[0] < 1:
        raise ValueError(f"x must be (T, E) with T >= 1 and E = {cell.input_size}, got shape {tuple(x.shape)}")
    cell = copy.deepcopy(cell).double().eval()
    T, H = x.shape[0], cell.hidden_size
    xs = x.double().expand(H, T, x.shape[1])  # (H, T, E): copy i backpropagates e_i
    h = torch.zeros(H, H, dtype=torch.float64)
    c = torch.zeros(H, H, dtype=torch.float64, requires_grad=True)
    memories, forget = [c], []
    for t in range(T):
        gates = cell.input_projection(xs[:, t]) + nn.functional.linear(h, cell.weight_hh, cell.bias_hh)
        forget.append(torch.sigmoid(gates.chunk(4, dim=1)[1])[0].detach())  # i, f, g, o -> f_t (H,)
        h, c = cell(xs[:, t], (h, c))
        memories.append(c)
    eye = torch.eye(H, dtype=torch.float64)
    grads = torch.autograd.grad(memories[-1], memories[:-1], grad_outputs=eye)  # e_i^T d c_T / d c_k, k = 0 .. T-1
    full = torch.stack([eye.new_ones(()), *(torch.linalg.matrix_norm(g, ord=2) for g in grads[::-1])])
    products = torch.cumprod(torch.stack(forget[::-1]), dim=0)  # (T, H): prod_{j=k+1..T} f_j for T - k = 1 .. T
    direct = torch.cat([eye.new_ones(1), products.max(dim=1).values])
    return DirectPath(direct, full.detach())


class ClippingRun(NamedTuple):
    """One training run: loss (steps,) mean squared error per step (NaN once it diverged) and grad_norm (steps,)
    the global gradient norm before clipping (unitless)."""

    loss: Tensor
    grad_norm: Tensor


ClipFunction = Callable[[Iterable[Tensor], float], Tensor]


def clipping_runs(
    cell: nn.Module,
    clip: ClipFunction,
    *,
    clip_norm: float,
    length: int,
    input_std: float,
    steps: int,
    lr: float,
    batch_size: int = 16,
    seed: int = 0,
) -> dict[str, ClippingRun]:
    """Train ``cell`` (a copy) with a linear read-out of h_T to recall x_1's first feature after ``length`` steps of
    N(0, input_std^2) inputs (mean squared error, plain SGD), twice from the same weights on the same batches:
    "unclipped" calls ``clip(parameters, inf)`` (the norm alone), "clipped" ``clip(parameters, clip_norm)``. A run whose
    loss or gradient is no longer finite stops; its remaining steps are NaN.

    Args:
        cell: a seqlab RNN, GRU or LSTM cell (H = output size). clip: the package's clip_grad_norm (it returns
            the pre-clip norm and leaves the gradient untouched for max_norm = inf).
        clip_norm: tau > 0. length: T steps of input. input_std: their standard deviation. steps: SGD steps.
        lr: learning rate. batch_size: B sequences per step. seed: read-out weights and batches.
    Outputs: {"unclipped": ClippingRun, "clipped": ClippingRun}.
    Raises: ValueError for a cell of another kind; what ``clip`` raises for a bad clip_norm.
    """
    arch = architecture_of(cell)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        readout = nn.Linear(cell.output_size, 1).double()
    generator = torch.Generator().manual_seed(seed)
    batches = [input_std * torch.randn(batch_size, length, cell.input_size, generator=generator) for _ in range(steps)]
    runs = {}
    for name, tau in (("unclipped", math.inf), ("clipped", clip_norm)):
        model = nn.ModuleDict({"cell": copy.deepcopy(cell).double(), "readout": copy.deepcopy(readout)})
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        losses = torch.full((steps,), math.nan, dtype=torch.float64)
        norms = torch.full((steps,), math.nan, dtype=torch.float64)
        for step, x in enumerate(batches):
            x = x.double()
            state = None
            for t in range(length):
                state = model["cell"](x[:, t], state)
            h = state[0] if arch == "lstm" else state
            loss = nn.functional.mse_loss(model["readout"](h).squeeze(-1), x[:, 0, 0])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norm = clip(model.parameters(), tau)
            losses[step], norms[step] = loss.detach(), norm
            if not (torch.isfinite(loss) and torch.isfinite(norm)):
                break
            optimizer.step()
        runs[name] = ClippingRun(losses, norms)
    return runs


def plot_regimes(
    flows: dict[tuple[str, float], GradientFlow],
    rates: dict[tuple[str, float], EigenRate],
    direct_paths: dict[tuple[str, float], DirectPath],
    path: Path,
    *,
    measure: ScaleMeasure,
) -> None:
    """A grid of log-scale panels, one row per architecture and one column per scale S: the measured
    ||d h_T / d h_k||_2 against T - k, with the RNN's bound and eigenvalue rate, the LSTM's full ||d c_T / d c_k||
    and direct path, and the GRU's mean keep-gate product; written as a PNG to ``path``."""
    archs = list(dict.fromkeys(arch for arch, _ in flows))
    scales = list(dict.fromkeys(scale for _, scale in flows))
    fig = new_figure(figsize=(4.2 * len(scales), 3.4 * len(archs)), layout="constrained")
    axes = fig.subplots(len(archs), len(scales), sharex=True, squeeze=False)
    symbol = "sigma_max" if measure == "spectral_norm" else "|lambda_max|"
    for row, arch in enumerate(archs):
        for column, scale in enumerate(scales):
            ax, flow = axes[row][column], flows[arch, scale]
            d = flow.distance.numpy()
            ax.semilogy(d, flow.jacobian_norm.numpy(), color="C0", lw=2, label="measured ||dh_T/dh_k||")
            if flow.bound is not None:
                label = f"bound (sigma_max max|f'|)^(T-k), {flow.gamma:.2f}"
                ax.semilogy(d, flow.bound.numpy(), "k--", label=label)
            if (arch, scale) in rates:
                rate = rates[arch, scale]
                ax.semilogy(d, rate.rate.numpy(), color="C2", ls=":", label=f"|lambda_max|^(T-k), {rate.radius:.2f}")
            if (arch, scale) in direct_paths:
                p = direct_paths[arch, scale]
                ax.semilogy(d, p.full.numpy(), color="C1", label="measured ||dc_T/dc_k||")
                ax.semilogy(d, p.direct.numpy(), color="C3", ls="-.", label="direct path: prod of forget gates")
            elif flow.gate_product is not None:
                ax.semilogy(d, flow.gate_product.numpy(), color="C3", ls="-.", label="mean prod of keep gates z")
            measured = [flow.jacobian_norm, *direct_paths.get((arch, scale), ())]
            values = torch.cat(measured)
            values = values[torch.isfinite(values) & (values > 0)]
            # The bounds may run off the panel: the measured curves set its range.
            ax.set_ylim(float(values.min()) / 1e2, float(values.max()) * 1e2)
            ax.set_title(f"{arch.upper()}, {symbol}(W_hh) = {scale:g}: {decay_rate(flow):.3f}x per step", fontsize=9)
            ax.grid(True, which="major", alpha=0.3)
            ax.legend(fontsize=6, loc="best")
            if row == len(archs) - 1:
                ax.set_xlabel("distance T - k (steps)")
            if column == 0:
                ax.set_ylabel("gradient norm (spectral)")
    save_figure(fig, path, dpi=72)


def plot_clipping(runs: dict[str, ClippingRun], path: Path, *, title: str, clip_norm: float) -> None:
    """Loss and pre-clip gradient norm against the step, with and without clipping; written as a PNG."""
    fig = new_figure(figsize=(9, 3.4), layout="constrained")
    loss_ax, norm_ax = fig.subplots(1, 2)
    labels = {"unclipped": "no clipping", "clipped": f"clip_norm = {clip_norm:g}"}
    for color, (name, run) in zip(("C3", "C0"), runs.items(), strict=True):
        steps = torch.arange(1, len(run.loss) + 1).numpy()
        loss_ax.semilogy(steps, run.loss.numpy(), color=color, label=labels[name])
        norm_ax.semilogy(steps, run.grad_norm.numpy(), color=color, label=labels[name])
    norm_ax.axhline(clip_norm, color="k", ls="--", lw=1, label="clip threshold")
    loss_ax.set(title=f"{title}: training loss", xlabel="SGD step", ylabel="mean squared error")
    norm_ax.set(title="gradient norm before clipping", xlabel="SGD step", ylabel="||g|| (global)")
    for ax in (loss_ax, norm_ax):
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
    save_figure(fig, path, dpi=90)
