"""The series of a ``forecast`` run: read, split in time order and standardised with the training part's statistics."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from seqlab.data.forecasting import Scaler, Series, chronological_splits, load_series, read_series, seasonal_naive_scale
from seqlab.errors import DataError
from seqlab.recipes.forecast.config import DataConfig


class Prepared(NamedTuple):
    """The series (original units), its standardised values (T, C), the split, the scaler and MASE's scale (C,)."""

    series: Series
    scaled: np.ndarray
    valid_start: int
    test_start: int
    scaler: Scaler
    mase_scale: np.ndarray


def prepare_series(config: DataConfig) -> Prepared:
    """Read, split and standardise the series; check that L and H fit.

    Raises:
        DataError: the file is unusable, or a part is too short for one window of L + H steps.
    """
    if config.path is None:
        series = load_series(config.series, lorenz_steps=config.lorenz_steps)
    else:
        values = read_series(config.path)
        series = Series(values, tuple(f"y{c + 1}" for c in range(values.shape[1])), config.season or 1, 1.0)
    L, H = config.window
    splits = chronological_splits(
        len(series.values), valid_fraction=config.valid_fraction, test_fraction=config.test_fraction
    )
    source = config.path or config.series
    if splits.valid_start < L + H:
        raise DataError(f"{source}: the training part ({splits.valid_start} steps) is shorter than L + H ({L + H})")
    for part, start, stop in (
        ("valid", splits.valid_start, splits.test_start),
        ("test", splits.test_start, splits.length),
    ):
        if stop - start < H:
            raise DataError(f"{source}: the {part} part ({stop - start} steps) is shorter than the horizon H ({H})")
    train = series.values[: splits.valid_start]
    scaler = Scaler.fit(train)
    scale = seasonal_naive_scale(train, series.season)
    return Prepared(series, scaler.transform(series.values), splits.valid_start, splits.test_start, scaler, scale)
