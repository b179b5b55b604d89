"""Gradient flow through a recurrent cell: how fast d h_T / d h_k shrinks with the distance T - k.

For the Elman RNN h_t = phi(a_t), a_t = W_ih x_t + b + W_hh h_{t-1}, the chain rule gives

    d h_T / d h_k = prod_{j=k+1..T} diag(phi'(a_j)) W_hh,
    ||d h_T / d h_k||_2 <= prod_j ||diag(phi'(a_j)) W_hh||_2 <= gamma^(T-k),  gamma = sigma_max(W_hh) max|phi'|

(Bengio et al., 1994; Pascanu et al., 2013, eq. 5-7): for tanh and relu max|phi'| = 1, so gamma = sigma_max(W_hh),
and the gradient vanishes exponentially once gamma < 1. The LSTM's cell state adds the path
d c_T / d c_k = prod_j diag(f_j) (through the forget gates f_j alone, Hochreiter & Schmidhuber, 1997; Gers et al.,
2000); the GRU's interpolation h_t = (1 - z_t) n_t + z_t h_{t-1} adds the path prod_j diag(z_j).

What is measured: the spectral norm of the whole Jacobian ||d h_T / d h_k||_2 (every path, the largest gain from
h_k to h_T over all directions), i.e. the largest ||d loss_T / d h_k|| over losses loss_T = u . h_T with ||u|| = 1.
One backward pass gives every k: the input is repeated over a batch of H copies and copy i backpropagates e_i,
so the gradient at h_k of copy i is row i of d h_T / d h_k.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.analysis.figures import new_figure, save_figure
from seqlab.errors import CheckpointError
from seqlab.nn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from seqlab.validation import check_int

ARCHITECTURES = ("rnn", "gru", "lstm", "gru_textbook")
DEFAULT_ARCHITECTURES = ("rnn", "gru", "lstm")  # what ``seqlab analyze gradients`` compares without --arch
_CELLS: dict[str, Callable[..., nn.Module]] = {
    "rnn": RNNCell,
    "gru": GRUCell,
    "lstm": LSTMCell,
    "gru_textbook": partial(GRUCell, variant="textbook"),
}


class GradientFlow(NamedTuple):
    """Gradient norms against distance, all float64 of shape (T + 1,), index d = T - k for k = T .. 0.

    distance: T - k (steps). jacobian_norm: ||d h_T / d h_k||_2 with c_k held fixed (1 at distance 0).
    cell_jacobian_norm: for the LSTM, ||d h_T / d c_k||_2 along every path from c_k, h_k = o_k tanh(c_k) included
    (what backpropagation carries into the memory cell), else None. gate_product: the mean over
    units of prod_{j=k+1..T} f_j (LSTM forget gates) or the GRU's keep gates (z_j in torch's form, 1 - z_j in the
    textbook form), else None.
    bound: gamma^(T-k) for the Elman RNN, else None; path_bound: prod_{j=k+1..T} ||diag(phi'(a_j)) W_hh||_2 for
    the Elman RNN (the tighter bound along this input), else None. gamma: sigma_max(W_hh) * max|phi'| (RNN only).
    """

    distance: Tensor
    jacobian_norm: Tensor
    cell_jacobian_norm: Tensor | None
    gate_product: Tensor | None
    bound: Tensor | None
    path_bound: Tensor | None
    gamma: float | None


def make_cell(arch: str, input_size: int, hidden_size: int, *, seed: int) -> nn.Module:
    """A freshly initialised cell ("rnn" tanh, "gru" reset-after, "lstm", "gru_textbook"), torch.nn's init, seeded
    (the global generator is left as it was).

    Raises: ValueError if arch is not one of ARCHITECTURES or a size is < 1.
    """
    if arch not in _CELLS:
        raise ValueError(f"arch ({arch!r}) must be one of {', '.join(ARCHITECTURES)}")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return _CELLS[arch](input_size, hidden_size)


def recurrent_cell(model: nn.Module) -> nn.Module:
    """The first layer's forward-direction cell of the first seqlab RNN, GRU or LSTM layer inside ``model``.

    Raises: CheckpointError if the model holds no such layer (e.g. a Transformer).
    """
    for module in model.modules():
        if isinstance(module, RNN | GRU | LSTM):
            return module.cells[0]
        if isinstance(module, RNNCell | GRUCell | LSTMCell):
            return module
    raise CheckpointError(f"the model ({type(model).__name__}) has no RNN, GRU or LSTM layer to analyse")


def architecture_of(cell: nn.Module) -> str:
    """ "rnn", "gru", "lstm" or "gru_textbook" for a seqlab cell. Raises: ValueError for any other module."""
    if isinstance(cell, GRUCell):
        return "gru_textbook" if cell.variant == "textbook" else "gru"
    if isinstance(cell, RNNCell | LSTMCell):
        return "rnn" if isinstance(cell, RNNCell) else "lstm"
    raise ValueError(f"expected an RNNCell, GRUCell or LSTMCell, got {type(cell).__name__}")


def _keep_gate(cell: nn.Module, x_t: Tensor, h: Tensor) -> Tensor | None:
    """The gate that multiplies the carried state at this step: f_t (LSTM), z_t (GRU in torch's form) or 1 - z_t
    (the textbook GRU, where z_t weights the candidate), (B, H); None for RNN."""
    gates = cell.input_projection(x_t) + F.linear(h, cell.weight_hh, cell.bias_hh)  # (B, G*H), torch's order
    if isinstance(cell, LSTMCell):
        return torch.sigmoid(gates.chunk(4, dim=1)[1])  # i, f, g, o -> f_t
    if isinstance(cell, GRUCell):
        # r_t and z_t see W_hr h + b_hr and W_hz h + b_hz in both variants; only n_t differs.
        z_t = torch.sigmoid(gates.chunk(3, dim=1)[1])  # r, z, n -> z_t
        return 1 - z_t if cell.variant == "textbook" else z_t
    return None


def _rnn_bounds(cell: RNNCell, states: list[Tensor], T: int) -> tuple[Tensor, Tensor, float]:
    """gamma^(T-k), the path bound prod_j ||diag(phi'(a_j)) W_hh||_2 (both (T + 1,)) and gamma."""
    w = cell.weight_hh.detach()
    gamma = torch.linalg.matrix_norm(w, ord=2).item()  # max|phi'| = 1 for tanh and relu
    factors = []
    for j in range(T, 0, -1):  # j = T .. 1, i.e. distance T - k = 1 .. T
        h_j = states[j][0].detach()
        slope = 1 - h_j**2 if cell.nonlinearity == "tanh" else (h_j > 0).to(h_j.dtype)  # phi'(a_j)
        factors.append(torch.linalg.matrix_norm(slope[:, None] * w, ord=2))
    path = torch.cat([w.new_ones(1), torch.cumprod(torch.stack(factors), dim=0)])
    distance = torch.arange(T + 1, dtype=w.dtype)
    return gamma**distance, path, gamma


def gradient_flow(cell: nn.Module, x: Tensor) -> GradientFlow:
    """||d h_T / d h_k||_2 for k = T .. 0 of ``cell`` run on x from a zero state, in float64 (see the module).

    Args:
        cell: a seqlab RNNCell, GRUCell or LSTMCell (copied in float64; the original is untouched).
        x: (T, E) input sequence, T >= 1.
    Outputs: GradientFlow, each tensor (T + 1,) indexed by the distance T - k.
    Raises: ValueError if the cell is not one of the three, or x is not (T, E) with E = cell.input_size.
    """
    arch = architecture_of(cell)
    if x.dim() != 2 or x.shape[1] != cell.input_size or x.shape[0] < 1:
        raise ValueError(f"x must be (T, E) with T >= 1 and E = {cell.input_size}, got shape {tuple(x.shape)}")
    cell = copy.deepcopy(cell).double().eval()
    T, H = x.shape[0], cell.output_size
    xs = x.double().expand(H, T, x.shape[1])  # (H, T, E): one copy per row of the Jacobian
    h = torch.zeros(H, H, dtype=torch.float64, requires_grad=True)  # h_0
    c = torch.zeros(H, cell.hidden_size, dtype=torch.float64, requires_grad=True) if arch == "lstm" else None
    states, cells, keep = [h], [c], []
    for t in range(T):
        gate = _keep_gate(cell, xs[:, t], h)
        if gate is not None:
            keep.append(gate[0].detach())
        if arch == "lstm":
            h, c = cell(xs[:, t], (h, c))
        else:
            h = cell(xs[:, t], h)
        states.append(h)
        cells.append(c)
    eye = torch.eye(H, dtype=torch.float64)
    inputs = states[:-1] + (cells if arch == "lstm" else [])
    grads = torch.autograd.grad(states[-1], inputs, grad_outputs=eye)  # row i of each: e_i^T d h_T / d (h_k | c_k)
    norms = [torch.linalg.matrix_norm(g, ord=2) for g in grads]
    jacobian = torch.stack([eye.new_ones(()), *norms[:T][::-1]])  # distance 0 .. T
    cell_norm = torch.stack(norms[T:][::-1]) if arch == "lstm" else None  # c_T .. c_0: distance 0 .. T
    gate_product = None
    if keep:
        # prod_{j=k+1..T} gate_j for distance T - k = 0 .. T; keep[j - 1] is the gate of step j.
        products = torch.cumprod(torch.stack(keep[::-1]), dim=0)  # (T, H)
        gate_product = torch.cat([eye.new_ones(1), products.mean(dim=1)])
    bound = path_bound = gamma = None
    if arch == "rnn":
        bound, path_bound, gamma = _rnn_bounds(cell, states, T)
    return GradientFlow(
        torch.arange(T + 1, dtype=torch.float64), jacobian.detach(), cell_norm, gate_product, bound, path_bound, gamma
    )


def decay_rate(flow: GradientFlow) -> float:
    """The fitted per-step factor exp(s) of ||d h_T / d h_k||_2 ~ exp(s (T - k)): s is the least-squares slope of
    ln norm against distance over distances 1 .. T (norms of exactly zero are left out). Raises: ValueError if
    fewer than two distances have a positive norm."""
    d, n = flow.distance[1:], flow.jacobian_norm[1:]
    keep = n > 0
    if int(keep.sum()) < 2:
        raise ValueError("need at least two distances with a positive gradient norm to fit a decay rate")
    return math.exp(least_squares_slope(d[keep], torch.log(n[keep])))


def least_squares_slope(x: Tensor, y: Tensor) -> float:
    """Slope b of the least-squares line y ~ a + b x, x and y (n,) with n >= 2."""
    xc = x.double() - x.double().mean()
    return float((xc * (y.double() - y.double().mean())).sum() / (xc * xc).sum())


def random_input(length: int, input_size: int, *, seed: int) -> Tensor:
    """x (T, E) ~ N(0, 1), seeded: the same input for every architecture. Raises: ValueError if length < 1."""
    check_int("length", length)
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(length, input_size, generator=generator, dtype=torch.float64)


def plot_gradient_flow(flows: dict[str, GradientFlow], path: Path) -> None:
    """One log-scale panel per architecture: ||d h_T / d h_k||_2 against T - k with the RNN's bounds and the
    gated paths' gate products; written as a PNG to ``path``."""
    fig = new_figure(figsize=(5 * len(flows), 4.5), layout="constrained")
    axes = fig.subplots(1, len(flows), sharey=True, squeeze=False)[0]
    for ax, (arch, flow) in zip(axes, flows.items(), strict=True):
        d = flow.distance.numpy()
        ax.semilogy(d, flow.jacobian_norm.numpy(), color="C0", lw=2, label="measured ||dh_T/dh_k||")
        if flow.bound is not None:
            ax.semilogy(d, flow.bound.numpy(), "k--", label=f"bound gamma^(T-k), gamma = {flow.gamma:.3f}")
        if flow.path_bound is not None:
            ax.semilogy(d, flow.path_bound.numpy(), color="C2", ls=":", label="prod ||diag(phi') W_hh||")
        if flow.cell_jacobian_norm is not None:
            ax.semilogy(d, flow.cell_jacobian_norm.numpy(), color="C1", label="measured ||dh_T/dc_k||")
        if flow.gate_product is not None:
            gate = "forget gates f" if arch == "lstm" else "keep gates z"
            ax.semilogy(d, flow.gate_product.numpy(), color="C3", ls="-.", label=f"mean prod of {gate}")
        ax.set(
            title=f"{arch.upper()}: {decay_rate(flow):.3f}x per step (fit)",
            xlabel="distance T - k (steps)",
            ylabel="gradient norm (spectral, unitless)",
        )
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc="lower left")
    save_figure(fig, path, dpi=110)
