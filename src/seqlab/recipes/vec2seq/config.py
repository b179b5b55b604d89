"""The vec2seq recipe's configuration: the data section, the generator, how samples are drawn, the class checker's
training and the generator's."""

from __future__ import annotations

from dataclasses import dataclass, field

from seqlab.models.recurrent_layers import RECURRENT_LAYERS, CellName
from seqlab.models.vec2seq import CONDITIONS, ConditionName
from seqlab.recipes.common.labelled_text import (
    LabelledTextDataConfig,
)
from seqlab.training.trainer import TrainConfig
from seqlab.validation import check_choice, check_int, check_probability, check_real


@dataclass(frozen=True)
class Vec2SeqModelConfig:
    """The conditioned generator (``seqlab.models.vec2seq``)."""

    cell: CellName = "gru"  # rnn | gru | gru_textbook | lstm
    condition: ConditionName = "both"  # init: the class sets h_0; input: it joins every input; both
    class_embedding_size: int = 32  # size of the learned class vector
    embedding_size: int = 32  # E, character embedding
    hidden_size: int = 128  # H
    num_layers: int = 1  # stacked recurrent layers
    dropout: float = 0.1  # inputs, between layers, before the output layer

    def __post_init__(self) -> None:
        check_choice("cell", self.cell, RECURRENT_LAYERS)
        check_choice("condition", self.condition, CONDITIONS)
        for name in ("class_embedding_size", "embedding_size", "hidden_size", "num_layers"):
            check_int(name, getattr(self, name))
        check_probability("dropout", self.dropout)


@dataclass(frozen=True)
class Vec2SeqSampleConfig:
    """How samples are drawn (the test's class check, and predict) and the class checker's sizes."""

    samples_per_class: int = 200  # samples of every class in the class check
    temperature: float = 0.8  # logits / T before sampling
    top_k: int | None = None  # sample from the k most likely characters (None: all)
    max_length: int = 24  # the most characters of a sample (its end token included)
    seed: int = 0  # seed of the sampler (the class check's samples and predict's)
    checker_embedding_size: int = 32  # the class checker's character embedding
    checker_hidden_size: int = 64  # the class checker's BiLSTM, per direction

    def __post_init__(self) -> None:
        check_int("samples_per_class", self.samples_per_class)
        check_real("temperature", self.temperature, greater_than=0.0)
        check_int("top_k", self.top_k, optional=True)
        check_int("max_length", self.max_length)
        check_int("seed", self.seed, minimum=0)
        check_int("checker_embedding_size", self.checker_embedding_size)
        check_int("checker_hidden_size", self.checker_hidden_size)


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model, sample, checker (the class checker's training), train."""

    data: LabelledTextDataConfig = field(default_factory=LabelledTextDataConfig)
    model: Vec2SeqModelConfig = field(default_factory=Vec2SeqModelConfig)
    sample: Vec2SeqSampleConfig = field(default_factory=Vec2SeqSampleConfig)
    checker: TrainConfig = field(
        default_factory=lambda: TrainConfig(lr=3e-3, batch_size=64, max_epochs=10, patience=2, time_budget=90.0)
    )
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(lr=3e-3, batch_size=64, max_epochs=40, patience=4, time_budget=180.0)
    )
