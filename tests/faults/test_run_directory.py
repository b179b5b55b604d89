"""Run directories: locked while a run writes them, never left half-replaced, refused in one line when unusable."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import assert_error, run_cli
from faults.helpers import (
    Killed,
    g2p_args,
    g2p_config,
    kill_at_micro_batch,
    seqlab_command,
    subprocess_env,
    train,
)

from seqlab.files import LOCK_FILE, is_bookkeeping
from seqlab.recipes.run_directory import RunDirectory
from seqlab.training.trainer import Trainer

SHORT = ["train.max_steps=4", "train.checkpoint_every=2"]


def files_of(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if not is_bookkeeping(p.name)}


def hold_lock(directory: Path) -> subprocess.Popen:
    """Another process that holds ``directory``'s run lock until its stdin closes."""
    code = (
        "import sys; from seqlab.files import RunLock; "
        f"lock = RunLock({str(directory)!r}).acquire(); print('locked', flush=True); sys.stdin.read()"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=subprocess_env()
    )
    assert process.stdout.readline() == "locked\n"
    return process


def test_a_run_on_a_locked_directory_is_refused_at_once_naming_the_holder(tmp_path, dictionary):
    out = tmp_path / "run"
    out.mkdir()
    holder = hold_lock(out)
    try:
        result = run_cli("train", "g2p", "--out", out, "--no-progress", *g2p_args(dictionary, *SHORT))
        assert result.code == 2 and result.out == ""
        assert re.fullmatch(
            rf"seqlab: error: {re.escape(str(out))}: in use by another seqlab run "
            rf"\(pid {holder.pid} on \S+, since \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC\)\n",
            result.err,
        ), result.err
        assert {p.name for p in out.iterdir()} == {LOCK_FILE}
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    # The holder is gone; the lock file it left neither blocks nor counts as results.
    result = run_cli("train", "g2p", "--out", out, "--no-progress", *g2p_args(dictionary, *SHORT))
    assert result.code == 0, result.err


def test_resume_and_overwrite_of_a_locked_run_are_refused_before_any_work(tmp_path, dictionary):
    out = tmp_path / "run"
    assert run_cli("train", "g2p", "--out", out, "--no-progress", *g2p_args(dictionary, *SHORT)).code == 0
    before = files_of(out)
    holder = hold_lock(out)
    try:
        refused = [
            run_cli("train", "--resume", out, "--no-progress"),
            run_cli("train", "g2p", "--out", out, "--overwrite", "--no-progress", *g2p_args(dictionary, *SHORT)),
        ]
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    for result in refused:
        assert result.code == 2 and result.out == "" and result.err.count("\n") == 1, result.err
        assert f"{out}: in use by another seqlab run (pid {holder.pid} on " in result.err
    assert files_of(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no overwrite sibling left


@pytest.mark.slow
def test_two_concurrent_command_line_runs_on_one_out_dir_never_both_succeed(tmp_path, dictionary):
    out = tmp_path / "run"
    command = seqlab_command("train", "g2p", "--out", out, "--no-progress", *g2p_args(dictionary, "train.max_steps=30"))
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env())]
    runs.append(
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env())
    )
    outcomes = sorted((run.wait(timeout=300), run.stderr.read()) for run in runs)
    assert [code for code, _ in outcomes] == [0, 2], outcomes
    refusal = outcomes[1][1].splitlines()[-1]
    assert refusal.startswith(f"seqlab: error: --out {out}: already exists") or refusal.startswith(
        f"seqlab: error: {out}: in use by another seqlab run (pid "
    ), refusal


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("", "--out is empty; give a directory name"),
        ("{file}/sub", "--out {file}/sub: {file} is not a directory"),
        ("{file}", "--out {file}: exists and is not a directory"),
    ],
)
def test_an_unusable_out_path_is_one_line_and_creates_nothing(tmp_path, dictionary, out, message):
    file = tmp_path / "file"
    file.write_text("not a directory\n")
    result = run_cli("train", "g2p", "--out", out.format(file=file), "--no-progress", *g2p_args(dictionary))
    assert_error(result, message.format(file=file))
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_out_in_a_virtual_file_system_is_one_line(dictionary):
    result = run_cli("train", "g2p", "--out", "/proc/seqlab-run", "--no-progress", *g2p_args(dictionary))
    assert result.code == 2 and result.out == ""
    assert re.fullmatch(r"seqlab: error: --out /proc/seqlab-run: cannot write in /proc \([^)]+\)\n", result.err)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_out_in_an_unwritable_directory_is_one_line(tmp_path, dictionary):
    parent = tmp_path / "locked"
    parent.mkdir(mode=0o555)
    result = run_cli("train", "g2p", "--out", parent / "run", "--no-progress", *g2p_args(dictionary))
    assert_error(result, f"--out {parent / 'run'}: cannot write in {parent} (Permission denied)")


