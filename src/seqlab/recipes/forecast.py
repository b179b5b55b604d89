"""Recipe ``forecast``: multi-step forecasting of a (multivariate) series from its last L steps.

Data (``data.series``; ``seqlab.data.forecasting``): yearly sunspots (m = 11), monthly Mauna Loa CO2 (m = 12),
monthly El Nino sea-surface temperatures (m = 12), all shipped by statsmodels, or a simulated Lorenz-63 system
(C = 3, m = 1); or the user's file (``data.path``: one step a line, C numbers). The series is split in time order
(train, valid, test: the last ``test_fraction``); each channel is standardised with the training part's mean and
standard deviation only. Windows: L inputs, the next H targets; validation and test windows have their targets in
their part (their inputs may reach back), and test origins are ``data.test_stride`` steps apart.

Model: ``seqlab.models.forecaster`` (rnn | gru | lstm | transformer encoder, direct or autoregressive head;
residual, i.e. forecasting changes from the last value, by default for Lorenz and the trending CO2 series, whose
test values lie above every training value that the scaler saw), trained by mean squared error
on the standardised values. Test scores (``forecast_eval``): RMSE, MAE (the series'
units) and MASE for the model and, on the same windows, persistence, seasonal naive and a SARIMA fitted on the
training part; for Lorenz also the valid prediction time (Lyapunov times) of free-running forecasts of
``eval.vpt_steps`` steps. ``forecast.png`` in the run directory plots test windows against the truth.

``seqlab predict RUN FILE`` forecasts the H steps after the end of a series file (one line a step, C values
separated by spaces); ``seqlab predict RUN test`` forecasts from the end of the test split's input (the last
L steps of the series). ``seqlab evaluate RUN --data FILE`` scores every window of a series file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from seqlab.data.forecasting import (
    LORENZ_LYAPUNOV,
    SERIES_NAMES,
    Scaler,
    Series,
    chronological_splits,
    load_series,
    read_series,
    seasonal_naive_scale,
    window_origins,
    windows,
)
from seqlab.errors import CheckpointError, DataError
from seqlab.files import atomic_write
from seqlab.models.forecaster import ENCODERS, HEADS, EncoderName, Forecaster, ForecasterConfig, HeadName, rollout
from seqlab.recipes.base import Report, TrainingRun, load_recipe_config, model_device, run_training
from seqlab.recipes.forecast_eval import (
    arima_forecasts,
    forecast_scores,
    persistence,
    plot_forecasts,
    seasonal_naive,
    valid_prediction_time,
)
from seqlab.recipes.run_directory import RunMode
from seqlab.training.trainer import LossOutput, TrainConfig
from seqlab.validation import check_bool, check_choice, check_int, check_probability, check_real

NAME = "forecast"
DESCRIPTION = "forecast sunspots, CO2, El Nino (statsmodels) or Lorenz-63: RNN/Transformer vs naive and SARIMA, MASE"
PREDICT_OPTIONS: tuple[str, ...] = ()
SCALING_FILE = "scaling.json"
PLOT_FILE = "forecast.png"


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
    path: str | None = None  # a series file (one step a line, C numbers); replaces data.series
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
        if self.path is None:
            return SERIES_DEFAULTS[self.series]
        m = self.season or 1
        return FILE_DEFAULTS._replace(seasonal_order=(1, 0, 0, m) if m > 1 else (0, 0, 0, 0))

    @property
    def window(self) -> tuple[int, int]:
        """(L, H)."""
        return self.input_length or self.defaults.input_length, self.horizon or self.defaults.horizon


@dataclass(frozen=True)
class ModelConfig:
    """The forecaster (``seqlab.models.ForecasterConfig``; C and H come from the data)."""

    encoder: EncoderName = "gru"  # rnn | gru | lstm | transformer
    head: HeadName = "direct"  # direct | autoregressive
    residual: bool | None = None  # forecast changes from the last value; None = True for lorenz and co2
    hidden_size: int = 32  # recurrent encoders
    num_layers: int = 1  # recurrent or Transformer layers
    d_model: int = 64  # Transformer encoder
    num_heads: int = 4
    d_ff: int = 128
    dropout: float = 0.2

    def __post_init__(self) -> None:
        check_choice("encoder", self.encoder, ENCODERS)
        check_choice("head", self.head, HEADS)
        for name in ("hidden_size", "num_layers", "d_model", "num_heads", "d_ff"):
            check_int(name, getattr(self, name))
        check_probability("dropout", self.dropout)
        if self.residual is not None:
            check_bool("residual", self.residual)
        self.model_config(channels=1, horizon=1, residual=False)

    def model_config(self, *, channels: int, horizon: int, residual: bool) -> ForecasterConfig:
        """The model's config; ``residual`` is used where the section leaves it None."""
        residual = residual if self.residual is None else self.residual
        fields = {k: getattr(self, k) for k in ("encoder", "head", "hidden_size", "num_layers", "d_model")}
        extra = {k: getattr(self, k) for k in ("num_heads", "d_ff", "dropout")}
        return ForecasterConfig(channels=channels, horizon=horizon, residual=residual, **fields, **extra)


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
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            lr=1e-3, batch_size=32, max_epochs=300, patience=30, weight_decay=1e-3, time_budget=120.0
        )
    )
    eval: EvalConfig = field(default_factory=EvalConfig)


