"""The ``seqlab`` command: one module per group of subcommands, each adding its parsers in ``register``.

Every problem with the user's input ends with one line ``seqlab: error: ...`` naming the file, line or argument,
and exit code 2; no traceback, and no existing output directory is touched without ``--overwrite``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from seqlab.cli import analyze, average, core, embed
from seqlab.errors import ConfigError, SeqlabError

EXIT_USAGE = 2
# Modules whose ``register(commands)`` adds subcommands, in the order ``seqlab --help`` lists them.
COMMAND_MODULES = (core, average, embed, analyze)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (not usage text plus message) and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(f"{self.prog}: {message}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``seqlab`` console script; returns the exit code."""
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
        return args.handler(args)
    except SeqlabError as e:
        print(f"seqlab: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("seqlab: interrupted", file=sys.stderr)
        return 130


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="seqlab", description="Sequence models from the equations: train, evaluate, predict.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser
