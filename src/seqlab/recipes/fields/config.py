"""The ``fields`` recipe's config: sections data (the simulated Kolmogorov flow, or the user's field file, and its
windows), model (the spatio-temporal patch Transformer, ``seqlab.models.field_forecaster``), train and eval (the
lead times scored and the origins of the test forecasts)."""

from __future__ import annotations

from dataclasses import dataclass, field

from seqlab.config import refuse_set
from seqlab.data.files import data_file
from seqlab.data.forecasting import SERIES
from seqlab.errors import ConfigError
from seqlab.models.field_forecaster import FieldTransformerConfig
from seqlab.training.trainer import TrainConfig
from seqlab.validation import check_bool, check_int, check_probability, check_real

MAX_GRID = 256
MAX_VALUES = 50_000_000  # members x samples x grid^2 a run may simulate (8 bytes each: 0.4 GB)
SIMULATION_KEYS = (  # data's keys a field file (data.path) replaces
    "reynolds_number",
    "drag",
    "forcing_wavenumber",
    "dt",
    "steps_per_sample",
    "samples",
    "transient_samples",
    "members",
    "seed",
)


@dataclass(frozen=True)
class DataConfig:
    """The simulated vorticity (``seqlab.data.kolmogorov_flow``) or the user's field file, split in time within
    each trajectory, and the windows."""

    path: str | None = data_file(SERIES)  # a field file (one field a line: grid x grid values, row by row) instead
    grid: int = 32  # N, points a side of the periodic [0, 2 pi)^2 grid
    reynolds_number: float = 40.0  # Re = 1 / nu (Chandler & Kerswell, 2013: turbulent at 40 with n = 4)
    drag: float = 0.0  # alpha, linear drag
    forcing_wavenumber: int = 4  # n of the forcing -n cos(n y)
    dt: float = 0.1  # time units per solver step (ETDRK4)
    steps_per_sample: int = 5  # solver steps between kept fields (0.5 time units)
    samples: int = 200  # fields kept per trajectory
    transient_samples: int = 40  # samples discarded first, from a smooth random field onto the attractor
    members: int = 24  # independent trajectories (a field file is one)
    seed: int = 0  # seed of the initial fields
    input_length: int = 4  # T, fields the model reads
    horizon: int = 4  # H, fields it forecasts at once (and is trained on)
    valid_fraction: float = 0.1  # share of each trajectory (before its test part) for validation
    test_fraction: float = 0.2  # share of each trajectory at its end for testing

    def __post_init__(self) -> None:
        check_int("grid", self.grid, minimum=8, maximum=MAX_GRID)
        if self.grid % 2:
            raise ConfigError(f"grid ({self.grid}) must be even")
        check_real("reynolds_number", self.reynolds_number, greater_than=0.0, at_most=1e6)
        check_real("drag", self.drag, at_least=0.0, at_most=1e3)
        largest = self.grid // 3 - 1 if self.path is None else 10_000  # a field file's grid is not simulated
        check_int("forcing_wavenumber", self.forcing_wavenumber, minimum=0, maximum=largest)
        check_real("dt", self.dt, greater_than=0.0, at_most=10.0)
        check_int("steps_per_sample", self.steps_per_sample, maximum=10_000)
        check_int("samples", self.samples, minimum=10, maximum=MAX_VALUES)
        check_int("transient_samples", self.transient_samples, minimum=0, maximum=MAX_VALUES)
        check_int("members", self.members, maximum=MAX_VALUES)
        if self.members * self.samples * self.grid**2 > MAX_VALUES:
            raise ConfigError(
                f"members x samples x grid^2 ({self.members} x {self.samples} x {self.grid}^2) exceeds {MAX_VALUES}"
            )
        check_int("seed", self.seed, minimum=0)
        check_int("input_length", self.input_length, maximum=1024)
        check_int("horizon", self.horizon, maximum=1024)
        check_real("valid_fraction", self.valid_fraction, greater_than=0.0, below=0.5)
        check_real("test_fraction", self.test_fraction, greater_than=0.0, below=0.5)
        if self.path is not None:
            refuse_set(self, SIMULATION_KEYS, "sets the simulation, which path replaces: drop one of them")


@dataclass(frozen=True)
class ModelConfig:
    """The spatio-temporal patch Transformer (``seqlab.models.field_forecaster.FieldTransformer``): ViT patches, divided
    space-time attention, a linear head per patch."""

    patch_size: int = 8  # p, patch side (divides data.grid)
    d_model: int = 64  # D
    num_heads: int = 4  # N
    d_ff: int = 128  # feed-forward inner size
    num_layers: int = 2  # L blocks, each a space and a time layer
    dropout: float = 0.0  # inside the layers
    residual: bool = True  # forecast the change from the last field (an untrained model is persistence)

    def __post_init__(self) -> None:
        for name in ("patch_size", "d_model", "num_heads", "d_ff"):
            check_int(name, getattr(self, name), maximum=8192)
        check_int("num_layers", self.num_layers, maximum=64)
        check_probability("dropout", self.dropout)
        check_bool("residual", self.residual)
        if self.d_model % self.num_heads or self.d_model % 2:
            raise ConfigError(f"d_model ({self.d_model}) must be even and divisible by num_heads ({self.num_heads})")

    def model_config(self, data: DataConfig) -> FieldTransformerConfig:
        """The model's config for the data section's grid, window and horizon.

        Raises: ConfigError if patch_size does not divide data.grid.
        """
        if data.grid % self.patch_size:
            raise ConfigError(f"model.patch_size ({self.patch_size}) must divide data.grid ({data.grid})")
        return FieldTransformerConfig(
            height=data.grid,
            width=data.grid,
            horizon=data.horizon,
            patch_size=self.patch_size,
            d_model=self.d_model,
            num_heads=self.num_heads,
            d_ff=self.d_ff,
            num_layers=self.num_layers,
            context_length=data.input_length,
            dropout=self.dropout,
            residual=self.residual,
        )


@dataclass(frozen=True)
class EvalConfig:
    """The test forecasts: how far ahead they run and where they start."""

    max_lead: int = 8  # leads 1..max_lead scored, the model fed its own forecasts H at a time past H
    stride: int = 4  # samples between the origins of the test forecasts in each trajectory
    plot_leads: tuple[int, ...] = (1, 4, 8)  # leads shown in forecast.png: --set eval.plot_leads=1,4,8

    def __post_init__(self) -> None:
        check_int("max_lead", self.max_lead, maximum=10_000)
        check_int("stride", self.stride, maximum=10_000)
        leads = self.plot_leads
        if not leads or not all(isinstance(v, int) and 1 <= v <= self.max_lead for v in leads):
            raise ConfigError(f"plot_leads ({leads!r}) must be leads between 1 and max_lead ({self.max_lead})")


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model, train, eval."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            lr=1e-3,
            batch_size=32,
            max_epochs=100,
            max_steps=3_000,
            schedule="cosine",
            patience=5,
            validate_every=250,
            time_budget=360.0,
        )
    )
    eval: EvalConfig = field(default_factory=EvalConfig)
