"""``seqlab merge-lora RUN --out DIR``: fold a LoRA run's adapters into its weights and write a plain run.

See ``seqlab.recipes.common.merged_adapters``: DIR must be new or empty (or, with ``--overwrite``, an earlier
merged run); ``seqlab evaluate`` / ``predict`` /
``generate`` take it like any run, and it computes what RUN computes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from seqlab.recipes.common.merged_adapters import merge_lora_run


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``merge-lora`` to the ``seqlab`` command."""
    merge = commands.add_parser(
        "merge-lora", help="fold the LoRA adapters of a run (train.lora_rank) into its weights: a plain run directory"
    )
    merge.add_argument("run", type=Path, metavar="RUN", help="a run directory trained with train.lora_rank")
    merge.add_argument("--out", type=Path, required=True, help="the new run directory (must not exist, or be empty)")
    merge.add_argument("--overwrite", action="store_true", help="replace --out if it holds an earlier merged run")
    merge.set_defaults(handler=_merge_lora)


def _merge_lora(args: argparse.Namespace) -> int:
    merged = merge_lora_run(args.run, args.out, overwrite=args.overwrite)
    print(f"merged the LoRA adapters of {len(merged)} layers of {args.run} into {args.out}")
    return 0
