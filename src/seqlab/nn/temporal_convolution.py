"""Causal dilated convolutions and the temporal convolutional network (TCN) stacked from them.

A causal convolution of kernel size k and dilation d (van den Oord et al., 2016, WaveNet, section 2.1) reads only
the present and the past:

    y_t = b + sum_{i=0}^{k-1} W_i x_{t - i d}            x_s = 0 for s < 0 (or the streamed past, below)

Stacked causal convolutions with dilations d_1..d_n see the inputs [t - R + 1, t], R = 1 + (k - 1) sum_j d_j (the
receptive field). The TCN of Bai, Kolter & Koltun (2018, section 3, figure 1b) stacks L residual blocks ("levels");
level i = 0..L-1 holds two causal convolutions of dilation 2^i, each followed by a ReLU and dropout:

    z = dropout(relu(conv_2(dropout(relu(conv_1(x))))))
    out = relu(z + x W_skip)              (W_skip: a 1x1 convolution when the sizes differ, else the identity)

so R = 1 + 2 (k - 1)(2^L - 1). Weight normalisation of the convolutions (Salimans & Kingma, 2016), which Bai et al.
use, is optional and off by default; weights start at PyTorch's Conv1d initialisation.

Streaming: a convolution's state is its last P = (k - 1) d inputs, (P, B, C) (batch at dimension -2, as every
recurrent state in seqlab, so ``reset_state`` / ``select_rows`` treat it as one). Given the state, a chunk of new
steps is convolved exactly as if the whole stream were read at once, so a model can be fed one token at a time at
constant cost per step (the cache of "fast WaveNet", Paine et al., 2016); a zero state is the start of a sequence.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from seqlab.errors import ConfigError
from seqlab.validation import check_bool, check_int, check_probability

MAX_RECEPTIVE_FIELD = 65_536  # steps; a larger one would allocate states of (k - 1) 2^(L-1) steps per convolution


def receptive_field(kernel_size: int, dilations: list[int]) -> int:
    """R = 1 + (k - 1) sum_j d_j: the inputs that one output of a stack of causal convolutions with kernel size k
    and dilations d_j reads, counting the current one."""
    return 1 + (kernel_size - 1) * sum(dilations)


def tcn_dilations(num_levels: int) -> list[int]:
    """The dilation of each convolution of a TCN of ``num_levels`` levels, two per level: 1, 1, 2, 2, 4, 4, ..."""
    return [2**level for level in range(num_levels) for _ in range(2)]


def check_tcn_sizes(kernel_size: object, num_levels: object) -> int:
    """The receptive field 1 + 2 (k - 1)(2^L - 1) of a TCN of ``kernel_size`` k and ``num_levels`` L, checked
    before anything is allocated.

    Raises: ConfigError naming the bad value: k or L not an integer >= 1, or a receptive field over
        ``MAX_RECEPTIVE_FIELD``.
    """
    check_int("kernel_size", kernel_size)
    check_int("num_levels", num_levels)
    if num_levels > 64 or receptive_field(kernel_size, tcn_dilations(num_levels)) > MAX_RECEPTIVE_FIELD:
        raise ConfigError(
            f"num_levels ({num_levels}) and kernel_size ({kernel_size}) give a receptive field over "
            f"{MAX_RECEPTIVE_FIELD} steps (MAX_RECEPTIVE_FIELD)"
        )
    return receptive_field(kernel_size, tcn_dilations(num_levels))


class CausalConvOutput(NamedTuple):
    """outputs (B, T, C_out); past (P, B, C_in): the last P = (k - 1) d inputs, the state that continues them."""

    outputs: Tensor
    past: Tensor


class CausalConv1d(nn.Module):
    """Causal dilated 1-D convolution over (B, T, C) sequences (module docstring): the output at step t reads the
    inputs t, t - d, ..., t - (k - 1) d.

    In torch's cross-correlation layout ``W_i`` is ``conv.weight[:, :, k - 1 - i]``: the convolution runs on the
    input left-padded with P = (k - 1) d zeros (or the past), which is ``torch.nn.functional.conv1d`` on that input.

    Args:
        in_channels: C_in.  out_channels: C_out.  kernel_size: k >= 1.
        dilation: d >= 1, steps between the taps.
        bias: add b.  weight_norm: reparametrise W as g v / ||v|| per output channel (Salimans & Kingma, 2016).
    Inputs: x (B, T, C_in); past (P, B, C_in), the inputs before x (the previous call's ``past``), zeros if None.
    Outputs: CausalConvOutput(outputs (B, T, C_out), past (P, B, C_in)).
    Raises: ConfigError (a ValueError) for a size < 1; ValueError if x or past have the wrong shape.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        dilation: int = 1,
        bias: bool = True,
        weight_norm: bool = False,
    ) -> None:
        super().__init__()
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels)):
            check_int(name, value)
        check_int("kernel_size", kernel_size)
        check_int("dilation", dilation)
        check_bool("weight_norm", weight_norm)
        self.in_channels, self.kernel_size, self.dilation = in_channels, kernel_size, dilation
        conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, bias=bias)
        self.conv = nn.utils.parametrizations.weight_norm(conv) if weight_norm else conv

    @property
    def context_size(self) -> int:
        """P = (k - 1) d, the past steps an output reads besides the current one."""
        return (self.kernel_size - 1) * self.dilation

    def forward(self, x: Tensor, past: Tensor | None = None) -> CausalConvOutput:
        if x.dim() != 3 or x.shape[-1] != self.in_channels:
            raise ValueError(f"x must be (B, T, {self.in_channels}), got shape {tuple(x.shape)}")
        B, P = x.shape[0], self.context_size
        if past is None:
            past = x.new_zeros(P, B, self.in_channels)
        elif past.shape != (P, B, self.in_channels):
            raise ValueError(f"past must be ({P}, {B}, {self.in_channels}) (P, B, C_in), got {tuple(past.shape)}")
        full = torch.cat([past.transpose(0, 1), x], dim=1)  # (B, P + T, C_in)
        y = self.conv(full.transpose(1, 2)).transpose(1, 2)  # (B, T, C_out): "valid" convolution of P + T steps
        return CausalConvOutput(y, full[:, x.shape[1] :].transpose(0, 1))  # past: the last P inputs, (P, B, C_in)


