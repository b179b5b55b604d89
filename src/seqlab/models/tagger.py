"""Sequence labelling with a bidirectional RNN: one output per input step (part-of-speech tags, named entities).

Forward pass, for a sequence of n real steps (Graves 2012, Sec. 3.2; the seeds' per-step output layer):

    e_t = E[x_t]
    h_1..h_n = BiRNN(e_1..e_n)             h_t = [h_t fwd; h_t bwd], stacked, optionally residual between layers
    y_t = W_y dropout(h_t) + b_y           for every step t <= n, p(label_t | x) = softmax(y_t)

Unlike the seq2vec classifier, nothing is pooled: each step keeps its own logits, and a step's label can use the
whole sentence through the backward direction. Padded steps (t > n) get no information from the RNN (its outputs
are 0 there) and are flagged False in ``keep_mask`` so that losses and metrics skip them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor, nn

from seqlab.models.pretrained import PretrainedMixin
from seqlab.models.recurrent_layers import RECURRENT_LAYERS, CellName
from seqlab.validation import check_bool, check_choice, check_int, check_probability


@dataclass(frozen=True)
class RNNSequenceTaggerConfig:
    """Hyperparameters of :class:`RNNSequenceTagger`; saved as ``config.json`` with every checkpoint."""

    vocab_size: int  # V, input tokens
    num_labels: int  # K, output labels per step, >= 2
    embedding_size: int = 64  # E
    hidden_size: int = 64  # H, per direction
    cell: CellName = "lstm"  # recurrent unit
    num_layers: int = 1  # stacked recurrent layers
    bidirectional: bool = True  # add a backward direction (C = 2)
    residual: bool = False  # residual connections from the second layer on (needs num_layers >= 2)
    dropout: float = 0.0  # between recurrent layers and before the output layer

    def __post_init__(self) -> None:
        for name in ("vocab_size", "embedding_size", "hidden_size", "num_layers"):
            check_int(name, getattr(self, name))
        check_int("num_labels", self.num_labels, minimum=2)
        check_choice("cell", self.cell, RECURRENT_LAYERS)
        check_bool("bidirectional", self.bidirectional)
        check_bool("residual", self.residual)
        check_int("num_layers", self.num_layers, minimum=2 if self.residual else 1)
        check_probability("dropout", self.dropout)


class TaggerOutput(NamedTuple):
    """logits (B, T, K) per step, unnormalised; keep_mask (B, T), True at the real steps whose labels count."""

    logits: Tensor
    keep_mask: Tensor


class RNNSequenceTagger(PretrainedMixin, nn.Module):
    """Per-step labeller: embedding -> (Bi)RNN -> dropout -> y_t = W_y h_t + b_y at every step.

    Equations in the module docstring.

    Args:
        config: RNNSequenceTaggerConfig.
    Inputs:
        x: (B, T) integer token ids.
        lengths: (B,) integers in [1, T], the real steps of each row; None means all T are real.
    Outputs: TaggerOutput(logits (B, T, K), keep_mask (B, T)).
    Raises:
        ValueError: x not (B, T) integer ids, or any shape or length problem the recurrent layer reports.
    """

    config_class: ClassVar[type] = RNNSequenceTaggerConfig
    model_type: ClassVar[str] = "rnn_sequence_tagger"

    def __init__(self, config: RNNSequenceTaggerConfig) -> None:
        super().__init__()
        self.config = config
        C = 2 if config.bidirectional else 1
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_size)
        self.rnn = RECURRENT_LAYERS[config.cell](
            config.embedding_size,
            config.hidden_size,
            num_layers=config.num_layers,
            bidirectional=config.bidirectional,
            dropout=config.dropout,
            residual=config.residual,
        )
        self.dropout = nn.Dropout(config.dropout)
        self.output = nn.Linear(C * config.hidden_size, config.num_labels)  # W_y, b_y

    def forward(self, x: Tensor, lengths: Tensor | None = None) -> TaggerOutput:
        if x.dim() != 2 or x.dtype.is_floating_point or x.dtype == torch.bool:
            raise ValueError(f"x must be (B, T) integer ids, got shape {tuple(x.shape)} {x.dtype}")
        B, T = x.shape
        if lengths is None:
            lengths = torch.full((B,), T, dtype=torch.long, device=x.device)
        h, _ = self.rnn(self.embedding(x), lengths)  # (B, T, C*H), zero past each length
        keep_mask = torch.arange(T, device=x.device) < lengths.to(x.device).unsqueeze(1)  # (B, T)
        return TaggerOutput(self.output(self.dropout(h)), keep_mask)  # (B, T, K)
