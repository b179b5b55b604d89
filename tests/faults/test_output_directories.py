"""Every command that writes a directory follows ``seqlab.files``' one policy, proved by cases generated over the
table COMMANDS (a new command is one row): an occupied ``--out`` without ``--overwrite``, ``--overwrite`` of another
kind's output or of a directory seqlab did not write, an ``--out`` that holds an input, an ``--out`` below a file,
a full disk, and a command interrupted or failing in a new parent directory that another output joined meanwhile.
Each case checks the one-line message (or exit code) and hashes the whole tree before and after: nothing that
existed changed, and nothing is left behind. ``seqlab embed`` writes a file: its cases follow the table.
"""

import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
from cli_helpers import Result, assert_error, run_cli
from faults.helpers import g2p_args, g2p_config, subprocess_env, train

from seqlab.data.wordpiece import WordPieceTokenizer
from seqlab.files import KIND_FILE, TEMPORARY_MARK
from seqlab.models import BertConfig, BertForMaskedLM


class Inputs(NamedTuple):
    """What the commands read: a data file, a finished tiny g2p run (with metrics.jsonl) and a text file."""

    dictionary: Path
    run: Path
    text: Path
    bert: Path


class Command(NamedTuple):
    """One command that writes a directory: its kind, its arguments writing into ``out``, the fields of Inputs
    whose paths it reads (the output must not hold them), and the callable it runs while it works (replaced to
    interrupt it)."""

    kind: str
    argv: Callable[[Path, Inputs], list[object]]
    reads: tuple[str, ...]
    works_in: str
    flag: str = "--out "


FIGURE = "matplotlib.figure.Figure.savefig"
TINY_TRAIN = ("train.max_steps=2", "train.checkpoint_every=1", "train.validate_every=1")
TINY_COMPARE = ("--params", 300, "--max-steps", 2, "--eval-every", 1, "--test-size", 4, "--batch-size", 2)
COMMANDS = {
    "train": Command(
        "train",
        lambda out, i: ["train", "g2p", "--out", out, "--no-progress", *g2p_args(i.dictionary, *TINY_TRAIN)],
        ("dictionary",),
        "seqlab.training.trainer.Trainer._accumulate",
    ),
    "analyze gradients": Command(
        "analyze gradients",
        lambda out, i: ["analyze", "gradients", i.run, "--length", 3, "--out", out],
        ("run",),
        FIGURE,
    ),
    "analyze attention": Command(
        "analyze attention",
        lambda out, i: ["analyze", "attention", i.run, "--input", first_word(i.dictionary), "--out", out],
        ("run",),
        FIGURE,
    ),
    "analyze exposure": Command(
        "analyze exposure",
        lambda out, i: ["analyze", "exposure", i.run, "--data", i.dictionary, "--out", out],
        ("dictionary", "run"),
        FIGURE,
    ),
    "analyze positional": Command(
        "analyze positional",
        lambda out, i: ["analyze", "positional", "--d-model", 4, "--max-len", 4, "--out", out],
        (),
        FIGURE,
    ),
    "analyze complexity": Command(
        "analyze complexity",
        lambda out, i: [
            "analyze",
            "complexity",
            "--lengths",
            4,
            "--layers",
            "rnn",
            "--repeats",
            1,
            "--mode",
            "inference",
            "--out",
            out,
        ],
        (),
        FIGURE,
    ),
    "plot": Command("plot", lambda out, i: ["plot", i.run, "--out", out], ("run",), FIGURE),
    "compare --task": Command(
        "compare",
        lambda out, i: ["compare", "--task", "adding", "--lags", 2, "--archs", "rnn", *TINY_COMPARE, "--out", out],
        (),
        FIGURE,
    ),
    "compare --recipe": Command(
        "compare",
        lambda out, i: [
            "compare",
            "--recipe",
            "g2p",
            "--archs",
            "rnn",
            "--max-steps",
            2,
            *recipe_sets(i.dictionary),
            "--out",
            out,
        ],
        ("dictionary",),
        "seqlab.training.trainer.Trainer._accumulate",
    ),
    "average": Command(
        "average",
        lambda out, i: ["average", out, i.run, i.run],
        ("run",),
        "seqlab.recipes.common.averaged_runs.save_file",
        flag="",
    ),
}


def first_word(dictionary: Path) -> str:
    return dictionary.read_text().split()[0].lower()


def recipe_sets(dictionary: Path) -> list[str]:
    """``--set`` of a tiny g2p run for ``compare --recipe`` (the rnn arch's keys only)."""
    settings = g2p_args(dictionary, *TINY_TRAIN)[1:]
    return [item for setting in settings if not setting.startswith("train.max_steps") for item in ("--set", setting)]


