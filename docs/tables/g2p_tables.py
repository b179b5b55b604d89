"""The course's g2p tables, measured: attention against the fixed context vector by word length, beam against greedy
by beam size, and scheduled sampling against teacher forcing (exposure gap and WER).

Trains three g2p runs of the same size and step count (the default RNN with additive attention, the same model with
``model.attention=none``, and the default with inverse-sigmoid scheduled sampling, Bengio et al. 2015), then scores
each on the recipe's own test split (CMUdict words never seen in training) and prints three Markdown tables and the
run time. Re-run with:

    python docs/tables/g2p_tables.py --out runs/tables-g2p --steps 5000

Runs already in ``--out`` are reused (delete them to retrain).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from seqlab.data.pronunciations import load_splits
from seqlab.recipes import load_system
from seqlab.recipes.system import SystemOptions

BUCKETS = ("1_4", "5_7", "8_10", "11_up")
BEAMS = (1, 2, 5, 10)


def train(out: Path, steps: int, *settings: str) -> Path:
    """``seqlab train g2p`` at a fixed step count (no time budget, so the machine's load cannot change the result)."""
    if not (out / "results.json").exists():
        fixed = [f"train.max_steps={steps}", "train.time_budget=none", *settings]
        subprocess.run(["seqlab", "train", "g2p", "--out", str(out), "--set", *fixed], check=True)
    return out


def results(run: Path) -> dict[str, float]:
    return json.loads((run / "results.json").read_text())


def exposure_gap(run: Path, out: Path) -> dict[str, float]:
    """Teacher-forced against free-running loss on the run's test split (``seqlab analyze exposure``)."""
    if not (out / "exposure.json").exists():
        subprocess.run(["seqlab", "analyze", "exposure", str(run), "--out", str(out)], check=True)
    return json.loads((out / "exposure.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/tables-g2p"))
    parser.add_argument("--steps", type=int, default=5000)
    args = parser.parse_args()
    start = time.perf_counter()
    attention = train(args.out / "attention", args.steps)
    fixed = train(args.out / "fixed-context", args.steps, "model.attention=none")
    k = args.steps / 12  # eps_i = 1/2 at i = k ln k, half-way through a 5,000-step run
    scheduled = train(
        args.out / "scheduled-sampling",
        args.steps,
        "train.teacher_forcing_schedule=inverse_sigmoid",
        f"train.teacher_forcing_k={k:g}",
    )

    print(f"\n### Attention against the fixed context vector ({args.steps} steps each; WER % by letters)\n")
    print("| model | " + " | ".join(f"{b.replace('_up', '+').replace('_', '-')} letters" for b in BUCKETS) + " | all |")
    print("|---|" + "---|" * (len(BUCKETS) + 1))
    for name, run in (("additive attention", attention), ("fixed context (attention=none)", fixed)):
        r = results(run)
        print(f"| {name} | " + " | ".join(f"{r[f'wer_letters_{b}']:.1f}" for b in BUCKETS) + f" | {r['wer']:.1f} |")

    words = results(attention)["test_words"]
    print(f"\n### Beam against greedy (the additive-attention run; test split of {words:.0f} words)\n")
    print("| num_beams | PER % | WER % | decode seconds |")
    print("|---|---|---|---|")
    test = load_splits(load_system(attention).config.data)[2]
    for num_beams in BEAMS:
        system = load_system(attention, SystemOptions(num_beams=num_beams))
        tic = time.perf_counter()
        scores = system.score(test, source="test split", errors_path=None)
        print(f"| {num_beams} | {scores['per']:.2f} | {scores['wer']:.2f} | {time.perf_counter() - tic:.1f} |")

    print(f"\n### Scheduled sampling at full training length ({args.steps} steps; inverse sigmoid, k = {k:g})\n")
    print("| training | teacher-forced loss | free-running loss | gap | PER % | WER % |")
    print("|---|---|---|---|---|---|")
    for name, run in (("teacher forcing", attention), ("scheduled sampling", scheduled)):
        gap = exposure_gap(run, args.out / f"exposure-{run.name}")
        r = results(run)
        print(
            f"| {name} | {gap['teacher_forced_loss']:.3f} | {gap['free_running_loss']:.3f} | "
            f"{gap['loss_gap']:.3f} | {r['per']:.2f} | {r['wer']:.2f} |"
        )
    print(f"\n(run time {time.perf_counter() - start:.0f} s, {sys.platform})")


if __name__ == "__main__":
    main()
