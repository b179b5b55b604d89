"""Every letter pronounced (issue 25): WER and length coverage by word length of a g2p run on its test split,
under several decode settings, and its transcriptions of three long words.

    python benchmarks/g2p_long_words.py RUN [--setting NAME:KEY=VALUE,KEY=VALUE ...] [--short-words N]

Each setting changes the run's ``[decode]`` section (``num_beams``, ``length_penalty``, ``coverage_penalty``,
``max_length``); the first row is the run's own. Per length bucket (``seqlab.recipes.g2p.error_analysis``): WER (%),
hypothesis phonemes per letter against the references' (``ph/l hyp/ref``), and the % of words whose hypothesis
is shorter than 70% of the closest reference (``drop``) or longer than 130% (``rep``). ``--short-words N`` keeps
every word of 11+ letters and a random N of the shorter ones, where the whole split takes too long; the WER column
is then the full split's estimate, each bucket's WER weighted by its share of the whole split (1-4, 5-7, 8-10,
11+). Decode time is in seconds of the same run, for ratios only.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import time
from pathlib import Path

import torch

from seqlab.data.cmudict import group_references
from seqlab.data.pronunciations import load_splits
from seqlab.metrics import g2p_scores
from seqlab.recipes import load_system
from seqlab.recipes.g2p.error_analysis import LENGTH_BUCKETS, error_categories

LONG_WORDS = ("internationalization", "antidisestablishmentarianism", "supercalifragilisticexpialidocious")


def parse_setting(text: str) -> tuple[str, dict[str, float]]:
    name, _, assignments = text.partition(":")
    changes = {}
    for assignment in filter(None, assignments.split(",")):
        key, _, value = assignment.partition("=")
        changes[key] = int(value) if key in ("num_beams", "max_length") else float(value)
    return name, changes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--setting", action="append", default=[], help="NAME:KEY=VALUE,... of the decode section")
    parser.add_argument("--short-words", type=int, help="keep all 11+-letter words and this many shorter ones")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    system = load_system(args.run)
    references = group_references(load_splits(system.config.data)[2])
    words = sorted(references)
    buckets = [f"letters_{name}" for name, _, _ in LENGTH_BUCKETS]
    partition = [b for b in buckets if b != "letters_15_up"]
    shares = {b: sum(1 for w in words if _in(w, b)) / len(words) for b in partition}
    if args.short_words is not None:
        short = [w for w in words if len(w) < 11]
        words = sorted({w for w in words if len(w) >= 11} | set(random.Random(0).sample(short, args.short_words)))
    variants = [references[w] for w in words]
    print(
        f"{args.run}: {len(words)} test words; "
        + ", ".join(f"{b[8:]} {sum(1 for w in words if _in(w, b))}" for b in buckets)
    )
    header = f"{'setting':<22} {'WER':>5} {'PER':>5} {'sec':>5} | " + " | ".join(f"{b[8:]:^24}" for b in buckets)
    print(header + "\n" + " " * 41 + "| " + " | ".join(f"{'WER ph/l hyp/ref drop rep':^24}" for _ in buckets))
    long_words = []
    for name, changes in [("run's own", {}), *map(parse_setting, args.setting)]:
        decode = dataclasses.replace(system.config.decode, **changes)
        variant = dataclasses.replace(system, config=dataclasses.replace(system.config, decode=decode))
        start = time.perf_counter()
        best = [h[0][0] for h in variant.transcribe(words, source="test split")]
        seconds = time.perf_counter() - start
        scores, rows = g2p_scores(best, variants), error_categories(words, best, variants)
        wer = sum(rows[f"wer_{b}"] * share for b, share in shares.items()) if args.short_words else scores.wer
        cells = [
            f"{rows[f'wer_{b}']:4.1f} {rows[f'phonemes_per_letter_{b}']:.2f}/"
            f"{rows[f'reference_phonemes_per_letter_{b}']:.2f} "
            f"{rows[f'dropped_ends_{b}']:4.1f} {rows[f'repeats_{b}']:3.1f}"
            for b in buckets
        ]
        print(f"{name:<22} {wer:5.2f} {scores.per:5.2f} {seconds:5.0f} | " + " | ".join(cells), flush=True)
        long_words.append(
            (name, [" ".join(h[0][0]) for h in variant.transcribe(list(LONG_WORDS), source="long words")])
        )
    for word_index, word in enumerate(LONG_WORDS):
        print(f"\n{word}")
        for name, transcriptions in long_words:
            print(f"  {name:<22} {transcriptions[word_index]}")


def _in(word: str, bucket: str) -> bool:
    low, high = next((low, high) for name, low, high in LENGTH_BUCKETS if f"letters_{name}" == bucket)
    return len(word) >= low and (high is None or len(word) <= high)


if __name__ == "__main__":
    main()
