"""The forecast recipe: splits, scaling, windows, the scores and baselines against hand-computed values and
statsmodels itself, and tiny end-to-end runs (a user file, Lorenz with its valid prediction time)."""

import json
import warnings

import numpy as np
import pytest
import torch
from statsmodels.tsa.statespace.sarimax import SARIMAX

from seqlab.config import apply_overrides
from seqlab.data.forecasting import (
    load_series,
    read_series,
    seasonal_naive_scale,
    window_origins,
    windows,
)
from seqlab.errors import ConfigError, DataError
from seqlab.recipes import forecast
from seqlab.recipes.base import run_training
from seqlab.recipes.forecast import training as forecast_training
from seqlab.recipes.forecast.evaluation import (
    arima_forecasts,
    forecast_scores,
    persistence,
    seasonal_naive,
    valid_prediction_time,
)
from seqlab.training.trainer import TrainConfig


def test_naive_forecasts_and_mase_by_hand():
    window = np.array([[1.0], [2.0], [3.0], [4.0], [5.0]])[None]  # (1, 5, 1)
    assert persistence(window, 3)[0, :, 0].tolist() == [5, 5, 5]
    assert seasonal_naive(window, 5, 2)[0, :, 0].tolist() == [4, 5, 4, 5, 4]
    train = np.array([0.0, 2.0, 0.0, 4.0])[:, None]
    scale = seasonal_naive_scale(train, 1)  # |2| + |2| + |4| over 3
    assert scale[0] == pytest.approx(8 / 3)
    scores = forecast_scores(np.array([[[1.0], [3.0]]]), np.array([[[0.0], [0.0]]]), scale)
    assert scores == pytest.approx({"rmse": np.sqrt(5), "mae": 2.0, "mase": 2.0 / (8 / 3)})


def test_mase_is_the_mean_of_per_channel_ratios_not_pooled():
    truth = np.zeros((1, 2, 2))  # (B, H, C)
    forecast = np.ones((1, 2, 2))  # MAE 1 in each channel
    scale = np.array([1.0, 10.0])
    assert forecast_scores(forecast, truth, scale)["mase"] == pytest.approx((1 / 1 + 1 / 10) / 2)  # 0.55
    # a channel in other units (x 1000, its scale too) leaves MASE unchanged; pooled MAE / pooled scale would not
    units = np.array([1.0, 1000.0])
    rescaled = forecast_scores(forecast * units, truth * units, scale * units)["mase"]
    assert rescaled == pytest.approx(0.55)


def test_the_seasonal_naive_forecast_of_the_training_part_has_mase_one():
    train = load_series("elnino").values[:300]
    origins = window_origins(12, 300, input_length=12, horizon=1)
    inputs, targets = windows(train, origins, input_length=12, horizon=1)
    scores = forecast_scores(seasonal_naive(inputs, 1, 12), targets, seasonal_naive_scale(train, 12))
    assert scores["mase"] == pytest.approx(1.0)


def test_valid_prediction_time_by_hand():
    truth = np.zeros((2, 4, 1))
    forecast = np.array([[0.1, 0.3, 0.5, 0.1], [0.0, 0.0, 0.0, 0.0]])[..., None]
    # the first window fails at step index 2, the second never: (2 + 4) / 2 steps of 0.5 time units, exponent 2
    assert valid_prediction_time(forecast, truth, threshold=0.4, dt=0.5, lyapunov_exponent=2.0) == 3.0


