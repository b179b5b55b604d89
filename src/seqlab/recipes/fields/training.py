"""The training run of the ``fields`` recipe: the trajectories split in time and standardised per grid point,
windows of T fields and the next H trained by mean squared error, and the test report (RMSE and anomaly correlation
by lead beside persistence and climatology, the picture ``forecast.png``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from seqlab.analysis.figures import new_figure, save_figure
from seqlab.data.forecasting import Scaler, chronological_splits
from seqlab.errors import DataError
from seqlab.models.field_forecaster import FieldTransformer
from seqlab.recipes.base import Report, TrainingRun, model_device
from seqlab.recipes.fields.config import Config
from seqlab.recipes.fields.system import FieldForecasts, FieldSystem, field_values
from seqlab.training.objectives import mse_loss

PLOT_FILE = "forecast.png"


class Windows(NamedTuple):
    """Windows of the standardised field: inputs x (B, T, 1, N, N) and the next H fields y (B, H, 1, N, N)."""

    x: torch.Tensor
    y: torch.Tensor


def member_origins(members: int, start: int, stop: int, *, input_length: int, horizon: int) -> torch.Tensor:
    """(B, 2): every (trajectory, origin) pair whose H targets lie in [start, stop) and whose T inputs lie in the
    trajectory (they may reach back before ``start``)."""
    origins = torch.arange(max(start, input_length), stop - horizon + 1)
    return torch.cartesian_prod(torch.arange(members), origins).view(-1, 2)


@dataclass
class FieldTraining:
    """The parts of a run (``prepare``): the system being trained, the trajectories and their windows.

    Attributes:
        system: the model with the training part's scaling.  values: (M, S, N, N) the trajectories.
        scaled: (M, S, 1, N, N) float32, standardised.  train_windows, valid_windows: (B, 2) (trajectory, first
        target) pairs.  test_start: the test part's first field in each trajectory.  directory: where the run was
        last saved (``save``), for the plot.
    """

    system: FieldSystem
    values: np.ndarray
    scaled: torch.Tensor
    train_windows: torch.Tensor
    valid_windows: torch.Tensor
    test_start: int
    directory: Path | None = field(default=None)

    @classmethod
    def build(cls, config: Config) -> FieldTraining:
        """Simulate (or read data.path), split each trajectory in time, standardise and build the untrained model.

        Raises: DataError for an unusable data.path or a part too short for one window (the training and
            validation parts for T + H, the test part for T + eval.max_lead); ConfigError for a model.patch_size
            that does not divide data.grid.
        """
        data = config.data
        model = FieldTransformer(config.model.model_config(data))
        values = field_values(data)
        M, S, N, _ = values.shape
        splits = chronological_splits(S, valid_fraction=data.valid_fraction, test_fraction=data.test_fraction)
        T, H = data.input_length, data.horizon
        train_windows = member_origins(M, T, splits.valid_start, input_length=T, horizon=H)
        valid_windows = member_origins(M, splits.valid_start, splits.test_start, input_length=T, horizon=H)
        for part, windows in (("training", train_windows), ("validation", valid_windows)):
            if len(windows) == 0:
                raise DataError(f"data: the {part} part is too short for one window of T + H = {T + H} fields")
        scaler = Scaler.fit(values[:, : splits.valid_start].reshape(-1, N, N))
        system = FieldSystem(model, scaler, config)
        if len(system.origins(S, splits.test_start)) == 0:
            longer = "a longer data.path" if data.path is not None else "data.samples"
            raise DataError(
                f"data: the test part ({S - splits.test_start} fields a trajectory) is shorter than "
                f"T + eval.max_lead ({T + config.eval.max_lead}); raise {longer} or data.test_fraction"
            )
        scaled = torch.as_tensor(scaler.transform(values)[:, :, None], dtype=torch.float32)
        return cls(system, values, scaled, train_windows, valid_windows, splits.test_start)

    def windows(self, pairs: torch.Tensor) -> Windows:
        """The standardised windows at (trajectory, origin) ``pairs`` (B, 2)."""
        T, H = self.system.config.data.input_length, self.system.config.data.horizon
        member, origin = pairs[:, :1], pairs[:, 1:]
        return Windows(self.scaled[member, origin + torch.arange(-T, 0)], self.scaled[member, origin + torch.arange(H)])

    def train_batches(self, epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[Windows]:
        """The training windows in shuffled batches of ``batch_size``."""
        order = self.train_windows[torch.randperm(len(self.train_windows), generator=generator)]
        for start in range(0, len(order), batch_size):
            yield self.windows(order[start : start + batch_size])

    @torch.no_grad()
    def validate(self, model: nn.Module) -> dict[str, float]:
        """``valid_loss``: the mean squared error on the validation windows (standardised units), in batches."""
        device = model_device(model)
        total = 0.0
        for start in range(0, len(self.valid_windows), 256):
            batch = self.windows(self.valid_windows[start : start + 256])
            total += mse_loss(model, Windows(batch.x.to(device), batch.y.to(device))).loss.item() * len(batch.x)
        return {"valid_loss": total / len(self.valid_windows)}

    def save(self, directory: Path) -> None:
        """Save the system into ``directory`` and remember it for the test's plot."""
        self.system.save(directory)
        self.directory = directory

    def test_forecasts(self) -> FieldForecasts:
        """The forecasts from the test origins of every trajectory (``FieldSystem.forecasts``)."""
        origins = self.system.origins(self.values.shape[1], self.test_start)
        members = np.repeat(np.arange(len(self.values)), len(origins))
        return self.system.forecasts(self.values, members, np.tile(origins, len(self.values)))

    def test(self) -> Report:
        """RMSE and ACC by lead of the model, persistence and climatology on the test parts
        (``FieldSystem.score``); ``forecast.png`` of the first test forecast.

        Raises: RuntimeError if the run was never saved.
        """
        if self.directory is None:
            raise RuntimeError("the run is tested before it was saved: no directory for its plot")
        forecasts = self.test_forecasts()
        results = self.system.score(forecasts)
        plot_forecast(self.directory / PLOT_FILE, forecasts, results, self.system.config)
        examples = [
            (
                f"lead {h}: RMSE (ACC)",
                f"persistence {results[f'persistence_rmse_lead{h}']:.3f} ({results[f'persistence_acc_lead{h}']:.3f})",
                f"model {results[f'rmse_lead{h}']:.3f} ({results[f'acc_lead{h}']:.3f})",
            )
            for h in self.system.config.eval.plot_leads
        ]
        return Report(results, examples)

    def summary(self) -> str:
        """The data's part of the training log line."""
        data = self.system.config.data
        M, S, N, _ = self.values.shape
        source = data.path or (
            f"Kolmogorov flow Re={data.reynolds_number:g}, n={data.forcing_wavenumber}, "
            f"{data.dt * data.steps_per_sample:g} time units a field"
        )
        return (
            f"data: {source}, {M} x {S} fields of {N} x {N}; T={data.input_length}, H={data.horizon}; "
            f"{len(self.train_windows)} train / {len(self.valid_windows)} valid windows"
        )


