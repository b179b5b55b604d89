"""``FieldSystem``: a trained patch-Transformer forecaster of a 2-D field with its scaling, as a run directory holds
it; its forecasts from field files and its scores (RMSE and anomaly correlation by lead time against persistence
and climatology)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, NamedTuple

import numpy as np
import torch

from seqlab.data.files import read_json_file
from seqlab.data.forecasting import Scaler, read_series
from seqlab.data.kolmogorov_flow import kolmogorov_trajectories
from seqlab.errors import CheckpointError, DataError
from seqlab.files import atomic_write
from seqlab.metrics import anomaly_correlation, field_rmse
from seqlab.models.field_forecaster import FieldTransformer, rollout_fields
from seqlab.recipes.base import model_device
from seqlab.recipes.fields.config import Config, DataConfig
from seqlab.recipes.saved_run import check_model_config, load_recipe_config
from seqlab.recipes.system import SystemOptions

SCALING_FILE = "scaling.json"
OWN_FIELD = "test"  # the input that ``predict`` reads as the run's own data (forecast from its last trajectory's end)
EVAL_BATCH_SIZE = 64


def read_fields(path: str, grid: int) -> np.ndarray:
    """(T, N, N): the fields of a field file, one a line, N x N values row by row (y, then x).

    Raises: DataError naming the file: unreadable, or not N^2 numbers a line.
    """
    return read_series(path, channels=grid * grid).reshape(-1, grid, grid)


def field_values(data: DataConfig) -> np.ndarray:
    """(M, S, N, N): the run's trajectories: data.path's one, or the simulation of the data section
    (``kolmogorov_trajectories``, deterministic).

    Raises: DataError naming data.path: unreadable, or not data.grid^2 numbers a line.
    """
    if data.path is not None:
        return read_fields(data.path, data.grid)[None]
    return kolmogorov_trajectories(
        grid=data.grid,
        viscosity=1.0 / data.reynolds_number,
        drag=data.drag,
        forcing_wavenumber=data.forcing_wavenumber,
        dt=data.dt,
        steps_per_sample=data.steps_per_sample,
        samples=data.samples,
        transient_samples=data.transient_samples,
        members=data.members,
        seed=data.seed,
    )


class FieldForecast(NamedTuple):
    """The forecast of the H fields after the end of one input.

    Attributes:
        source: the input (a field file, or ``test`` for the run's own data).
        values: (H, N, N), the fields, step by step.
    """

    source: str
    values: np.ndarray

    def lines(self) -> list[str]:
        """One line a step, counted from 1 after the input's last: ``SOURCE +h  VALUES`` (row by row, 6 significant
        digits), the field file's own layout."""
        return [
            f"{self.source} +{h + 1}  " + " ".join(f"{v:.6g}" for v in step.ravel())
            for h, step in enumerate(self.values)
        ]


class FieldForecasts(NamedTuple):
    """Forecasts of leads 1..K from B origins, (B, K, N, N) in the field's units: the truth, the model, persistence
    (the window's last field) and climatology (the training part's mean field)."""

    truth: np.ndarray
    model: np.ndarray
    persistence: np.ndarray
    climatology: np.ndarray


