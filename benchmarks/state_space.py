"""The two forms of the S4D block (``seqlab.nn.state_space``) against each other, measured in the same run.

Table 1, training: one forward + ``outputs.sum().backward()`` of an ``S4DBlock`` on (B, T, D) inputs, in the
parallel form (the kernel K = (C B_bar, C A_bar B_bar, ...) and an FFT convolution) and in the recurrent scan (one
``step`` per position), for each T. Table 2, generation: ``--new-tokens`` positions appended one at a time to a
prompt of T0 positions through a stack of ``--layers`` blocks, by the recurrent step with the states as the cache
against recomputing the parallel form over the whole prefix at every new position (what a model without a cache
does), and whether both give the same outputs.

Timing: every round runs each row once in a fresh random order (seeded by --seed); the table shows the median time
over --repeats rounds after --warmup and the ratio to the reference row of the same T (the median of the per-round
ratios, with their interquartile range).

    python benchmarks/state_space.py                                    # default sizes
    python benchmarks/state_space.py --lengths 4,8 --prompt 4 --new-tokens 2 --repeats 1 --warmup 0   # smoke test
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import torch

from seqlab.nn.state_space import S4DBlock, s4d_stack


def _timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _rounds(rows: dict[str, Callable[[], object]], repeats: int, warmup: int, seed: int) -> dict[str, list[float]]:
    """Seconds of each row per round, the rows of a round in a random order."""
    order, times = list(rows), {name: [] for name in rows}
    rng = random.Random(seed)
    for round_index in range(warmup + repeats):
        rng.shuffle(order)
        for name in order:
            seconds = _timed(rows[name])
            if round_index >= warmup:
                times[name].append(seconds)
    return times


def _ratio(reference: list[float], row: list[float]) -> str:
    """Median and interquartile range of the per-round ratios row / reference (how many times slower)."""
    ratios = sorted(r / s for r, s in zip(row, reference, strict=True))
    if len(ratios) < 4:
        return f"{statistics.median(ratios):7.2f}x"
    q = statistics.quantiles(ratios, n=4)
    return f"{statistics.median(ratios):7.2f}x ({q[0]:.2f}-{q[2]:.2f})"


def training_table(args: argparse.Namespace) -> list[str]:
    torch.manual_seed(args.seed)
    block = S4DBlock(args.d_model, args.state_size)
    lines = [f"{'T':>6}  {'form':<22}{'ms / step':>11}  vs parallel (IQR)"]
    for T in args.lengths:
        x = torch.randn(args.batch, T, args.d_model)

        def parallel(x: torch.Tensor = x) -> None:
            block(x).outputs.sum().backward()

        def scan(x: torch.Tensor = x) -> None:
            block.scan(x).outputs.sum().backward()

        times = _rounds({"parallel (FFT conv)": parallel, "recurrent scan": scan}, args.repeats, args.warmup, args.seed)
        for name, seconds in times.items():
            ratio = _ratio(times["parallel (FFT conv)"], seconds)
            lines.append(f"{T:>6}  {name:<22}{statistics.median(seconds) * 1e3:>11.2f}  {ratio}")
    return lines


def generation_table(args: argparse.Namespace) -> list[str]:
    torch.manual_seed(args.seed)
    stack = s4d_stack(args.d_model, args.layers, state_size=args.state_size).eval()
    total = args.prompt + args.new_tokens
    h = torch.randn(1, total, args.d_model)
    results: dict[str, torch.Tensor] = {}

    @torch.inference_mode()
    def cached() -> None:
        state = stack(h[:, : args.prompt]).state
        steps = []
        for t in range(args.prompt, total):
            y_t, state = stack.step(h[:, t], state)
            steps.append(y_t)
        results["cached"] = torch.stack(steps, 1)

    @torch.inference_mode()
    def uncached() -> None:
        results["uncached"] = torch.stack([stack(h[:, : t + 1]).outputs[:, -1] for t in range(args.prompt, total)], 1)

    times = _rounds({"recurrent step (cache)": cached, "parallel over prefix": uncached}, args.repeats, 0, args.seed)
    lines = [f"{'prompt':>6}  {'form':<24}{'ms / token':>11}  vs cache (IQR)"]
    for name, seconds in times.items():
        per_token = statistics.median(seconds) / args.new_tokens * 1e3
        lines.append(
            f"{args.prompt:>6}  {name:<24}{per_token:>11.3f}  {_ratio(times['recurrent step (cache)'], seconds)}"
        )
    difference = float((results["cached"] - results["uncached"]).abs().max())
    lines.append(f"largest difference between the two forms' outputs: {difference:.2e}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8, help="B (default: 8)")
    parser.add_argument("--d-model", type=int, default=64, help="D (default: 64)")
    parser.add_argument("--state-size", type=int, default=64, help="N (default: 64)")
    parser.add_argument("--lengths", default="64,256,1024", help="training T values (default: 64,256,1024)")
    parser.add_argument("--layers", type=int, default=2, help="blocks of the generation stack (default: 2)")
    parser.add_argument("--prompt", type=int, default=256, help="generation: prompt positions (default: 256)")
    parser.add_argument("--new-tokens", type=int, default=64, help="generation: positions appended (default: 64)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (default: 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default: 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        args.lengths = [int(t) for t in args.lengths.split(",")]
    except ValueError:
        parser.error(f"--lengths: expected comma-separated integers, got {args.lengths!r}")
    torch.set_num_threads(args.threads)
    print(f"Table 1: S4DBlock training step, B={args.batch}, D={args.d_model}, N={args.state_size}")
    print("\n".join(training_table(args)))
    print(f"\nTable 2: generation through {args.layers} S4D blocks, batch 1, {args.new_tokens} new positions")
    print("\n".join(generation_table(args)))


if __name__ == "__main__":
    main()
