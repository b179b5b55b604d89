"""The ``seqlab`` commands that run recipes: train, evaluate, predict, generate and recipes."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from seqlab.cli.tables import format_value, table
from seqlab.config import apply_overrides, describe, flatten, load_toml, parse_assignments
from seqlab.errors import ConfigError, SeqlabError
from seqlab.recipes import PLUGIN_ERRORS, RECIPES, Recipe, get_recipe, recipe_of_checkpoint, recipes_offering
from seqlab.recipes.base import run_training
from seqlab.recipes.run_directory import RunMode, run_directory
from seqlab.recipes.saved_run import load_recipe_config
from seqlab.recipes.system import (
    BACKENDS,
    GenerationRequest,
    System,
    SystemOptions,
    TextGenerator,
    check_inputs,
    refuse_options,
)
from seqlab.training.distributed import is_writer, launch, launched_by_torchrun, process_group, record_error

# The flag of each SystemOptions field, for messages: an option a recipe's System does not take is refused.
OPTION_FLAGS = {
    "num_beams": "--num-beams",
    "nbest": "--nbest",
    "ensemble": "--ensemble",
    "rescore": "--rescore",
    "rescore_weight": "--rescore-weight",
    "errors": "--errors",
    "backend": "--backend",
    "compile": "--compile",
}
BACKEND_HELP = "run the model in torch (default) or onnxruntime (needs `seqlab export RUN --format onnx`)"
COMPILE_HELP = "run a GPT's decoding steps compiled with torch.compile (compiling takes 15 s to minutes first)"
ENSEMBLE_HELP = "more run directories of the same recipe and vocabularies, decoded together with CHECKPOINT"
RESCORE_HELP = (
    "runs of the same vocabularies (e.g. trained right to left) that re-rank CHECKPOINT's beam; several score as "
    "one ensemble"
)
WEIGHT_HELP = "weight w in [0, 1] of --rescore's scores: (1 - w) * beam score + w * its score (default 0.5)"


def register(commands: argparse._SubParsersAction) -> None:
    """Add train, evaluate, predict, generate and recipes to the ``seqlab`` command."""

    train = commands.add_parser("train", help="train a recipe end to end and score it on its test split")
    train.add_argument("recipe", nargs="?", help=f"recipe name ({', '.join(sorted(RECIPES))}); optional with --resume")
    train.add_argument("--config", type=Path, help="TOML file with [data] [model] [train] [decode] tables")
    train.add_argument(
        "--set",
        dest="assignments",
        nargs="+",
        action="extend",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value (after --config)",
    )
    train.add_argument("--out", help="checkpoint directory (default: the first free runs/RECIPE[-N])")
    train.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run in --out; the old run stays intact until the new one's first checkpoint",
    )
    train.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the run in DIR from its last training checkpoint, with its saved config",
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument(
        "--nproc",
        type=int,
        metavar="N",
        help="data-parallel training in N processes, started with torchrun's launcher (see the README)",
    )
    train.set_defaults(handler=_train)

    evaluate = commands.add_parser("evaluate", help="score a checkpoint on a data file")
    evaluate.add_argument("checkpoint", type=Path)
    evaluate.add_argument("--data", required=True, help="data file in the recipe's format")
    evaluate.add_argument("--json", action="store_true", help="print the metrics as JSON")
    evaluate.add_argument("--num-beams", type=int, help="beam width K (default: the checkpoint's; 1 = greedy)")
    evaluate.add_argument("--ensemble", type=Path, nargs="+", metavar="DIR", help=ENSEMBLE_HELP)
    evaluate.add_argument("--errors", type=Path, metavar="FILE", help="write every wrong prediction to a new TSV file")
    evaluate.add_argument("--rescore", type=Path, nargs="+", metavar="DIR", help=RESCORE_HELP)
    evaluate.add_argument("--rescore-weight", type=float, metavar="W", help=WEIGHT_HELP)
    evaluate.set_defaults(handler=_evaluate, nbest=None)

    predict = commands.add_parser("predict", help="run a checkpoint on inputs given on the command line")
    predict.add_argument("checkpoint", type=Path)
    predict.add_argument("inputs", nargs="+", metavar="INPUT")
    predict.add_argument("--num-beams", type=int, help="beam width K (default: the checkpoint's; 1 = greedy)")
    predict.add_argument("--beam-size", type=int, dest="beam_size", help=argparse.SUPPRESS)  # the old --num-beams
    predict.add_argument("--nbest", type=int, help="hypotheses printed per input (default: 1)")
    predict.add_argument("--ensemble", type=Path, nargs="+", metavar="DIR", help=ENSEMBLE_HELP)
    predict.add_argument("--rescore", type=Path, nargs="+", metavar="DIR", help=RESCORE_HELP)
    predict.add_argument("--rescore-weight", type=float, metavar="W", help=WEIGHT_HELP)
    predict.add_argument("--backend", choices=BACKENDS, help=BACKEND_HELP)
    predict.set_defaults(handler=_predict, errors=None)

    generate = commands.add_parser("generate", help="continue a prompt with a language model, streaming the text")
    generate.add_argument("checkpoint", type=Path)
    generate.add_argument("--prompt", required=True, help="the text to continue")
    generate.add_argument("--max-new-tokens", type=int, help="most new tokens (default: the checkpoint's)")
    generate.add_argument("--temperature", type=float, help="sample with logits / T (T > 0)")
    generate.add_argument("--top-k", type=int, help="sample from the k most likely tokens")
    generate.add_argument("--top-p", type=float, help="sample from the smallest set of mass >= p, p in (0, 1]")
    generate.add_argument("--num-beams", type=int, help="beam search with K beams (default: the checkpoint's)")
    generate.add_argument("--seed", type=int, help="seed of the sampler (default: random)")
    generate.add_argument(
        "--num-return-sequences", type=int, default=None, help="continuations to generate (default: 1)"
    )
    generate.add_argument("--num-samples", type=int, dest="num_samples", help=argparse.SUPPRESS)  # the old name
    generate.add_argument("--stop", help="end a continuation once it contains this string")
    generate.add_argument("--backend", choices=BACKENDS, help=BACKEND_HELP)
    generate.add_argument("--compile", action="store_true", default=None, help=COMPILE_HELP)
    generate.set_defaults(handler=_generate)

    recipes = commands.add_parser("recipes", help="list recipes, or show one recipe's defaults")
    recipes.add_argument("name", nargs="?")
    recipes.set_defaults(handler=_recipes)


def _train(args: argparse.Namespace) -> int:
    if args.resume is not None:
        recipe, config, out_dir = _resumed_run(args)
        mode: RunMode = "resume"
    else:
        if args.recipe is None:
            raise ConfigError("train: give a recipe name, or --resume DIR")
        if args.out == "":
            raise ConfigError("--out is empty; give a directory name")
        if args.overwrite and args.out is None:
            raise ConfigError("--overwrite needs --out, the run directory to replace")
        recipe = get_recipe(args.recipe)
        config = recipe.Config()
        if args.config is not None:
            config = apply_overrides(config, flatten(load_toml(args.config)), source=str(args.config))
        config = apply_overrides(config, parse_assignments(args.assignments))
        requested = None if args.out is None else Path(args.out)
        out_dir = run_directory(requested, recipe.NAME, overwrite=args.overwrite)
        mode = "overwrite" if args.overwrite else "new"
    if args.nproc is not None:
        return launch(args.nproc, _worker_argv(args, recipe.NAME, out_dir))
    log = lambda line: print(line, file=sys.stderr)  # noqa: E731
    with process_group():  # joins torchrun's process group, if started by it
        try:
            report = run_training(recipe, config, out_dir, progress=not args.no_progress, log=log, mode=mode)
        except SeqlabError as e:
            record_error(f"seqlab: error: {e}")
            if is_writer():
                raise
            return 2  # the usage exit code, without a second copy of rank 0's line
        if not is_writer():
            return 0
    print(table(["metric", "value"], [(k, format_value(v)) for k, v in report.results.items()]))
    print()
    print(table(["input", "reference", "predicted"], report.examples))
    print(f"\ncheckpoint: {out_dir}")
    return 0


def _worker_argv(args: argparse.Namespace, recipe: str, out_dir: Path) -> list[str]:
    """The ``seqlab`` arguments of each worker of ``--nproc``: this command with the run directory it resolved."""
    if launched_by_torchrun():
        raise ConfigError("--nproc starts torchrun itself; under torchrun leave it out")
    if args.nproc < 1:
        raise ConfigError(f"--nproc ({args.nproc}) must be >= 1")
    if args.resume is not None:
        argv = ["train", recipe, "--resume", str(out_dir)]
    else:
        argv = ["train", recipe, "--out", str(out_dir), *(["--overwrite"] if args.overwrite else [])]
        argv += ["--config", str(args.config)] if args.config else []
        argv += ["--set", *args.assignments] if args.assignments else []
    return argv + (["--no-progress"] if args.no_progress else [])


def _resumed_run(args: argparse.Namespace) -> tuple[Recipe, Any, Path]:
    """The recipe, saved config and directory of ``--resume DIR``; the run continues exactly as it was set up."""
    given = [
        flag for flag, value in (("--config", args.config), ("--set", args.assignments), ("--out", args.out)) if value
    ] + (["--overwrite"] if args.overwrite else [])
    if given:
        raise ConfigError(f"--resume continues a run with its saved config; it cannot be combined with {given[0]}")
    if args.resume == "":
        raise ConfigError("--resume is empty; give the run directory")
    directory = Path(args.resume)
    recipe = recipe_of_checkpoint(directory)
    if args.recipe is not None and args.recipe != recipe.NAME:
        raise ConfigError(f"--resume {directory}: holds a {recipe.NAME} run, not {args.recipe}")
    return recipe, load_recipe_config(directory, recipe.Config), directory


def _evaluate(args: argparse.Namespace) -> int:
    system = _load(args)
    metrics = system.evaluate(args.data)
    if args.json:
        print(json.dumps(metrics))
    else:
        print(table(["metric", "value"], [(k, format_value(v)) for k, v in metrics.items()]))
    return 0


def _predict(args: argparse.Namespace) -> int:
    renamed = _renamed(args, "beam_size", "num_beams")
    flags = {**OPTION_FLAGS, **({"num_beams": "--beam-size"} if renamed else {})}
    check_inputs(args.inputs)
    for prediction in _load(args, flags).predict(args.inputs):
        for line in prediction.lines():
            print(line)
    _warn_renamed(renamed)
    return 0


def _renamed(args: argparse.Namespace, old: str, new: str) -> str | None:
    """Move a value given under the old flag ``old`` to ``new``; return the old flag if it was used.

    Raises: ConfigError if both were given.
    """
    if getattr(args, old) is None:
        return None
    old_flag, new_flag = (f"--{name.replace('_', '-')}" for name in (old, new))
    if getattr(args, new) is not None:
        raise ConfigError(f"{old_flag} is the old name of {new_flag}; give {new_flag} only")
    setattr(args, new, getattr(args, old))
    return f"{old_flag} is renamed {new_flag}; the old name goes in the next release"


def _warn_renamed(message: str | None) -> None:
    """The FutureWarning of a renamed flag, once the command has done its work (an error stays the one line)."""
    if message is not None:
        warnings.warn(message, FutureWarning, 1)


def _load(args: argparse.Namespace, flags: dict[str, str] = OPTION_FLAGS) -> System:
    """The System of ``args.checkpoint`` with the options given, refused in one line if its recipe takes none such.

    Raises: ConfigError for a refused or out-of-range option, CheckpointError for an unreadable run.
    """
    options = _options(args, flags)
    recipe = recipe_of_checkpoint(args.checkpoint)
    refuse_options(recipe.System, options, flags, recipe.NAME)
    return recipe.System.load(args.checkpoint, options)


def _options(args: argparse.Namespace, flags: dict[str, str]) -> SystemOptions:
    """The ``SystemOptions`` of the command line; a bad value is named by its flag (``flags``: field -> flag)."""
    given = {name: getattr(args, name) for name in OPTION_FLAGS if getattr(args, name, None) is not None}
    try:
        return SystemOptions(**{k: tuple(v) if k in ("ensemble", "rescore") else v for k, v in given.items()})
    except ConfigError as e:
        raise ConfigError(_with_flags(str(e), flags)) from None


def _with_flags(message: str, flags: dict[str, str]) -> str:
    """``message`` with a leading field name replaced by its flag (``num_beams (0)`` -> ``--num-beams (0)``)."""
    for name, flag in flags.items():
        if message.startswith(f"{name} "):
            return flag + message[len(name) :]
    return message


GENERATE_FLAGS = {
    name: "--" + name.replace("_", "-")
    for name in ("max_new_tokens", "temperature", "top_k", "top_p", "num_beams", "seed", "num_return_sequences", "stop")
}


def _generate(args: argparse.Namespace) -> int:
    renamed = _renamed(args, "num_samples", "num_return_sequences")
    given = {name: getattr(args, name) for name in GENERATE_FLAGS if getattr(args, name) is not None}
    flags = {**GENERATE_FLAGS, **({"num_return_sequences": "--num-samples"} if args.num_samples is not None else {})}
    try:
        request = GenerationRequest(prompt=args.prompt, **given)
    except ConfigError as e:
        raise ConfigError(_with_flags(str(e), flags)) from None
    recipe = recipe_of_checkpoint(args.checkpoint)
    if not issubclass(recipe.System, TextGenerator):
        generating = ", ".join(recipes_offering(TextGenerator))
        raise ConfigError(f"{args.checkpoint}: the {recipe.NAME} recipe does not generate; runs of {generating} do")
    options = SystemOptions(backend=args.backend, compile=args.compile)  # the other flags are the request's
    refuse_options(recipe.System, options, OPTION_FLAGS, recipe.NAME)
    system = recipe.System.load(args.checkpoint, options)
    count = request.num_return_sequences
    started, line_open = -1, False
    try:
        for chunk in system.generate(request):
            if chunk.index != started:
                started = chunk.index
                _write(f"--- sample {chunk.index + 1}/{count} ---\n" * (count > 1) + request.prompt)
            _write(chunk.text + "\n" * chunk.finished)
            line_open = not chunk.finished
    except KeyboardInterrupt:
        # Ctrl-C: what was printed stays, its line ended, so "seqlab: interrupted" (exit 130) gets a line of its own
        # (the generator's cleanup has already stopped the generation after its current token).
        if line_open:
            _write("\n")
        raise
    _warn_renamed(renamed)
    return 0


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _recipes(args: argparse.Namespace) -> int:
    if args.name is None:
        print(table(["recipe", "description"], [(name, RECIPES.description(name)) for name in sorted(RECIPES)]))
        for _, error in sorted(PLUGIN_ERRORS.items()):
            print(error, file=sys.stderr)
        return 0
    recipe = get_recipe(args.name)
    print(f"{recipe.NAME}: {recipe.DESCRIPTION}\n")
    rows = describe(recipe.Config())
    if any(applies for _, _, applies in rows):
        print(table(["key", "default", "applies to"], [(k, _as_typed(v), a or "all") for k, v, a in rows]))
    else:
        print(table(["key", "default"], [(k, _as_typed(v)) for k, v, _ in rows]))
    return 0


def _as_typed(value: object) -> str:
    """A default as ``--set`` takes it: a tuple comma-separated (``train.betas=0.9,0.999``), anything else its repr."""
    return ",".join(map(repr, value)) if isinstance(value, tuple) else repr(value)
