"""The training run of the ``forecast`` recipe: windows of the standardised series, mean squared error, and the
test report (scores beside the baselines, the Lorenz valid prediction time, ``forecast.png``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from seqlab.data.forecasting import LORENZ_LYAPUNOV, window_origins, windows
from seqlab.errors import DataError
from seqlab.models.forecaster import Forecaster
from seqlab.recipes.base import Report, TrainingRun, model_device
from seqlab.recipes.forecast.config import Config
from seqlab.recipes.forecast.data import Prepared, prepare_series
from seqlab.recipes.forecast.evaluation import (
    arima_forecasts,
    forecast_scores,
    persistence,
    plot_forecasts,
    seasonal_naive,
    valid_prediction_time,
)
from seqlab.recipes.forecast.system import ForecastSystem
from seqlab.training.objectives import mse_loss

PLOT_FILE = "forecast.png"


class Windows(NamedTuple):
    """Windows of the standardised series: inputs x (B, L, C) and the next H targets y (B, H, C)."""

    x: torch.Tensor
    y: torch.Tensor


def standardised_windows(data: Prepared, origins: np.ndarray, *, input_length: int, horizon: int) -> Windows:
    """The float32 windows of ``data.scaled`` at ``origins`` (B,)."""
    x, y = windows(data.scaled, origins, input_length=input_length, horizon=horizon)
    return Windows(torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32))


@dataclass
class ForecastTraining:
    """The parts of a forecast run (``prepare``): the system being trained, its series and windows.

    Attributes:
        system: the model with the training part's scaling.  data: the series, split and standardised.
        train, valid: the training and validation windows.  test_origins: (B,) the test windows' first targets.
        directory: where the run was last saved (``save``), for the plot the test writes beside the model.
    """

    system: ForecastSystem
    data: Prepared
    train: Windows
    valid: Windows
    test_origins: np.ndarray
    directory: Path | None = field(default=None)

    @classmethod
    def build(cls, config: Config) -> ForecastTraining:
        """Read the series and build the untrained model and the windows of ``config``.

        Raises: DataError for an unusable series file, or L + H too long for the series' parts.
        """
        data = prepare_series(config.data)
        (L, H), C = config.data.window, data.scaled.shape[1]
        model = Forecaster(config.model.model_config(channels=C, horizon=H, residual=config.data.residual))
        system = ForecastSystem(model, data.scaler, data.mase_scale, data.series.season, config)
        sizes = dict(input_length=L, horizon=H)
        train = standardised_windows(data, window_origins(L, data.valid_start, **sizes), **sizes)
        valid = standardised_windows(data, window_origins(data.valid_start, data.test_start, **sizes), **sizes)
        stride = config.data.test_stride or config.data.defaults.test_stride
        return cls(
            system, data, train, valid, window_origins(data.test_start, len(data.scaled), **sizes, stride=stride)
        )

    def train_batches(self, epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[Windows]:
        """The training windows in shuffled batches of ``batch_size``."""
        order = torch.randperm(len(self.train.x), generator=generator)
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            yield Windows(self.train.x[rows], self.train.y[rows])

    @torch.no_grad()
    def validate(self, model: nn.Module) -> dict[str, float]:
        """``valid_loss``: the mean squared error on the validation windows (standardised units)."""
        device = model_device(model)
        return {"valid_loss": mse_loss(model, Windows(self.valid.x.to(device), self.valid.y.to(device))).loss.item()}

    def save(self, directory: Path) -> None:
        """Save the system into ``directory`` and remember it for the test's plot."""
        self.system.save(directory)
        self.directory = directory

    def test(self) -> Report:
        """The test report (``test_report``), its plot written where the run was saved.

        Raises: RuntimeError if the run was never saved.
        """
        if self.directory is None:
            raise RuntimeError("the forecast run is tested before it was saved: no directory for its plot")
        return test_report(self.system, self.data, self.test_origins, self.directory)

    def summary(self) -> str:
        """The data's part of the training log line."""
        data, (L, H) = self.data, self.system.model_window
        return (
            f"data: {self.system.config.data.source}, {len(data.scaled)} steps x {data.scaled.shape[1]} channels, "
            f"season {data.series.season}; L={L}, H={H}; {len(self.train.x)} train / {len(self.valid.x)} valid / "
            f"{len(self.test_origins)} test windows"
        )


