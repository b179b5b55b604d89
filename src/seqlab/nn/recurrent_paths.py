"""The two paths of a recurrent layer (``seqlab.nn.recurrent``), as functions of its cells.

``run_reference`` runs any cell that follows the protocol of ``cells.py`` in Python loops over layers,
directions and steps: ``input_projection(x)`` for all steps at once, then ``recurrence()`` (the step with its
parameters bound) once per time step, over the steps' ``unbind`` (indexing ``xw[t]`` would make backward
quadratic in T). A padded step keeps the old state, so each sequence's final state is taken at its true length
and the backward direction starts fresh at its true last step. ``run_fused`` hands the same parameters to one of
PyTorch's fused RNN kernels (through ``seqlab.nn.functional.fused_rnn``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from seqlab.nn.functional.fused_rnn import fused_cell, fused_rnn, fused_rnn_packed, scan_loop
from seqlab.nn.functional.recurrence import LSTMState

State = Tensor | LSTMState
MERGE_MODES = ("concat", "sum", "mean", "mul")
# torch's flat weight order within one layer and direction (weight_hr only with a projection).
_FLAT_WEIGHT_NAMES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")


def _select(keep_t: Tensor, new: State, old: State) -> State:
    if isinstance(new, LSTMState):
        return LSTMState(torch.where(keep_t, new.h, old.h), torch.where(keep_t, new.c, old.c))
    return torch.where(keep_t, new, old)


def _hidden(state: State) -> Tensor:
    return state.h if isinstance(state, LSTMState) else state


def scan(
    step: Callable[[Tensor, State], State],
    xw: Tensor,
    state: State,
    keep: Tensor | None,
    *,
    reverse: bool,
) -> tuple[Tensor, State]:
    """Run ``step`` over xw (T, B, G*H) from ``state``; keep (T, B, 1) is True on real steps, None if all are.

    Returns the hidden states (T, B, H) and the final state. Steps come from ``unbind`` because indexing
    xw[t] in the loop gives every step's backward a full-size gradient of xw, quadratic in T. While exporting, the
    same steps run as one ``scan_loop``, which serves every T (a Python loop would be unrolled at the export's T).
    """
    if torch.compiler.is_exporting():
        return _scan_exported(step, xw, state, keep, reverse=reverse)
    xw_steps = xw.unbind(0)
    keep_steps = keep.unbind(0) if keep is not None else (None,) * len(xw_steps)
    steps = list(zip(xw_steps, keep_steps, strict=True))
    if reverse:
        steps.reverse()
    h_steps = []
    for xw_t, keep_t in steps:
        new = step(xw_t, state)
        state = new if keep_t is None else _select(keep_t, new, state)
        h_steps.append(_hidden(state))
    if reverse:
        h_steps.reverse()
    return torch.stack(h_steps), state  # (T, B, H)


def _scan_exported(
    step: Callable[[Tensor, State], State], xw: Tensor, state: State, keep: Tensor | None, *, reverse: bool
) -> tuple[Tensor, State]:
    """``scan``'s loop as one ``scan_loop`` (same arguments and results)."""

    lstm = isinstance(state, LSTMState)

    def combine(carry: tuple[Tensor, ...], inputs: tuple[Tensor, ...]) -> tuple[tuple[Tensor, ...], Tensor]:
        old = LSTMState(*carry) if lstm else carry[0]  # the scan carries plain tuples of tensors
        new = step(inputs[0], old)
        new = new if keep is None else _select(inputs[1], new, old)
        return (tuple(new) if lstm else (new,)), _hidden(new).clone()  # y must not alias the carry

    init = tuple(state) if lstm else (state,)
    final, h_steps = scan_loop(combine, init, (xw,) if keep is None else (xw, keep), reverse=reverse)
    return h_steps, LSTMState(*final) if lstm else final[0]


def merge_directions(forward: Tensor, backward: Tensor, merge_mode: str) -> Tensor:
    """Combine the two directions' outputs (..., H) as Keras' ``Bidirectional(merge_mode=...)`` does:
    concat -> (..., 2H) [forward, backward]; sum, mean (Keras: "ave"), mul -> (..., H) elementwise."""
    if merge_mode == "concat":
        return torch.cat([forward, backward], dim=-1)
    if merge_mode == "sum":
        return forward + backward
    if merge_mode == "mean":
        return (forward + backward) / 2
    return forward * backward


def variational_mask(like: Tensor, batch: int, features: int, p: float) -> Tensor:
    """A (B, features) inverted-dropout mask, Bernoulli(1 - p) / (1 - p): one per sequence, reused at every
    step (Gal & Ghahramani, 2016)."""
    return like.new_empty(batch, features).bernoulli_(1.0 - p).div_(1.0 - p)


def _run_layers(
    cells: Sequence[nn.Module],
    x: Tensor,
    keep: Tensor | None,
    initial: Sequence[State],
    *,
    num_directions: int,
    merge_mode: str,
    dropout: float,
    recurrent_dropout: float,
    training: bool,
    residual: bool = False,
) -> tuple[Tensor, list[State]]:
    """All layers and directions over x (T, B, E); cells and initial states in index ``layer * C + d``.

    Layer l + 1 reads layer l's merged outputs, after ``dropout`` (between layers, in training). With
    recurrent_dropout p > 0 in training, each layer and direction draws one mask for its input x_t (applied
    before the hoisted input projection, which is exact because the mask does not change over time) and one
    for h_{t-1}, which the cell's ``recurrence(h_mask)`` applies where h_{t-1} enters its recurrent matmuls.
    With ``residual``, layers from the second on add their input (after that dropout) to their merged output.
    Returns the top layer's merged outputs (T, B, C*H or H) and the final states in cell order.
    """
    C = num_directions
    num_layers = len(cells) // C
    variational = training and recurrent_dropout > 0.0
    B = x.shape[1]
    finals: list[State] = []
    for layer in range(num_layers):
        direction_outputs = []
        for d in range(C):
            cell = cells[layer * C + d]
            if variational:
                x_mask = variational_mask(x, B, x.shape[-1], recurrent_dropout)
                xw = cell.input_projection(x * x_mask)  # (T, B, E) * (B, E): one mask for all steps
                step = cell.recurrence(h_mask=variational_mask(x, B, cell.weight_hh.shape[1], recurrent_dropout))
            else:
                xw = cell.input_projection(x)  # (T, B, G*H): every step's input projection at once
                step = cell.recurrence()
            h_steps, final = scan(step, xw, initial[layer * C + d], keep, reverse=d == 1)
            direction_outputs.append(h_steps)
            finals.append(final)
        merged = merge_directions(*direction_outputs, merge_mode) if C == 2 else direction_outputs[0]
        x = merged + x if residual and layer > 0 else merged
        if layer < num_layers - 1:
            x = F.dropout(x, dropout, training)
    return x, finals


def run_reference(
    cells: Sequence[nn.Module],
    x: Tensor,
    lengths: Tensor | None,
    state: State,
    *,
    batch_first: bool,
    num_directions: int,
    merge_mode: str,
    dropout: float,
    recurrent_dropout: float,
    training: bool,
    residual: bool = False,
) -> tuple[Tensor, State]:
    """The reference path: x (B, T, E) if batch_first else (T, B, E), lengths (B,) or None, state (L*C, B, H)
    (or LSTMState) -> outputs in x's layout, zero past each length, and the final state shaped as ``state``."""
    x = x.transpose(0, 1) if batch_first else x  # (T, B, E)
    keep = None
    if lengths is not None:
        steps = torch.arange(x.shape[0], device=x.device)
        keep = (steps[:, None] < lengths.to(x.device)[None, :]).unsqueeze(-1)  # (T, B, 1)
    if isinstance(state, LSTMState):
        initial: list[State] = [LSTMState(h, c) for h, c in zip(state.h.unbind(0), state.c.unbind(0), strict=True)]
    else:
        initial = list(state.unbind(0))
    outputs, finals = _run_layers(
        cells,
        x,
        keep,
        initial,
        num_directions=num_directions,
        merge_mode=merge_mode,
        dropout=dropout,
        recurrent_dropout=recurrent_dropout,
        training=training,
        residual=residual,
    )
    outputs = outputs if keep is None else outputs.masked_fill(~keep, 0.0)
    outputs = outputs.transpose(0, 1) if batch_first else outputs  # back to the caller's layout
    if isinstance(state, LSTMState):
        return outputs, LSTMState(torch.stack([s.h for s in finals]), torch.stack([s.c for s in finals]))
    return outputs, torch.stack(finals)  # (L*C, B, H)


def run_fused(
    kernel: str,
    cells: Sequence[nn.Module],
    x: Tensor,
    lengths: Tensor | None,
    state: State,
    *,
    bias: bool,
    num_layers: int,
    dropout: float,
    training: bool,
    bidirectional: bool,
    batch_first: bool,
    merge_mode: str,
) -> tuple[Tensor, State]:
    """The fused path: ``kernel`` ("lstm", "gru", "rnn_tanh" or "rnn_relu", see ``seqlab.nn.functional.fused_rnn``)
    on the cells' parameters in torch's flat order,
    on packed sequences when lengths are given; same inputs and results as ``run_reference``. A merge mode
    other than concat is applied to the kernel's [forward, backward] output, which is exact for one layer.
    A single step (T = 1) of a unidirectional stack without lengths, projection or dropout in effect runs the
    kernel's single-step form layer by layer (``fused_cell``): the same step without the sequence kernel's set-up."""
    T = x.shape[1] if batch_first else x.shape[0]
    if (
        T == 1
        and lengths is None
        and not bidirectional
        and not (training and dropout > 0.0)
        and getattr(cells[0], "weight_hr", None) is None
    ):
        return _run_one_step(kernel, cells, x, state, batch_first=batch_first)
    weights = [getattr(cell, name, None) for cell in cells for name in _FLAT_WEIGHT_NAMES]
    weights = [w for w in weights if w is not None]
    # The kernel reads a projection from h and c having different sizes.
    hx = tuple(state) if isinstance(state, LSTMState) else state
    options = {
        "bias": bias,
        "num_layers": num_layers,
        "dropout": dropout,
        "training": training,
        "bidirectional": bidirectional,
    }
    if lengths is None:
        result = fused_rnn(kernel, x, hx, weights, batch_first=batch_first, **options)
        outputs = result[0]
    else:
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=batch_first, enforce_sorted=False)
        sorted_indices, unsorted_indices = packed.sorted_indices, packed.unsorted_indices
        if isinstance(hx, tuple):
            hx = tuple(part.index_select(-2, sorted_indices) for part in hx)  # batch dim of a state is -2
        else:
            hx = hx.index_select(-2, sorted_indices)
        result = fused_rnn_packed(kernel, packed.data, packed.batch_sizes, hx, weights, **options)
        out_packed = PackedSequence(result[0], packed.batch_sizes, sorted_indices, unsorted_indices)
        total_length = x.shape[1] if batch_first else x.shape[0]
        outputs, _ = pad_packed_sequence(out_packed, batch_first=batch_first, total_length=total_length)
        result = (result[0], *(part.index_select(-2, unsorted_indices) for part in result[1:]))
    if bidirectional and merge_mode != "concat":
        outputs = merge_directions(*outputs.chunk(2, dim=-1), merge_mode)  # (..., 2H) -> (..., H)
    return outputs, LSTMState(result[1], result[2]) if isinstance(state, LSTMState) else result[1]


def _run_one_step(
    kernel: str, cells: Sequence[nn.Module], x: Tensor, state: State, *, batch_first: bool
) -> tuple[Tensor, State]:
    """One time step, x (B, 1, E) or (1, B, E), through the L unidirectional layers by ``fused_cell``."""
    inputs = x[:, 0] if batch_first else x[0]  # (B, E)
    lstm = isinstance(state, LSTMState)
    h, c = [], []
    for layer, cell in enumerate(cells):
        hx = (state.h[layer], state.c[layer]) if lstm else state[layer]
        bias_ih, bias_hh = getattr(cell, "bias_ih", None), getattr(cell, "bias_hh", None)
        out = fused_cell(kernel, inputs, hx, cell.weight_ih, cell.weight_hh, bias_ih, bias_hh)
        inputs = out[0] if lstm else out  # (B, H), the next layer's input
        h.append(inputs)
        if lstm:
            c.append(out[1])
    outputs = inputs.unsqueeze(1 if batch_first else 0)
    return outputs, LSTMState(torch.stack(h), torch.stack(c)) if lstm else torch.stack(h)
