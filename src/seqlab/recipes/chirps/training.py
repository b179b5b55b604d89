"""The training run of the ``chirps`` recipe: whitened chirps with fresh noise and SNRs each epoch, mean squared
error against the clean whitened chirp, and the test report (scores by input SNR beside the Wiener and band-pass
filters, the picture ``denoised.png``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from seqlab.analysis.figures import new_figure, save_figure
from seqlab.errors import ConfigError, DataError
from seqlab.models.denoiser import SequenceDenoiser
from seqlab.recipes.base import Report, TrainingRun
from seqlab.recipes.chirps.config import Config
from seqlab.recipes.chirps.system import ChirpSystem, Strain, add_noise, draw_chirps, read_pairs
from seqlab.training.objectives import mse_loss

PLOT_FILE = "denoised.png"


class Pairs(NamedTuple):
    """A batch: whitened data x (B, n, 1) and the clean whitened signals y (B, n, 1)."""

    x: torch.Tensor
    y: torch.Tensor


def pairs(strain: Strain) -> Pairs:
    """The float32 tensors of a batch of series."""
    return Pairs(*(torch.as_tensor(s[..., None], dtype=torch.float32) for s in (strain.noisy, strain.clean)))


@dataclass
class ChirpTraining:
    """The parts of a run (``prepare``): the system being trained and its series.

    Attributes:
        system: the denoiser with the Wiener filter's spectrum.  templates: (B, n) whitened training chirps of
            SNR 1, drawn with fresh noise and SNRs each epoch.  given: data.path's training series (noise fixed),
            None when simulating.  valid: the validation series.  test: one set of test series per eval SNR.
        directory: where the run was last saved (``save``), for the plot.
    """

    system: ChirpSystem
    templates: np.ndarray
    given: Strain | None
    valid: Strain
    test: dict[float, Strain]
    directory: Path | None = field(default=None)

    @classmethod
    def build(cls, config: Config) -> ChirpTraining:
        """Draw the training chirps, the validation and test series, fit the Wiener filter's spectrum and build the
        untrained model.

        Raises: ConfigError if data.samples is not a multiple of model.frame_size, or eval.band_low not below
            data.f_max; DataError for an unusable data.path, or one with fewer than data.valid_signals + 1 series.
        """
        data, evaluation = config.data, config.eval
        if data.samples % config.model.frame_size:
            raise ConfigError(
                f"data.samples ({data.samples}) must be a multiple of model.frame_size ({config.model.frame_size})"
            )
        if evaluation.band_low >= data.f_max:
            raise ConfigError(f"eval.band_low ({evaluation.band_low}) must be below data.f_max ({data.f_max})")
        rng = np.random.default_rng(data.seed)
        if data.path is None:
            given = None
            templates = draw_chirps(data.train_signals, data, rng)
            snrs = rng.uniform(data.snr_min, data.snr_max, data.valid_signals)
            valid = add_noise(draw_chirps(data.valid_signals, data, rng), snrs, data, rng)
        else:
            read = read_pairs(data.path, data)
            if len(read.snr) <= data.valid_signals:
                raise DataError(
                    f"{data.path}: {len(read.snr)} series of {data.samples} samples; data.valid_signals "
                    f"({data.valid_signals}) are held out and at least one more must train"
                )
            cut = len(read.snr) - data.valid_signals
            given, valid = Strain(*(part[:cut] for part in read)), Strain(*(part[cut:] for part in read))
            templates = given.clean / given.snr[:, None]
        signal_power = (np.abs(np.fft.rfft(templates, axis=-1)) ** 2).mean(axis=0)
        system = ChirpSystem(SequenceDenoiser(config.model.model_config()), signal_power, config)
        test = {}
        for level in evaluation.snr_levels:
            level_snrs = np.full(evaluation.test_signals, level)
            test[level] = add_noise(draw_chirps(evaluation.test_signals, data, rng), level_snrs, data, rng)
        return cls(system, templates, given, valid, test)

    def train_batches(self, epoch: int, generator: torch.Generator, batch_size: int) -> Iterator[Pairs]:
        """The training series in shuffled batches of ``batch_size``: the simulated chirps each with fresh noise and
        an SNR drawn uniformly in [data.snr_min, data.snr_max] (from ``generator``: a run is reproducible), or
        data.path's series as they are."""
        data = self.system.config.data
        rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=generator)))
        order = rng.permutation(len(self.templates))
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            if self.given is not None:
                yield pairs(Strain(*(part[rows] for part in self.given)))
            else:
                snrs = rng.uniform(data.snr_min, data.snr_max, len(rows))
                yield pairs(add_noise(self.templates[rows], snrs, data, rng))

    @torch.no_grad()
    def validate(self, model: nn.Module) -> dict[str, float]:
        """``valid_loss``: the mean squared error on the validation series."""
        return {"valid_loss": mse_loss(model, pairs(self.valid)).loss.item()}

    def save(self, directory: Path) -> None:
        """Save the system into ``directory`` and remember it for the test's plot."""
        self.system.save(directory)
        self.directory = directory

    def test_report(self) -> Report:
        """Scores (``ChirpSystem.score``) at each eval SNR, suffixed ``_snrRHO``, and their means over the SNRs
        (``overlap``, ``wiener_overlap``, ``bandpass_overlap``); ``denoised.png``.

        Raises: RuntimeError if the run was never saved.
        """
        if self.directory is None:
            raise RuntimeError("the run is tested before it was saved: no directory for its plot")
        by_level = {level: self.system.score(strain) for level, strain in self.test.items()}
        results = {}
        for name in ("overlap", "wiener_overlap", "bandpass_overlap"):
            results[name] = float(np.mean([scores[name] for scores in by_level.values()]))
        for level, scores in by_level.items():
            results |= {f"{k}_snr{level:g}": v for k, v in scores.items()}
        plot_denoised(self.directory / PLOT_FILE, self.system, self.test, by_level)
        examples = [
            (
                f"SNR {level:g}: overlap (output SNR dB)",
                f"wiener {s['wiener_overlap']:.3f} ({s['wiener_output_snr_db']:.1f})",
                f"model {s['overlap']:.3f} ({s['output_snr_db']:.1f})",
            )
            for level, s in by_level.items()
        ]
        return Report(results, examples)

    def summary(self) -> str:
        """The data's part of the training log line."""
        data = self.system.config.data
        if data.path is not None:
            return (
                f"data: {data.path}, {len(self.templates)} train / {len(self.valid.snr)} valid series of {data.samples}"
            )
        return (
            f"data: {len(self.templates)} training chirps (M_c {data.chirp_mass_min:g}-{data.chirp_mass_max:g} M_sun, "
            f"cut at {data.f_max:g} Hz), {data.samples} samples at {data.sample_rate:g} Hz, SNR "
            f"{data.snr_min:g}-{data.snr_max:g}; {len(self.valid.snr)} valid series; test SNRs "
            f"{', '.join(f'{level:g}' for level in self.test)}"
        )


