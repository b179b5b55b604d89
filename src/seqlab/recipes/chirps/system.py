"""``ChirpSystem``: a trained denoiser of whitened strain with the Wiener filter fitted beside it, as a run directory
holds it; the simulated series and the scores (overlap and output SNR against the Wiener and band-pass filters)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, NamedTuple

import numpy as np
import torch
from scipy.signal import butter, sosfiltfilt

from seqlab.data.files import read_json_file
from seqlab.data.forecasting import read_series
from seqlab.data.gravitational_waves import (
    chirp,
    coloured_noise,
    optimal_snr,
    overlap,
    rfft_psd,
    signal_to_residual_db,
    whiten,
)
from seqlab.errors import CheckpointError, DataError
from seqlab.export import OnnxModel, load_onnx_model
from seqlab.files import atomic_write
from seqlab.models.denoiser import SequenceDenoiser
from seqlab.recipes.base import model_device
from seqlab.recipes.chirps.config import Config, DataConfig
from seqlab.recipes.saved_run import check_model_config, load_recipe_config
from seqlab.recipes.system import SystemOptions

FILTERS_FILE = "filters.json"
EVAL_BATCH_SIZE = 256


class Strain(NamedTuple):
    """Whitened series (B, n): the data (signal + noise) and the clean signal; snr (B,): each one's matched-filter
    SNR (the norm of its whitened signal)."""

    noisy: np.ndarray
    clean: np.ndarray
    snr: np.ndarray


def strain_psd(data: DataConfig) -> np.ndarray:
    """(n // 2 + 1,): S_n at the rfft bins of the data section's series."""
    return rfft_psd(data.samples, sample_rate=data.sample_rate, f_min=data.f_min)


def draw_chirps(count: int, data: DataConfig, rng: np.random.Generator) -> np.ndarray:
    """(count, n): whitened chirps of SNR 1, chirp mass, end time and phase drawn uniformly from the data section's
    ranges (``seqlab.data.gravitational_waves.chirp``)."""
    t = np.arange(data.samples) / data.sample_rate
    psd = strain_psd(data)
    masses = rng.uniform(data.chirp_mass_min, data.chirp_mass_max, count)
    cut_times = rng.uniform(data.cut_time_min, data.cut_time_max, count)
    phases = rng.uniform(0.0, 2 * np.pi, count)
    signals = np.stack(
        [
            chirp(t, chirp_mass=m, cut_time=c, f_max=data.f_max, phase=p)
            for m, c, p in zip(masses, cut_times, phases, strict=True)
        ]
    )
    signals /= optimal_snr(signals, psd, sample_rate=data.sample_rate)[:, None]
    return whiten(signals, psd, sample_rate=data.sample_rate)


def add_noise(templates: np.ndarray, snrs: np.ndarray, data: DataConfig, rng: np.random.Generator) -> Strain:
    """Whitened chirps of SNR 1 (B, n) scaled to ``snrs`` (B,) in whitened coloured noise of the data's PSD."""
    psd = strain_psd(data)
    noise = whiten(
        coloured_noise(templates.shape, psd, sample_rate=data.sample_rate, rng=rng), psd, sample_rate=data.sample_rate
    )
    clean = templates * snrs[:, None]
    return Strain(clean + noise, clean, snrs)


def read_pairs(path: str, data: DataConfig) -> Strain:
    """The whitened series of a two-column strain file (data, clean signal; one sample a line, in the PSD's units),
    cut into consecutive series of data.samples samples (a shorter rest is left out); SNRs from the clean signals.

    Raises: DataError naming the file: unreadable, not two values a line, shorter than one series, or a series
        whose clean signal is all zeros.
    """
    values = read_series(path, channels=2)
    count = len(values) // data.samples
    if count == 0:
        raise DataError(f"{path}: {len(values)} samples, but one series is data.samples = {data.samples}")
    series = values[: count * data.samples].reshape(count, data.samples, 2).transpose(2, 0, 1)  # (2, B, n)
    psd = strain_psd(data)
    noisy, clean = (whiten(s, psd, sample_rate=data.sample_rate) for s in series)
    snr = np.sqrt((clean**2).sum(axis=-1))
    if (snr == 0).any():
        raise DataError(f"{path}: series {int(np.argmin(snr)) + 1} has an all-zero clean signal")
    return Strain(noisy, clean, snr)


class Denoised(NamedTuple):
    """The denoised whitened series of one input: ``SOURCE t=SECONDS  VALUE`` a sample."""

    source: str
    values: np.ndarray
    sample_rate: float

    def lines(self) -> list[str]:
        """One line a sample (6 significant digits)."""
        return [f"{self.source} t={i / self.sample_rate:.6g}s  {v:.6g}" for i, v in enumerate(self.values)]


@dataclass
class ChirpSystem:
    """A trained denoiser and the Wiener filter's signal spectrum: what a run directory holds.

    Attributes:
        model: the denoiser of whitened series.
        signal_power: (n // 2 + 1,), P_k, the mean |rfft|^2 of the training set's whitened chirps of SNR 1 (the
            Wiener filter's signal spectrum).
        config: the recipe config of the run.
        onnx_model: what denoising calls instead of ``model``: the run's exported graph under onnxruntime
            (``--backend onnxruntime``, the one option), else None.
    """

    model: SequenceDenoiser
    signal_power: np.ndarray
    config: Config
    onnx_model: OnnxModel | None = None
    OPTIONS: ClassVar[frozenset[str]] = frozenset({"backend"})
    PREDICT_READS_FILES: ClassVar[bool] = True  # ``FileInputs``: predict's inputs are strain files

    def save(self, directory: Path) -> None:
        """Write the model and ``filters.json`` (P_k); ``run_training`` adds recipe.json."""
        self.model.save_pretrained(directory)
        atomic_write(directory / FILTERS_FILE, json.dumps({"signal_power": self.signal_power.tolist()}) + "\n")

    @classmethod
    def load(cls, directory: Path, options: SystemOptions = SystemOptions()) -> ChirpSystem:
        """The run in ``directory``; with ``options.backend`` "onnxruntime", denoising runs its export in
        ``directory/onnx``.

        Raises:
            CheckpointError: (one line naming the file) for a missing or unreadable file, or a recipe.json that
                describes another model than config.json; (onnxruntime) the export is missing, stale or of
                another model.
            ConfigError: (onnxruntime) onnxruntime is not installed.
        """
        config = load_recipe_config(directory, Config)
        saved = read_json_file(directory / FILTERS_FILE, error=CheckpointError, missing="missing")
        try:
            power = np.asarray(saved["signal_power"], dtype=float)
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{directory / FILTERS_FILE}: unreadable ({e})") from None
        if power.shape != (config.data.samples // 2 + 1,):
            raise CheckpointError(f"{directory / FILTERS_FILE}: not the spectrum of {config.data.samples} samples")
        model = SequenceDenoiser.from_pretrained(directory)
        check_model_config(directory, config.model.model_config(), model.config)
        onnx_model = load_onnx_model(directory) if options.backend == "onnxruntime" else None
        return cls(model, power, config, onnx_model)

    def predict(self, inputs: Sequence[str]) -> list[Denoised]:
        """The denoised whitened series of each strain file of ``inputs`` (one sample a line, f_s apart, in the
        PSD's units: sqrt(1e-49 / Hz) * sqrt(Hz)), whitened with the run's PSD shape.

        Raises: DataError naming the file: unreadable, not one value a line, or a length that is odd or not a
            multiple of model.frame_size.
        """
        data, predictions = self.config.data, []
        for source in inputs:
            strain = read_series(source, channels=1)[:, 0]
            self.check_length(len(strain), source)
            psd = rfft_psd(len(strain), sample_rate=data.sample_rate, f_min=data.f_min)
            noisy = whiten(strain, psd, sample_rate=data.sample_rate)
            predictions.append(Denoised(source, self.denoise(noisy[None])[0], data.sample_rate))
        return predictions

    def evaluate(self, data_path: str) -> dict[str, float]:
        """Overlap and output SNR (``score``) on a two-column strain file (``read_pairs``).

        Raises: DataError naming the file, as ``read_pairs``.
        """
        strain = read_pairs(data_path, self.config.data)
        return self.score(strain) | {"series": float(len(strain.snr))}

    def check_length(self, samples: int, source: str) -> None:
        """Raises: DataError naming ``source`` unless ``samples`` is even and a multiple of the frame size."""
        frame = self.model.config.frame_size
        if samples % 2 or samples % frame:
            raise DataError(f"{source}: {samples} samples; the denoiser needs an even multiple of {frame}")

    @torch.no_grad()
    def denoise(self, noisy: np.ndarray) -> np.ndarray:
        """(B, n): the model's estimates of the clean whitened signals of whitened series ``noisy`` (B, n)."""
        self.model.eval()
        forward = self.model if self.onnx_model is None else self.onnx_model
        device = model_device(self.model) if self.onnx_model is None else torch.device("cpu")  # graphs: the CPU
        out = []
        for start in range(0, len(noisy), EVAL_BATCH_SIZE):
            x = torch.as_tensor(noisy[start : start + EVAL_BATCH_SIZE, :, None], dtype=torch.float32, device=device)
            out.append(forward(x)[..., 0].cpu().double().numpy())
        return np.concatenate(out)

    def wiener(self, noisy: np.ndarray, snr: np.ndarray) -> np.ndarray:
        """(B, n): the Wiener filter of each whitened series at its known SNR rho: gain rho^2 P_k / (rho^2 P_k + n)
        per rfft bin (white unit-variance noise has E|N_k|^2 = n)."""
        n = noisy.shape[-1]
        power = (snr[:, None] ** 2) * self.signal_power  # (B, n // 2 + 1)
        return np.fft.irfft(np.fft.rfft(noisy, axis=-1) * power / (power + n), n=n, axis=-1)

    def bandpass(self, noisy: np.ndarray) -> np.ndarray:
        """(B, n): a Butterworth band-pass [eval.band_low, data.f_max] of order eval.band_order, run forwards and
        backwards (zero phase) over each whitened series (``ChirpTraining.build`` checked that the band is one)."""
        data, evaluation = self.config.data, self.config.eval
        sos = butter(
            evaluation.band_order,
            [evaluation.band_low, data.f_max],
            btype="bandpass",
            fs=data.sample_rate,
            output="sos",
        )
        return sosfiltfilt(sos, noisy, axis=-1)

    def score(self, strain: Strain) -> dict[str, float]:
        """Mean overlap and output SNR (dB) with the clean signals of the model's, the Wiener filter's and the
        band-pass's estimates (prefixed ``wiener_``, ``bandpass_``), and the input's signal-to-noise ratio
        (``input_snr_db``, the data itself as the estimate)."""
        estimates = {
            "": self.denoise(strain.noisy),
            "wiener_": self.wiener(strain.noisy, strain.snr),
            "bandpass_": self.bandpass(strain.noisy),
        }
        results = {}
        for prefix, estimate in estimates.items():
            results[f"{prefix}overlap"] = float(overlap(estimate, strain.clean).mean())
            results[f"{prefix}output_snr_db"] = float(signal_to_residual_db(estimate, strain.clean).mean())
        return results | {"input_snr_db": float(signal_to_residual_db(strain.noisy, strain.clean).mean())}
