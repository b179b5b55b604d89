"""The chirps recipe: the simulated series at their SNR, the Wiener filter by hand, a tiny run (train, save, load
and predict identically, evaluate a two-column file), and bad settings as one-line errors (exit 2)."""

import dataclasses

import numpy as np
import pytest
from cli_helpers import assert_error, run_cli

from seqlab.errors import DataError
from seqlab.recipes import chirps, load_system
from seqlab.recipes.base import run_training
from seqlab.training.trainer import TrainConfig


def tiny() -> chirps.Config:
    return chirps.Config(
        data=chirps.DataConfig(
            samples=128,
            sample_rate=64.0,
            f_min=5.0,
            f_max=25.0,
            cut_time_min=1.2,
            cut_time_max=1.8,
            train_signals=40,
            valid_signals=8,
        ),
        model=chirps.GRUDenoiserConfig(frame_size=8, hidden_size=6, num_layers=1),
        train=TrainConfig(lr=1e-2, batch_size=8, max_steps=3, patience=None),
        eval=chirps.EvalConfig(snrs=(5.0, 20.0), test_signals=4, band_low=6.0),
    )


def test_simulated_series_have_their_snr_and_white_unit_noise():
    data = tiny().data
    rng = np.random.default_rng(0)
    templates = chirps.draw_chirps(300, data, rng)
    np.testing.assert_allclose(np.linalg.norm(templates, axis=1), 1.0, rtol=1e-12)  # whitened norm = SNR
    strain = chirps.add_noise(templates, np.full(300, 7.0), data, rng)
    np.testing.assert_allclose(np.linalg.norm(strain.clean, axis=1), 7.0, rtol=1e-12)
    assert (strain.noisy - strain.clean).var() == pytest.approx(1.0 - 2 / 128, abs=0.02)


def test_the_wiener_filter_by_hand():
    """P_k = 2 at every bin, rho = 4, n = 128: each bin is scaled by 32 / (32 + 128) = 0.2."""
    config = tiny()
    system = chirps.ChirpSystem(None, np.full(65, 2.0), config)
    noisy = np.random.default_rng(1).normal(size=(1, 128))
    spectrum = np.fft.rfft(noisy)
    np.testing.assert_allclose(system.wiener(noisy, np.array([4.0])), np.fft.irfft(0.2 * spectrum, n=128))


@pytest.mark.parametrize("arm", [chirps.GRUDenoiserConfig, chirps.GRUTextbookDenoiserConfig])
def test_a_tiny_run_trains_saves_loads_and_predicts_identically(tmp_path, arm):
    config = dataclasses.replace(tiny(), model=arm(frame_size=8, hidden_size=6, num_layers=1))
    run = tmp_path / "run"
    report = run_training(chirps, config, run, progress=False, log=lambda line: None)
    for name in ("overlap", "wiener_overlap", "bandpass_overlap", "output_snr_db_snr5", "wiener_overlap_snr20"):
        assert name in report.results
    assert -1 <= report.results["overlap_snr5"] <= 1 and report.results["steps"] == 3
    assert (run / chirps.PLOT_FILE).read_bytes()[:4] == b"\x89PNG"
    strain = np.random.default_rng(5).normal(size=128) * 100
    path = tmp_path / "strain.txt"
    path.write_text("".join(f"{v:.17g}\n" for v in strain))
    (first,) = load_system(run).predict([str(path)])
    (second,) = load_system(run).predict([str(path)])
    np.testing.assert_array_equal(first.values, second.values)
    assert first.values.shape == (128,) and first.lines()[1] == f"{path} t=0.015625s  {first.values[1]:.6g}"
    # the loaded denoiser is the trained one: the test scores come back from the loaded run's test series
    training = chirps.ChirpTraining.build(config)
    assert load_system(run).score(training.test[5.0])["overlap"] == pytest.approx(report.results["overlap_snr5"])


def test_evaluate_scores_a_two_column_file(tmp_path):
    config = tiny()
    run_training(chirps, config, tmp_path / "run", progress=False, log=lambda line: None)
    system = load_system(tmp_path / "run")
    clean = np.stack([np.sin(np.arange(128) * 0.9), np.cos(np.arange(128) * 0.7)]) * 50
    noisy = clean + np.random.default_rng(4).normal(size=clean.shape) * 20
    path = tmp_path / "pair.txt"
    path.write_text("".join(f"{d:.17g} {c:.17g}\n" for d, c in zip(noisy.ravel(), clean.ravel(), strict=True)))
    scores = system.evaluate(str(path))
    assert scores["series"] == 2 and -1 <= scores["bandpass_overlap"] <= 1
    path.write_text("1 2\n" * 100)
    result = run_cli("evaluate", tmp_path / "run", "--data", path)
    assert_error(result, f"{path}: 100 samples, but one series is data.samples = 128")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["data.samples=500"], "data.samples (500) must be a multiple of model.frame_size (16)"),
        (["eval.snrs=5,x"], "--set eval.snrs: expected float, got 'x'"),
        (["eval.snrs=5,-1"], "--set: [eval] snrs ((5.0, -1.0)) must be positive numbers below 1e6, at least one"),
        (["eval.band_low=150"], "eval.band_low (150.0) must be below data.f_max (100.0)"),
        (["data.f_max=200"], "--set: [data] f_max (200.0) must be a finite number > 15.0 and < 128.0"),
    ],
)
def test_bad_settings_exit_2_with_one_line(tmp_path, settings, message):
    argv = ["train", "chirps", "--out", tmp_path / "run"]
    for setting in settings:
        argv += ["--set", setting]
    assert_error(run_cli(*argv), message)
    assert not (tmp_path / "run").exists()


def test_a_pairs_file_too_short_to_hold_out_validation_is_a_one_line_error(tmp_path):
    path = tmp_path / "pairs.txt"
    path.write_text("".join(f"0.1 {i % 5}\n" for i in range(300)))  # 2 series of 128
    base = tiny()
    data = chirps.DataConfig(**{**base.data.__dict__, "path": str(path), "valid_signals": 2})
    config = chirps.Config(data=data, model=base.model, train=base.train, eval=base.eval)
    with pytest.raises(DataError, match=r"pairs.txt: 2 series of 128 samples; data.valid_signals \(2\) are held out"):
        run_training(chirps, config, tmp_path / "run", progress=False, log=lambda line: None)
    assert not (tmp_path / "run").exists()
