"""The forecast recipe with model.arch=tcn: trains, logs its receptive field, saves, loads and predicts what the
model forecasts; bad sizes are refused in one line."""

import json

import numpy as np
import pytest
import torch

from seqlab.config import apply_overrides, parse_assignments
from seqlab.data.forecasting import read_series
from seqlab.errors import ConfigError
from seqlab.models.forecaster import Forecaster
from seqlab.recipes import forecast
from seqlab.recipes.base import run_training
from seqlab.training.trainer import TrainConfig


def test_a_tcn_run_trains_logs_its_receptive_field_saves_loads_and_predicts_the_same(tmp_path):
    path = tmp_path / "sine.txt"
    path.write_text("".join(f"{np.sin(2 * np.pi * i / 11.5):.6f}\n" for i in range(160)))
    config = forecast.Config(
        data=forecast.DataConfig(path=str(path), input_length=12, horizon=3),
        model=forecast.TCNArmConfig(hidden_size=8, num_levels=2, kernel_size=3),
        train=TrainConfig(lr=1e-2, batch_size=16, max_epochs=2, patience=None),
        eval=forecast.EvalConfig(arima=False),
    )
    lines = []
    report = run_training(forecast, config, tmp_path / "run", progress=False, log=lines.append)
    assert any("parameters, tcn encoder (receptive field 13 steps), direct head" in line for line in lines), lines
    assert {"rmse", "mase", "persistence_mase"} <= report.results.keys()
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["config"]
    assert (saved["encoder"], saved["num_levels"], saved["kernel_size"]) == ("tcn", 2, 3)
    first, second = forecast.System.load(tmp_path / "run"), forecast.System.load(tmp_path / "run")
    assert isinstance(first.model, Forecaster) and first.model.encoder.receptive_field == 13
    (a,), (b,) = first.predict([str(path)]), second.predict([str(path)])
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_allclose(a.values, first.forecast(read_series(str(path))[None, -12:])[0])
    with torch.no_grad():
        assert first.model(torch.zeros(1, 12, 1)).shape == (1, 3, 1)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("model.kernel_size=0", "--set: [model] kernel_size (0) must be an integer >= 1"),
        ("model.num_levels=-1", "--set: [model] num_levels (-1) must be an integer >= 1"),
    ],
)
def test_bad_tcn_sizes_are_refused_in_one_line(setting, message):
    with pytest.raises(ConfigError) as error:
        apply_overrides(forecast.Config(), parse_assignments(["model.arch=tcn", setting]))
    assert str(error.value) == message
