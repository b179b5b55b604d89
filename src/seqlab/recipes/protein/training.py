"""Training recipe ``protein``: the proteins read and split, the objective's model built, and the parts
``run_training`` trains with (``seqlab.recipes.protein``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from seqlab.data.proteins import DEFAULT_SOURCE, read_fasta
from seqlab.data.tokenizers import CharTokenizer
from seqlab.data.wordpiece import WordPieceTokenizer
from seqlab.errors import DataError
from seqlab.models import GPT, BertForMaskedLM
from seqlab.recipes.base import Report, TrainingRun
from seqlab.recipes.common import masked_lm
from seqlab.recipes.common.item_stream import (
    SEPARATOR,
    ItemSplits,
    causal_training,
    sample,
    sampling_settings,
    split_items,
    stream,
    test_perplexity,
    unigram_baseline,
)
from seqlab.recipes.protein.config import EXAMPLE_RESIDUES, Config, masking
from seqlab.recipes.protein.system import ProteinSystem, masked_scores, masked_stream, residue_tokenizer
from seqlab.training.masked_lm import masked_lm_loss
from seqlab.training.objectives import LossOutput


def prepare(config: Config, *, resume_from: Path | None = None) -> TrainingRun:
    """Read and split the proteins, build the tokenizer and the objective's model, and check the streams
    (module docstring).

    Raises: DataError for a missing, binary, empty or malformed FASTA file, or too few proteins.
    """
    data = config.data
    source = data.train_path or DEFAULT_SOURCE
    splits = split_items(
        read_fasta(data.train_path),
        valid_fraction=data.valid_fraction,
        test_fraction=data.test_fraction,
        seed=data.split_seed,
        source=data.train_path or "the default proteins",
    )
    summary = (
        f"data: {source}, {len(splits.train):,} / {len(splits.valid):,} / {len(splits.test):,} train / valid / "
        f"test proteins, {sum(map(len, splits.train)):,} train residues"
    )
    everything = "".join([*splits.train, *splits.valid, *splits.test])
    if config.model.objective == "masked":
        return _masked_run(config, splits, residue_tokenizer(everything), source, summary)
    return _causal_run(config, splits, CharTokenizer.train(SEPARATOR + everything), source, summary)


@dataclass(frozen=True)
class CausalProteinTest:
    """The causal test: the test stream's perplexity beside the unigram baseline, and sampled proteins."""

    system: ProteinSystem
    train_ids: torch.Tensor
    test_ids: torch.Tensor

    def test(self) -> Report:
        """``test_loss`` (nats/token), ``test_perplexity``, ``test_tokens``, the unigram baseline, and
        ``sample.count`` proteins sampled from ``M``."""
        model, tokenizer = self.system.model, self.system.tokenizer
        results = {f"test_{name}": value for name, value in test_perplexity(model, self.test_ids).items()}
        results |= unigram_baseline(self.train_ids, self.test_ids, tokenizer.vocab_size)
        return Report(results, _samples(model, tokenizer, self.system.config))


def _causal_run(config: Config, splits: ItemSplits, tokenizer: CharTokenizer, source: str, summary: str) -> TrainingRun:
    """The training parts of the causal objective (a GPT on random blocks of the stream)."""
    data = config.data
    system = ProteinSystem(GPT(config.model.model_config(vocab_size=tokenizer.vocab_size)), tokenizer, config)
    train_ids = stream(tokenizer, splits.train, source=source)
    valid_ids = stream(tokenizer, splits.valid, source=source)[: data.valid_tokens + 1]
    test_ids = stream(tokenizer, splits.test, source=source)
    blocks = causal_training(
        train_ids, valid_ids, context_length=config.model.context_length, batches_per_epoch=data.batches_per_epoch
    )
    return TrainingRun(
        config, system.model, loss_fn=blocks.loss, train_batches=blocks.train_batches, validate=blocks.validate,
        save=system.save, test=CausalProteinTest(system, train_ids, test_ids).test,
        summary=f"{summary}; {tokenizer.vocab_size} tokens",
        summary_model=f"causal GPT L={config.model.num_layers} D={config.model.d_model}",
    )  # fmt: skip


