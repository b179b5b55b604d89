"""Training ``translate``: BPE learnt on the training pairs, teacher-forced cross-entropy, test by beam and greedy.

``prepare`` reads the split, learns the BPE (one shared vocabulary, or one per language), builds the model and
encodes the pairs before anything is written; ``TranslateTraining`` holds the parts the train skeleton calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from seqlab.data.batching import Seq2SeqBatch, batch_iterator, check_token_batches
from seqlab.data.tokenizers import BPETokenizer
from seqlab.errors import DataError
from seqlab.recipes.base import Report, TrainingRun, model_device
from seqlab.recipes.translate.config import Config, DataConfig
from seqlab.recipes.translate.data import Parallel, load_splits
from seqlab.recipes.translate.system import SPECIALS, TranslateSystem
from seqlab.training.objectives import LossOutput, teacher_forcing_loss, token_weighted_loss

PAD_ID = 0  # the seq2seq models' padding id, below the shifted BPE ids
VALID_BATCH_SIZE = 128  # pairs per validation batch
EXAMPLES = 10  # test sentences shown after training


def train_tokenizers(config: DataConfig, train_set: Parallel) -> tuple[BPETokenizer, BPETokenizer]:
    """The source and target BPE of ``config.bpe_size`` learnt on the training pairs: one object learnt on both
    sides when ``config.shared_bpe``, else one per side."""
    if config.shared_bpe:
        shared = BPETokenizer.train(train_set.src + train_set.tgt, vocab_size=config.bpe_size)
        return shared, shared
    source, target = (BPETokenizer.train(side, vocab_size=config.bpe_size) for side in train_set)
    return source, target


@dataclass(frozen=True)
class TranslateTraining:
    """The parts of a translate training run: the encoded train and valid pairs, the test pairs."""

    system: TranslateSystem
    train_pairs: list[tuple[list[int], list[int]]]
    valid_pairs: list[tuple[list[int], list[int]]]
    test_set: Parallel
    valid_batch_size: int = VALID_BATCH_SIZE

    def loss(self, model: nn.Module, batch: Seq2SeqBatch) -> LossOutput:
        """The teacher-forced cross-entropy of ``batch`` (token mean, nats), smoothed by model.label_smoothing."""
        smoothing = self.system.config.model.label_smoothing
        return teacher_forcing_loss(model, batch, pad_id=PAD_ID, label_smoothing=smoothing)

    def train_batches(self, epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[Seq2SeqBatch]:
        """The training pairs shuffled by ``generator`` into batches of ``batch_size`` pairs or target tokens
        (``train.batch_type``)."""
        batch_type = self.system.config.train.batch_type
        return batch_iterator(
            self.train_pairs, batch_size=batch_size, shuffle=True, generator=generator, batch_type=batch_type
        )

    def validate(self, model: nn.Module) -> dict[str, float]:
        """``valid_loss``: the unsmoothed cross-entropy per target token (nats) over the valid pairs."""
        device = model_device(model)
        batches = batch_iterator(self.valid_pairs, batch_size=self.valid_batch_size, shuffle=False)
        return {
            "valid_loss": token_weighted_loss(teacher_forcing_loss(model, b.to(device), pad_id=PAD_ID) for b in batches)
        }

    def test(self) -> Report:
        """BLEU and chrF of beam search (decode.num_beams) and greedy search (``greedy_``) on the test pairs, the
        count of test sentences, the first ``EXAMPLES`` beam translations, and sacrebleu's signature as a note."""
        beam, greedy = self.system.score(self.test_set), self.system.score(self.test_set, num_beams=1)
        results = {**beam.results, **{f"greedy_{k}": v for k, v in greedy.results.items()}}
        examples = list(zip(self.test_set.src, self.test_set.tgt, beam.hypotheses, strict=True))[:EXAMPLES]
        notes = (f"sacrebleu: {beam.signature}",)
        return Report(results | {"test_sentences": float(len(self.test_set.src))}, examples, notes)


def prepare(config: Config, *, resume_from: Path | None = None) -> TrainingRun:
    """Read the split, learn the BPE, build the model, encode the pairs (those longer than data.max_tokens left out
    of training).

    Raises:
        DataError: data.src/data.tgt missing, unreadable, empty or not line-aligned, or no training pair short
            enough.
        ConfigError: token batches (``train.batch_type``) too small for the longest training target.
    """
    train_set, valid_set, test_set = load_splits(config.data)
    source, target = train_tokenizers(config.data, train_set)
    model_config = config.model.model_config(
        src_vocab_size=source.vocab_size + SPECIALS, tgt_vocab_size=target.vocab_size + SPECIALS
    )
    system = TranslateSystem(config.model.model_class(model_config), source, target, config)
    limit = config.data.max_tokens
    train_pairs = [p for p in system.encode(train_set) if max(len(p[0]), len(p[1])) <= limit]
    if not train_pairs:
        raise DataError(f"no training pair has at most data.max_tokens ({limit}) BPE tokens a side")
    train = config.train
    check_token_batches(
        train_pairs, batch_size=train.batch_size // train.grad_accumulation_steps, batch_type=train.batch_type
    )
    parts = TranslateTraining(system, train_pairs, system.encode(valid_set), test_set)
    return TrainingRun(
        config,
        system.model,
        loss_fn=parts.loss,
        train_batches=parts.train_batches,
        validate=parts.validate,
        save=system.save,
        test=parts.test,
        summary=(
            f"data: {len(train_pairs)} train ({len(train_set.src) - len(train_pairs)} too long) / "
            f"{len(parts.valid_pairs)} valid / {len(test_set.src)} test pairs; BPE {source.vocab_size}"
            + ("" if config.data.shared_bpe else f" + {target.vocab_size}")
        ),
        summary_model=config.model.arch,
    )
