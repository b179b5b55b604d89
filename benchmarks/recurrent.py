"""Forward+backward throughput of seqlab's recurrent layers against torch.nn, measured in the same run.

For each shape and each of LSTM, GRU and RNN (tanh) it times torch.nn, seqlab's fused path and seqlab's
reference path (hoisted input projection + Python time loop), plus the layer-norm LSTM (reference only,
compared with torch.nn.LSTM), the LSTM with a projection to P = max(1, H/4) features
(torch.nn.LSTM(proj_size=P), both seqlab paths) and the textbook GRU (reference only, compared with
torch.nn.GRU). Each runs in three cases:
    dense   every sequence has all T steps;
    padded  lengths drawn uniformly from [ceil(T/2), T]: seqlab gets ``lengths=``, torch.nn gets
            ``pack_padded_sequence(..., enforce_sorted=False)`` and ``pad_packed_sequence`` back (both inside
            the timed call, as a user of torch.nn writes it);
    bidir   bidirectional=True, dense.
One iteration is forward, ``outputs.sum().backward()`` and clearing the gradients.

Timing: every round runs each row once, in a fresh random order per round (seeded by --seed), so neither
a row's place in the round nor load from other processes favours a path. The table shows, over --repeats
rounds after --warmup, the median tokens/s (B*T per iteration, padding included) with its interquartile
range, and the ratio to the torch.nn row of the same model and case: the median of the per-round ratios of
times (torch.nn seconds / row seconds in the same round) with their interquartile range. A ratio whose
range straddles 1.00 does not separate the two rows.

    python benchmarks/recurrent.py                                          # default shapes, 15 rounds
    python benchmarks/recurrent.py --shapes 32,128,128,512,2 64,32,128,128,1
    python benchmarks/recurrent.py --batch 16 --steps 64 --hidden-size 256 --cases dense,padded
    python benchmarks/recurrent.py --shapes 2,3,2,4,1 --repeats 1 --warmup 0   # smoke test, seconds
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Callable
from typing import NamedTuple

import torch
from timing import median_and_iqr
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from seqlab.nn.recurrent import GRU, LSTM, RNN

CASES = ("dense", "padded", "bidir")


class Shape(NamedTuple):
    B: int
    T: int
    E: int
    H: int
    L: int


class Row(NamedTuple):
    model: str
    case: str
    path: str
    module: nn.Module
    run: Callable[[Tensor, Tensor | None], Tensor]  # (x, lengths or None) -> outputs


DEFAULT_SHAPES = (Shape(B=32, T=128, E=128, H=512, L=2), Shape(B=64, T=32, E=128, H=128, L=1))


def run_torch(module: nn.RNNBase, x: Tensor, lengths: Tensor | None) -> Tensor:
    if lengths is None:
        return module(x)[0]
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    return pad_packed_sequence(module(packed)[0], batch_first=True, total_length=x.shape[1])[0]


def run_seqlab(module: nn.Module, x: Tensor, lengths: Tensor | None) -> Tensor:
    return module(x, lengths).outputs


def rows_for(shape: Shape, cases: list[str], device: torch.device) -> list[Row]:
    """Rows to time; each (model, case) group has its torch.nn baseline, the seqlab fused and reference
    paths, and the reference-only variants that torch.nn lacks (compared with the same baseline)."""
    proj = {"proj_size": max(1, shape.H // 4)}
    families = (
        ("LSTM", nn.LSTM, LSTM, {}, {"layernorm reference": {"layer_norm": True}}),
        ("LSTM proj", nn.LSTM, LSTM, proj, {}),
        ("GRU", nn.GRU, GRU, {}, {"textbook reference": {"variant": "textbook"}}),
        ("RNN", nn.RNN, RNN, {}, {}),
    )
    rows = []
    for case in cases:
        options = {"num_layers": shape.L, "batch_first": True, "device": device, "bidirectional": case == "bidir"}
        for name, torch_cls, seqlab_cls, extra, variants in families:
            baseline = torch_cls(shape.E, shape.H, **options, **extra)
            rows.append(Row(name, case, "torch.nn", baseline, lambda x, n, m=baseline: run_torch(m, x, n)))
            seqlab_options = {
                "seqlab fused": {"use_fused": True, **extra},
                "seqlab reference": {"use_fused": False, **extra},
                **variants,
            }
            for path, option in seqlab_options.items():
                layer = seqlab_cls(shape.E, shape.H, **options, **option)
                rows.append(Row(name, case, path, layer, lambda x, n, m=layer: run_seqlab(m, x, n)))
    return rows


def time_rounds(
    rows: list[Row], x: Tensor, lengths: Tensor, *, warmup: int, repeats: int, seed: int
) -> list[list[float]]:
    """Seconds of forward + backward + zero_grad, per row (outer) and round (inner); every round runs all
    rows once in a fresh random order."""
    order = list(range(len(rows)))
    shuffle = random.Random(seed).shuffle
    seconds: list[list[float]] = [[] for _ in rows]
    for i in range(warmup + repeats):
        shuffle(order)
        for r in order:
            row = rows[r]
            row_lengths = lengths if row.case == "padded" else None
            start = time.perf_counter()
            row.run(x, row_lengths).sum().backward()
            row.module.zero_grad(set_to_none=True)
            if x.is_cuda:
                torch.cuda.synchronize()
            if i >= warmup:
                seconds[r].append(time.perf_counter() - start)
    return seconds


def parse_shape(text: str) -> Shape:
    try:
        values = [int(v) for v in text.split(",")]
        shape = Shape(*values)
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"expected B,T,E,H,L (five integers), got {text!r}") from None
    if min(shape) < 1:
        raise argparse.ArgumentTypeError(f"every size must be >= 1, got {text!r}")
    return shape


def parse_cases(text: str) -> list[str]:
    cases = text.split(",")
    unknown = [case for case in cases if case not in CASES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown case(s) {unknown}; choose from {list(CASES)}")
    return cases


def shapes_from(args: argparse.Namespace) -> list[Shape]:
    """--shapes as given, else the default shapes with any single-size flag applied to each."""
    if args.shapes:
        return args.shapes
    flags = {"B": args.batch, "T": args.steps, "E": args.input_size, "H": args.hidden_size, "L": args.layers}
    overrides = {name: value for name, value in flags.items() if value is not None}
    shapes = [shape._replace(**overrides) for shape in DEFAULT_SHAPES]
    return list(dict.fromkeys(shapes))  # the flags may make the defaults equal


def print_table(shape: Shape, rows: list[Row], seconds: list[list[float]]) -> None:
    label = ",".join(str(v) for v in shape)
    baseline: dict[tuple[str, str], list[float]] = {
        (row.model, row.case): row_seconds
        for row, row_seconds in zip(rows, seconds, strict=True)
        if row.path == "torch.nn"
    }
    for row, row_seconds in zip(rows, seconds, strict=True):
        tokens = shape.B * shape.T
        tps, tps_q1, tps_q3 = median_and_iqr([tokens / s for s in row_seconds])
        ratios = [b / s for b, s in zip(baseline[row.model, row.case], row_seconds, strict=True)]
        ratio, ratio_q1, ratio_q3 = median_and_iqr(ratios)
        print(
            f"{label:<18} {row.model:<10} {row.case:<7} {row.path:<20} {tps:>11,.0f} "
            f"{f'{tps_q1:,.0f}-{tps_q3:,.0f}':>21} {ratio:>7.2f}x {f'{ratio_q1:.2f}-{ratio_q3:.2f}':>11}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", type=parse_shape, nargs="+", help="B,T,E,H,L per shape (overrides the size flags)")
    parser.add_argument("--batch", type=int, help="B of every default shape")
    parser.add_argument("--steps", type=int, help="T of every default shape")
    parser.add_argument("--input-size", type=int, help="E of every default shape")
    parser.add_argument("--hidden-size", type=int, help="H of every default shape")
    parser.add_argument("--layers", type=int, help="L of every default shape")
    parser.add_argument("--cases", type=parse_cases, default=list(CASES), help="comma-separated: dense,padded,bidir")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds (median and quartiles are shown)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds before timing")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0, help="weights, inputs, lengths and the order of rows")
    args = parser.parse_args()
    for name in ("batch", "steps", "input_size", "hidden_size", "layers", "repeats"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0, got {args.warmup}")

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, device {device}, float32, {torch.get_num_threads()} CPU threads")
    print(
        f"forward+backward, {args.repeats} rounds after {args.warmup} warmup, rows in a random order per round; "
        "median [interquartile range]\n"
    )
    header = (
        f"{'shape (B,T,E,H,L)':<18} {'model':<10} {'case':<7} {'path':<20} {'tokens/s':>11} "
        f"{'tokens/s IQR':>21} {'vs torch':>8} {'ratio IQR':>11}"
    )
    print(header)
    print("-" * len(header))
    for i, shape in enumerate(shapes_from(args)):
        g = torch.Generator().manual_seed(args.seed + i)
        x = torch.randn(shape.B, shape.T, shape.E, generator=g).to(device)
        lengths = torch.randint(math.ceil(shape.T / 2), shape.T + 1, (shape.B,), generator=g)  # stays on the CPU
        rows = rows_for(shape, args.cases, device)
        seconds = time_rounds(rows, x, lengths, warmup=args.warmup, repeats=args.repeats, seed=args.seed + i)
        print_table(shape, rows, seconds)


if __name__ == "__main__":
    main()
