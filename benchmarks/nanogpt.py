"""nanoGPT side by side: its ``train.py`` and ``seqlab train lm`` on the same text, size and iterations.

nanoGPT (Karpathy, MIT licence) is run from a checkout the user points to (``--nanogpt-dir``); nothing of it is
copied into this repository. Both sides train a character-level GPT of nanoGPT's CPU ``shakespeare_char``
size (its README: 4 layers, 4 heads, d_model 128, context 64, batch 12, dropout 0) for each of ``--iters``
optimizer steps, on seqlab's default ``lm`` corpus (or ``--text``) split as ``seqlab train lm`` splits it:
the train and valid splits are written in nanoGPT's ``data/shakespeare_char`` format (``train.bin`` and
``val.bin`` of uint16 character ids, ``meta.pkl`` with ``vocab_size``, ``stoi``, ``itos``, as its
``prepare.py`` makes them) into a temporary directory, which nanoGPT reads as ``--dataset``.

Each side runs with its own defaults otherwise: nanoGPT with ``config/train_shakespeare_char.py`` and the
README's CPU flags (AdamW at 1e-3, warmup 100, cosine to 1e-4, beta2 0.99, weight decay 0.1, evaluation every
250 steps over 20 batches per split); seqlab with the recipe's defaults (``train.max_steps`` = the iterations,
no time budget). Wall time is each side's whole process, with ``--threads`` threads: for seqlab it includes its
validations, the whole-test-file score and the report's examples. The two sides run at the same time (on a
shared machine both then see the same load; give it at least 2 x ``--threads`` cores), or one after the other
with ``--one-at-a-time``; the load average before and after each pair is printed with the table. Each side keeps
the checkpoint of its best validation; one evaluator then scores both on the whole valid split: the mean
cross-entropy (nats/char) over consecutive blocks of the context length, every character of a block predicted
from those before it in the block. nanoGPT's ``train.py`` fixes its torch seed (1337); ``--nanogpt-seed`` runs
it unchanged under a wrapper that shifts ``torch.manual_seed`` to the given seed (its initialisation and batches
then differ as another seed's would), for nanoGPT's seed spread; ``--set train.seed=N`` does the same for seqlab.

    python benchmarks/nanogpt.py --nanogpt-dir ~/src/nanoGPT                     # 2,000 and 5,000 steps
    nice python benchmarks/nanogpt.py --nanogpt-dir ~/src/nanoGPT --iters 2000 --threads 1
    python benchmarks/nanogpt.py --nanogpt-dir DIR --text small.txt --iters 20   # a smoke test, seconds
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from seqlab.recipes import load_system
from seqlab.recipes.lm.config import LMDataConfig
from seqlab.recipes.lm.training import read_splits

# nanoGPT's README, "I only have a macbook": the CPU shakespeare_char run.
SIZE = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64, "batch_size": 12, "dropout": 0.0}
NANOGPT_FLAGS = ["--device=cpu", "--compile=False", "--eval_iters=20", "--log_interval=1"]
SEQLAB_SIZE = {
    "model.num_layers": SIZE["n_layer"],
    "model.num_heads": SIZE["n_head"],
    "model.d_model": SIZE["n_embd"],
    "model.context_length": SIZE["block_size"],
    "model.dropout": SIZE["dropout"],
    "train.batch_size": SIZE["batch_size"],
}
EVAL_BATCH = 64  # blocks per forward pass of the evaluator
NANOGPT_SEED = 1337  # the torch seed nanoGPT's train.py sets (plus its DDP rank, 0 here)
# Runs nanoGPT's train.py (in the working directory, the checkout) as its own script, with torch.manual_seed
# shifted so that its seed becomes argv[1]; nothing of train.py is changed or copied.
SEED_WRAPPER = (
    f"import runpy, sys, torch; offset = int(sys.argv[1]) - {NANOGPT_SEED}; sys.argv = sys.argv[2:]; "
    "sys.path.insert(0, '.'); manual_seed = torch.manual_seed; "
    "torch.manual_seed = lambda seed: manual_seed(seed + offset); runpy.run_path('train.py', run_name='__main__')"
)

LogitsFn = Callable[[Tensor], Tensor]  # (B, T) ids -> (B, T, V) logits


def write_nanogpt_dataset(directory: Path, train: str, valid: str, test: str) -> dict[str, int]:
    """``train.bin``, ``val.bin`` and ``meta.pkl`` in ``directory``, as nanoGPT's ``prepare.py`` writes them; the
    characters are those of all three splits, sorted (seqlab's char tokenizer sees the same set). Returns stoi."""
    chars = sorted(set(train + valid + test))
    stoi = {ch: i for i, ch in enumerate(chars)}
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in (("train.bin", train), ("val.bin", valid)):
        np.array([stoi[c] for c in text], dtype=np.uint16).tofile(directory / name)
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}
    (directory / "meta.pkl").write_bytes(pickle.dumps(meta))
    return stoi


