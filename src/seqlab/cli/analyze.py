"""``seqlab analyze gradients | attention | positional | complexity | exposure | contacts`` and ``seqlab plot``:
measure what the textbooks claim, on fresh layers or the user's checkpoint; each writes a PNG and its numbers (CSV
or JSON) into ``--out``.

A new analysis is an ``Analysis(name, help, add_arguments, run)`` entry in ANALYSES: ``add_arguments(parser)`` adds
its options, ``run(args, out_dir)`` writes its files and returns the table printed.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from seqlab.analysis import attention, complexity, contacts, curves, exposure, gradients, positional, regimes
from seqlab.cli.tables import table
from seqlab.data.structures import read_chain
from seqlab.errors import ConfigError
from seqlab.files import atomic_write, output_directory
from seqlab.models import load_pretrained
from seqlab.recipes import recipe_of_checkpoint, recipes_offering
from seqlab.recipes.system import AttentionSource, ContactSource, ExposureSource, SystemOptions
from seqlab.training.clipping import clip_grad_norm
from seqlab.validation import MAX_WIDTH, check_threads


class Analysis(NamedTuple):
    """One ``seqlab analyze`` sub-command: its name, help line, options and the function that runs it."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Path], str]


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``analyze`` (one sub-command per entry of ANALYSES) and ``plot`` to the ``seqlab`` command."""
    analyze = commands.add_parser("analyze", help="measure gradient flow, attention, positional codes, cost")
    analyses = analyze.add_subparsers(dest="analysis", required=True, parser_class=type(analyze))
    for analysis in ANALYSES:
        parser = analyses.add_parser(analysis.name, help=analysis.help)
        analysis.add_arguments(parser)
        _output_arguments(parser, analysis.name)
        parser.set_defaults(handler=_runner(analysis))
    plot = commands.add_parser("plot", help="draw a run's loss, metrics, gradient norm and learning rate")
    plot.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a training run directory (with metrics.jsonl)")
    _output_arguments(plot, "plot")
    plot.set_defaults(handler=_runner(Analysis("plot", "", _no_arguments, _plot)))


def _output_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--out", type=Path, help=f"output directory (default: the first free analysis/{name}[-N])")
    parser.add_argument(
        "--overwrite", action="store_true", help=f"replace --out if it holds an earlier output of {name}"
    )


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """``plot`` has only its positional RUN_DIR and the output options."""


def _runner(analysis: Analysis) -> Callable[[argparse.Namespace], int]:
    kind = "plot" if analysis.name == "plot" else f"analyze {analysis.name}"

    def handler(args: argparse.Namespace) -> int:
        target = args.out if args.out is not None else free_directory(Path("analysis") / analysis.name)
        with output_directory(target, kind=kind, overwrite=args.overwrite, inputs=input_paths(args)) as out_dir:
            printed = analysis.run(args, out_dir)
        print(printed)
        print(f"\nwritten to {target}")
        return 0

    return handler


def free_directory(base: Path) -> Path:
    """``base``, or the first of ``base-2``, ``base-3``, ... that does not exist."""
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def input_paths(args: argparse.Namespace) -> list[Path]:
    """The files and directories a command reads (its checkpoint, run, data and input), which ``--out`` must not
    hold."""
    values = [getattr(args, name, None) for name in INPUT_ARGUMENTS]
    return [Path(v) for value in values if value is not None for v in (value if isinstance(value, list) else [value])]


# The Namespace names of inputs.
INPUT_ARGUMENTS = ("checkpoint", "run_dir", "data", "runs", "ensemble", "rescore", "structures")


def write_csv(path: Path, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Write ``headers`` and ``rows`` as a CSV file, atomically (``seqlab.files``)."""
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(headers)
    writer.writerows(rows)
    atomic_write(path, text.getvalue())


