"""The g2p default on a machine a third as fast (issue 25.3): the budgeted cosine against today's step cosine cut by
the budget, with the slow machine emulated by the trainer's clock, so the result does not depend on the load.

    python benchmarks/g2p_slow_machine.py --out runs/slow [--seed 0 1 2] [--schedule budgeted steps] [--slowdown 3]

The quiet machine ran the default's 20,000 steps and its 12 validations in ``--quiet-seconds`` (496 s, the mean of
the three seeds in docs/recipes/g2p.md); one validation takes ``--validation-steps`` (31.6) training steps' time
(measured in one run of the default to 20,000 steps: 3.3 s against 0.105 s per step, checkpoints included). So a quiet
step takes t = quiet_seconds / (20,000 + 12 * validation_steps) and a validation t * validation_steps; the
emulated machine takes ``--slowdown`` times as long for each. The trainer reads a clock that advances by that much
with every optimizer step's batch and every validation, never by the real time, so the time budget (540 s, validation
included) stops every run at the same step whatever the machine's load, and the budgeted schedule's
progress max(step / 20,000, elapsed / 540 s) is what a slow machine's wall clock would give: the elapsed time
of step s is that of steps 1..s and the validations before it.

Schedules: ``budgeted`` is the default as it is (``seqlab.training.schedules.budgeted_cosine``); ``steps`` is the
behaviour before it, the cosine over 20,000 steps alone (``lr_schedule("cosine", total_steps=...)``), stopped by the
same budget. Each (schedule, seed) trains into ``OUT/SCHEDULE-seedN`` (a run directory that ``seqlab evaluate``
reads; one that has a ``results.json`` is not trained again, an interrupted one resumes from its training
checkpoint, saved every 500 steps) and is tested on the recipe's test split with its decode section (beam 5). The
table: steps reached, the last step's learning rate as a fraction of the peak, and test WER / PER, overall and by
word length (WER / PER / dropped ends): each run, and the mean +- sample standard deviation over the seeds of each
schedule and ``--set`` changes. ``--set`` changes the recipe's config (e.g. ``train.batch_type=token
train.batch_size=473``, or small smoke runs); give each setting its own ``--out``. Run with
``OMP_NUM_THREADS=1``; several invocations with other seeds can share one ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seqlab.config import apply_overrides, parse_assignments
from seqlab.files import atomic_write
from seqlab.recipes.base import TrainingRun
from seqlab.recipes.g2p import training
from seqlab.recipes.g2p.config import DEFAULT_STEPS, Config
from seqlab.recipes.saved_run import save_recipe_file
from seqlab.training.callbacks import MetricsLog
from seqlab.training.checkpoint import STATE_FILE, load_training_state, save_training_state
from seqlab.training.objectives import LossOutput
from seqlab.training.schedules import LRScheduler, lr_schedule
from seqlab.training.seeding import seed_everything
from seqlab.training.trainer import Trainer

SCHEDULES = ("budgeted", "steps")
BUCKETS = ("1_4", "5_7", "8_10", "11_up", "15_up")
QUIET_VALIDATIONS = 12  # the default's 20,000 steps: 11 epoch ends (1,792 steps each) and the last step


class EmulatedClock:
    """The trainer's clock on an emulated machine: seconds pass only while a step's batches or a validation are
    computed, by fixed amounts, never by the real time.

    Pass it as the trainer's ``clock`` and give the trainer ``clock.stepping(loss_fn, k)`` and
    ``clock.validating(validate)``: each of the k micro-batches of an optimizer step takes ``step_seconds / k``
    (before the step's learning rate is set, as on a real machine) and each validation ``validation_seconds``.

    Args:
        step_seconds: seconds each optimizer step takes, > 0.
        validation_seconds: seconds each validation takes, >= 0.
    """

    def __init__(self, step_seconds: float, validation_seconds: float) -> None:
        self.step_seconds = step_seconds
        self.validation_seconds = validation_seconds
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def stepping(self, loss_fn: Callable[..., LossOutput], micro_batches: int) -> Callable[..., LossOutput]:
        """``loss_fn``, each call taking ``step_seconds / micro_batches`` of this clock."""

        def loss_slowly(*args: Any, **kwargs: Any) -> LossOutput:
            self.now += self.step_seconds / micro_batches
            return loss_fn(*args, **kwargs)

        return loss_slowly

    def validating(self, validate: Callable[[nn.Module], dict[str, float]]) -> Callable[[nn.Module], dict[str, float]]:
        """``validate``, each call taking ``validation_seconds`` of this clock."""

        def validate_slowly(model: nn.Module) -> dict[str, float]:
            metrics = validate(model)
            self.now += self.validation_seconds
            return metrics

        return validate_slowly


def emulated_trainer(run: TrainingRun, schedule: str, clock: EmulatedClock, **options: Any) -> Trainer:
    """A ``Trainer`` of ``run`` (the recipe's model, loss, batches and validation) on ``clock``, with the default's
    schedule (``budgeted``) or the step cosine alone (``steps``); ``options`` go to ``Trainer``."""
    train = run.config.train
    trainer = Trainer(
        run.model,
        train,
        loss_fn=clock.stepping(run.loss_fn, train.grad_accumulation_steps),
        train_batches=run.train_batches,
        validate=clock.validating(run.validate),
        strategy=run.strategy,
        clock=clock,
        progress=False,
        **options,
    )
    if schedule == "steps":  # the schedule before budgeted training: the step cosine, whatever the clock says
        steps_only = lr_schedule("cosine", warmup_steps=train.warmup_steps, total_steps=train.max_steps)
        trainer.scheduler = LRScheduler(trainer.optimizer, steps_only)
    return trainer


def train_and_test(
    config: Config, schedule: str, clock: EmulatedClock, out: Path, changes: str = ""
) -> dict[str, float | str]:
    """Train the recipe's model with ``config`` on ``clock`` into the run directory ``out`` (resumed from its
    training checkpoint if it has one: bit for bit, since the clock is emulated), test it, and return the results
    row (test scores, steps, the stop reason, the emulated seconds, the last learning rate and ``changes``, the
    ``--set`` assignments that made ``config``, which the table names)."""
    seed_everything(config.train.seed)
    run = training.prepare(config)
    out.mkdir(parents=True, exist_ok=True)
    state_file = out / STATE_FILE
    resume_from = load_training_state(state_file) if state_file.exists() else None

    def log(line: str) -> None:
        print(f"{out.name}: {line}", flush=True)

    trainer = emulated_trainer(
        run, schedule, clock, run_dir=out, log=log, checkpoint=lambda state: save_training_state(state_file, state)
    )
    if resume_from is not None:
        log(f"resumed at step {resume_from['run']['step']}")
        for callback in trainer.callbacks:
            if isinstance(callback, MetricsLog):
                callback.rewind(step=resume_from["run"]["step"], validated_at=resume_from["run"]["validated_at"])
    result = trainer.fit(resume_from=resume_from)
    last_lr = trainer.optimizer.param_groups[0]["lr"]  # set for the last step, not since
    run.save(out)
    save_recipe_file(out, "g2p", config)
    scores = run.test().results
    row = {
        **scores,
        "schedule": schedule,
        "changes": changes,
        "steps": result.steps,
        "stopped_by": result.stopped_by,
        "emulated_seconds": result.seconds,
        "last_lr_ratio": last_lr / config.train.lr,
        "valid_loss": result.best["valid_loss"],
    }
    atomic_write(out / "results.json", json.dumps(row, indent=2) + "\n")
    return row


def spread(values: list[float], digits: int = 2) -> str:
    """Mean ± sample standard deviation of ``values`` (the value alone for one, "-" for none); NaN (a bucket
    without words in a small test set) is left out."""
    values = [v for v in values if not math.isnan(v)]
    if len(values) < 2:
        return f"{values[0]:.{digits}f}" if values else "-"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def print_table(out: Path) -> None:
    """Print the results of every run in ``out`` as a Markdown table: one row per run, then each group's (the
    same schedule and ``--set`` changes) mean ± sd when it has several seeds; a bucket's cell is WER / PER /
    dropped ends (% of words whose hypothesis is under 70% of its closest reference's length)."""
    rows = [
        {**json.loads(p.read_text()), "seed": p.parent.name.rsplit("-seed", 1)[1]}
        for p in sorted(out.glob("*-seed*/results.json"))
    ]
    print(
        "\n| schedule | changes | seed | steps | last lr | valid loss | WER | PER | "
        + " | ".join(b.replace("_up", "+").replace("_", "-") for b in BUCKETS)
        + " |\n"
        + "|---" * (8 + len(BUCKETS))
        + "|"
    )
    for schedule in SCHEDULES:
        for changes in sorted({r.get("changes", "") for r in rows if r["schedule"] == schedule}):
            group = [r for r in rows if r["schedule"] == schedule and r.get("changes", "") == changes]
            seeds = [r["seed"] for r in group]
            for r, seed in zip(group, seeds, strict=True):
                print_row(schedule, changes, seed, [r])
            if len(group) > 1:
                print_row(schedule, changes, ",".join(seeds), group)


def print_row(schedule: str, changes: str, seeds: str, group: list[dict[str, Any]]) -> None:
    """One row of ``print_table``: the runs of ``group``, mean ± sd where there are several."""

    def cell(key: str, digits: int = 2) -> str:
        return spread([r.get(key, math.nan) for r in group], digits)

    buckets = [
        f"{cell(f'wer_letters_{b}', 1)} / {cell(f'per_letters_{b}')} / {cell(f'dropped_ends_letters_{b}', 1)}"
        for b in BUCKETS
    ]
    print(
        f"| {schedule} | {changes or '-'} | {seeds} | {'/'.join(str(r['steps']) for r in group)} "
        f"| {statistics.mean(r['last_lr_ratio'] for r in group):.4f} | {cell('valid_loss', 4)} "
        f"| {cell('wer')} | {cell('per')} | " + " | ".join(buckets) + " |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory of the run directories")
    parser.add_argument("--seed", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--schedule", choices=SCHEDULES, nargs="+", default=list(SCHEDULES))
    parser.add_argument("--slowdown", type=float, default=3.0, help="the emulated machine is this many times slower")
    parser.add_argument("--quiet-seconds", type=float, default=496.0, help="the quiet machine's default run, s")
    parser.add_argument("--validation-steps", type=float, default=31.6, help="one validation, in steps' time")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="changes to the recipe's config")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    base = apply_overrides(Config(), parse_assignments(args.set))
    step_seconds = args.quiet_seconds / (DEFAULT_STEPS + QUIET_VALIDATIONS * args.validation_steps) * args.slowdown
    print(
        f"emulated machine: {args.slowdown:g}x slower than {DEFAULT_STEPS} steps in {args.quiet_seconds:g} s: "
        f"{step_seconds:.5f} s per step, {step_seconds * args.validation_steps:.3f} s per validation; "
        f"time budget {base.train.time_budget:g} s",
        flush=True,
    )
    for seed in args.seed:
        for schedule in args.schedule:
            out = args.out / f"{schedule}-seed{seed}"
            if (out / "results.json").exists():
                continue
            config = apply_overrides(base, {"train.seed": seed})
            clock = EmulatedClock(step_seconds, step_seconds * args.validation_steps)
            row = train_and_test(config, schedule, clock, out, changes=" ".join(args.set))
            print(f"{out.name}: {row['steps']} steps ({row['stopped_by']}), WER {row['wer']:.2f}, PER {row['per']:.2f}")
    print_table(args.out)


if __name__ == "__main__":
    main()