def _samples(model: GPT, tokenizer: CharTokenizer, config: Config) -> list[tuple[str, str, str]]:
    """The report's examples: ``sample.count`` proteins sampled from ``M``, cut at EXAMPLE_RESIDUES."""
    start = "M" if "M" in tokenizer.chars else ""  # a user's set may lack methionine
    prompt = tokenizer.encode(SEPARATOR + start)
    generator = torch.Generator().manual_seed(config.sample.seed)
    settings = sampling_settings(config.sample, config.model.context_length)
    eos_id = prompt[0]
    rows = sample(model, prompt, eos_id=eos_id, count=config.sample.count, generator=generator, settings=settings)
    return [
        (f"sample {i + 1}", start, (start + tokenizer.decode(row))[:EXAMPLE_RESIDUES]) for i, row in enumerate(rows)
    ]


@dataclass(frozen=True)
class MaskedProteinTraining:
    """The training parts of the masked objective: random windows of the train stream masked 80/10/10, and the
    masked loss of fixed masks of the valid stream (``seqlab.recipes.common.masked_lm``).

    Attributes:
        system: the BERT being trained; train_ids, valid_ids, test_ids: the residue streams (N,) long.
    """

    system: ProteinSystem
    train_ids: torch.Tensor
    valid_batch: Any
    test_batch: Any

    def loss(self, model: BertForMaskedLM, batch: Any) -> LossOutput:
        """The masked-LM loss (nats per masked residue) of a batch."""
        return masked_lm_loss(model, batch).output

    def train_batches(self, epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[Any]:
        """``data.batches_per_epoch`` batches of ``batch_size`` random windows, masked with ``generator``."""
        masks, tokenizer = masking(self.system.config), self.system.tokenizer
        for _ in range(self.system.config.data.batches_per_epoch):
            starts = torch.randint(
                0, len(self.train_ids) - masked_lm.window(masks) + 1, (batch_size,), generator=generator
            )
            yield masked_lm.batch_at(self.train_ids, tokenizer, starts, masks, generator)

    def validate(self, model: BertForMaskedLM) -> dict[str, float]:
        """``valid_loss`` (nats per masked residue) and ``valid_accuracy`` (%) of the fixed valid masks."""
        scores = masked_lm.score(model, self.valid_batch)
        return {"valid_loss": scores["loss"], "valid_accuracy": scores["accuracy"]}

    def test(self) -> Report:
        """The test scores beside the unigram baseline, and examples of filled masks."""
        model, tokenizer = self.system.model, self.system.tokenizer
        scores = masked_scores(model, self.test_batch, self.train_ids, set(tokenizer.special_ids))
        results = {(k if k.startswith("unigram") else f"test_{k}"): v for k, v in scores.items()}
        return Report(results, masked_lm.examples(model, tokenizer, self.test_batch))


def _masked_run(
    config: Config, splits: ItemSplits, tokenizer: WordPieceTokenizer, source: str, summary: str
) -> TrainingRun:
    """The training parts of the masked objective (module docstring).

    Raises: DataError if a split is shorter than one sequence.
    """
    data, masks = config.data, masking(config)
    system = ProteinSystem(
        BertForMaskedLM(config.model.bert_config(vocab_size=tokenizer.vocab_size)), tokenizer, config
    )
    streams = {name: masked_stream(tokenizer, items, source=source) for name, items in splits._asdict().items()}
    for name, ids in streams.items():
        if len(ids) < masked_lm.window(masks):
            raise DataError(f"{source}: the {name} split has {len(ids)} residues, too few for one sequence")
    valid_limit = max(1, data.valid_tokens // masked_lm.window(masks))
    fixed = torch.Generator().manual_seed(config.train.seed + 1)
    valid = masked_lm.consecutive(streams["valid"], tokenizer, masks, fixed, valid_limit)
    test_batch = masked_lm.consecutive(
        streams["test"], tokenizer, masks, torch.Generator().manual_seed(config.train.seed + 1)
    )
    parts = MaskedProteinTraining(system, streams["train"], valid, test_batch)
    return TrainingRun(
        config, system.model, loss_fn=parts.loss, train_batches=parts.train_batches, validate=parts.validate,
        save=system.save, test=parts.test, summary=f"{summary}; {tokenizer.vocab_size} tokens",
        summary_model=f"masked BERT L={config.model.num_layers} D={config.model.d_model}",
    )  # fmt: skip