def test_the_arima_baseline_is_statsmodels_forecast_from_each_origin_without_refit():
    values = load_series("sunspots").values[:120]
    origins = np.array([100, 105])
    ours = arima_forecasts(values, 90, origins, horizon=4, order=(2, 0, 0), seasonal_order=(0, 0, 0, 0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = SARIMAX(values[:90, 0], order=(2, 0, 0), trend="c").fit(disp=False)
        for i, o in enumerate(origins):
            np.testing.assert_allclose(ours[i, :, 0], fitted.apply(values[:o, 0]).forecast(4), rtol=1e-6)


def tiny(data: forecast.DataConfig, model: forecast.ModelConfig | None = None) -> forecast.Config:
    return forecast.Config(
        data=data,
        model=model or forecast.GRUArmConfig(hidden_size=8),
        train=TrainConfig(lr=1e-2, batch_size=16, max_epochs=2, patience=None),
        eval=forecast.EvalConfig(arima=False, vpt_steps=60, vpt_stride=30),
    )


def test_a_run_on_a_series_file_scores_plots_predicts_and_evaluates(tmp_path):
    t = np.arange(200)
    path = tmp_path / "sine.txt"
    path.write_text("".join(f"{np.sin(2 * np.pi * i / 11.5):.6f}, {i / 100:.3f}\n" for i in t))
    data = forecast.DataConfig(path=str(path), season=12, input_length=12, horizon=3)
    report = run_training(forecast, tiny(data), tmp_path / "run", progress=False, log=lambda line: None)
    assert {"rmse", "mae", "mase", "persistence_mase", "seasonal_naive_mase"} <= report.results.keys()
    assert (tmp_path / "run" / forecast.PLOT_FILE).read_bytes()[:4] == b"\x89PNG"
    system = forecast.System.load(tmp_path / "run")
    (prediction,) = system.predict([str(path)])
    assert prediction.source == str(path) and prediction.values.shape == (3, 2)
    np.testing.assert_allclose(prediction.values, system.forecast(read_series(str(path))[None, -12:])[0])
    lines = prediction.lines()
    assert len(lines) == 3 and lines[0] == f"{path} +1  " + " ".join(f"{v:.6g}" for v in prediction.values[0])
    assert system.evaluate(str(path))["test_windows"] == 200 - 12 - 3 + 1


def test_lorenz_with_an_autoregressive_transformer_reports_its_valid_prediction_time(tmp_path):
    data = forecast.DataConfig(series="lorenz", lorenz_steps=800, input_length=8, horizon=2)
    config = tiny(data, forecast.TransformerArmConfig(d_model=8, num_heads=2, d_ff=16, head="autoregressive"))
    report = run_training(forecast, config, tmp_path / "run", progress=False, log=lambda line: None)
    assert report.results["vpt_lyapunov"] >= 0 and report.results["persistence_vpt_lyapunov"] > 0


def test_an_ssm_encoder_trains_and_its_loaded_run_scores_exactly_what_the_trained_one_did(tmp_path):
    path = tmp_path / "sine.txt"
    path.write_text("".join(f"{np.sin(2 * np.pi * i / 11.5):.6f}\n" for i in range(160)))
    data = forecast.DataConfig(path=str(path), input_length=12, horizon=3)
    config = tiny(data, forecast.SSMArmConfig(d_model=8, state_size=4))
    report = run_training(forecast, config, tmp_path / "run", progress=False, log=lambda line: None)
    system = forecast.System.load(tmp_path / "run")
    assert system.model.config.encoder == "ssm" and system.model.config.state_size == 4
    training = forecast.ForecastTraining.build(config)
    again = forecast_training.test_report(system, training.data, training.test_origins, tmp_path)
    assert again.results == {key: report.results[key] for key in again.results}
    assert again.examples == report.examples


def test_an_odd_ssm_state_size_is_one_line():
    with pytest.raises(ConfigError) as error:
        forecast.SSMArmConfig(state_size=7)
    assert str(error.value) == "state_size (7) must be even: N/2 complex modes and their conjugates"


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        (dict(series="sunspots", input_length=300), DataError, "shorter than L \\+ H"),
        (dict(series="sunspots", horizon=60), DataError, "shorter than the horizon"),
        (dict(series="tides"), ConfigError, "tides"),
    ],
)
def test_bad_settings_are_one_line_errors(tmp_path, data, error, message):
    with pytest.raises(error, match=message):
        config = tiny(forecast.DataConfig(**data))
        run_training(forecast, config, tmp_path / "run", progress=False, log=lambda line: None)
    assert not (tmp_path / "run").exists()