def _int_list(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _positive(flag: str, value: int | None, maximum: int | None = None) -> None:
    if value is not None and (value < 1 or (maximum is not None and value > maximum)):
        raise ConfigError(f"{flag} ({value}) must be >= 1" + ("" if maximum is None else f" and <= {maximum}"))


# gradients ---------------------------------------------------------------------------------------------------------


def _gradient_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "checkpoint",
        type=Path,
        nargs="?",
        help="analyse the first recurrent layer (forward direction) of this checkpoint, inputs N(0, --input-std^2)",
    )
    parser.add_argument(
        "--arch",
        help="fresh cells to compare, from rnn,gru,lstm,gru_textbook, without a checkpoint (default: the first three)",
    )
    parser.add_argument("--length", type=int, default=100, help="T, steps of the input (default: 100)")
    parser.add_argument("--hidden-size", type=int, help="H = E of fresh cells, without a checkpoint (default: 64)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fresh weights and the input (default: 0)")
    parser.add_argument("--input-std", type=float, default=1.0, help="inputs ~ N(0, std^2) (default: 1)")
    parser.add_argument(
        "--recurrent-scale",
        type=_float_list,
        metavar="S[,S...]",
        help="scale every gate block of W_hh to S (per --scale-by) and draw the regimes: one column per S, with "
        "the bounds, the LSTM's direct path and, for the largest S > 1, training with and without clipping",
    )
    parser.add_argument(
        "--scale-by",
        choices=regimes.SCALE_MEASURES,
        help="what --recurrent-scale sets: sigma_max (spectral_norm, default) or |lambda_max| (spectral_radius)",
    )
    parser.add_argument("--clip-norm", type=float, help="--recurrent-scale: the clipped run's tau (default 1)")