class Prepared(NamedTuple):
    """The series (original units), its standardised values (T, C), the split, the scaler and MASE's scale (C,)."""

    series: Series
    scaled: np.ndarray
    valid_start: int
    test_start: int
    scaler: Scaler
    mase_scale: np.ndarray


def prepare_series(config: DataConfig) -> Prepared:
    """Read, split and standardise the series; check that L and H fit.

    Raises:
        DataError: the file is unusable, or a part is too short for one window of L + H steps.
    """
    if config.path is None:
        series = load_series(config.series, lorenz_steps=config.lorenz_steps)
    else:
        values = read_series(config.path)
        series = Series(values, tuple(f"y{c + 1}" for c in range(values.shape[1])), config.season or 1, 1.0)
    L, H = config.window
    splits = chronological_splits(
        len(series.values), valid_fraction=config.valid_fraction, test_fraction=config.test_fraction
    )
    source = config.path or config.series
    if splits.valid_start < L + H:
        raise DataError(f"{source}: the training part ({splits.valid_start} steps) is shorter than L + H ({L + H})")
    for part, start, stop in (
        ("valid", splits.valid_start, splits.test_start),
        ("test", splits.test_start, splits.length),
    ):
        if stop - start < H:
            raise DataError(f"{source}: the {part} part ({stop - start} steps) is shorter than the horizon H ({H})")
    train = series.values[: splits.valid_start]
    scaler = Scaler.fit(train)
    scale = seasonal_naive_scale(train, series.season)
    return Prepared(series, scaler.transform(series.values), splits.valid_start, splits.test_start, scaler, scale)