def test_overwrite_needs_out(dictionary):
    result = run_cli("train", "g2p", "--overwrite", "--no-progress", *g2p_args(dictionary))
    assert_error(result, "--overwrite needs --out, the run directory to replace")


def test_a_run_that_fails_before_its_first_checkpoint_leaves_no_directory(tmp_path, dictionary, monkeypatch):
    def broken(self, batch, step, run):
        raise RuntimeError("a bug in the loss")

    monkeypatch.setattr(Trainer, "_accumulate", broken)
    out = tmp_path / "deep" / "run"
    with pytest.raises(RuntimeError, match="a bug in the loss"):
        train("g2p", g2p_config(dictionary), out)
    assert list(tmp_path.iterdir()) == []  # neither the run directory nor the parent created for it


@pytest.fixture
def old_run(tmp_path, dictionary) -> Path:
    out = tmp_path / "run"
    train("g2p", g2p_config(dictionary, max_steps=4), out)
    return out


def test_overwrite_keeps_the_old_run_whole_until_the_new_one_checkpoints(old_run, dictionary, monkeypatch):
    before = files_of(old_run)
    with monkeypatch.context() as patch:
        kill_at_micro_batch(patch, 2)  # before the first checkpoint (step 3)
        with pytest.raises(Killed):
            train("g2p", g2p_config(dictionary, lr=0.5), old_run, mode="overwrite")
    assert files_of(old_run) == before
    assert [p.name for p in old_run.parent.iterdir()] == ["run"]


def test_overwrite_replaces_the_whole_run_at_the_first_checkpoint(old_run, dictionary, monkeypatch):
    before = files_of(old_run)
    with monkeypatch.context() as patch:
        kill_at_micro_batch(patch, 6)  # after the first checkpoint (step 3) and the epoch's validation (step 4)
        with pytest.raises(Killed):
            train("g2p", g2p_config(dictionary, lr=0.5), old_run, mode="overwrite")
    # The new run alone: none of the old run's results or weights beside the new ones.
    after = files_of(old_run)
    assert "results.json" not in after
    assert after["model.safetensors"] != before["model.safetensors"]
    assert b'"lr": 0.5' in after["recipe.json"]
    assert after["metrics.jsonl"].count(b'"event": "step"') == 5
    assert [p.name for p in old_run.parent.iterdir()] == ["run"]


def test_overwrite_removes_the_sibling_a_killed_overwrite_left(old_run, dictionary):
    abandoned = old_run.parent / ".run.seqlab-tmp-99999"  # what kill -9 leaves before the first checkpoint
    shutil.copytree(old_run, abandoned)
    train("g2p", g2p_config(dictionary, max_steps=3), old_run, mode="overwrite")
    assert [p.name for p in old_run.parent.iterdir()] == ["run"]


def test_run_directory_checks_come_before_any_work(tmp_path):
    with pytest.raises(ValueError, match=r"^mode \('append'\) must be one of 'new', 'overwrite', 'resume'$"):
        RunDirectory(tmp_path / "run", "append")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine\n")
    with pytest.raises(ValueError, match=r"already exists and is not empty; pass --overwrite to replace it$"):
        RunDirectory(tmp_path / "run", "new")
    with pytest.raises(ValueError, match=r"^--resume .*/missing: no such run directory$"):
        RunDirectory(tmp_path / "missing", "resume")


def test_out_on_an_unfinished_run_points_to_resume(tmp_path, dictionary, monkeypatch):
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        kill_at_micro_batch(patch, 5)
        with pytest.raises(Killed):
            train("g2p", g2p_config(dictionary), out)
    result = run_cli("train", "g2p", "--out", out, "--no-progress", *g2p_args(dictionary))
    message = f"--out {out}: holds an unfinished run; pass --resume {out} to continue it, or --overwrite to replace it"
    assert_error(result, message)


def test_overwrite_refuses_a_directory_that_is_not_a_run(tmp_path, dictionary):
    out = tmp_path / "home"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work\n")
    result = run_cli("train", "g2p", "--out", out, "--overwrite", "--no-progress", *g2p_args(dictionary))
    expected = (
        "not a seqlab output (no .seqlab-output or recipe.json); --overwrite replaces only what `seqlab train` wrote"
    )
    assert_error(result, f"--out {out}: {expected}")
    assert files_of(out) == {"thesis.tex": b"years of work\n"}
