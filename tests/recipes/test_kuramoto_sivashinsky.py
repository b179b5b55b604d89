"""The kuramoto-sivashinsky recipe: its scores by hand, tiny runs of both arch families (train, save, load and
predict identically, evaluate a field file), and bad settings as one-line errors (exit 2 on the command line)."""

import numpy as np
import pytest
from cli_helpers import assert_error, run_cli

from seqlab.errors import ConfigError, DataError
from seqlab.recipes import kuramoto_sivashinsky as ks
from seqlab.recipes import load_system
from seqlab.recipes.base import run_training
from seqlab.training.trainer import TrainConfig


def tiny(**model) -> ks.Config:
    if model.pop("transformer", False):
        arm = ks.TransformerArmConfig(d_model=8, num_heads=2, d_ff=16, **model)
    elif model.pop("tcn", False):
        arm = ks.TCNArmConfig(hidden_size=8, num_levels=2, **model)
    elif model.pop("ssm", False):
        arm = ks.SSMArmConfig(d_model=8, state_size=4, **model)
    else:
        arm = ks.GRUArmConfig(hidden_size=8, **model)
    return ks.Config(
        data=ks.DataConfig(steps=400, transient_steps=200, input_length=4, horizon=2),
        model=arm,
        train=TrainConfig(lr=1e-2, batch_size=16, max_steps=4, patience=None),
        eval=ks.EvalConfig(lyapunov_renormalisations=20, vpt_steps=30, vpt_stride=20),
    )


def test_scores_by_hand():
    """lambda_1 = 0.5 and dt = 1: one Lyapunov time is 2 steps (index 1); E = |error| / 2 with one grid point."""
    config = tiny()
    config = ks.Config(
        data=ks.DataConfig(grid=8, dt=1.0, input_length=4, horizon=2),
        model=config.model,
        eval=ks.EvalConfig(vpt_threshold=0.4),
    )
    system = ks.KSSystem(None, None, lyapunov_exponent=0.5, field_scale=2.0, config=config)
    truth = np.zeros((2, 4, 1))
    model = np.array([[0.2, 0.6, 1.0, 2.0], [0.0, 0.2, 0.4, 0.6]])[..., None]  # E: [.1 .3 .5 1], [0 .1 .2 .3]
    persistence = np.full((2, 4, 1), 1.0)  # E = 0.5 throughout: never valid
    forecasts = ks.ChaosForecasts(truth, model, persistence, np.zeros_like(truth))
    scores = system.score(forecasts)
    # model: valid for 2 and 4 steps -> 3 steps = 3 time units = 1.5 Lyapunov times
    assert scores == pytest.approx(
        {
            "vpt_lyapunov": 1.5,
            "error_1lt": (0.3 + 0.1) / 2,
            "persistence_vpt_lyapunov": 0.0,
            "persistence_error_1lt": 0.5,
            "climatology_vpt_lyapunov": 2.0,  # exact: 4 steps
            "climatology_error_1lt": 0.0,
            "windows": 2.0,
        }
    )


@pytest.mark.parametrize(
    "model", [dict(), dict(transformer=True, head="autoregressive"), dict(tcn=True), dict(ssm=True)]
)
def test_a_tiny_run_trains_saves_loads_and_predicts_identically(tmp_path, model):
    config = tiny(**model)
    training = ks.KSTraining.build(config)
    run = tmp_path / "run"
    report = run_training(ks, config, run, progress=False, log=lambda line: None)
    assert {"vpt_lyapunov", "persistence_vpt_lyapunov", "climatology_vpt_lyapunov", "lyapunov_exponent"} <= set(
        report.results
    )
    assert report.results["steps"] == 4 and report.results["windows"] == 3  # origins 320, 340, 360 of the last 80 steps
    assert (run / ks.PLOT_FILE).read_bytes()[:4] == b"\x89PNG"
    # the recipe's simulation is the run's own: the build before training saw the same field and lambda_1
    assert report.results["lyapunov_exponent"] == training.system.lyapunov_exponent
    system = load_system(run)
    field_file = tmp_path / "field.txt"
    field_file.write_text("".join(" ".join(f"{v:.17g}" for v in row) + "\n" for row in training.values[:50]))
    (prediction,) = system.predict([str(field_file)])
    assert prediction.values.shape == (2, 64)
    np.testing.assert_array_equal(prediction.values, system.forecast(training.values[None, 46:50], steps=2)[0])
    again = load_system(run).predict([str(field_file)])[0]
    np.testing.assert_array_equal(again.values, prediction.values)
    assert prediction.lines()[0] == f"{field_file} +1  " + " ".join(f"{v:.6g}" for v in prediction.values[0])
    assert load_system(run).predict(["test"])[0].values.shape == (2, 64)


