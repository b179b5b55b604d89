"""The report of ``seqlab compare``: a table, learning curves per lag and the final metric against the lag (or, for
a recipe, its training curves per arch), written as report.md with PNGs beside it, report.html (one self-contained
page: the PNGs embedded as base64 data URIs) and results.json (every number, the curves included).
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from pathlib import Path

from seqlab.analysis.compare import ARCHITECTURES, RunSummary
from seqlab.analysis.curves import TrainingCurves
from seqlab.analysis.figures import new_figure, save_figure
from seqlab.files import atomic_write


def headers(task_name: str) -> list[str]:
    """The report table's column names; the final metric's names the task's metric."""
    final = "final accuracy (%)" if task_name == "copy" else "final MSE"
    return [
        "arch",
        "lag",
        "parameters",
        "width",
        "receptive field",
        "training tokens/s",
        "peak memory (MiB)",
        final,
        "steps to solve",
        "steps",
        "wall time (s)",
    ]


def _colour(arch: str) -> str:
    return f"C{ARCHITECTURES.index(arch) if arch in ARCHITECTURES else len(ARCHITECTURES)}"


def metric_label(task_name: str) -> str:
    """The axis label and table name of a task's held-out metric."""
    return "accuracy on the recalled symbols (%)" if task_name == "copy" else "MSE (held-out)"


def table_rows(runs: Sequence[RunSummary], task_name: str) -> list[list[str]]:
    """One row of strings per run, in the order of ``headers``: accuracy (%) to 0.1, MSE to 4 decimals; the
    receptive field in input steps, "all" for a model whose last output may read the whole sequence."""
    metric_format = "{:.1f}" if task_name == "copy" else "{:.4f}"
    return [
        [
            run.arch,
            str(run.lag),
            str(run.parameters),
            str(run.width),
            "all" if run.receptive_field is None else str(run.receptive_field),
            f"{run.tokens_per_s:,.0f}",
            f"{run.peak_bytes / 2**20:.2f}",
            metric_format.format(run.final_metric),
            "-" if run.solved_at is None else str(run.solved_at),
            str(run.steps),
            f"{run.seconds:.1f}",
        ]
        for run in runs
    ]


def plot_learning_curves(
    runs: Sequence[RunSummary], path: Path, *, task_name: str, baseline: float, baseline_loss: float, title: str
) -> None:
    """Training loss per step (left) and the held-out metric per validation (right) of the runs of one lag, one
    colour per arch, with the memoryless baseline dashed; written as a PNG."""
    fig = new_figure(figsize=(11, 4.2), layout="constrained")
    loss_ax, metric_ax = fig.subplots(1, 2)
    for run in runs:
        steps, losses = zip(*run.losses, strict=True)
        loss_ax.plot(steps, losses, color=_colour(run.arch), lw=0.8, alpha=0.8, label=run.arch)
        v_steps, _, metrics = zip(*run.validations, strict=True)
        metric_ax.plot(v_steps, metrics, color=_colour(run.arch), marker=".", label=run.arch)
    loss_unit = "nats/token" if task_name == "copy" else "squared error"
    loss_ax.axhline(baseline_loss, color="grey", ls="--", lw=1, label="memoryless baseline")
    loss_ax.set(xlabel="optimizer step", ylabel=f"training loss ({loss_unit})", yscale="log", title="training loss")
    metric_ax.axhline(baseline, color="grey", ls="--", lw=1, label="memoryless baseline")
    solved = 99.0 if task_name == "copy" else 0.01
    metric_ax.axhline(solved, color="black", ls=":", lw=1, label="solved")
    metric_ax.set(xlabel="optimizer step", ylabel=metric_label(task_name), title="held-out set")
    if task_name == "adding":
        metric_ax.set_yscale("log")
    else:
        metric_ax.set_ylim(0, 101)
    loss_ax.legend(fontsize=8)
    metric_ax.legend(fontsize=8)
    fig.suptitle(title)
    save_figure(fig, path, dpi=100)


def plot_metric_vs_lag(runs: Sequence[RunSummary], path: Path, *, task_name: str, baseline: float, title: str) -> None:
    """The final held-out metric against the lag, one line per arch, with the baseline dashed; a PNG."""
    fig = new_figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    for arch in dict.fromkeys(run.arch for run in runs):
        points = sorted((run.lag, run.final_metric) for run in runs if run.arch == arch)
        ax.plot(*zip(*points, strict=True), color=_colour(arch), marker="o", label=arch)
    ax.axhline(baseline, color="grey", ls="--", lw=1, label="memoryless baseline")
    ax.axhline(99.0 if task_name == "copy" else 0.01, color="black", ls=":", lw=1, label="solved")
    lags = sorted({run.lag for run in runs})
    ax.set(xlabel="lag (time steps)", ylabel=f"final {metric_label(task_name)}", title=title, xticks=lags)
    if len(lags) > 1 and lags[-1] / lags[0] > 4:
        ax.set_xscale("log")
        ax.set_xticks(lags, [str(lag) for lag in lags])
        ax.minorticks_off()
    if task_name == "adding":
        ax.set_yscale("log")
    else:
        ax.set_ylim(0, 101)
    ax.legend(fontsize=8)
    save_figure(fig, path, dpi=100)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}"
    "table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}"
    "th{background:#eee}img{max-width:100%}"
)


def write_report(
    out_dir: Path,
    *,
    title: str,
    notes: Sequence[str],
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    images: Sequence[str],
    results: dict[str, object],
) -> None:
    """Write report.md (notes, the table, the PNGs in ``images`` by name), report.html (the same, self-contained)
    and results.json (``results``) into ``out_dir``, where the PNGs already are."""
    md = [f"# {title}", ""]
    md += [line for note in notes for line in (note, "")]  # one paragraph each
    md += [markdown_table(headers, rows), ""]
    md += [f"![{name}]({name})\n" for name in images]
    atomic_write(out_dir / "report.md", "\n".join(md))
    figures = []
    for name in images:
        data = base64.b64encode((out_dir / name).read_bytes()).decode("ascii")
        figures.append(f'<p><img alt="{html.escape(name)}" src="data:image/png;base64,{data}"></p>')
    page = (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        + "".join(f"<p>{html.escape(note)}</p>" for note in notes)
        + _html_table(headers, rows)
        + "".join(figures)
        + "</body></html>\n"
    )
    atomic_write(out_dir / "report.html", page)
    atomic_write(out_dir / "results.json", json.dumps(results, indent=1))


def plot_recipe_curves(curves: dict[str, TrainingCurves], path: Path, *, title: str) -> None:
    """Training loss per step (left) and validation loss (right) of one recipe trained with each arch; a PNG."""
    fig = new_figure(figsize=(11, 4.2), layout="constrained")
    train_ax, valid_ax = fig.subplots(1, 2)
    for i, (arch, run) in enumerate(curves.items()):
        steps, losses = [s[0] for s in run.steps], [s[1] for s in run.steps]
        train_ax.plot(steps, losses, color=f"C{i}", lw=0.8, alpha=0.8, label=arch)
        points = [(step, m["valid_loss"]) for step, m in run.validations if "valid_loss" in m]
        if points:
            valid_ax.plot(*zip(*points, strict=True), color=f"C{i}", marker="o", label=arch)
    train_ax.set(xlabel="optimizer step", ylabel="training loss (nats/token)", title="training loss")
    valid_ax.set(xlabel="optimizer step", ylabel="validation loss (nats/token)", title="validation")
    train_ax.legend(fontsize=8)
    valid_ax.legend(fontsize=8)
    fig.suptitle(title)
    save_figure(fig, path, dpi=100)
