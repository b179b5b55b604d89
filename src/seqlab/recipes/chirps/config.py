"""The ``chirps`` recipe's config: sections data (the simulated strain), model (one config per ``model.arch``, each a
``seqlab.models.SequenceDenoiser`` cell), train and eval (the input SNRs scored and the band-pass baseline).

An arch joins with one config class (its sizes, ``arch`` defaulting to its name) and one more member of
``ModelConfig``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from seqlab.config import ArchField
from seqlab.data.files import data_file
from seqlab.data.forecasting import SERIES
from seqlab.errors import ConfigError
from seqlab.models.denoiser import SequenceDenoiserConfig
from seqlab.training.trainer import TrainConfig
from seqlab.validation import check_bool, check_int, check_probability, check_real

MAX_SAMPLES = 1 << 20  # samples of one series
MAX_SIGNALS = 1_000_000


@dataclass(frozen=True)
class DataConfig:
    """The simulated strain (``seqlab.data.gravitational_waves``): sampling, chirps, noise and SNRs."""

    path: str | None = data_file(SERIES)  # training pairs: strain and clean signal a line, cut into series of n
    sample_rate: float = 256.0  # f_s (Hz)
    samples: int = 512  # n per series (2 s at 256 Hz); even, a multiple of model.frame_size
    f_min: float = 15.0  # Hz: the PSD is held at S_n(f_min) below it
    f_max: float = 100.0  # Hz: each chirp is cut where its frequency reaches it (below f_s / 2)
    chirp_mass_min: float = 5.0  # solar masses, chirp masses drawn uniformly in [min, max]
    chirp_mass_max: float = 20.0
    cut_time_min: float = 1.0  # s into the series where a chirp ends (reaches f_max), drawn uniformly
    cut_time_max: float = 1.9
    snr_min: float = 5.0  # matched-filter SNR of the training series, drawn uniformly in [min, max]
    snr_max: float = 40.0
    train_signals: int = 4_000  # distinct training chirps (each batch draws fresh noise and SNRs for them)
    valid_signals: int = 500  # validation series (fixed noise and SNRs); of data.path's: the last ones
    seed: int = 0  # seed of every draw (chirps, SNRs, noise)

    def __post_init__(self) -> None:
        check_real("sample_rate", self.sample_rate, greater_than=0.0, at_most=1e6)
        check_int("samples", self.samples, minimum=16, maximum=MAX_SAMPLES)
        if self.samples % 2:
            raise ConfigError(f"samples ({self.samples}) must be even")
        check_real("f_min", self.f_min, greater_than=0.0)
        check_real("f_max", self.f_max, greater_than=self.f_min, below=self.sample_rate / 2)
        check_real("chirp_mass_min", self.chirp_mass_min, greater_than=0.0)
        check_real("chirp_mass_max", self.chirp_mass_max, at_least=self.chirp_mass_min, at_most=1e4)
        check_real("cut_time_min", self.cut_time_min, greater_than=0.0)
        check_real("cut_time_max", self.cut_time_max, at_least=self.cut_time_min, at_most=self.duration)
        check_real("snr_min", self.snr_min, greater_than=0.0)
        check_real("snr_max", self.snr_max, at_least=self.snr_min, at_most=1e6)
        check_int("train_signals", self.train_signals, maximum=MAX_SIGNALS)
        check_int("valid_signals", self.valid_signals, maximum=MAX_SIGNALS)
        check_int("seed", self.seed, minimum=0)

    @property
    def duration(self) -> float:
        """n / f_s, seconds per series."""
        return self.samples / self.sample_rate


@dataclass(frozen=True)
class RecurrentDenoiserConfig(ArchField):
    """A (bidirectional) recurrent denoiser over frames of the whitened series (``seqlab.models.denoiser``)."""

    frame_size: int = 16  # F, samples per recurrent step
    hidden_size: int = 64  # H per direction
    num_layers: int = 2  # stacked recurrent layers
    bidirectional: bool = True  # read the series both ways (an offline filter)
    dropout: float = 0.0  # between recurrent layers

    def __post_init__(self) -> None:
        check_int("frame_size", self.frame_size, maximum=4096)
        check_int("hidden_size", self.hidden_size, maximum=8192)
        check_int("num_layers", self.num_layers, maximum=64)
        check_bool("bidirectional", self.bidirectional)
        check_probability("dropout", self.dropout)

    def model_config(self) -> SequenceDenoiserConfig:
        """The denoiser's config: this arch's fields, with ``arch`` as the cell."""
        sizes = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "arch"}
        return SequenceDenoiserConfig(channels=1, cell=self.arch, **sizes)


@dataclass(frozen=True)
class GRUDenoiserConfig(RecurrentDenoiserConfig):
    """``gru``: gated recurrent units."""

    arch: Literal["gru"] = "gru"


@dataclass(frozen=True)
class GRUTextbookDenoiserConfig(RecurrentDenoiserConfig):
    """``gru_textbook``: the notes' GRU (the reset gate applied before W_hn; ``seqlab.models.recurrent_layers``)."""

    arch: Literal["gru_textbook"] = "gru_textbook"


@dataclass(frozen=True)
class LSTMDenoiserConfig(RecurrentDenoiserConfig):
    """``lstm``: long short-term memory cells."""

    arch: Literal["lstm"] = "lstm"


@dataclass(frozen=True)
class RNNDenoiserConfig(RecurrentDenoiserConfig):
    """``rnn``: Elman (tanh) cells."""

    arch: Literal["rnn"] = "rnn"


ModelConfig = GRUDenoiserConfig | GRUTextbookDenoiserConfig | LSTMDenoiserConfig | RNNDenoiserConfig


@dataclass(frozen=True)
class EvalConfig:
    """The test series: their input SNRs and number, and the band-pass baseline."""

    snrs: tuple[float, ...] = (5.0, 10.0, 20.0, 40.0)  # matched-filter SNRs of the test series: --set eval.snrs=5,10
    test_signals: int = 200  # test series per SNR
    band_low: float = 20.0  # Hz, the band-pass baseline's lower edge (its upper edge is data.f_max)
    band_order: int = 4  # order of the Butterworth band-pass, run forwards and backwards

    def __post_init__(self) -> None:
        if isinstance(self.snrs, str):  # a run saved when snrs was one string, "5 10 20 40"
            object.__setattr__(self, "snrs", tuple(float(v) for v in self.snrs.split()))
        if not self.snrs or not all(isinstance(v, (int, float)) and 0 < v < 1e6 for v in self.snrs):
            raise ConfigError(f"snrs ({self.snrs!r}) must be positive numbers below 1e6, at least one")
        check_int("test_signals", self.test_signals, maximum=MAX_SIGNALS)
        check_real("band_low", self.band_low, greater_than=0.0)
        check_int("band_order", self.band_order, maximum=16)

    @property
    def snr_levels(self) -> tuple[float, ...]:
        """The SNRs of ``snrs``, as floats."""
        return tuple(float(v) for v in self.snrs)


@dataclass(frozen=True)
class Config:
    """The whole recipe: sections data, model (``model.arch``: gru | gru_textbook | lstm | rnn), train, eval."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=GRUDenoiserConfig)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            lr=3e-3,
            batch_size=32,
            max_epochs=100,
            max_steps=1_500,
            schedule="cosine",
            patience=5,
            validate_every=250,
            time_budget=540.0,
        )
    )
    eval: EvalConfig = field(default_factory=EvalConfig)
