"""Recipe ``vowels``: seq2vec classification of the UCI Japanese Vowels speakers with a bidirectional RNN and pooling.

Task: which of 9 speakers uttered /ae/, from 7-29 frames of 12 LPC cepstrum coefficients (Kudo et al. 1999).
Data: the train/test ``.ts`` files bundled with aeon (270 / 370 series), or the user's own ``.ts`` files; a
stratified share of the training series is held out for validation. Channels are standardised with the training
statistics. Metric: test accuracy (%); published deep and kernel methods reach 98-99%.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from seqlab.data.timeseries import (
    MAX_LINE_CHARS,
    MAX_SERIES_LENGTH,
    SeriesDataset,
    channel_statistics,
    japanese_vowels_paths,
    read_ts_file,
    series_batches,
)
from seqlab.errors import CheckpointError, ConfigError, DataError
from seqlab.files import atomic_write
from seqlab.models.classifier import Seq2VecClassifier, Seq2VecClassifierConfig
from seqlab.models.recurrent_layers import RECURRENT_LAYERS, CellName
from seqlab.nn.pooling import POOLING_NAMES, PoolingName
from seqlab.recipes.base import (
    Report,
    TrainingRun,
    check_model_config,
    check_vocabulary_size,
    load_recipe_config,
    model_device,
    run_training,
)
from seqlab.recipes.run_directory import RunMode
from seqlab.training.trainer import LossOutput, TrainConfig
from seqlab.validation import (
    MAX_DEPTH,
    MAX_WIDTH,
    check_bool,
    check_choice,
    check_int,
    check_probability,
    check_real,
)

NAME = "vowels"
DESCRIPTION = "Japanese Vowels speaker classification (aeon's .ts files): bidirectional RNN + pooling, accuracy (%)"
PREDICT_OPTIONS: tuple[str, ...] = ()
LABELS_FILE = "labels.json"


@dataclass(frozen=True)
class VowelsDataConfig:
    """Where the series come from and how validation is held out."""

    train_path: str | None = None  # .ts file; None = aeon's bundled JapaneseVowels_TRAIN.ts
    test_path: str | None = None  # .ts file; None = aeon's bundled JapaneseVowels_TEST.ts
    valid_fraction: float = 0.15  # share of each class's training series held out for validation
    split_seed: int = 0  # seed of the stratified validation split
    max_line_chars: int = MAX_LINE_CHARS  # longest line (one series) of a .ts file, in characters
    max_series_length: int = MAX_SERIES_LENGTH  # most time steps of one series

    def __post_init__(self) -> None:
        check_int("max_line_chars", self.max_line_chars, maximum=100_000_000)
        check_int("max_series_length", self.max_series_length, maximum=10_000_000)
        check_real("valid_fraction", self.valid_fraction, greater_than=0.0, below=0.5)
        check_int("split_seed", self.split_seed, minimum=None)


@dataclass(frozen=True)
class VowelsModelConfig:
    """Encoder and pooling of the classifier (see seqlab.models.classifier)."""

    hidden_size: int = 64  # H per direction
    cell: CellName = "gru"  # rnn | gru | lstm
    num_layers: int = 1  # stacked recurrent layers
    bidirectional: bool = True  # read the utterance both ways
    pooling: PoolingName = "last"  # how the steps' outputs become one vector
    dropout: float = 0.2  # before the output layer (and between layers)

    def __post_init__(self) -> None:
        check_int("hidden_size", self.hidden_size, maximum=MAX_WIDTH)
        check_choice("cell", self.cell, RECURRENT_LAYERS)
        check_int("num_layers", self.num_layers, maximum=MAX_DEPTH)
        check_bool("bidirectional", self.bidirectional)
        check_choice("pooling", self.pooling, POOLING_NAMES)
        check_probability("dropout", self.dropout)

    def model_config(self, *, input_size: int, num_classes: int) -> Seq2VecClassifierConfig:
        """The classifier config of these hyperparameters for the data's channels and classes."""
        return Seq2VecClassifierConfig(num_classes=num_classes, input_size=input_size, **asdict(self))


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model, train."""

    data: VowelsDataConfig = field(default_factory=VowelsDataConfig)
    model: VowelsModelConfig = field(default_factory=VowelsModelConfig)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(lr=3e-3, batch_size=16, max_epochs=100, patience=20, time_budget=120.0)
    )


@dataclass
class VowelsSystem:
    """A trained classifier with its class names and channel statistics: what a checkpoint directory holds."""

    model: Seq2VecClassifier
    labels: list[str]
    mean: np.ndarray
    std: np.ndarray
    config: Config

    def save(self, directory: Path) -> None:
        """Write the model, class names and channel statistics (``run_training`` adds ``recipe.json``)."""
        self.model.save_pretrained(directory)
        normalisation = {"labels": self.labels, "mean": self.mean.tolist(), "std": self.std.tolist()}
        atomic_write(directory / LABELS_FILE, json.dumps(normalisation, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path) -> VowelsSystem:
        config = load_recipe_config(directory, Config)
        try:
            stored = json.loads((directory / LABELS_FILE).read_text())
            labels, mean, std = list(stored["labels"]), np.array(stored["mean"]), np.array(stored["std"])
        except FileNotFoundError as e:
            raise CheckpointError(f"{e.filename}: missing") from None
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"{directory}: bad recipe files ({e!s})") from None
        model = Seq2VecClassifier.from_pretrained(directory)
        check_vocabulary_size(directory / LABELS_FILE, len(labels), model.config.num_classes)
        if mean.shape != (model.config.input_size,) or std.shape != mean.shape:
            raise CheckpointError(
                f"{directory / LABELS_FILE}: channel statistics of shapes {mean.shape} and {std.shape}, "
                f"but the model reads {model.config.input_size} channels"
            )
        expected = config.model.model_config(input_size=model.config.input_size, num_classes=len(labels))
        check_model_config(directory, expected, model.config)
        return cls(model, labels, mean, std, config)

    def prepare(
        self, data: SeriesDataset, *, source: str, with_labels: bool = True
    ) -> tuple[list[np.ndarray], list[int]]:
        """Standardised series and class ids; ``source`` names the file for errors."""
        channels = len(self.mean)
        for i, s in enumerate(data.series):
            if s.shape[1] != channels:
                raise DataError(f"{source}: series {i + 1} has {s.shape[1]} channels, the model reads {channels}")
        index = {label: i for i, label in enumerate(self.labels)}
        if with_labels:
            unknown = sorted(set(data.labels) - set(index))
            if unknown:
                raise DataError(f"{source}: classes the model never saw: {', '.join(unknown)}")
        series = [((s - self.mean) / self.std).astype(np.float32) for s in data.series]
        return series, [index.get(label, -1) for label in data.labels]

    @torch.no_grad()
    def classify(self, series: Sequence[np.ndarray]) -> list[int]:
        """Predicted class id of each standardised (T_i, C) series."""
        self.model.eval()
        device = model_device(self.model)
        predictions = [0] * len(series)
        for batch in series_batches(series, [0] * len(series), batch_size=256, shuffle=False):
            logits = self.model(batch.x.to(device), batch.lengths.to(device)).logits
            for row, label in zip(batch.indices.tolist(), logits.argmax(-1).tolist(), strict=True):
                predictions[row] = label
        return predictions

    def accuracy(self, data: SeriesDataset, *, source: str) -> float:
        """Percent of series whose predicted class is the labelled one."""
        series, targets = self.prepare(data, source=source)
        predictions = self.classify(series)
        return 100.0 * sum(p == t for p, t in zip(predictions, targets, strict=True)) / len(targets)


def stratified_split(labels: Sequence[str], *, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Indices (train, valid): round(fraction * n_c) of each class c's series, at least one, go to valid."""
    rng = random.Random(seed)
    train, valid = [], []
    for label in sorted(set(labels)):
        rows = [i for i, y in enumerate(labels) if y == label]
        rng.shuffle(rows)
        n_valid = max(1, round(fraction * len(rows))) if len(rows) > 1 else 0
        valid += rows[:n_valid]
        train += rows[n_valid:]
    return sorted(train), sorted(valid)


