"""What RNN, LSTM and GRU in ``recurrent.py`` share: ``RecurrentBase`` and its two paths.

``run_reference`` runs any cell that follows the protocol of ``cells.py`` in Python loops over layers,
directions and steps: ``input_projection(x)`` for all steps at once, then ``recurrence()`` (the step with its
parameters bound) once per time step. A padded step keeps the old state, so each sequence's final state is
taken at its true length and the backward direction starts fresh at its true last step. ``run_fused`` hands
the same parameters to one of PyTorch's fused RNN kernels (through ``seqlab.nn.functional.fused_rnn``).
``RecurrentBase`` validates the configuration and the inputs, picks the path (``fused``) and converts layers to
and from torch.nn.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from seqlab.nn.cells import RECURRENT_INITS, LSTMState, check_input_dtype
from seqlab.nn.functional.fused_rnn import fused_cell, fused_kernels_available, fused_rnn, fused_rnn_packed
from seqlab.validation import check_bool, check_choice, check_int, check_probability

State = Tensor | LSTMState
MERGE_MODES = ("concat", "sum", "mean", "mul")
# torch's flat weight order within one layer and direction (weight_hr only with a projection).
_FLAT_WEIGHT_NAMES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")
# Layer options with the same name and meaning in torch.nn.RNN / LSTM / GRU.
_SHARED_WITH_TORCH = ("num_layers", "bias", "batch_first", "dropout", "bidirectional")


class RecurrentOutput(NamedTuple):
    """outputs: top layer's h_t for every step, (B, T, C*H) if batch_first else (T, B, C*H) (H instead of C*H
    for merge modes other than concat, P = proj_size instead of H with a projection), zero past each
    sequence's length. state: final h_n (L*C, B, H), or LSTMState(h_n, c_n) for an LSTM (h_n (L*C, B, P) with a
    projection), taken at each sequence's true length (the backward direction's final state is its state
    after step 0)."""

    outputs: Tensor
    state: State


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
    xw[t] in the loop gives every step's backward a full-size gradient of xw, quadratic in T.
    """
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


