"""The ``model`` section of the recipes that train a ``seqlab.models.Forecaster``: one config class per encoder,
chosen by ``model.arch`` (gru | gru_textbook | lstm | rnn | transformer | tcn | ssm), each holding only the keys its
encoder uses.

A recipe whose defaults differ subclasses the classes here, changing defaults only (``forecast``: smaller and with
dropout); an encoder joins with one class here (``arch`` defaulting to its name in
``seqlab.models.forecaster.ENCODERS``) and one member of each recipe's ``ModelConfig`` union.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from seqlab.config import ArchField
from seqlab.errors import ConfigError
from seqlab.models.forecaster import HEADS, ForecasterConfig, HeadName
from seqlab.validation import check_bool, check_choice, check_int, check_probability

MAX_SIZE = 8192  # hidden_size, d_model, d_ff and the like


@dataclass(frozen=True)
class ForecasterArmConfig(ArchField):
    """What every arch shares: the head, the residual form, depth and dropout (``seqlab.models.forecaster``)."""

    head: HeadName = "direct"  # direct (H steps at once) | autoregressive (one step fed back H times)
    residual: bool | None = True  # forecast the change from the window's last value; None = the data's default
    num_layers: int = 1  # stacked encoder layers
    dropout: float = 0.0  # between layers (recurrent), inside the layers (Transformer)

    def __post_init__(self) -> None:
        check_choice("head", self.head, HEADS)
        if self.residual is not None:
            check_bool("residual", self.residual)
        check_int("num_layers", self.num_layers, maximum=64)
        check_probability("dropout", self.dropout)

    def model_config(self, *, channels: int, horizon: int, residual: bool = True) -> ForecasterConfig:
        """The forecaster's config: this arch's fields, with ``arch`` as the encoder and ``residual`` where
        ``model.residual`` is None (the data's default).

        Raises: ConfigError for sizes the model refuses (a d_model not divisible by num_heads).
        """
        sizes = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "arch"}
        sizes["residual"] = residual if self.residual is None else self.residual
        return ForecasterConfig(channels=channels, horizon=horizon, encoder=self.arch, **sizes)


@dataclass(frozen=True)
class RecurrentArmConfig(ForecasterArmConfig):
    """A recurrent encoder; the summary of the window is its last output."""

    hidden_size: int = 128  # H of the recurrent layers

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("hidden_size", self.hidden_size, maximum=MAX_SIZE)


@dataclass(frozen=True)
class GRUArmConfig(RecurrentArmConfig):
    """``gru``: gated recurrent units."""

    arch: Literal["gru"] = "gru"


@dataclass(frozen=True)
class GRUTextbookArmConfig(RecurrentArmConfig):
    """``gru_textbook``: the notes' GRU (the reset gate applied before W_hn; ``seqlab.models.recurrent_layers``)."""

    arch: Literal["gru_textbook"] = "gru_textbook"


@dataclass(frozen=True)
class LSTMArmConfig(RecurrentArmConfig):
    """``lstm``: long short-term memory cells."""

    arch: Literal["lstm"] = "lstm"


@dataclass(frozen=True)
class RNNArmConfig(RecurrentArmConfig):
    """``rnn``: Elman (tanh) cells."""

    arch: Literal["rnn"] = "rnn"


@dataclass(frozen=True)
class TransformerArmConfig(ForecasterArmConfig):
    """``transformer``: a causal pre-LN Transformer encoder over the window (sinusoidal positions)."""

    arch: Literal["transformer"] = "transformer"
    d_model: int = 64  # D
    num_heads: int = 4  # N
    d_ff: int = 128  # feed-forward inner size

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("d_model", "num_heads", "d_ff"):
            check_int(name, getattr(self, name), maximum=MAX_SIZE)
        self.model_config(channels=1, horizon=1)  # d_model divisible by num_heads


@dataclass(frozen=True)
class TCNArmConfig(ForecasterArmConfig):
    """``tcn``: a causal dilated convolution stack over the window (``seqlab.nn.TemporalConvNet``, Bai et al. 2018),
    receptive field 1 + 2 (k - 1)(2^L - 1) steps."""

    arch: Literal["tcn"] = "tcn"
    hidden_size: int = 128  # channels of every level
    num_levels: int = 4  # residual blocks, dilations 1, 2, ..., 2^(L-1)
    kernel_size: int = 3  # k

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("hidden_size", self.hidden_size, maximum=MAX_SIZE)
        if self.num_layers != 1:
            raise ConfigError(f"num_layers ({self.num_layers}) is not used by arch 'tcn': its depth is num_levels")
        self.model_config(channels=1, horizon=1)  # the TCN's sizes


@dataclass(frozen=True)
class SSMArmConfig(ForecasterArmConfig):
    """``ssm``: an input projection and S4D blocks (``seqlab.nn.state_space``, Gu et al. 2022) over the window."""

    arch: Literal["ssm"] = "ssm"
    d_model: int = 64  # D
    state_size: int = 64  # N of every S4D layer (even)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("d_model", self.d_model, maximum=MAX_SIZE)
        self.model_config(channels=1, horizon=1)  # the state size
