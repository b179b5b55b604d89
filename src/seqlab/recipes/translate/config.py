"""The ``translate`` recipe's config: the parallel files and the BPE, the seq2seq model (arch rnn | transformer, a
choice section), training, and the beam search that decodes the test sentences."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from seqlab.data.files import TextFormat, data_file
from seqlab.errors import ConfigError
from seqlab.models.recurrent_layers import CellName
from seqlab.models.seq2seq.rnn import RNNSeq2Seq, RNNSeq2SeqConfig
from seqlab.models.seq2seq.transformer import TransformerSeq2Seq, TransformerSeq2SeqConfig
from seqlab.recipes.common.search import SearchDecodeConfig
from seqlab.training.train_config import Seq2SeqTrainConfig
from seqlab.validation import MAX_VOCAB_SIZE, check_bool, check_int, check_real

# Longest source or target (tokens) a Transformer's positions are built for (its config.json's max_length).
TRANSFORMER_POSITIONS = 1024


SENTENCES = TextFormat("one sentence a line, line-aligned with the other side", max_line_chars=10_000)


@dataclass(frozen=True)
class DataConfig:
    """The parallel files, the split and the BPE.

    Raises: ConfigError (a ValueError) for a value out of range, or only one file of a valid or test pair.
    """

    src: str | None = data_file(SENTENCES)  # source sentences, one a line (required)
    tgt: str | None = data_file(SENTENCES)  # their translations, line by line (required)
    valid_src: str | None = data_file(SENTENCES)  # with valid_tgt; None = valid_fraction of the training pairs
    valid_tgt: str | None = data_file(SENTENCES)
    test_src: str | None = data_file(SENTENCES)  # with test_tgt; None = test_fraction of the training pairs
    test_tgt: str | None = data_file(SENTENCES)
    valid_fraction: float = 0.05
    test_fraction: float = 0.05
    split_seed: int = 0  # seed of the shuffle before the split
    shared_bpe: bool = True  # one BPE for both languages (else one each)
    bpe_size: int = 2000  # BPE vocabulary per tokenizer, its 256 bytes and <|endoftext|> included
    max_tokens: int = 128  # training pairs with a longer side (in BPE tokens) are left out

    def __post_init__(self) -> None:
        check_real("valid_fraction", self.valid_fraction, at_least=0.0, below=0.5)
        check_real("test_fraction", self.test_fraction, at_least=0.0, below=0.5)
        check_int("split_seed", self.split_seed, minimum=None)
        check_bool("shared_bpe", self.shared_bpe)
        check_int("bpe_size", self.bpe_size, minimum=257, maximum=MAX_VOCAB_SIZE)
        check_int("max_tokens", self.max_tokens)
        for split in ("valid", "test"):
            if (getattr(self, f"{split}_src") is None) != (getattr(self, f"{split}_tgt") is None):
                raise ConfigError(f"give both data.{split}_src and data.{split}_tgt, or neither")


@dataclass(frozen=True)
class Seq2SeqModelConfig:
    """What both architectures of the model section take: the layers, dropout and the loss's label smoothing.

    Raises: ConfigError (a ValueError) for label_smoothing outside [0, 1).
    """

    arch: str  # the architecture; each subclass fixes it (model.arch chooses the class)
    encoder_layers: int = 3
    decoder_layers: int = 3
    dropout: float = 0.1
    label_smoothing: float = 0.1  # eps of the smoothed cross-entropy

    def __post_init__(self) -> None:
        check_real("label_smoothing", self.label_smoothing, at_least=0.0, below=1.0)


@dataclass(frozen=True)
class RNNModelConfig(Seq2SeqModelConfig):
    """An attention RNN encoder-decoder (``seqlab.models.RNNSeq2Seq``, additive attention); the vocabulary sizes
    come from the BPE."""

    model_class: ClassVar[type[RNNSeq2Seq]] = RNNSeq2Seq
    arch: Literal["rnn"] = "rnn"
    embedding_size: int = 128  # E
    hidden_size: int = 256  # H
    cell: CellName = "lstm"  # rnn | gru | gru_textbook | lstm

    def __post_init__(self) -> None:
        super().__post_init__()
        self.model_config(src_vocab_size=300, tgt_vocab_size=300)  # the model's own checks, before any data

    def model_config(self, *, src_vocab_size: int, tgt_vocab_size: int) -> RNNSeq2SeqConfig:
        """The model's config over vocabularies of these sizes (PAD, BOS, EOS included)."""
        return RNNSeq2SeqConfig(
            src_vocab_size=src_vocab_size,
            tgt_vocab_size=tgt_vocab_size,
            embedding_size=self.embedding_size,
            hidden_size=self.hidden_size,
            cell=self.cell,
            encoder_layers=self.encoder_layers,
            decoder_layers=self.decoder_layers,
            dropout=self.dropout,
        )


@dataclass(frozen=True)
class TransformerModelConfig(Seq2SeqModelConfig):
    """A Transformer encoder-decoder (``seqlab.models.TransformerSeq2Seq``); the vocabulary sizes come from the
    BPE."""

    model_class: ClassVar[type[TransformerSeq2Seq]] = TransformerSeq2Seq
    arch: Literal["transformer"] = "transformer"
    d_model: int = 256  # D
    num_heads: int = 4  # N
    d_ff: int = 1024  # feed-forward inner size

    def __post_init__(self) -> None:
        super().__post_init__()
        self.model_config(src_vocab_size=300, tgt_vocab_size=300)  # the model's own checks, before any data

    def model_config(self, *, src_vocab_size: int, tgt_vocab_size: int) -> TransformerSeq2SeqConfig:
        """The model's config over vocabularies of these sizes (PAD, BOS, EOS included)."""
        return TransformerSeq2SeqConfig(
            src_vocab_size=src_vocab_size,
            tgt_vocab_size=tgt_vocab_size,
            d_model=self.d_model,
            num_heads=self.num_heads,
            d_ff=self.d_ff,
            encoder_layers=self.encoder_layers,
            decoder_layers=self.decoder_layers,
            dropout=self.dropout,
            max_length=TRANSFORMER_POSITIONS,
        )


@dataclass(frozen=True)
class DecodeConfig(SearchDecodeConfig):
    """How the test sentences are decoded: beam search (``SearchDecodeConfig``), the length capped by the source's.

    Raises: ConfigError (a ValueError) for a value out of range, naming the field and the value.
    """

    num_beams: int = 5  # K beams; 1 = greedy search
    length_penalty: float = 1.0  # score = log p / length**length_penalty
    max_length: int = 160  # most target tokens per sentence, EOS included
    batch_size: int = 64  # sentences decoded together
    max_length_ratio: float = 2.0  # and at most ratio * (longest source tokens in the batch) + 10 (fairseq's a, b)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("max_length_ratio", self.max_length_ratio, greater_than=0.0)


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model (arch rnn | transformer), train, decode."""

    data: DataConfig = field(default_factory=DataConfig)
    model: RNNModelConfig | TransformerModelConfig = field(default_factory=TransformerModelConfig)
    train: Seq2SeqTrainConfig = field(
        default_factory=lambda: Seq2SeqTrainConfig(
            lr=5e-4, batch_size=64, optimizer="adamw", warmup_steps=200, time_budget=300.0
        )
    )
    decode: DecodeConfig = field(default_factory=DecodeConfig)