@dataclass
class FieldSystem:
    """A trained field forecaster: what a run directory holds.

    Attributes:
        model: the patch Transformer of standardised fields.  scaler: per grid point mean and std (N, N) of the
            training part; its mean is the climatology.  config: the recipe config of the run.
    """

    model: FieldTransformer
    scaler: Scaler
    config: Config
    OPTIONS: ClassVar[frozenset[str]] = frozenset()
    PREDICT_READS_FILES: ClassVar[bool] = True  # ``FileInputs``: predict's inputs are field files

    def save(self, directory: Path) -> None:
        """Write the model and ``scaling.json``; ``run_training`` adds recipe.json."""
        self.model.save_pretrained(directory)
        payload = {"mean": self.scaler.mean.tolist(), "std": self.scaler.std.tolist()}
        atomic_write(directory / SCALING_FILE, json.dumps(payload) + "\n")

    @classmethod
    def load(cls, directory: Path, options: SystemOptions = SystemOptions()) -> FieldSystem:
        """The run in ``directory``. It takes no options (``OPTIONS`` is empty: callers refuse any given).

        Raises: CheckpointError (one line naming the file) for a missing or unreadable file, or a recipe.json that
            describes another model than config.json.
        """
        config = load_recipe_config(directory, Config)
        saved = read_json_file(directory / SCALING_FILE, error=CheckpointError, missing="missing")
        try:
            scaler = Scaler(np.asarray(saved["mean"], dtype=float), np.asarray(saved["std"], dtype=float))
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{directory / SCALING_FILE}: unreadable ({e})") from None
        N = config.data.grid
        if scaler.mean.shape != (N, N) or scaler.std.shape != (N, N):
            raise CheckpointError(f"{directory / SCALING_FILE}: scaling is not of a {N} x {N} grid")
        model = FieldTransformer.from_pretrained(directory)
        check_model_config(directory, config.model.model_config(config.data), model.config)
        return cls(model, scaler, config)

    def predict(self, inputs: Sequence[str]) -> list[FieldForecast]:
        """The H fields after the end of each field file of ``inputs`` (one field a line, N^2 numbers), or of the
        run's own data (its last trajectory) for ``test``.

        Raises: DataError naming the input: unreadable, another grid, or fewer than T fields.
        """
        data = self.config.data
        forecasts = []
        for source in inputs:
            values = field_values(data)[-1] if source == OWN_FIELD else read_fields(source, data.grid)
            if len(values) < data.input_length:
                raise DataError(f"{source}: {len(values)} fields, but the model reads T = {data.input_length}")
            window = values[None, -data.input_length :]
            forecasts.append(FieldForecast(source, self.forecast(window, steps=data.horizon)[0]))
        return forecasts

    def evaluate(self, data_path: str) -> dict[str, float]:
        """The scores (``score``) of forecasts of leads 1..eval.max_lead from origins eval.stride apart in a field
        file (one field a line, N^2 numbers, the run's sampling interval apart).

        Raises: DataError naming the file: unreadable, another grid, or shorter than one window (T +
            eval.max_lead fields).
        """
        values = read_fields(data_path, self.config.data.grid)
        origins = self.origins(len(values), 0)
        if len(origins) == 0:
            needed = self.config.data.input_length + self.config.eval.max_lead
            raise DataError(f"{data_path}: {len(values)} fields, but one window needs T + eval.max_lead = {needed}")
        return self.score(self.forecasts(values[None], np.zeros_like(origins), origins))

    def origins(self, length: int, start: int) -> np.ndarray:
        """(B,): the origins o (first forecast field) in a trajectory of ``length`` fields whose T inputs and
        eval.max_lead targets fit, targets from ``start`` on, eval.stride apart."""
        T, K = self.config.data.input_length, self.config.eval.max_lead
        return np.arange(max(start, T), length - K + 1, self.config.eval.stride)

    @torch.no_grad()
    def forecast(self, inputs: np.ndarray, *, steps: int) -> np.ndarray:
        """(B, steps, N, N) forecasts from windows ``inputs`` (B, T, N, N), the model fed its own forecasts H at a
        time past H; both in the field's units (evaluated in batches of ``EVAL_BATCH_SIZE``)."""
        self.model.eval()
        scaled = self.scaler.transform(inputs)[:, :, None]  # (B, T, C = 1, N, N)
        outputs = []
        for start in range(0, len(scaled), EVAL_BATCH_SIZE):
            x = torch.as_tensor(scaled[start : start + EVAL_BATCH_SIZE], dtype=torch.float32)
            outputs.append(rollout_fields(self.model, x.to(model_device(self.model)), steps)[:, :, 0].cpu().double())
        return self.scaler.inverse(torch.cat(outputs).numpy())

    def forecasts(self, values: np.ndarray, members: np.ndarray, origins: np.ndarray) -> FieldForecasts:
        """The model's and the baselines' forecasts of leads 1..eval.max_lead from ``origins`` (B,) of the
        trajectories ``members`` (B,) of ``values`` (M, S, N, N)."""
        T, K = self.config.data.input_length, self.config.eval.max_lead
        past = values[members[:, None], origins[:, None] + np.arange(-T, 0)]  # (B, T, N, N)
        future = values[members[:, None], origins[:, None] + np.arange(K)]  # (B, K, N, N)
        persistence = np.repeat(past[:, -1:], K, axis=1)
        climatology = np.broadcast_to(self.scaler.mean, future.shape)
        return FieldForecasts(future, self.forecast(past, steps=K), persistence, climatology)

    def score(self, forecasts: FieldForecasts) -> dict[str, float]:
        """For the model and each baseline (prefixed ``persistence_``, ``climatology_``), at each lead h:
        ``rmse_lead{h}`` (the mean over the forecasts of each field's RMSE, in the field's units) and
        ``acc_lead{h}`` (the mean anomaly correlation against the training climatology; the climatology's own is
        0 by convention); ``rmse`` and ``acc``, their means over the leads; and ``windows``."""
        climatology = self.scaler.mean
        results = {}
        for name in ("model", "persistence", "climatology"):
            prefix = "" if name == "model" else f"{name}_"
            forecast = getattr(forecasts, name)
            rmse = field_rmse(forecast, forecasts.truth).mean(axis=0)  # (K,)
            acc = anomaly_correlation(forecast, forecasts.truth, climatology).mean(axis=0)  # (K,)
            results[f"{prefix}rmse"], results[f"{prefix}acc"] = float(rmse.mean()), float(acc.mean())
            for h, (r, a) in enumerate(zip(rmse, acc, strict=True), start=1):
                results[f"{prefix}rmse_lead{h}"], results[f"{prefix}acc_lead{h}"] = float(r), float(a)
        return results | {"windows": float(len(forecasts.truth))}
