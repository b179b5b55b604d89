"""Labelled short texts (names, sentences) for classification: a TSV reader, a stratified split and sample, padded
batches.

The file format is one example per line, ``TEXT<TAB>LABEL`` (``LABELLED_TEXT``, read by the guarded reader
``seqlab.data.files.read_table``); blank lines are skipped. Unlabelled input (``seqlab predict``) is one text per line.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from seqlab.data.files import Column, TableFormat, read_table
from seqlab.errors import DataError

LABELLED_TEXT = TableFormat("TEXT<TAB>LABEL lines", (Column("TEXT"), Column("LABEL")))


class LabelledText(NamedTuple):
    """One example: the text and its class label."""

    text: str
    label: str


class Splits(NamedTuple):
    """Train, valid and test examples."""

    train: list[LabelledText]
    valid: list[LabelledText]
    test: list[LabelledText]


class TokenBatch(NamedTuple):
    """x (B, T) long ids padded with ``pad_id`` after each row's tokens; lengths (B,); targets (B,) class ids;
    indices (B,): each row's position in the examples the batches were made from."""

    x: Tensor
    lengths: Tensor
    targets: Tensor
    indices: Tensor


def read_labelled_file(path: str | Path) -> list[LabelledText]:
    """The examples of a ``TEXT<TAB>LABEL`` file (``LABELLED_TEXT``).

    Raises:
        DataError: as ``seqlab.data.files.read_table`` (a missing, binary or non-UTF-8 file; a line without
            exactly two non-empty columns, naming the file and line), or the file holds no examples.
    """
    examples = [LabelledText(text, label) for _, (text, label) in read_table(path, LABELLED_TEXT)]
    if not examples:
        raise DataError(f"{path}: no examples")
    return examples


def stratified_split(
    examples: Sequence[LabelledText], *, valid_fraction: float, test_fraction: float, seed: int
) -> Splits:
    """Split each class alike: round(fraction * n_c) of class c's examples (shuffled with ``seed``) go to valid
    and to test, the rest to train; every list keeps the examples' original order.

    Raises:
        DataError: the train or valid split would be empty, or the test split with test_fraction > 0.
    """
    rng = random.Random(seed)
    parts: tuple[list[int], list[int], list[int]] = ([], [], [])
    for label in sorted({e.label for e in examples}):
        rows = [i for i, e in enumerate(examples) if e.label == label]
        rng.shuffle(rows)
        n_valid, n_test = round(valid_fraction * len(rows)), round(test_fraction * len(rows))
        parts[1].extend(rows[:n_valid])
        parts[2].extend(rows[n_valid : n_valid + n_test])
        parts[0].extend(rows[n_valid + n_test :])
    splits = Splits(*([examples[i] for i in sorted(rows)] for rows in parts))
    for name, part in zip(Splits._fields, splits, strict=True):
        if not part and (name != "test" or test_fraction > 0):
            raise DataError(f"the {name} split is empty: too few examples ({len(examples)}) for the fractions")
    return splits


def stratified_sample(examples: Sequence[LabelledText], size: int, *, seed: int) -> list[LabelledText]:
    """About ``size`` of the examples, each class alike: round(size * n_c / n) of class c's n_c examples (at
    least one), shuffled with ``seed``; the sample keeps the examples' original order. For learning curves: the
    same model trained on fewer labelled examples.

    Raises:
        DataError: ``size`` is below the number of classes or above the number of examples (both shown).
    """
    labels = sorted({e.label for e in examples})
    if not len(labels) <= size <= len(examples):
        raise DataError(
            f"cannot sample {size} of {len(examples)} examples in {len(labels)} classes: "
            f"the size must lie in [{len(labels)}, {len(examples)}]"
        )
    rng = random.Random(seed)
    kept: list[int] = []
    for label in labels:
        rows = [i for i, e in enumerate(examples) if e.label == label]
        rng.shuffle(rows)
        kept.extend(rows[: max(1, round(size * len(rows) / len(examples)))])
    return [examples[i] for i in sorted(kept)]


def token_batches(
    ids: Sequence[Sequence[int]],
    targets: Sequence[int],
    *,
    batch_size: int,
    pad_id: int,
    shuffle: bool,
    generator: torch.Generator | None = None,
) -> Iterator[TokenBatch]:
    """Batches of ``batch_size`` token-id sequences (the last may be smaller), shuffled by ``generator`` or in
    order; each batch is padded to its longest row."""
    order = torch.randperm(len(ids), generator=generator).tolist() if shuffle else list(range(len(ids)))
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        lengths = torch.tensor([len(ids[i]) for i in rows])
        x = torch.full((len(rows), int(lengths.max())), pad_id, dtype=torch.long)  # (B, T)
        for b, i in enumerate(rows):
            x[b, : len(ids[i])] = torch.tensor(ids[i], dtype=torch.long)
        yield TokenBatch(x, lengths, torch.tensor([targets[i] for i in rows]), torch.tensor(rows))
