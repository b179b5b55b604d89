"""Stacked, optionally bidirectional recurrent layers built from the cells in ``cells.py``.

Two paths compute the same function. The reference path follows the equations: per layer and direction it
computes the input projection x W_ih^T + b_ih for all steps in one matmul, then runs ``cell.step`` over the
time steps, carrying each sequence's state unchanged past its length. The fused path hands seqlab's own
parameters to PyTorch's fused RNN kernels (``torch._VF.lstm`` / ``gru`` / ``rnn_tanh`` / ``rnn_relu``, as
torch.nn.LSTM does, with packed sequences when lengths are given). ``layer.fused`` says which one runs.

Parameters live in ``layer.cells``, index ``layer * C + direction`` (direction 1 runs backwards in time),
which is torch.nn's flat weight order, so state_dict keys read ``cells.{l * C + d}.weight_ih`` etc.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from seqlab.nn.cells import GRUCell, LSTMCell, LSTMState, RNNCell

State = Tensor | LSTMState
# Layer options with the same name and meaning in torch.nn.RNN / LSTM / GRU.
_SHARED_WITH_TORCH = ("num_layers", "bias", "batch_first", "dropout", "bidirectional")


class RecurrentOutput(NamedTuple):
    """outputs: top layer's h_t for every step, (B, T, C*H) if batch_first else (T, B, C*H), zero past each
    sequence's length. state: final h_n (L*C, B, H), or LSTMState(h_n, c_n) for an LSTM, taken at each
    sequence's true length (the backward direction's final state is its state after step 0)."""

    outputs: Tensor
    state: State


def _select(keep_t: Tensor, new: State, old: State) -> State:
    if isinstance(new, LSTMState):
        return LSTMState(torch.where(keep_t, new.h, old.h), torch.where(keep_t, new.c, old.c))
    return torch.where(keep_t, new, old)


def _scan(
    step: Callable[[Tensor, State], State], xw: Tensor, state: State, keep: Tensor | None, *, reverse: bool
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
        # A padded step keeps the old state, so the backward direction starts fresh at the true last step.
        state = new if keep_t is None else _select(keep_t, new, state)
        h_steps.append(state.h if isinstance(state, LSTMState) else state)
    if reverse:
        h_steps.reverse()
    return torch.stack(h_steps), state  # (T, B, H)


class _Recurrent(nn.Module):
    """Shared machinery of RNN, LSTM and GRU; a subclass names its cell, kernel and torch.nn class."""

    torch_class: type[nn.RNNBase]
    has_cell_state = False  # True for the LSTM, whose state is LSTMState(h, c)

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
        use_fused: bool,
        make_cell: Callable[[int], RNNCell | LSTMCell | GRUCell],
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bidirectional = bidirectional
        self.num_directions = 2 if bidirectional else 1
        self.dropout = dropout
        self.batch_first = batch_first
        self.bias = bias
        self.use_fused = use_fused
        C = self.num_directions
        self.cells = nn.ModuleList(
            make_cell(input_size if layer == 0 else C * hidden_size) for layer in range(num_layers) for _ in range(C)
        )

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
            f"bidirectional={self.bidirectional}, dropout={self.dropout}, batch_first={self.batch_first}, "
            f"fused={self.fused}"
        )

    @property
    def fused(self) -> bool:
        """True when forward runs PyTorch's fused kernel, False when it runs the reference time loop."""
        return self.use_fused and self._has_torch_semantics()

    def _has_torch_semantics(self) -> bool:
        return True

    def _torch_options(self) -> dict[str, object]:
        return {}

    def forward(self, x: Tensor, lengths: Tensor | None = None, state: State | None = None) -> RecurrentOutput:
        """Run all layers over x (B, T, E) or (T, B, E); lengths (B,); state shaped as the output's."""
        layout = "(B, T, E)" if self.batch_first else "(T, B, E)"
        if x.dim() != 3:
            raise ValueError(f"expected x of shape {layout}, got shape {tuple(x.shape)}")
        if x.shape[-1] != self.input_size:
            raise ValueError(f"expected x with {self.input_size} features (input_size), got {x.shape[-1]}")
        B, T = (x.shape[0], x.shape[1]) if self.batch_first else (x.shape[1], x.shape[0])
        if lengths is not None:
            self._check_lengths(lengths, B, T)
        state = self._initial_state(x, B) if state is None else self._check_state(state, B)
        if self.fused:
            return self._forward_fused(x, lengths, state)
        return self._forward_reference(x, lengths, state)

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
        h0 = x.new_zeros(self.num_layers * self.num_directions, B, self.hidden_size)
        return LSTMState(h0, torch.zeros_like(h0)) if self.has_cell_state else h0

    def _check_state(self, state: State, B: int) -> State:
        if self.has_cell_state != (isinstance(state, tuple) and len(state) == 2):
            wanted = "an (h, c) pair" if self.has_cell_state else "one tensor h"
            raise ValueError(f"{type(self).__name__} state must be {wanted}, got {type(state).__name__}")
        expected = (self.num_layers * self.num_directions, B, self.hidden_size)
        parts = dict(zip("hc", state, strict=True)) if self.has_cell_state else {"h": state}
        for name, part in parts.items():
            if tuple(part.shape) != expected:
                raise ValueError(f"state {name} must have shape (L*C, B, H) = {expected}, got {tuple(part.shape)}")
        return LSTMState(*state) if self.has_cell_state else state

    def _forward_reference(self, x: Tensor, lengths: Tensor | None, state: State) -> RecurrentOutput:
        C = self.num_directions
        layer_input = x.transpose(0, 1) if self.batch_first else x  # (T, B, E)
        T = layer_input.shape[0]
        keep = None
        if lengths is not None:
            steps = torch.arange(T, device=x.device)
            keep = (steps[:, None] < lengths.to(x.device)[None, :]).unsqueeze(-1)  # (T, B, 1)
        if isinstance(state, LSTMState):
            initial: list[State] = [LSTMState(h, c) for h, c in zip(state.h.unbind(0), state.c.unbind(0), strict=True)]
        else:
            initial = list(state.unbind(0))
        finals: list[State] = []
        for layer in range(self.num_layers):
            direction_outputs = []
            for d in range(C):
                cell = self.cells[layer * C + d]
                xw = cell.input_projection(layer_input)  # (T, B, G*H): every step's input projection at once
                h_steps, final = _scan(cell.recurrence(), xw, initial[layer * C + d], keep, reverse=d == 1)
                direction_outputs.append(h_steps)
                finals.append(final)
            layer_input = torch.cat(direction_outputs, dim=-1) if C == 2 else direction_outputs[0]  # (T, B, C*H)
            if layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, self.dropout, self.training)
        outputs = layer_input if keep is None else layer_input.masked_fill(~keep, 0.0)
        outputs = outputs.transpose(0, 1) if self.batch_first else outputs  # back to the caller's layout
        if isinstance(state, LSTMState):
            final_state: State = LSTMState(torch.stack([s.h for s in finals]), torch.stack([s.c for s in finals]))
        else:
            final_state = torch.stack(finals)  # (L*C, B, H)
        return RecurrentOutput(outputs, final_state)

    def _forward_fused(self, x: Tensor, lengths: Tensor | None, state: State) -> RecurrentOutput:
        weights = [
            p
            for cell in self.cells
            for p in (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
            if p is not None
        ]
        hx = tuple(state) if isinstance(state, LSTMState) else state
        kernel = self._fused_kernel()
        options = (self.bias, self.num_layers, self.dropout, self.training, self.bidirectional)
        if lengths is None:
            result = kernel(x, hx, weights, *options, self.batch_first)
            outputs = result[0]
        else:
            packed = pack_padded_sequence(x, lengths.cpu(), batch_first=self.batch_first, enforce_sorted=False)
            sorted_indices, unsorted_indices = packed.sorted_indices, packed.unsorted_indices
            if isinstance(hx, tuple):
                hx = tuple(part.index_select(1, sorted_indices) for part in hx)
            else:
                hx = hx.index_select(1, sorted_indices)
            result = kernel(packed.data, packed.batch_sizes, hx, weights, *options)
            out_packed = PackedSequence(result[0], packed.batch_sizes, sorted_indices, unsorted_indices)
            total_length = x.shape[1] if self.batch_first else x.shape[0]
            outputs, _ = pad_packed_sequence(out_packed, batch_first=self.batch_first, total_length=total_length)
            result = (result[0], *(part.index_select(1, unsorted_indices) for part in result[1:]))
        final_state = LSTMState(result[1], result[2]) if isinstance(state, LSTMState) else result[1]
        return RecurrentOutput(outputs, final_state)

    @classmethod
    def _options_from_torch(cls, module: nn.RNNBase) -> dict[str, object]:
        return {}

    @classmethod
    def from_torch(cls, module: nn.RNNBase) -> _Recurrent:
        """A layer with the configuration, device, dtype and a copy of the weights of the torch.nn ``module``.

        Raises:
            ValueError: module is not a ``cls.torch_class`` or is an LSTM with proj_size > 0.
        """
        if not isinstance(module, cls.torch_class):
            raise ValueError(
                f"{cls.__name__}.from_torch expects torch.nn.{cls.torch_class.__name__}, got {type(module).__name__}"
            )
        if getattr(module, "proj_size", 0) > 0:
            raise ValueError(f"LSTM with proj_size > 0 is not supported, got proj_size={module.proj_size}")
        w = module.weight_ih_l0
        shared = {name: getattr(module, name) for name in _SHARED_WITH_TORCH}
        options = cls._options_from_torch(module)
        layer = cls(module.input_size, module.hidden_size, **shared, **options, device=w.device, dtype=w.dtype)
        with torch.no_grad():
            for name, p in layer._torch_named_parameters():
                p.copy_(getattr(module, name))
        return layer

    def to_torch(self) -> nn.RNNBase:
        """The equivalent torch.nn layer with a copy of the weights."""
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


class RNN(_Recurrent):
    """Stacked, optionally bidirectional Elman RNN (``RNNCell``).

    h_t = act(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh) per layer and direction, act = tanh or relu.

    Args:
        input_size: E, features per step.
        hidden_size: H.
        num_layers: L stacked layers; layer l > 0 reads layer l-1's outputs (C*H features).
        bidirectional: add a layer running backwards in time (C = 2); outputs concatenate [forward, backward].
        dropout: dropout on each layer's outputs except the last, in training only.
        batch_first: x and outputs are (B, T, ...) if True, else (T, B, ...). States are always (L*C, B, H).
        bias: learn b_ih and b_hh.
        nonlinearity: "tanh" or "relu".
        use_fused: run torch's fused kernel (always possible here); False forces the reference loop.
        device, dtype: where and how the parameters are created.

    Inputs: x (B, T, E) or (T, B, E); lengths (B,) integers in [1, T] or None for all T; state h_0 (L*C, B, H)
        or None for zeros.
    Outputs: RecurrentOutput(outputs (B, T, C*H) or (T, B, C*H), state h_n (L*C, B, H)).
    Raises:
        ValueError: bad nonlinearity, num_layers < 1, dropout outside [0, 1); x not 3-D or x.shape[-1] !=
            input_size; lengths not of shape (B,), not integers, or outside [1, T]; state not (L*C, B, H).
            Messages show the numbers.
    """

    torch_class = nn.RNN

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        batch_first: bool = True,
        bias: bool = True,
        nonlinearity: str = "tanh",
        use_fused: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            input_size,
            hidden_size,
            num_layers=num_layers,
            bidirectional=bidirectional,
            dropout=dropout,
            batch_first=batch_first,
            bias=bias,
            use_fused=use_fused,
            make_cell=lambda size: RNNCell(
                size, hidden_size, bias=bias, nonlinearity=nonlinearity, device=device, dtype=dtype
            ),
        )
        self.nonlinearity = nonlinearity

    def _fused_kernel(self) -> Callable[..., tuple[Tensor, ...]]:
        return torch._VF.rnn_tanh if self.nonlinearity == "tanh" else torch._VF.rnn_relu

    def _torch_options(self) -> dict[str, object]:
        return {"nonlinearity": self.nonlinearity}

    @classmethod
    def _options_from_torch(cls, module: nn.RNNBase) -> dict[str, object]:
        return {"nonlinearity": module.nonlinearity}


