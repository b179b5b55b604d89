"""The shipped one-hour g2p preset, ``configs/g2p-large.toml``, parses and trains a few steps at a tiny size; and
``train.average_last`` (checkpoint averaging during a run) reaches the saved model."""

import json
from pathlib import Path

import torch
from cli_helpers import run_cli
from safetensors.torch import load_file

from seqlab.config import apply_overrides, flatten, load_toml
from seqlab.recipes import g2p

ROOT = Path(__file__).parents[2]
PRESET = ROOT / "configs" / "g2p-large.toml"
DICTIONARY = ROOT / "tests" / "fixtures" / "checkpoints" / "train.dict"


def test_the_preset_parses_into_a_larger_regularised_model_with_a_cosine_schedule():
    config = apply_overrides(g2p.Config(), flatten(load_toml(PRESET)), source=str(PRESET))
    default = g2p.Config()
    assert config.model.hidden_size > default.model.hidden_size
    assert config.model.dropout > default.model.dropout and config.model.label_smoothing > 0
    assert (config.train.schedule, config.train.time_budget, config.train.average_last) == ("cosine", 3400.0, 5)
    assert 0 < config.train.warmup_steps < config.train.max_steps
    assert config.train.precision == "auto"  # bf16 only where the hardware multiplies it natively
    assert config.data == default.data and config.decode == default.decode


def test_the_preset_trains_a_few_steps_at_a_tiny_size(tmp_path):
    out = tmp_path / "run"
    data = [f"data.{split}_path={DICTIONARY}" for split in ("train", "valid", "test")]
    tiny = ["model.embedding_size=4", "model.hidden_size=4", "train.max_steps=3", "train.warmup_steps=1"]
    result = run_cli("train", "g2p", "--no-progress", "--config", PRESET, "--out", out, "--set", *data, *tiny)
    assert result.code == 0, result.err
    saved = json.loads((out / "recipe.json").read_text())["config"]
    assert saved["model"]["decoder_layers"] == 2 and saved["model"]["label_smoothing"] == 0.1
    assert saved["train"]["schedule"] == "cosine" and saved["train"]["max_steps"] == 3
    results = json.loads((out / "results.json").read_text())
    assert results["steps"] == 3 and results["stopped_by"] == "max_steps"


def test_average_last_saves_the_mean_of_the_last_validated_weights(tmp_path):
    """Same seed and steps: the run with train.average_last=2 saves other weights than the best-checkpoint run,
    and evaluate/predict take it."""
    data = [f"data.{split}_path={DICTIONARY}" for split in ("train", "valid", "test")]
    tiny = ["model.embedding_size=4", "model.hidden_size=4", "train.max_steps=4", "train.validate_every=1"]
    tiny.append("train.schedule=constant")  # the default cosine reaches lr 0 at the last step: its weights repeat
    runs = {}
    for name, extra in (("best", []), ("averaged", ["train.average_last=2"])):
        runs[name] = tmp_path / name
        result = run_cli("train", "g2p", "--no-progress", "--out", runs[name], "--set", *data, *tiny, *extra)
        assert result.code == 0, result.err
    best = load_file(runs["best"] / "model.safetensors")
    averaged = load_file(runs["averaged"] / "model.safetensors")
    assert any(not torch.equal(best[k], averaged[k]) for k in best)
    assert json.loads((runs["averaged"] / "recipe.json").read_text())["config"]["train"]["average_last"] == 2
    assert run_cli("evaluate", runs["averaged"], "--data", DICTIONARY).code == 0
