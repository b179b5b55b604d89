"""What ``Trainer.fit()`` counts while it runs: ``RunState`` for the whole run, ``StepTotals`` for the optimizer
step being accumulated. Plain data, so that ``seqlab.training.checkpoint`` can save and restore a run without
importing the trainer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class RunState:
    """The bookkeeping of one ``Trainer.fit()`` call: its step, best validation and state, the sums since the
    latest validation, and where a resumed epoch stands (``seqlab.training.checkpoint`` saves and restores it)."""

    start: float
    step: int = 0
    history: list[dict[str, float]] = field(default_factory=list)
    best: dict[str, float] | None = None
    best_state: dict[str, torch.Tensor] | None = None
    stale: int = 0  # validations in a row without improvement
    validated_at: int = 0  # step of the latest validation
    # Sums over the steps since the latest validation, reported in the next history record.
    loss_sum: float = 0.0  # token-weighted: sum of loss * num_tokens
    tokens: int = 0
    grad_norm_sum: float = 0.0
    applied_steps: int = 0  # steps whose update was applied (fp16 may skip some)
    skipped_steps: int = 0  # steps skipped for a non-finite loss or gradient norm
    nonfinite_in_row: int = 0  # the latest steps that were skipped so, in a row
    lr: float = 0.0  # learning rate of the latest step
    segment_start: float = 0.0  # when training resumed after the latest validation
    step_start: float = 0.0  # when the latest step ended, or training resumed
    epoch_batches: int = 0  # micro-batches of the current epoch read so far
    epoch_generator: torch.Tensor | None = None  # the data generator's state when the current epoch began
    resume_rng: dict[str, Any] | None = None  # global RNG states to restore once a resumed epoch is replayed

    def tokens_per_s(self, now: float) -> float:
        """Training tokens per second since the latest validation, at time ``now`` (the trainer's clock)."""
        return self.tokens / max(now - self.segment_start, 1e-9)


@dataclass
class StepTotals:
    """The micro-batches of the optimizer step being accumulated (the weights of ``Trainer``'s docstring)."""

    micro_batches: int = 0
    tokens: int = 0
    loss_sum: float = 0.0  # sum of loss * num_tokens
    weight_base: int = 0  # c: micro-batch i's loss is backpropagated with weight num_tokens_i / c
