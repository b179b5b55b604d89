"""The training loop shared by every model: Adam, gradient clipping, validation, early stopping and budgets.

The trainer sees a model only through three callables that a recipe supplies, so the RNN seq2seq, Transformers
and language models all train with it:

- ``train_batches(epoch, generator)`` yields one epoch's batches, shuffled with the generator;
- ``loss_fn(model, batch)`` returns a ``LossOutput`` (mean loss per token, number of tokens);
- ``validate(model)`` returns metrics where lower is better for the monitored key.
"""

from __future__ import annotations

import math
import numbers
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import torch
from torch import nn
from tqdm import tqdm

from seqlab.errors import ConfigError
from seqlab.training.clipping import clip_grad_norm, clip_grad_value
from seqlab.training.schedules import SCHEDULES, ScheduleName, lambda_lr, lr_multiplier
from seqlab.training.seeding import seed_everything

StopReason = Literal["max_epochs", "max_steps", "time_budget", "early_stopping"]

# Keys of a history record that the trainer fills; validation metrics must not reuse them.
_RECORD_KEYS = frozenset({"epoch", "step", "train_loss", "grad_norm", "lr", "tokens_per_s", "seconds"})


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings of one training run; a recipe saves them with its checkpoint.

    Training stops at the first of: ``max_epochs`` epochs, ``max_steps`` optimizer steps, ``time_budget``
    seconds, or ``patience`` validations in a row without improvement of the monitored metric.

    Gradient clipping happens in this order: first by global norm (``clip_norm``), then by value
    (``clip_value``) on the norm-clipped gradient; the logged ``grad_norm`` is the norm before both.

    ``lr`` is the peak learning rate; ``schedule`` and ``warmup_steps`` choose its multiplier per step (see
    ``seqlab.training.schedules``): a linear warmup over ``warmup_steps`` steps, then constant, inverse-sqrt
    ("Noam") or cosine decay to 0 at ``max_steps``.

    Raises:
        ConfigError: (a ValueError) for a value of the wrong type or out of range; the message shows it.
    """

    lr: float = 1e-3  # Adam learning rate
    batch_size: int = 64  # sequences per batch (used by recipes building the batches)
    max_epochs: int = 30  # passes over the training batches
    max_steps: int | None = None  # optimizer-step budget; None = unlimited
    time_budget: float | None = None  # wall-clock seconds, validation included; None = unlimited
    clip_norm: float | None = 1.0  # clip the global gradient norm to this (None = no clipping)
    clip_value: float | None = None  # then clamp each gradient entry to [-clip_value, clip_value] (None = no)
    patience: int | None = 5  # early stopping: validations without improvement (one per epoch by default)
    weight_decay: float = 0.0  # L2 penalty Adam adds to the gradient (coupled, unlike AdamW)
    seed: int = 0  # seeds Python, NumPy and torch when fit() starts, and the data-shuffling generator
    validate_every: int | None = None  # also validate every this many steps; None = at epoch ends only
    schedule: ScheduleName = "constant"  # after warmup: constant, inverse_sqrt (Noam) or cosine to 0
    warmup_steps: int = 0  # linear warmup: step s < warmup_steps uses lr * s / warmup_steps

    def __post_init__(self) -> None:
        _require(_is_real(self.lr) and self.lr > 0, f"lr ({self.lr!r}) must be > 0")
        for name in ("batch_size", "max_epochs"):
            value = getattr(self, name)
            _require(_is_int(value) and value >= 1, f"{name} ({value!r}) must be an integer >= 1")
        for name in ("max_steps", "patience", "validate_every"):
            value = getattr(self, name)
            _require(
                value is None or (_is_int(value) and value >= 1),
                f"{name} ({value!r}) must be None or an integer >= 1",
            )
        for name in ("time_budget", "clip_norm", "clip_value"):
            value = getattr(self, name)
            _require(value is None or (_is_real(value) and value > 0), f"{name} ({value!r}) must be None or > 0")
        _require(
            _is_real(self.weight_decay) and self.weight_decay >= 0,
            f"weight_decay ({self.weight_decay!r}) must be >= 0",
        )
        _require(
            _is_int(self.seed) and 0 <= self.seed < 2**32,
            f"seed ({self.seed!r}) must be an integer in [0, 2**32)",
        )
        _require(
            self.schedule in SCHEDULES,
            f"schedule ({self.schedule!r}) must be one of {', '.join(map(repr, SCHEDULES))}",
        )
        _require(
            _is_int(self.warmup_steps) and self.warmup_steps >= 0,
            f"warmup_steps ({self.warmup_steps!r}) must be an integer >= 0",
        )
        if self.schedule == "cosine":
            _require(self.max_steps is not None, "schedule 'cosine' needs max_steps, the step where its decay ends")
            _require(
                self.warmup_steps < self.max_steps,
                f"warmup_steps ({self.warmup_steps}) must be < max_steps ({self.max_steps}) for schedule 'cosine'",
            )


class LossOutput(NamedTuple):
    """What ``loss_fn(model, batch)`` returns.

    Attributes:
        loss: scalar tensor, the mean loss per token over the batch's real tokens (nats for cross-entropy).
        num_tokens: how many tokens that mean is over; it weights the batch in the epoch's ``train_loss``.
    """

    loss: torch.Tensor
    num_tokens: int


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
            record), grad_norm (mean pre-clip global norm since the previous record), lr (the learning rate of
            the record's step), tokens_per_s (training throughput, validation excluded), the validation
            metrics, and seconds since fit() started.
    """

    steps: int
    epochs: int
    seconds: float
    best: dict[str, float]
    stopped_by: StopReason
    history: list[dict[str, float]]