def plot_forecast(path: Path, forecasts: FieldForecasts, results: dict[str, float], config: Config) -> None:
    """Write a PNG: the first test forecast at eval.plot_leads (truth, the model's forecast and their difference,
    one column a lead) and the RMSE and ACC by lead of the model, persistence and climatology."""
    leads = config.eval.plot_leads
    limit = float(np.abs(forecasts.truth[0]).max())
    figure = new_figure(figsize=(2.6 * len(leads) + 5.0, 8), layout="constrained")
    grid = figure.add_gridspec(3, len(leads) + 1, width_ratios=[1.0] * len(leads) + [1.6])
    fields = []
    rows = (("truth", forecasts.truth[0]), ("patch Transformer", forecasts.model[0]))
    rows += (("forecast - truth", forecasts.model[0] - forecasts.truth[0]),)
    for column, lead in enumerate(leads):
        for row, (title, shown) in enumerate(rows):
            ax = figure.add_subplot(grid[row, column])
            fields.append(ax)
            image = ax.imshow(shown[lead - 1], origin="lower", cmap="RdBu_r", vmin=-limit, vmax=limit)
            ax.set_title(f"{title}, lead {lead}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
    figure.colorbar(image, ax=fields, location="left", shrink=0.6, label="vorticity")
    steps = np.arange(1, config.eval.max_lead + 1)
    for row, metric in enumerate(("rmse", "acc")):
        ax = figure.add_subplot(grid[row, -1])
        for prefix, label in (
            ("", "patch Transformer"),
            ("persistence_", "persistence"),
            ("climatology_", "climatology"),
        ):
            ax.plot(steps, [results[f"{prefix}{metric}_lead{h}"] for h in steps], marker="o", label=label)
        ax.set_ylabel(metric.upper())
        ax.set_xlabel("lead (fields)")
        ax.legend(fontsize=7)
    figure.suptitle("fields: the first test forecast and the scores by lead time")
    save_figure(figure, path, dpi=90)


def prepare(config: Config, *, resume_from: Path | None = None) -> TrainingRun:
    """Simulate the trajectories and build the patch Transformer: the parts ``run_training`` trains, saves and
    tests (the best validation MSE's model kept).

    Raises: DataError for an unusable data.path or a part too short for its windows; ConfigError for a
        model.patch_size that does not divide data.grid.
    """
    training = FieldTraining.build(config)
    model = config.model
    return TrainingRun(
        config,
        training.system.model,
        loss_fn=mse_loss,
        train_batches=training.train_batches,
        validate=training.validate,
        save=training.save,
        test=training.test,
        summary=training.summary(),
        summary_model=(
            f"patch Transformer, {model.patch_size} x {model.patch_size} patches, divided space-time attention"
        ),
    )
