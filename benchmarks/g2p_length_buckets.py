"""A g2p run's test WER and teacher-forced loss by word length, and how fast the loss grows with length (issue 25).

    python benchmarks/g2p_length_buckets.py RUN [RUN ...] [--short-words 300] [--threads 1]

For each run, on the recipe's test split:

- ``nll``: teacher-forced cross-entropy per phoneme (nats, EOS included, first reference pronunciation) over every
  test word of each length bucket (1-4, 5-7, 8-10, 11+ letters, and 15+ within 11+), and ``growth``, the 15+
  bucket's over the 5-7 bucket's: how much worse the model itself is on long words before any search;
- ``WER`` by bucket, decoded with the run's decode section, on every test word of 11+ letters and a fixed random
  ``--short-words`` of each shorter bucket (seed 0, the same words for every run); the ``WER`` column estimates
  the whole split's from the bucket WERs weighted by the buckets' shares of the split;
- ``dropped``: % of the decoded 11+ / 15+ words whose hypothesis is shorter than 70% of its closest reference (the
  end of the word left unsaid; ``seqlab.metrics.length_coverage``);
- ``tokens``: target tokens the run trained on (the sum of its steps' tokens in ``metrics.jsonl``), to compare
  runs at equal tokens seen rather than equal steps; ``valid``: its last valid loss.

``g2p_decomposition.py`` splits the same teacher-forced NLLs (its ``teacher_forced``) by position in the word and
separates search errors from model errors, on a sample per bucket.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from g2p_decomposition import shuffled_words, teacher_forced

from seqlab.data.cmudict import group_references
from seqlab.data.pronunciations import load_splits
from seqlab.recipes import load_system
from seqlab.recipes.g2p.error_analysis import LENGTH_BUCKETS

PARTITION = ("1_4", "5_7", "8_10", "11_up")  # the buckets that split the test words (15_up lies within 11_up)


def in_bucket(word: str, name: str) -> bool:
    _, lo, hi = next(b for b in LENGTH_BUCKETS if b[0] == name)
    return lo <= len(word) and (hi is None or len(word) <= hi)


def nll_by_bucket(system, references: dict[str, list]) -> dict[str, float]:
    """Teacher-forced nats per phoneme (EOS included) of each bucket's words, first reference."""
    words = list(references)
    rows = teacher_forced(system, words, [references[w][0] for w in words], attention=False, source="test split")
    sums = {name: [0.0, 0] for name, _, _ in LENGTH_BUCKETS}
    for word, row in zip(words, rows, strict=True):
        for name, _, _ in LENGTH_BUCKETS:
            if in_bucket(word, name):
                sums[name][0] += sum(row["nll"])
                sums[name][1] += len(row["nll"])
    return {name: total / count for name, (total, count) in sums.items() if count}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+")
    parser.add_argument("--short-words", type=int, default=300, help="test words decoded per bucket below 11 letters")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    names = [name for name, _, _ in LENGTH_BUCKETS]
    print(
        f"{'run':<24} {'tokens':>9} {'valid':>6} {'WER':>5} "
        + " ".join(f"{'WER ' + n:>10}" for n in names)
        + " "
        + " ".join(f"{'nll ' + n:>10}" for n in names)
        + f" {'growth':>6} {'dropped 11+/15+':>15}"
    )
    for run in args.runs:
        system = load_system(run)
        test = load_splits(system.config.data)[2]
        references = group_references(test)
        shuffled = shuffled_words(references)
        sample = {w for w in shuffled if len(w) >= 11}
        for name in PARTITION[:-1]:
            sample.update([w for w in shuffled if in_bucket(w, name)][: args.short_words])
        scores = system.score([p for p in test if p.word in sample], source="test sample")
        shares = {name: sum(in_bucket(w, name) for w in references) / len(references) for name in PARTITION}
        wer = sum(shares[name] * scores[f"wer_letters_{name}"] for name in PARTITION)
        nll = nll_by_bucket(system, references)
        steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        tokens = sum(r["tokens"] for r in steps if r.get("event") == "step")
        valid = [r["valid_loss"] for r in steps if "valid_loss" in r][-1]
        print(
            f"{run.name[-24:]:<24} {tokens:>9} {valid:6.3f} {wer:5.1f} "
            + " ".join(f"{scores[f'wer_letters_{n}']:10.1f}" for n in names)
            + " "
            + " ".join(f"{nll[n]:10.3f}" for n in names)
            + f" {nll['15_up'] / nll['5_7']:6.2f}"
            + f" {scores['dropped_ends_letters_11_up']:7.1f}/{scores['dropped_ends_letters_15_up']:<7.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