def tree(root: Path) -> dict[str, str]:
    """Every path under ``root`` (hidden ones too) with the SHA-256 of a file's bytes, or "dir"."""
    found = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        found[key] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, dictionary) -> Inputs:
    root = tmp_path_factory.mktemp("inputs")
    run = root / "run"
    train("g2p", g2p_config(dictionary, max_steps=4), run)
    text = root / "sentences.txt"
    text.write_text("the lord said\nunto moses\n")
    tokenizer = WordPieceTokenizer.train("the lord said unto moses and aaron " * 3, vocab_size=60)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_positions=16
    )
    BertForMaskedLM(config).save_pretrained(root / "bert")
    tokenizer.save(root / "bert")
    return Inputs(dictionary, run, text, root / "bert")


@pytest.fixture
def local(inputs, tmp_path) -> Inputs:
    """Copies of the inputs inside the test's directory, so its tree hash covers them."""
    shutil.copytree(inputs.run, tmp_path / "run")
    shutil.copy(inputs.dictionary, tmp_path / "words.dict")
    shutil.copy(inputs.text, tmp_path / "sentences.txt")
    return Inputs(tmp_path / "words.dict", tmp_path / "run", tmp_path / "sentences.txt", inputs.bert)


def message(command: Command, out: Path, text: str) -> str:
    return f"{command.flag}{out}: {text}"


@pytest.mark.parametrize("name", COMMANDS)
def test_an_occupied_out_is_refused_without_overwrite(name, local, tmp_path):
    command = COMMANDS[name]
    out = tmp_path / "notes"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    before = tree(tmp_path)
    assert_error(
        run_cli(*command.argv(out, local)),
        message(command, out, "already exists and is not empty; pass --overwrite to replace it"),
    )
    assert tree(tmp_path) == before


@pytest.mark.parametrize("name", COMMANDS)
def test_overwrite_refuses_another_kinds_output(name, local, tmp_path):
    command = COMMANDS[name]
    if command.kind == "train":
        other, other_kind = tmp_path / "positional", "analyze positional"
        assert run_cli(*COMMANDS["analyze positional"].argv(other, local)).code == 0
    else:
        other, other_kind = local.run, "train"
    before = tree(tmp_path)
    result = run_cli(*command.argv(other, local), "--overwrite")
    if "run" in command.reads:
        expected = f"holds {other}, an input of this command; write the output elsewhere"
    else:
        expected = (
            f"holds what `seqlab {other_kind}` wrote; --overwrite replaces only what `seqlab {command.kind}` wrote"
        )
    assert_error(result, message(command, other, expected))
    assert tree(tmp_path) == before


@pytest.mark.parametrize("name", COMMANDS)
def test_overwrite_refuses_a_directory_seqlab_did_not_write(name, local, tmp_path):
    command = COMMANDS[name]
    out = tmp_path / "home"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work\n")
    before = tree(tmp_path)
    expected = (
        f"not a seqlab output (no {KIND_FILE} or recipe.json); "
        f"--overwrite replaces only what `seqlab {command.kind}` wrote"
    )
    assert_error(run_cli(*command.argv(out, local), "--overwrite"), message(command, out, expected))
    assert tree(tmp_path) == before


@pytest.mark.parametrize("name", [name for name, command in COMMANDS.items() if command.reads])
def test_overwrite_refuses_an_out_that_holds_an_input(name, local, tmp_path):
    """The input lies in an earlier output of the same command (``--set data.train_path=RUN/train.dict``), or is
    the directory itself (``plot RUN --out RUN``)."""
    command = COMMANDS[name]
    out = tmp_path / "earlier"
    out.mkdir()
    (out / KIND_FILE).write_text(f"{command.kind}\n")
    read = command.reads[0]
    held = out / getattr(local, read).name
    (shutil.copytree if read == "run" else shutil.copy)(getattr(local, read), held)
    before = tree(tmp_path)
    result = run_cli(*command.argv(out, local._replace(**{read: held})), "--overwrite")
    assert_error(result, message(command, out, f"holds {held}, an input of this command; write the output elsewhere"))
    assert tree(tmp_path) == before