def test_evaluate_scores_a_field_file_and_refuses_a_short_one(tmp_path):
    config = tiny()
    run_training(ks, config, tmp_path / "run", progress=False, log=lambda line: None)
    system = load_system(tmp_path / "run")
    values = ks.KSTraining.build(config).values
    path = tmp_path / "field.txt"
    path.write_text("".join(" ".join(f"{v:.17g}" for v in row) + "\n" for row in values[:80]))
    scores = system.evaluate(str(path))
    assert scores["windows"] == len(range(4, 80 - 30 + 1, 20))
    path.write_text("".join(" ".join(f"{v:.17g}" for v in row) + "\n" for row in values[:20]))
    with pytest.raises(DataError, match=r"field.txt: 20 steps, but one window needs L \+ eval.vpt_steps = 34$"):
        system.evaluate(str(path))


def test_a_test_part_too_short_for_the_free_running_forecasts_is_a_one_line_error(tmp_path):
    config = tiny()
    config = ks.Config(data=config.data, model=config.model, train=config.train, eval=ks.EvalConfig(vpt_steps=500))
    with pytest.raises(DataError, match=r"^data: the test part \(80 steps\) is shorter than L \+ eval.vpt_steps"):
        run_training(ks, config, tmp_path / "run", progress=False, log=lambda line: None)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("data.grid=63", "--set: [data] grid (63) must be even"),
        (
            "model.arch=tcnn",
            "--set model.arch: 'tcnn' is not one of gru, gru_textbook, lstm, rnn, transformer, tcn, ssm",
        ),
        ("model.d_model=10", "--set: [model] d_model (10) must be divisible by num_heads (4)"),
        ("model.num_layers=3", "--set: [model] num_layers (3) is not used by arch 'tcn': its depth is num_levels"),
    ],
)
def test_bad_settings_exit_2_with_one_line(tmp_path, setting, message):
    argv = ["train", "kuramoto-sivashinsky", "--out", tmp_path / "run", "--set", setting]
    if setting.startswith("model.d_model"):
        argv += ["--set", "model.arch=transformer"]
    if setting.startswith("model.num_layers"):
        argv += ["--set", "model.arch=tcn"]
    assert_error(run_cli(*argv), message)
    assert not (tmp_path / "run").exists()


def test_predict_with_a_missing_file_exits_2(tmp_path):
    run_training(ks, tiny(), tmp_path / "run", progress=False, log=lambda line: None)
    result = run_cli("predict", tmp_path / "run", tmp_path / "absent.txt")
    assert result.code == 2 and "absent.txt" in result.err and len(result.err.splitlines()) == 1


def test_a_field_file_trains_with_its_given_lyapunov_exponent_and_refuses_without(tmp_path):
    values = ks.KSTraining.build(tiny()).values[:, ::8]  # 8 of the 64 grid points
    path = tmp_path / "field.txt"
    path.write_text("".join(" ".join(f"{v:.6f}" for v in row) + "\n" for row in values))
    base = tiny()
    data = ks.DataConfig(path=str(path), grid=8, input_length=4, horizon=2)
    config = ks.Config(data=data, model=base.model, train=base.train, eval=base.eval)
    with pytest.raises(ConfigError, match=r"^eval.lyapunov_exponent: give lambda_1 of data.path's system"):
        run_training(ks, config, tmp_path / "run", progress=False, log=lambda line: None)
    given = ks.EvalConfig(lyapunov_exponent=0.05, vpt_steps=30, vpt_stride=20)
    config = ks.Config(data=data, model=base.model, train=base.train, eval=given)
    report = run_training(ks, config, tmp_path / "run", progress=False, log=lambda line: None)
    assert report.results["lyapunov_exponent"] == 0.05
    assert load_system(tmp_path / "run").predict(["test"])[0].values.shape == (2, 8)


@pytest.mark.parametrize("setting", ["length=30", "steps=500", "seed=3"])
def test_a_simulation_key_with_a_field_file_is_refused_not_ignored(tmp_path, setting):
    name, value = setting.split("=")
    argv = ["train", "kuramoto-sivashinsky", "--out", tmp_path / "run", "--set", "data.path=f.txt", f"data.{setting}"]
    shown = repr(float(value)) if name == "length" else value
    assert_error(
        run_cli(*argv), f"--set: [data] {name} ({shown}) sets the simulation, which path replaces: drop one of them"
    )
    assert not (tmp_path / "run").exists()
