"""A sequence classifier on ELMo features (Peters et al., 2018, section 3.3).

The biLM's layers are mixed by a task-specific :class:`ScalarMix` into one vector per token, and that sequence of
vectors is the input of a seq2vec classifier (a recurrent encoder, pooling, softmax; ``seqlab.models.classifier``):

    R_t = elmo_representations(x)_t                      (L+1, 2H) per token
    ELMo_t = gamma * sum_j softmax(w)_j R_{t,j}         (2H,)
    p(y | x) = Seq2VecClassifier(ELMo_1..ELMo_n)

With ``embedding_size`` E > 0 the task model also learns its own context-independent token embedding x_t (E,)
and reads [x_t; ELMo_t] (E + 2H,), as Peters et al. feed the task RNN with the baseline's input enhanced by
ELMo ("we concatenate the ELMo vector ELMo_k with x_k", section 3.3).

With ``freeze_elmo`` (the paper's setting) the biLM's weights stay fixed: its parameters do not require
gradients and its representations are computed without a graph; only the mix and the classifier learn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from seqlab.models.classifier import ClassifierOutput, Seq2VecClassifier, Seq2VecClassifierConfig
from seqlab.models.elmo.bilm import ELMo, ELMoConfig
from seqlab.models.pretrained import PretrainedMixin
from seqlab.models.recurrent_layers import RECURRENT_LAYERS, CellName
from seqlab.nn.pooling import POOLING_NAMES, PoolingName
from seqlab.nn.scalar_mix import ScalarMix
from seqlab.validation import check_bool, check_choice, check_int, check_probability


@dataclass(frozen=True)
class ELMoClassifierConfig:
    """Hyperparameters of :class:`ELMoClassifier`; saved as ``config.json`` with every checkpoint."""

    vocab_size: int  # V of the biLM
    num_classes: int  # >= 2
    elmo_hidden_size: int = 128  # the biLM's H; the features are 2H wide
    elmo_num_layers: int = 2  # the biLM's L
    elmo_residual: bool = True  # the biLM's residual connection
    elmo_tie_embeddings: bool = False  # the biLM's tied softmax
    embedding_size: int = 0  # E of a learned token embedding read beside ELMo, [x_t; ELMo_t]; 0 = ELMo alone
    freeze_elmo: bool = True  # keep the biLM fixed; only the mix and the classifier learn
    mix_layer_norm: bool = False  # layer-normalise each biLM layer before mixing
    hidden_size: int = 64  # H of the classifier's encoder, per direction
    cell: CellName = "lstm"  # the classifier's recurrent unit
    num_layers: int = 1  # the classifier's stacked recurrent layers
    pooling: PoolingName = "mean"  # last | mean | max | attention
    dropout: float = 0.2  # on the features and on the pooled vector

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, minimum=2)
        check_int("num_classes", self.num_classes, minimum=2)
        check_int("elmo_hidden_size", self.elmo_hidden_size)
        check_int("elmo_num_layers", self.elmo_num_layers)
        check_int("embedding_size", self.embedding_size, minimum=0)
        for name in ("elmo_residual", "elmo_tie_embeddings", "freeze_elmo", "mix_layer_norm"):
            check_bool(name, getattr(self, name))
        check_int("hidden_size", self.hidden_size)
        check_choice("cell", self.cell, RECURRENT_LAYERS)
        check_int("num_layers", self.num_layers)
        check_choice("pooling", self.pooling, POOLING_NAMES)
        check_probability("dropout", self.dropout)

    def elmo_config(self) -> ELMoConfig:
        """The biLM's config (dropout 0: a frozen biLM is a fixed feature extractor)."""
        return ELMoConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.elmo_hidden_size,
            num_layers=self.elmo_num_layers,
            dropout=0.0,
            residual=self.elmo_residual,
            tie_embeddings=self.elmo_tie_embeddings,
        )


class ELMoClassifier(PretrainedMixin, nn.Module):
    """biLM -> ScalarMix -> dropout -> (beside a learned token embedding) -> Seq2VecClassifier (module docstring).

    Args:
        config: ELMoClassifierConfig.
    Inputs:
        x: (B, T) integer token ids, real tokens first in each row.
        lengths: (B,) integers in [1, T]; None means all T are real.
    Outputs: ClassifierOutput(logits (B, num_classes), attention (B, T) or None).
    Raises:
        ValueError: x not (B, T) integers or lengths out of range (the biLM's and the classifier's messages).
    """

    config_class: ClassVar[type] = ELMoClassifierConfig
    model_type: ClassVar[str] = "elmo_classifier"

    def __init__(self, config: ELMoClassifierConfig) -> None:
        super().__init__()
        self.config = config
        self.elmo = ELMo(config.elmo_config())
        if config.freeze_elmo:
            self.elmo.requires_grad_(False)
        self.mix = ScalarMix(config.elmo_num_layers + 1, layer_norm=config.mix_layer_norm)
        self.dropout = nn.Dropout(config.dropout)
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_size) if config.embedding_size else None
        self.classifier = Seq2VecClassifier(
            Seq2VecClassifierConfig(
                num_classes=config.num_classes,
                input_size=config.embedding_size + 2 * config.elmo_hidden_size,
                hidden_size=config.hidden_size,
                cell=config.cell,
                num_layers=config.num_layers,
                bidirectional=True,
                dropout=config.dropout,
                pooling=config.pooling,
            )
        )

    @property
    def fused(self) -> bool:
        """True when the biLM and the classifier's encoder run PyTorch's fused kernels."""
        return self.elmo.fused and self.classifier.rnn.fused

    def forward(self, x: Tensor, lengths: Tensor | None = None) -> ClassifierOutput:
        B, T = x.shape[:2]
        if lengths is None:
            lengths = torch.full((B,), T, dtype=torch.long)
        keep_mask = torch.arange(T, device=x.device) < lengths.to(x.device).unsqueeze(1)  # (B, T)
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.config.freeze_elmo):
            layers = self.elmo.elmo_representations(x, keep_mask).layers  # (L+1, B, T, 2H)
        features = self.dropout(self.mix(layers))  # (B, T, 2H)
        if self.embedding is not None:
            features = torch.cat([self.embedding(x), features], dim=-1)  # (B, T, E + 2H)
        return self.classifier(features, lengths)