def _receptive_field_note(model: Forecaster) -> str:
    """ " (receptive field R steps)" for a TCN encoder (the log line's model note), else nothing."""
    if model.config.encoder != "tcn":
        return ""
    return f" (receptive field {model.encoder.receptive_field} steps)"


def prepare(config: Config, *, resume_from: Path | None = None) -> TrainingRun:
    """Read and window the series and build the forecaster: the parts ``run_training`` trains, saves and tests
    (trained on the train part, the best validation MSE's model kept).

    Raises:
        DataError: an unusable series file, or L + H too long for the series' parts.
    """
    training = ForecastTraining.build(config)
    return TrainingRun(
        config,
        training.system.model,
        loss_fn=mse_loss,
        train_batches=training.train_batches,
        validate=training.validate,
        save=training.save,
        test=training.test,
        summary=training.summary(),
        summary_model=f"{config.model.arch} encoder{_receptive_field_note(training.system.model)}, "
        f"{config.model.head} head",
    )


def test_report(system: ForecastSystem, data: Prepared, origins: np.ndarray, directory: Path) -> Report:
    """Test scores of the model and the baselines (SARIMA with eval.arima), the Lorenz valid prediction time, and
    ``forecast.png`` in ``directory``; examples: the first channel of up to 5 test windows.

    Raises: DataError (lorenz) if the test part is shorter than eval.vpt_steps.
    """
    config = system.config
    L, H = system.model_window
    values = data.series.values
    results = system.score(values, origins)
    inputs, truth = windows(values, origins, input_length=L, horizon=H)
    forecasts = {"model": system.forecast(inputs), "seasonal naive": seasonal_naive(inputs, H, system.season)}
    if config.eval.arima:
        defaults = config.data.defaults
        arima = arima_forecasts(
            values, data.valid_start, origins, horizon=H, order=defaults.order, seasonal_order=defaults.seasonal_order
        )
        results |= {f"arima_{k}": v for k, v in forecast_scores(arima, truth, system.mase_scale).items()}
        forecasts["SARIMA"] = arima
    if config.data.path is None and config.data.series == "lorenz":
        results |= lorenz_prediction_times(system, data)
    title = f"{config.data.source}: {config.model.arch} ({config.model.head}), H={H}"
    plot_forecasts(directory / PLOT_FILE, inputs, truth, forecasts, channels=data.series.channels, title=title)
    examples = [
        (
            f"window ending {o - 1}",
            " ".join(f"{v:.4g}" for v in truth[i, :, 0]),
            " ".join(f"{v:.4g}" for v in forecasts["model"][i, :, 0]),
        )
        for i, o in list(enumerate(origins))[:: max(1, len(origins) // 5)][:5]
    ]
    return Report(results, examples)


def lorenz_prediction_times(system: ForecastSystem, data: Prepared) -> dict[str, float]:
    """``vpt_lyapunov`` and ``persistence_vpt_lyapunov``: the valid prediction times (Lyapunov times) of the
    model's free-running forecasts of eval.vpt_steps steps from test origins eval.vpt_stride apart, and of
    persistence.

    Raises: DataError if the test part is shorter than eval.vpt_steps.
    """
    config, values, L = system.config, data.series.values, system.model_window[0]
    steps = config.eval.vpt_steps
    far = window_origins(data.test_start, len(values), input_length=L, horizon=steps, stride=config.eval.vpt_stride)
    if len(far) == 0:
        raise DataError(f"lorenz: the test part is shorter than eval.vpt_steps ({steps})")
    past, future = windows(values, far, input_length=L, horizon=steps)
    vpt = dict(threshold=config.eval.vpt_threshold, dt=data.series.dt, lyapunov_exponent=LORENZ_LYAPUNOV)
    scaled_future = system.scaler.transform(future)
    free_running = system.scaler.transform(system.forecast(past, steps=steps))
    return {
        "vpt_lyapunov": valid_prediction_time(free_running, scaled_future, **vpt),
        "persistence_vpt_lyapunov": valid_prediction_time(
            system.scaler.transform(persistence(past, steps)), scaled_future, **vpt
        ),
    }
