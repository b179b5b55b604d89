"""The course's truncated-BPTT table, measured: (k1, k2) against test perplexity and time per step on the lm recipe.

Trains one small character-level LSTM per (k1, k2) of ``GRID`` with ``seqlab train lm`` (``data.bptt_len`` = k1,
``data.bptt_k2`` = k2; Williams & Peng 1990, Sutskever 2013), all at the same seed, size and optimizer step count
(no time budget, so the machine's load cannot change the perplexities), and reads the whole test split's perplexity
from each run's ``results.json``. Then it times the training step of every setting in one process, round-robin
(``--rounds`` rounds of ``--timed-steps`` steps each: forward, backward and an Adam step through the recipe's own
model, windows and ``TruncatedBPTT`` from ``seqlab.recipes.lm.prepare``), so that a machine whose load drifts
slows every setting alike, and prints a Markdown table: tokens trained on, test perplexity, the median milliseconds
per optimizer step and per 1,000 training tokens, and both as ratios against the reference (k1, k2) = (35, 35).
Re-run with:

    OMP_NUM_THREADS=1 nice python docs/tables/tbptt_table.py --out runs/tables-tbptt --steps 1000

Runs already in ``--out`` are reused (delete them to retrain); the timing pass always runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import torch

from seqlab.config import apply_overrides, parse_assignments
from seqlab.recipes import lm

GRID = ((10, 10), (10, 20), (20, 20), (20, 40), (35, 35), (5, 35))
REFERENCE = (35, 35)
MODEL = (
    "model.arch=lstm",
    "model.embedding_size=64",
    "model.hidden_size=128",
    "model.rnn_layers=1",
)
BATCH_SIZE = 16  # parallel streams


def train(out: Path, steps: int, k1: int, k2: int) -> Path:
    """``seqlab train lm`` at a fixed step count with truncated BPTT(k1, k2) into ``out``, unless a run is there."""
    if not (out / "results.json").exists():
        command = ["seqlab", "train", "lm", "--out", str(out), "--overwrite", "--set", *settings(steps, k1, k2)]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return out


def settings(steps: int, k1: int, k2: int) -> list[str]:
    """The ``--set`` assignments of one grid point."""
    return [
        *MODEL,
        f"data.bptt_len={k1}",
        f"data.bptt_k2={k2}",
        "data.batches_per_epoch=500",
        "data.valid_tokens=8192",
        f"train.batch_size={BATCH_SIZE}",
        "train.lr=0.003",
        f"train.max_steps={steps}",
        "train.time_budget=none",
        "train.patience=none",
    ]


class Timed:
    """One grid point's training step, built by the recipe's ``prepare``, run and timed a few steps at a time."""

    def __init__(self, steps: int, k1: int, k2: int) -> None:
        config = apply_overrides(lm.Config(), parse_assignments(settings(steps, k1, k2)))
        torch.manual_seed(config.train.seed)
        self.run = lm.prepare(config)
        self.optimizer = torch.optim.Adam(self.run.model.parameters(), lr=config.train.lr)
        self.batches = iter(self.run.train_batches(1, torch.Generator(), BATCH_SIZE))
        self.seconds: list[float] = []  # per step, one entry per round
        self.tokens = 0  # per step

    def time(self, count: int) -> None:
        """Run ``count`` training steps and record their mean duration."""
        tic = time.perf_counter()
        for _ in range(count):
            window = next(self.batches)
            loss = self.run.strategy.loss(self.run.model, window, self.run.loss_fn)
            loss.loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.tokens = loss.num_tokens
        self.seconds.append((time.perf_counter() - tic) / count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/tables-tbptt"))
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10, help="timing rounds over the whole grid")
    parser.add_argument("--timed-steps", type=int, default=5, help="steps per setting and round")
    args = parser.parse_args()
    start = time.perf_counter()
    perplexity = {}
    for k1, k2 in GRID:
        run = train(args.out / f"k1_{k1}-k2_{k2}", args.steps, k1, k2)
        perplexity[k1, k2] = json.loads((run / "results.json").read_text())["test_perplexity"]
    trained = time.perf_counter() - start
    timed = {point: Timed(args.steps, *point) for point in GRID}
    for _ in range(args.rounds):
        for timer in timed.values():
            timer.time(args.timed_steps)
    step = {point: statistics.median(timer.seconds) for point, timer in timed.items()}
    token = {point: step[point] / timed[point].tokens for point in GRID}
    print(f"\n### Truncated BPTT(k1, k2) on the lm recipe ({args.steps} steps each, {BATCH_SIZE} streams)\n")
    print("| k1 | k2 | tokens trained | test perplexity | ms / step | x (35, 35) | ms / 1k tokens | x (35, 35) |")
    print("|---|---|---|---|---|---|---|---|")
    for k1, k2 in GRID:
        point = (k1, k2)
        print(
            f"| {k1} | {k2} | {args.steps * BATCH_SIZE * k1:,} | {perplexity[point]:.3f} | {1e3 * step[point]:.1f} | "
            f"{step[point] / step[REFERENCE]:.2f} | {1e6 * token[point]:.1f} | {token[point] / token[REFERENCE]:.2f} |"
        )
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"\n(run time {time.perf_counter() - start:.0f} s, of which training {trained:.0f} s; timed over "
        f"{args.rounds} rounds of {args.timed_steps} steps; {platform.machine()}, {os.cpu_count()} cores, "
        f"OMP_NUM_THREADS={threads}, load average at the end {load})"
    )


if __name__ == "__main__":
    main()