@pytest.mark.parametrize("name", COMMANDS)
def test_overwrite_replaces_the_commands_own_earlier_output(name, local, tmp_path):
    command = COMMANDS[name]
    out = tmp_path / "out"
    assert run_cli(*command.argv(out, local)).code == 0
    assert (out / KIND_FILE).read_text() == f"{command.kind}\n"
    (out / "stale.txt").write_text("from the earlier output\n")
    result = run_cli(*command.argv(out, local), "--overwrite")
    assert result.code == 0, result.err
    assert not (out / "stale.txt").exists()
    assert not [p for p in tmp_path.iterdir() if TEMPORARY_MARK in p.name]


@pytest.mark.parametrize("name", COMMANDS)
def test_an_out_below_a_file_is_one_line(name, local, tmp_path):
    command = COMMANDS[name]
    file = tmp_path / "file"
    file.write_text("not a directory\n")
    before = tree(tmp_path)
    assert_error(
        run_cli(*command.argv(file / "sub", local)), message(command, file / "sub", f"{file} is not a directory")
    )
    assert tree(tmp_path) == before


def interrupt(monkeypatch, command: Command, error: BaseException, beside: Path | None) -> None:
    """Make ``command`` fail with ``error`` in the midst of its work, after another output appeared at ``beside``."""

    def fail(*args, **kwargs):
        if beside is not None:
            beside.mkdir(parents=True, exist_ok=True)
            (beside / "results.json").write_text("{}\n")
        raise error

    monkeypatch.setattr(command.works_in, fail)


FAILURES = {
    "interrupted": (KeyboardInterrupt(), 130),
    "a bug": (RuntimeError("a bug"), 1),
}


@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("name", COMMANDS)
def test_a_failed_command_removes_only_what_it_created(name, failure, local, tmp_path, monkeypatch):
    """Ctrl-C (or a bug) in a run started into a new parent, after another run was put in that parent: the other
    run and the parent stay; the failed command's own directory goes."""
    command = COMMANDS[name]
    error, code = FAILURES[failure]
    parent = tmp_path / "new" / "parent"
    before = tree(tmp_path)
    with monkeypatch.context() as patch:
        interrupt(patch, command, error, beside=parent / "other-run")
        result = run_cli(*command.argv(parent / "out", local))
    assert result.code == code, result.err
    assert tree(tmp_path) == {
        **before,
        "new": "dir",
        "new/parent": "dir",
        "new/parent/other-run": "dir",
        "new/parent/other-run/results.json": hashlib.sha256(b"{}\n").hexdigest(),
    }


@pytest.mark.parametrize("name", COMMANDS)
def test_a_failed_command_alone_in_new_parents_removes_them(name, local, tmp_path, monkeypatch):
    command = COMMANDS[name]
    before = tree(tmp_path)
    with monkeypatch.context() as patch:
        interrupt(patch, command, KeyboardInterrupt(), beside=None)
        assert run_cli(*command.argv(tmp_path / "new" / "parent" / "out", local)).code == 130
    assert tree(tmp_path) == before


