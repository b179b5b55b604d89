"""Multi-step forecaster: an encoder over the last L steps of a (multivariate) series and a head for the next H.

Encoders: a recurrent layer (rnn | gru | gru_textbook | lstm; the summary is h_L, the last step's output), a Transformer
encoder (input projection to D, sinusoidal positions, causal self-attention; the summary is the last position) or a
causal TCN (``seqlab.nn.TemporalConvNet``, Bai et al., 2018, H channels; the summary is the last step's output,
which reads the last ``receptive_field`` steps of the window) or a stack of S4D state-space blocks (ssm: input
projection to D, ``seqlab.nn.state_space``; the summary is the last position).
Heads:

- direct (the "MIMO" strategy, Ben Taieb et al., 2012): y_hat_{L+1..L+H} = W s + b, one linear map of the summary
  s to all H * C values at once.
- autoregressive (the "recursive" strategy): y_hat_{L+1} = W s + b, then the window slides by one step with
  y_hat_{L+1} appended and the encoder runs again, H times; trained through the whole rollout.

With ``residual``, the head forecasts the change from the window's last value y_L, which is added back (an
untrained head forecasts persistence): the usual choice for finely sampled dynamics such as an ODE's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import Tensor, nn

from seqlab.errors import ConfigError
from seqlab.models.pretrained import PretrainedMixin
from seqlab.models.recurrent_layers import RECURRENT_LAYERS
from seqlab.nn.positional import SinusoidalPositionalEncoding
from seqlab.nn.state_space import check_state_size, s4d_stack
from seqlab.nn.temporal_convolution import TemporalConvNet, check_tcn_sizes
from seqlab.nn.transformer import TransformerEncoder, TransformerEncoderLayer
from seqlab.validation import check_bool, check_choice, check_int, check_probability

EncoderName = Literal["rnn", "gru", "gru_textbook", "lstm", "transformer", "tcn", "ssm"]
ENCODERS = ("rnn", "gru", "gru_textbook", "lstm", "transformer", "tcn", "ssm")
HeadName = Literal["direct", "autoregressive"]
HEADS = ("direct", "autoregressive")


@dataclass(frozen=True)
class ForecasterConfig:
    """Hyperparameters of :class:`Forecaster`; saved as ``config.json`` with every checkpoint."""

    channels: int  # C, values per time step
    horizon: int  # H, steps forecast at once
    encoder: EncoderName = "gru"  # rnn | gru | gru_textbook | lstm | transformer | tcn | ssm
    head: HeadName = "direct"  # direct (all H steps at once) | autoregressive (one step, fed back)
    residual: bool = False  # forecast the change from the window's last value
    hidden_size: int = 64  # H of the recurrent encoder, channels of the TCN
    num_layers: int = 2  # stacked recurrent, Transformer or S4D layers
    d_model: int = 64  # D of the Transformer or SSM encoder
    num_heads: int = 4  # N of the Transformer encoder
    d_ff: int = 128  # feed-forward inner size of the Transformer encoder
    max_length: int = 1024  # longest window the Transformer's positions cover
    dropout: float = 0.1  # between layers (recurrent), inside the layers (Transformer, TCN, SSM)
    num_levels: int = 4  # residual blocks of the TCN encoder, dilations 1, 2, ..., 2^(L-1)
    kernel_size: int = 3  # k of the TCN encoder's causal convolutions
    state_size: int = 64  # N of the SSM encoder's S4D layers (even)

    def __post_init__(self) -> None:
        for name in ("channels", "horizon", "hidden_size", "num_layers", "d_model", "num_heads", "d_ff", "max_length"):
            check_int(name, getattr(self, name))
        check_choice("encoder", self.encoder, ENCODERS)
        check_choice("head", self.head, HEADS)
        check_probability("dropout", self.dropout)
        check_bool("residual", self.residual)
        check_tcn_sizes(self.kernel_size, self.num_levels)
        check_state_size(self.state_size)
        if self.encoder == "transformer" and self.d_model % self.num_heads:
            raise ConfigError(f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})")


class Forecaster(PretrainedMixin, nn.Module):
    """Encoder over the window, then a direct or autoregressive head (module docstring).

    Args:
        config: ForecasterConfig.
    Inputs: x (B, T, C) floating, the last T steps (T <= max_length for the Transformer).
    Outputs: (B, H, C), the next H steps, in the units of x (the recipe standardises them).
    Raises:
        ValueError: x is not (B, T, C) with the configured C, or T exceeds the Transformer's max_length.
    """

    config_class: ClassVar[type] = ForecasterConfig
    model_type: ClassVar[str] = "forecaster"

    def __init__(self, config: ForecasterConfig) -> None:
        super().__init__()
        self.config = config
        C = config.channels
        if config.encoder == "transformer":
            self.input_projection: nn.Module = nn.Linear(C, config.d_model)
            self.positions: nn.Module = SinusoidalPositionalEncoding(config.d_model, max_length=config.max_length)
            layers = [
                TransformerEncoderLayer(
                    config.d_model, config.num_heads, config.d_ff, dropout=config.dropout, norm_first=True
                )
                for _ in range(config.num_layers)
            ]
            self.encoder: nn.Module = TransformerEncoder(layers, final_norm=nn.LayerNorm(config.d_model))
            features = config.d_model
        elif config.encoder == "ssm":
            self.input_projection = nn.Linear(C, config.d_model)
            self.positions = nn.Identity()  # the convolution kernel knows the order of the steps
            self.encoder = s4d_stack(
                config.d_model, config.num_layers, state_size=config.state_size, dropout=config.dropout
            )
            features = config.d_model
        elif config.encoder == "tcn":
            self.input_projection = nn.Identity()
            self.positions = nn.Identity()
            self.encoder = TemporalConvNet(
                C,
                config.hidden_size,
                num_levels=config.num_levels,
                kernel_size=config.kernel_size,
                dropout=config.dropout,
            )
            features = config.hidden_size
        else:
            self.input_projection = nn.Identity()
            self.positions = nn.Identity()
            self.encoder = RECURRENT_LAYERS[config.encoder](
                C, config.hidden_size, num_layers=config.num_layers, dropout=config.dropout
            )
            features = config.hidden_size
        steps = config.horizon if config.head == "direct" else 1
        self.head = nn.Linear(features, steps * C)  # W, b

    def summary(self, x: Tensor) -> Tensor:
        """s (B, features): the encoder's output at the window's last step."""
        if self.config.encoder == "transformer":
            h = self.encoder(self.positions(self.input_projection(x)), causal=True)  # (B, T, D)
        elif self.config.encoder == "ssm":
            h = self.encoder(self.input_projection(x)).outputs  # (B, T, D), parallel form
        else:
            h, _ = self.encoder(x)  # (B, T, H), recurrent or TCN
        return h[:, -1]

    def forward(self, x: Tensor) -> Tensor:
        C = self.config.channels
        if x.dim() != 3 or x.shape[-1] != C or not x.dtype.is_floating_point:
            raise ValueError(f"x must be (B, T, {C}) floating, got shape {tuple(x.shape)} {x.dtype}")
        if self.config.encoder == "transformer" and x.shape[1] > self.config.max_length:
            raise ValueError(f"window of {x.shape[1]} steps exceeds max_length ({self.config.max_length})")
        B = x.shape[0]
        if self.config.head == "direct":
            return self.head(self.summary(x)).view(B, self.config.horizon, C) + self._last(x)
        steps = []
        for _ in range(self.config.horizon):
            step = self.head(self.summary(x)).view(B, 1, C) + self._last(x)
            steps.append(step)
            x = torch.cat([x[:, 1:], step], dim=1)
        return torch.cat(steps, dim=1)

    def _last(self, x: Tensor) -> Tensor | float:
        """y_L (B, 1, C) for a residual forecaster, else 0."""
        return x[:, -1:] if self.config.residual else 0.0


def rollout(model: Forecaster, x: Tensor, steps: int, *, forward: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """(B, steps, C): ``steps`` future values from windows x (B, L, C), feeding the model's forecasts back H at a
    time (iterated multi-step forecasting, any head); ``forward`` is called as ``model`` instead of it (e.g. the
    model's exported graph)."""
    L, H = x.shape[1], model.config.horizon
    forward = model if forward is None else forward
    outputs = []
    for _ in range(-(-steps // H)):
        block = forward(x[:, -L:])  # (B, H, C)
        outputs.append(block)
        x = torch.cat([x, block], dim=1)
    return torch.cat(outputs, dim=1)[:, :steps]
