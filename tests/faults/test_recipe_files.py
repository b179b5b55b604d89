"""Hostile data files for every registered recipe, generated over the registry: each data file a recipe declares
(``seqlab.data.files.data_file`` in its config, found by ``data_file_keys``) is given as an empty file, a binary
file, a FIFO, ``/dev/zero``, a symbolic-link loop, a file with a byte-order mark, a row of the wrong width (for a
table format), a non-UTF-8 file and a line over the format's limit, to ``seqlab train`` and to ``seqlab evaluate``.
Every case ends in exit 2 with one line naming the file, within seconds, and ``train`` creates no run directory.

A new recipe is covered by registering it: its data keys come from its config, and only its tiny run for
``evaluate`` is declared, in ``recipe_runs.TINY_RUNS`` (a recipe missing there fails here, saying so). A case that
hangs (a FIFO opened for reading blocks until a writer comes) is stopped by an alarm and fails as a hang.
"""

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import Result, run_cli
from faults.recipe_runs import EVALUATE_DATA, TINY_RUNS

from seqlab.data.files import DataFormat, TableFormat
from seqlab.recipes import RECIPES
from seqlab.recipes.base import data_file_keys

FAULTS = ("empty", "binary", "fifo", "dev_zero", "symlink_loop", "bom", "wrong_columns", "non_utf8", "huge_line")
CASE_SECONDS = 60  # a case that takes longer hangs (the slowest here take a few seconds on a loaded machine)


class Hung(BaseException):
    """Raised by the alarm in a case that runs too long; a BaseException, so seqlab's handlers let it through."""


def applies(fault: str, data_format: DataFormat) -> bool:
    """Whether ``fault`` is a case of ``data_format``: a wrong width only exists for a table of columns."""
    return fault != "wrong_columns" or isinstance(data_format, TableFormat)


def bad_file(fault: str, data_format: DataFormat, folder: Path) -> Path:
    """A file of ``data_format`` broken as ``fault`` says, in ``folder`` (``/dev/zero`` for ``dev_zero``)."""
    path = folder / f"bad-{fault}{data_format.suffix}"
    if fault == "dev_zero":
        return Path("/dev/zero")
    if fault == "fifo":
        os.mkfifo(path)
    elif fault == "symlink_loop":
        other = folder / f"loop{data_format.suffix}"
        os.symlink(other, path)
        os.symlink(path, other)
    else:
        path.write_bytes(_contents(fault, data_format))
    return path


def _contents(fault: str, data_format: DataFormat) -> bytes:
    if fault == "empty":
        return b""
    if fault == "binary":
        return bytes(range(256)) * 4
    if fault == "bom":
        return b"\xef\xbb\xbfabc\n"
    if fault == "non_utf8":
        return "caf\xe9\n".encode("latin-1")
    if fault == "huge_line":
        return b"a" * (data_format.max_line_chars + 1) + b"\n"
    assert isinstance(data_format, TableFormat) and fault == "wrong_columns"
    values = ["1" if column.type in (int, float) else "x" for column in data_format.columns]
    separator = "\t" if data_format.separator == "\t" else " "
    rows = [values + values[-1:], values] if data_format.repeated else [values + values[-1:]]
    return "".join(separator.join(row) + "\n" for row in rows).encode()


@contextlib.contextmanager
def alarm(seconds: int) -> Iterator[None]:
    """Raise ``Hung`` in this (main) thread if the block runs longer than ``seconds``."""

    def hung(signum, frame):
        raise Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_case(*argv: object) -> Result:
    """``seqlab argv`` in-process, stopped as ``Hung`` after ``CASE_SECONDS``."""
    with alarm(CASE_SECONDS):
        return run_cli(*argv)


def train_argv(recipe: str, bad: Path, out: Path) -> list[object]:
    """``seqlab train`` of ``recipe`` with every data file it declares set to ``bad``."""
    keys = data_file_keys(RECIPES[recipe].Config)
    return ["train", recipe, "--out", out, "--no-progress", "--set", *(f"{key}={bad}" for key in keys)]


def evaluate_argv(run: Path, recipe: str, bad: Path) -> list[object]:
    return ["evaluate", run, "--data", EVALUATE_DATA.get(recipe, str)(bad)]


def cases() -> list:
    """(recipe, fault) of every registered recipe and every fault that applies to its first data file's format."""
    params = []
    for name in sorted(RECIPES):
        keys = data_file_keys(RECIPES[name].Config)
        assert keys, f"recipe {name} declares no data file (seqlab.data.files.data_file in its config)"
        data_format = next(iter(keys.values()))
        params += [pytest.param(name, fault, id=f"{name}-{fault}") for fault in FAULTS if applies(fault, data_format)]
    return params


def first_format(recipe: str) -> DataFormat:
    return next(iter(data_file_keys(RECIPES[recipe].Config).values()))


def assert_refused(result: Result, bad: Path) -> None:
    """Exit 2 and one line ``seqlab: error: ...`` that names ``bad``."""
    assert result.code == 2 and result.err.startswith("seqlab: error: "), result
    assert result.err.count("\n") == 1 and str(bad) in result.err, result.err


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory):
    """recipe -> a tiny trained run, trained on first use."""
    runs: dict[str, Path] = {}

    def run_of(recipe: str) -> Path:
        if recipe not in runs:
            assert recipe in TINY_RUNS, f"declare a tiny run of recipe {recipe} in tests/faults/recipe_runs.py"
            folder = tmp_path_factory.mktemp(recipe)
            result = run_cli(
                "train", recipe, "--out", folder / "run", "--no-progress", "--set", *TINY_RUNS[recipe](folder)
            )
            assert result.code == 0, result.err
            runs[recipe] = folder / "run"
        return runs[recipe]

    return run_of


@pytest.mark.parametrize(("recipe", "fault"), cases())
def test_train_refuses_a_hostile_data_file_in_one_line(tmp_path, recipe, fault):
    bad = bad_file(fault, first_format(recipe), tmp_path)
    result = run_case(*train_argv(recipe, bad, tmp_path / "run"))
    assert_refused(result, bad)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("recipe", "fault"), cases())
def test_evaluate_refuses_a_hostile_data_file_in_one_line(tmp_path, tiny_runs, recipe, fault):
    run = tiny_runs(recipe)
    bad = bad_file(fault, first_format(recipe), tmp_path)
    assert_refused(run_case(*evaluate_argv(run, recipe, bad)), bad)
