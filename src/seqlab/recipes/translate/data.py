"""Parallel text for ``translate``: two line-aligned files (line i of one translates line i of the other) and the
deterministic train / valid / test split of the data section."""

from __future__ import annotations

import random
from typing import NamedTuple

from seqlab.data.files import iter_lines
from seqlab.errors import DataError
from seqlab.recipes.translate.config import SENTENCES, DataConfig

MISSING_DATA = "the translate recipe needs parallel text: --set data.src=FILE data.tgt=FILE (one sentence a line)"


class Parallel(NamedTuple):
    """Aligned source and target sentences: ``tgt[i]`` translates ``src[i]``."""

    src: list[str]
    tgt: list[str]

    def pick(self, rows: list[int]) -> Parallel:
        """The pairs at ``rows``, in that order."""
        return Parallel([self.src[i] for i in rows], [self.tgt[i] for i in rows])


def read_parallel(src_path: str, tgt_path: str) -> Parallel:
    """The sentence pairs of two line-aligned files in the ``SENTENCES`` format.

    Raises:
        DataError: as ``seqlab.data.files.iter_lines`` (a missing, binary or non-UTF-8 file, a line too long), the
            files are empty, their line counts differ, or a line is blank.
    """
    sides = []
    for path in (src_path, tgt_path):
        lines = iter_lines(path, max_line_chars=SENTENCES.max_line_chars, expected=SENTENCES.description)
        sides.append([line for _, line in lines])
        if not sides[-1]:
            raise DataError(f"{path}: empty file")
    src, tgt = sides
    if len(src) != len(tgt):
        raise DataError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; they must be line-aligned")
    for path, lines in ((src_path, src), (tgt_path, tgt)):
        blank = next((i for i, line in enumerate(lines, start=1) if not line.strip()), None)
        if blank is not None:
            raise DataError(f"{path}:{blank}: blank line; every line must hold a sentence")
    return Parallel(src, tgt)


def load_splits(config: DataConfig) -> tuple[Parallel, Parallel, Parallel]:
    """Train, valid and test pairs: data.valid_src/_tgt and data.test_src/_tgt where given, else a fraction of the
    pairs of data.src/data.tgt, shuffled with data.split_seed; the training pairs are the rest.

    Raises: DataError if data.src or data.tgt is not given, for a bad file (``read_parallel``), or an empty split.
    """
    if config.src is None or config.tgt is None:
        raise DataError(MISSING_DATA)
    pool = read_parallel(config.src, config.tgt)
    order = list(range(len(pool.src)))
    random.Random(config.split_seed).shuffle(order)
    n_valid = 0 if config.valid_src else round(len(order) * config.valid_fraction)
    n_test = 0 if config.test_src else round(len(order) * config.test_fraction)
    train = pool.pick(order[n_valid + n_test :])
    valid = read_parallel(config.valid_src, config.valid_tgt) if config.valid_src else pool.pick(order[:n_valid])
    test = read_parallel(config.test_src, config.test_tgt) if config.test_src else pool.pick(order[n_valid:][:n_test])
    for name, part in (("train", train), ("valid", valid), ("test", test)):
        if not part.src:
            raise DataError(f"the {name} split is empty; give data.{name}_src/_tgt or more lines")
    return train, valid, test
