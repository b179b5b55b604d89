"""The course's RNN/LSTM/GRU table, measured: parameters, the copy task and the adding problem at long lags, for the
Elman RNN, GRU and LSTM beside a Transformer, a TCN and an S4D stack of the same parameter budget.

Runs ``seqlab compare --task copy|adding --lags LAG`` once per task and lag (every arch, ~20k parameters, a fixed
number of Adam steps, one torch thread; see ``seqlab compare --help``) and prints one Markdown table: per arch its
parameter count, the copy accuracy and the adding MSE at each lag (a trailing ``*`` marks a solved run: copy >= 99%,
adding <= 0.01), then the summed wall time of the runs of each task and lag. Re-run with:

    python docs/tables/compare_table.py --out runs/tables-compare --lags 100,200 --steps 400

A (task, lag) whose ``--out/TASK-LAG/results.json`` exists is reused (delete it to retrain), so several calls with
different ``--tasks`` / ``--lags`` can train in parallel, and a last call over all of them prints the whole table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

TASKS = ("copy", "adding")


def run_compare(out: Path, task: str, lag: str, archs: str, steps: int) -> dict:
    """``seqlab compare --task TASK --lags LAG`` into ``out/TASK-LAG`` unless it is there; its results.json."""
    target = out / f"{task}-{lag}"
    if not (target / "results.json").exists():
        command = ["seqlab", "compare", "--task", task, "--lags", lag, "--archs", archs, "--max-steps", str(steps)]
        subprocess.run([*command, "--out", str(target), "--overwrite"], check=True)
    return json.loads((target / "results.json").read_text())


def cell(task: str, run: dict) -> str:
    """Accuracy (%) to 0.1 or MSE to 4 decimals, starred when the task counts as solved."""
    value = f"{run['final_metric']:.1f}" if task == "copy" else f"{run['final_metric']:.4f}"
    return value + ("*" if run["solved_at"] is not None else "")


def table(results: dict[tuple[str, str], dict]) -> str:
    """One row per arch: parameters, then the metric of each task at each lag."""
    columns = [(task, int(lag)) for task, lag in results]
    by_key = {(task, r["arch"], r["lag"]): r for (task, _), result in results.items() for r in result["runs"]}
    archs = list(dict.fromkeys(r["arch"] for result in results.values() for r in result["runs"]))
    header = ["arch", "parameters"] + [
        f"{task} {lag}, {'accuracy %' if task == 'copy' else 'MSE'}" for task, lag in columns
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for arch in archs:
        runs = [by_key.get((task, arch, lag)) for task, lag in columns]
        parameters = sorted({str(r["parameters"]) for r in runs if r is not None})
        row = [arch, "/".join(parameters)] + [
            "" if r is None else cell(task, r) for (task, _), r in zip(columns, runs, strict=True)
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/tables-compare"))
    parser.add_argument("--tasks", default=",".join(TASKS), help="comma-separated, from copy,adding")
    parser.add_argument("--lags", default="100,200", help="comma-separated")
    parser.add_argument("--archs", default="rnn,gru,lstm,transformer,tcn,ssm", help="comma-separated")
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    results = {
        (task, lag): run_compare(args.out, task, lag, args.archs, args.steps)
        for task in args.tasks.split(",")
        for lag in args.lags.split(",")
    }
    print(table(results))
    print()
    for (task, lag), result in results.items():
        seconds = {run["arch"]: f"{run['seconds']:.0f}" for run in result["runs"]}
        print(f"{task} lag {lag}: {sum(map(float, seconds.values())):.0f} s of runs ({seconds})")


if __name__ == "__main__":
    main()
