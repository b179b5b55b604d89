"""Snapshot ensembles from one run (Huang et al. 2017): ``train.cycles=M`` saves the weights at the end of each
cosine cycle as a run directory ``snapshots/cycle-K`` that loads, predicts and decodes as an ``--ensemble``."""

import json
from pathlib import Path

import pytest
import torch
from cli_helpers import assert_error, run_cli
from safetensors.torch import load_file

from seqlab.recipes import load_system
from seqlab.recipes.base import SNAPSHOTS_DIR
from seqlab.training.checkpoint import STATE_FILE, load_training_state

ROOT = Path(__file__).parents[2]
DICTIONARY = ROOT / "tests" / "fixtures" / "checkpoints" / "train.dict"
DATA = [f"data.{split}_path={DICTIONARY}" for split in ("train", "valid", "test")]
TINY = ["model.embedding_size=4", "model.hidden_size=4", "train.time_budget=none", "train.checkpoint_every=1"]


@pytest.fixture(scope="module")
def cycled(tmp_path_factory):
    """6 steps in 3 cycles of 2 (min_lr_ratio 0.5: each cycle's last step moves the weights), and the training
    state after each step (``checkpoint_every=1``)."""
    out = tmp_path_factory.mktemp("cycled") / "run"
    settings = [*DATA, *TINY, "train.max_steps=6", "train.cycles=3", "train.min_lr_ratio=0.5"]
    result = run_cli("train", "g2p", "--no-progress", "--out", out, "--set", *settings)
    assert result.code == 0, result.err
    return out, result.err


def test_a_snapshot_is_written_at_the_last_step_of_each_cycle(cycled):
    out, log = cycled
    snapshots = out / SNAPSHOTS_DIR
    assert sorted(p.name for p in snapshots.iterdir()) == ["cycle-1", "cycle-2", "cycle-3"]
    for cycle, step in ((1, 2), (2, 4), (3, 6)):
        assert f"snapshot of cycle {cycle} (step {step}): {snapshots / f'cycle-{cycle}'}\n" in log
    final = load_training_state(out / STATE_FILE)  # the state after step 6, the end of cycle 3
    assert final["run"]["step"] == 6
    last = load_file(snapshots / "cycle-3" / "model.safetensors")
    assert set(last) == set(final["model"])
    for name, tensor in last.items():
        assert torch.equal(tensor, final["model"][name])
    first = load_file(snapshots / "cycle-1" / "model.safetensors")
    assert any(not torch.equal(first[name], last[name]) for name in last)
    saved = json.loads((snapshots / "cycle-2" / "recipe.json").read_text())
    assert saved["recipe"] == "g2p" and saved["config"]["train"]["cycles"] == 3


def test_snapshots_load_and_decode_alone_and_as_an_ensemble(cycled):
    out, _ = cycled
    snapshots = [out / SNAPSHOTS_DIR / f"cycle-{k}" for k in (1, 2, 3)]
    system = load_system(snapshots[0])
    assert len(system.predict(["cat"])) == 1
    result = run_cli("evaluate", snapshots[2], "--data", DICTIONARY, "--ensemble", *snapshots[:2])
    assert result.code == 0, result.err
    assert "wer" in result.out


def test_one_cycle_writes_no_snapshots(tmp_path):
    out = tmp_path / "run"
    result = run_cli("train", "g2p", "--no-progress", "--out", out, "--set", *DATA, *TINY, "train.max_steps=2")
    assert result.code == 0, result.err
    assert not (out / SNAPSHOTS_DIR).exists()
    assert "snapshot" not in result.err


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("train.cycles=0", "cycles (0) must be an integer >= 1 and <= 1000000000"),
        ("train.cycles=2 train.schedule=constant", "cycles (2) is used by schedule 'cosine' only, not 'constant'"),
    ],
)
def test_bad_cycles_are_refused_in_one_line(tmp_path, setting, message):
    result = run_cli("train", "g2p", "--out", tmp_path / "run", "--set", *DATA, *setting.split())
    assert_error(result, f"--set: [train] {message}")
    assert not (tmp_path / "run").exists()
