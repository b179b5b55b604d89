"""SIGKILL for real: ``seqlab train`` is killed with ``kill -9`` mid-run, then ``seqlab train --resume`` finishes it
with the weights of a run never interrupted, bit for bit (each process on one thread, as the tests are)."""

import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cli_helpers import run_cli
from faults.helpers import assert_equal_tensors, g2p_args, seqlab_command, subprocess_env, weights

from seqlab.training.checkpoint import STATE_FILE, load_training_state

STEPS = ["train.max_steps=16", "train.checkpoint_every=2", "train.validate_every=7"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, dictionary) -> Path:
    out = tmp_path_factory.mktemp("runs") / "whole"
    assert run_cli("train", "g2p", "--out", out, "--no-progress", *g2p_args(dictionary, *STEPS)).code == 0
    return out


def kill_after_checkpoints(out: Path, dictionary: Path, checkpoints: int) -> int:
    """Start ``seqlab train``, SIGKILL it once ``checkpoints`` training checkpoints were written; return the step
    of the checkpoint it left."""
    command = seqlab_command("train", "g2p", "--out", out, "--no-progress", *g2p_args(dictionary, *STEPS))
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=subprocess_env())
    seen, deadline = set(), time.monotonic() + 120
    while len(seen) < checkpoints and process.poll() is None and time.monotonic() < deadline:
        if (out / STATE_FILE).exists():
            seen.add((out / STATE_FILE).stat().st_mtime_ns)
        time.sleep(0.002)
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL, process.stderr.read()
    assert not (out / "results.json").exists(), "the run ended before the kill"
    return load_training_state(out / STATE_FILE)["run"]["step"]


def resume_in_a_process(out: Path) -> None:
    command = seqlab_command("train", "--resume", out, "--no-progress")
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert finished.returncode == 0, finished.stderr


def test_kill_9_then_resume_gives_the_uninterrupted_weights(tmp_path, dictionary, uninterrupted):
    out = tmp_path / "run"
    step = kill_after_checkpoints(out, dictionary, 2)
    assert 0 < step < 16
    resume_in_a_process(out)
    assert_equal_tensors(weights(out), weights(uninterrupted))
    assert_equal_tensors(
        load_training_state(out / STATE_FILE)["model"], load_training_state(uninterrupted / STATE_FILE)["model"]
    )


@pytest.mark.slow
def test_kill_9_at_random_checkpoints_again_and_again(tmp_path, dictionary, uninterrupted):
    out = tmp_path / "run"
    rng = random.Random(0)
    kill_after_checkpoints(out, dictionary, rng.randint(1, 4))
    for _ in range(2):  # the resumed run is killed again
        command = seqlab_command("train", "--resume", out, "--no-progress")
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=subprocess_env())
        time.sleep(rng.uniform(3.0, 6.0))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    resume_in_a_process(out)
    assert_equal_tensors(weights(out), weights(uninterrupted))
