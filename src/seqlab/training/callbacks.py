"""Callbacks on the trainer's named events, and the two that write a run directory's training logs.

Events, in the order they happen (``Trainer`` calls each callback's method in the order of its list):

- ``on_step_end(model, step)`` after every optimizer step, with its ``StepRecord``;
- ``on_validation_end(model, record)`` after every validation, with its history record;
- ``on_best(model, record)`` right after ``on_validation_end`` when the monitored metric improved;
- ``on_train_end(model, result)`` once, when ``fit()`` has loaded the best parameters, with the ``TrainResult``.

The model is in train mode for all four. ``metrics.jsonl`` holds one JSON object per line: ``{"event":
"step", ...StepRecord}`` per step and ``{"event": "validation", ...record}`` per validation (JSON's NaN and
Infinity stand for non-finite values, as Python's ``json`` writes them).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

from torch import nn

from seqlab.files import atomic_write, storage_error
from seqlab.training.records import RECORD_KEYS, StepRecord, TrainResult

METRICS_FILE = "metrics.jsonl"


class Callback:
    """Base class of trainer callbacks: override the events you need; the others do nothing."""

    def on_step_end(self, model: nn.Module, step: StepRecord) -> None:
        """After every optimizer step."""

    def on_validation_end(self, model: nn.Module, record: dict[str, float]) -> None:
        """After every validation, with its history record (see ``TrainResult.history``)."""

    def on_best(self, model: nn.Module, record: dict[str, float]) -> None:
        """After a validation whose monitored metric is the best so far (e.g. to save a checkpoint)."""

    def on_cycle_end(self, model: nn.Module, cycle: int, step: int) -> None:
        """With ``train.cycles`` > 1, when the model holds the weights at the end of cosine cycle ``cycle`` (from 1),
        ``step`` being its last step: before the first step of the next cycle, and for the cycle training stopped
        in, before ``fit()`` loads the best parameters (a snapshot, Huang et al. 2017)."""

    def on_train_end(self, model: nn.Module, result: TrainResult) -> None:
        """Once, after ``fit()`` has loaded the best parameters into the model."""


class OnBest(Callback):
    """Calls ``fn(model, record)`` on every new best: the ``on_best=`` convenience of ``Trainer``."""

    def __init__(self, fn: Callable[[nn.Module, dict[str, float]], None]) -> None:
        self.fn = fn

    def on_best(self, model: nn.Module, record: dict[str, float]) -> None:
        self.fn(model, dict(record))


class OnCycleEnd(Callback):
    """Calls ``fn(model, cycle, step)`` at the end of every cosine cycle (see ``Callback.on_cycle_end``)."""

    def __init__(self, fn: Callable[[nn.Module, int, int], None]) -> None:
        self.fn = fn

    def on_cycle_end(self, model: nn.Module, cycle: int, step: int) -> None:
        self.fn(model, cycle, step)


class MetricsLog(Callback):
    """Appends step and validation records to a JSON-lines file (``metrics.jsonl`` of a run directory).

    Each record is appended and the file closed at once, so the file is complete up to the last step even if
    training is interrupted; an existing file is extended, never overwritten (``rewind`` aside).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _append(self, record: dict[str, object]) -> None:
        try:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as e:  # a full disk: StorageError, one line
            raise storage_error(self.path, e) from None

    def rewind(self, *, step: int, validated_at: int) -> None:
        """Drop what a run resumed from a checkpoint writes again: step records after ``step``, validation
        records after ``validated_at``, and a last line cut short by a kill; the file is replaced atomically."""
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("step", 0) <= (step if record.get("event") == "step" else validated_at):
                kept.append(line + "\n")
        atomic_write(self.path, "".join(kept))

    def on_step_end(self, model: nn.Module, step: StepRecord) -> None:
        self._append({"event": "step", **step._asdict()})

    def on_validation_end(self, model: nn.Module, record: dict[str, float]) -> None:
        self._append({"event": "validation", **record})


def tensorboard_available() -> bool:
    """True when the ``tensorboard`` package, which ``torch.utils.tensorboard`` needs, is installed."""
    return importlib.util.find_spec("tensorboard") is not None


class TensorBoardLog(Callback):
    """Writes TensorBoard event files into ``log_dir``: train/loss, train/lr, train/grad_norm and
    train/tokens_per_s per step, and valid/<metric> per validation, all against the optimizer step.

    Raises:
        ImportError: at construction, if the ``tensorboard`` package is not installed.
    """

    def __init__(self, log_dir: str | Path) -> None:
        from torch.utils.tensorboard import SummaryWriter  # imports tensorboard, an optional dependency

        self.writer = SummaryWriter(log_dir=str(log_dir))

    def on_step_end(self, model: nn.Module, step: StepRecord) -> None:
        for name in ("loss", "lr", "grad_norm", "tokens_per_s"):
            self.writer.add_scalar(f"train/{name}", getattr(step, name), step.step)

    def on_validation_end(self, model: nn.Module, record: dict[str, float]) -> None:
        step = int(record["step"])
        for name, value in record.items():
            if name not in RECORD_KEYS:
                self.writer.add_scalar(f"valid/{name}", value, step)
        self.writer.flush()

    def on_train_end(self, model: nn.Module, result: TrainResult) -> None:
        self.writer.close()


def run_dir_callbacks(run_dir: str | Path) -> list[Callback]:
    """The logs of a run directory (created if missing): ``MetricsLog`` and, if installed, ``TensorBoardLog``."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    callbacks: list[Callback] = [MetricsLog(run_dir / METRICS_FILE)]
    if tensorboard_available():
        callbacks.append(TensorBoardLog(run_dir))
    return callbacks
