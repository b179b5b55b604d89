"""Seq2vec classifier: a recurrent encoder, a pooling over the real steps, and a softmax output layer.

Forward pass, for a sequence of n real steps:

    e_t = E[x_t] for token ids, or x_t itself for continuous features (e.g. 12 speech channels)
    h_1..h_n = RNN(e_1..e_n)                    (stacked, optionally bidirectional; padded steps are skipped)
    s = pool(h_1..h_n)                          (last | mean | max | attention, see ``seqlab.nn.pooling``)
    p(y | x) = softmax(W_y dropout(s) + b_y)

``TCNClassifier`` reads the same way with a causal temporal convolutional network (Bai et al., 2018) in place of
the RNN: h_t = TCN(e_{t-R+1}..e_t), so h_t reads the last R steps (the receptive field), and right padding, which
comes after every real step, never reaches a real step's h_t.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor, nn

from seqlab.errors import ConfigError
from seqlab.models.pretrained import PretrainedMixin
from seqlab.models.recurrent_layers import RECURRENT_LAYERS, CellName
from seqlab.nn.pooling import POOLING_NAMES, PoolingName, make_pooling
from seqlab.nn.temporal_convolution import TemporalConvNet, check_tcn_sizes
from seqlab.validation import check_bool, check_choice, check_int, check_probability


@dataclass(frozen=True)
class Seq2VecClassifierConfig:
    """Hyperparameters of :class:`Seq2VecClassifier`; saved as ``config.json`` with every checkpoint.

    Give either ``input_size`` (continuous input, x (B, T, E)) or ``vocab_size`` and ``embedding_size`` (token
    input, x (B, T) ids), not both.
    """

    num_classes: int  # number of classes, >= 2
    input_size: int | None = None  # E, features per step of continuous input (e.g. 12 channels)
    vocab_size: int | None = None  # V, token vocabulary size for token input
    embedding_size: int | None = None  # E, token embedding size for token input
    hidden_size: int = 64  # H, per direction
    cell: CellName = "gru"  # recurrent unit
    num_layers: int = 1  # stacked recurrent layers
    bidirectional: bool = True  # add a backward direction (C = 2)
    dropout: float = 0.0  # between recurrent layers and on the pooled vector
    pooling: PoolingName = "mean"  # last | mean | max | attention
    attention_size: int | None = None  # A of attention pooling; None means C*H (Yang et al., 2016)

    def __post_init__(self) -> None:
        check_int("num_classes", self.num_classes, minimum=2)
        for name in ("input_size", "vocab_size", "embedding_size", "attention_size"):
            check_int(name, getattr(self, name), optional=True)
        check_int("hidden_size", self.hidden_size)
        check_int("num_layers", self.num_layers)
        if self.input_size is not None and (self.vocab_size is not None or self.embedding_size is not None):
            raise ConfigError(
                f"give input_size ({self.input_size}) for continuous input or vocab_size ({self.vocab_size}) and "
                f"embedding_size ({self.embedding_size}) for token input, not both"
            )
        if self.input_size is None and (self.vocab_size is None or self.embedding_size is None):
            raise ConfigError(
                f"token input needs both vocab_size ({self.vocab_size}) and embedding_size "
                f"({self.embedding_size}); continuous input needs input_size"
            )
        check_choice("cell", self.cell, RECURRENT_LAYERS)
        check_choice("pooling", self.pooling, POOLING_NAMES)
        check_bool("bidirectional", self.bidirectional)
        check_probability("dropout", self.dropout)

    @property
    def token_input(self) -> bool:
        """True when the model reads token ids through an embedding, False for continuous features."""
        return self.input_size is None


class ClassifierOutput(NamedTuple):
    """What every classifier returns (seq2vec, ELMo and BERT heads alike).

    logits: unnormalised, (B, C) for a sequence classifier, (B, T, C) for a token classifier (C classes).
    attention: (B, T) pooling weights where the classifier pools by attention, else None.
    """

    logits: Tensor
    attention: Tensor | None = None


class Seq2VecClassifier(PretrainedMixin, nn.Module):
    """Sequence classifier: embedding (token input) -> recurrent layer -> pooling -> dropout -> W_y s + b_y.

    Equations in the module docstring.

    Args:
        config: Seq2VecClassifierConfig.
    Inputs:
        x: (B, T) integer token ids (token input) or (B, T, E) floating features (continuous input).
        lengths: (B,) integers in [1, T], the real steps of each row; None means all T are real.
    Outputs: ClassifierOutput(logits (B, num_classes), attention (B, T) or None).
    Raises:
        ValueError: x of the wrong rank or dtype for the configured input, or any shape or length problem the
            recurrent layer reports (``seqlab.nn.recurrent``). Messages show the numbers.
    """

    config_class: ClassVar[type] = Seq2VecClassifierConfig
    model_type: ClassVar[str] = "seq2vec_classifier"

    def __init__(self, config: Seq2VecClassifierConfig) -> None:
        super().__init__()
        self.config = config
        C = 2 if config.bidirectional else 1
        if config.token_input:
            self.embedding: nn.Module = nn.Embedding(config.vocab_size, config.embedding_size)
            E = config.embedding_size
        else:
            self.embedding = nn.Identity()
            E = config.input_size
        self.rnn = RECURRENT_LAYERS[config.cell](
            E,
            config.hidden_size,
            num_layers=config.num_layers,
            bidirectional=config.bidirectional,
            dropout=config.dropout,
        )
        features = C * config.hidden_size
        self.pooling = make_pooling(
            config.pooling, features, bidirectional=config.bidirectional, attention_size=config.attention_size
        )
        self.dropout = nn.Dropout(config.dropout)
        self.output = nn.Linear(features, config.num_classes)  # W_y, b_y

    def forward(self, x: Tensor, lengths: Tensor | None = None) -> ClassifierOutput:
        self._check_input(x)
        B, T = x.shape[:2]
        if lengths is None:
            lengths = torch.full((B,), T, dtype=torch.long, device=x.device)
        h, _ = self.rnn(self.embedding(x), lengths)  # (B, T, C*H)
        keep_mask = torch.arange(T, device=x.device) < lengths.to(x.device).unsqueeze(1)  # (B, T)
        pooled, weights = self.pooling(h, keep_mask)  # (B, C*H), (B, T) or None
        return ClassifierOutput(self.output(self.dropout(pooled)), weights)

    def _check_input(self, x: Tensor) -> None:
        if self.config.token_input:
            if x.dim() != 2 or x.dtype.is_floating_point or x.dtype == torch.bool:
                raise ValueError(f"token input x must be (B, T) integer ids, got shape {tuple(x.shape)} {x.dtype}")
        elif x.dim() != 3 or not x.dtype.is_floating_point:
            raise ValueError(
                f"continuous input x must be (B, T, E) floating features, got shape {tuple(x.shape)} {x.dtype}"
            )


@dataclass(frozen=True)
class TCNClassifierConfig:
    """Hyperparameters of :class:`TCNClassifier` (token input); saved as ``config.json`` with every checkpoint."""

    vocab_size: int  # V
    num_classes: int  # number of classes, >= 2
    embedding_size: int = 64  # E
    hidden_size: int = 128  # H, channels of every level
    num_levels: int = 4  # L residual blocks, dilations 1, 2, ..., 2^(L-1)
    kernel_size: int = 3  # k of every causal convolution
    pooling: PoolingName = "max"  # last | mean | max | attention over the real steps
    dropout: float = 0.0  # inside the TCN's blocks and on the pooled vector
    weight_norm: bool = False  # weight-normalised convolutions (Salimans & Kingma, 2016)

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, minimum=2)
        check_int("num_classes", self.num_classes, minimum=2)
        check_int("embedding_size", self.embedding_size)
        check_int("hidden_size", self.hidden_size)
        check_tcn_sizes(self.kernel_size, self.num_levels)
        check_choice("pooling", self.pooling, POOLING_NAMES)
        check_probability("dropout", self.dropout)
        check_bool("weight_norm", self.weight_norm)

    @property
    def receptive_field(self) -> int:
        """R = 1 + 2 (k - 1)(2^L - 1), the steps each h_t reads."""
        return check_tcn_sizes(self.kernel_size, self.num_levels)


class TCNClassifier(PretrainedMixin, nn.Module):
    """Sequence classifier: embedding -> causal TCN -> pooling over the real steps -> dropout -> W_y s + b_y
    (module docstring).

    Args:
        config: TCNClassifierConfig.
    Inputs:
        x: (B, T) integer token ids, right-padded.
        lengths: (B,) integers in [1, T], the real steps of each row; None means all T are real.
    Outputs: ClassifierOutput(logits (B, num_classes), attention (B, T) or None).
    Raises: ValueError for x that is not (B, T) integer ids.
    """

    config_class: ClassVar[type] = TCNClassifierConfig
    model_type: ClassVar[str] = "tcn_classifier"

    def __init__(self, config: TCNClassifierConfig) -> None:
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_size)
        self.tcn = TemporalConvNet(
            config.embedding_size,
            config.hidden_size,
            num_levels=config.num_levels,
            kernel_size=config.kernel_size,
            dropout=config.dropout,
            weight_norm=config.weight_norm,
        )
        self.pooling = make_pooling(config.pooling, config.hidden_size, bidirectional=False)
        self.dropout = nn.Dropout(config.dropout)
        self.output = nn.Linear(config.hidden_size, config.num_classes)  # W_y, b_y

    @property
    def receptive_field(self) -> int:
        """R, the steps each h_t reads (``TemporalConvNet.receptive_field``)."""
        return self.tcn.receptive_field

    def forward(self, x: Tensor, lengths: Tensor | None = None) -> ClassifierOutput:
        if x.dim() != 2 or x.dtype.is_floating_point or x.dtype == torch.bool:
            raise ValueError(f"token input x must be (B, T) integer ids, got shape {tuple(x.shape)} {x.dtype}")
        B, T = x.shape
        if lengths is None:
            lengths = torch.full((B,), T, dtype=torch.long, device=x.device)
        h, _ = self.tcn(self.embedding(x))  # (B, T, H); causal, so padding after a row's end never reaches it
        keep_mask = torch.arange(T, device=x.device) < lengths.to(x.device).unsqueeze(1)  # (B, T)
        pooled, weights = self.pooling(h, keep_mask)  # (B, H), (B, T) or None
        return ClassifierOutput(self.output(self.dropout(pooled)), weights)
