"""The classify recipe's configuration: the data section, one model config per arch (``model.arch`` picks it),
the biLM's pre-training and the classifier's training.

Every arch takes ``model.init_from`` (``seqlab.recipes.init_from``). The character arms (``bilstm``, ``static``,
``elmo``) share the task encoder's sizes (``CharacterArmConfig``); ``tcn`` reads characters with a causal TCN; the
BERT arms (``minilm``, ``bert``) share the folder of their tokenizer (``BertArmConfig``). Runs saved before the arch
choice hold every arch's keys: they load, the other archs' keys dropped
(``seqlab.recipes.saved_run.load_recipe_config``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from seqlab.config import ArchField
from seqlab.models.classifier import TCNClassifierConfig
from seqlab.nn.pooling import POOLING_NAMES, PoolingName
from seqlab.recipes.common.labelled_text import LabelledTextDataConfig
from seqlab.recipes.init_from import InitFromConfig
from seqlab.training.trainer import TrainConfig
from seqlab.validation import check_bool, check_choice, check_int, check_probability

ELMO_CORPORA = ("names", "train")


def _check_path(name: str, value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{name} must be a directory path or None, got {value!r}")


@dataclass(frozen=True)
class CharacterArmConfig(InitFromConfig, ArchField):
    """What the character arms share: the task encoder, a BiLSTM with pooling and a softmax over its states."""

    hidden_size: int = 128  # H of the task encoder's BiLSTM, per direction
    pooling: PoolingName = "max"  # last | mean | max | attention over the encoder's states
    dropout: float = 0.3  # task model: on the pooled vector (elmo: also on the mixed features)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("hidden_size", self.hidden_size)
        check_choice("pooling", self.pooling, POOLING_NAMES)
        check_probability("dropout", self.dropout)


@dataclass(frozen=True)
class BiLSTMArmConfig(CharacterArmConfig):
    """``bilstm``: the BiLSTM baseline over a learned character embedding."""

    arch: Literal["bilstm"] = "bilstm"
    embedding_size: int = 64  # E of the character embedding

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("embedding_size", self.embedding_size)


@dataclass(frozen=True)
class StaticArmConfig(CharacterArmConfig):
    """``static``: a learned (static) embedding as wide as ELMo's features, the control for ELMo."""

    arch: Literal["static"] = "static"
    elmo_hidden_size: int = 128  # the embedding is 2 * elmo_hidden_size wide, as ELMo's features

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("elmo_hidden_size", self.elmo_hidden_size)


@dataclass(frozen=True)
class ELMoArmConfig(CharacterArmConfig):
    """``elmo``: the features of a frozen biLM, pre-trained here or loaded, mixed by a learned ScalarMix."""

    arch: Literal["elmo"] = "elmo"
    elmo_hidden_size: int = 128  # the biLM's H (features 2H)
    elmo_num_layers: int = 2  # biLSTM layers of the biLM
    elmo_residual: bool = True  # residual connection between the biLM's layers
    elmo_dropout: float = 0.1  # dropout of the biLM during its pre-training
    elmo_corpus: Literal["names", "train"] = "names"  # the biLM's unlabelled text (training.pretraining_texts)
    elmo_path: str | None = None  # a pre-trained biLM to use as it is (an elmo run, or an ELMo + vocab.json)
    mix_layer_norm: bool = False  # layer-normalise each biLM layer before the ScalarMix
    elmo_concat: bool = False  # also read the static arm's own embedding (2H wide) beside ELMo, [x_t; ELMo_t]

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("elmo_hidden_size", self.elmo_hidden_size)
        check_int("elmo_num_layers", self.elmo_num_layers)
        check_bool("elmo_residual", self.elmo_residual)
        check_probability("elmo_dropout", self.elmo_dropout)
        check_choice("elmo_corpus", self.elmo_corpus, ELMO_CORPORA)
        _check_path("elmo_path", self.elmo_path)
        check_bool("mix_layer_norm", self.mix_layer_norm)
        check_bool("elmo_concat", self.elmo_concat)


