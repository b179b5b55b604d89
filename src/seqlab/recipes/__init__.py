"""Named, ready-to-run task setups: data + model + training configuration, run by ``seqlab train NAME``.

A recipe is a module satisfying :class:`seqlab.recipes.base.Recipe` (``NAME``, ``DESCRIPTION``, ``Config``,
``System``, ``prepare``), registered here by its ``NAME``. A run directory records its recipe in ``recipe.json``,
so ``load_system(run_dir)`` finds the ``System`` class that loads it (``seqlab.recipes.system``).

The built-in recipes are listed in ``BUILT_IN_RECIPES`` (name -> module and description) and imported the first
time one is looked up in ``RECIPES``: a command pays only for the recipes it uses (the chirps recipe alone imports
scipy.signal, the smiles recipe RDKit), and a machine lacking a package one recipe needs still runs the others;
using that recipe is then a one-line error naming the import that failed.

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

import importlib
import os
from collections.abc import Iterator, MutableMapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import NamedTuple

from seqlab.errors import CheckpointError, ConfigError
from seqlab.recipes.base import RECIPE_MEMBERS, Recipe, Report
from seqlab.recipes.run_directory import RECIPE_FILE
from seqlab.recipes.saved_run import recipe_name_of
from seqlab.recipes.system import GenerationChunk, GenerationRequest, System, SystemOptions


class BuiltInRecipe(NamedTuple):
    """A shipped recipe before it is imported: the module that is the recipe, and a copy of its ``DESCRIPTION``, so
    that ``seqlab recipes`` lists every recipe without importing one (``tests/recipes/test_registry.py`` holds the
    table equal to the recipe modules)."""

    module: str
    description: str


BUILT_IN_RECIPES: dict[str, BuiltInRecipe] = {
    "bert-mlm": BuiltInRecipe(
        "seqlab.recipes.bert_mlm",
        "pre-train a small BERT by masked language modelling on a text; masked-token accuracy",
    ),
    "chirps": BuiltInRecipe(
        "seqlab.recipes.chirps",
        "gravitational-wave chirps in aLIGO-like noise: BiRNN denoiser vs Wiener and band-pass, overlap by SNR",
    ),
    "classify": BuiltInRecipe(
        "seqlab.recipes.classify",
        "text classification (names -> language, nameCreator): "
        "bilstm | static | elmo | minilm | bert | tcn, accuracy (%)",
    ),
    "fields": BuiltInRecipe(
        "seqlab.recipes.fields",
        "2-D Kolmogorov flow (pseudo-spectral): patch Transformer forecasts, RMSE and ACC by lead vs persistence",
    ),
    "forecast": BuiltInRecipe(
        "seqlab.recipes.forecast",
        "forecast sunspots, CO2, El Nino (statsmodels) or Lorenz-63: RNN/Transformer/TCN vs naive and SARIMA, MASE",
    ),
    "g2p": BuiltInRecipe(
        "seqlab.recipes.g2p",
        "English grapheme-to-phoneme on CMUdict: attention RNN or Transformer seq2seq, PER/WER (%)",
    ),
    "kuramoto-sivashinsky": BuiltInRecipe(
        "seqlab.recipes.kuramoto_sivashinsky",
        "Kuramoto-Sivashinsky chaos (ETDRK4, L=22): RNN/Transformer forecasts, valid time in Lyapunov times",
    ),
    "lm": BuiltInRecipe(
        "seqlab.recipes.lm",
        "language model (GPT, LSTM, GRU, RNN, TCN, SSM) on char/word/BPE tokens; perplexity and bits/char of a text",
    ),
    "protein": BuiltInRecipe(
        "seqlab.recipes.protein",
        "causal GPT or masked BERT over a 2,100-protein proteome (pyhmmer); perplexity per residue vs unigram",
    ),
    "smiles": BuiltInRecipe(
        "seqlab.recipes.smiles",
        "GPT over SMILES/SELFIES of RDKit's 10,000 WEHI molecules; RDKit validity, uniqueness, novelty (%)",
    ),
    "t5-g2p": BuiltInRecipe(
        "seqlab.recipes.t5_g2p",
        "one T5 text-to-text on CMUdict both ways: g2p PER/WER (%), p2g letter error rate / word accuracy (%)",
    ),
    "tagger": BuiltInRecipe(
        "seqlab.recipes.tagger",
        "sequence labelling: stress (0/1/2) of every vowel of a CMUdict pronunciation, BiLSTM, vowel/word acc (%)",
    ),
    "translate": BuiltInRecipe(
        "seqlab.recipes.translate",
        "translate parallel text (data.src, data.tgt): BPE + RNN or Transformer seq2seq, BLEU/chrF (sacrebleu)",
    ),
    "vec2seq": BuiltInRecipe(
        "seqlab.recipes.vec2seq",
        "a name generated from its language of origin: class-conditioned char GRU, class check of samples (%)",
    ),
    "vowels": BuiltInRecipe(
        "seqlab.recipes.vowels",
        "Japanese Vowels speaker classification (aeon's .ts files): bidirectional RNN + pooling, accuracy (%)",
    ),
}


class RecipeRegistry(MutableMapping[str, Recipe]):
    """Recipes by ``NAME``, a built-in one imported from its module the first time it is looked up.

    Names (``in``, iteration, ``len``, ``description``) import nothing; ``RECIPES[name]`` imports that recipe only;
    ``values()`` and ``items()`` import every recipe. Names iterate in registration order.

    Raises:
        KeyError: (lookup) no recipe has the name.
        ConfigError: (lookup) a built-in recipe's module cannot be imported, as when a package it needs (RDKit,
            pyhmmer) is missing: one line naming the recipe and the import's error. An import error inside seqlab
            itself is a bug and propagates as it is.
    """

    def __init__(self, built_in: dict[str, BuiltInRecipe]) -> None:
        self._built_in = built_in
        self._recipes: dict[str, Recipe | None] = dict.fromkeys(built_in)  # None: a built-in not imported yet

    def __getitem__(self, name: str) -> Recipe:
        recipe = self._recipes[name]
        if recipe is None:
            recipe = self._recipes[name] = self._import(name)
        return recipe

    def __setitem__(self, name: str, recipe: Recipe) -> None:
        self._recipes[name] = recipe

    def __delitem__(self, name: str) -> None:
        del self._recipes[name]

    def __contains__(self, name: object) -> bool:
        return name in self._recipes  # Mapping's own would look the recipe up, importing it

    def __iter__(self) -> Iterator[str]:
        return iter(self._recipes)

    def __len__(self) -> int:
        return len(self._recipes)

    def description(self, name: str) -> str:
        """The one-line ``DESCRIPTION`` of recipe ``name``, without importing a built-in recipe.

        Raises: KeyError if no recipe has the name.
        """
        recipe = self._recipes[name]
        return self._built_in[name].description if recipe is None else recipe.DESCRIPTION

    def _import(self, name: str) -> Recipe:
        module = self._built_in[name].module
        try:
            return importlib.import_module(module)
        except ImportError as e:
            if (e.name or "").split(".")[0] == "seqlab":
                raise  # seqlab's own import is broken: a bug, not a missing package
            reason = " ".join(f"{type(e).__name__}: {e}".split())  # one line, however many the message has
            raise ConfigError(f"recipe {name!r} ({module}) cannot be imported: {reason}") from None


RECIPES = RecipeRegistry(BUILT_IN_RECIPES)
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
        ConfigError: no such recipe (the message lists the available ones), the plugin of that name failed to
            load (the message is its ``PLUGIN_ERRORS`` line), or the built-in recipe's module cannot be imported (a
            package it needs is missing; ``RecipeRegistry``).
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
        CheckpointError: the directory is missing, has no readable ``recipe.json``, or names an unknown recipe,
            one whose plugin failed to load (the message then ends with its ``PLUGIN_ERRORS`` line) or a built-in
            one whose module cannot be imported (the message then ends with the import's error).
    """
    name = recipe_name_of(directory)
    if name in PLUGIN_ERRORS and name not in RECIPES:
        raise CheckpointError(f"{directory / RECIPE_FILE}: {PLUGIN_ERRORS[name]}")
    if name not in RECIPES:
        raise CheckpointError(f"{directory / RECIPE_FILE}: written by unknown recipe {name!r}")
    try:
        return RECIPES[name]
    except ConfigError as e:
        raise CheckpointError(f"{directory / RECIPE_FILE}: {e}") from None


def recipes_offering(protocol: type) -> list[str]:
    """The names of the registered recipes whose ``System`` is a ``protocol`` (``seqlab.recipes.system``: a
    ``TextGenerator``, an ``AttentionSource``, ...), sorted. It imports every recipe; one that cannot be imported is
    left out (using it says why)."""
    offering = []
    for name in sorted(RECIPES):
        try:
            if issubclass(RECIPES[name].System, protocol):
                offering.append(name)
        except ConfigError:
            continue
    return offering


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
    "BUILT_IN_RECIPES",
    "PLUGIN_ERRORS",
    "PLUGIN_GROUP",
    "RECIPES",
    "RECIPE_FILE",
    "BuiltInRecipe",
    "GenerationChunk",
    "GenerationRequest",
    "Recipe",
    "RecipeRegistry",
    "Report",
    "System",
    "SystemOptions",
    "get_recipe",
    "load_system",
    "recipe_of_checkpoint",
    "recipes_offering",
    "register_recipe",
]
