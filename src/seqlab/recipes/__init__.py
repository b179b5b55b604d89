"""Named, ready-to-run task setups: data + model + training configuration, run by ``seqlab train NAME``.

A recipe is a module satisfying :class:`seqlab.recipes.base.Recipe` (``NAME``, ``DESCRIPTION``, ``Config``,
``System``, ``prepare``), registered here by its ``NAME``. A run directory records its recipe in ``recipe.json``,
so ``load_system(run_dir)`` finds the ``System`` class that loads it (``seqlab.recipes.system``).
"""

from __future__ import annotations

from pathlib import Path

from seqlab.errors import CheckpointError, ConfigError
from seqlab.recipes import (
    bert_mlm,
    classify,
    forecast,
    g2p,
    lm,
    protein,
    smiles,
    t5_g2p,
    tagger,
    translate,
    vec2seq,
    vowels,
)
from seqlab.recipes.base import RECIPE_FILE, RECIPE_MEMBERS, Recipe, Report, recipe_name_of
from seqlab.recipes.system import GenerationChunk, GenerationRequest, System, SystemOptions

RECIPES: dict[str, Recipe] = {}


def register_recipe(recipe: Recipe) -> Recipe:
    """Add ``recipe`` to ``RECIPES`` under its ``NAME`` and return it.

    Raises:
        TypeError: the recipe lacks a member of the ``Recipe`` protocol, or another recipe has its NAME.
    """
    missing = [member for member in RECIPE_MEMBERS if not hasattr(recipe, member)]
    if missing:
        raise TypeError(f"{recipe!r} is not a recipe: it lacks {', '.join(missing)}")
    if recipe.NAME in RECIPES:
        raise TypeError(f"recipe name {recipe.NAME!r} is taken by {RECIPES[recipe.NAME]!r}")
    RECIPES[recipe.NAME] = recipe
    return recipe


def get_recipe(name: str) -> Recipe:
    """The recipe called ``name``.

    Raises:
        ConfigError: no such recipe (the message lists the available ones).
    """
    try:
        return RECIPES[name]
    except KeyError:
        raise ConfigError(f"unknown recipe {name!r}; available: {', '.join(sorted(RECIPES))}") from None


def load_system(directory: Path, options: SystemOptions | None = None) -> System:
    """The trained run in ``directory``, loaded by its recipe's ``System`` with ``options``.

    Raises:
        CheckpointError: the directory is not a readable run of a known recipe (one line naming it).
    """
    return recipe_of_checkpoint(directory).System.load(directory, options or SystemOptions())


def recipe_of_checkpoint(directory: Path) -> Recipe:
    """The recipe that wrote run directory ``directory`` (read from its ``recipe.json``).

    Raises:
        CheckpointError: the directory is missing, has no readable ``recipe.json``, or names an unknown recipe.
    """
    name = recipe_name_of(directory)
    if name not in RECIPES:
        raise CheckpointError(f"{directory / RECIPE_FILE}: written by unknown recipe {name!r}")
    return RECIPES[name]


register_recipe(bert_mlm)
register_recipe(classify)
register_recipe(forecast)
register_recipe(g2p)
register_recipe(lm)
register_recipe(protein)
register_recipe(smiles)
register_recipe(t5_g2p)
register_recipe(tagger)
register_recipe(translate)
register_recipe(vec2seq)
register_recipe(vowels)

__all__ = [
    "RECIPES",
    "RECIPE_FILE",
    "GenerationChunk",
    "GenerationRequest",
    "Recipe",
    "Report",
    "System",
    "SystemOptions",
    "get_recipe",
    "load_system",
    "recipe_of_checkpoint",
    "register_recipe",
]
