"""``seqlab export RUN --format onnx [--out DIR] [--overwrite]``: a trained run's model as ONNX graphs.

The graphs (GPT: prefill + step with the KV cache as inputs and outputs; RNN seq2seq: encoder + decoder step;
Transformer seq2seq and T5: encoder + decoder prefill + step; the seq2vec classifier, BERT, the sequence tagger,
the forecaster and the denoiser: one ``model`` graph of the whole forward), a manifest and the run's JSON files go
to DIR, by default RUN/onnx, where ``seqlab predict|generate RUN --backend onnxruntime`` finds them
(``seqlab.export``). A run of a recipe whose System has no onnxruntime backend is refused in one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from seqlab.errors import ConfigError
from seqlab.export import EXPORT_DIRECTORY, export_onnx
from seqlab.recipes import recipe_of_checkpoint
from seqlab.recipes.system import torch_only

FORMATS = ("onnx",)


def register(commands: argparse._SubParsersAction) -> None:
    """Add the ``export`` subcommand."""
    export = commands.add_parser("export", help="export a trained run's model as ONNX graphs (the [export] extra)")
    export.add_argument("checkpoint", type=Path, metavar="RUN")
    export.add_argument("--format", choices=FORMATS, default="onnx", help="the graph format (default: onnx)")
    export.add_argument("--out", type=Path, help=f"the export directory (default: RUN/{EXPORT_DIRECTORY})")
    export.add_argument("--overwrite", action="store_true", help="replace an earlier export in --out")
    export.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    recipe = recipe_of_checkpoint(args.checkpoint)  # a readable run of a known recipe, or one line saying why not
    if "backend" not in recipe.System.OPTIONS:  # nothing would run the graphs: refused before any work
        raise ConfigError(f"{args.checkpoint}: {torch_only(recipe.NAME)}")
    if args.out is not None and str(args.out) in ("", "."):
        raise ConfigError(f"--out {str(args.out)!r}: give a directory name, not the current directory")
    out = args.checkpoint / EXPORT_DIRECTORY if args.out is None else args.out
    manifest = export_onnx(args.checkpoint, out, overwrite=args.overwrite)
    for name, graph in manifest["graphs"].items():
        print(f"{out / graph['file']}: {name} ({', '.join(graph['inputs'])} -> {', '.join(graph['outputs'])})")
    return 0
