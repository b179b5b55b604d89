"""The fields recipe: its scores by hand, a tiny run (train, save, load and predict identically, evaluate a field
file), a user's field file as the data, and bad settings as one-line errors (exit 2 on the command line)."""

import numpy as np
import pytest
from cli_helpers import assert_error, run_cli

from seqlab.data.forecasting import Scaler
from seqlab.errors import DataError
from seqlab.recipes import fields, load_system
from seqlab.recipes.base import run_training
from seqlab.training.trainer import TrainConfig


def tiny(**data) -> fields.Config:
    sizes = dict(grid=16, samples=40, transient_samples=2, members=2, steps_per_sample=1, input_length=3, horizon=2)
    if "path" in data:  # a field file replaces the simulation, whose keys it refuses
        sizes = {k: v for k, v in sizes.items() if k not in fields.config.SIMULATION_KEYS}
    return fields.Config(
        data=fields.DataConfig(**(sizes | data)),
        model=fields.ModelConfig(patch_size=4, d_model=8, num_heads=2, d_ff=16, num_layers=1),
        train=TrainConfig(lr=1e-2, batch_size=8, max_steps=3, patience=None),
        eval=fields.EvalConfig(max_lead=3, stride=2, plot_leads=(1, 3)),
    )


def write_fields(path, values: np.ndarray) -> str:
    path.write_text("".join(" ".join(f"{v:.17g}" for v in field.ravel()) + "\n" for field in values))
    return str(path)


def test_scores_by_hand():
    """A 1 x 2 grid, climatology (0, 0), two forecasts of two leads."""
    system = fields.FieldSystem(None, Scaler(np.zeros((1, 2)), np.ones((1, 2))), tiny())
    truth = np.array([[[[1.0, -1.0]], [[2.0, 0.0]]], [[[0.0, 1.0]], [[1.0, 1.0]]]])  # (B=2, K=2, 1, 2)
    model = np.array([[[[1.0, -1.0]], [[1.0, 1.0]]], [[[0.0, 3.0]], [[-1.0, -1.0]]]])
    persistence = np.zeros_like(truth) + np.array([1.0, 0.0])
    climatology = np.zeros_like(truth)
    scores = system.score(fields.FieldForecasts(truth, model, persistence, climatology))
    # model, lead 1: errors (0, 0), (0, 2): RMSE 0, sqrt(2); ACC 2 / 2 = 1, 3 / 3 = 1.
    # lead 2: errors (-1, 1), (-2, -2): RMSE 1, 2; ACC 2 / sqrt(2 * 4), -2 / 2 = -1
    acc_lead2 = (np.sqrt(0.5) - 1) / 2
    expected_model = {"rmse_lead1": np.sqrt(2) / 2, "acc_lead1": 1.0, "rmse_lead2": 1.5, "acc_lead2": acc_lead2}
    # persistence (1, 0), lead 1: errors (0, 1), (1, -1): RMSE sqrt(1/2), 1; ACC 1 / sqrt(2), 0.
    # lead 2: errors (-1, 0), (0, -1): RMSE sqrt(1/2) both; ACC 2 / 2 = 1, 1 / sqrt(2)
    expected_persistence = {
        "persistence_rmse_lead1": (np.sqrt(0.5) + 1) / 2,
        "persistence_acc_lead1": np.sqrt(0.5) / 2,
        "persistence_rmse_lead2": np.sqrt(0.5),
        "persistence_acc_lead2": (1 + np.sqrt(0.5)) / 2,
    }
    # climatology: RMSE = the truth's rms; ACC 0 by convention
    expected_climatology = {
        "climatology_rmse_lead1": (1 + np.sqrt(0.5)) / 2,
        "climatology_acc_lead1": 0.0,
        "climatology_rmse_lead2": (np.sqrt(2) + 1) / 2,
        "climatology_acc_lead2": 0.0,
    }
    for expected in (expected_model, expected_persistence, expected_climatology):
        assert {k: scores[k] for k in expected} == pytest.approx(expected, rel=1e-12)
    assert scores["rmse"] == pytest.approx((np.sqrt(2) / 2 + 1.5) / 2, rel=1e-12)
    assert scores["acc"] == pytest.approx((1 + acc_lead2) / 2, rel=1e-12)
    assert scores["windows"] == 2.0


def test_a_tiny_run_trains_saves_loads_and_predicts_identically(tmp_path):
    config = tiny()
    training = fields.FieldTraining.build(config)
    run = tmp_path / "run"
    report = run_training(fields, config, run, progress=False, log=lambda line: None)
    leads = {
        f"{p}{m}_lead{h}" for p in ("", "persistence_", "climatology_") for m in ("rmse", "acc") for h in (1, 2, 3)
    }
    assert leads <= set(report.results)
    # test parts: fields 32..39 of each trajectory; origins 32, 34, 36 (+3 leads <= 40) in 2 trajectories
    assert report.results["steps"] == 3 and report.results["windows"] == 6
    assert (run / fields.PLOT_FILE).read_bytes()[:4] == b"\x89PNG"
    system = load_system(run)
    path = write_fields(tmp_path / "field.txt", training.values[0, :10])
    (prediction,) = system.predict([path])
    assert prediction.values.shape == (2, 16, 16)
    np.testing.assert_array_equal(prediction.values, system.forecast(training.values[None, 0, 7:10], steps=2)[0])
    np.testing.assert_array_equal(load_system(run).predict([path])[0].values, prediction.values)
    assert prediction.lines()[1] == f"{path} +2  " + " ".join(f"{v:.6g}" for v in prediction.values[1].ravel())
    own = load_system(run).predict(["test"])[0].values
    np.testing.assert_array_equal(own, system.forecast(training.values[None, -1, -3:], steps=2)[0])


