"""PyTorch's fused RNN kernels: the one module of seqlab that touches private torch attributes.

torch.nn.RNN / LSTM / GRU call ``torch._VF.rnn_tanh`` / ``rnn_relu`` / ``lstm`` / ``gru``, which are not public API:
their argument lists may change between torch releases. seqlab calls them with exactly the argument lists below
(the ones torch.nn's layers use), and ``fused_kernels_available`` checks once per process, with a tiny call to every
kernel in both forms, that they still accept them. If they do not, it warns once and returns False, and the
recurrent layers run their reference path instead (``layer.fused`` is False).

    padded:  kernel(x, hx, weights, bias, num_layers, dropout, training, bidirectional, batch_first)
    packed:  kernel(data, batch_sizes, hx, weights, bias, num_layers, dropout, training, bidirectional)
    one step of one layer:  cell_kernel(x, hx, weight_ih, weight_hh, bias_ih, bias_hh)

The single-step kernels (``torch._VF.lstm_cell``, ``gru_cell``, ``rnn_tanh_cell``, ``rnn_relu_cell``, which
torch.nn.LSTMCell / GRUCell / RNNCell call) compute the same step as the sequence kernels; for T = 1 they avoid the
sequence kernels' per-call set-up (oneDNN's LSTM re-lays out its weights on every call), which costs more than the
step itself when decoding one token at a time.

Under CPU bf16 autocast, oneDNN's LSTM needs a CPU with bf16 instructions (AVX512-BF16 or AMX); elsewhere it raises
"could not create a primitive descriptor" (torch.nn.LSTM too). ``bf16_kernels_available`` probes that once; where it
fails, the sequence kernels run in float32 with autocast off (what fp32 training computes), so a bf16 run still
trains: its other layers keep bf16.

``weights`` lists, per layer and direction in torch's order, weight_ih, weight_hh, then bias_ih, bias_hh (with
bias) and weight_hr (with a projection). ``hx`` is h_0 (L*C, B, H), or (h_0, c_0) for the LSTM.

``scan_loop`` is torch's ``scan`` operator (``torch._higher_order_ops.scan``, not public either): while a model is
exported (``torch.onnx.export(..., dynamo=True)``), a Python loop over T steps would be unrolled at the export shape's
T, so the reference path's recurrence goes in as one scan (ONNX ``Scan``) that serves every T.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

KERNEL_NAMES = ("rnn_tanh", "rnn_relu", "lstm", "gru")
_CELL_KERNELS = {"rnn_tanh": "rnn_tanh_cell", "rnn_relu": "rnn_relu_cell", "lstm": "lstm_cell", "gru": "gru_cell"}
_GATES = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}

Hidden = Tensor | tuple[Tensor, Tensor]


def _kernel(name: str) -> Callable[..., tuple[Tensor, ...]]:
    if name not in KERNEL_NAMES:
        raise ValueError(f"kernel must be one of {KERNEL_NAMES}, got {name!r}")
    return getattr(torch._VF, name)


def scan_loop(
    combine: Callable[[Any, Any], tuple[Any, Tensor]], init: Any, xs: Any, *, reverse: bool
) -> tuple[Any, Tensor]:
    """carry, y_t = combine(carry, x_t) over the leading dimension of every tensor of ``xs`` (backwards with
    ``reverse``, y still indexed by t) from ``init``; returns the final carry and the stacked y (T, ...).
    ``combine`` must return a y that is no view of its carry. For exporting (module docstring)."""
    return torch._higher_order_ops.scan(combine, init, xs, dim=0, reverse=reverse)


def fused_rnn(
    name: str,
    x: Tensor,
    hx: Hidden,
    weights: Sequence[Tensor],
    *,
    bias: bool,
    num_layers: int,
    dropout: float,
    training: bool,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[Tensor, ...]:
    """Run kernel ``name`` on padded x (B, T, E) if batch_first else (T, B, E), from state hx.

    Returns (outputs in x's layout with C*H features, h_n (L*C, B, H)), plus c_n (L*C, B, H) for "lstm"; float32
    where CPU bf16 autocast has no kernel (module docstring).
    Raises: ValueError for a name not in ``KERNEL_NAMES``.
    """
    kernel = _kernel(name)
    options = (bias, num_layers, dropout, training, bidirectional, batch_first)
    if _bf16_without_kernel(x):
        with torch.autocast("cpu", enabled=False):
            return tuple(kernel(x.float(), _float(hx), [w.float() for w in weights], *options))
    return tuple(kernel(x, hx, list(weights), *options))


def fused_rnn_packed(
    name: str,
    data: Tensor,
    batch_sizes: Tensor,
    hx: Hidden,
    weights: Sequence[Tensor],
    *,
    bias: bool,
    num_layers: int,
    dropout: float,
    training: bool,
    bidirectional: bool,
) -> tuple[Tensor, ...]:
    """Run kernel ``name`` on a packed sequence's ``data`` (sum of lengths, E) and ``batch_sizes`` (T,), with hx
    in the packed (sorted) batch order.

    Returns (packed outputs (sum of lengths, C*H), h_n (L*C, B, H)), plus c_n for "lstm"; float32 where CPU bf16
    autocast has no kernel (module docstring).
    Raises: ValueError for a name not in ``KERNEL_NAMES``.
    """
    kernel = _kernel(name)
    options = (bias, num_layers, dropout, training, bidirectional)
    if _bf16_without_kernel(data):
        with torch.autocast("cpu", enabled=False):
            return tuple(kernel(data.float(), batch_sizes, _float(hx), [w.float() for w in weights], *options))
    return tuple(kernel(data, batch_sizes, hx, list(weights), *options))


def _float(hx: Hidden) -> Hidden:
    return tuple(h.float() for h in hx) if isinstance(hx, tuple) else hx.float()


def _bf16_without_kernel(x: Tensor) -> bool:
    """True under CPU bf16 autocast on a CPU whose oneDNN has no bf16 LSTM (``bf16_kernels_available``)."""
    return (
        x.device.type == "cpu"
        and x.dtype in (torch.float32, torch.bfloat16)  # autocast leaves float64 alone
        and torch.is_autocast_enabled("cpu")
        and torch.get_autocast_dtype("cpu") == torch.bfloat16
        and not bf16_kernels_available()
    )


@functools.cache
def bf16_kernels_available() -> bool:
    """Checked once per process (cached): whether the fused LSTM runs under CPU bf16 autocast on this CPU."""
    zeros = functools.partial(torch.zeros, dtype=torch.float32)  # what autocast casts, whatever the default dtype
    weights = [zeros(8, 2), zeros(8, 2)]
    h0 = zeros(1, 1, 2)
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            _kernel("lstm")(zeros(1, 1, 2), (h0, h0), weights, False, 1, 0.0, False, False, False)
    except RuntimeError:
        return False
    return True


def fused_cell(
    name: str,
    x: Tensor,
    hx: Hidden,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor | None,
    bias_hh: Tensor | None,
) -> Hidden:
    """One time step of one layer by the single-step form of kernel ``name``: x (B, E), hx h (B, H) or (h, c) for
    "lstm"; returns h_t (B, H), or (h_t, c_t) for "lstm".

    Raises: ValueError for a name not in ``KERNEL_NAMES``.
    """
    if name not in KERNEL_NAMES:
        raise ValueError(f"kernel must be one of {KERNEL_NAMES}, got {name!r}")
    return getattr(torch._VF, _CELL_KERNELS[name])(x, hx, weight_ih, weight_hh, bias_ih, bias_hh)


def _probe(name: str) -> bool:
    """One tiny padded and one tiny packed call of kernel ``name``: True if both return the expected shapes."""
    E, H, B, T, G = 2, 3, 2, 3, _GATES[name]
    weights = [torch.zeros(G * H, E), torch.zeros(G * H, H), torch.zeros(G * H), torch.zeros(G * H)]
    h0 = torch.zeros(1, B, H)
    hx: Hidden = (h0, h0) if name == "lstm" else h0
    options = {"bias": True, "num_layers": 1, "dropout": 0.0, "training": False, "bidirectional": False}
    padded = fused_rnn(name, torch.zeros(B, T, E), hx, weights, batch_first=True, **options)
    batch_sizes = torch.tensor([2, 1, 1])  # lengths 3 and 1
    packed = fused_rnn_packed(name, torch.zeros(4, E), batch_sizes, hx, weights, **options)
    states = 2 if name == "lstm" else 1
    cell_hx: Hidden = (h0[0], h0[0]) if name == "lstm" else h0[0]
    cell = fused_cell(name, torch.zeros(B, E), cell_hx, *weights)
    cell_states = cell if isinstance(cell, tuple) else (cell,)
    return (
        len(cell_states) == states
        and all(tuple(s.shape) == (B, H) for s in cell_states)
        and len(padded) == 1 + states
        and tuple(padded[0].shape) == (B, T, H)
        and all(tuple(s.shape) == (1, B, H) for s in padded[1:])
        and len(packed) == 1 + states
        and tuple(packed[0].shape) == (4, H)
        and all(tuple(s.shape) == (1, B, H) for s in packed[1:])
    )


def _kernels_accept_signature() -> bool:
    """True if every kernel accepts seqlab's argument lists and returns the shapes torch.nn's layers expect."""
    try:
        return all(_probe(name) for name in KERNEL_NAMES)
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return False


@functools.cache
def fused_kernels_available() -> bool:
    """Checked once per process (cached): whether the fused kernels can be called as ``fused_rnn`` calls them.

    When they cannot, warns once (RuntimeWarning) and returns False: the recurrent layers then run their reference
    path, which computes the same function.
    """
    if _kernels_accept_signature():
        return True
    warnings.warn(
        f"torch {torch.__version__}'s fused RNN kernels (torch._VF) no longer accept the argument lists seqlab "
        "calls them with; RNN, LSTM and GRU layers run their reference path instead (layer.fused is False)",
        RuntimeWarning,
        stacklevel=2,
    )
    return False
