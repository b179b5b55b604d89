"""Training strategies: how the trainer turns one micro-batch into a loss to backpropagate.

The trainer's loop is the same for every strategy: it moves the batch to the device, calls
``strategy.loss(model, batch, loss_fn)`` under autocast, backpropagates the returned loss (weighted for
gradient accumulation and scaled for fp16), then clips, steps, logs and validates. A strategy decides only
what happens between the batch and the loss:

- ``FullSequence`` (the default): ``loss_fn(model, batch)``, backpropagation through the whole batch;
- ``seqlab.training.tbptt.TruncatedBPTT``: consecutive windows of a token stream with a recurrent state
  carried from batch to batch and gradients cut after k2 steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from torch import nn

from seqlab.training.objectives import LossOutput


class Strategy(Protocol):
    """Turns one micro-batch into a ``LossOutput``; the trainer does the backward pass and the step."""

    def loss(self, model: nn.Module, batch: Any, loss_fn: Callable[..., LossOutput]) -> LossOutput:
        """The loss of ``batch`` (already on the training device), called in train mode under autocast."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What the strategy carries from batch to batch, for training checkpoints (tensors, numbers, None)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state_dict()``'s value (its tensors already on the training device)."""
        ...


class FullSequence:
    """Backpropagation through each whole batch: ``loss_fn(model, batch)``."""

    def loss(self, model: nn.Module, batch: Any, loss_fn: Callable[[nn.Module, Any], LossOutput]) -> LossOutput:
        return loss_fn(model, batch)

    def state_dict(self) -> dict[str, Any]:
        return {}  # nothing is carried from batch to batch

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def __repr__(self) -> str:
        return "FullSequence()"
