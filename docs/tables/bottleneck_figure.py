"""The seq2seq page's figure: word error rate by source length, additive attention against the fixed context vector.

Reads the ``results.json`` of the two g2p runs that ``docs/tables/g2p_tables.py`` trains (``attention`` and
``fixed-context`` under its ``--out``; both scored on the recipe's test split, 12,605 CMUdict words) and draws WER
by word-length bucket as a line plot, the number of test words of each bucket on the axis. Re-run with:

    python docs/tables/bottleneck_figure.py --runs runs/tables-g2p --figure docs/figures/bottleneck_g2p.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from matplotlib.figure import Figure

BUCKETS = {"1_4": "1-4", "5_7": "5-7", "8_10": "8-10", "11_up": "11+"}
RUNS = {"attention": "additive attention", "fixed-context": "fixed context (model.attention=none)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=Path("runs/tables-g2p"), help="g2p_tables.py's --out")
    parser.add_argument("--figure", type=Path, default=Path("docs/figures/bottleneck_g2p.png"))
    args = parser.parse_args()
    figure = Figure(figsize=(6.5, 4), layout="constrained")
    axes = figure.subplots()
    words = {}
    for name, label in RUNS.items():
        results = json.loads((args.runs / name / "results.json").read_text())
        wer = [results[f"wer_letters_{bucket}"] for bucket in BUCKETS]
        words = {bucket: int(results[f"words_letters_{bucket}"]) for bucket in BUCKETS}
        axes.plot(range(len(BUCKETS)), wer, marker="o", label=f"{label}, {int(results['steps'])} steps")
        print(name, " ".join(f"{value:.1f}" for value in wer))
    axes.set_xticks(range(len(BUCKETS)))
    axes.set_xticklabels([f"{text}\n({words[bucket]:,} words)" for bucket, text in BUCKETS.items()])
    axes.set_xlabel("source length (letters), test words in the bucket")
    axes.set_ylabel("word error rate (%)")
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(loc="upper left")
    axes.set_title("g2p RNN encoder-decoder on CMUdict's test split: WER by word length")
    args.figure.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.figure, dpi=110)


if __name__ == "__main__":
    main()