class TemporalBlockOutput(NamedTuple):
    """outputs (B, T, H); state: (past of conv_1, past of conv_2), each (P, B, C)."""

    outputs: Tensor
    state: tuple[Tensor, Tensor]


class TemporalBlock(nn.Module):
    """One TCN level (Bai et al., 2018, figure 1b): two causal convolutions of one dilation, each followed by a ReLU
    and dropout, and a residual connection (module docstring).

    Args:
        input_size: E.  hidden_size: H.  kernel_size: k.  dilation: d of both convolutions.
        dropout: after each ReLU inside the block while training.  weight_norm: of both convolutions.
    Inputs: x (B, T, E); state (past of conv_1 (P, B, E), past of conv_2 (P, B, H)) or None (zeros); keep (B, T, 1)
        floating, 0 at steps that enter the convolutions as zeros (padding), or None.
    Outputs: TemporalBlockOutput(outputs (B, T, H), state).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        kernel_size: int,
        *,
        dilation: int,
        dropout: float = 0.0,
        weight_norm: bool = False,
    ) -> None:
        super().__init__()
        check_probability("dropout", dropout)
        options = {"dilation": dilation, "weight_norm": weight_norm}
        self.conv1 = CausalConv1d(input_size, hidden_size, kernel_size, **options)
        self.conv2 = CausalConv1d(hidden_size, hidden_size, kernel_size, **options)
        self.skip = nn.Linear(input_size, hidden_size) if input_size != hidden_size else None  # W_skip, 1x1 conv
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: Tensor, state: tuple[Tensor, Tensor] | None = None, keep: Tensor | None = None
    ) -> TemporalBlockOutput:
        past1, past2 = (None, None) if state is None else state
        z, past1 = self.conv1(x if keep is None else x * keep, past1)
        z = self.dropout(torch.relu(z))  # (B, T, H)
        z, past2 = self.conv2(z if keep is None else z * keep, past2)
        z = self.dropout(torch.relu(z))
        residual = x if self.skip is None else self.skip(x)  # (B, T, H)
        return TemporalBlockOutput(torch.relu(z + residual), (past1, past2))


class TemporalConvOutput(NamedTuple):
    """outputs (B, T, H); state: one (past of conv_1, past of conv_2) pair per level, to continue the sequences."""

    outputs: Tensor
    state: list[tuple[Tensor, Tensor]]


class TemporalConvNet(nn.Module):
    """Temporal convolutional network (Bai, Kolter & Koltun, 2018): ``num_levels`` residual ``TemporalBlock``s with
    dilations 1, 2, 4, ..., 2^(L-1); causal, with receptive field R = 1 + 2 (k - 1)(2^L - 1) (module docstring).

    Args:
        input_size: E.  hidden_size: H, channels of every level.
        num_levels: L residual blocks.  kernel_size: k of every convolution.
        dropout: inside the blocks while training.  weight_norm: of every convolution (off by default).
    Inputs:
        x: (B, T, E).
        state: the ``state`` of a previous call on the same sequences (the inputs before x), or None (zeros: x
            starts the sequences). Every tensor has the batch at dimension -2.
        keep_mask: (B, T) bool, False at padding, which enters every convolution as zeros, so a left-padded row
            gives the outputs of the row alone; None means all real.
    Outputs: TemporalConvOutput(outputs (B, T, H), state after the last step).
    Raises: ConfigError (a ValueError) for a size < 1, a receptive field over ``MAX_RECEPTIVE_FIELD`` or a dropout
        outside [0, 1); ValueError for x, state or keep_mask of the wrong shape.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        num_levels: int,
        kernel_size: int = 2,
        dropout: float = 0.0,
        weight_norm: bool = False,
    ) -> None:
        super().__init__()
        check_int("input_size", input_size)
        check_int("hidden_size", hidden_size)
        check_tcn_sizes(kernel_size, num_levels)
        self.input_size, self.hidden_size, self.kernel_size = input_size, hidden_size, kernel_size
        self.levels = nn.ModuleList(
            TemporalBlock(
                input_size if level == 0 else hidden_size,
                hidden_size,
                kernel_size,
                dilation=2**level,
                dropout=dropout,
                weight_norm=weight_norm,
            )
            for level in range(num_levels)
        )

    @property
    def receptive_field(self) -> int:
        """R = 1 + (k - 1) sum_j d_j over every convolution: the output at t reads the inputs [t - R + 1, t]."""
        return 1 + sum(conv.context_size for block in self.levels for conv in (block.conv1, block.conv2))

    def forward(
        self, x: Tensor, state: list[tuple[Tensor, Tensor]] | None = None, *, keep_mask: Tensor | None = None
    ) -> TemporalConvOutput:
        if x.dim() != 3 or x.shape[-1] != self.input_size:
            raise ValueError(f"x must be (B, T, {self.input_size}), got shape {tuple(x.shape)}")
        if state is not None and len(state) != len(self.levels):
            raise ValueError(f"state must hold one pair per level ({len(self.levels)}), got {len(state)}")
        keep = None
        if keep_mask is not None:
            if keep_mask.dtype != torch.bool or keep_mask.shape != x.shape[:2]:
                raise ValueError(
                    f"keep_mask must be a bool tensor of shape {tuple(x.shape[:2])}, got {tuple(keep_mask.shape)} "
                    f"{keep_mask.dtype}"
                )
            keep = keep_mask.unsqueeze(-1).to(x.dtype)  # (B, T, 1)
        new_state = []
        h = x
        for level, block in enumerate(self.levels):
            h, pasts = block(h, None if state is None else state[level], keep)  # (B, T, H)
            new_state.append(pasts)
        return TemporalConvOutput(h, new_state)
