"""``seqlab quantize RUN --out DIR [--method dynamic-int8] [--overwrite]``: a run directory whose model's Linear
layers are quantized to int8 (``seqlab.export.quantize``), which ``seqlab evaluate | predict | generate`` take like
any run.

The new directory holds RUN's ``recipe.json`` and the files its recipe saves beside the model (vocabularies,
tokenizer, labels), the quantized ``config.json`` and ``model.safetensors``, and ``quantized_from.json`` (the source
run and the method). It leaves out what described the float model's training (its metrics, results and resumable
state). It follows the output-directory policy of ``seqlab.files.output_directory`` (kind "quantize"): it appears
whole or not at all, ``--overwrite`` replaces only an earlier quantized run, and never RUN or a directory that holds
it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from seqlab.errors import ConfigError
from seqlab.export.quantize import METHODS, check_method, quantize_model
from seqlab.files import atomic_write, is_bookkeeping, output_directory
from seqlab.models import load_pretrained
from seqlab.models.pretrained import CONFIG_FILE, WEIGHTS_FILE
from seqlab.recipes.run_directory import RESULTS_FILE
from seqlab.recipes.saved_run import recipe_name_of
from seqlab.training.callbacks import METRICS_FILE
from seqlab.training.checkpoint import STATE_FILE

SOURCE_FILE = "quantized_from.json"
# What a run directory holds about its float model's training, which its quantized copy does not inherit.
NOT_CARRIED = frozenset({CONFIG_FILE, WEIGHTS_FILE, RESULTS_FILE, STATE_FILE, METRICS_FILE})
__all__ = ["SOURCE_FILE", "quantize_run", "register"]


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``quantize`` to the ``seqlab`` command."""
    quantize = commands.add_parser(
        "quantize", help="quantize a run's Linear layers to int8 into a new run directory (needs torchao)"
    )
    quantize.add_argument("run", type=Path, metavar="RUN", help="the trained run directory to quantize")
    quantize.add_argument("--out", type=Path, required=True, help="the new run directory")
    quantize.add_argument(
        "--method", default=METHODS[0], help=f"quantization method: {' | '.join(METHODS)} (default: %(default)s)"
    )
    quantize.add_argument("--overwrite", action="store_true", help="replace --out if it holds a quantized run")
    quantize.set_defaults(handler=_quantize)


def _quantize(args: argparse.Namespace) -> int:
    modules = quantize_run(args.run, args.out, method=args.method, overwrite=args.overwrite)
    before, after = (run / WEIGHTS_FILE for run in (args.run, args.out))
    print(
        f"quantized {modules} Linear layers of {args.run} ({args.method}) into {args.out}: "
        f"{WEIGHTS_FILE} {before.stat().st_size:,} -> {after.stat().st_size:,} bytes"
    )
    return 0


def quantize_run(run: Path, out: Path, *, method: str, overwrite: bool = False) -> int:
    """Write run directory ``out``: ``run`` with its model's Linear layers quantized by ``method``; return how many
    Linear layers were quantized.

    Raises:
        CheckpointError: ``run`` is not a readable seqlab run (one line naming the file).
        ConfigError: an unknown method; ``run`` already quantized or without a Linear layer; ``out`` exists and is
            not empty without ``overwrite``, or with it holds another command's output, or is ``run`` or holds it.
        StorageError: a file cannot be written (``out`` is then as it was).
    """
    check_method(method)
    recipe_name_of(run)  # a run directory, or one line saying why not
    model = load_pretrained(run)
    try:
        modules = quantize_model(model, method=method)
    except ConfigError as e:
        raise ConfigError(f"{run}: {e}") from None
    carried = sorted(
        p.name for p in run.iterdir() if p.is_file() and p.name not in NOT_CARRIED and not is_bookkeeping(p.name)
    )
    with output_directory(out, kind="quantize", overwrite=overwrite, inputs=[run]) as staging:
        for name in carried:
            atomic_write(staging / name, (run / name).read_bytes())
        model.save_pretrained(staging)
        atomic_write(staging / SOURCE_FILE, json.dumps({"run": str(run), "method": method}, indent=2) + "\n")
    return len(modules)
