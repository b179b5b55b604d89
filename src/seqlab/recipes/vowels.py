"""Recipe ``vowels``: seq2vec classification of the UCI Japanese Vowels speakers with a bidirectional RNN and pooling.

Task: which of 9 speakers uttered /ae/, from 7-29 frames of 12 LPC cepstrum coefficients (Kudo et al. 1999).
Data: the train/test ``.ts`` files bundled with aeon (270 / 370 series), or the user's own ``.ts`` files; a
stratified share of the training series is held out for validation. Channels are standardised with the training
statistics. Metric: test accuracy (%); published deep and kernel methods reach 98-99%.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.files import data_file, read_json_file
from seqlab.data.timeseries import (
    MAX_LINE_CHARS,
    MAX_SERIES_LENGTH,
    TS_FILE,
    SeriesBatch,
    SeriesDataset,
    channel_statistics,
    japanese_vowels_paths,
    read_ts_file,
    series_batches,
)
from seqlab.errors import CheckpointError, ConfigError, DataError
from seqlab.export import OnnxModel, load_onnx_model
from seqlab.files import atomic_write
from seqlab.models.classifier import Seq2VecClassifier, Seq2VecClassifierConfig
from seqlab.models.recurrent_layers import RECURRENT_LAYERS, CellName
from seqlab.nn.pooling import POOLING_NAMES, PoolingName
from seqlab.recipes.base import Report, TrainingRun, model_device
from seqlab.recipes.saved_run import check_model_config, check_vocabulary_size, load_recipe_config
from seqlab.recipes.system import SystemOptions
from seqlab.training.objectives import token_weighted_loss
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
LABELS_FILE = "labels.json"
EVAL_BATCH_SIZE = 256  # series per batch when validating, testing and predicting


@dataclass(frozen=True)
class VowelsDataConfig:
    """Where the series come from and how validation is held out."""

    train_path: str | None = data_file(TS_FILE)  # .ts file; None = aeon's bundled JapaneseVowels_TRAIN.ts
    test_path: str | None = data_file(TS_FILE)  # .ts file; None = aeon's bundled JapaneseVowels_TEST.ts
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
    cell: CellName = "gru"  # rnn | gru | gru_textbook | lstm
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


def read_ts(path: str | Path, data: VowelsDataConfig, *, labelled: bool = True) -> SeriesDataset:
    """``read_ts_file`` with the data section's limits."""
    return read_ts_file(
        path, labelled=labelled, max_line_chars=data.max_line_chars, max_series_length=data.max_series_length
    )


class SpeakerPrediction(NamedTuple):
    """The predicted class of one series of an input file: ``FILE:N  LABEL`` (N from 1)."""

    source: str
    number: int
    label: str

    def lines(self) -> list[str]:
        """The line ``seqlab predict`` prints for the series."""
        return [f"{self.source}:{self.number}  {self.label}"]