def mean_block_loss(logits_of: LogitsFn, ids: Tensor, block: int) -> float:
    """The evaluator of both sides: mean nats per predicted token over consecutive blocks of ``block`` + 1 ids
    of ``ids`` (block b predicts ids[b*block + 1 .. (b+1)*block] from the ids before each in the block)."""
    count = (len(ids) - 1) // block
    inputs = ids[: count * block].view(count, block)  # (B, T)
    targets = ids[1 : count * block + 1].view(count, block)
    total = 0.0
    with torch.no_grad():
        for start in range(0, count, EVAL_BATCH):
            logits = logits_of(inputs[start : start + EVAL_BATCH])  # (B, T, V)
            chunk = targets[start : start + EVAL_BATCH]
            total += F.cross_entropy(logits.flatten(0, 1).float(), chunk.flatten(), reduction="sum").item()
    return total / (count * block)


def nanogpt_logits(nanogpt_dir: Path, checkpoint: Path) -> LogitsFn:
    """nanoGPT's model (its own ``model.py``) with the weights of its ``ckpt.pt``, as a logits function."""
    spec = importlib.util.spec_from_file_location("nanogpt_model", nanogpt_dir / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    model = module.GPT(module.GPTConfig(**state["model_args"]))
    weights = {k.removeprefix("_orig_mod."): v for k, v in state["model"].items()}
    model.load_state_dict(weights)
    model.eval()
    # With targets, nanoGPT's forward returns the logits of every position (without, only the last one's).
    return lambda x: model(x, torch.zeros_like(x))[0]


def seqlab_logits(run_dir: Path) -> tuple[LogitsFn, Callable[[str], Tensor]]:
    """seqlab's trained run as a logits function, and its tokenizer's encoder."""
    system = load_system(run_dir)
    system.model.eval()
    return (lambda x: system.model(x).logits), (lambda text: system.encode(text, source="the valid split"))


def eval_interval(iters: int) -> int:
    """nanoGPT's evaluation interval: its config's 250, or ``iters`` when 250 does not divide it, so that the last
    step is evaluated (nanoGPT saves its checkpoint only at an evaluation that improves)."""
    return 250 if iters % 250 == 0 else iters


def start_side(command: list[str], *, cwd: Path, threads: int, log: Path) -> Side:
    """Start one side's training process, its output to ``log``."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    out = log.open("w")
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    return Side(command, process, log, time.perf_counter(), out)


def wait_sides(sides: list[Side]) -> list[float]:
    """Wait for the sides' processes, each timed to its own end (polled every 50 ms, so a side that ends while
    another is still running is not charged for the wait); return their wall times in seconds.

    Raises: SystemExit with the log's last lines of the first side that failed.
    """
    ended: dict[int, float] = {}
    while len(ended) < len(sides):
        for i, side in enumerate(sides):
            if i not in ended and side.process.poll() is not None:
                ended[i] = time.perf_counter()
        time.sleep(0.05)
    return [_finished(side, ended[i] - side.start) for i, side in enumerate(sides)]


def _finished(side: Side, seconds: float) -> float:
    """``seconds``, once the side's log is closed. Raises: SystemExit with the log's last lines if it failed."""
    returncode = side.process.returncode
    side.out.close()
    if returncode != 0:
        tail = "".join(side.log.read_text().splitlines(keepends=True)[-15:])
        raise SystemExit(f"{side.command[1]} exited {returncode} ({side.log}):\n{tail}")
    return seconds


def run_sides(commands: list[tuple[list[str], Path, Path]], *, threads: int, together: bool) -> list[float]:
    """Run the (command, cwd, log) sides at the same time or one after the other; their wall times (s)."""
    if together:
        return wait_sides([start_side(c, cwd=cwd, threads=threads, log=log) for c, cwd, log in commands])
    return [wait_sides([start_side(c, cwd=cwd, threads=threads, log=log)])[0] for c, cwd, log in commands]


class Side(NamedTuple):
    """A started training process: its command, process, log path, start time and open log file."""

    command: list[str]
    process: subprocess.Popen
    log: Path
    start: float
    out: IO[str]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nanogpt-dir", type=Path, required=True, help="a checkout of karpathy/nanoGPT")
    parser.add_argument("--iters", type=int, nargs="+", default=[2000, 5000], help="optimizer steps per run")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each side")
    parser.add_argument("--text", type=Path, default=None, help="a UTF-8 text instead of the default corpus")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more seqlab --set values")
    parser.add_argument(
        "--nanogpt-seed", type=int, default=NANOGPT_SEED, help=f"nanoGPT's torch seed (its own: {NANOGPT_SEED})"
    )
    parser.add_argument("--one-at-a-time", action="store_true", help="run the sides one after the other")
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs and logs in this directory")
    args = parser.parse_args()
    if not (args.nanogpt_dir / "train.py").is_file() or not (args.nanogpt_dir / "model.py").is_file():
        parser.error(f"--nanogpt-dir {args.nanogpt_dir}: no nanoGPT checkout there (train.py and model.py)")
    if any(n < 1 for n in args.iters) or args.threads < 1:
        parser.error("--iters and --threads must be >= 1")
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    data = LMDataConfig() if args.text is None else LMDataConfig(train_path=str(args.text))
    splits = read_splits(data)
    work = Path(tempfile.mkdtemp(prefix="nanogpt-bench-")) if args.keep is None else args.keep
    work.mkdir(parents=True, exist_ok=True)
    stoi = write_nanogpt_dataset(work / "data", splits.train, splits.valid, splits.test)
    nanogpt_ids = torch.tensor([stoi[c] for c in splits.valid])
    block = SIZE["block_size"]
    print(f"text: {args.text or 'the default corpus'}, {len(splits.train):,} / {len(splits.valid):,} train / valid")
    order = "one side after the other" if args.one_at_a_time else "both sides at the same time"
    print(
        f"characters, {len(stoi)} symbols; {args.threads} thread(s) per side, {order}; nanoGPT seed {args.nanogpt_seed}"
    )
    print("valid loss: nats/char over the whole valid split, one evaluator; wall: the whole training process")
    print(f"{'iters':>6} {'side':<8} {'valid loss':>10} {'wall (s)':>9}", flush=True)  # a row as each pair ends
    for iters in args.iters:
        nano_out, seqlab_out = work / f"nanogpt-{iters}", work / f"seqlab-{iters}"
        wrapper = [] if args.nanogpt_seed == NANOGPT_SEED else ["-c", SEED_WRAPPER, str(args.nanogpt_seed)]
        nano_command = [
            sys.executable, *wrapper, "train.py", "config/train_shakespeare_char.py", *NANOGPT_FLAGS,
            *(f"--{k}={v}" for k, v in SIZE.items()),
            f"--max_iters={iters}", f"--lr_decay_iters={iters}", f"--eval_interval={eval_interval(iters)}",
            f"--dataset={work / 'data'}", f"--out_dir={nano_out}",
        ]  # fmt: skip
        settings = {**SEQLAB_SIZE, "train.max_steps": iters, "train.time_budget": "none"}
        if args.text is not None:
            settings["data.train_path"] = args.text.resolve()
        seqlab_command = [
            sys.executable, "-m", "seqlab", "train", "lm", "--out", str(seqlab_out), "--no-progress", "--overwrite",
            "--set", *(f"{k}={v}" for k, v in settings.items()), *args.set,
        ]  # fmt: skip
        load_before = os.getloadavg()[0]
        nano_seconds, seqlab_seconds = run_sides(
            [
                (nano_command, args.nanogpt_dir, work / f"{iters}.nanogpt.log"),
                (seqlab_command, work, work / f"{iters}.seqlab.log"),
            ],
            threads=args.threads,
            together=not args.one_at_a_time,
        )
        loads = (load_before, os.getloadavg()[0])
        nano_loss = mean_block_loss(nanogpt_logits(args.nanogpt_dir, nano_out / "ckpt.pt"), nanogpt_ids, block)
        logits_of, encode = seqlab_logits(seqlab_out)
        seqlab_loss = mean_block_loss(logits_of, encode(splits.valid), block)
        print(f"{iters:>6} {'nanoGPT':<8} {nano_loss:>10.4f} {nano_seconds:>9.1f}")
        print(f"{iters:>6} {'seqlab':<8} {seqlab_loss:>10.4f} {seqlab_seconds:>9.1f}")
        print(
            f"{iters:>6} {'seqlab - nanoGPT loss':<21} {seqlab_loss - nano_loss:+.4f} nats/char;"
            f" wall seqlab / nanoGPT {seqlab_seconds / nano_seconds:.2f}x;"
            f" 1-minute load average {loads[0]:.2f} before, {loads[1]:.2f} after",
            flush=True,
        )
    print(f"runs and logs: {work}")


if __name__ == "__main__":
    main()
