"""The ``forecast`` recipe's config: sections data (the series and its windows, with per-series defaults), model
(one config per ``model.arch``: gru | gru_textbook | lstm | rnn | transformer | tcn | ssm), train and eval
(baselines and the chaos score)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from seqlab.data.files import data_file
from seqlab.data.forecasting import SERIES, SERIES_NAMES
from seqlab.recipes.common import forecaster_arms as arms
from seqlab.training.trainer import TrainConfig
from seqlab.validation import check_bool, check_choice, check_int, check_real


class SeriesDefaults(NamedTuple):
    """Per-series defaults: window L, horizon H, test stride and the SARIMA baseline's (p, d, q), (P, D, Q, m)."""

    input_length: int
    horizon: int
    test_stride: int
    order: tuple[int, int, int]
    seasonal_order: tuple[int, int, int, int]


SERIES_DEFAULTS = {
    "sunspots": SeriesDefaults(33, 11, 1, (9, 0, 0), (0, 0, 0, 0)),  # AR(9): Box & Jenkins' sunspot model
    "co2": SeriesDefaults(36, 12, 1, (0, 1, 1), (0, 1, 1, 12)),  # the "airline" model
    "elnino": SeriesDefaults(36, 12, 1, (1, 0, 0), (0, 1, 1, 12)),
    "lorenz": SeriesDefaults(50, 10, 10, (2, 0, 0), (0, 0, 0, 0)),
}
FILE_DEFAULTS = SeriesDefaults(24, 6, 1, (2, 0, 0), (0, 0, 0, 0))  # data.path; seasonal AR(1) added when m > 1


# Built-in series forecast as changes from the last value by default: the chaotic system, whose next state is
# close to the current one, and the trending CO2 record (MASE 6.49 -> 1.77 at the default settings).
RESIDUAL_SERIES = ("lorenz", "co2")


@dataclass(frozen=True)
class DataConfig:
    """The series, its split and its windows (None = the series' default, ``SERIES_DEFAULTS``)."""

    series: str = "sunspots"  # sunspots | co2 | elnino | lorenz
    path: str | None = data_file(SERIES)  # a series file (one step a line, C numbers); replaces data.series
    season: int | None = None  # m for data.path (None = 1); the named series know theirs
    input_length: int | None = None  # L, steps the model reads
    horizon: int | None = None  # H, steps it forecasts
    test_stride: int | None = None  # steps between test origins
    valid_fraction: float = 0.15  # share of the series (before the test part) for validation
    test_fraction: float = 0.15  # share of the series at its end for testing
    lorenz_steps: int = 6000  # samples of the Lorenz system, 0.01 time units apart

    def __post_init__(self) -> None:
        check_choice("series", self.series, SERIES_NAMES)
        for name in ("season", "input_length", "horizon", "test_stride"):
            check_int(name, getattr(self, name), optional=True)
        check_real("valid_fraction", self.valid_fraction, greater_than=0.0, below=0.5)
        check_real("test_fraction", self.test_fraction, greater_than=0.0, below=0.5)
        check_int("lorenz_steps", self.lorenz_steps, minimum=100)

    @property
    def defaults(self) -> SeriesDefaults:
        """The series' defaults (``SERIES_DEFAULTS``; a file's: ``FILE_DEFAULTS`` with its season)."""
        if self.path is None:
            return SERIES_DEFAULTS[self.series]
        m = self.season or 1
        return FILE_DEFAULTS._replace(seasonal_order=(1, 0, 0, m) if m > 1 else (0, 0, 0, 0))

    @property
    def window(self) -> tuple[int, int]:
        """(L, H)."""
        return self.input_length or self.defaults.input_length, self.horizon or self.defaults.horizon

    @property
    def residual(self) -> bool:
        """Whether the model forecasts changes from the last value unless model.residual says (RESIDUAL_SERIES)."""
        return self.path is None and self.series in RESIDUAL_SERIES

    @property
    def source(self) -> str:
        """The series' name in messages and logs: the file, or the built-in series."""
        return self.path or self.series


# The model section: the forecasters' classes (``seqlab.recipes.common.forecaster_arms``), one per ``model.arch``,
# smaller and with dropout for series of a few thousand steps, and residual by the series (``DataConfig.residual``).


@dataclass(frozen=True)
class GRUArmConfig(arms.GRUArmConfig):
    """``gru``: gated recurrent units."""

    residual: bool | None = None  # forecast changes from the last value; None = True for lorenz and co2
    dropout: float = 0.2  # between layers and before the head
    hidden_size: int = 32  # H of the recurrent layers


@dataclass(frozen=True)
class GRUTextbookArmConfig(arms.GRUTextbookArmConfig):
    """``gru_textbook``: the notes' GRU (the reset gate applied before W_hn)."""

    residual: bool | None = None  # forecast changes from the last value; None = True for lorenz and co2
    dropout: float = 0.2  # between layers and before the head
    hidden_size: int = 32  # H of the recurrent layers


@dataclass(frozen=True)
class LSTMArmConfig(arms.LSTMArmConfig):
    """``lstm``: long short-term memory cells."""

    residual: bool | None = None  # forecast changes from the last value; None = True for lorenz and co2
    dropout: float = 0.2  # between layers and before the head
    hidden_size: int = 32  # H of the recurrent layers


@dataclass(frozen=True)
class RNNArmConfig(arms.RNNArmConfig):
    """``rnn``: Elman (tanh) cells."""

    residual: bool | None = None  # forecast changes from the last value; None = True for lorenz and co2
    dropout: float = 0.2  # between layers and before the head
    hidden_size: int = 32  # H of the recurrent layers


@dataclass(frozen=True)
class TransformerArmConfig(arms.TransformerArmConfig):
    """``transformer``: a causal pre-LN Transformer encoder over the window (sinusoidal positions)."""

    residual: bool | None = None  # forecast changes from the last value; None = True for lorenz and co2
    dropout: float = 0.2  # inside the layers and before the head


@dataclass(frozen=True)
class TCNArmConfig(arms.TCNArmConfig):
    """``tcn``: a causal dilated convolution stack over the window (Bai et al. 2018)."""

    residual: bool | None = None  # forecast changes from the last value; None = True for lorenz and co2
    dropout: float = 0.2  # inside the residual blocks and before the head
    hidden_size: int = 32  # channels of every level


@dataclass(frozen=True)
class SSMArmConfig(arms.SSMArmConfig):
    """``ssm``: an input projection and S4D blocks (Gu et al. 2022) over the window."""

    residual: bool | None = None  # forecast changes from the last value; None = True for lorenz and co2
    dropout: float = 0.2  # between the blocks and before the head


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
    """Baselines and the chaos score."""

    arima: bool = True  # fit the SARIMA baseline
    vpt_threshold: float = 0.4  # normalised error at which a Lorenz forecast stops being valid
    vpt_steps: int = 400  # length of the free-running Lorenz forecasts (4.0 time units = 3.6 Lyapunov times)
    vpt_stride: int = 25  # steps between their origins

    def __post_init__(self) -> None:
        check_bool("arima", self.arima)
        check_real("vpt_threshold", self.vpt_threshold, greater_than=0.0)
        check_int("vpt_steps", self.vpt_steps)
        check_int("vpt_stride", self.vpt_stride)


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model, train, eval."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=GRUArmConfig)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            lr=1e-3, batch_size=32, max_epochs=300, patience=30, weight_decay=1e-3, time_budget=120.0
        )
    )
    eval: EvalConfig = field(default_factory=EvalConfig)