def train(
    config: Config,
    out_dir: Path,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
    mode: RunMode = "new",
) -> Report:
    """Train the classifier, keep the best checkpoint in ``out_dir``, and report test accuracy.

    Raises:
        ConfigError: aeon is missing. DataError: a .ts file is missing or malformed, channels differ between
            files, or the test file has classes absent from training.
    """

    def prepare() -> TrainingRun:
        if (config.data.train_path is None) != (config.data.test_path is None):
            raise ConfigError("give both data.train_path and data.test_path (or neither, for aeon's Japanese Vowels)")
        if config.data.train_path is None:
            train_source, test_source = map(str, japanese_vowels_paths())
        else:
            train_source, test_source = config.data.train_path, config.data.test_path
        full, test = read_ts(train_source, config.data), read_ts(test_source, config.data)
        train_rows, valid_rows = stratified_split(
            full.labels, fraction=config.data.valid_fraction, seed=config.data.split_seed
        )
        if not valid_rows:
            raise DataError(f"{train_source}: too few series to hold out a validation set")
        mean, std = channel_statistics([full.series[i] for i in train_rows])
        labels = sorted(set(full.labels))
        model = Seq2VecClassifier(config.model.model_config(input_size=len(mean), num_classes=len(labels)))
        system = VowelsSystem(model, labels, mean, std, config)
        series, targets = system.prepare(full, source=train_source)
        test_series, test_targets = system.prepare(test, source=test_source)
        train_set = ([series[i] for i in train_rows], [targets[i] for i in train_rows])
        valid_set = ([series[i] for i in valid_rows], [targets[i] for i in valid_rows])

        def loss_fn(m, batch):
            return LossOutput(F.cross_entropy(m(batch.x, batch.lengths).logits, batch.targets), len(batch.targets))

        def train_batches(epoch, generator, batch_size):
            return series_batches(*train_set, batch_size=batch_size, shuffle=True, generator=generator)

        def validate(m):
            device = model_device(m)
            correct, total, loss = 0, 0, 0.0
            for batch in series_batches(*valid_set, batch_size=256, shuffle=False):
                logits = m(batch.x.to(device), batch.lengths.to(device)).logits
                targets = batch.targets.to(device)
                loss += F.cross_entropy(logits, targets, reduction="sum").item()
                correct += int((logits.argmax(-1) == targets).sum())
                total += len(targets)
            return {"valid_loss": loss / total, "valid_error": 100.0 * (1 - correct / total)}

        def test_report() -> Report:
            predictions = system.classify(test_series)
            correct = sum(p == t for p, t in zip(predictions, test_targets, strict=True))
            examples = [
                (f"test series {i + 1}", labels[test_targets[i]], labels[predictions[i]])
                for i in range(0, len(test_series), 37)
            ]
            return Report(
                {"accuracy": 100.0 * correct / len(test_targets), "test_series": float(len(test_series))}, examples
            )

        return TrainingRun(
            model,
            loss_fn=loss_fn,
            train_batches=train_batches,
            validate=validate,
            save=system.save,
            test=test_report,
            summary=(
                f"data: {len(train_rows)} train / {len(valid_rows)} valid / {len(test_series)} test series, "
                f"{len(mean)} channels, {len(labels)} classes"
            ),
            summary_model=f"{'fused' if model.rnn.fused else 'reference'} path",
            valid_metric="valid_error",
        )

    return run_training(NAME, config, out_dir, prepare, progress=progress, log=log, mode=mode)


def read_ts(path: str | Path, data: VowelsDataConfig, *, labelled: bool = True) -> SeriesDataset:
    """``read_ts_file`` with the data section's limits."""
    return read_ts_file(
        path, labelled=labelled, max_line_chars=data.max_line_chars, max_series_length=data.max_series_length
    )


def evaluate(checkpoint: Path, data_path: str) -> dict[str, float]:
    """Accuracy (%) of a checkpoint on a labelled ``.ts`` file."""
    system = VowelsSystem.load(checkpoint)
    data = read_ts(data_path, system.config.data)
    return {"accuracy": system.accuracy(data, source=data_path), "series": float(len(data.series))}


def predict(checkpoint: Path, inputs: Sequence[str]) -> list[str]:
    """``FILE:N  LABEL`` for every series N (from 1) of each ``.ts`` file in ``inputs``."""
    system = VowelsSystem.load(checkpoint)
    lines = []
    for path in inputs:
        series, _ = system.prepare(read_ts(path, system.config.data, labelled=False), source=path, with_labels=False)
        lines += [f"{path}:{i + 1}  {system.labels[p]}" for i, p in enumerate(system.classify(series))]
    return lines
