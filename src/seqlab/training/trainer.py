"""The training loop shared by every model: optimizers, devices, mixed precision, gradient accumulation,
clipping, validation, early stopping, budgets, callbacks and training logs.

The trainer sees a model only through three callables that a recipe supplies, so the RNN seq2seq, Transformers
and language models all train with it:

- ``train_batches(epoch, generator, batch_size)`` yields one epoch's micro-batches of ``batch_size``
  sequences, shuffled with the generator;
- ``loss_fn`` returns a ``LossOutput`` (mean loss per token, number of tokens); the strategy calls it, as
  ``loss_fn(model, batch)`` by default (``FullSequence``);
- ``validate(model)`` returns metrics where lower is better for the monitored key.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from seqlab.errors import CheckpointError, DivergenceError
from seqlab.training.callbacks import Callback, OnBest, run_dir_callbacks
from seqlab.training.checkpoint import restore_training_state, set_rng_state, training_state
from seqlab.training.clipping import clip_grad_norm, clip_grad_value
from seqlab.training.device import autocast, grad_scaler, move_to_device, resolve_precision, training_device
from seqlab.training.distributed import data_parallel
from seqlab.training.objectives import LossOutput
from seqlab.training.optim import build_optimizer
from seqlab.training.records import RECORD_KEYS, StepRecord, StopReason, TrainResult, summary_line
from seqlab.training.run_state import RunState, StepTotals
from seqlab.training.schedules import LRScheduler, Progress, cosine_cycle, lr_schedule
from seqlab.training.seeding import seed_everything
from seqlab.training.strategies import FullSequence, Strategy
from seqlab.training.train_config import TrainConfig

__all__ = ["LossOutput", "TrainConfig", "TrainResult", "Trainer"]


def _write_to_stderr(line: str) -> None:
    # Looks sys.stderr up at call time, so redirection (and pytest's capture) applies.
    tqdm.write(line, file=sys.stderr)


def _all_finite(model: nn.Module) -> bool:
    """True if no parameter or buffer of ``model`` holds a NaN or an infinity."""
    return all(bool(torch.isfinite(t).all()) for t in model.state_dict().values() if t.is_floating_point())


class Trainer:
    """Mini-batch training with a choice of optimizer, device, precision, gradient accumulation and strategy.

    Each optimizer step reads k = ``grad_accumulation_steps`` micro-batches. For micro-batch i, the strategy returns
    its mean loss l_i over n_i tokens (under autocast when ``precision`` is bf16 or fp16) and the trainer
    backpropagates (n_i / c) l_i with c = k n_1; after the k-th it multiplies the summed gradient by c / N, N =
    sum_i n_i, so the step's gradient is exactly that of the token mean sum_i n_i l_i / N (the weights n_i / c keep
    the backward pass at the usual scale, which matters for fp16). An epoch's last step may have fewer
    micro-batches. Then: clip the gradient g of all trainable parameters to ``g <- g * min(1, clip_norm / ||g||_2)``
    (Pascanu et al., 2013, Algorithm 1), then, if ``clip_value`` is set, clamp each entry to [-clip_value,
    clip_value] (see ``seqlab.training.clipping``); take a step of ``config.optimizer`` (see
    ``seqlab.training.optim``) with the step's learning rate from ``config.schedule``, set just before the step from
    its number, its epoch and the seconds of training so far (``seqlab.training.schedules.lr_schedule``). Under fp16
    the loss is scaled by a ``torch.amp.GradScaler`` and the gradient unscaled before clipping; a step whose
    gradient overflowed is skipped (its learning rate is not consumed). A cosine in ``config.cycles`` > 1 cycles
    calls each callback's ``on_cycle_end`` when a cycle's last step is done (just before the next cycle's first
    step), and for the cycle training stops in, before the best parameters are loaded back.

    Validation runs at every epoch end, every ``validate_every`` steps if set, and once more when a step or
    time budget ends training between validations; never twice at the same step. Training stops early after
    ``patience`` validations in a row without a strictly lower monitored metric (Prechelt, 1998), and
    ``fit()`` loads the best validated parameters back into the model.

    Args:
        model: the module to train; the trainer moves it to the device of ``config.device`` at construction
            and it stays there.
        config: a ``TrainConfig``.
        loss_fn: called by the strategy with the model in train mode: ``(model, batch) -> LossOutput`` for
            ``FullSequence``; see the strategy for others.
        train_batches: ``(epoch, generator, batch_size) -> Iterable[batch]``, called once per epoch (epochs
            count from 1) with the same ``torch.Generator`` (seeded from ``config.seed``) so shuffling repeats,
            and the micro-batch size ``config.batch_size // config.grad_accumulation_steps``. The trainer
            moves every tensor of each batch (nested in tuples, NamedTuples, lists, dicts or dataclasses) to
            the device.
        validate: ``(model) -> dict[str, float]``; called with the model in eval mode under
            ``torch.no_grad()``; the model is put back in train mode after. Its batches are its own to move
            to ``trainer.device``.
        monitor: the metric of ``validate`` that decides the best model and early stopping (lower is better).
        on_best: ``(model, record) -> None`` called each time the monitored metric improves (e.g. to save a
            checkpoint), with the history record of that validation (an ``OnBest`` callback).
        progress: show a tqdm bar per epoch (loss, pre-clip grad norm, tokens/s); the bar is silent anyway
            when stderr is not a terminal.
        log: receives one summary line per validation; default: ``tqdm.write`` to stderr; None = silent.
        strategy: turns a batch into a loss (``seqlab.training.strategies``); default ``FullSequence()``.
        callbacks: ``Callback`` objects called on the named events (``seqlab.training.callbacks``).
        run_dir: a directory (created if missing) for ``metrics.jsonl`` and, if ``tensorboard`` is installed,
            TensorBoard event files; None = no files.
        checkpoint: receives the training state (see ``fit``) after every ``config.checkpoint_every``-th step
            and after every validation, e.g. ``lambda state: save_training_state(path, state)``
            (``seqlab.training.checkpoint``); the state holds the live tensors, so write it before returning;
            None = no checkpoints.
        pretrained: names of the pretrained body's parameters, trained at ``lr * config.body_lr_scale``;
            ``config.freeze`` is applied first (see ``seqlab.training.optim.build_optimizer``).
        clock: ``() -> seconds``, the time that ``config.time_budget``, a budgeted schedule, the records and the
            checkpoints' elapsed time read; default ``time.perf_counter`` (tests pass a fake one).

    In an active ``torch.distributed`` process group the model is wrapped in ``DistributedDataParallel``,
    each rank trains on its share of every global micro-batch, validation runs on rank 0, and only rank 0
    shows progress, logs, calls ``on_best``, ``callbacks`` and ``checkpoint`` and writes ``run_dir``
    (``seqlab.training.distributed``).

    Attributes:
        device: the ``torch.device`` that training runs on.
        micro_batch_size: the ``batch_size`` passed to ``train_batches``.
        optimizer: the ``torch.optim`` optimizer (e.g. to save its state).
        scheduler: the ``LRScheduler`` of ``config.schedule``; it counts the applied optimizer steps.
        scaler: the ``torch.amp.GradScaler``, enabled for fp16 only.
        callbacks: the callbacks in calling order: the run directory's logs, ``on_best``, then ``callbacks``.
        parallel: this rank's ``DataParallel`` in a process group, else None.

    Raises:
        ValueError: if the model has no trainable parameters or monitor is empty (at construction); from
            ``fit()``: if an epoch yields no batches, a loss is not a scalar, num_tokens < 1, or ``validate``
            returns no ``monitor`` key or a key the trainer reserves for its records.
        ConfigError: at construction, if ``config.device`` is not available, for fp16 on the CPU, or for
            ``TruncatedBPTT`` in a process group.
        DivergenceError: (a FloatingPointError) from ``fit()``, once ``config.max_nonfinite_steps`` steps in
            a row had a NaN or infinite loss or (except under fp16, whose scaler skips those) gradient norm,
            or if no validation had a finite monitored metric and finite parameters; the message names the
            latest step. Such a step is skipped (its update is not applied) and counted in the validation
            record's ``skipped_steps``; a validation with a non-finite metric, or after which a parameter is
            non-finite, never counts as the best, so ``on_best`` never saves a diverged model.

    Note:
        ``fit()`` re-seeds Python, NumPy and torch with ``config.seed`` (see ``seed_everything``), so two fits
        of the same initial model with the same config and data give bit-identical parameters on the CPU
        (unless a cosine schedule ends at ``config.time_budget``: its learning rates follow the clock).
    """

    def __init__(
        self,
        model: nn.Module,
        config: TrainConfig,
        *,
        loss_fn: Callable[..., LossOutput],
        train_batches: Callable[[int, torch.Generator, int], Iterable[Any]],
        validate: Callable[[nn.Module], dict[str, float]],
        monitor: str = "valid_loss",
        on_best: Callable[[nn.Module, dict[str, float]], None] | None = None,
        progress: bool = True,
        log: Callable[[str], None] | None = _write_to_stderr,
        strategy: Strategy | None = None,
        callbacks: Sequence[Callback] = (),
        run_dir: str | Path | None = None,
        checkpoint: Callable[[dict[str, Any]], None] | None = None,
        pretrained: Collection[str] = (),
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not monitor:
            raise ValueError("monitor must name a metric returned by validate, got an empty string")
        self.clock = time.perf_counter if clock is None else clock
        self.device = training_device(config.device, config.precision)
        self.precision = resolve_precision(config.precision, self.device)  # "auto" made bf16 or fp32 here
        self.model = model.to(self.device)
        self.config = config
        self.loss_fn = loss_fn
        self.train_batches = train_batches
        self.validate = validate
        self.monitor = monitor
        self.progress = progress
        self.log = log
        self.strategy: Strategy = FullSequence() if strategy is None else strategy
        self.parallel = data_parallel(self.model, self.device, self.strategy, loss_fn)
        if self.parallel is not None and not self.parallel.writer:  # only rank 0 writes
            progress, log, on_best, callbacks, run_dir, checkpoint = False, None, None, (), None, None
            self.progress, self.log = progress, log
        self.micro_batch_size = config.batch_size // config.grad_accumulation_steps
        self.optimizer = build_optimizer(model, config, pretrained=pretrained)
        self._params = [p for group in self.optimizer.param_groups for p in group["params"]]
        schedule = lr_schedule(
            config.schedule,
            warmup_steps=config.warmup_steps,
            total_steps=config.max_steps,
            time_budget=config.time_budget,
            decay_factor=config.decay_factor,
            decay_after=config.decay_after,
            min_ratio=config.min_lr_ratio,
            cycles=config.cycles,
        )
        self.scheduler = LRScheduler(self.optimizer, schedule)
        self.cycle_of = (
            cosine_cycle(
                config.warmup_steps, total_steps=config.max_steps, time_budget=config.time_budget, cycles=config.cycles
            )
            if config.schedule == "cosine" and config.cycles > 1
            else None
        )
        self._cycle: int | None = None  # the cosine cycle of the last step taken in this fit()
        self.scaler = grad_scaler(self.precision, self.device)
        self.checkpoint = checkpoint
        self.callbacks: list[Callback] = [
            *(run_dir_callbacks(run_dir) if run_dir is not None else []),
            *([OnBest(on_best)] if on_best is not None else []),
            *callbacks,
        ]

    def fit(self, *, resume_from: dict[str, Any] | None = None) -> TrainResult:
        """Train until a stopping rule fires, then load the best validated parameters into the model.

        ``resume_from`` continues from a training state (what ``checkpoint`` receives; see
        ``seqlab.training.checkpoint.training_state``): the epoch's batches are requested again with the data
        generator as it was when the epoch began and those already read are skipped, then the global RNGs are
        restored, so on the CPU the run ends with the same parameters, bit for bit, as one never interrupted
        (same data, code and threads). Steps after the checkpoint are logged again.

        Returns:
            A ``TrainResult``.
        Raises:
            CheckpointError: ``resume_from`` does not fit this model, optimizer or data (one line).
        """
        generator = seed_everything(self.config.seed)
        self._cycle = None
        run = RunState(start=self.clock())
        run.segment_start = run.step_start = run.start
        self.model.train()
        stopped_by: StopReason | None = None
        epoch = 0
        if resume_from is not None:
            epoch, stopped_by = restore_training_state(self, resume_from, run, generator, now=self.clock())
            if stopped_by is None:
                epoch -= 1  # the checkpoint's epoch runs again, its batches before the checkpoint skipped
        while stopped_by is None and epoch < self.config.max_epochs:
            epoch += 1
            stopped_by = self._run_epoch(epoch, generator, run)
        if run.best is None or run.best_state is None:
            raise DivergenceError(
                f"training diverged: no validation had a finite {self.monitor} and finite parameters "
                f"({len(run.history)} validations); lower train.lr or check the data"
            )
        if self._cycle is not None:
            self._end_cycle(self._cycle, run.step)
        self.model.load_state_dict(run.best_state)
        result = TrainResult(
            steps=run.step,
            epochs=epoch,
            seconds=self.clock() - run.start,
            best=run.best,
            stopped_by=stopped_by or "max_epochs",
            history=run.history,
        )
        for callback in self.callbacks:
            callback.on_train_end(self.model, result)
        return result

    def _run_epoch(self, epoch: int, generator: torch.Generator, run: RunState) -> StopReason | None:
        """Train one epoch with its validations; return why training must stop, or None to go on."""
        if run.resume_rng is None:
            run.epoch_generator, run.epoch_batches = generator.get_state(), 0
        batches = iter(self.train_batches(epoch, generator, self.micro_batch_size))
        if run.resume_rng is not None:
            if sum(1 for _ in islice(batches, run.epoch_batches)) < run.epoch_batches:
                raise CheckpointError(
                    f"epoch {epoch} has fewer than the {run.epoch_batches} batches the checkpoint read; "
                    "the training data changed"
                )
            set_rng_state(run.resume_rng)
            run.resume_rng = None
        bar = tqdm(
            batches,
            desc=f"epoch {epoch}/{self.config.max_epochs}",
            unit="batch",
            leave=False,
            disable=None if self.progress else True,
        )
        with bar:
            step: StepTotals | None = None
            for batch in bar:
                run.epoch_batches += 1
                if step is None:
                    run.step += 1
                    step = StepTotals()
                self._accumulate(batch, step, run)
                if step.micro_batches == self.config.grad_accumulation_steps:
                    stop = self._finish_step(step, epoch, run, bar)
                    step = None
                    if stop is not None:
                        return stop
            if step is not None:  # the epoch's last step, with fewer micro-batches
                stop = self._finish_step(step, epoch, run, bar)
                if stop is not None:
                    return stop
        if run.epoch_batches == 0:
            raise ValueError(f"train_batches yielded no batches for epoch {epoch}")
        if run.validated_at == run.step:
            return None
        stop = self._validate(epoch, run)
        self._checkpoint(run, epoch, stop)
        return stop

    def _accumulate(self, batch: Any, step: StepTotals, run: RunState) -> None:
        """Forward, loss and weighted backward of one micro-batch."""
        if step.micro_batches == 0:
            self.optimizer.zero_grad(set_to_none=True)
        batch = move_to_device(batch, self.device)
        share = None if self.parallel is None else self.parallel.shard(batch)
        with autocast(self.precision, self.device):
            if share is None:
                loss, num_tokens = self.strategy.loss(self.model, batch, self.loss_fn)
            else:  # this rank's rows, through DDP
                loss, num_tokens = self.parallel.module(share.batch)
        if loss.dim() != 0:
            raise ValueError(f"loss_fn must return a scalar loss, got shape {tuple(loss.shape)} at step {run.step}")
        num_tokens = int(num_tokens)
        if num_tokens < 1:
            raise ValueError(f"loss_fn returned num_tokens={num_tokens} at step {run.step}; it must be >= 1")
        weight, loss_sum = num_tokens, loss.item() * num_tokens
        if self.parallel is not None:  # weight W n_r and the totals over the ranks
            weight, num_tokens, loss_sum = self.parallel.combine(share, loss.item(), num_tokens)
        if step.micro_batches == 0:
            step.weight_base = num_tokens * self.config.grad_accumulation_steps
        self.scaler.scale(loss * (weight / step.weight_base)).backward()
        step.loss_sum += loss_sum
        step.tokens += num_tokens
        step.micro_batches += 1

    def _finish_step(self, step: StepTotals, epoch: int, run: RunState, bar: tqdm) -> StopReason | None:
        """Unscale, correct, clip and apply the accumulated gradient; report the step; validate if due."""
        self.scaler.unscale_(self.optimizer)
        if step.weight_base != step.tokens:  # sum_i (n_i / c) grad l_i  ->  sum_i (n_i / N) grad l_i
            correction = step.weight_base / step.tokens
            for p in self._params:
                if p.grad is not None:
                    p.grad.mul_(correction)
        max_norm = math.inf if self.config.clip_norm is None else self.config.clip_norm
        # clip_grad_norm returns the norm before clipping; with max_norm=inf it changes nothing.
        grad_norm = clip_grad_norm(self._params, max_norm).item()
        if self.config.clip_value is not None:
            clip_grad_value(self._params, self.config.clip_value)
        loss = step.loss_sum / step.tokens
        elapsed = self.clock() - run.start
        if self.parallel is not None:  # every rank steps at rank 0's learning rate
            elapsed = self.parallel.rank0_number(elapsed)
        self.scheduler.set_lr(epoch=epoch, elapsed=elapsed)
        if self.cycle_of is not None:
            self._enter_cycle(self.cycle_of, Progress(self.scheduler.steps_taken + 1, epoch, elapsed), run)
        lr = self.optimizer.param_groups[0]["lr"]
        # Checked before the optimizer step so that a NaN never reaches the parameters.
        if math.isfinite(loss) and (math.isfinite(grad_norm) or self.scaler.is_enabled()):
            self.scaler.step(self.optimizer)  # under fp16, skipped if the gradient overflowed
            self.scaler.update()
            if math.isfinite(grad_norm):
                self.scheduler.step()
                run.grad_norm_sum += grad_norm
                run.applied_steps += 1
            run.loss_sum += step.loss_sum
            run.tokens += step.tokens
            run.nonfinite_in_row = 0
        else:
            self._skip_step(loss, grad_norm, epoch, run)
        run.lr = lr
        now = self.clock()
        record = StepRecord(
            step=run.step,
            epoch=epoch,
            loss=loss,
            lr=lr,
            grad_norm=grad_norm,
            tokens=step.tokens,
            tokens_per_s=step.tokens / max(now - run.step_start, 1e-9),
            seconds=now - run.start,
        )
        run.step_start = now
        for callback in self.callbacks:
            callback.on_step_end(self.model, record)
        if not bar.disable:
            postfix = {
                "loss": f"{run.loss_sum / max(run.tokens, 1):.4f}",
                "grad_norm": f"{grad_norm:.3g}",
                "tok/s": f"{run.tokens_per_s(now):.0f}",
            }
            bar.set_postfix(postfix, refresh=False)  # a dict keeps this order; kwargs get sorted
        limit = self._limit_reached(run)
        due = self.config.validate_every is not None and run.step % self.config.validate_every == 0
        stop = None
        if limit is not None or due:
            after_validation = self._validate(epoch, run)
            stop = limit or after_validation
        every = self.config.checkpoint_every
        if limit is not None or due or (every is not None and run.step % every == 0):
            self._checkpoint(run, epoch, stop)
        return stop

    def _enter_cycle(self, cycle_of: Callable[[Progress], int], progress: Progress, run: RunState) -> None:
        """Before the step of ``progress``: end the cosine cycle of the last step if this step starts a new one."""
        cycle, last = cycle_of(progress), self._cycle
        if last is None:  # the first step of this fit(), of a new run (cycle 1) or a resumed one
            last = cycle_of(progress._replace(step=progress.step - 1)) if progress.step > 1 else 1
        if cycle > last:
            self._end_cycle(last, run.step - 1)
        self._cycle = cycle

    def _end_cycle(self, cycle: int, step: int) -> None:
        for callback in self.callbacks:
            callback.on_cycle_end(self.model, cycle, step)

    def _checkpoint(self, run: RunState, epoch: int, stop: StopReason | None) -> None:
        if self.checkpoint is not None:
            self.checkpoint(training_state(self, run, epoch=epoch, stopped_by=stop, now=self.clock()))

    def _skip_step(self, loss: float, grad_norm: float, epoch: int, run: RunState) -> None:
        """Drop the gradient of a step with a non-finite loss or gradient norm; stop once too many in a row."""
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.update()  # closes the step that unscale_ opened (a no-op unless fp16)
        run.skipped_steps += 1
        run.nonfinite_in_row += 1
        if run.nonfinite_in_row >= self.config.max_nonfinite_steps:
            raise DivergenceError(
                f"training diverged: {run.nonfinite_in_row} steps in a row had a non-finite loss or gradient norm "
                f"(train.max_nonfinite_steps={self.config.max_nonfinite_steps}), the latest step {run.step} "
                f"(epoch {epoch}) with loss {loss} and grad_norm {grad_norm}; lower train.lr or check the data"
            )

    def _limit_reached(self, run: RunState) -> StopReason | None:
        if self.config.max_steps is not None and run.step >= self.config.max_steps:
            return "max_steps"
        if self._out_of_time(run):
            return "time_budget"
        return None

    def _out_of_time(self, run: RunState) -> bool:
        budget = self.config.time_budget
        if budget is None:
            return False
        out = self.clock() - run.start >= budget
        return out if self.parallel is None else self.parallel.rank0_decides(out)

    def _validate(self, epoch: int, run: RunState) -> StopReason | None:
        """Validate, record, keep the best state, call back and log; return why training must stop, or None."""
        record: dict[str, float] = {
            "epoch": epoch,
            "step": run.step,
            "train_loss": run.loss_sum / run.tokens if run.tokens else math.nan,
            "grad_norm": run.grad_norm_sum / run.applied_steps if run.applied_steps else math.nan,
            "lr": run.lr,
            "tokens_per_s": run.tokens_per_s(self.clock()),
            "skipped_steps": run.skipped_steps,
        }
        self.model.eval()
        try:
            with torch.no_grad():
                if self.parallel is None:
                    metrics = self.validate(self.model)
                else:
                    metrics = self.parallel.rank0_metrics(lambda: self.validate(self.model))
        finally:
            self.model.train()
        reserved = sorted(RECORD_KEYS.intersection(metrics))
        if reserved:
            raise ValueError(f"validate returned keys {reserved} that the trainer reserves for its records")
        if self.monitor not in metrics:
            raise ValueError(f"validate returned no {self.monitor!r} metric (got keys {sorted(metrics)})")
        record.update({name: float(value) for name, value in metrics.items()})
        record["seconds"] = self.clock() - run.start
        run.history.append(record)
        run.validated_at = run.step
        run.loss_sum, run.tokens, run.grad_norm_sum, run.applied_steps, run.skipped_steps = 0.0, 0, 0.0, 0, 0

        value = record[self.monitor]
        improved = (
            math.isfinite(value) and (run.best is None or value < run.best[self.monitor]) and _all_finite(self.model)
        )
        if improved:
            run.best, run.stale = record, 0
            run.best_state = {name: t.detach().clone() for name, t in self.model.state_dict().items()}
        else:
            run.stale += 1
        for callback in self.callbacks:
            callback.on_validation_end(self.model, dict(record))
        if improved:
            for callback in self.callbacks:
                callback.on_best(self.model, dict(record))
        if self.log is not None:
            self.log(summary_line(record, improved=improved))
        run.segment_start = run.step_start = self.clock()  # tokens/s counts training time only

        if self.config.patience is not None and run.stale >= self.config.patience:
            return "early_stopping"
        if self._out_of_time(run):
            return "time_budget"
        return None
