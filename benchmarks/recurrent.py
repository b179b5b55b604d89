"""Forward+backward throughput of seqlab's recurrent layers against torch.nn, measured in the same run.

For each shape and each of LSTM, GRU and RNN (tanh) it times torch.nn, seqlab's fused path and seqlab's
reference path (hoisted input projection + Python time loop), plus the layer-norm LSTM (reference only,
compared with torch.nn.LSTM), the LSTM with a projection to P = H/4 features (torch.nn.LSTM(proj_size=P),
both seqlab paths) and the textbook GRU (reference only, compared with torch.nn.GRU). One iteration is
forward, ``outputs.sum().backward()`` and clearing the gradients. Rows take turns; the table shows the
median of ``--repeats`` iterations in tokens/s (B*T per iteration) and the ratio to the torch.nn row above.

    python benchmarks/recurrent.py --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor, nn

from seqlab.nn.recurrent import GRU, LSTM, RNN


class Shape(NamedTuple):
    B: int
    T: int
    E: int
    H: int
    L: int


class Row(NamedTuple):
    model: str
    path: str
    module: nn.Module
    run: Callable[[Tensor], Tensor]


SHAPES = (Shape(B=32, T=128, E=128, H=512, L=2), Shape(B=64, T=32, E=128, H=128, L=1))


def median_seconds(rows: list[Row], x: Tensor, *, warmup: int, repeats: int) -> list[float]:
    """Median seconds of forward + backward + zero_grad per row; rows take turns so that load from other
    processes spreads over all of them instead of biasing whichever ran at a busy moment."""
    seconds: list[list[float]] = [[] for _ in rows]
    for i in range(warmup + repeats):
        for row, row_seconds in zip(rows, seconds, strict=True):
            start = time.perf_counter()
            row.run(x).sum().backward()
            row.module.zero_grad(set_to_none=True)
            if x.is_cuda:
                torch.cuda.synchronize()
            if i >= warmup:
                row_seconds.append(time.perf_counter() - start)
    return [statistics.median(row_seconds) for row_seconds in seconds]


def rows_for(shape: Shape, device: torch.device) -> list[Row]:
    """Rows to time; the first row of each family is its torch.nn baseline."""
    options = {"num_layers": shape.L, "batch_first": True, "device": device}
    proj = {"proj_size": shape.H // 4}
    rows = []
    families = (
        ("LSTM", nn.LSTM, LSTM, {}),
        ("LSTM proj", nn.LSTM, LSTM, proj),
        ("GRU", nn.GRU, GRU, {}),
        ("RNN", nn.RNN, RNN, {}),
    )
    for name, torch_cls, seqlab_cls, extra in families:
        baseline = torch_cls(shape.E, shape.H, **options, **extra)
        rows.append(Row(name, "torch.nn", baseline, lambda x, m=baseline: m(x)[0]))
        for path, use_fused in (("seqlab fused", True), ("seqlab reference", False)):
            layer = seqlab_cls(shape.E, shape.H, use_fused=use_fused, **options, **extra)
            rows.append(Row(name, path, layer, lambda x, m=layer: m(x).outputs))
        if name == "LSTM":
            layer_norm = LSTM(shape.E, shape.H, layer_norm=True, **options)
            rows.append(Row("LSTM layernorm", "seqlab reference", layer_norm, lambda x, m=layer_norm: m(x).outputs))
        if name == "GRU":
            textbook = GRU(shape.E, shape.H, variant="textbook", **options)
            rows.append(Row("GRU textbook", "seqlab reference", textbook, lambda x, m=textbook: m(x).outputs))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="timed iterations per row (median is shown)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed iterations before timing")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, device {device}, float32, {torch.get_num_threads()} CPU threads")
    print(f"forward+backward, median of {args.repeats} interleaved rounds after {args.warmup} warmup\n")
    header = f"{'shape (B,T,E,H,L)':<22} {'model':<15} {'path':<17} {'tokens/s':>12} {'vs torch.nn':>12}"
    print(header)
    print("-" * len(header))
    for shape in SHAPES:
        x = torch.randn(shape.B, shape.T, shape.E, device=device)
        rows = rows_for(shape, device)
        seconds = median_seconds(rows, x, warmup=args.warmup, repeats=args.repeats)
        label = ",".join(str(v) for v in shape)
        baseline_tps = 0.0
        for row, row_seconds in zip(rows, seconds, strict=True):
            tps = shape.B * shape.T / row_seconds
            if row.path == "torch.nn":
                baseline_tps = tps
            print(f"{label:<22} {row.model:<15} {row.path:<17} {tps:>12,.0f} {tps / baseline_tps:>11.2f}x")


if __name__ == "__main__":
    main()
