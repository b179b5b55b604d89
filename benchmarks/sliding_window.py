"""Whole-file perplexity of a GPT by the sliding window: many windows per forward pass against one at a time.

``seqlab.training.language_modeling.perplexity_sliding_window`` scores a file of --tokens random token ids with a
GPT of the ``lm`` recipe's default shape (4 layers, D = 128, 4 heads, context 64, V = 65, random weights, float32)
at stride context // 2, as ``seqlab train lm`` scores its test split: once with ``batch_size=1`` (one window per
forward pass, how it scored until issue 25) and once with the default batch (4096 tokens' worth of windows). Each
round runs both, in alternating order; the table shows the median seconds of each path (this process's CPU time
with --clock cpu, which other processes on a shared CPU disturb far less; wall time by default) and the median of
the per-round ratios one-at-a-time / batched. Both paths must give the same loss (the largest difference is
printed).

    python benchmarks/sliding_window.py --threads 1                      # 20,000 tokens, 3 rounds: about a minute
    python benchmarks/sliding_window.py --tokens 300 --repeats 1         # smoke test, seconds
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from seqlab.models import GPT, GPTConfig
from seqlab.training.language_modeling import perplexity_sliding_window


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=20_000, help="length of the scored file")
    parser.add_argument("--repeats", type=int, default=3, help="rounds, each running both paths")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="what is timed")
    args = parser.parse_args()
    if args.tokens < 2 or args.repeats < 1 or args.threads < 1:
        parser.error("--tokens must be >= 2, --repeats and --threads >= 1")
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=65, context_length=64, d_model=128, num_heads=4, num_layers=4)).eval()
    token_ids = torch.randint(0, 65, (args.tokens,))
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    paths = {"one window at a time": 1, "batched (default)": None}
    seconds: dict[str, list[float]] = {name: [] for name in paths}
    losses: dict[str, float] = {}
    for round_index in range(args.repeats):
        order = list(paths) if round_index % 2 == 0 else list(reversed(paths))
        for name in order:
            start = clock()
            score = perplexity_sliding_window(model, token_ids, context_length=64, stride=32, batch_size=paths[name])
            seconds[name].append(clock() - start)
            losses[name] = score.loss
    one, batched = seconds["one window at a time"], seconds["batched (default)"]
    ratio = statistics.median(a / b for a, b in zip(one, batched, strict=True))
    print(f"{args.tokens:,} tokens, context 64, stride 32; {args.threads} thread(s), {args.clock} clock")
    print(f"{'path':<22} {'seconds':>8} {'loss':>9}")
    for name in paths:
        print(f"{name:<22} {statistics.median(seconds[name]):>8.2f} {losses[name]:>9.5f}")
    print(f"one at a time / batched: {ratio:.2f}x")
    print(f"largest loss difference: {abs(losses['one window at a time'] - losses['batched (default)']):.2e}")


if __name__ == "__main__":
    main()
