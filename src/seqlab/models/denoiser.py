"""Sequence denoiser: a bidirectional recurrent regressor that maps a noisy series to its clean signal.

The series is read in frames of F samples (x_t: the t-th frame, F C values), so that the recurrence runs T / F
steps (on a CPU a bidirectional layer's cost is in its sequential steps):

    h_1..h_{T/F} = BiRNN(x_1..x_{T/F})       h_t = [h_t fwd; h_t bwd], stacked layers (Graves, 2012, Sec. 3.2)
    s_hat_t      = W_o h_t + b_o              the frame's F C clean values, in the units of x

The tagger's form (``seqlab.models.tagger``) with real-valued frames in and out: each frame's estimate reads the
whole series through the backward direction, as an offline (non-causal) filter may.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor, nn

from seqlab.models.pretrained import PretrainedMixin
from seqlab.models.recurrent_layers import RECURRENT_LAYERS, CellName
from seqlab.validation import check_bool, check_choice, check_int, check_probability


@dataclass(frozen=True)
class SequenceDenoiserConfig:
    """Hyperparameters of :class:`SequenceDenoiser`; saved as ``config.json`` with every checkpoint."""

    channels: int = 1  # C, values per step in and out
    frame_size: int = 16  # F, samples per recurrent step
    cell: CellName = "gru"  # rnn | gru | lstm
    hidden_size: int = 64  # H per direction
    num_layers: int = 2  # stacked recurrent layers
    bidirectional: bool = True  # add a backward direction
    dropout: float = 0.0  # between recurrent layers

    def __post_init__(self) -> None:
        for name in ("channels", "frame_size", "hidden_size", "num_layers"):
            check_int(name, getattr(self, name))
        check_choice("cell", self.cell, RECURRENT_LAYERS)
        check_bool("bidirectional", self.bidirectional)
        check_probability("dropout", self.dropout)


class SequenceDenoiser(PretrainedMixin, nn.Module):
    """(Bi)RNN over the noisy series' frames, then a linear estimate of each frame's clean values (module
    docstring).

    Args:
        config: SequenceDenoiserConfig.
    Inputs: x (B, T, C) floating, T a multiple of F.
    Outputs: (B, T, C), the estimated clean series.
    Raises:
        ValueError: x is not (B, T, C) floating with the configured C, or T is not a multiple of F.
    """

    config_class: ClassVar[type] = SequenceDenoiserConfig
    model_type: ClassVar[str] = "sequence_denoiser"

    def __init__(self, config: SequenceDenoiserConfig) -> None:
        super().__init__()
        self.config = config
        directions = 2 if config.bidirectional else 1
        self.rnn = RECURRENT_LAYERS[config.cell](
            config.frame_size * config.channels,
            config.hidden_size,
            num_layers=config.num_layers,
            bidirectional=config.bidirectional,
            dropout=config.dropout,
        )
        self.output = nn.Linear(directions * config.hidden_size, config.frame_size * config.channels)  # W_o, b_o

    def forward(self, x: Tensor) -> Tensor:
        C, F = self.config.channels, self.config.frame_size
        if x.dim() != 3 or x.shape[-1] != C or not x.dtype.is_floating_point:
            raise ValueError(f"x must be (B, T, {C}) floating, got shape {tuple(x.shape)} {x.dtype}")
        B, T, _ = x.shape
        if T % F:
            raise ValueError(f"the series' length ({T}) must be a multiple of frame_size ({F})")
        h, _ = self.rnn(x.reshape(B, T // F, F * C))  # (B, T/F, directions * H)
        return self.output(h).reshape(B, T, C)  # (B, T/F, F*C) -> (B, T, C)