class LSTM(_Recurrent):
    """Stacked, optionally bidirectional LSTM (``LSTMCell``, Hochreiter & Schmidhuber, 1997).

    Args:
        input_size, hidden_size, num_layers, bidirectional, dropout, batch_first, bias, use_fused, device,
            dtype: as for ``RNN``.
        forget_bias: added to every cell's forget-gate bias b_if at init (Jozefowicz et al., 2015).

    Inputs: x (B, T, E) or (T, B, E); lengths (B,) integers in [1, T] or None; state LSTMState(h_0, c_0) or a
        (h_0, c_0) tuple, each (L*C, B, H), or None for zeros.
    Outputs: RecurrentOutput(outputs (B, T, C*H) or (T, B, C*H), state LSTMState(h_n, c_n), each (L*C, B, H)).
    Raises:
        ValueError: as for ``RNN``; h or c not (L*C, B, H).
    """

    torch_class = nn.LSTM
    has_cell_state = True

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        batch_first: bool = True,
        bias: bool = True,
        forget_bias: float = 1.0,
        use_fused: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            input_size,
            hidden_size,
            num_layers=num_layers,
            bidirectional=bidirectional,
            dropout=dropout,
            batch_first=batch_first,
            bias=bias,
            use_fused=use_fused,
            make_cell=lambda size: LSTMCell(
                size, hidden_size, bias=bias, forget_bias=forget_bias, device=device, dtype=dtype
            ),
        )
        self.forget_bias = forget_bias

    def _fused_kernel(self) -> Callable[..., tuple[Tensor, ...]]:
        return torch._VF.lstm

    @classmethod
    def _options_from_torch(cls, module: nn.RNNBase) -> dict[str, object]:
        return {"forget_bias": 0.0}


