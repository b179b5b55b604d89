"""The cost of one g2p training step for several settings against a reference row, measured in the same run: model
sizes and architectures (issue 25.1: "equal training time" is equal steps x this cost) and bf16 autocast against
float32.

    python benchmarks/g2p_training.py --threads 1                        # the default tables
    python benchmarks/g2p_training.py --threads 1 --tables precision --set train.batch_size=128
    python benchmarks/g2p_training.py --threads 1 --row "tiny=model.arch=transformer,model.d_model=64,model.d_ff=256"
    python benchmarks/g2p_training.py --threads 1 --row bf16=train.precision=bf16
    python benchmarks/g2p_training.py --batches 1 --repeats 1 --set train.batch_size=2   # smoke test, seconds

A row is a name and ``--set`` assignments over ``seqlab train g2p``'s defaults: any config key, such as
``model.arch=transformer``, ``train.batch_size=32`` or ``train.precision=bf16``. A table's first row is its
reference. ``--row`` gives a table ``rows`` whose reference is the recipe's default (``default``). The default tables
(``--tables``, all of them without ``--row``, those named with it) are:

- ``models``: the default RNN against three Transformers (the default size, d_model 64 and d_model 128);
- ``precision``: float32 against ``train.precision=bf16``, for the default model and for the one-hour preset
  (``configs/g2p-large.toml``, one table each, the preset's other settings as it gives them).

``--set`` assignments apply to every row, after the preset's file and before the row's own keys.

One step is the recipe's training step, as ``seqlab train g2p`` takes it: forward and the (label-smoothed)
cross-entropy of ``scheduled_sampling_loss`` with teacher forcing, under ``torch.autocast`` in bf16 when the row's
``train.precision`` says so (weights, gradients and Adam's moments stay float32), backward, clipping at the train
section's ``clip_norm``, and an Adam step. Every row trains on ``--batches`` batches of the recipe's training split
(CMUdict, bucketed by length and shuffled as the recipe draws them, ``train.batch_size`` pronunciations or tokens
each, the same seed for every row: rows of the same batch settings train on the same batches), in that order, from
the same seeded starting weights. A round runs every row of a table once over all its batches, the rows' order
reversed in odd rounds, after one warm-up round. The table shows each row's median milliseconds per step and words
per second, and its ratio to the reference: the median over rounds of the round's row time / reference time, with
the interquartile range. So a row of ratio r trains n / r steps in the time the reference trains n; bf16 at ratio
0.76x is 1.32x faster. The hardware decides the bf16 ratio: CPUs with AVX512-BF16 or AMX run bf16 matrix products
natively, others emulate them and are slower in bf16.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import torch
from timing import median_and_iqr, time_pair

from seqlab.config import apply_overrides, flatten, load_toml, parse_assignments
from seqlab.data.batching import Seq2SeqBatch, batch_iterator
from seqlab.data.pronunciations import load_splits
from seqlab.data.vocab import Vocabulary
from seqlab.errors import SeqlabError
from seqlab.recipes import g2p
from seqlab.training.device import autocast, check_precision
from seqlab.training.scheduled_sampling import scheduled_sampling_loss

PRESET = Path(__file__).resolve().parents[1] / "configs" / "g2p-large.toml"
CPU = torch.device("cpu")

Overrides = Mapping[str, Any]
TRANSFORMER = {"model.arch": "transformer"}


class Row(NamedTuple):
    """One row of a table: its name, a config file's settings (applied before ``--set``) and its own overrides."""

    name: str
    base: Overrides
    overrides: Overrides


def default_tables() -> dict[str, list[Row]]:
    """The tables run without ``--row``, by name, the reference row first."""
    preset = flatten(load_toml(PRESET))
    return {
        "models": [
            Row("rnn", {}, {}),
            Row("transformer", {}, TRANSFORMER),
            Row(
                "transformer_small",
                {},
                {**TRANSFORMER, "model.d_model": 64, "model.d_ff": 256, "model.decoder_layers": 2},
            ),
            Row(
                "transformer_128",
                {},
                {**TRANSFORMER, "model.d_model": 128, "model.d_ff": 512, "model.decoder_layers": 2},
            ),
        ],
        "precision": [
            Row("default", {}, {"train.precision": "fp32"}),
            Row("default_bf16", {}, {"train.precision": "bf16"}),
        ],
        "precision_preset": [
            Row("preset", preset, {"train.precision": "fp32"}),
            Row("preset_bf16", preset, {"train.precision": "bf16"}),
        ],
    }


TABLE_GROUPS = {"models": ("models",), "precision": ("precision", "precision_preset")}


def parse_row(text: str) -> Row:
    """``NAME=key=value,key=value`` as a row over the recipe's defaults.

    Raises:
        ConfigError: an assignment without ``=`` or a key given twice (``parse_assignments``).
    """
    name, _, assignments = text.partition("=")
    return Row(name, {}, parse_assignments([a for a in assignments.split(",") if a]))