@dataclass
class VowelsSystem:
    """A trained classifier with its class names and channel statistics: what a checkpoint directory holds.

    Attributes:
        model: the classifier of standardised (T, C) series.  labels: the class names, by class id.
        mean, std: (C,), the training frames' channel statistics.  config: the run's recipe config.
        onnx_model: what classifying calls instead of ``model``: the run's exported graph under onnxruntime
            (``--backend onnxruntime``, the one option), else None.
    """

    model: Seq2VecClassifier
    labels: list[str]
    mean: np.ndarray
    std: np.ndarray
    config: Config
    onnx_model: OnnxModel | None = None
    OPTIONS: ClassVar[frozenset[str]] = frozenset({"backend"})
    PREDICT_READS_FILES: ClassVar[bool] = True  # ``FileInputs``: predict's inputs are .ts files

    def save(self, directory: Path) -> None:
        """Write the model, class names and channel statistics (``run_training`` adds ``recipe.json``)."""
        self.model.save_pretrained(directory)
        normalisation = {"labels": self.labels, "mean": self.mean.tolist(), "std": self.std.tolist()}
        atomic_write(directory / LABELS_FILE, json.dumps(normalisation, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path, options: SystemOptions = SystemOptions()) -> VowelsSystem:
        """The run in ``directory``; with ``options.backend`` "onnxruntime", classifying runs its export in
        ``directory/onnx``.

        Raises:
            CheckpointError: (one line naming the file) for a missing or malformed file, labels or statistics that
                do not fit the model, or a recipe.json that describes another model; (onnxruntime) the export is
                missing, stale or of another model.
            ConfigError: (onnxruntime) onnxruntime is not installed.
        """
        config = load_recipe_config(directory, Config)
        stored = read_json_file(directory / LABELS_FILE, error=CheckpointError, missing="missing")
        try:
            labels, mean, std = list(stored["labels"]), np.array(stored["mean"]), np.array(stored["std"])
        except (KeyError, TypeError, ValueError) as e:
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
        onnx_model = load_onnx_model(directory) if options.backend == "onnxruntime" else None
        return cls(model, labels, mean, std, config, onnx_model)

    def predict(self, inputs: Sequence[str]) -> list[SpeakerPrediction]:
        """The class of every series of each ``.ts`` file in ``inputs`` (labelled or not), file by file.

        Raises: DataError naming the file for a malformed file or other channels; ConfigError without aeon.
        """
        predictions = []
        for path in inputs:
            data = read_ts(path, self.config.data, labelled=False)
            series, _ = self.standardise(data, source=path, with_labels=False)
            predictions += [SpeakerPrediction(path, i + 1, self.labels[p]) for i, p in enumerate(self.classify(series))]
        return predictions

    def evaluate(self, data_path: str) -> dict[str, float]:
        """Accuracy (%) on a labelled ``.ts`` file, and its number of series.

        Raises: DataError naming the file for a malformed or unlabelled file, other channels or unknown classes.
        """
        data = read_ts(data_path, self.config.data)
        return {"accuracy": self.accuracy(data, source=data_path), "series": float(len(data.series))}

    def standardise(
        self, data: SeriesDataset, *, source: str, with_labels: bool = True
    ) -> tuple[list[np.ndarray], list[int]]:
        """Standardised (T_i, C) series and class ids (-1 where unlabelled); ``source`` names the file for errors.

        Raises: DataError for a series with other channels, or (``with_labels``) a class the model never saw.
        """
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
        forward = self.model if self.onnx_model is None else self.onnx_model
        predictions = [0] * len(series)
        for batch in series_batches(series, [0] * len(series), batch_size=EVAL_BATCH_SIZE, shuffle=False):
            logits = forward(batch.x.to(device), batch.lengths.to(device)).logits
            for row, label in zip(batch.indices.tolist(), logits.argmax(-1).tolist(), strict=True):
                predictions[row] = label
        return predictions

    def accuracy(self, data: SeriesDataset, *, source: str) -> float:
        """Percent of series whose predicted class is the labelled one.

        Raises: DataError as ``standardise``.
        """
        series, targets = self.standardise(data, source=source)
        predictions = self.classify(series)
        return 100.0 * sum(p == t for p, t in zip(predictions, targets, strict=True)) / len(targets)


System = VowelsSystem


class Labelled(NamedTuple):
    """Standardised (T_i, C) series and their class ids."""

    series: list[np.ndarray]
    targets: list[int]

    def rows(self, indices: Sequence[int]) -> Labelled:
        """The series and targets at ``indices``."""
        return Labelled([self.series[i] for i in indices], [self.targets[i] for i in indices])


class Classified(NamedTuple):
    """A batch's logits (B, classes) and the mean cross-entropy (nats), counted per series."""

    logits: torch.Tensor
    loss: LossOutput


def classified(model: nn.Module, batch: SeriesBatch) -> Classified:
    """The classifier's logits on a batch of series, on the model's device, and their cross-entropy."""
    device = model_device(model)
    logits = model(batch.x.to(device), batch.lengths.to(device)).logits  # (B, classes)
    return Classified(logits, LossOutput(F.cross_entropy(logits, batch.targets.to(device)), len(batch.targets)))


def cross_entropy(model: nn.Module, batch: SeriesBatch) -> LossOutput:
    """The mean cross-entropy (nats) of the classifier on a batch of series (the training loss)."""
    return classified(model, batch).loss


@dataclass(frozen=True)
class VowelsTraining:
    """The parts of a vowels run (``prepare``): the system being trained and its standardised series.

    Attributes:
        system: the classifier with its labels and the training rows' statistics.
        train, valid, test: the series of each split.  summary: the data's part of the training log line.
    """

    system: VowelsSystem
    train: Labelled
    valid: Labelled
    test: Labelled
    summary: str

    @classmethod
    def build(cls, config: Config) -> VowelsTraining:
        """Read the ``.ts`` files, hold out the validation series, fit the statistics and build the model.

        Raises:
            ConfigError: one data path without the other, or aeon missing. DataError: a .ts file is missing or
                malformed, channels differ between files, the test file has classes absent from training, or too
                few series to validate.
        """
        train_source, test_source = data_sources(config.data)
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
        everything = Labelled(*system.standardise(full, source=train_source))
        tested = Labelled(*system.standardise(test, source=test_source))
        summary = (
            f"data: {len(train_rows)} train / {len(valid_rows)} valid / {len(test.series)} test series, "
            f"{len(mean)} channels, {len(labels)} classes"
        )
        return cls(system, everything.rows(train_rows), everything.rows(valid_rows), tested, summary)

    def train_batches(self, epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[SeriesBatch]:
        """The training series in shuffled batches of ``batch_size``."""
        return series_batches(*self.train, batch_size=batch_size, shuffle=True, generator=generator)

    @torch.no_grad()
    def validate(self, model: nn.Module) -> dict[str, float]:
        """``valid_loss``: the cross-entropy (nats) per validation series; ``valid_error``: percent misclassified."""
        losses, wrong = [], 0
        for batch in series_batches(*self.valid, batch_size=EVAL_BATCH_SIZE, shuffle=False):
            out = classified(model, batch)
            losses.append(out.loss)
            wrong += int((out.logits.argmax(-1).cpu() != batch.targets).sum())
        return {"valid_loss": token_weighted_loss(losses), "valid_error": 100.0 * wrong / len(self.valid.targets)}

    def test_report(self) -> Report:
        """Test accuracy (%) and the number of test series; examples: every 37th test series."""
        labels, targets = self.system.labels, self.test.targets
        predictions = self.system.classify(self.test.series)
        correct = sum(p == t for p, t in zip(predictions, targets, strict=True))
        examples = [
            (f"test series {i + 1}", labels[targets[i]], labels[predictions[i]]) for i in range(0, len(targets), 37)
        ]
        return Report({"accuracy": 100.0 * correct / len(targets), "test_series": float(len(targets))}, examples)


def data_sources(data: VowelsDataConfig) -> tuple[str, str]:
    """The train and test ``.ts`` files of the data section (aeon's Japanese Vowels if neither is given).

    Raises: ConfigError for one path without the other, or (aeon's files) aeon missing.
    """
    if (data.train_path is None) != (data.test_path is None):
        raise ConfigError("give both data.train_path and data.test_path (or neither, for aeon's Japanese Vowels)")
    if data.train_path is None:
        train, test = japanese_vowels_paths()
        return str(train), str(test)
    return data.train_path, data.test_path


def prepare(config: Config, *, resume_from: Path | None = None) -> TrainingRun:
    """Read the series and build the classifier: the parts ``run_training`` trains, saves and tests (the best
    validation error's model kept, test accuracy reported).

    Raises:
        ConfigError: aeon is missing. DataError: a .ts file is missing or malformed, channels differ between
            files, or the test file has classes absent from training.
    """
    training = VowelsTraining.build(config)
    model = training.system.model
    return TrainingRun(
        config,
        model,
        loss_fn=cross_entropy,
        train_batches=training.train_batches,
        validate=training.validate,
        save=training.system.save,
        test=training.test_report,
        summary=training.summary,
        summary_model=f"{'fused' if model.rnn.fused else 'reference'} path",
        valid_metric="valid_error",
    )
