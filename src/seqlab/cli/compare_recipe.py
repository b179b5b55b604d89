"""``seqlab compare --recipe NAME``: train a recipe whose config has a ``model.arch`` choice once per arch, at the
step budget of ``--max-steps``, into ``--out/ARCH``, and report its own test metrics, tokens/s and curves; also the
helpers that ``seqlab compare``'s two modes share.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, get_type_hints

from seqlab.analysis import compare, compare_report
from seqlab.analysis.curves import METRICS_FILE, read_metrics
from seqlab.cli.tables import format_value, table
from seqlab.config import apply_overrides, architectures, parse_assignments
from seqlab.errors import ConfigError
from seqlab.models import load_pretrained
from seqlab.recipes import Recipe, get_recipe
from seqlab.recipes.base import run_training


def arch_list(text: str | None, choices: Sequence[str]) -> list[str]:
    """The archs of ``--archs`` (all ``choices`` if None), in order, without repeats.

    Raises: ConfigError for an empty list or an arch not in ``choices``.
    """
    if text is None:
        return list(choices)
    archs = list(dict.fromkeys(a.strip() for a in text.split(",") if a.strip()))
    if not archs or any(a not in choices for a in archs):
        raise ConfigError(f"--archs {text!r}: choose from {', '.join(choices)}")
    return archs


def settings(args: argparse.Namespace) -> dict[str, object]:
    """The command's options, as results.json records them."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "handler"}


_SKELETON_KEYS = frozenset({"steps", "epochs", "train_seconds", "total_seconds"})


class RecipePlan(NamedTuple):
    """The recipe and one validated config per arch to train."""

    recipe: Recipe
    configs: dict[str, Any]


def check_recipe_arguments(args: argparse.Namespace, task_options: Iterable[str]) -> RecipePlan:
    """Every arch's config (the recipe's defaults, then --set, then arch, steps, budget and seed), checked before
    anything is trained; the options of --task runs are refused rather than ignored."""
    for flag in task_options:
        if getattr(args, flag) is not None:
            raise ConfigError(f"--{flag.replace('_', '-')} applies to --task runs; give a recipe's sizes with --set")
    recipe = get_recipe(args.recipe)
    base = recipe.Config()
    choices = architectures(get_type_hints(type(base)).get("model"))
    if not choices:
        raise ConfigError(f"--recipe {args.recipe}: its config has no model.arch choice to compare")
    archs = arch_list(args.archs, list(choices))
    overrides: dict[str, Any] = {
        **parse_assignments(args.assignments),
        "train.max_steps": args.max_steps,
        "train.seed": args.seed,
    }
    if args.time_budget is not None:
        overrides["train.time_budget"] = args.time_budget
    configs = {arch: apply_overrides(base, _for_arch(overrides, choices, arch)) for arch in archs}
    return RecipePlan(recipe, configs)


def _for_arch(overrides: dict[str, Any], choices: dict[str, type], arch: str) -> dict[str, Any]:
    """The overrides that apply to ``arch``: every ``--set`` key outside the model section, and the model keys of
    ``arch``'s config class (each arch takes its own, so one command can size several archs).

    Raises: ConfigError for a model key that applies to none of the archs.
    """
    keys = {f.name for f in dataclasses.fields(choices[arch])}
    every = {f.name for c in choices.values() for f in dataclasses.fields(c)}
    kept = {}
    for dotted, value in overrides.items():
        section, _, key = dotted.partition(".")
        if section == "model" and key not in every:
            raise ConfigError(f"--set {dotted}: no arch of the recipe has this key ({', '.join(sorted(every))})")
        if section != "model" or key in keys:
            kept[dotted] = value
    return {**kept, "model.arch": arch}


def run_recipe(plan: RecipePlan, args: argparse.Namespace, out_dir: Path) -> str:
    """Train the recipe once per arch into out_dir/ARCH, write the report beside them and return its table."""
    rows, runs, curves = [], {}, {}
    for arch, config in plan.configs.items():
        run_dir = out_dir / arch
        start = time.perf_counter()
        report = run_training(plan.recipe, config, run_dir, progress=False, log=lambda line: None)
        seconds = time.perf_counter() - start
        curves[arch] = read_metrics(run_dir)
        rates = _step_rates(run_dir)
        tokens_per_s = sum(tokens for tokens, _ in rates) / max(sum(t / rate for t, rate in rates), 1e-9)
        parameters = compare.parameter_count(load_pretrained(run_dir))
        runs[arch] = {
            "parameters": parameters,
            "tokens_per_s": tokens_per_s,
            "seconds": seconds,
            "results": report.results,
        }
        print(f"{args.recipe} {arch}: {parameters} parameters, {seconds:.1f} s", file=sys.stderr)
    # The shared training skeleton's bookkeeping (recipes.base.run_training) has its own columns.
    metrics = list(dict.fromkeys(k for run in runs.values() for k in run["results"] if k not in _SKELETON_KEYS))
    headers = ["arch", "parameters", "training tokens/s", *metrics, "steps", "wall time (s)"]
    for arch, run in runs.items():
        results = run["results"]
        values = [format_value(results[m]) if m in results else "-" for m in metrics]
        steps = str(int(results["steps"])) if "steps" in results else "-"
        rows.append([arch, str(run["parameters"]), f"{run['tokens_per_s']:,.0f}", *values, steps])
        rows[-1].append(f"{run['seconds']:.1f}")
    title = f"recipe {args.recipe}, {args.max_steps} steps per arch"
    compare_report.plot_recipe_curves(curves, out_dir / "curves.png", title=title)
    notes = [
        f"Recipe {args.recipe} trained once per model.arch for {args.max_steps} steps (seed {args.seed}), with the "
        f"recipe's default sizes and --set {' '.join(args.assignments) or '(none)'}: parameter counts are the "
        "recipe's, not matched, and peak memory is not measured. Test metrics are the recipe's own on its test "
        "split; each run directory (checkpoint, metrics.jsonl) lies beside this report.",
    ]
    compare_report.write_report(
        out_dir,
        title=f"seqlab compare: recipe {args.recipe}",
        notes=notes,
        headers=headers,
        rows=rows,
        images=["curves.png"],
        results={"settings": settings(args), "runs": runs},
    )
    return table(headers, rows)


def _step_rates(run_dir: Path) -> list[tuple[int, float]]:
    """(tokens, tokens/s) of every step record of the run's metrics.jsonl."""
    records = [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines() if line.strip()]
    return [(r["tokens"], r["tokens_per_s"]) for r in records if r["event"] == "step"]
