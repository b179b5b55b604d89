"""The cost of one g2p training step of several model settings against the RNN default, measured in the same run
(issue 25.1: "equal training time" is equal steps x this cost).

    python benchmarks/g2p_step_cost.py --threads 1
    python benchmarks/g2p_step_cost.py --threads 1 --row "tiny=model.arch=transformer,model.d_model=64,model.d_ff=256"
    python benchmarks/g2p_step_cost.py --batches 1 --repeats 1   # smoke test, seconds

A row is a name and ``--set`` assignments over ``seqlab train g2p``'s defaults (``model.*`` keys and
``train.batch_size``); the reference row is the default RNN. One step is the recipe's training step, as
``seqlab train g2p`` takes it: forward and the (label-smoothed) cross-entropy of ``scheduled_sampling_loss`` with
teacher forcing, backward, clipping at the train section's ``clip_norm``, and an Adam step. Every row trains on the
same ``--batches`` batches of the recipe's training split (bucketed by length and shuffled as the recipe draws them,
``train.batch_size`` pronunciations each), in that order; a round runs every row once over all of them, the rows'
order reversed in odd rounds, after one warm-up round. The table shows each row's median milliseconds per step and
its ratio to the RNN: the median over rounds of the round's row time / RNN time, with the interquartile range. So a
row of ratio r trains n / r steps in the time the RNN trains n.
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable

import torch
from language_model import median_and_iqr

from seqlab.config import apply_overrides, parse_assignments
from seqlab.data.batching import batch_iterator
from seqlab.data.pronunciations import load_splits
from seqlab.data.vocab import Vocabulary
from seqlab.recipes import g2p
from seqlab.training.scheduled_sampling import scheduled_sampling_loss

DEFAULT_ROWS = (
    "transformer=model.arch=transformer",
    "transformer_small=model.arch=transformer,model.d_model=64,model.d_ff=256,model.decoder_layers=2",
    "transformer_128=model.arch=transformer,model.d_model=128,model.d_ff=512,model.decoder_layers=2",
)


def parse_row(text: str) -> tuple[str, g2p.Config]:
    """``NAME=key=value,key=value`` as (name, the recipe's default config with those assignments)."""
    name, _, assignments = text.partition("=")
    overrides = parse_assignments([a for a in assignments.split(",") if a])
    return name, apply_overrides(g2p.Config(), overrides, source=f"--row {name}")


def training_steps(config: g2p.Config, batches: list, letters: int, phonemes: Vocabulary) -> Callable[[], None]:
    """One call trains ``config``'s model (seeded) on every batch in turn, as the recipe's step does."""
    torch.manual_seed(0)
    model_config = config.model.model_config(src_vocab_size=letters, tgt_vocab_size=len(phonemes))
    model = config.model.model_class(model_config).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=config.train.betas)

    def run() -> None:
        for batch in batches:
            loss = scheduled_sampling_loss(
                model,
                batch,
                teacher_forcing=1.0,
                two_pass=False,
                pad_id=phonemes.pad_id,
                label_smoothing=config.model.label_smoothing,
            ).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.train.clip_norm)
            optimizer.step()

    run.parameters = sum(p.numel() for p in model.parameters())  # type: ignore[attr-defined]
    return run


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--row", action="append", help="NAME=key=value,... (repeatable; default: three Transformers)")
    parser.add_argument("--batches", type=int, default=8, help="batches per round (each row trains on all of them)")
    parser.add_argument("--repeats", type=int, default=10, help="timed rounds (median and quartiles are shown)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's choice)")
    args = parser.parse_args()
    for name in ("batches", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    return args


def main() -> None:
    args = parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    rows = [("rnn", g2p.Config()), *(parse_row(r) for r in args.row or DEFAULT_ROWS)]
    train_set = load_splits(g2p.Config().data)[0]
    letters = Vocabulary.build(list(p.word) for p in train_set)
    phonemes = Vocabulary.build(p.phonemes for p in train_set)
    pairs = [(letters.encode(list(p.word)), phonemes.encode(p.phonemes)) for p in train_set]
    runs = []
    for _, config in rows:
        generator = torch.Generator().manual_seed(0)
        stream = batch_iterator(
            pairs,
            batch_size=config.train.batch_size,
            shuffle=True,
            generator=generator,
            batch_type=config.train.batch_type,
        )
        batches = [next(stream) for _ in range(args.batches)]
        runs.append(training_steps(copy.deepcopy(config), batches, len(letters), phonemes))
    seconds: list[list[float]] = [[] for _ in runs]
    for i in range(1 + args.repeats):
        order = range(len(runs)) if i % 2 == 0 else reversed(range(len(runs)))
        for r in order:
            start = time.perf_counter()
            runs[r]()
            if i > 0:
                seconds[r].append((time.perf_counter() - start) / args.batches)
    print(f"torch {torch.__version__}, cpu, {torch.get_num_threads()} CPU threads; {args.batches} batches a round")
    print(f"{args.repeats} rounds; median [interquartile range]; ratio = row time / RNN time of the same round\n")
    header = f"{'row':<20} {'parameters':>10} {'batch':>6} {'ms/step':>8} {'ratio':>6} {'ratio IQR':>10}"
    print(header)
    print("-" * len(header))
    for (name, config), run, row in zip(rows, runs, seconds, strict=True):
        ms, _, _ = median_and_iqr([1000 * s for s in row])
        ratio, r1, r3 = median_and_iqr([s / ref for s, ref in zip(row, seconds[0], strict=True)])
        print(
            f"{name:<20} {run.parameters:>10,} {config.train.batch_size:>6} {ms:>8.1f} {ratio:>5.2f}x "
            f"{f'{r1:.2f}-{r3:.2f}':>10}",
            flush=True,
        )


if __name__ == "__main__":
    main()
