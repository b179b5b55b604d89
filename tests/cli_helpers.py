"""Running the ``seqlab`` command in-process from tests, and checking its one-line errors (shared by the CLI and
recipe tests; importable because pyproject's pytest settings put ``tests/`` on the path)."""

import contextlib
import io
from typing import NamedTuple

from seqlab.cli import main


class Result(NamedTuple):
    code: int
    out: str
    err: str


def run_cli(*argv: object) -> Result:
    """Run ``seqlab argv`` in-process, capturing what it prints (works in module-scoped fixtures too)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return Result(code, out.getvalue(), err.getvalue())


def assert_error(result: Result, message: str) -> None:
    """Exit code 2, nothing on stdout, and exactly one stderr line: ``seqlab: error: message``."""
    assert result.code == 2
    assert result.out == ""
    assert result.err == f"seqlab: error: {message}\n"
