"""``KSSystem``: a trained forecaster of the Kuramoto-Sivashinsky field with its scaling and the simulation's
largest Lyapunov exponent, as a run directory holds it; its scores (valid prediction time against persistence and
climatology)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, NamedTuple

import numpy as np
import torch

from seqlab.analysis.chaos import normalised_error, valid_steps
from seqlab.data.files import read_json_file
from seqlab.data.forecasting import Scaler, read_series, window_origins, windows
from seqlab.data.kuramoto_sivashinsky import ks_trajectory
from seqlab.errors import CheckpointError, DataError
from seqlab.export import OnnxModel, load_onnx_model
from seqlab.files import atomic_write
from seqlab.models.forecaster import Forecaster, rollout
from seqlab.recipes.base import model_device
from seqlab.recipes.kuramoto_sivashinsky.config import Config, DataConfig
from seqlab.recipes.saved_run import check_model_config, load_recipe_config
from seqlab.recipes.system import SystemOptions

DYNAMICS_FILE = "dynamics.json"
OWN_SERIES = "test"  # the input that ``predict`` reads as the run's own simulation (forecast from its end)


def field_values(data: DataConfig) -> np.ndarray:
    """(T, N): the run's field: data.path's, or the simulation of the data section (``ks_trajectory``,
    deterministic).

    Raises: DataError naming data.path: unreadable, or not data.grid numbers a line.
    """
    if data.path is not None:
        return read_series(data.path, channels=data.grid)
    return ks_trajectory(
        length=data.length,
        grid=data.grid,
        dt=data.dt,
        steps=data.steps,
        transient_steps=data.transient_steps,
        seed=data.seed,
    )


class FieldForecast(NamedTuple):
    """The forecast of the H fields after the end of one input.

    Attributes:
        source: the input (a field file, or ``test`` for the run's own simulation).
        values: (H, N), the field at the grid points, step by step.
    """

    source: str
    values: np.ndarray

    def lines(self) -> list[str]:
        """One line a step, counted from 1 after the input's last: ``SOURCE +h  VALUES`` (6 significant digits)."""
        return [f"{self.source} +{h + 1}  " + " ".join(f"{v:.6g}" for v in step) for h, step in enumerate(self.values)]


class ChaosForecasts(NamedTuple):
    """Free-running forecasts of windows (B, S, N) in the field's units: the truth, the model, persistence (the
    window's last field) and climatology (the training part's mean field)."""

    truth: np.ndarray
    model: np.ndarray
    persistence: np.ndarray
    climatology: np.ndarray


@dataclass
class KSSystem:
    """A trained field forecaster: what a run directory holds.

    Attributes:
        model: the forecaster of standardised fields.  scaler: per grid point mean and std of the training part.
        lyapunov_exponent: lambda_1 of the simulation (1 / time unit), by two trajectories.
        field_scale: sqrt(<||u||^2>) over the training part, E(t)'s denominator.
        config: the recipe config of the run.
        onnx_model: what forecasts call instead of ``model``: the run's exported graph under onnxruntime
            (``--backend onnxruntime``, the one option), else None.
    """

    model: Forecaster
    scaler: Scaler
    lyapunov_exponent: float
    field_scale: float
    config: Config
    onnx_model: OnnxModel | None = None
    OPTIONS: ClassVar[frozenset[str]] = frozenset({"backend"})
    PREDICT_READS_FILES: ClassVar[bool] = True  # ``FileInputs``: predict's inputs are field files

    def save(self, directory: Path) -> None:
        """Write the model and ``dynamics.json`` (scaling, lambda_1, E's scale); ``run_training`` adds recipe.json."""
        self.model.save_pretrained(directory)
        payload = {
            "mean": self.scaler.mean.tolist(),
            "std": self.scaler.std.tolist(),
            "lyapunov_exponent": self.lyapunov_exponent,
            "field_scale": self.field_scale,
        }
        atomic_write(directory / DYNAMICS_FILE, json.dumps(payload, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path, options: SystemOptions = SystemOptions()) -> KSSystem:
        """The run in ``directory``; with ``options.backend`` "onnxruntime", forecasts run its export in
        ``directory/onnx``.

        Raises:
            CheckpointError: (one line naming the file) for a missing or unreadable file, or a recipe.json that
                describes another model than config.json; (onnxruntime) the export is missing, stale or of another
                model.
            ConfigError: (onnxruntime) onnxruntime is not installed.
        """
        config = load_recipe_config(directory, Config)
        saved = read_json_file(directory / DYNAMICS_FILE, error=CheckpointError, missing="missing")
        try:
            scaler = Scaler(np.asarray(saved["mean"], dtype=float), np.asarray(saved["std"], dtype=float))
            exponent, scale = float(saved["lyapunov_exponent"]), float(saved["field_scale"])
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{directory / DYNAMICS_FILE}: unreadable ({e})") from None
        model = Forecaster.from_pretrained(directory)
        check_model_config(
            directory, config.model.model_config(channels=config.data.grid, horizon=config.data.horizon), model.config
        )
        if scaler.mean.shape != (config.data.grid,) or scaler.std.shape != (config.data.grid,):
            raise CheckpointError(f"{directory / DYNAMICS_FILE}: scaling is not of {config.data.grid} grid points")
        onnx_model = load_onnx_model(directory) if options.backend == "onnxruntime" else None
        return cls(model, scaler, exponent, scale, config, onnx_model)

    def predict(self, inputs: Sequence[str]) -> list[FieldForecast]:
        """The H fields after the end of each field file of ``inputs`` (one step a line, N numbers), or of the
        run's own field (its simulation or data.path) for ``test``.

        Raises: DataError naming the input: unreadable, another number of grid points, or fewer than L_w steps.
        """
        L, N = self.config.data.input_length, self.config.data.grid
        forecasts = []
        for source in inputs:
            values = field_values(self.config.data) if source == OWN_SERIES else read_series(source, channels=N)
            if len(values) < L:
                raise DataError(f"{source}: {len(values)} steps, but the model reads L = {L}")
            forecasts.append(FieldForecast(source, self.forecast(values[None, -L:], steps=self.config.data.horizon)[0]))
        return forecasts

    def evaluate(self, data_path: str) -> dict[str, float]:
        """The valid prediction times (``score``) of free-running forecasts of eval.vpt_steps steps from origins
        eval.vpt_stride apart in a field file (one step a line, N numbers, dt apart), with the run's lambda_1.

        Raises: DataError naming the file: unreadable, another number of grid points, or shorter than one window
            (L_w + eval.vpt_steps).
        """
        values = read_series(data_path, channels=self.config.data.grid)
        origins = self.origins(values, 0)
        if len(origins) == 0:
            needed = self.config.data.input_length + self.config.eval.vpt_steps
            raise DataError(f"{data_path}: {len(values)} steps, but one window needs L + eval.vpt_steps = {needed}")
        return self.score(self.free_running(values, origins))

    def origins(self, values: np.ndarray, start: int) -> np.ndarray:
        """(B,): the origins of the free-running windows of ``values`` from ``start`` on (eval.vpt_stride apart)."""
        return window_origins(
            start,
            len(values),
            input_length=self.config.data.input_length,
            horizon=self.config.eval.vpt_steps,
            stride=self.config.eval.vpt_stride,
        )

    @torch.no_grad()
    def forecast(self, inputs: np.ndarray, *, steps: int) -> np.ndarray:
        """(B, steps, N) forecasts from windows ``inputs`` (B, L_w, N), the model fed its own forecasts H at a time;
        both in the field's units."""
        self.model.eval()
        x = torch.as_tensor(self.scaler.transform(inputs), dtype=torch.float32, device=model_device(self.model))
        return self.scaler.inverse(rollout(self.model, x, steps, forward=self.onnx_model).cpu().double().numpy())

    def free_running(self, values: np.ndarray, origins: np.ndarray) -> ChaosForecasts:
        """The model's and the baselines' forecasts of eval.vpt_steps steps from ``origins`` (B,) of ``values``."""
        steps = self.config.eval.vpt_steps
        past, future = windows(values, origins, input_length=self.config.data.input_length, horizon=steps)
        persistence = np.repeat(past[:, -1:], steps, axis=1)
        climatology = np.broadcast_to(self.scaler.mean, future.shape)
        return ChaosForecasts(future, self.forecast(past, steps=steps), persistence, climatology)

    def errors(self, forecasts: ChaosForecasts) -> dict[str, np.ndarray]:
        """E(t) (B, S) of the model, persistence and climatology (``seqlab.analysis.chaos.normalised_error``)."""
        return {
            name: normalised_error(getattr(forecasts, name), forecasts.truth, scale=self.field_scale)
            for name in ("model", "persistence", "climatology")
        }

    def one_lyapunov_time(self, steps: int) -> int:
        """The index of the step 1 / lambda_1 ahead in a forecast of ``steps`` steps (its last if shorter)."""
        return min(steps, max(1, round(1 / (self.lyapunov_exponent * self.config.data.dt)))) - 1

    def score(self, forecasts: ChaosForecasts) -> dict[str, float]:
        """For the model and each baseline (prefixed ``persistence_``, ``climatology_``): ``vpt_lyapunov``, the mean
        valid prediction time in Lyapunov times (E(t) > eval.vpt_threshold), and ``error_1lt``, the mean E one
        Lyapunov time ahead; and ``windows``."""
        dt, exponent = self.config.data.dt, self.lyapunov_exponent
        ahead = self.one_lyapunov_time(forecasts.truth.shape[1])
        results = {}
        for name, error in self.errors(forecasts).items():
            prefix = "" if name == "model" else f"{name}_"
            valid = valid_steps(error, self.config.eval.vpt_threshold)
            results[f"{prefix}vpt_lyapunov"] = float(valid.mean() * dt * exponent)
            results[f"{prefix}error_1lt"] = float(error[:, ahead].mean())
        return results | {"windows": float(len(forecasts.truth))}
