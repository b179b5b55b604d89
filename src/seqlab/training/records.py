"""What the trainer reports: one record per optimizer step, one per validation, and the result of a fit."""

from __future__ import annotations

from typing import Literal, NamedTuple

StopReason = Literal["max_epochs", "max_steps", "time_budget", "early_stopping"]

# Keys of a validation record that the trainer fills; validation metrics must not reuse them.
RECORD_KEYS = frozenset({"epoch", "step", "train_loss", "grad_norm", "lr", "tokens_per_s", "skipped_steps", "seconds"})


class StepRecord(NamedTuple):
    """One optimizer step, as callbacks and ``metrics.jsonl`` see it.

    Attributes:
        step: optimizer steps taken, this one included (counts from 1).
        epoch: the epoch of the step (counts from 1).
        loss: token-weighted mean loss over the step's micro-batches (nats per token for cross-entropy).
        lr: the learning rate this step used.
        grad_norm: global L2 norm of the step's gradient before clipping; under fp16 an infinite or NaN norm
            means the gradient scaler skipped this update.
        tokens: tokens in the step (the sum of its micro-batches' ``num_tokens``).
        tokens_per_s: tokens / seconds since the previous step ended (data loading included, validation not).
        seconds: wall-clock seconds since fit() started.
    """

    step: int
    epoch: int
    loss: float
    lr: float
    grad_norm: float
    tokens: int
    tokens_per_s: float
    seconds: float


class TrainResult(NamedTuple):
    """What ``Trainer.fit()`` returns; the model itself holds the best parameters when fit() returns.

    Attributes:
        steps: optimizer steps taken.
        epochs: epochs begun (the last is partial when stopped by max_steps, time_budget or a mid-epoch
            validation).
        seconds: wall-clock seconds of the whole fit(), validation included.
        best: the history record of the best validation (lowest monitored metric).
        stopped_by: "max_epochs", "max_steps", "time_budget" or "early_stopping".
        history: one record per validation: epoch, step, train_loss (token-weighted mean since the previous
            record), grad_norm (mean pre-clip global norm of the updates applied since the previous record),
            lr (the learning rate of the record's step), tokens_per_s (training throughput, validation
            excluded), skipped_steps (steps since the previous record skipped for a non-finite loss or
            gradient norm), the validation metrics, and seconds since fit() started.
    """

    steps: int
    epochs: int
    seconds: float
    best: dict[str, float]
    stopped_by: StopReason
    history: list[dict[str, float]]


def summary_line(record: dict[str, float], *, improved: bool) -> str:
    """One log line per validation; a trailing star marks an improvement of the monitored metric.

    Example: ``epoch 2 step 40 | train_loss 1.23 grad_norm 0.8 lr 0.001 | valid_loss 1.1 per 0.2 | 950 tok/s 3.2 s *``.
    """
    metrics = " ".join(f"{name} {value:.4g}" for name, value in record.items() if name not in RECORD_KEYS)
    return (
        f"epoch {record['epoch']} step {record['step']} | train_loss {record['train_loss']:.4g} "
        f"grad_norm {record['grad_norm']:.4g} lr {record['lr']:.4g} | {metrics} | {record['tokens_per_s']:.0f} tok/s "
        f"{record['seconds']:.1f} s"
        + (f" | {record['skipped_steps']:.0f} non-finite steps skipped" if record.get("skipped_steps") else "")
        + (" *" if improved else "")
    )
