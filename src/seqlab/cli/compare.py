"""``seqlab compare``: train RNN, GRU, LSTM, a Transformer, a TCN and an S4D state-space stack with matched parameter
counts on the copy task or the adding problem at several lags, and write one report
(``seqlab.analysis.compare_report``) into ``--out``.

Each (arch, lag) run trains with seqlab's ``Trainer``: Adam, gradient norm clipped to 1, a fresh batch from the
trainer's seeded ``torch.Generator`` at every step (so the same ``--seed`` gives the same batches to every arch),
validation every ``--eval-every`` steps on a fixed held-out set drawn from a generator seeded with seed + 1, and
no early stopping: every run gets the same ``--max-steps`` (and ``--time-budget``, if given, per run).

Default cost: lags 10 and 50, the archs of ~20k parameters, 400 steps of 32 sequences, one torch thread: the copy
task took 67 s in all (57 s of runs) on an otherwise quiet 2-core machine, 308 s of runs when 8 other jobs shared
it; the adding problem costs less. The TCN, the fifth arch, trains at about the GRU's cost: on the copy task with
the load at ~15 on 2 cores, 201 s of runs for the TCN, 208 s for the GRU, 69 s for the LSTM. The report prints each
run's wall time and their total. The SSM, the sixth, took 175 s of runs on the copy task against the GRU's 139 s,
with the load at ~17 on 2 cores. Lags 100 and 200 are opt-in with ``--lags``; the textbook GRU
(``gru_textbook``, reference loop) with ``--archs``.

``--recipe NAME`` instead trains a recipe whose model section is a choice (``model.arch``; ``seqlab recipes NAME``
lists each arch's keys) once per arch for ``--max-steps`` steps, with ``--set`` applied to every run (each arch
takes its own model keys), into ``--out/ARCH``, and reports the recipe's own test metrics; the sizes are the
recipe's, not matched (``seqlab.cli.compare_recipe``).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seqlab.analysis import compare, compare_report
from seqlab.cli.analyze import free_directory
from seqlab.cli.compare_recipe import arch_list, check_recipe_arguments, run_recipe, settings
from seqlab.cli.tables import table
from seqlab.data.synthetic import TASKS, LongRangeTask, TaskBatch, make_task
from seqlab.errors import ConfigError
from seqlab.files import output_directory
from seqlab.recipes.base import config_inputs
from seqlab.training import Callback, LossOutput, StepRecord, TrainConfig, Trainer
from seqlab.validation import MAX_PARAMETERS, check_threads

_EVAL_CHUNK = 64  # held-out sequences per forward pass
# Options of --task runs only (a recipe takes its sizes from its config and --set), and their defaults.
TASK_DEFAULTS: dict[str, Any] = {
    "lags": "10,50",
    "params": 20_000,
    "batch_size": 32,
    "lr": 3e-3,
    "eval_every": 20,
    "test_size": 256,
    "symbols": 10,
}


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``compare`` to the ``seqlab`` command."""
    parser = commands.add_parser(
        "compare", help="RNN, GRU, LSTM, Transformer, TCN, SSM on the copy task / adding problem"
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--task", choices=TASKS, help="copy (Arjovsky et al. 2016) or adding")
    what.add_argument("--recipe", help="a recipe whose model section is a choice of model.arch")
    parser.add_argument("--lags", help="--task: comma-separated lags (default: 10,50; try 10,50,100,200)")
    parser.add_argument(
        "--archs",
        help="comma-separated, from rnn,gru,lstm,transformer,tcn,ssm,gru_textbook (default: all but gru_textbook; "
        "a recipe: all its archs)",
    )
    parser.add_argument(
        "--set",
        dest="assignments",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="--recipe: override a config value of every run",
    )
    parser.add_argument("--params", type=int, help=f"target parameter count (default: {TASK_DEFAULTS['params']})")
    parser.add_argument("--max-steps", type=int, default=400, help="optimizer steps per run (default: 400)")
    parser.add_argument("--time-budget", type=float, help="wall-clock seconds per run (default: none)")
    parser.add_argument("--batch-size", type=int, help=f"sequences per step (default: {TASK_DEFAULTS['batch_size']})")
    parser.add_argument("--lr", type=float, help=f"Adam learning rate (default: {TASK_DEFAULTS['lr']})")
    parser.add_argument(
        "--eval-every", type=int, help=f"steps between validations (default: {TASK_DEFAULTS['eval_every']})"
    )
    parser.add_argument("--test-size", type=int, help=f"held-out sequences (default: {TASK_DEFAULTS['test_size']})")
    parser.add_argument(
        "--symbols", type=int, help=f"copy task: symbols to recall, S (default: {TASK_DEFAULTS['symbols']})"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads while training (default: 1)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the weights, the batches and the held-out set")
    parser.add_argument("--out", type=Path, help="output directory (default: the first free analysis/compare-TASK[-N])")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it holds an earlier compare output")
    parser.set_defaults(handler=_handler)


def _int_list(flag: str, text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected comma-separated integers") from None
    if not values:
        raise ConfigError(f"{flag} {text!r}: give at least one value")
    return list(dict.fromkeys(values))


def _check_arguments(args: argparse.Namespace) -> tuple[list[LongRangeTask], list[str]]:
    """The tasks (one per lag) and archs to run; every check happens before anything is written."""
    _check_common(args)
    if args.assignments:
        raise ConfigError("--set applies to --recipe runs; a --task run takes its sizes from the options")
    for flag, default in TASK_DEFAULTS.items():
        if getattr(args, flag) is None:
            setattr(args, flag, default)
    for flag in ("params", "batch_size", "eval_every", "test_size", "symbols"):
        value = getattr(args, flag)
        if value < 1:
            raise ConfigError(f"--{flag.replace('_', '-')} ({value}) must be >= 1")
    if args.params > MAX_PARAMETERS:
        raise ConfigError(f"--params ({args.params}) must be <= {MAX_PARAMETERS} (MAX_PARAMETERS, a model's limit)")
    if not (math.isfinite(args.lr) and args.lr > 0):
        raise ConfigError(f"--lr ({args.lr}) must be > 0")
    minimum = 2 if args.task == "adding" else 1
    lags = _int_list("--lags", args.lags)
    for lag in lags:
        if lag < minimum:
            raise ConfigError(f"--lags: lag ({lag}) must be >= {minimum} for the {args.task} task")
    archs = arch_list(args.archs or ",".join(compare.DEFAULT_ARCHITECTURES), compare.ARCHITECTURES)
    tasks = [make_task(args.task, lag, num_symbols=args.symbols) for lag in lags]
    for arch in archs:  # refuse an unreachable --params before training anything
        compare.matched_width(arch, tasks[0], args.params)
    return tasks, archs


def _check_common(args: argparse.Namespace) -> None:
    """The options that --task and --recipe runs share."""
    if args.max_steps < 1:
        raise ConfigError(f"--max-steps ({args.max_steps}) must be >= 1")
    check_threads("--threads", args.threads)
    if args.time_budget is not None and not (math.isfinite(args.time_budget) and args.time_budget > 0):
        raise ConfigError(f"--time-budget ({args.time_budget}) must be > 0")
    if not 0 <= args.seed < 2**32 - 1:
        raise ConfigError(f"--seed ({args.seed}) must be in [0, 2**32 - 2]")


class _StepLog(Callback):
    """Training loss per step, and the tokens and seconds of the steps (validation excluded)."""

    def __init__(self) -> None:
        self.losses: list[tuple[int, float]] = []
        self.tokens = 0
        self.seconds = 0.0

    def on_step_end(self, model: nn.Module, step: StepRecord) -> None:
        self.losses.append((step.step, step.loss))
        self.tokens += step.tokens
        self.seconds += step.tokens / step.tokens_per_s


def _held_out(model: nn.Module, task: LongRangeTask, test: TaskBatch) -> dict[str, float]:
    device = next(model.parameters()).device
    outputs = torch.cat([model(x.to(device)).cpu() for x in test.inputs.split(_EVAL_CHUNK)])
    loss, metric = task.evaluate(outputs, test.targets)
    return {"valid_loss": loss, task.metric_name: metric}


def train_run(arch: str, task: LongRangeTask, args: argparse.Namespace, test: TaskBatch) -> compare.RunSummary:
    """Train one matched model of ``arch`` on ``task`` with the ``Trainer`` and summarise the run."""
    matched = compare.matched_model(arch, task, args.params, seed=args.seed)
    model = matched.model
    probe = task.batch(args.batch_size, generator=torch.Generator().manual_seed(args.seed))
    peak = compare.training_step_peak(model, task, *probe)

    def loss_fn(model: nn.Module, batch: TaskBatch) -> LossOutput:
        return LossOutput(task.loss(model(batch.inputs), batch.targets), batch.inputs.shape[0] * task.length)

    def train_batches(epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[TaskBatch]:
        while True:
            yield task.batch(batch_size, generator=generator)

    config = TrainConfig(
        lr=args.lr,
        batch_size=args.batch_size,
        max_epochs=1,
        max_steps=args.max_steps,
        time_budget=args.time_budget,
        patience=None,
        seed=args.seed,
        validate_every=args.eval_every,
    )
    steps = _StepLog()
    trainer = Trainer(
        model,
        config,
        loss_fn=loss_fn,
        train_batches=train_batches,
        validate=lambda m: _held_out(m, task, test),
        progress=False,
        log=None,
        callbacks=[steps],
    )
    result = trainer.fit()
    validations = [(int(r["step"]), r["valid_loss"], r[task.metric_name]) for r in result.history]
    solved_at = next((step for step, _, metric in validations if task.solved(metric)), None)
    return compare.RunSummary(
        arch=arch,
        lag=task.lag,
        width=matched.width,
        parameters=matched.parameters,
        tokens_per_s=steps.tokens / max(steps.seconds, 1e-9),
        peak_bytes=peak,
        final_metric=validations[-1][2],
        solved_at=solved_at,
        steps=result.steps,
        seconds=result.seconds,
        losses=steps.losses,
        validations=validations,
        receptive_field=model.receptive_field,
    )


def _handler(args: argparse.Namespace) -> int:
    if args.recipe is not None:
        plan = check_recipe_arguments(args, TASK_DEFAULTS)
        _check_common(args)
        inputs = [path for config in plan.configs.values() for path in config_inputs(config).values()]
    else:
        tasks, archs = _check_arguments(args)
        inputs = []
    target = (
        args.out if args.out is not None else free_directory(Path("analysis") / f"compare-{args.task or args.recipe}")
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        with output_directory(target, kind="compare", overwrite=args.overwrite, inputs=inputs) as out_dir:
            printed = (
                run_recipe(plan, args, out_dir) if args.recipe is not None else _run_task(tasks, archs, args, out_dir)
            )
    finally:
        torch.set_num_threads(threads)
    print(printed)
    print(f"\nwritten to {target}")
    return 0


def _run_task(tasks: list[LongRangeTask], archs: list[str], args: argparse.Namespace, out_dir: Path) -> str:
    """Train every arch at every lag, write the report into ``out_dir`` and return its table."""
    runs, images = _run(tasks, archs, args, out_dir)
    first = tasks[0]
    headers, rows = compare_report.headers(first.name), compare_report.table_rows(runs, first.name)
    compare_report.write_report(
        out_dir,
        title=f"seqlab compare: the {first.name} task",
        notes=_notes(first, args, runs),
        headers=headers,
        rows=rows,
        images=images,
        results={"settings": settings(args), "runs": [run._asdict() for run in runs]},
    )
    return table(headers, rows)


def _run(
    tasks: list[LongRangeTask], archs: list[str], args: argparse.Namespace, out_dir: Path
) -> tuple[list[compare.RunSummary], list[str]]:
    runs: list[compare.RunSummary] = []
    images = []
    for task in tasks:
        test = task.batch(args.test_size, generator=torch.Generator().manual_seed(args.seed + 1))
        lag_runs = []
        for arch in archs:
            run = train_run(arch, task, args, test)
            solved = "not solved" if run.solved_at is None else f"solved at step {run.solved_at}"
            print(
                f"{task.name} lag {task.lag} {arch}: {run.parameters} parameters, {run.steps} steps in "
                f"{run.seconds:.1f} s, {task.metric_name} {run.final_metric:.4g}, {solved}",
                file=sys.stderr,
            )
            lag_runs.append(run)
        name = f"curves_lag{task.lag}.png"
        compare_report.plot_learning_curves(
            lag_runs,
            out_dir / name,
            task_name=task.name,
            baseline=task.baseline,
            baseline_loss=task.baseline_loss,
            title=f"{task.name} task, lag {task.lag} (T = {task.length} steps), ~{args.params} parameters",
        )
        images.append(name)
        runs += lag_runs
    compare_report.plot_metric_vs_lag(
        runs,
        out_dir / "metric_vs_lag.png",
        task_name=tasks[0].name,
        baseline=tasks[0].baseline,
        title=f"{tasks[0].name} task after {args.max_steps} steps, ~{args.params} parameters",
    )
    images.append("metric_vs_lag.png")
    return runs, images


def _notes(task: LongRangeTask, args: argparse.Namespace, runs: list[compare.RunSummary]) -> list[str]:
    if task.name == "copy":
        what = (
            f"Copy task (Hochreiter & Schmidhuber 1997; form of Arjovsky et al. 2016): remember {args.symbols} "
            "symbols of 8, wait lag steps, reproduce them after the delimiter. Metric: accuracy on the recalled "
            "symbols on the held-out set; a memoryless model scores 12.5%; solved at >= 99%."
        )
    else:
        what = (
            "Adding problem (Hochreiter & Schmidhuber 1997; form of Le et al. 2015 / Arjovsky et al. 2016): sum "
            "the two marked values of a sequence of lag steps. Metric: MSE on the held-out set; predicting 1 "
            "scores 0.167; solved at MSE <= 0.01."
        )
    budget = "" if args.time_budget is None else f" or {args.time_budget:g} s, whichever comes first"
    total = sum(run.seconds for run in runs)
    return [
        what,
        f"Each run: {args.max_steps} Adam steps (lr {args.lr:g}){budget}, {args.batch_size} fresh sequences per "
        f"step, validation every {args.eval_every} steps on {args.test_size} held-out sequences, seed {args.seed}. "
        f"Models matched to ~{args.params} parameters (within 10%): one recurrent layer of width H, or a 2-layer "
        "pre-LN Transformer encoder of width D (2 heads, d_ff = 4D, sinusoidal positions, causal for copy), or a "
        f"TCN of width H (kernel size {compare.TCN_KERNEL_SIZE}, the fewest levels whose receptive field covers "
        "the sequence), or 2 pre-LN S4D blocks of width D (state size 16, GELU + GLU, causal). "
        f"Total wall time of the runs: {total:.0f} s.",
        "Steps to solve: the step of the first validation where the task counts as solved ('-': never). Peak "
        "memory: tensor bytes of one training step (forward + backward). Tokens/s: input steps trained per "
        "second, validation excluded (wall-clock: it depends on what else the machine runs).",
    ]
