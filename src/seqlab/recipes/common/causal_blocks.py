"""Training a GPT on one token stream by blocks: the train, validation and loss parts of ``lm`` (arch gpt),
``protein`` (causal) and ``smiles``.

Training draws random blocks of ``context_length`` + 1 tokens of the train stream (nanoGPT's ``get_batch``), so a
block may span several documents or items; validation reads the consecutive blocks of the valid stream (or
``valid_blocks`` of them spread evenly over it) and reports the mean loss over all their tokens (nats per token)
and its perplexity.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from seqlab.data.blocks import Blocks, block_batches, random_blocks
from seqlab.models import GPT
from seqlab.recipes.base import model_device
from seqlab.training.language_modeling import language_model_loss
from seqlab.training.objectives import LossOutput, token_weighted_loss

VALID_BATCH = 64  # validation blocks scored at once


@dataclass(frozen=True)
class CausalBlockTraining:
    """The parts a ``TrainingRun`` takes for a GPT trained on random blocks of a stream.

    Attributes:
        train_ids: (N,) long, the train stream, at least context_length + 1 tokens.
        valid_ids: (M,) long, the valid stream, at least 2 tokens.
        context_length: T, the tokens a training block predicts.
        batches_per_epoch: micro-batches between two validations.
        valid_blocks: validate on at most this many of the valid stream's consecutive blocks, spread evenly over
            it (``seqlab.data.blocks.block_batches``' max_blocks); None for all of them.
    """

    train_ids: torch.Tensor
    valid_ids: torch.Tensor
    context_length: int
    batches_per_epoch: int
    valid_blocks: int | None = None

    def loss(self, model: GPT, blocks: Blocks) -> LossOutput:
        """The mean next-token loss (nats/token) of a batch of blocks (inputs, targets (B, T))."""
        return language_model_loss(model, blocks.inputs, blocks.targets).output

    def train_batches(self, epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[Blocks]:
        """``batches_per_epoch`` batches of ``batch_size`` random blocks, drawn from ``generator``."""
        for _ in range(self.batches_per_epoch):
            yield random_blocks(
                self.train_ids, block_size=self.context_length, batch_size=batch_size, generator=generator
            )

    def validate(self, model: GPT) -> dict[str, float]:
        """``valid_loss`` (nats/token over every token of the validation blocks) and ``valid_perplexity``."""
        device = model_device(model)
        block = min(self.context_length, len(self.valid_ids) - 1)
        loss = token_weighted_loss(
            language_model_loss(model, blocks.inputs.to(device), blocks.targets.to(device)).output
            for blocks in block_batches(
                self.valid_ids, block_size=block, batch_size=VALID_BATCH, max_blocks=self.valid_blocks
            )
        )
        return valid_metrics(loss)


def valid_metrics(loss: float) -> dict[str, float]:
    """``valid_loss`` (nats/token) and ``valid_perplexity`` = exp(loss)."""
    return {"valid_loss": loss, "valid_perplexity": float(torch.tensor(loss).exp())}
