"""Forecasting data: the statsmodels series, the Lorenz-63 simulation, chronological splits, windows, scaling."""

import numpy as np
import pytest

from seqlab.data.forecasting import Scaler, chronological_splits, load_series, lorenz63, window_origins, windows


def test_statsmodels_series_have_their_documented_lengths():
    assert [len(load_series(name).values) for name in ("sunspots", "co2", "elnino")] == [309, 526, 732]
    assert not np.isnan(load_series("co2").values).any()


def test_lorenz_satisfies_its_equations():
    s = lorenz63(200)
    derivative = (s[2:] - s[:-2]) / 0.02  # central difference
    x, y, z = s[1:-1].T
    expected = np.stack([10 * (y - x), x * (28 - z) - y, x * y - 8 / 3 * z], axis=1)
    assert np.abs(derivative - expected).max() < 0.05 * np.abs(expected).max()


def test_windows_are_chronological_and_the_scaler_sees_only_training_data():
    values = np.arange(100.0)[:, None]
    splits = chronological_splits(100, valid_fraction=0.15, test_fraction=0.15)
    assert splits == (70, 85, 100)
    origins = window_origins(85, 100, input_length=10, horizon=3)
    inputs, targets = windows(values, origins, input_length=10, horizon=3)
    assert origins[0] == 85 and origins[-1] == 97
    assert inputs[0, :, 0].tolist() == list(range(75, 85)) and targets[-1, :, 0].tolist() == [97, 98, 99]
    assert Scaler.fit(values[:70]).mean[0] == pytest.approx(34.5)