def _float_list(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _gradients(args: argparse.Namespace, out_dir: Path) -> str:
    _positive("--length", args.length, MAX_WIDTH)  # T, bounded as a model's context_length is
    _positive("--hidden-size", args.hidden_size, MAX_WIDTH)
    if args.checkpoint is not None:
        if args.arch is not None or args.hidden_size is not None:
            raise ConfigError("--arch and --hidden-size describe fresh cells; a checkpoint brings its own layer")
        cell = gradients.recurrent_cell(load_pretrained(args.checkpoint))
        cells = {gradients.architecture_of(cell): cell}
    else:
        arch_list = args.arch or ",".join(gradients.DEFAULT_ARCHITECTURES)
        archs = [a.strip() for a in arch_list.split(",") if a.strip()]
        if not archs or any(a not in gradients.ARCHITECTURES for a in archs):
            raise ConfigError(f"--arch {arch_list!r}: choose from {', '.join(gradients.ARCHITECTURES)}")
        size = args.hidden_size or 64
        cells = {a: gradients.make_cell(a, size, size, seed=args.seed) for a in archs}
    if not (math.isfinite(args.input_std) and args.input_std > 0):
        raise ConfigError(f"--input-std ({args.input_std}) must be a finite number > 0")
    x = args.input_std * gradients.random_input(args.length, next(iter(cells.values())).input_size, seed=args.seed)
    if args.recurrent_scale is not None:
        return _regimes(args, cells, x, out_dir)
    if args.scale_by is not None or args.clip_norm is not None:
        raise ConfigError("--scale-by and --clip-norm apply to --recurrent-scale runs")
    flows = {arch: gradients.gradient_flow(cell, x) for arch, cell in cells.items()}
    gradients.plot_gradient_flow(flows, out_dir / "gradient_flow.png")
    columns = ("jacobian_norm", "cell_jacobian_norm", "gate_product", "bound", "path_bound")
    rows = []
    for arch, flow in flows.items():
        for d in range(args.length + 1):
            values = [getattr(flow, c) for c in columns]
            rows.append([arch, d, *("" if v is None else f"{float(v[d]):.6e}" for v in values)])
    write_csv(out_dir / "gradient_flow.csv", ["arch", "distance", *columns], rows)
    summary = []
    for arch, flow in flows.items():
        gamma = "" if flow.gamma is None else f"{flow.gamma:.4f}"
        end = f"{float(flow.jacobian_norm[-1]):.3e}"
        summary.append([arch, f"{gradients.decay_rate(flow):.4f}", end, gamma])
    headers = ["arch", "decay per step (fit)", f"||dh_T/dh_0|| (T={args.length})", "gamma = sigma_max(W_hh)"]
    atomic_write(out_dir / "summary.json", json.dumps([dict(zip(headers, r, strict=True)) for r in summary], indent=2))
    return table(headers, summary)


def _regimes(args: argparse.Namespace, cells: dict[str, torch.nn.Module], x: torch.Tensor, out_dir: Path) -> str:
    """``--recurrent-scale``: the regimes picture and numbers, and the clipping picture for the largest S > 1."""
    if not args.recurrent_scale:
        raise ConfigError("--recurrent-scale: give at least one scale")
    for scale in args.recurrent_scale:
        regimes.check_scale("--recurrent-scale", scale)
    measure = args.scale_by or "spectral_norm"
    clip_norm = 1.0 if args.clip_norm is None else args.clip_norm
    if not (math.isfinite(clip_norm) and clip_norm > 0):
        raise ConfigError(f"--clip-norm ({clip_norm}) must be a finite number > 0")
    scales = list(dict.fromkeys(args.recurrent_scale))
    scaled = {
        (arch, s): regimes.scale_recurrent(cell, s, measure=measure) for arch, cell in cells.items() for s in scales
    }
    flows = {key: gradients.gradient_flow(cell, x) for key, cell in scaled.items()}
    rates = {key: regimes.eigen_rate(cell, args.length) for key, cell in scaled.items() if key[0] == "rnn"}
    paths = {  # the direct path of an LSTM without projection (c_t and h_t of one size)
        key: regimes.lstm_direct_path(cell, x)
        for key, cell in scaled.items()
        if key[0] == "lstm" and cell.output_size == cell.hidden_size
    }
    regimes.plot_regimes(flows, rates, paths, out_dir / "gradient_regimes.png", measure=measure)
    columns = ["jacobian_norm", "bound", "eigen_rate", "memory_jacobian_norm", "direct_path", "gate_product"]
    rows, summary = [], []
    for key, flow in flows.items():
        series = [flow.jacobian_norm, flow.bound, getattr(rates.get(key), "rate", None)]
        series += [getattr(paths.get(key), "full", None), getattr(paths.get(key), "direct", None), flow.gate_product]
        for d in range(args.length + 1):
            rows.append([*key, d, *("" if v is None else f"{float(v[d]):.6e}" for v in series)])
        rate = gradients.decay_rate(flow)
        regime = "vanishing" if rate < 1 - EDGE else "exploding" if rate > 1 + EDGE else "edge"
        summary.append([key[0], f"{key[1]:g}", f"{rate:.4f}", f"{float(flow.jacobian_norm[-1]):.3e}", regime])
    write_csv(out_dir / "gradient_regimes.csv", ["arch", "scale", "distance", *columns], rows)
    headers = ["arch", measure, "decay per step (fit)", f"||dh_T/dh_0|| (T={args.length})", "regime"]
    exploding = [s for s in scales if s > 1]
    if exploding:
        arch = "rnn" if "rnn" in cells else next(iter(cells))
        runs = regimes.clipping_runs(
            scaled[arch, max(exploding)],
            clip_grad_norm,
            clip_norm=clip_norm,
            length=args.length,
            input_std=args.input_std,
            steps=CLIPPING_STEPS,
            lr=CLIPPING_LR,
            seed=args.seed,
        )
        title = f"{arch.upper()}, {measure} {max(exploding):g}"
        regimes.plot_clipping(runs, out_dir / "clipping.png", title=title, clip_norm=clip_norm)
        write_csv(
            out_dir / "clipping.csv",
            ["step", *(f"{name}_{field}" for name in runs for field in ("loss", "grad_norm"))],
            [
                [step + 1, *(f"{float(getattr(run, f)[step]):.6e}" for run in runs.values() for f in run._fields)]
                for step in range(CLIPPING_STEPS)
            ],
        )
    records = [dict(zip(headers, r, strict=True)) for r in summary]
    atomic_write(out_dir / "summary.json", json.dumps(records, indent=2))
    return table(headers, summary)


EDGE = 0.005  # a fitted per-step factor within 1 +- EDGE is called the edge (1.005^100 = 1.6)
CLIPPING_STEPS, CLIPPING_LR = 40, 0.1  # SGD steps and learning rate of the clipping picture's two runs


# positional --------------------------------------------------------------------------------------------------------


def _positional_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--d-model", type=int, default=128, help="D, even (default: 128)")
    parser.add_argument("--max-len", type=int, default=256, help="positions L (default: 256)")


def _positional(args: argparse.Namespace, out_dir: Path) -> str:
    _positive("--max-len", args.max_len)
    if args.d_model < 2 or args.d_model % 2:
        raise ConfigError(f"--d-model ({args.d_model}) must be even and >= 2")
    result = positional.positional_analysis(args.d_model, args.max_len)
    positional.plot_positional(result, out_dir / "positional.png")
    rows = [
        [k, f"{float(result.dot[k]):.6f}", f"{float(result.dot_spread[k]):.3e}", f"{float(result.shift_error[k]):.3e}"]
        for k in range(args.max_len)
    ]
    write_csv(out_dir / "positional.csv", ["distance", "mean_dot", "dot_spread", "shift_error"], rows)
    max_spread = float(result.dot_spread.max())
    summary = [
        ["max |PE(p+k) - M_k PE(p)| over p, k", f"{result.max_shift_error:.3e}"],
        ["max spread of PE(p).PE(p+k) over p", f"{max_spread:.3e}"],
        ["PE(p).PE(p) = D/2", f"{float(result.dot[0]):.3f}"],
    ]
    atomic_write(
        out_dir / "summary.json",
        json.dumps({"max_shift_error": result.max_shift_error, "max_dot_spread": max_spread}, indent=2),
    )
    return table(["check", "value"], summary)


# attention ---------------------------------------------------------------------------------------------------------


# The built-in recipes whose runs each analysis takes, for its --help: a copy, as asking the Systems
# (``recipes_offering``) imports every recipe, seconds of start-up for every ``seqlab`` command; a test holds it equal.
HELP_OFFERING = {AttentionSource: "g2p, lm, protein, translate", ContactSource: "protein", ExposureSource: "g2p"}


def _attention_arguments(parser: argparse.ArgumentParser) -> None:
    offering = HELP_OFFERING[AttentionSource]
    parser.add_argument("checkpoint", type=Path, help=f"a run whose model attends (a run of {offering})")
    parser.add_argument("--input", required=True, help="one input, as the run's predict reads it (a word, a text)")


def _offering(checkpoint: Path, protocol: type, what: str) -> Any:
    """The System of ``checkpoint`` if its recipe's System offers ``protocol``.

    Raises: ConfigError naming the run's recipe and the recipes whose runs offer it.
    """
    recipe = recipe_of_checkpoint(checkpoint)
    if not issubclass(recipe.System, protocol):
        offering = ", ".join(recipes_offering(protocol))
        raise ConfigError(f"{checkpoint}: a {recipe.NAME} run; {what} needs a run of {offering}")
    return recipe.System.load(checkpoint, SystemOptions())


def _attention(args: argparse.Namespace, out_dir: Path) -> str:
    system: AttentionSource = _offering(args.checkpoint, AttentionSource, "drawing attention maps")
    labelled = system.attention_maps(args.input)
    groups: dict[tuple[str, str], list[attention.AttentionMap]] = {}
    for m in labelled.maps:
        groups.setdefault((m.module.split(".")[0], m.kind), []).append(m)
    rows = []
    for (stack, kind), members in groups.items():
        queries, keys = labelled.labels[stack, kind]
        path = out_dir / f"attention_{stack}_{kind}.png"
        title = f"{stack} {kind}-attention: {labelled.caption}"
        attention.plot_attention(members, path, rows=queries, columns=keys, title=title)
        heads = max(m.head for m in members) + 1
        shape = "x".join(map(str, members[0].weights.shape))
        error = f"{attention.row_sums_error(members):.1e}"
        rows.append([f"{stack} {kind}", len(members) // heads, heads, shape, error, path.name])
    record = {
        "input": args.input,
        "output": labelled.output,
        "maps": [{**m._asdict(), "weights": m.weights.tolist()} for m in labelled.maps],
    }
    atomic_write(out_dir / "attention.json", json.dumps(record))
    return table(["attention", "modules", "heads", "rows x cols", "max |row sum - 1|", "picture"], rows)


# complexity --------------------------------------------------------------------------------------------------------


def _complexity_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lengths",
        type=_int_list,
        default=[64 * 2**i for i in range(8)],
        help="comma-separated T (default: 64,128,...,8192)",
    )
    parser.add_argument("--width", type=int, default=64, help="D, features of every layer (default: 64)")
    parser.add_argument("--mode", choices=("train", "inference", "both"), default="both", help="(default: both)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per size; the fastest counts (default: 3)")
    parser.add_argument(
        "--layers",
        default=",".join(complexity.LAYERS),
        help=f"comma-separated subset of {','.join(complexity.LAYERS)} (default: all)",
    )
    parser.add_argument("--num-heads", type=int, default=4, help="attention heads (default: 4)")
    parser.add_argument("--window", type=int, default=32, help="keys per query of local attention (default: 32)")
    parser.add_argument("--max-seconds", type=float, default=2.0, help="cap on one call, CPU seconds (default: 2)")
    parser.add_argument("--max-memory-mb", type=float, default=1024.0, help="peak memory cap, MiB (default: 1024)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads while measuring (default: 1)")


def _complexity(args: argparse.Namespace, out_dir: Path) -> str:
    for flag in ("width", "repeats", "window", "num_heads"):
        _positive(f"--{flag.replace('_', '-')}", getattr(args, flag))
    check_threads("--threads", args.threads)
    for flag in ("max_seconds", "max_memory_mb"):
        if not getattr(args, flag) > 0:
            raise ConfigError(f"--{flag.replace('_', '-')} ({getattr(args, flag)}) must be > 0")
    if not args.lengths:
        raise ConfigError("--lengths: give at least one T")
    for length in args.lengths:
        if length < 1:
            raise ConfigError(f"--lengths: T ({length}) must be >= 1")
    if args.width % args.num_heads:
        raise ConfigError(f"--width ({args.width}) must be divisible by --num-heads ({args.num_heads})")
    layers = [name.strip() for name in args.layers.split(",") if name.strip()]
    unknown = [name for name in layers if name not in complexity.LAYERS]
    if unknown or not layers:
        raise ConfigError(f"--layers {args.layers!r}: choose from {', '.join(complexity.LAYERS)}")
    if args.device not in ("cpu", "cuda"):
        raise ConfigError(f"--device ({args.device!r}) must be cpu or cuda")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device here")
    modes = list(complexity.MODES) if args.mode == "both" else [args.mode]
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        measurements = complexity.measure_costs(
            layers,
            args.lengths,
            modes,
            width=args.width,
            num_heads=args.num_heads,
            window=args.window,
            repeats=args.repeats,
            max_seconds=args.max_seconds,
            max_bytes=int(args.max_memory_mb * 2**20),
            device=args.device,
        )
    finally:
        torch.set_num_threads(threads)
    title = f"one layer, D = {args.width}, batch 1, {args.device}, {args.threads} CPU thread(s)"
    complexity.plot_costs(measurements, out_dir / "complexity.png", title=title)
    write_csv(
        out_dir / "complexity.csv",
        ["layer", "mode", "T", "seconds", "peak_bytes", "skipped"],
        [["" if v is None else v for v in m] for m in measurements],
    )
    headers = complexity.cost_table_headers(modes)
    rows = complexity.cost_table(measurements)
    atomic_write(
        out_dir / "cost_table.json",
        json.dumps({"setup": title, "rows": [dict(zip(headers, r, strict=True)) for r in rows]}, indent=2),
    )
    first_skips: dict[tuple[str, str], str] = {}
    for m in measurements:
        if m.skipped:
            first_skips.setdefault((m.layer, m.mode), f"{m.layer} {m.mode}: T >= {m.length} {m.skipped}")
    return table(headers, rows) + "".join(f"\n{line}" for line in first_skips.values())


# plot --------------------------------------------------------------------------------------------------------------


def _plot(args: argparse.Namespace, out_dir: Path) -> str:
    run = curves.read_metrics(args.run_dir)
    curves.plot_training_curves(run, out_dir / "training_curves.png", title=str(args.run_dir))
    last_step, last_loss, last_lr, _ = run.steps[-1]
    rows = [["steps", last_step], ["last loss", f"{last_loss:.4f}"], ["last lr", f"{last_lr:.3g}"]]
    rows += [[f"last {k}", f"{v:.4f}"] for k, v in (run.validations[-1][1] if run.validations else {}).items()]
    return table(["quantity", "value"], rows)


# exposure ----------------------------------------------------------------------------------------------------------


def _exposure_arguments(parser: argparse.ArgumentParser) -> None:
    offering = HELP_OFFERING[ExposureSource]
    parser.add_argument("checkpoint", type=Path, help=f"a seq2seq run trained with teacher forcing (of {offering})")
    parser.add_argument("--data", help="a data file in the run's format (default: the run's own test split)")


def _exposure(args: argparse.Namespace, out_dir: Path) -> str:
    system: ExposureSource = _offering(args.checkpoint, ExposureSource, "measuring exposure bias")
    result, source = system.exposure_bias(args.data)
    exposure.plot_exposure(result, out_dir / "exposure.png", title=f"{args.checkpoint} on {source}")
    numbers = {**result._asdict(), "loss_gap": result.loss_gap, "checkpoint": str(args.checkpoint), "data": source}
    atomic_write(out_dir / "exposure.json", json.dumps(numbers, indent=2) + "\n")
    rows = [
        ["loss (nats/token)", f"{result.teacher_forced_loss:.4f}", f"{result.free_running_loss:.4f}"],
        ["token accuracy (%)", f"{result.teacher_forced_accuracy:.2f}", f"{result.free_running_accuracy:.2f}"],
    ]
    return table(["", "teacher-forced", "free-running"], rows) + f"\ngap: {result.loss_gap:.4f} nats/token"


# contacts ----------------------------------------------------------------------------------------------------------


def _contacts_arguments(parser: argparse.ArgumentParser) -> None:
    offering = HELP_OFFERING[ContactSource]
    parser.add_argument("checkpoint", type=Path, help=f"a masked protein model (a run of {offering})")
    parser.add_argument(
        "--structures", type=Path, nargs="+", required=True, metavar="FILE",
        help="PDB or mmCIF files (gzipped or not); the first protein chain of each is read",
    )  # fmt: skip
    parser.add_argument(
        "--fit-heads", action="store_true",
        help="fit a logistic regression over the heads on the first half of the chains; score on the second half",
    )  # fmt: skip


def _contacts(args: argparse.Namespace, out_dir: Path) -> str:
    """Precision at L/5 of the attention's contacts against each chain's true contacts, the first max_residues()
    residues of a longer chain (the model's context); chains with no pair |i - j| >= 6 are listed as skipped. With
    --fit-heads, a logistic regression over the heads is fitted on the first half of the chains and every predictor
    is scored on the second half."""
    system: ContactSource = _offering(args.checkpoint, ContactSource, "predicting contacts")
    chains = [(path, read_chain(path)) for path in args.structures]  # every file read before the model runs
    limit, measured, skipped = system.max_residues(), [], []
    for path, chain in chains:
        sequence, coordinates = chain.sequence[:limit], chain.coordinates[:limit]
        if len(sequence) <= contacts.MIN_SEPARATION:
            skipped.append(f"{path} ({len(sequence)} residues)")
        else:
            features = contacts.head_features(system.residue_attention(sequence))
            measured.append((path, chain, len(sequence), features, contacts.true_contacts(coordinates)))
    if len(measured) < (2 if args.fit_heads else 1):
        needed = "two chains" if args.fit_heads else "a chain"
        raise ConfigError(f"--structures: {needed} with a residue pair |i - j| >= {contacts.MIN_SEPARATION} needed")
    tested, weights = measured, None
    if args.fit_heads:
        fitted, tested = measured[: len(measured) // 2], measured[len(measured) // 2 :]
        x = torch.cat([contacts.pair_features(features) for *_, features, _ in fitted])
        y = torch.cat([truth[contacts.scored_pairs(truth.shape[0])] for *_, truth in fitted])
        weights = contacts.fit_head_weights(x, y)
    rows = []
    for path, chain, length, features, truth in tested:
        scores = features.mean(dim=0)
        row = {
            "file": str(path), "chain": chain.name, "residues": len(chain.sequence), "residues_used": length,
            "precision_at_l5": contacts.precision_at_l(scores, truth),
            "separation_precision_at_l5": contacts.precision_at_l(contacts.separation_scores(length), truth),
            "contact_density": contacts.contact_density(truth),
        }  # fmt: skip
        if weights is not None:
            row["fitted_precision_at_l5"] = contacts.precision_at_l(torch.einsum("h,hij->ij", weights, features), truth)
        rows.append(row)
    path, chain, length, features, truth = tested[0]
    figure = f"{path.name} chain {chain.name}, residues 1-{length}"
    contacts.plot_contacts(features.mean(dim=0), truth, out_dir / "contacts.png", title=figure)
    keys = [key for key in rows[0] if key.endswith(("l5", "density"))]
    means = {key: sum(row[key] for row in rows) / len(rows) for key in keys}
    write_csv(out_dir / "contacts.csv", list(rows[0]), [list(row.values()) for row in rows])
    record = {
        "checkpoint": str(args.checkpoint), "max_residues": limit, "chains": rows, "skipped": skipped, "mean": means,
        "figure": figure, "fitted_on": [str(p) for p, *_ in measured[: len(measured) - len(tested)]],
        "head_weights": None if weights is None else weights.tolist(),
    }  # fmt: skip
    atomic_write(out_dir / "contacts.json", json.dumps(record, indent=2) + "\n")
    names = {
        "precision_at_l5": "attention (APC, mean of heads and layers)",
        "fitted_precision_at_l5": "attention (APC, logistic regression over heads)",
        "separation_precision_at_l5": "sequence separation (nearest pairs)",
        "contact_density": "random pairs (contact density)",
    }
    summary = [[names[key], f"{means[key]:.3f}"] for key in names if key in means]
    cropped = sum(row["residues_used"] < row["residues"] for row in rows)
    notes = f"{len(rows)} chains scored ({cropped} cropped to their first {limit} residues)"
    if weights is not None:
        notes += f"; the regression fitted on the {len(measured) - len(tested)} chains before them"
    if skipped:
        notes += f"; skipped, too short: {', '.join(skipped)}"
    return table(["predictor", "mean precision at L/5"], summary) + f"\n{notes}"


ANALYSES = (
    Analysis("gradients", "||dh_T/dh_k|| against T - k for RNN, GRU, LSTM", _gradient_arguments, _gradients),
    Analysis("attention", "attention maps of a checkpoint on one input", _attention_arguments, _attention),
    Analysis("complexity", "time and memory of one layer against T", _complexity_arguments, _complexity),
    Analysis("positional", "the sinusoidal encoding and its shift check", _positional_arguments, _positional),
    Analysis("exposure", "teacher-forced against free-running loss of a seq2seq run", _exposure_arguments, _exposure),
    Analysis("contacts", "a protein model's attention as residue contacts", _contacts_arguments, _contacts),
)
