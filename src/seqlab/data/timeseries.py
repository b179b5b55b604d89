"""Multivariate time-series classification data: ``.ts`` files (the UCR/UEA archive format) read through aeon.

``aeon`` is an optional dependency (``pip install 'seqlab[timeseries]'``); it reads the format and ships small
archive datasets, among them UCI Japanese Vowels (Kudo et al. 1999): 640 utterances of /ae/ by 9 speakers, 12 LPC
cepstrum coefficients per frame, 7 to 29 frames (270 train, 370 test).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from seqlab.data.files import TextFormat, check_regular_file, iter_lines
from seqlab.errors import ConfigError, DataError

AEON_HINT = "the time-series recipes need aeon: pip install 'seqlab[timeseries]'"
MAX_LINE_CHARS = 1_000_000  # a .ts line holds one whole series (every channel)
TS_FILE = TextFormat("a .ts file (UCR/UEA archive)", max_line_chars=MAX_LINE_CHARS, suffix=".ts")
MAX_SERIES_LENGTH = 10_000  # time steps of one series (Japanese Vowels has at most 29)


class SeriesDataset(NamedTuple):
    """series: list of (T_i, C) float arrays (time first); labels: their class names, as strings."""

    series: list[np.ndarray]
    labels: list[str]


class SeriesBatch(NamedTuple):
    """x (B, T, C) float, zero past each length; lengths (B,); targets (B,) class ids; indices (B,) dataset rows."""

    x: Tensor
    lengths: Tensor
    targets: Tensor
    indices: Tensor


def read_ts_file(
    path: str | os.PathLike[str],
    *,
    labelled: bool = True,
    max_line_chars: int = MAX_LINE_CHARS,
    max_series_length: int = MAX_SERIES_LENGTH,
) -> SeriesDataset:
    """Read a classification ``.ts`` file (equal or unequal length) with aeon's reader.

    The file is first streamed line by line (``seqlab.data.files.iter_lines``): it must be a regular file of
    strict UTF-8 text whose lines have at most ``max_line_chars`` characters, so a FIFO, a device, a stray byte
    or a runaway line is one clear error before aeon reads anything.

    Args:
        path: a file named ``*.ts`` (aeon reads ``NAME.ts`` when given ``NAME``, so other names are refused).
        labelled: require a class label on every series; with False, ``labels`` may be empty.
        max_line_chars: the longest line (one series) accepted, in characters.
        max_series_length: the most time steps a series may have.
    Raises:
        ConfigError: aeon is not installed.
        DataError: the file is missing, not a regular file or not named .ts, not UTF-8 text, has a line over
            ``max_line_chars``, is not a valid .ts file, holds no series, lacks labels when ``labelled``, has
            missing values, or a series longer than ``max_series_length``.
    """
    try:
        from aeon.datasets import load_from_ts_file
    except ImportError:
        raise ConfigError(AEON_HINT) from None
    path = Path(path)
    check_regular_file(path, expected="a .ts file")
    if path.suffix != TS_FILE.suffix:
        raise DataError(f"{path}: expected a .ts file (the UCR/UEA archive format)")
    for _ in iter_lines(path, max_line_chars=max_line_chars, expected="a .ts file"):
        pass
    try:
        X, y = load_from_ts_file(str(path), return_type="np-list")
    except Exception as e:  # aeon raises IOError, ValueError, TypeError, ... for malformed files
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(f"{path}: not a valid .ts classification file ({message})") from None
    if len(X) == 0:
        raise DataError(f"{path}: not a valid .ts classification file (no series after @data)")
    if labelled and len(y) != len(X):
        raise DataError(f"{path}: the series have no class labels (@classLabel false)")
    series = [np.asarray(x, dtype=np.float32).T for x in X]  # aeon gives (C, T_i); seqlab is time first
    for i, s in enumerate(series):
        if not np.isfinite(s).all():
            raise DataError(f"{path}: series {i + 1} has missing or non-finite values")
        if len(s) > max_series_length:
            raise DataError(
                f"{path}: series {i + 1} has {len(s)} steps, more than max_series_length ({max_series_length})"
            )
    return SeriesDataset(series, [str(label) for label in y])


def japanese_vowels_paths() -> tuple[Path, Path]:
    """The train and test ``.ts`` files of Japanese Vowels bundled with aeon (no download).

    Raises:
        ConfigError: aeon is not installed.
    """
    try:
        import aeon.datasets
    except ImportError:
        raise ConfigError(AEON_HINT) from None
    folder = Path(aeon.datasets.__file__).parent / "data" / "JapaneseVowels"
    return folder / "JapaneseVowels_TRAIN.ts", folder / "JapaneseVowels_TEST.ts"


def channel_statistics(series: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and standard deviation (C,) over every frame of every series (std 1 where it is 0)."""
    frames = np.concatenate(series, axis=0)  # (sum T_i, C)
    std = frames.std(axis=0)
    return frames.mean(axis=0), np.where(std > 0, std, 1.0)


def series_batches(
    series: Sequence[np.ndarray],
    targets: Sequence[int],
    *,
    batch_size: int,
    shuffle: bool,
    generator: torch.Generator | None = None,
) -> Iterator[SeriesBatch]:
    """Padded batches of (T_i, C) series in dataset order, or shuffled with ``generator``; every series once."""
    order = torch.randperm(len(series), generator=generator) if shuffle else torch.arange(len(series))
    for start in range(0, len(series), batch_size):
        rows = order[start : start + batch_size]
        chosen = [torch.from_numpy(np.ascontiguousarray(series[i])) for i in rows.tolist()]
        lengths = torch.tensor([len(s) for s in chosen])
        x = torch.nn.utils.rnn.pad_sequence(chosen, batch_first=True)  # (B, T, C)
        yield SeriesBatch(x, lengths, torch.tensor([targets[i] for i in rows.tolist()]), rows)