def plot_denoised(
    path: Path, system: ChirpSystem, test: dict[float, Strain], by_level: dict[float, dict[str, float]]
) -> None:
    """Write a PNG: the first test series at the middle SNR (data, clean chirp, the model's and the Wiener
    filter's estimates) and the mean overlap of each method against the input SNR."""
    levels = list(test)
    level = levels[len(levels) // 2]
    strain = Strain(*(part[:1] for part in test[level]))
    t = np.arange(strain.noisy.shape[1]) / system.config.data.sample_rate
    figure = new_figure(figsize=(10, 6.5))
    top, bottom = figure.subplots(2, 1)
    top.plot(t, strain.noisy[0], color="0.8", lw=0.6, label="whitened data")
    top.plot(t, strain.clean[0], color="black", lw=1.0, label="clean chirp")
    top.plot(t, system.wiener(strain.noisy, strain.snr)[0], lw=0.8, label="Wiener")
    top.plot(t, system.denoise(strain.noisy)[0], lw=0.8, label=f"{system.config.model.arch} denoiser")
    top.set_xlabel("time (s)")
    top.set_ylabel("whitened strain")
    top.set_title(f"a test series at matched-filter SNR {level:g}", fontsize=9)
    top.legend(fontsize=7, loc="upper left")
    for prefix, label in (("", "denoiser"), ("wiener_", "Wiener"), ("bandpass_", "band-pass")):
        bottom.plot(levels, [by_level[v][f"{prefix}overlap"] for v in levels], marker="o", label=label)
    bottom.set_xscale("log")
    bottom.set_xticks(levels, labels=[f"{v:g}" for v in levels])
    bottom.set_xticks([], minor=True)
    bottom.set_xlabel("input matched-filter SNR")
    bottom.set_ylabel("overlap with the clean chirp")
    bottom.legend(fontsize=7)
    figure.tight_layout()
    save_figure(figure, path, dpi=90)


def prepare(config: Config, *, resume_from: Path | None = None) -> TrainingRun:
    """Draw the chirps and build the denoiser: the parts ``run_training`` trains, saves and tests (the best
    validation MSE's model kept).

    Raises: ConfigError for a data.samples that the frames do not divide, or a band-pass edge above f_max.
    """
    training = ChirpTraining.build(config)
    return TrainingRun(
        config,
        training.system.model,
        loss_fn=mse_loss,
        train_batches=training.train_batches,
        validate=training.validate,
        save=training.save,
        test=training.test_report,
        summary=training.summary(),
        summary_model=f"{config.model.arch} denoiser, frames of {config.model.frame_size}",
    )
