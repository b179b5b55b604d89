"""The course's positions table, measured: learned, sinusoidal and rotary positions beyond the training length.

Trains three small GPTs with ``seqlab train lm`` (the default corpus, character tokens, the last 1% held out for
testing), identical but for ``model.positional``, on blocks of T tokens for a fixed number of steps; then reads the
test split in windows of 4T + 1 tokens, each read afresh from position 0, and prints the mean loss (nats/char) of
the predictions made at input positions [0, T), [T, 2T) and [2T, 4T), i.e. within the training length, past it and
far past it. A learned table has no row past T - 1, so the GPT refuses to read past T ("cannot"; it is scored on the
first T only). Run time: the ``seqlab train`` run's (training and its own test scoring); positions time: this
script's reading of the test split. The per-position curves go to ``--figure``. Re-run with:

    python docs/tables/positions_table.py --out runs/tables-positions --context-length 32 --steps 800 \\
        --figure docs/figures/positions_beyond_training.png

Runs already in ``--out`` are reused (delete them to retrain).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

from seqlab.data.text import load_corpus
from seqlab.recipes import load_system

KINDS = ("learned", "sinusoidal", "rotary")
SIZE = ("model.d_model=64", "model.num_heads=4", "model.num_layers=2")  # ~105k parameters
TEST_FRACTION = 0.01  # the last 1% of the corpus (~43k characters): the recipe's own scoring of it stays short


def train(out: Path, positional: str, context_length: int, steps: int) -> Path:
    """``seqlab train lm`` with these positions at a fixed step count (no time budget, so the machine's load cannot
    change the result), unless ``out`` holds that run already."""
    if not (out / "results.json").exists():
        settings = [
            "model.arch=gpt",
            f"model.positional={positional}",
            f"model.context_length={context_length}",
            *SIZE,
            f"train.max_steps={steps}",
            "train.time_budget=none",
            f"data.test_fraction={TEST_FRACTION}",
        ]
        subprocess.run(["seqlab", "train", "lm", "--out", str(out), "--overwrite", "--set", *settings], check=True)
    return out


@torch.no_grad()
def loss_by_position(run: Path, text: str, length: int, batch_size: int = 32) -> torch.Tensor:
    """Mean loss (nats) of the prediction made at each input position 0..P-1 over non-overlapping windows of
    ``length`` + 1 tokens of ``text``, each read from position 0: (P,), where P is ``length`` or, for a model that
    cannot read that far (learned positions), its context length."""
    system = load_system(run)
    model = system.model.eval()
    reach = length if model.context_length is None else min(length, model.context_length)
    ids = torch.tensor(system.tokenizer.encode(text), dtype=torch.long)
    windows = ids[: len(ids) // (length + 1) * (length + 1)].view(-1, length + 1)  # (W, length + 1)
    total = torch.zeros(reach, dtype=torch.float64)
    for chunk in windows.split(batch_size):
        logits = model(chunk[:, :reach]).logits  # (B, P, V)
        losses = F.cross_entropy(logits.transpose(1, 2), chunk[:, 1 : reach + 1], reduction="none")  # (B, P)
        total += losses.sum(dim=0).double()
    return total / windows.shape[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/tables-positions"))
    parser.add_argument("--context-length", type=int, default=32, help="T, the training block length")
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--figure", type=Path, help="PNG of the loss against position")
    args = parser.parse_args()
    T = args.context_length
    test = load_corpus(test_fraction=TEST_FRACTION).test
    buckets = {"[0, T)": (0, T), "[T, 2T)": (T, 2 * T), "[2T, 4T)": (2 * T, 4 * T)}
    rows, curves = [], {}
    for kind in KINDS:
        run = train(args.out / kind, kind, T, args.steps)
        start = time.perf_counter()
        curves[kind] = curve = loss_by_position(run, test, 4 * T)
        seconds = time.perf_counter() - start
        cells = [f"{curve[a:b].mean():.3f}" if b <= curve.shape[0] else "cannot" for a, b in buckets.values()]
        results = json.loads((run / "results.json").read_text())
        rows.append([kind, *cells, f"{results['test_loss']:.3f}", f"{results['total_seconds']:.0f}", f"{seconds:.0f}"])
    header = [
        "positions",
        *(f"loss at {name}" for name in buckets),
        "test loss (window T, stride T/2)",
        "run time (s)",
        "positions time (s)",
    ]
    print(f"T = {T}, {args.steps} steps; loss in nats/char on the test split")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if args.figure is not None:
        figure = Figure(figsize=(7, 4), layout="constrained")
        axes = figure.subplots()
        for kind, curve in curves.items():
            axes.plot(range(curve.shape[0]), curve.numpy(), label=kind)
        for multiple in (1, 2):
            axes.axvline(multiple * T, color="grey", linestyle=":", linewidth=1)
        axes.set_xlabel("input position p in a window read from position 0 (predicting token p + 1)")
        axes.set_ylabel("test loss (nats/char)")
        axes.set_title(f"GPTs trained on blocks of T = {T} characters, read up to 4T")
        axes.legend(title="positions")
        args.figure.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(args.figure, dpi=110)


if __name__ == "__main__":
    main()
