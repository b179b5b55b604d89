"""Named, ready-to-run task setups: data + model + training configuration, run by ``seqlab train NAME``.

A recipe is a module with ``NAME``, ``DESCRIPTION``, a sectioned frozen config class ``Config``, and the functions
``train(config, out_dir, *, progress, log) -> Report(results, examples)``, ``evaluate(checkpoint, data_path) -> dict``
and ``predict(checkpoint, inputs, *, beam_size, nbest) -> list[str]``. A checkpoint directory records its recipe in
``recipe.json``, so ``seqlab evaluate`` and ``seqlab predict`` find the right one.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

from seqlab.errors import CheckpointError, ConfigError
from seqlab.recipes import g2p, vowels

RECIPES: dict[str, ModuleType] = {g2p.NAME: g2p, vowels.NAME: vowels}


def get_recipe(name: str) -> ModuleType:
    """The recipe module called ``name``.

    Raises:
        ConfigError: no such recipe (the message lists the available ones).
    """
    try:
        return RECIPES[name]
    except KeyError:
        raise ConfigError(f"unknown recipe {name!r}; available: {', '.join(sorted(RECIPES))}") from None


def recipe_of_checkpoint(directory: Path) -> ModuleType:
    """The recipe that wrote checkpoint ``directory`` (read from its ``recipe.json``).

    Raises:
        CheckpointError: the directory is missing, has no readable ``recipe.json``, or names an unknown recipe.
    """
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such checkpoint directory")
    path = directory / g2p.RECIPE_FILE
    try:
        name = json.loads(path.read_text())["recipe"]
    except FileNotFoundError:
        raise CheckpointError(f"{directory}: not a seqlab checkpoint (no {path.name})") from None
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        raise CheckpointError(f"{path}: not a seqlab recipe file") from None
    if name not in RECIPES:
        raise CheckpointError(f"{path}: written by unknown recipe {name!r}")
    return RECIPES[name]
