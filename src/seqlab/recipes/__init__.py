"""Named, ready-to-run task setups: data + model + training configuration, run by ``seqlab train NAME``.

A recipe is a module satisfying :class:`seqlab.recipes.base.Recipe` (``NAME``, ``DESCRIPTION``, ``Config``,
``System``, ``prepare``), registered here by its ``NAME``. A run directory records its recipe in ``recipe.json``,
so ``load_system(run_dir)`` finds the ``System`` class that loads it (``seqlab.recipes.system``).

Plugins: an installed distribution adds a recipe in every process, the ``seqlab`` command's included, with an
entry point in the ``seqlab.recipes`` group whose name is the recipe's ``NAME`` and whose object is the recipe
(``majority = "seqlab_majority.recipe"`` under ``[project.entry-points."seqlab.recipes"]``); this module
registers them when it is imported, after the built-in recipes. A plugin that fails (its import raises, its object
is not a recipe, its name differs from its ``NAME`` or is taken) is skipped without a word, so it cannot break the
built-in recipes or another plugin; the one-line reason is kept in ``PLUGIN_ERRORS``, ``seqlab recipes`` prints
it, and it is the error of using that recipe (``get_recipe``, ``recipe_of_checkpoint``), unless a recipe already
registered holds the name: that one stays in use. ``register_recipe`` adds a recipe in the running process only.
"""

from __future__ import annotations

import os
from importlib.metadata import entry_points
from pathlib import Path

from seqlab.errors import CheckpointError, ConfigError
from seqlab.recipes import (
    bert_mlm,
    chirps,
    classify,
    fields,
    forecast,
    g2p,
    kuramoto_sivashinsky,
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
PLUGIN_GROUP = "seqlab.recipes"
PLUGIN_ERRORS: dict[str, str] = {}  # entry-point name -> why its recipe is not registered (one line)


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
        ConfigError: no such recipe (the message lists the available ones), or the plugin of that name failed to
            load (the message is its ``PLUGIN_ERRORS`` line).
    """
    try:
        return RECIPES[name]
    except KeyError:
        if name in PLUGIN_ERRORS:
            raise ConfigError(PLUGIN_ERRORS[name]) from None
        raise ConfigError(f"unknown recipe {name!r}; available: {', '.join(sorted(RECIPES))}") from None


def load_system(directory: str | os.PathLike[str], options: SystemOptions | None = None) -> System:
    """The trained run in ``directory`` (a path or a string), loaded by its recipe's ``System`` with ``options``.

    Raises:
        CheckpointError: the directory is not a readable run of a known recipe (one line naming it).
    """
    directory = Path(directory)
    return recipe_of_checkpoint(directory).System.load(directory, options or SystemOptions())


def recipe_of_checkpoint(directory: Path) -> Recipe:
    """The recipe that wrote run directory ``directory`` (read from its ``recipe.json``).

    Raises:
        CheckpointError: the directory is missing, has no readable ``recipe.json``, or names an unknown recipe or
            one whose plugin failed to load (the message then ends with its ``PLUGIN_ERRORS`` line).
    """
    name = recipe_name_of(directory)
    if name in PLUGIN_ERRORS and name not in RECIPES:
        raise CheckpointError(f"{directory / RECIPE_FILE}: {PLUGIN_ERRORS[name]}")
    if name not in RECIPES:
        raise CheckpointError(f"{directory / RECIPE_FILE}: written by unknown recipe {name!r}")
    return RECIPES[name]


register_recipe(bert_mlm)
register_recipe(chirps)
register_recipe(classify)
register_recipe(fields)
register_recipe(forecast)
register_recipe(g2p)
register_recipe(kuramoto_sivashinsky)
register_recipe(lm)
register_recipe(protein)
register_recipe(smiles)
register_recipe(t5_g2p)
register_recipe(tagger)
register_recipe(translate)
register_recipe(vec2seq)
register_recipe(vowels)


def _register_plugins() -> None:
    """Register the recipe of every entry point in ``PLUGIN_GROUP``; record each failure in ``PLUGIN_ERRORS``."""
    for entry_point in entry_points(group=PLUGIN_GROUP):
        try:
            recipe = entry_point.load()
            name = getattr(recipe, "NAME", None)
            if name != entry_point.name:
                raise TypeError(f"the entry point is named {entry_point.name!r} but its recipe's NAME is {name!r}")
            register_recipe(recipe)
        except Exception as e:  # a plugin's import may raise anything; it must not take the other recipes down
            reason = " ".join(f"{type(e).__name__}: {e}".split())  # one line, however many the message has
            PLUGIN_ERRORS[entry_point.name] = (
                f"recipe plugin {entry_point.name!r} ({entry_point.value}) failed to load: {reason}"
            )


_register_plugins()

__all__ = [
    "PLUGIN_ERRORS",
    "PLUGIN_GROUP",
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