class GRU(_Recurrent):
    """Stacked, optionally bidirectional GRU (``GRUCell``, Cho et al., 2014), reset-after or textbook form.

    Args:
        input_size, hidden_size, num_layers, bidirectional, dropout, batch_first, bias, device, dtype: as for
            ``RNN``.
        variant: "reset_after" (torch.nn.GRU semantics) or "textbook" (r_t applied to h_{t-1} before W_hn).
        use_fused: run torch's fused kernel when variant="reset_after"; the textbook form always runs the
            reference loop (see ``fused``).

    Inputs: x (B, T, E) or (T, B, E); lengths (B,) integers in [1, T] or None; state h_0 (L*C, B, H) or None.
    Outputs: RecurrentOutput(outputs (B, T, C*H) or (T, B, C*H), state h_n (L*C, B, H)).
    Raises:
        ValueError: as for ``RNN``; bad variant; ``to_torch`` on the textbook variant.
    """

    torch_class = nn.GRU

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        batch_first: bool = True,
        bias: bool = True,
        variant: str = "reset_after",
        use_fused: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            input_size,
            hidden_size,
            num_layers=num_layers,
            bidirectional=bidirectional,
            dropout=dropout,
            batch_first=batch_first,
            bias=bias,
            use_fused=use_fused,
            make_cell=lambda size: GRUCell(size, hidden_size, bias=bias, variant=variant, device=device, dtype=dtype),
        )
        self.variant = variant

    def _has_torch_semantics(self) -> bool:
        return self.variant == "reset_after"

    def _fused_kernel(self) -> Callable[..., tuple[Tensor, ...]]:
        return torch._VF.gru

    def to_torch(self) -> nn.GRU:
        """The equivalent torch.nn.GRU with a copy of the weights (reset_after only).

        Raises:
            ValueError: the layer is the textbook variant, which torch.nn does not implement.
        """
        if self.variant != "reset_after":
            raise ValueError(
                f"torch.nn.GRU implements only variant='reset_after'; this layer is variant={self.variant!r}"
            )
        return super().to_torch()