class RecurrentBase(nn.Module):
    """Shared machinery of RNN, LSTM and GRU; a subclass names its cell, kernel and torch.nn class."""

    torch_class: type[nn.RNNBase]
    has_cell_state = False  # True for the LSTM, whose state is LSTMState(h, c)
    fused_kernel: str  # the kernel's name in seqlab.nn.functional.fused_rnn.KERNEL_NAMES

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        num_layers: int,
        bidirectional: bool,
        dropout: float,
        batch_first: bool,
        bias: bool,
        merge_mode: str,
        recurrent_dropout: float,
        recurrent_init: str,
        use_fused: bool,
        make_cell: Callable[[int], nn.Module],
        proj_size: int = 0,
        residual: bool = False,
    ) -> None:
        super().__init__()
        check_int("num_layers", num_layers)
        check_probability("dropout", dropout)
        check_probability("recurrent_dropout", recurrent_dropout)
        check_choice("merge_mode", merge_mode, MERGE_MODES)
        if merge_mode != "concat" and not bidirectional:
            raise ValueError(f"merge_mode={merge_mode!r} needs bidirectional=True: one direction has nothing to merge")
        check_choice("recurrent_init", recurrent_init, RECURRENT_INITS)
        check_bool("residual", residual)
        if residual and num_layers < 2:
            raise ValueError(f"residual=True needs num_layers >= 2 (residuals join stacked layers), got {num_layers}")
        self.residual = residual
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bidirectional = bidirectional
        self.num_directions = 2 if bidirectional else 1
        self.dropout = dropout
        self.batch_first = batch_first
        self.bias = bias
        self.merge_mode = merge_mode
        self.recurrent_dropout = recurrent_dropout
        self.recurrent_init = recurrent_init
        self.use_fused = use_fused
        self.proj_size = proj_size
        self.output_size = proj_size or hidden_size  # features of each direction's h_t
        C = self.num_directions
        merged_size = C * self.output_size if merge_mode == "concat" else self.output_size
        self.cells = nn.ModuleList(
            make_cell(input_size if layer == 0 else merged_size) for layer in range(num_layers) for _ in range(C)
        )

    def extra_repr(self) -> str:
        """Sizes, the options that differ from their defaults, and which path runs."""
        shown = [
            f"{name}={getattr(self, name)!r}"
            for name, parameter in inspect.signature(type(self)).parameters.items()
            if parameter.kind is parameter.KEYWORD_ONLY
            and name not in ("use_fused", "device", "dtype")
            and getattr(self, name) != parameter.default
        ]
        return ", ".join([str(self.input_size), str(self.hidden_size), *shown, f"fused={self.fused}"])

    @property
    def fused(self) -> bool:
        """True when forward runs PyTorch's fused kernel, False when it runs the reference time loop: the
        configuration has torch.nn semantics and the kernels accept seqlab's call (``fused_kernels_available``)."""
        lacking = self._options_torch_lacks()
        if self.num_layers == 1:
            lacking.pop("merge_mode", None)  # the kernel's [forward, backward] output is merged afterwards
        return self.use_fused and not lacking and fused_kernels_available()

    def _options_torch_lacks(self) -> dict[str, object]:
        """The options set to something torch.nn's layer cannot compute, by name."""
        lacking: dict[str, object] = {}
        if self.merge_mode != "concat":
            lacking["merge_mode"] = self.merge_mode
        if self.recurrent_dropout > 0.0:
            lacking["recurrent_dropout"] = self.recurrent_dropout
        if self.residual:
            lacking["residual"] = self.residual
        return lacking

    def _torch_options(self) -> dict[str, object]:
        return {}

    def forward(
        self, x: Tensor, lengths: Tensor | Sequence[int] | None = None, state: State | None = None
    ) -> RecurrentOutput:
        """Run all layers over x (B, T, E) or (T, B, E), floating point with the weights' dtype, T >= 1; lengths
        (B,), an integer tensor or a sequence of ints (converted with ``torch.as_tensor``); state shaped as the
        output's. Raises TypeError for an integer x or another float dtype, ValueError for the rest."""
        layout = "(B, T, E)" if self.batch_first else "(T, B, E)"
        if x.dim() != 3:
            raise ValueError(f"expected x of shape {layout}, got shape {tuple(x.shape)}")
        if x.shape[-1] != self.input_size:
            raise ValueError(f"expected x with {self.input_size} features (input_size), got {x.shape[-1]}")
        check_input_dtype(x, self.cells[0].weight_ih)
        B, T = (x.shape[0], x.shape[1]) if self.batch_first else (x.shape[1], x.shape[0])
        if T == 0:
            raise ValueError(f"x has no time steps (T = 0, shape {tuple(x.shape)}); a recurrent layer needs T >= 1")
        if lengths is not None:
            lengths = lengths if isinstance(lengths, Tensor) else torch.as_tensor(lengths)
            self._check_lengths(lengths, B, T)
        state = self._initial_state(x, B) if state is None else self._check_state(state, B)
        options = {"batch_first": self.batch_first, "dropout": self.dropout, "training": self.training}
        if self.fused:
            outputs, final_state = run_fused(
                self.fused_kernel,
                self.cells,
                x,
                lengths,
                state,
                bias=self.bias,
                num_layers=self.num_layers,
                bidirectional=self.bidirectional,
                merge_mode=self.merge_mode,
                **options,
            )
        else:
            outputs, final_state = run_reference(
                self.cells,
                x,
                lengths,
                state,
                num_directions=self.num_directions,
                merge_mode=self.merge_mode,
                recurrent_dropout=self.recurrent_dropout,
                residual=self.residual,
                **options,
            )
        return RecurrentOutput(outputs, final_state)

    @staticmethod
    def _check_lengths(lengths: Tensor, B: int, T: int) -> None:
        if tuple(lengths.shape) != (B,):
            raise ValueError(f"lengths must have shape (B,) = ({B},), got {tuple(lengths.shape)}")
        if lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
            raise ValueError(f"lengths must be an integer tensor, got dtype {lengths.dtype}")
        low, high = int(lengths.min()), int(lengths.max())
        if low < 1 or high > T:
            raise ValueError(f"lengths must be in [1, T] = [1, {T}], got values from {low} to {high}")

    def _initial_state(self, x: Tensor, B: int) -> State:
        h0 = x.new_zeros(self.num_layers * self.num_directions, B, self.output_size)
        if self.has_cell_state:
            return LSTMState(h0, x.new_zeros(self.num_layers * self.num_directions, B, self.hidden_size))
        return h0

    def _check_state(self, state: State, B: int) -> State:
        if self.has_cell_state != (isinstance(state, tuple) and len(state) == 2):
            wanted = "an (h, c) pair" if self.has_cell_state else "one tensor h"
            raise ValueError(f"{type(self).__name__} state must be {wanted}, got {type(state).__name__}")
        LC = self.num_layers * self.num_directions
        h_label = "(L*C, B, proj_size)" if self.proj_size else "(L*C, B, H)"
        expected = {"h": (h_label, (LC, B, self.output_size)), "c": ("(L*C, B, H)", (LC, B, self.hidden_size))}
        parts = dict(zip("hc", state, strict=True)) if self.has_cell_state else {"h": state}
        for name, part in parts.items():
            label, shape = expected[name]
            if tuple(part.shape) != shape:
                raise ValueError(f"state {name} must have shape {label} = {shape}, got {tuple(part.shape)}")
        return LSTMState(*state) if self.has_cell_state else state

    @classmethod
    def _options_from_torch(cls, module: nn.RNNBase) -> dict[str, object]:
        return {}

    @classmethod
    def from_torch(cls, module: nn.RNNBase) -> RecurrentBase:
        """A layer with the configuration, device, dtype and a copy of the weights of the torch.nn ``module``.

        Raises:
            ValueError: module is not a ``cls.torch_class``.
        """
        if not isinstance(module, cls.torch_class):
            raise ValueError(
                f"{cls.__name__}.from_torch expects torch.nn.{cls.torch_class.__name__}, got {type(module).__name__}"
            )
        w = module.weight_ih_l0
        shared = {name: getattr(module, name) for name in _SHARED_WITH_TORCH}
        options = cls._options_from_torch(module)
        layer = cls(module.input_size, module.hidden_size, **shared, **options, device=w.device, dtype=w.dtype)
        with torch.no_grad():
            for name, p in layer._torch_named_parameters():
                p.copy_(getattr(module, name))
        return layer

    def to_torch(self) -> nn.RNNBase:
        """The equivalent torch.nn layer with a copy of the weights.

        Raises:
            ValueError: an option torch.nn does not have is set (textbook GRU, layer_norm, recurrent_dropout,
                merge_mode other than concat); the message names them.
        """
        lacking = self._options_torch_lacks()
        if lacking:
            listed = ", ".join(f"{name}={value!r}" for name, value in lacking.items())
            raise ValueError(f"torch.nn.{self.torch_class.__name__} has no equivalent of {listed}")
        w = self.cells[0].weight_ih
        shared = {name: getattr(self, name) for name in _SHARED_WITH_TORCH}
        options = self._torch_options()
        module = self.torch_class(
            self.input_size, self.hidden_size, **shared, **options, device=w.device, dtype=w.dtype
        )
        with torch.no_grad():
            for name, p in self._torch_named_parameters():
                getattr(module, name).copy_(p)
        return module

    def _torch_named_parameters(self) -> list[tuple[str, nn.Parameter]]:
        """(torch.nn name, seqlab parameter) pairs, e.g. ("weight_hh_l1_reverse", cells[3].weight_hh)."""
        C = self.num_directions
        pairs = []
        for index, cell in enumerate(self.cells):
            suffix = f"_l{index // C}" + ("_reverse" if index % C == 1 else "")
            pairs.extend((name + suffix, p) for name, p in cell.named_parameters())
        return pairs
