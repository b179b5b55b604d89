"""The ``seqlab`` command: one module per group of subcommands, each adding its parsers in ``register``.

Every problem with the user's input ends with one line ``seqlab: error: ...`` naming the file, line or argument,
and exit code 2; no traceback, and no existing output directory is touched without ``--overwrite``. Exit codes:

- 0: success; 2: bad input (data, configuration, checkpoint); 3: training diverged (``DivergenceError``: too many
  non-finite steps in a row, the last good checkpoint kept); 130: interrupted;
- 1: an unexpected error (a bug): one line ``seqlab: internal error: TYPE: MESSAGE``; the traceback is printed
  only with ``seqlab --debug ...`` or the environment variable ``SEQLAB_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import traceback
import warnings
from collections.abc import Sequence

from seqlab.cli import analyze, average, compare, core, distill, embed, export, lora, pronounce, quantize, serve
from seqlab.errors import ConfigError, SeqlabError

EXIT_INTERNAL = 1
# Modules whose ``register(commands)`` adds subcommands, in the order ``seqlab --help`` lists them.
COMMAND_MODULES = (core, pronounce, average, embed, analyze, compare, lora, serve, export, quantize, distill)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (not usage text plus message) and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(f"{self.prog}: {message}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``seqlab`` console script and of ``python -m seqlab``; returns the exit code.

    With ``argv`` None the command is the process's own (``sys.argv``), and the process ends after it: the
    objects alive once the commands are imported, and again when the command returns, are moved out of the cyclic
    garbage collector's reach (``gc.freeze``): its full collections while the command sets up, and those of the
    interpreter's exit, which still frees every object, then no longer walk the ~300,000 objects of torch's
    modules (``seqlab train lm``: 0.7 s of CPU less a run; issue 25). A caller that passes ``argv`` (the tests)
    keeps its collector as it was.
    """
    parser = _build_parser()
    own_process = argv is None
    if own_process:
        gc.freeze()
    debug = os.environ.get("SEQLAB_DEBUG", "") not in ("", "0")
    try:
        args = parser.parse_args(argv)
        debug = debug or args.debug
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warning
            return args.handler(args)
    except SeqlabError as e:
        print(f"seqlab: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("seqlab: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug: one line, the traceback on request
        if debug:
            traceback.print_exc()
        message = " ".join(str(e).split())  # one line, however many the exception's message has
        hint = "" if debug else " (run with --debug or SEQLAB_DEBUG=1 for the traceback)"
        print(f"seqlab: internal error: {type(e).__name__}: {message}{hint}", file=sys.stderr)
        return EXIT_INTERNAL
    finally:
        if own_process:
            gc.freeze()


def _one_line_warning(message: Warning | str, category: type[Warning], *args: object, **kwargs: object) -> None:
    """Print a warning as the command's one line ``seqlab: warning: MESSAGE`` (a renamed option, say)."""
    print(f"seqlab: warning: {message}", file=sys.stderr)


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="seqlab", description="Sequence models from the equations: train, evaluate, predict.")
    parser.add_argument("--debug", action="store_true", help="print the traceback of an internal error")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser
