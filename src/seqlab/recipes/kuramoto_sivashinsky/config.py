"""The ``kuramoto-sivashinsky`` recipe's config: sections data (the simulation and its windows), model (one config
per ``model.arch``, each a ``seqlab.models.ForecasterConfig`` encoder), train and eval (the Lyapunov estimate and the
valid prediction time).

The model's classes, one per arch, are the forecasters' (``seqlab.recipes.common.forecaster_arms``), at their
defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from seqlab.config import refuse_set
from seqlab.data.files import data_file
from seqlab.data.forecasting import SERIES
from seqlab.errors import ConfigError
from seqlab.recipes.common.forecaster_arms import (
    GRUArmConfig,
    GRUTextbookArmConfig,
    LSTMArmConfig,
    RNNArmConfig,
    SSMArmConfig,
    TCNArmConfig,
    TransformerArmConfig,
)
from seqlab.training.trainer import TrainConfig
from seqlab.validation import check_int, check_real

MAX_STEPS = 1_000_000  # samples a run may simulate (8 bytes x 64 points each: 0.5 GB)
MAX_GRID = 1024
SIMULATION_KEYS = ("length", "steps", "transient_steps", "seed")  # data's keys a field file (data.path) replaces


@dataclass(frozen=True)
class DataConfig:
    """The simulated field (``seqlab.data.kuramoto_sivashinsky``) or the user's, its split in time and its windows."""

    path: str | None = data_file(SERIES)  # a field file (one step a line, N numbers, dt apart) instead of simulating
    length: float = 22.0  # L, the periodic domain's length (22: chaotic, about 3 unstable directions)
    grid: int = 64  # N, grid points (the channels of the series)
    dt: float = 0.25  # time units per solver step and per sample
    steps: int = 20_000  # samples kept (5,000 time units)
    transient_steps: int = 4_000  # solver steps discarded first, from a small random field onto the attractor
    seed: int = 0  # seed of the initial field
    input_length: int = 16  # L_w, steps the model reads
    horizon: int = 4  # H, steps it forecasts at once (and is trained on)
    valid_fraction: float = 0.1  # share of the samples (before the test part) for validation
    test_fraction: float = 0.2  # share of the samples at the end for testing

    def __post_init__(self) -> None:
        check_real("length", self.length, greater_than=0.0, at_most=1e4)
        check_int("grid", self.grid, minimum=8, maximum=MAX_GRID)
        if self.grid % 2:
            raise ConfigError(f"grid ({self.grid}) must be even")
        check_real("dt", self.dt, greater_than=0.0, at_most=10.0)
        check_int("steps", self.steps, minimum=100, maximum=MAX_STEPS)
        check_int("transient_steps", self.transient_steps, minimum=0, maximum=MAX_STEPS)
        check_int("seed", self.seed, minimum=0)
        check_int("input_length", self.input_length)
        check_int("horizon", self.horizon)
        check_real("valid_fraction", self.valid_fraction, greater_than=0.0, below=0.5)
        check_real("test_fraction", self.test_fraction, greater_than=0.0, below=0.5)
        if self.path is not None:
            refuse_set(self, SIMULATION_KEYS, "sets the simulation, which path replaces: drop one of them")


ModelConfig = (
    GRUArmConfig
    | GRUTextbookArmConfig
    | LSTMArmConfig
    | RNNArmConfig
    | TransformerArmConfig
    | TCNArmConfig
    | SSMArmConfig
)


@dataclass(frozen=True)
class EvalConfig:
    """The largest Lyapunov exponent's estimate and the valid prediction time (``seqlab.analysis.chaos``)."""

    lyapunov_exponent: float | None = None  # lambda_1 (1 / time unit); None = estimated on the simulation
    lyapunov_renormalisations: int = 2_000  # two-trajectory renormalisations averaged, one per time unit
    vpt_threshold: float = 0.5  # normalised error E(t) at which a forecast stops being valid (Vlachas et al., 2020)
    vpt_steps: int = 800  # length of the free-running test forecasts (200 time units, about 9 Lyapunov times)
    vpt_stride: int = 100  # steps between their origins

    def __post_init__(self) -> None:
        check_real("lyapunov_exponent", self.lyapunov_exponent, greater_than=0.0, optional=True)
        check_int("lyapunov_renormalisations", self.lyapunov_renormalisations, minimum=10, maximum=MAX_STEPS)
        check_real("vpt_threshold", self.vpt_threshold, greater_than=0.0)
        check_int("vpt_steps", self.vpt_steps, maximum=MAX_STEPS)
        check_int("vpt_stride", self.vpt_stride, maximum=MAX_STEPS)


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model (``model.arch``: gru | gru_textbook | lstm | rnn | transformer | tcn |
    ssm), train, eval."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=GRUArmConfig)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            lr=2e-3, batch_size=64, max_epochs=100, max_steps=6_000, schedule="cosine", patience=5, time_budget=540.0
        )
    )
    eval: EvalConfig = field(default_factory=EvalConfig)