def row_config(row: Row, common: Overrides) -> g2p.Config:
    """The recipe's default config with the row's ``base``, then ``common`` (``--set``), then the row's own
    overrides applied.

    Raises:
        ConfigError: a key the recipe lacks, a bad value, or a precision the CPU cannot train in (fp16).
    """
    config = apply_overrides(g2p.Config(), row.base, source=f"row {row.name}")
    config = apply_overrides(config, common, source="--set")
    config = apply_overrides(config, row.overrides, source=f"row {row.name}")
    check_precision(config.train.precision, CPU)
    return config


def training_steps(
    config: g2p.Config, batches: list[Seq2SeqBatch], letters: int, phonemes: Vocabulary
) -> Callable[[], None]:
    """One call trains ``config``'s model (seeded) on every batch in turn, as the recipe's step does."""
    torch.manual_seed(0)
    model_config = config.model.model_config(src_vocab_size=letters, tgt_vocab_size=len(phonemes))
    model = config.model.model_class(model_config).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=config.train.betas)
    clip_norm = math.inf if config.train.clip_norm is None else config.train.clip_norm

    def run() -> None:
        for batch in batches:
            with autocast(config.train.precision, CPU):
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
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
            optimizer.step()

    run.parameters = sum(p.numel() for p in model.parameters())  # type: ignore[attr-defined]
    return run


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--row", action="append", help="NAME=key=value,... (repeatable): one table against the default")
    parser.add_argument(
        "--tables",
        default=None,
        help=f"the default tables to run ({', '.join(TABLE_GROUPS)}; all without --row, none with it unless named)",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="applied to every row")
    parser.add_argument("--batches", type=int, default=8, help="batches per round (each row trains on all of them)")
    parser.add_argument("--repeats", type=int, default=10, help="timed rounds (median and quartiles are shown)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's choice)")
    args = parser.parse_args()
    for name in ("batches", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.tables is None:
        args.tables = "" if args.row else ",".join(TABLE_GROUPS)
    groups = [group for group in args.tables.split(",") if group]
    unknown = sorted(set(groups) - set(TABLE_GROUPS))
    if unknown:
        parser.error(f"--tables: unknown {', '.join(unknown)}; choose from {', '.join(TABLE_GROUPS)}")
    try:
        common = parse_assignments(args.set)
        defaults = default_tables()
        tables = {name: defaults[name] for group in groups for name in TABLE_GROUPS[group]}
        if args.row:
            tables["rows"] = [Row("default", {}, {}), *(parse_row(r) for r in args.row)]
        args.table_rows = {
            table: [(row.name, row_config(row, common)) for row in rows] for table, rows in tables.items()
        }
    except SeqlabError as error:
        parser.error(str(error))
    return args


def run_table(
    title: str,
    rows: list[tuple[str, g2p.Config]],
    args: argparse.Namespace,
    pairs: list,
    letters: int,
    phonemes: Vocabulary,
) -> None:
    """Time the rows of one table in alternating rounds and print them against the first."""
    runs, words = [], []
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
        runs.append(training_steps(config, batches, letters, phonemes))
        words.append(sum(b.src.shape[0] for b in batches))
    seconds = time_pair(runs, repeats=args.repeats, sync=lambda: None, clock=time.perf_counter)
    print(f"\nTable {title!r}: ratio = row time / {rows[0][0]} time of the same round")
    header = f"{'row':<20} {'parameters':>10} {'batch':>6} {'precision':>9} {'ms/step':>8} {'words/s':>8} "
    header += f"{'ratio':>6} {'ratio IQR':>10}"
    print(header)
    print("-" * len(header))
    for (name, config), run, row, count in zip(rows, runs, seconds, words, strict=True):
        ms, _, _ = median_and_iqr([1000 * s / args.batches for s in row])
        rate, _, _ = median_and_iqr([count / s for s in row])
        ratio, r1, r3 = median_and_iqr([s / ref for s, ref in zip(row, seconds[0], strict=True)])
        print(
            f"{name:<20} {run.parameters:>10,} {config.train.batch_size:>6} {config.train.precision:>9} {ms:>8.1f} "
            f"{rate:>8,.0f} {ratio:>5.2f}x {f'{r1:.2f}-{r3:.2f}':>10}",
            flush=True,
        )


def main() -> None:
    args = parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    train_set = load_splits(g2p.Config().data)[0]
    letters = Vocabulary.build(list(p.word) for p in train_set)
    phonemes = Vocabulary.build(p.phonemes for p in train_set)
    pairs = [(letters.encode(list(p.word)), phonemes.encode(p.phonemes)) for p in train_set]
    print(f"torch {torch.__version__}, cpu, {torch.get_num_threads()} CPU threads; {args.batches} batches a round")
    print(f"{args.repeats} rounds after one warm-up; median [interquartile range]; rows alternate their order by round")
    for title, rows in args.table_rows.items():
        run_table(title, rows, args, pairs, len(letters), phonemes)


if __name__ == "__main__":
    main()
