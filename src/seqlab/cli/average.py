"""``seqlab average OUT RUN1 RUN2 ...``: a run directory whose model averages the weights of runs of one recipe.

See ``seqlab.recipes.common.averaged_runs``: the runs share recipe, architecture and vocabularies; OUT must be new
or empty (or, with ``--overwrite``, an earlier average), and ``seqlab evaluate`` / ``seqlab predict`` take it like
any run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from seqlab.recipes.common.averaged_runs import average_runs


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``average`` to the ``seqlab`` command."""
    average = commands.add_parser(
        "average", help="average the weights of runs of one recipe and architecture into a new run directory"
    )
    average.add_argument("out", type=Path, help="the new run directory (must not exist, or be empty)")
    average.add_argument("runs", type=Path, nargs="+", metavar="RUN", help="run directories to average (two or more)")
    average.add_argument("--overwrite", action="store_true", help="replace OUT if it holds an earlier average")
    average.set_defaults(handler=_average)


def _average(args: argparse.Namespace) -> int:
    out = average_runs(args.out, args.runs, overwrite=args.overwrite)
    print(f"averaged {len(args.runs)} runs into {out}")
    return 0
