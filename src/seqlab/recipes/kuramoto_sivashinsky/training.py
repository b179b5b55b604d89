"""The training run of the ``kuramoto-sivashinsky`` recipe: the simulated field split in time and standardised,
lambda_1 estimated on it, windows trained by mean squared error, and the test report (valid prediction times beside
persistence and climatology, the space-time picture ``forecast.png``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from seqlab.analysis.chaos import largest_lyapunov_exponent
from seqlab.analysis.figures import new_figure, save_figure
from seqlab.data.forecasting import Scaler, chronological_splits, window_origins
from seqlab.data.kuramoto_sivashinsky import KuramotoSivashinsky
from seqlab.errors import ConfigError, DataError
from seqlab.models.forecaster import Forecaster
from seqlab.recipes.base import Report, TrainingRun, model_device
from seqlab.recipes.kuramoto_sivashinsky.config import Config, DataConfig, EvalConfig
from seqlab.recipes.kuramoto_sivashinsky.system import ChaosForecasts, KSSystem, field_values
from seqlab.training.objectives import mse_loss

PLOT_FILE = "forecast.png"
LYAPUNOV_TRANSIENT = 100  # renormalisations run before averaging, while the separation aligns


class Windows(NamedTuple):
    """Windows of the standardised field: inputs x (B, L_w, N) and the next H fields y (B, H, N)."""

    x: torch.Tensor
    y: torch.Tensor


def lyapunov_exponent(start: np.ndarray, data: DataConfig, evaluation: EvalConfig) -> float:
    """lambda_1 (1 / time unit): eval.lyapunov_exponent if given, else that of the data section's KS system by two
    trajectories from the field ``start`` (N,), renormalised once per time unit
    (``seqlab.analysis.chaos.largest_lyapunov_exponent``).

    Raises: ConfigError for a data.path without eval.lyapunov_exponent (a file's system is not known to simulate).
    """
    if evaluation.lyapunov_exponent is not None:
        return evaluation.lyapunov_exponent
    if data.path is not None:
        raise ConfigError(
            "eval.lyapunov_exponent: give lambda_1 of data.path's system (it is estimated on the simulation only)"
        )
    solver = KuramotoSivashinsky(data.length, data.grid, data.dt)
    return largest_lyapunov_exponent(
        solver.step,
        start,
        dt=data.dt,
        renormalisations=evaluation.lyapunov_renormalisations,
        renormalise_every=max(1, round(1 / data.dt)),
        transient=LYAPUNOV_TRANSIENT,
        seed=data.seed,
    )


@dataclass
class KSTraining:
    """The parts of a run (``prepare``): the system being trained, the field and its windows.

    Attributes:
        system: the model with the training part's scaling and lambda_1.  values: (T, N) the simulated field.
        scaled: (T, N) float32, standardised.  train_origins, valid_origins: (B,) the windows' first targets.
        test_start: the test part's first step.  directory: where the run was last saved (``save``), for the plot.
    """

    system: KSSystem
    values: np.ndarray
    scaled: torch.Tensor
    train_origins: torch.Tensor
    valid_origins: torch.Tensor
    test_start: int
    directory: Path | None = field(default=None)

    @classmethod
    def build(cls, config: Config) -> KSTraining:
        """Simulate (or read data.path), split and standardise the field, estimate lambda_1 and build the untrained
        model.

        Raises: DataError for an unusable data.path or a part too short for one window (the training part for
            L_w + H, the test part for L_w + eval.vpt_steps); ConfigError for a data.path without
            eval.lyapunov_exponent.
        """
        data = config.data
        values = field_values(data)
        splits = chronological_splits(len(values), valid_fraction=data.valid_fraction, test_fraction=data.test_fraction)
        L, H = data.input_length, data.horizon
        train_origins = window_origins(L, splits.valid_start, input_length=L, horizon=H)
        valid_origins = window_origins(splits.valid_start, splits.test_start, input_length=L, horizon=H)
        train = values[: splits.valid_start]
        scaler = Scaler.fit(train)
        model = Forecaster(config.model.model_config(channels=data.grid, horizon=H))
        exponent = lyapunov_exponent(train[-1], data, config.eval)
        field_scale = float(np.sqrt((train**2).sum(axis=1).mean()))
        system = KSSystem(model, scaler, exponent, field_scale, config)
        for part, origins in (("training", train_origins), ("validation", valid_origins)):
            if len(origins) == 0:
                raise DataError(f"data: the {part} part is too short for one window of L + H = {L + H} steps")
        if len(system.origins(values, splits.test_start)) == 0:
            raise DataError(
                f"data: the test part ({splits.length - splits.test_start} steps) is shorter than "
                f"L + eval.vpt_steps ({L + config.eval.vpt_steps}); raise data.steps or data.test_fraction"
            )
        scaled = torch.as_tensor(scaler.transform(values), dtype=torch.float32)
        return cls(
            system, values, scaled, torch.as_tensor(train_origins), torch.as_tensor(valid_origins), splits.test_start
        )

    def windows(self, origins: torch.Tensor) -> Windows:
        """The standardised windows at ``origins`` (B,)."""
        L, H = self.system.config.data.input_length, self.system.config.data.horizon
        past = origins[:, None] + torch.arange(-L, 0)  # (B, L_w)
        future = origins[:, None] + torch.arange(H)  # (B, H)
        return Windows(self.scaled[past], self.scaled[future])

    def train_batches(self, epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[Windows]:
        """The training windows in shuffled batches of ``batch_size``."""
        order = self.train_origins[torch.randperm(len(self.train_origins), generator=generator)]
        for start in range(0, len(order), batch_size):
            yield self.windows(order[start : start + batch_size])

    @torch.no_grad()
    def validate(self, model: nn.Module) -> dict[str, float]:
        """``valid_loss``: the mean squared error on the validation windows (standardised units)."""
        device = model_device(model)
        batch = self.windows(self.valid_origins)
        return {"valid_loss": mse_loss(model, Windows(batch.x.to(device), batch.y.to(device))).loss.item()}

    def save(self, directory: Path) -> None:
        """Save the system into ``directory`` and remember it for the test's plot."""
        self.system.save(directory)
        self.directory = directory

    def test(self) -> Report:
        """Valid prediction times and errors one Lyapunov time ahead of the model, persistence and climatology on
        the test part (``KSSystem.score``), lambda_1 and the Lyapunov time; ``forecast.png`` of the first window.

        Raises: RuntimeError if the run was never saved.
        """
        if self.directory is None:
            raise RuntimeError("the run is tested before it was saved: no directory for its plot")
        system = self.system
        forecasts = system.free_running(self.values, system.origins(self.values, self.test_start))
        results = system.score(forecasts)
        results |= {"lyapunov_exponent": system.lyapunov_exponent, "lyapunov_time": 1 / system.lyapunov_exponent}
        plot_space_time(self.directory / PLOT_FILE, forecasts, system)
        errors, ahead = system.errors(forecasts), system.one_lyapunov_time(forecasts.truth.shape[1])
        examples = [
            (f"test window {i + 1}: E one Lyapunov time ahead", f"persistence {p:.3f}", f"model {m:.3f}")
            for i, (m, p) in enumerate(zip(errors["model"][:5, ahead], errors["persistence"][:5, ahead], strict=True))
        ]
        return Report(results, examples)

    def summary(self) -> str:
        """The data's part of the training log line."""
        data, system = self.system.config.data, self.system
        return (
            f"data: {data.path or f'Kuramoto-Sivashinsky L={data.length:g}'}, N={data.grid}, dt={data.dt:g}, "
            f"{len(self.values)} steps; "
            f"lambda_1={system.lyapunov_exponent:.4f} (Lyapunov time {1 / system.lyapunov_exponent:.1f}); "
            f"L_w={data.input_length}, H={data.horizon}; {len(self.train_origins)} train / "
            f"{len(self.valid_origins)} valid windows"
        )


def plot_space_time(path: Path, forecasts: ChaosForecasts, system: KSSystem) -> None:
    """Write a PNG of the first test window: the true field, the model's forecast and their difference, space
    (x) against time in Lyapunov times."""
    data = system.config.data
    truth, model = forecasts.truth[0], forecasts.model[0]  # (S, N)
    horizon = len(truth) * data.dt * system.lyapunov_exponent
    extent = (0.0, horizon, 0.0, data.length)
    limit = float(np.abs(truth).max())
    figure = new_figure(figsize=(9, 6))
    axes = figure.subplots(3, 1, sharex=True)
    name = f"{system.config.model.arch} ({system.config.model.head} head)"
    panels = (("truth", truth), (f"{name} forecast", model), ("forecast - truth", model - truth))
    for ax, (title, shown) in zip(axes, panels, strict=True):
        image = ax.imshow(shown.T, aspect="auto", origin="lower", extent=extent, cmap="RdBu_r", vmin=-limit, vmax=limit)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("x")
        figure.colorbar(image, ax=ax)
    axes[-1].set_xlabel("time (Lyapunov times, lambda_1 t)")
    figure.suptitle(f"Kuramoto-Sivashinsky, L = {data.length:g}: free-running forecast of the first test window")
    figure.tight_layout()
    save_figure(figure, path, dpi=90)


def prepare(config: Config, *, resume_from: Path | None = None) -> TrainingRun:
    """Simulate the field and build the forecaster: the parts ``run_training`` trains, saves and tests (the best
    validation MSE's model kept).

    Raises: DataError for an unusable data.path or a part too short for its windows; ConfigError for a data.path
        without eval.lyapunov_exponent.
    """
    training = KSTraining.build(config)
    return TrainingRun(
        config,
        training.system.model,
        loss_fn=mse_loss,
        train_batches=training.train_batches,
        validate=training.validate,
        save=training.save,
        test=training.test,
        summary=training.summary(),
        summary_model=f"{config.model.arch} encoder, {config.model.head} head",
    )
