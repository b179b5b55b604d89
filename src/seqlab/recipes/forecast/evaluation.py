"""Scores, baselines and the plot of the ``forecast`` recipe (its test report and ``evaluate``).

Scores over every test window, horizon step and channel, in the series' own units:
RMSE = sqrt(mean (y_hat - y)^2), MAE = mean |y_hat - y|, and MASE = the mean over channels of MAE_c / q_c, q_c the
in-sample MAE of the seasonal naive forecast on the training part (Hyndman & Koehler, 2006, eq. 8; < 1 beats it).
Valid prediction time (Pathak et al., 2018; Vlachas et al., 2020): the first time the normalised error
sqrt(mean_c ((y_hat_c - y_c) / sigma_c)^2) of a free-running forecast exceeds a threshold, in Lyapunov times
(time units * largest Lyapunov exponent), averaged over the windows.

Baselines: persistence (y_hat_{o+h} = y_{o-1}); seasonal naive (y_hat_{o+h} = y at the same phase of the last
season of the window); and a (seasonal) ARIMA from statsmodels whose parameters are fitted once, by maximum
likelihood on the training part, then run without refitting over the whole series (one Kalman filter pass,
``SARIMAXResults.apply``), and forecast dynamically from each test origin (``get_prediction(dynamic=True)``: the
forecast of step o + h uses the observations before o only): cheap, and exactly the forecast from the origin.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from seqlab.analysis.chaos import valid_steps
from seqlab.analysis.figures import new_figure, save_figure
from seqlab.errors import DataError


def forecast_scores(forecast: np.ndarray, truth: np.ndarray, scale: np.ndarray) -> dict[str, float]:
    """RMSE, MAE (units of the series) and MASE of ``forecast`` against ``truth``, both (B, H, C); ``scale``: (C,)
    MASE denominators (``seqlab.data.forecasting.seasonal_naive_scale``)."""
    error = forecast - truth
    mae_per_channel = np.abs(error).reshape(-1, error.shape[-1]).mean(axis=0)
    return {
        "rmse": float(np.sqrt((error**2).mean())),
        "mae": float(np.abs(error).mean()),
        "mase": float((mae_per_channel / scale).mean()),
    }


def persistence(inputs: np.ndarray, horizon: int) -> np.ndarray:
    """(B, H, C): the last value of each window ``inputs`` (B, L, C), repeated."""
    return np.repeat(inputs[:, -1:], horizon, axis=1)


def seasonal_naive(inputs: np.ndarray, horizon: int, season: int) -> np.ndarray:
    """(B, H, C): y_hat_{o+h} = y_{o+h-m(floor(h/m)+1)} (h = 0..H-1), the same phase of the window's last season.

    Raises:
        DataError: the window is shorter than the season m.
    """
    L = inputs.shape[1]
    if season > L:
        raise DataError(f"the window ({L} steps) must cover the season ({season}) for the seasonal naive forecast")
    h = np.arange(horizon)
    return inputs[:, L + h - season * (h // season + 1)]


def arima_forecasts(
    values: np.ndarray,
    train_end: int,
    origins: np.ndarray,
    *,
    horizon: int,
    order: tuple[int, int, int],
    seasonal_order: tuple[int, int, int, int],
) -> np.ndarray:
    """(B, H, C): the fitted-once SARIMA forecasts (module docstring) from each origin (B,) of ``values`` (T, C),
    one model per channel, its parameters fitted on ``values[:train_end]``."""
    # Imported here: statsmodels takes seconds to import, and every seqlab command imports the registered recipes.
    from statsmodels.tsa.statespace.sarimax import SARIMAX

    trend = "c" if order[1] == 0 and seasonal_order[1] == 0 else "n"
    out = np.empty((len(origins), horizon, values.shape[1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence and frequency notes of statsmodels; the scores judge the fit
        for c in range(values.shape[1]):
            model = SARIMAX(values[:train_end, c], order=order, seasonal_order=seasonal_order, trend=trend)
            filtered = model.fit(disp=False).apply(values[:, c])
            for i, o in enumerate(origins):
                out[i, :, c] = filtered.get_prediction(start=o, end=o + horizon - 1, dynamic=True).predicted_mean
    return out


def valid_prediction_time(
    forecast: np.ndarray, truth: np.ndarray, *, threshold: float, dt: float, lyapunov_exponent: float
) -> float:
    """Mean valid prediction time in Lyapunov times of free-running forecasts (B, S, C) against ``truth`` (B, S, C),
    both standardised per channel; a window that never exceeds ``threshold`` counts S steps."""
    error = np.sqrt(((forecast - truth) ** 2).mean(axis=-1))  # (B, S)
    return float(valid_steps(error, threshold).mean() * dt * lyapunov_exponent)


def plot_forecasts(
    path: Path,
    inputs: np.ndarray,
    truth: np.ndarray,
    forecasts: dict[str, np.ndarray],
    *,
    channels: Sequence[str],
    title: str,
) -> None:
    """Write a PNG: one row per window (at most 3) and one column per channel (at most 3), the window's inputs and
    truth against each forecast; ``inputs`` (B, L, C), ``truth`` and every forecast (B, H, C)."""
    rows, cols = min(3, len(inputs)), min(3, inputs.shape[2])
    picks = np.linspace(0, len(inputs) - 1, rows).round().astype(int)
    figure = new_figure(figsize=(4.5 * cols, 2.6 * rows))
    axes = figure.subplots(rows, cols, squeeze=False)
    L, H = inputs.shape[1], truth.shape[1]
    for r, b in enumerate(picks):
        for c in range(cols):
            ax = axes[r, c]
            ax.plot(range(L), inputs[b, :, c], color="0.5", label="input")
            ax.plot(range(L, L + H), truth[b, :, c], color="black", label="truth")
            for name, forecast in forecasts.items():
                ax.plot(range(L, L + H), forecast[b, :, c], label=name)
            ax.set_title(f"test window {b + 1}, {channels[c]}", fontsize=9)
    axes[0, 0].legend(fontsize=7)
    figure.suptitle(title)
    figure.tight_layout()
    save_figure(figure, path, dpi=90)