def _write_to_stderr(line: str) -> None:
    # Looks sys.stderr up at call time, so redirection (and pytest's capture) applies.
    tqdm.write(line, file=sys.stderr)


def _rank(value: float) -> float:
    """Order for the monitored metric: NaN ranks worst, so a NaN validation never counts as an improvement."""
    return math.inf if math.isnan(value) else value


@dataclass
class _Run:
    """Bookkeeping of one fit() call."""

    start: float
    step: int = 0
    history: list[dict[str, float]] = field(default_factory=list)
    best: dict[str, float] | None = None
    best_state: dict[str, torch.Tensor] | None = None
    stale: int = 0  # validations in a row without improvement
    validated_at: int = 0  # step of the latest validation
    # Sums over the steps since the latest validation, reported in the next history record.
    loss_sum: float = 0.0
    tokens: int = 0
    grad_norm_sum: float = 0.0
    lr: float = 0.0  # learning rate of the latest step
    segment_steps: int = 0
    segment_start: float = 0.0

    def tokens_per_s(self) -> float:
        return self.tokens / max(time.perf_counter() - self.segment_start, 1e-9)


class Trainer:
    """Mini-batch training with Adam, global-norm gradient clipping, validation and early stopping.

    Each step: ``loss = loss_fn(model, batch)``; backpropagate; clip the gradient g of all trainable
    parameters to ``g <- g * min(1, clip_norm / ||g||_2)`` (Pascanu et al., 2013, Algorithm 1), then, if
    ``clip_value`` is set, clamp each entry to [-clip_value, clip_value] (see ``seqlab.training.clipping``);
    take an Adam step (Kingma & Ba, 2015, Algorithm 1) with the step's learning rate from ``config.schedule``.
    Validation runs at every epoch end, every ``validate_every`` steps if set, and once more when a step or
    time budget ends training between validations; never twice at the same step. Training stops early after
    ``patience`` validations in a row without a strictly lower monitored metric (Prechelt, 1998), and
    ``fit()`` loads the best validated parameters back into the model.

    Args:
        model: the module to train, already on its device (the batches must be on the same device).
        config: a ``TrainConfig``.
        loss_fn: ``(model, batch) -> LossOutput``; called with the model in train mode.
        train_batches: ``(epoch, generator) -> Iterable[batch]``, called once per epoch (epochs count from 1)
            with the same ``torch.Generator`` (seeded from ``config.seed``) so shuffling repeats.
        validate: ``(model) -> dict[str, float]``; called with the model in eval mode under
            ``torch.no_grad()``; the model is put back in train mode after.
        monitor: the metric of ``validate`` that decides the best model and early stopping (lower is better).
        on_best: ``(model, record) -> None`` called each time the monitored metric improves (e.g. to save a
            checkpoint), with the history record of that validation.
        progress: show a tqdm bar per epoch (loss, pre-clip grad norm, tokens/s); the bar is silent anyway
            when stderr is not a terminal.
        log: receives one summary line per validation; default: ``tqdm.write`` to stderr; None = silent.

    Attributes:
        optimizer: the ``torch.optim.Adam`` instance (e.g. to save its state).
        scheduler: the ``LambdaLR`` of ``config.schedule``, stepped after each optimizer step.

    Raises:
        ValueError: if the model has no trainable parameters or monitor is empty (at construction); from
            ``fit()``: if an epoch yields no batches, a loss is not a scalar, num_tokens < 1, or ``validate``
            returns no ``monitor`` key or a key the trainer reserves for its records.
        FloatingPointError: from ``fit()``, if the loss or the gradient norm is NaN or infinite; the message
            names the step, and that step's update is not applied.

    Note:
        ``fit()`` re-seeds Python, NumPy and torch with ``config.seed`` (see ``seed_everything``), so two fits
        of the same initial model with the same config and data give bit-identical parameters on the CPU.
    """

    def __init__(
        self,
        model: nn.Module,
        config: TrainConfig,
        *,
        loss_fn: Callable[[nn.Module, Any], LossOutput],
        train_batches: Callable[[int, torch.Generator], Iterable[Any]],
        validate: Callable[[nn.Module], dict[str, float]],
        monitor: str = "valid_loss",
        on_best: Callable[[nn.Module, dict[str, float]], None] | None = None,
        progress: bool = True,
        log: Callable[[str], None] | None = _write_to_stderr,
    ) -> None:
        if not monitor:
            raise ValueError("monitor must name a metric returned by validate, got an empty string")
        self.model = model
        self.config = config
        self.loss_fn = loss_fn
        self.train_batches = train_batches
        self.validate = validate
        self.monitor = monitor
        self.on_best = on_best
        self.progress = progress
        self.log = log
        self._params = [p for p in model.parameters() if p.requires_grad]
        if not self._params:
            raise ValueError("model has no trainable parameters (all have requires_grad=False)")
        self.optimizer = torch.optim.Adam(self._params, lr=config.lr, weight_decay=config.weight_decay)
        multiplier = lr_multiplier(config.schedule, warmup_steps=config.warmup_steps, total_steps=config.max_steps)
        self.scheduler = lambda_lr(self.optimizer, multiplier)

    def fit(self) -> TrainResult:
        """Train until a stopping rule fires, then load the best validated parameters into the model.

        Returns:
            A ``TrainResult``.
        """
        generator = seed_everything(self.config.seed)
        run = _Run(start=time.perf_counter())
        run.segment_start = run.start
        self.model.train()
        stopped_by: StopReason | None = None
        epoch = 0
        while stopped_by is None and epoch < self.config.max_epochs:
            epoch += 1
            stopped_by = self._run_epoch(epoch, generator, run)
        assert run.best is not None and run.best_state is not None  # every epoch ends with a validation
        self.model.load_state_dict(run.best_state)
        return TrainResult(
            steps=run.step,
            epochs=epoch,
            seconds=time.perf_counter() - run.start,
            best=run.best,
            stopped_by=stopped_by or "max_epochs",
            history=run.history,
        )

    def _run_epoch(self, epoch: int, generator: torch.Generator, run: _Run) -> StopReason | None:
        """Train one epoch with its validations; return why training must stop, or None to go on."""
        config = self.config
        first_step = run.step + 1
        bar = tqdm(
            self.train_batches(epoch, generator),
            desc=f"epoch {epoch}/{config.max_epochs}",
            unit="batch",
            leave=False,
            disable=None if self.progress else True,
        )
        with bar:
            for batch in bar:
                run.step += 1
                grad_norm = self._train_step(batch, epoch, run)
                if not bar.disable:
                    postfix = {
                        "loss": f"{run.loss_sum / run.tokens:.4f}",
                        "grad_norm": f"{grad_norm:.3g}",
                        "tok/s": f"{run.tokens_per_s():.0f}",
                    }
                    bar.set_postfix(postfix, refresh=False)  # a dict keeps this order; kwargs get sorted
                limit = self._limit_reached(run)
                due = config.validate_every is not None and run.step % config.validate_every == 0
                if limit is not None or due:
                    after_validation = self._validate(epoch, run)
                    if limit is not None or after_validation is not None:
                        return limit or after_validation
        if run.step < first_step:
            raise ValueError(f"train_batches yielded no batches for epoch {epoch}")
        if run.validated_at == run.step:
            return None
        return self._validate(epoch, run)

    def _train_step(self, batch: Any, epoch: int, run: _Run) -> float:
        """One optimizer step; returns the pre-clip global gradient norm."""
        self.optimizer.zero_grad(set_to_none=True)
        loss, num_tokens = self.loss_fn(self.model, batch)
        if loss.dim() != 0:
            raise ValueError(f"loss_fn must return a scalar loss, got shape {tuple(loss.shape)} at step {run.step}")
        num_tokens = int(num_tokens)
        if num_tokens < 1:
            raise ValueError(f"loss_fn returned num_tokens={num_tokens} at step {run.step}; it must be >= 1")
        loss.backward()
        max_norm = math.inf if self.config.clip_norm is None else self.config.clip_norm
        # clip_grad_norm returns the norm before clipping; with max_norm=inf it changes nothing.
        grad_norm = clip_grad_norm(self._params, max_norm).item()
        if self.config.clip_value is not None:
            clip_grad_value(self._params, self.config.clip_value)
        loss_value = loss.item()
        # Checked before optimizer.step() so that a NaN never reaches the parameters.
        if not math.isfinite(loss_value):
            raise FloatingPointError(
                f"non-finite loss ({loss_value}) at step {run.step} (epoch {epoch}); "
                "lower lr or check the batch; this step was not applied"
            )
        if not math.isfinite(grad_norm):
            raise FloatingPointError(
                f"non-finite gradient norm ({grad_norm}) at step {run.step} (epoch {epoch}); "
                "lower lr or check the batch; this step was not applied"
            )
        run.lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        self.scheduler.step()
        run.loss_sum += loss_value * num_tokens
        run.tokens += num_tokens
        run.grad_norm_sum += grad_norm
        run.segment_steps += 1
        return grad_norm

    def _limit_reached(self, run: _Run) -> StopReason | None:
        if self.config.max_steps is not None and run.step >= self.config.max_steps:
            return "max_steps"
        if self._out_of_time(run):
            return "time_budget"
        return None

    def _out_of_time(self, run: _Run) -> bool:
        budget = self.config.time_budget
        return budget is not None and time.perf_counter() - run.start >= budget

    def _validate(self, epoch: int, run: _Run) -> StopReason | None:
        """Validate, record, keep the best state and log; return why training must stop now, or None."""
        record: dict[str, float] = {
            "epoch": epoch,
            "step": run.step,
            "train_loss": run.loss_sum / run.tokens,
            "grad_norm": run.grad_norm_sum / run.segment_steps,
            "lr": run.lr,
            "tokens_per_s": run.tokens_per_s(),
        }
        self.model.eval()
        try:
            with torch.no_grad():
                metrics = self.validate(self.model)
        finally:
            self.model.train()
        reserved = sorted(_RECORD_KEYS.intersection(metrics))
        if reserved:
            raise ValueError(f"validate returned keys {reserved} that the trainer reserves for its records")
        if self.monitor not in metrics:
            raise ValueError(f"validate returned no {self.monitor!r} metric (got keys {sorted(metrics)})")
        record.update({name: float(value) for name, value in metrics.items()})
        record["seconds"] = time.perf_counter() - run.start
        run.history.append(record)
        run.validated_at = run.step
        run.loss_sum, run.tokens, run.grad_norm_sum, run.segment_steps = 0.0, 0, 0.0, 0

        improved = run.best is None or _rank(record[self.monitor]) < _rank(run.best[self.monitor])
        if improved:
            run.best, run.stale = record, 0
            run.best_state = {name: t.detach().clone() for name, t in self.model.state_dict().items()}
            if self.on_best is not None:
                self.on_best(self.model, dict(record))
        else:
            run.stale += 1
        if self.log is not None:
            self.log(_summary(record, improved=improved))
        run.segment_start = time.perf_counter()  # tokens/s counts training time only

        if self.config.patience is not None and run.stale >= self.config.patience:
            return "early_stopping"
        if self._out_of_time(run):
            return "time_budget"
        return None


def _summary(record: dict[str, float], *, improved: bool) -> str:
    """One log line per validation; a trailing star marks an improvement of the monitored metric.

    Example: ``epoch 2 step 40 | train_loss 1.23 grad_norm 0.8 | valid_loss 1.1 per 0.2 | 950 tok/s 3.2 s *``.
    """
    metrics = " ".join(f"{name} {value:.4g}" for name, value in record.items() if name not in _RECORD_KEYS)
    return (
        f"epoch {record['epoch']} step {record['step']} | train_loss {record['train_loss']:.4g} "
        f"grad_norm {record['grad_norm']:.4g} | {metrics} | {record['tokens_per_s']:.0f} tok/s "
        f"{record['seconds']:.1f} s" + (" *" if improved else "")
    )
