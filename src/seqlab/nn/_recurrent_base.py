"""What RNN, LSTM and GRU in ``recurrent.py`` share: ``RecurrentBase`` validates the configuration and the
inputs, picks one of the two paths of ``recurrent_paths`` (``fused``: PyTorch's kernel, else the reference loop
over the cells) and converts layers to and from torch.nn.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from seqlab.nn.cell_parameters import RECURRENT_INITS, check_input_dtype
from seqlab.nn.functional.fused_rnn import fused_kernels_available
from seqlab.nn.functional.recurrence import LSTMState
from seqlab.nn.recurrent_paths import MERGE_MODES, State, run_fused, run_reference
from seqlab.validation import check_bool, check_choice, check_int, check_probability

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
        (B,), an integer tensor on the cpu or x's device, or a sequence of ints (converted with
        ``torch.as_tensor``); state shaped as the output's. An empty batch (B = 0) gives empty outputs, with or
        without lengths. Raises TypeError for an integer x or another float dtype, ValueError for the rest."""
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
            self._check_lengths(lengths, B, T, x.device)
            if B == 0:
                lengths = None  # no row to mask, and the fused kernel cannot pack an empty batch
        state = self._initial_state(x, B) if state is None else self._check_state(state, B)
        options = {"batch_first": self.batch_first, "dropout": self.dropout, "training": self.training}
        # Packed sequences cannot be exported (their batch sizes are data); the reference path's loop can.
        if self.fused and not (lengths is not None and torch.compiler.is_exporting()):
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
    def _check_lengths(lengths: Tensor, B: int, T: int, device: torch.device) -> None:
        if lengths.device not in (torch.device("cpu"), device):
            raise ValueError(f"lengths must be on the cpu or on x's device ({device}), got {lengths.device}")
        if tuple(lengths.shape) != (B,):
            raise ValueError(f"lengths must have shape (B,) = ({B},), got {tuple(lengths.shape)}")
        if lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
            raise ValueError(f"lengths must be an integer tensor, got dtype {lengths.dtype}")
        if B == 0:
            return
        if torch.compiler.is_exporting():
            return  # the values are not known while exporting; the graph's caller checks them
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