@dataclass(frozen=True)
class BertArmConfig(InitFromConfig, ArchField):
    """What the BERT arms share: MiniLM's WordPiece tokenizer (or that of the folder ``minilm_path``)."""

    minilm_path: str | None = None  # Hugging Face BERT folder (weights, tokenizer); None = MiniLM's

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_path("minilm_path", self.minilm_path)


@dataclass(frozen=True)
class MiniLMArmConfig(BertArmConfig):
    """``minilm``: the pretrained MiniLM-L6 (or the folder's BERT) fine-tuned under a mean-pooled softmax head;
    its dropout is the folder's."""

    arch: Literal["minilm"] = "minilm"


@dataclass(frozen=True)
class ScratchBertArmConfig(BertArmConfig):
    """``bert``: MiniLM's architecture and tokenizer, small and randomly initialised: the control for pre-training."""

    arch: Literal["bert"] = "bert"
    bert_d_model: int = 128  # D
    bert_num_heads: int = 4  # N
    bert_num_layers: int = 2  # L
    bert_d_ff: int = 512  # feed-forward inner size
    bert_max_positions: int = 64  # most pieces of a text, [CLS] and [SEP] included
    bert_dropout: float = 0.1  # embeddings, attention, sublayers and the head

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("bert_d_model", "bert_num_heads", "bert_num_layers", "bert_d_ff"):
            check_int(name, getattr(self, name))
        check_int("bert_max_positions", self.bert_max_positions, minimum=3)
        check_probability("bert_dropout", self.bert_dropout)
        if self.bert_d_model % self.bert_num_heads:
            raise ValueError(
                f"bert_d_model ({self.bert_d_model}) must be divisible by bert_num_heads ({self.bert_num_heads})"
            )


@dataclass(frozen=True)
class TCNArmConfig(InitFromConfig, ArchField):
    """``tcn``: a causal temporal convolutional network over a learned character embedding, pooled
    (``seqlab.models.TCNClassifier``); each h_t reads 1 + 2 (kernel_size - 1)(2^num_levels - 1) characters, 61 by
    default."""

    arch: Literal["tcn"] = "tcn"
    embedding_size: int = 64  # E of the character embedding
    hidden_size: int = 128  # H, channels of every level
    num_levels: int = 4  # L residual blocks, dilations 1, 2, ..., 2^(L-1)
    kernel_size: int = 3  # k of every causal convolution
    pooling: PoolingName = "max"  # last | mean | max | attention over the TCN's outputs
    dropout: float = 0.3  # inside the TCN's blocks and on the pooled vector
    weight_norm: bool = False  # weight-normalised convolutions (Salimans & Kingma, 2016)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.model_config(vocab_size=2, num_labels=2)  # the model's own checks

    def model_config(self, *, vocab_size: int, num_labels: int) -> TCNClassifierConfig:
        """The ``TCNClassifierConfig`` of these hyperparameters for V = ``vocab_size`` and C = ``num_labels``."""
        fields = ("embedding_size", "hidden_size", "num_levels", "kernel_size", "pooling", "dropout", "weight_norm")
        return TCNClassifierConfig(
            vocab_size=vocab_size, num_classes=num_labels, **{k: getattr(self, k) for k in fields}
        )


ClassifyModelConfig = (
    BiLSTMArmConfig | StaticArmConfig | ELMoArmConfig | MiniLMArmConfig | ScratchBertArmConfig | TCNArmConfig
)


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model (one class per ``model.arch``), pretrain (the elmo arm's biLM),
    train (the classifier)."""

    data: LabelledTextDataConfig = field(default_factory=LabelledTextDataConfig)
    model: ClassifyModelConfig = field(default_factory=BiLSTMArmConfig)
    pretrain: TrainConfig = field(
        default_factory=lambda: TrainConfig(lr=2e-3, batch_size=64, max_epochs=20, patience=2, time_budget=600.0)
    )
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(lr=2e-3, batch_size=64, max_epochs=40, patience=5, time_budget=600.0)
    )
