"""Whole-file perplexity of a GPT by the sliding window: the default path against one window at a time and against
every position's logits.

``seqlab.training.language_modeling.perplexity_sliding_window`` scores a file of --tokens random token ids with a
GPT of the ``lm`` recipe's default shape (4 layers, D = 128, 4 heads, context 64, V = 65, random weights, float32)
at stride context // 2, as ``seqlab train lm`` scores its test split, by three paths: the default (4096 tokens'
worth of windows per forward pass, only the scored positions' logits: the GPT's ``logits_to_keep``, its last layer
run on each window's last stride + 1 positions), "all logits" (the same batches, the GPT called without
``logits_to_keep``, how it scored before that option) and one window per forward pass
(``batch_size=1``, all logits, how it scored before that). Each round runs every path, in rotating order; the table
shows the median seconds of each path (this process's CPU time with --clock cpu, which other processes on a
shared CPU disturb far less; wall time by default) and the median of its per-round ratios to the default. Every
path must give the same loss (the largest difference is printed).

    python benchmarks/sliding_window.py --threads 1                      # 20,000 tokens, 3 rounds: about a minute
    python benchmarks/sliding_window.py --tokens 300 --repeats 1         # smoke test, seconds
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from seqlab.models import GPT, GPTConfig, LanguageModelOutput
from seqlab.training.language_modeling import perplexity_sliding_window


class AllLogits(nn.Module):
    """The GPT called without ``logits_to_keep``: every position's logits."""

    def __init__(self, model: GPT) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, state: object = None) -> LanguageModelOutput:
        return self.model(input_ids, state)


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
    all_logits = AllLogits(model)
    paths = {  # name: (model, windows per forward pass)
        "default": (model, None),
        "all logits": (all_logits, None),
        "one window at a time": (all_logits, 1),
    }
    seconds: dict[str, list[float]] = {name: [] for name in paths}
    losses: dict[str, float] = {}
    for scorer, batch_size in paths.values():  # warm-up, untimed
        perplexity_sliding_window(scorer, token_ids[:130], context_length=64, stride=32, batch_size=batch_size)
    for round_index in range(args.repeats):
        names = list(paths)
        for name in names[round_index % 3 :] + names[: round_index % 3]:
            scorer, batch_size = paths[name]
            start = clock()
            score = perplexity_sliding_window(scorer, token_ids, context_length=64, stride=32, batch_size=batch_size)
            seconds[name].append(clock() - start)
            losses[name] = score.loss
    print(f"{args.tokens:,} tokens, context 64, stride 32; {args.threads} thread(s), {args.clock} clock")
    print(f"{'path':<22} {'seconds':>8} {'/ default':>9} {'loss':>9}")
    for name in paths:
        ratio = statistics.median(a / b for a, b in zip(seconds[name], seconds["default"], strict=True))
        print(f"{name:<22} {statistics.median(seconds[name]):>8.2f} {ratio:>8.2f}x {losses[name]:>9.5f}")
    print(f"largest loss difference: {max(losses.values()) - min(losses.values()):.2e}")


if __name__ == "__main__":
    main()
