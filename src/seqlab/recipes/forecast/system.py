"""``ForecastSystem``: a trained forecaster with the scaling of its series, as a run directory holds it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, NamedTuple

import numpy as np
import torch

from seqlab.data.files import read_json_file
from seqlab.data.forecasting import Scaler, read_series, window_origins, windows
from seqlab.errors import CheckpointError, DataError
from seqlab.export import OnnxModel, load_onnx_model
from seqlab.files import atomic_write
from seqlab.models.forecaster import Forecaster, rollout
from seqlab.recipes.base import model_device
from seqlab.recipes.forecast.config import Config
from seqlab.recipes.forecast.data import prepare_series
from seqlab.recipes.forecast.evaluation import forecast_scores, persistence, seasonal_naive
from seqlab.recipes.saved_run import load_recipe_config
from seqlab.recipes.system import SystemOptions

SCALING_FILE = "scaling.json"
OWN_SERIES = "test"  # the input that ``predict`` reads as the run's own series (forecast from its end)


class Forecast(NamedTuple):
    """The forecast of the H steps after the end of one input.

    Attributes:
        source: the input (a series file, or ``test`` for the run's own series).
        values: (H, C), in the series' units.
    """

    source: str
    values: np.ndarray

    def lines(self) -> list[str]:
        """One line a step, counted from 1 after the input's last: ``SOURCE +h  VALUES`` (6 significant digits)."""
        return [f"{self.source} +{h + 1}  " + " ".join(f"{v:.6g}" for v in step) for h, step in enumerate(self.values)]


@dataclass
class ForecastSystem:
    """A trained forecaster with its scaling: what a run directory holds.

    Attributes:
        model: the forecaster, reading and forecasting standardised values.
        scaler: the per-channel mean and standard deviation of the training part.
        mase_scale: (C,), MASE's denominators (the seasonal naive in-sample MAE of the training part).
        season: m, of the seasonal naive baseline.
        config: the recipe config of the run (its window and series).
        onnx_model: what forecasts call instead of ``model``: the run's exported graph under onnxruntime
            (``--backend onnxruntime``, the one option), else None.
    """

    model: Forecaster
    scaler: Scaler
    mase_scale: np.ndarray
    season: int
    config: Config
    onnx_model: OnnxModel | None = None
    OPTIONS: ClassVar[frozenset[str]] = frozenset({"backend"})
    PREDICT_READS_FILES: ClassVar[bool] = True  # ``FileInputs``: predict's inputs are series files

    def save(self, directory: Path) -> None:
        """Write the model and ``scaling.json`` (``run_training`` adds ``recipe.json``)."""
        self.model.save_pretrained(directory)
        payload = {
            "mean": self.scaler.mean.tolist(),
            "std": self.scaler.std.tolist(),
            "mase_scale": self.mase_scale.tolist(),
            "season": self.season,
        }
        atomic_write(directory / SCALING_FILE, json.dumps(payload, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path, options: SystemOptions = SystemOptions()) -> ForecastSystem:
        """The run in ``directory``; with ``options.backend`` "onnxruntime", forecasts run its export in
        ``directory/onnx``.

        Raises:
            CheckpointError: (one line naming the file) for a missing or unreadable recipe.json, scaling file or
                model; (onnxruntime) the export is missing, stale or of another model.
            ConfigError: (onnxruntime) onnxruntime is not installed.
        """
        config = load_recipe_config(directory, Config)
        saved = read_json_file(directory / SCALING_FILE, error=CheckpointError)
        try:
            scaler = Scaler(np.asarray(saved["mean"]), np.asarray(saved["std"]))
            scale, season = np.asarray(saved["mase_scale"]), int(saved["season"])
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{directory / SCALING_FILE}: unreadable ({e})") from None
        onnx_model = load_onnx_model(directory) if options.backend == "onnxruntime" else None
        return cls(Forecaster.from_pretrained(directory), scaler, scale, season, config, onnx_model)

    def predict(self, inputs: Sequence[str]) -> list[Forecast]:
        """The H steps after the end of each series file of ``inputs`` (one step a line, C numbers), or of the
        run's own series for ``test``.

        Raises: DataError naming the input: unreadable, other channels, or fewer than L steps.
        """
        L = self.model_window[0]
        forecasts = []
        for source in inputs:
            if source == OWN_SERIES:
                values = prepare_series(self.config.data).series.values
            else:
                values = read_series(source, channels=self.model.config.channels)
            if len(values) < L:
                raise DataError(f"{source}: {len(values)} steps, but the model reads L = {L}")
            forecasts.append(Forecast(source, self.forecast(values[None, -L:])[0]))  # (H, C)
        return forecasts

    def forecast_values(self, values: Sequence[Sequence[float]], *, source: str) -> Forecast:
        """The H steps after the end of ``values`` (T steps of C numbers, T >= L), as ``predict`` gives for a file
        holding them (``SeriesForecaster``).

        Raises: DataError naming ``source``: rows of unequal or wrong width, non-finite values, or fewer than L
            steps.
        """
        L, C = self.model_window[0], self.model.config.channels
        widths = {len(row) for row in values}
        if widths and widths != {C}:
            raise DataError(f"{source}: rows of {sorted(widths)} values, but the model forecasts {C} channels")
        series = np.asarray(values, dtype=float).reshape(len(values), C)  # (T, C)
        if not np.isfinite(series).all():
            raise DataError(f"{source}: has non-finite values")
        if len(series) < L:
            raise DataError(f"{source}: {len(series)} steps, but the model reads L = {L}")
        return Forecast(source, self.forecast(series[None, -L:])[0])  # (H, C)

    def evaluate(self, data_path: str) -> dict[str, float]:
        """RMSE, MAE and MASE of the model and the naive baselines on every window of a series file (MASE scaled
        by the training part of the run's own series), and the number of windows (``test_windows``).

        Raises: DataError naming the file: unreadable, other channels, or shorter than one window (L + H).
        """
        L, H = self.model_window
        values = read_series(data_path, channels=self.model.config.channels)
        origins = window_origins(0, len(values), input_length=L, horizon=H)
        if len(origins) == 0:
            raise DataError(f"{data_path}: {len(values)} steps, but one window needs L + H = {L + H}")
        return self.score(values, origins)

    @torch.no_grad()
    def forecast(self, inputs: np.ndarray, *, steps: int | None = None) -> np.ndarray:
        """(B, steps, C) forecasts in the series' units from windows ``inputs`` (B, L, C) in the series' units;
        ``steps`` beyond H roll the model out on its own forecasts (default H)."""
        self.model.eval()
        x = torch.as_tensor(self.scaler.transform(inputs), dtype=torch.float32, device=model_device(self.model))
        out = rollout(self.model, x, steps or self.model.config.horizon, forward=self.onnx_model)
        return self.scaler.inverse(out.cpu().double().numpy())

    def score(self, values: np.ndarray, origins: np.ndarray) -> dict[str, float]:
        """The model's and the naive baselines' RMSE, MAE, MASE on the windows of ``values`` (T, C) at ``origins``."""
        L, H = self.model_window
        inputs, truth = windows(values, origins, input_length=L, horizon=H)
        results = forecast_scores(self.forecast(inputs), truth, self.mase_scale)
        for name, baseline in (
            ("persistence", persistence(inputs, H)),
            ("seasonal_naive", seasonal_naive(inputs, H, self.season)),
        ):
            results |= {f"{name}_{k}": v for k, v in forecast_scores(baseline, truth, self.mase_scale).items()}
        return results | {"test_windows": float(len(origins))}

    @property
    def model_window(self) -> tuple[int, int]:
        """(L, H) of the run."""
        return self.config.data.window
