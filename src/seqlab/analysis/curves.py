"""Training curves from a run directory's ``metrics.jsonl`` (written by ``seqlab.training.MetricsLog``).

Each line is a JSON object with ``event`` "step" (step, epoch, loss, lr, grad_norm, tokens, tokens_per_s, seconds)
or "validation" (epoch, step, train_loss, grad_norm, lr, tokens_per_s, seconds, skipped_steps and the recipe's own
metrics).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import NamedTuple

from seqlab.analysis.figures import new_figure, save_figure
from seqlab.errors import DataError

METRICS_FILE = "metrics.jsonl"
# The keys the trainer itself puts in a validation record (seqlab.training.records.RECORD_KEYS; a test holds the two
# equal): everything else in a validation record is a metric of the recipe's validate.
TRAINER_KEYS = frozenset({"epoch", "step", "train_loss", "grad_norm", "lr", "tokens_per_s", "seconds", "skipped_steps"})


class TrainingCurves(NamedTuple):
    """steps: [(step, loss (nats/token for cross-entropy), lr, grad_norm)] per optimizer step; validations:
    [(step, {name: value})] per validation, train_loss and the recipe's metrics."""

    steps: list[tuple[int, float, float, float]]
    validations: list[tuple[int, dict[str, float]]]


def read_metrics(run_dir: Path) -> TrainingCurves:
    """The step and validation records of ``run_dir/metrics.jsonl``.

    Raises:
        DataError: if the directory or file is missing, a line is not a JSON object of a known event (file and
            line named), or the file holds no step record.
    """
    path = run_dir / METRICS_FILE
    if not run_dir.is_dir():
        raise DataError(f"{run_dir}: no such run directory")
    if not path.is_file():
        raise DataError(f"{run_dir}: not a training run directory (no {METRICS_FILE})")
    steps, validations = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            event = record["event"]
            if event == "step":
                steps.append(
                    (int(record["step"]), float(record["loss"]), float(record["lr"]), float(record["grad_norm"]))
                )
            elif event == "validation":
                metrics = {k: float(v) for k, v in record.items() if k not in TRAINER_KEYS and k != "event"}
                validations.append((int(record["step"]), {"train_loss": float(record["train_loss"]), **metrics}))
            else:
                raise KeyError(event)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            raise DataError(f"{path}:{number}: not a seqlab metrics record") from None
    if not steps:
        raise DataError(f"{path}: no step records")
    return TrainingCurves(steps, validations)


def plot_training_curves(curves: TrainingCurves, path: Path, *, title: str) -> None:
    """Four panels against the optimizer step: loss (each step, and the validations' losses), the validation
    metrics, the gradient norm before clipping (log scale) and the learning rate; written as a PNG."""
    fig = new_figure(figsize=(12, 8), layout="constrained")
    (loss, metric), (grad, lr) = fig.subplots(2, 2, sharex=True)
    step, step_loss, step_lr, step_grad = zip(*curves.steps, strict=True)
    loss.plot(step, step_loss, color="C0", alpha=0.5, lw=1, label="training loss (each step)")
    names = sorted({name for _, metrics in curves.validations for name in metrics})
    for i, name in enumerate(names):
        points = [(s, m[name]) for s, m in curves.validations if name in m and math.isfinite(m[name])]
        if not points:
            continue
        ax = loss if "loss" in name else metric
        ax.plot(*zip(*points, strict=True), marker="o", color=f"C{i + 1}", label=f"{name} (validation)")
    loss.set(ylabel="loss (nats/token)", title="loss")
    loss.legend(fontsize=8)
    metric.set(ylabel="metric value (recipe's units)", title="validation metrics")
    if metric.lines:
        metric.legend(fontsize=8)
    else:
        metric.text(0.5, 0.5, "no metrics besides losses", ha="center", va="center", transform=metric.transAxes)
    finite = [(s, g) for s, g in zip(step, step_grad, strict=True) if math.isfinite(g) and g > 0]
    if finite:
        grad.semilogy(*zip(*finite, strict=True), color="C0", lw=1)
    grad.set(xlabel="optimizer step", ylabel="gradient L2 norm (before clipping)", title="gradient norm")
    lr.plot(step, step_lr, color="C0")
    lr.set(xlabel="optimizer step", ylabel="learning rate", title="learning rate")
    fig.suptitle(title)
    save_figure(fig, path, dpi=110)