def test_validation_is_the_mean_squared_error_of_the_validation_windows_by_hand(tmp_path):
    """ForecastTraining alone: its validation windows are the series' standardised steps, and validate is their
    mean squared error over windows, steps and channels."""
    path = tmp_path / "ramp.txt"
    path.write_text("".join(f"{i % 7} {i % 5}\n" for i in range(100)))
    training = forecast.ForecastTraining.build(tiny(forecast.DataConfig(path=str(path), input_length=4, horizon=2)))
    data = training.data
    assert (data.valid_start, data.test_start) == (70, 85)  # 15% valid, 15% test
    scaled = (np.array([[i % 7, i % 5] for i in range(100)]) - data.scaler.mean) / data.scaler.std
    origins = range(70, 84)  # every first target with its H = 2 targets in the validation part
    np.testing.assert_allclose(training.valid.x.numpy(), np.stack([scaled[o - 4 : o] for o in origins]), rtol=1e-6)
    np.testing.assert_allclose(training.valid.y.numpy(), np.stack([scaled[o : o + 2] for o in origins]), rtol=1e-6)
    model = training.system.model.eval()
    with torch.no_grad():
        expected = ((model(training.valid.x) - training.valid.y) ** 2).mean().item()
    assert training.validate(model) == {"valid_loss": pytest.approx(expected, rel=1e-6)}
    with pytest.raises(RuntimeError, match="tested before it was saved"):
        training.test()


def test_predict_and_evaluate_refuse_a_series_too_short_in_one_line(tmp_path):
    path = tmp_path / "sine.txt"
    path.write_text("".join(f"{np.sin(i / 3):.5f}\n" for i in range(120)))
    run = tmp_path / "run"
    config = tiny(forecast.DataConfig(path=str(path), input_length=8, horizon=2))
    run_training(forecast, config, run, progress=False, log=lambda line: None)
    short = tmp_path / "short.txt"
    short.write_text("".join(f"{i}\n" for i in range(9)))
    system = forecast.System.load(run)
    with pytest.raises(DataError, match=r"^.*short.txt: 9 steps, but one window needs L \+ H = 10$"):
        system.evaluate(str(short))
    (prediction,) = system.predict([str(short)])
    assert len(prediction.lines()) == 2
    short.write_text("1\n2\n")
    with pytest.raises(DataError, match=r"short.txt: 2 steps, but the model reads L = 8$"):
        system.predict([str(short)])


def test_model_encoder_is_the_old_name_of_model_arch_and_each_arch_takes_only_its_keys():
    with pytest.warns(FutureWarning, match=r"^--set model\.encoder is renamed arch"):
        config = apply_overrides(forecast.Config(), {"model.encoder": "tcn", "model.num_levels": "2"})
    assert config.model == forecast.TCNArmConfig(num_levels=2)
    with pytest.raises(ConfigError) as error:
        apply_overrides(forecast.Config(), {"model.encoder": "tcn", "model.arch": "gru"})
    assert str(error.value) == "--set model: encoder is the old name of arch; give arch only"
    with pytest.raises(ConfigError) as error:
        apply_overrides(forecast.Config(), {"model.num_heads": "2"})
    assert str(error.value) == (
        "--set model.num_heads: does not apply to model.arch=gru (a key of model.arch=transformer)"
    )


def test_a_run_saved_with_model_encoder_and_every_encoders_keys_loads_as_its_arch(tmp_path):
    """A recipe.json from before the model section became a choice section: ``encoder`` and all the sizes."""
    path = tmp_path / "sine.txt"
    path.write_text("".join(f"{np.sin(i / 3):.6f}\n" for i in range(120)))
    config = tiny(forecast.DataConfig(path=str(path), input_length=8, horizon=2), forecast.LSTMArmConfig(hidden_size=8))
    run_training(forecast, config, tmp_path / "run", progress=False, log=lambda line: None)
    file = tmp_path / "run" / "recipe.json"
    saved = json.loads(file.read_text())
    model = saved["config"]["model"]
    model["encoder"] = model.pop("arch")
    model.update(d_model=64, num_heads=4, d_ff=128, num_levels=4, kernel_size=3, state_size=64)
    file.write_text(json.dumps(saved))
    assert forecast.System.load(tmp_path / "run").config.model == config.model
