"""Series for forecasting: the statsmodels datasets, a simulated Lorenz-63 system, text files; chronological
splits, training-only scaling and sliding windows.

Shapes: a series is (T, C) float64 (time first, C channels). A window pairs L past steps with the H next ones.

Series (``load_series``), each with its season m (the period of the seasonal naive forecast and of MASE's scale):

- ``sunspots``: yearly mean sunspot numbers 1700-2008 (309 values, statsmodels), m = 11 (the solar cycle).
- ``co2``: Mauna Loa atmospheric CO2 (ppmv), weekly 1958-2001 (statsmodels), averaged by calendar month and the
  empty months filled by linear interpolation (526 values), m = 12.
- ``elnino``: monthly Nino 1+2 sea-surface temperatures (deg C) 1950-2010 (732 values, statsmodels), m = 12.
- ``lorenz``: dx/dt = sigma (y - x), dy/dt = x (rho - z) - y, dz/dt = x y - beta z (Lorenz, 1963) with
  sigma = 10, rho = 28, beta = 8/3, integrated by scipy's RK45 (rtol 1e-9) from (1, 1, 1) and sampled every 0.01
  time units after a transient of 10 units; C = 3, m = 1 (no season: the seasonal naive forecast is persistence).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np
from scipy.integrate import solve_ivp

from seqlab.data.files import Column, TableFormat, read_table
from seqlab.errors import DataError

SERIES_NAMES = ("sunspots", "co2", "elnino", "lorenz")
# A series file: one time step a line, its C channels' values separated by commas or whitespace.
SERIES = TableFormat("series lines: C numbers a step", (Column("VALUE", float),), separator=r"[,\s]+", repeated=True)
LORENZ_PARAMETERS = (10.0, 28.0, 8.0 / 3.0)  # sigma, rho, beta: the chaotic regime of Lorenz (1963)
LORENZ_LYAPUNOV = 0.906  # largest Lyapunov exponent at those parameters (1 / time unit; Sprott, 2003)
LORENZ_TRANSIENT = 10.0  # time units discarded so the samples lie on the attractor


class Series(NamedTuple):
    """values (T, C) float64; channels: C names; season: m, steps per season; dt: time units per step."""

    values: np.ndarray
    channels: tuple[str, ...]
    season: int
    dt: float


class Splits(NamedTuple):
    """Split points in time: train [0, valid_start), valid [valid_start, test_start), test [test_start, length)."""

    valid_start: int
    test_start: int
    length: int


class Scaler(NamedTuple):
    """Per-channel standardisation z = (y - mean) / std, both (C,), fitted on the training part only."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, values: np.ndarray) -> Scaler:
        std = values.std(axis=0)
        return cls(values.mean(axis=0), np.where(std > 0, std, 1.0))

    def transform(self, values: np.ndarray) -> np.ndarray:
        return (values - self.mean) / self.std

    def inverse(self, values: np.ndarray) -> np.ndarray:
        return values * self.std + self.mean


def lorenz63(steps: int, *, dt: float = 0.01) -> np.ndarray:
    """(steps, 3) states (x, y, z) of the Lorenz-63 system every ``dt`` time units (module docstring)."""
    sigma, rho, beta = LORENZ_PARAMETERS

    def rhs(_t: float, s: np.ndarray) -> list[float]:
        x, y, z = s
        return [sigma * (y - x), x * (rho - z) - y, x * y - beta * z]

    times = LORENZ_TRANSIENT + dt * np.arange(steps)
    solution = solve_ivp(rhs, (0.0, times[-1]), [1.0, 1.0, 1.0], t_eval=times, rtol=1e-9, atol=1e-9)
    return solution.y.T


def load_series(name: str, *, lorenz_steps: int = 6000) -> Series:
    """The series called ``name`` (one of ``SERIES_NAMES``; module docstring), from statsmodels or simulated.

    Raises:
        DataError: an unknown name.
    """
    # Imported here: statsmodels takes seconds to import, and every seqlab command imports this module (the
    # recipes' configs name its series).
    from statsmodels import datasets

    if name == "sunspots":
        data = datasets.sunspots.load_pandas().data
        return Series(data["SUNACTIVITY"].to_numpy(float)[:, None], ("sunactivity",), 11, 1.0)
    if name == "co2":
        weekly = datasets.co2.load_pandas().data["co2"]
        monthly = weekly.resample("MS").mean().interpolate("linear")
        return Series(monthly.to_numpy(float)[:, None], ("co2",), 12, 1.0)
    if name == "elnino":
        data = datasets.elnino.load_pandas().data
        return Series(data.drop(columns="YEAR").to_numpy(float).reshape(-1, 1), ("sst",), 12, 1.0)
    if name == "lorenz":
        return Series(lorenz63(lorenz_steps), ("x", "y", "z"), 1, 0.01)
    raise DataError(f"unknown series {name!r}; available: {', '.join(SERIES_NAMES)}")


def read_series(path: str | os.PathLike[str], *, channels: int | None = None) -> np.ndarray:
    """(T, C) values of a text file in the ``SERIES`` format: one time step a line, C numbers separated by commas
    or whitespace, read by the guarded reader (``seqlab.data.files.read_table``).

    Raises:
        DataError: as ``read_table`` (a missing, binary or non-UTF-8 file, a value that is not a finite number,
            lines that differ in C, each naming the file and line), the file is empty, or C differs from
            ``channels``.
    """
    rows = [values for _, values in read_table(path, SERIES)]
    if not rows:
        raise DataError(f"{path}: empty file")
    values = np.asarray(rows, dtype=float)
    if channels is not None and values.shape[1] != channels:
        raise DataError(f"{path}: {values.shape[1]} values a line, but the model forecasts {channels} channels")
    return values


def chronological_splits(length: int, *, valid_fraction: float, test_fraction: float) -> Splits:
    """The last ``test_fraction`` of ``length`` steps for testing, the ``valid_fraction`` before it for validation."""
    test_start = length - round(length * test_fraction)
    return Splits(test_start - round(length * valid_fraction), test_start, length)


def window_origins(start: int, stop: int, *, input_length: int, horizon: int, stride: int = 1) -> np.ndarray:
    """Forecast origins o (the first predicted step) with targets [o, o + H) inside [start, stop) and the L inputs
    [o - L, o) inside the series (they may reach back before ``start``), every ``stride`` steps."""
    return np.arange(max(start, input_length), stop - horizon + 1, stride)


def windows(values: np.ndarray, origins: np.ndarray, *, input_length: int, horizon: int) -> tuple[np.ndarray, ...]:
    """(inputs (B, L, C), targets (B, H, C)) of ``values`` (T, C) at ``origins`` (B,)."""
    past = origins[:, None] + np.arange(-input_length, 0)
    future = origins[:, None] + np.arange(horizon)
    return values[past], values[future]


def seasonal_naive_scale(train: np.ndarray, season: int) -> np.ndarray:
    """(C,) in-sample MAE of the seasonal naive forecast y_t = y_{t-m} on the training part: MASE's denominator
    (Hyndman & Koehler, 2006, eq. 8).

    Raises:
        DataError: the training part has no more than m steps, or a channel is constant (the scale is 0).
    """
    if len(train) <= season:
        raise DataError(f"the training part ({len(train)} steps) must be longer than the season ({season})")
    scale = np.abs(train[season:] - train[:-season]).mean(axis=0)
    if (scale == 0).any():
        raise DataError("a channel is constant over the training part; MASE is undefined")
    return scale