@dataclass
class ForecastSystem:
    """A trained forecaster with its scaling: what a run directory holds."""

    model: Forecaster
    scaler: Scaler
    mase_scale: np.ndarray
    season: int
    config: Config

    def save(self, directory: Path) -> None:
        self.model.save_pretrained(directory)
        payload = {
            "mean": self.scaler.mean.tolist(),
            "std": self.scaler.std.tolist(),
            "mase_scale": self.mase_scale.tolist(),
            "season": self.season,
        }
        atomic_write(directory / SCALING_FILE, json.dumps(payload, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path) -> ForecastSystem:
        config = load_recipe_config(directory, Config)
        try:
            saved = json.loads((directory / SCALING_FILE).read_text())
            scaler = Scaler(np.asarray(saved["mean"]), np.asarray(saved["std"]))
            scale, season = np.asarray(saved["mase_scale"]), int(saved["season"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{directory / SCALING_FILE}: unreadable ({e})") from None
        return cls(Forecaster.from_pretrained(directory), scaler, scale, season, config)

    @torch.no_grad()
    def forecast(self, inputs: np.ndarray, *, steps: int | None = None) -> np.ndarray:
        """(B, steps, C) forecasts in the series' units from windows ``inputs`` (B, L, C) in the series' units;
        ``steps`` beyond H roll the model out on its own forecasts (default H)."""
        self.model.eval()
        x = torch.as_tensor(self.scaler.transform(inputs), dtype=torch.float32, device=model_device(self.model))
        out = rollout(self.model, x, steps or self.model.config.horizon)
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
        return self.config.data.window


def train(
    config: Config,
    out_dir: Path,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
    mode: RunMode = "new",
) -> Report:
    """Train on the train part, keep the best validation MSE's model in ``out_dir``, score the test part.

    Raises:
        DataError: an unusable series file, or L + H too long for the series' parts.
    """
    L, H = config.data.window
    written_to: list[Path] = []

    def prepare() -> TrainingRun:
        data = prepare_series(config.data)
        C = data.scaled.shape[1]
        residual = config.data.path is None and config.data.series in RESIDUAL_SERIES
        model = Forecaster(config.model.model_config(channels=C, horizon=H, residual=residual))
        system = ForecastSystem(model, data.scaler, data.mase_scale, data.series.season, config)
        as_windows = lambda origins: tuple(  # noqa: E731
            torch.as_tensor(w, dtype=torch.float32) for w in windows(data.scaled, origins, input_length=L, horizon=H)
        )
        train_x, train_y = as_windows(window_origins(L, data.valid_start, input_length=L, horizon=H))
        valid_x, valid_y = as_windows(window_origins(data.valid_start, data.test_start, input_length=L, horizon=H))
        stride = config.data.test_stride or config.data.defaults.test_stride
        test_origins = window_origins(data.test_start, len(data.scaled), input_length=L, horizon=H, stride=stride)

        def loss_fn(m, batch) -> LossOutput:
            x, y = batch
            return LossOutput(torch.nn.functional.mse_loss(m(x), y), len(x))

        def train_batches(epoch, generator, batch_size):
            order = torch.randperm(len(train_x), generator=generator)
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                yield train_x[rows], train_y[rows]

        def validate(m) -> dict[str, float]:
            device = model_device(m)
            with torch.no_grad():
                error = torch.nn.functional.mse_loss(m(valid_x.to(device)), valid_y.to(device))
            return {"valid_loss": error.item()}

        def save(directory: Path) -> None:
            system.save(directory)
            written_to[:] = [directory]

        def test() -> Report:
            return test_report(system, data, test_origins, written_to[-1])

        return TrainingRun(
            model,
            loss_fn=loss_fn,
            train_batches=train_batches,
            validate=validate,
            save=save,
            test=test,
            summary=(
                f"data: {config.data.path or config.data.series}, {len(data.scaled)} steps x {C} channels, "
                f"season {data.series.season}; L={L}, H={H}; {len(train_x)} train / {len(valid_x)} valid / "
                f"{len(test_origins)} test windows"
            ),
            summary_model=f"{config.model.encoder} encoder, {config.model.head} head",
        )

    return run_training(NAME, config, out_dir, prepare, progress=progress, log=log, mode=mode)


def test_report(system: ForecastSystem, data: Prepared, origins: np.ndarray, directory: Path) -> Report:
    """Test scores of the model and the baselines, the Lorenz valid prediction time, and ``forecast.png``."""
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
        steps = config.eval.vpt_steps
        far = window_origins(data.test_start, len(values), input_length=L, horizon=steps, stride=config.eval.vpt_stride)
        if len(far) == 0:
            raise DataError(f"lorenz: the test part is shorter than eval.vpt_steps ({steps})")
        past, future = windows(values, far, input_length=L, horizon=steps)
        vpt = dict(threshold=config.eval.vpt_threshold, dt=data.series.dt, lyapunov_exponent=LORENZ_LYAPUNOV)
        scaled_future = system.scaler.transform(future)
        free_running = system.scaler.transform(system.forecast(past, steps=steps))
        results["vpt_lyapunov"] = valid_prediction_time(free_running, scaled_future, **vpt)
        results["persistence_vpt_lyapunov"] = valid_prediction_time(
            system.scaler.transform(persistence(past, steps)), scaled_future, **vpt
        )
    title = f"{config.data.path or config.data.series}: {config.model.encoder} ({config.model.head}), H={H}"
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


def evaluate(checkpoint: Path, data_path: str) -> dict[str, float]:
    """RMSE, MAE and MASE of the model and the naive baselines on every window of a series file (MASE scaled by
    the training part of the run's own series)."""
    system = ForecastSystem.load(checkpoint)
    L, H = system.model_window
    values = read_series(data_path, channels=system.model.config.channels)
    origins = window_origins(0, len(values), input_length=L, horizon=H)
    if len(origins) == 0:
        raise DataError(f"{data_path}: {len(values)} steps, but one window needs L + H = {L + H}")
    return system.score(values, origins)


def predict(checkpoint: Path, inputs: Sequence[str]) -> list[str]:
    """The H steps after the end of each series file of ``inputs`` (or of the run's own series for ``test``),
    one line a step: ``step VALUES``, steps counted from 1 after the input's last line."""
    system = ForecastSystem.load(checkpoint)
    L = system.model_window[0]
    lines = []
    for source in inputs:
        if source == "test":
            values = prepare_series(system.config.data).series.values
        else:
            values = read_series(source, channels=system.model.config.channels)
        if len(values) < L:
            raise DataError(f"{source}: {len(values)} steps, but the model reads L = {L}")
        forecast = system.forecast(values[None, -L:])[0]  # (H, C)
        lines += [f"{source} +{h + 1}  " + " ".join(f"{v:.6g}" for v in step) for h, step in enumerate(forecast)]
    return lines
