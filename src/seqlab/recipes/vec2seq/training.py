"""How the vec2seq recipe trains: the labelled texts as character ids, the generator trained by teacher forcing,
and the test report with the class check of its samples."""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from seqlab.data.labelled_text import TokenBatch, token_batches
from seqlab.data.vocab import Vocabulary
from seqlab.models.vec2seq import ConditionedRNNGenerator, ConditionedRNNGeneratorConfig
from seqlab.recipes.base import Report, TrainingRun
from seqlab.recipes.common.class_checker import train_class_checker
from seqlab.recipes.common.labelled_text import (
    LabelledSplits,
    character_ids,
    class_ids,
    read_labelled_splits,
)
from seqlab.recipes.vec2seq.config import Config
from seqlab.recipes.vec2seq.system import Vec2SeqSystem, teacher_forcing_nll
from seqlab.training.trainer import LossOutput


@dataclass(frozen=True)
class Vec2SeqTraining:
    """The parts that train a generator by teacher forcing and test it (``TrainingRun``'s loss, batches,
    validation and test), each usable alone.

    Attributes:
        system: the generator being trained, with its vocabulary, classes and config.
        data: the labelled texts.
        encoded: split name -> (BOS..EOS character ids, class ids) of its texts.
    """

    system: Vec2SeqSystem
    data: LabelledSplits
    encoded: dict[str, tuple[list[list[int]], list[int]]]

    def loss(self, model: ConditionedRNNGenerator, batch: TokenBatch) -> LossOutput:
        """Mean NLL (nats per predicted character, end token included) of the batch, over those characters."""
        return LossOutput(teacher_forcing_nll(model, batch.x, batch.targets), int((batch.x[:, 1:] != 0).sum()))

    def train_batches(self, epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[TokenBatch]:
        """The training texts in shuffled batches of ``batch_size`` (``generator`` draws the order)."""
        ids, targets = self.encoded["train"]
        return token_batches(ids, targets, batch_size=batch_size, pad_id=0, shuffle=True, generator=generator)

    def validate(self, model: ConditionedRNNGenerator) -> dict[str, float]:
        """``valid_loss``: the validation texts' NLL, nats per character, token-weighted over the whole split."""
        return {"valid_loss": self.system.nats_per_char(*self.encoded["valid"])}

    def test(self) -> Report:
        """The test NLL, then the class check (``class_check``)."""
        return class_check(self.system, self.data, self.encoded["test"])


def prepare(config: Config, *, resume_from: Path | None = None) -> TrainingRun:
    """Read the labelled texts, build the character vocabulary of every split and the conditioned generator, and
    return the parts that train it by teacher forcing and test it (``Vec2SeqTraining``).

    Raises:
        ConfigError: nameCreator missing, or data.test_path without data.train_path. DataError: a data file is
            missing or malformed, a split is empty, fewer than 2 classes, or the test data has classes absent
            from training.
    """
    data = read_labelled_splits(config.data)
    labels = data.labels()
    vocab = Vocabulary.build(e.text for e in (*data.train, *data.valid, *data.test))
    encoded = {}
    for name, part in data.parts():
        where = f"{data.source} ({name})"
        encoded[name] = (
            character_ids(vocab, [e.text for e in part], source=where),
            class_ids(labels, part, source=where),
        )
    model = ConditionedRNNGenerator(
        ConditionedRNNGeneratorConfig(vocab_size=len(vocab), num_classes=len(labels), **asdict(config.model))
    )
    system = Vec2SeqSystem(model, vocab, labels, config)
    training = Vec2SeqTraining(system, data, encoded)
    return TrainingRun(
        config,
        model,
        loss_fn=training.loss,
        train_batches=training.train_batches,
        validate=training.validate,
        save=system.save,
        test=training.test,
        summary=(
            f"data: {data.source}, {len(data.train)} train / {len(data.valid)} valid / {len(data.test)} test "
            f"texts, {len(labels)} classes, {len(vocab) - 3} characters"
        ),
        summary_model=f"{config.model.cell}, condition {config.model.condition}",
    )


def class_check(system: Vec2SeqSystem, data: LabelledSplits, test: tuple[list[list[int]], list[int]]) -> Report:
    """The test report: NLL of the test texts (``test``: their ids and class ids), then the class check of
    ``samples_per_class`` samples per class by a checker trained on the real training texts, novelty and
    uniqueness (module docstring); the checker logs to standard error, as ``seqlab train`` does."""
    settings, labels = system.config.sample, system.labels
    checker = train_class_checker(
        data.train,
        data.valid,
        system.vocab,
        labels,
        embedding_size=settings.checker_embedding_size,
        hidden_size=settings.checker_hidden_size,
        config=system.config.checker,
        log=functools.partial(print, file=sys.stderr),
    )
    targets = [c for c in range(len(labels)) for _ in range(settings.samples_per_class)]
    samples = system.sample(targets, torch.Generator().manual_seed(settings.seed))
    sample_accuracy, _ = checker.accuracies(samples, targets)
    real_accuracy, real_balanced = checker.accuracies([e.text for e in data.test], test[1])
    known = {e.text for e in data.train}
    results = {
        "test_nats_per_char": system.nats_per_char(*test),
        "sample_class_accuracy": sample_accuracy,  # balanced by construction: every class has as many samples
        "real_class_accuracy": real_balanced,
        "real_class_accuracy_unbalanced": real_accuracy,
        "chance_accuracy": 100.0 / len(labels),
        "novelty": 100.0 * sum(s not in known for s in samples) / len(samples),
        "uniqueness": 100.0 * len(set(samples)) / len(samples),
        "samples": float(len(samples)),
    }
    real_of = {c: [e.text for e in data.test if e.label == label] for c, label in enumerate(labels)}
    examples = [
        (labels[c], (real_of[c] or ["-"])[0], samples[c * settings.samples_per_class]) for c in range(len(labels))
    ]
    return Report(results, examples)