def full_disk(monkeypatch) -> None:
    """ENOSPC at the flush of every result file (not of the lock and kind files): the disk filled up."""
    real = os.fsync

    def fsync(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        if TEMPORARY_MARK in name and KIND_FILE not in name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
@pytest.mark.parametrize("name", COMMANDS)
def test_a_full_disk_is_a_storage_error_and_leaves_nothing(name, local, tmp_path, monkeypatch):
    command = COMMANDS[name]
    out = tmp_path / "out"
    before = tree(tmp_path)
    with monkeypatch.context() as patch:
        full_disk(patch)
        result = run_cli(*command.argv(out, local))
    assert_full_disk(result, out)
    assert tree(tmp_path) == before


def assert_full_disk(result: Result, out: Path) -> None:
    """Exit 2 and, as the last line (compare reports its runs before), the StorageError naming a file in ``out``."""
    assert result.code == 2 and result.out == "", result
    last = result.err.splitlines()[-1]
    assert re.fullmatch(rf"seqlab: error: {re.escape(str(out))}/\S+: cannot write \(No space left on device\)", last)


# embed writes one file ----------------------------------------------------------------------------------------------


def embed(local: Inputs, *argv: object) -> Result:
    return run_cli("embed", local.bert, "--input", local.text, *argv)


def test_embed_refuses_an_existing_file_and_its_own_input(local, tmp_path):
    out = tmp_path / "e.npy"
    out.write_bytes(b"earlier")
    before = tree(tmp_path)
    assert_error(embed(local, "--out", out), f"--out {out}: already exists; pass --overwrite to replace it")
    text = local.text.rename(tmp_path / "sentences.npy")
    before = tree(tmp_path)
    result = run_cli("embed", local.bert, "--input", text, "--overwrite")
    assert_error(result, f"--out {text}: is {text}, an input of this command; write the output elsewhere")
    assert tree(tmp_path) == before


def test_embed_below_a_file_is_one_line(local, tmp_path):
    file = tmp_path / "file"
    file.write_text("not a directory\n")
    before = tree(tmp_path)
    assert_error(embed(local, "--out", file / "e.npy"), f"--out {file / 'e.npy'}: {file} is not a directory")
    assert tree(tmp_path) == before


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
def test_embed_on_a_full_disk_leaves_no_temporary_file(local, tmp_path, monkeypatch):
    before = tree(tmp_path)
    with monkeypatch.context() as patch:
        full_disk(patch)
        result = embed(local, "--out", tmp_path / "e.npy")
    assert_error(result, f"{tmp_path / 'e.npy'}: cannot write (No space left on device)")
    assert tree(tmp_path) == before


# a real file system: a tiny tmpfs, full or read-only, in a private mount namespace ---------------------------------

DRIVER = """
import contextlib, io, json, os, sys
from seqlab.cli import main
disk = sys.argv[1]
results = []
for argv, headroom in json.load(sys.stdin):
    filler = os.path.join(disk, "filler")
    if headroom >= 0:  # fill the disk up to headroom bytes
        stat = os.statvfs(disk)
        with open(filler, "wb") as file:
            file.write(bytes(max(stat.f_bavail * stat.f_frsize - headroom, 0)))
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(argv)
    if headroom >= 0:
        os.remove(filler)
    results.append([code, err.getvalue().splitlines()[-1:], sorted(os.listdir(disk))])
print(json.dumps(results))
"""


def can_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    mount = ["unshare", "-rm", "mount", "-t", "tmpfs", "tmpfs", "/mnt"]
    return subprocess.run(mount, capture_output=True).returncode == 0


def on_tmpfs(disk: Path, options: str, commands: list[tuple[list[object], int]]) -> list[tuple[int, str, list[str]]]:
    """Run each of ``commands`` (argv, headroom) in one process on a tmpfs mounted at ``disk`` with ``options``,
    filled up to ``headroom`` free bytes before each (not at all if negative); return, for each, the exit code,
    the last line on stderr and the files left on the disk."""
    disk.mkdir()
    script = 'mount -t tmpfs -o "$4" tmpfs "$1" && exec "$2" -c "$3" "$1"'
    process = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", disk, sys.executable, DRIVER, options],
        input=json.dumps([([str(a) for a in argv], headroom) for argv, headroom in commands]),
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=600,
    )
    assert process.returncode == 0, process.stderr
    return [(code, last[0] if last else "", left) for code, last, left in json.loads(process.stdout)]


needs_mount = pytest.mark.skipif(not can_mount(), reason="needs unshare -rm and mount (user and mount namespaces)")


@needs_mount
def test_a_really_full_disk_is_a_storage_error_for_every_command(local, tmp_path):
    """Three free pages (the lock and kind files fit, the results do not; none for embed's one file): a
    StorageError in one line, exit 2, nothing left on the disk; safetensors' own error included (train, average)."""
    disk = tmp_path / "disk"
    names = list(COMMANDS)
    commands = [(COMMANDS[name].argv(disk / "out", local), 3 * 4096) for name in names]
    commands.append((["embed", local.bert, "--input", local.text, "--out", disk / "e.npy"], 0))
    results = on_tmpfs(disk, "size=2m", commands)
    for name, (code, last, left) in zip([*names, "embed"], results, strict=True):
        pattern = rf"seqlab: error: {re.escape(str(disk))}/(out/\S+|e\.npy): cannot write \(No space left on device\)"
        assert code == 2 and re.fullmatch(pattern, last), (name, code, last)
        assert left == [], (name, left)


@needs_mount
def test_a_read_only_file_system_is_refused_before_any_work(local, tmp_path):
    disk = tmp_path / "disk"
    commands = {name: command.argv(disk / "out", local) for name, command in COMMANDS.items()}
    commands["embed"] = ["embed", local.bert, "--input", local.text, "--out", disk / "e.npy"]
    results = on_tmpfs(disk, "ro,size=64k", [(argv, -1) for argv in commands.values()])
    for name, (code, last, left) in zip(commands, results, strict=True):
        flag = "--out " if name == "embed" else COMMANDS[name].flag
        out = disk / ("e.npy" if name == "embed" else "out")
        assert (code, last) == (2, f"seqlab: error: {flag}{out}: cannot write in {disk} (Read-only file system)"), name
        assert left == []
