"""Broken checkpoints and failing disks: one line each, and the previous checkpoint always survives."""

import errno
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from cli_helpers import assert_error, run_cli
from faults.helpers import assert_equal_tensors, g2p_args, weights
from safetensors.torch import save_file

import seqlab.files
from seqlab.models import load_pretrained
from seqlab.training.checkpoint import STATE_FILE, load_training_state

STEPS = ["train.max_steps=9", "train.checkpoint_every=2", "train.validate_every=3"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory, dictionary) -> Path:
    """A tiny g2p run that ran to its end."""
    out = tmp_path_factory.mktemp("runs") / "whole"
    result = run_cli("train", "g2p", "--out", out, "--no-progress", *g2p_args(dictionary, *STEPS))
    assert result.code == 0, result.err
    return out


def copy_run(run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    return out


def test_a_full_disk_stops_the_run_in_one_line_and_the_previous_checkpoint_resumes(
    tmp_path, dictionary, finished, monkeypatch
):
    """The 3rd training checkpoint (step 4) fails with ENOSPC while flushing; the 2nd (step 3, a validation's)
    stays whole."""
    fsync, checkpoints = os.fsync, []

    def full_disk(fd):
        if STATE_FILE in os.readlink(f"/proc/self/fd/{fd}"):
            checkpoints.append(fd)
            if len(checkpoints) == 3:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fsync(fd)

    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(seqlab.files.os, "fsync", full_disk)
        result = run_cli("train", "g2p", "--out", out, "--no-progress", *g2p_args(dictionary, *STEPS))
    assert result.code == 2 and result.out == ""
    assert result.err.splitlines()[-1] == f"seqlab: error: {out / STATE_FILE}: cannot write (No space left on device)"
    assert load_training_state(out / STATE_FILE)["run"]["step"] == 3
    assert not [p.name for p in out.iterdir() if ".seqlab-tmp-" in p.name]  # the failed write cleaned up
    assert run_cli("train", "--resume", out, "--no-progress").code == 0
    assert_equal_tensors(weights(out), weights(finished))


def test_a_full_disk_while_saving_the_model_keeps_the_previous_weights(tmp_path, finished, monkeypatch):
    out = copy_run(finished, tmp_path)
    before = {name: (out / name).read_bytes() for name in ("config.json", "model.safetensors")}
    model = load_pretrained(out)

    def full_disk(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(seqlab.files.os, "fsync", full_disk)
    with pytest.raises(seqlab.files.StorageError, match=r"/config.json: cannot write \(No space left on device\)$"):
        model.save_pretrained(out)
    assert {name: (out / name).read_bytes() for name in before} == before
    assert not [p.name for p in out.iterdir() if ".seqlab-tmp-" in p.name]


@pytest.mark.parametrize("keep", [0, 7, 100, -1000])
def test_a_truncated_training_checkpoint_is_one_line(tmp_path, finished, keep):
    out = copy_run(finished, tmp_path)
    path = out / STATE_FILE
    data = path.read_bytes()
    path.write_bytes(data[:keep])
    result = run_cli("train", "--resume", out, "--no-progress")
    assert result.code == 2 and result.out == ""
    assert re.fullmatch(rf"seqlab: error: {re.escape(str(path))}: unreadable training checkpoint \(.+\)\n", result.err)


def test_a_training_checkpoint_of_another_model_is_one_line(tmp_path, finished, dictionary):
    other = tmp_path / "other"
    settings = [*STEPS, "model.hidden_size=12"]
    assert run_cli("train", "g2p", "--out", other, "--no-progress", *g2p_args(dictionary, *settings)).code == 0
    out = copy_run(finished, tmp_path)
    shutil.copy(other / STATE_FILE, out / STATE_FILE)
    result = run_cli("train", "--resume", out, "--no-progress")
    assert_error(  # refused before anything is written (tests/faults/test_resume_checks.py)
        result,
        f"--resume {out}: recipe.json does not match the training checkpoint (model.hidden_size: 16 in recipe.json, "
        "12 in the checkpoint); restore the run's files, or train a new run",
    )


def test_a_safetensors_file_that_is_no_training_checkpoint_is_one_line(tmp_path, finished):
    out = copy_run(finished, tmp_path)
    save_file({"w": torch.ones(2)}, out / STATE_FILE)
    result = run_cli("train", "--resume", out, "--no-progress")
    message = f"{out / STATE_FILE}: not a seqlab training checkpoint (a safetensors file without its state)"
    assert_error(result, message)


def test_a_run_without_a_training_checkpoint_is_one_line(tmp_path, finished):
    out = copy_run(finished, tmp_path)
    (out / STATE_FILE).unlink()
    result = run_cli("train", "--resume", out, "--no-progress")
    assert_error(result, f"{out / STATE_FILE}: missing; the run has no training checkpoint to resume from")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--set", "train.lr=1"], "--resume continues a run with its saved config; it cannot be combined with --set"),
        (["--out", "x"], "--resume continues a run with its saved config; it cannot be combined with --out"),
        (["--overwrite"], "--resume continues a run with its saved config; it cannot be combined with --overwrite"),
    ],
)
def test_resume_refuses_changes_to_the_saved_config(finished, extra, message):
    assert_error(run_cli("train", "--resume", finished, "--no-progress", *extra), message)


def test_resume_names_what_is_wrong_with_the_directory(tmp_path, finished):
    assert_error(run_cli("train", "--resume", tmp_path / "none"), f"{tmp_path / 'none'}: no such checkpoint directory")
    assert_error(run_cli("train", "lm", "--resume", finished), f"--resume {finished}: holds a g2p run, not lm")
    assert_error(run_cli("train"), "train: give a recipe name, or --resume DIR")


def test_resume_continues_with_the_saved_config(tmp_path, finished):
    out = copy_run(finished, tmp_path)
    config = json.loads((out / "recipe.json").read_text())["config"]
    assert run_cli("train", "g2p", "--resume", out, "--no-progress").code == 0
    assert json.loads((out / "recipe.json").read_text())["config"] == config
    assert_equal_tensors(weights(out), weights(finished))