def test_the_test_scores_are_those_of_the_forecasts_by_hand(tmp_path):
    config = tiny()
    training = fields.FieldTraining.build(config)
    forecasts = training.test_forecasts()
    # the second trajectory's first test forecast: origin 32, the model's own rollout from fields 29..31
    np.testing.assert_array_equal(forecasts.truth[3], training.values[1, 32:35])
    np.testing.assert_array_equal(forecasts.persistence[3], np.repeat(training.values[1, 31:32], 3, axis=0))
    np.testing.assert_array_equal(forecasts.model[3], training.system.forecast(training.values[1:2, 29:32], steps=3)[0])
    # the climatology is the mean of the training parts (fields 0..27 of each trajectory)
    np.testing.assert_allclose(forecasts.climatology[0, 0], training.values[:, :28].mean(axis=(0, 1)), atol=1e-12)


def test_evaluate_scores_a_field_file_and_refuses_a_short_one(tmp_path):
    config = tiny()
    run_training(fields, config, tmp_path / "run", progress=False, log=lambda line: None)
    system = load_system(tmp_path / "run")
    values = fields.FieldTraining.build(config).values[1]
    scores = system.evaluate(write_fields(tmp_path / "field.txt", values[:20]))
    assert scores["windows"] == len(range(3, 20 - 3 + 1, 2))
    path = write_fields(tmp_path / "field.txt", values[:5])
    with pytest.raises(DataError, match=r"field.txt: 5 fields, but one window needs T \+ eval.max_lead = 6$"):
        system.evaluate(path)
    (tmp_path / "bad.txt").write_text("1 2 3\n")
    with pytest.raises(DataError, match=r"bad.txt: 3 values a line, but the model forecasts 256 channels"):
        system.evaluate(str(tmp_path / "bad.txt"))


def test_a_field_file_is_one_trajectory_split_in_time(tmp_path):
    values = fields.FieldTraining.build(tiny()).values[0]
    config = tiny(path=write_fields(tmp_path / "field.txt", values))
    training = fields.FieldTraining.build(config)
    np.testing.assert_allclose(training.values, values[None], rtol=1e-15)
    report = run_training(fields, config, tmp_path / "run", progress=False, log=lambda line: None)
    assert report.results["windows"] == 3


def test_a_test_part_too_short_for_the_leads_is_a_one_line_error(tmp_path):
    config = tiny()
    config = fields.Config(config.data, config.model, config.train, fields.EvalConfig(max_lead=20, plot_leads=(1,)))
    with pytest.raises(DataError, match=r"^data: the test part \(8 fields a trajectory\) is shorter than T \+ eval"):
        run_training(fields, config, tmp_path / "run", progress=False, log=lambda line: None)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("model.patch_size=5", "model.patch_size (5) must divide data.grid (32)"),
        ("data.grid=31", "--set: [data] grid (31) must be even"),
        ("data.forcing_wavenumber=11", "--set: [data] forcing_wavenumber (11) must be an integer >= 0 and <= 9"),
        (
            "eval.plot_leads=1,9",
            "--set: [eval] plot_leads ((1, 9)) must be leads between 1 and max_lead (8)",
        ),
        ("model.d_model=10", "--set: [model] d_model (10) must be even and divisible by num_heads (4)"),
    ],
)
def test_bad_settings_exit_2_with_one_line(tmp_path, setting, message):
    assert_error(run_cli("train", "fields", "--out", tmp_path / "run", "--set", setting), message)
    assert not (tmp_path / "run").exists()


def test_predict_with_a_missing_file_exits_2(tmp_path):
    run_training(fields, tiny(), tmp_path / "run", progress=False, log=lambda line: None)
    result = run_cli("predict", tmp_path / "run", tmp_path / "absent.txt")
    assert result.code == 2 and "absent.txt" in result.err and len(result.err.splitlines()) == 1


@pytest.mark.parametrize("setting", ["reynolds_number=60", "members=2", "seed=3"])
def test_a_simulation_key_with_a_field_file_is_refused_not_ignored(tmp_path, setting):
    name, value = setting.split("=")
    argv = ["train", "fields", "--out", tmp_path / "run", "--set", "data.path=field.txt", f"data.{setting}"]
    shown = repr(float(value)) if name == "reynolds_number" else value
    assert_error(
        run_cli(*argv), f"--set: [data] {name} ({shown}) sets the simulation, which path replaces: drop one of them"
    )
    assert not (tmp_path / "run").exists()
