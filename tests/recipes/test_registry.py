"""The registry imports a built-in recipe only when it is used: its table (``BUILT_IN_RECIPES``) names every recipe
module of the package with its description, lists the recipes without importing them, and a recipe whose module
cannot be imported (a package it needs is missing) fails alone, in one line, while the others work.

The missing package is simulated in a fresh interpreter (subprocess, never fork: the tests have run torch) by an
import hook that refuses RDKit, SELFIES and pyhmmer as an interpreter without them would.
"""

import importlib
import json
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import Result, assert_error

import seqlab
import seqlab.recipes
from seqlab.errors import ConfigError
from seqlab.recipes import BUILT_IN_RECIPES, BuiltInRecipe, RecipeRegistry
from seqlab.recipes.base import RECIPE_MEMBERS

TESTS = Path(__file__).parents[1]
SOURCE = Path(seqlab.__file__).parents[1]  # the seqlab under test, for the subprocesses
FIXTURES = TESTS / "fixtures" / "checkpoints"


def recipe_modules() -> dict[str, BuiltInRecipe]:
    """Every module of the ``seqlab.recipes`` package that is a recipe (it has each member of the ``Recipe``
    protocol), as the table's entry it needs, by its NAME."""
    found = {}
    for info in pkgutil.iter_modules(seqlab.recipes.__path__):
        module = importlib.import_module(f"seqlab.recipes.{info.name}")
        if all(hasattr(module, member) for member in RECIPE_MEMBERS):
            found[module.NAME] = BuiltInRecipe(module.__name__, module.DESCRIPTION)
    return found


def test_the_table_holds_every_recipe_module_of_the_package_by_name_with_its_description():
    """A new recipe package missing from the table (or a description changed in one place only) fails here."""
    assert recipe_modules() == BUILT_IN_RECIPES


def test_names_and_descriptions_import_nothing_and_a_lookup_imports_its_recipe_only():
    registry = RecipeRegistry({"ghost": BuiltInRecipe("seqlab_no_such_module", "never imported")})
    assert list(registry) == ["ghost"] and len(registry) == 1 and "ghost" in registry
    assert registry.description("ghost") == "never imported"  # the module does not exist: nothing was imported
    with pytest.raises(KeyError):
        registry["gpt"]


def test_a_recipe_whose_package_is_missing_is_one_line_naming_the_import():
    registry = RecipeRegistry({"ghost": BuiltInRecipe("seqlab_no_such_module", "never imported")})
    message = "recipe 'ghost' (seqlab_no_such_module) cannot be imported: ModuleNotFoundError: No module named "
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}'seqlab_no_such_module'$"):
        registry["ghost"]


def test_a_broken_import_inside_seqlab_is_a_bug_and_propagates_as_it_is():
    registry = RecipeRegistry({"ghost": BuiltInRecipe("seqlab.recipes.no_such_module", "never imported")})
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'seqlab.recipes.no_such_module'$"):
        registry["ghost"]


# Runs each argv of the JSON list in sys.argv[1] through seqlab's main with the packages of sys.argv[2] missing,
# printing the Results as JSON.
WITHOUT_PACKAGES = """
import importlib.abc, json, sys

class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in sys.argv[2].split(","):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
from cli_helpers import run_cli
print(json.dumps([run_cli(*argv) for argv in json.loads(sys.argv[1])]))
"""


def seqlab_without(packages: list[str], *commands: list[object]) -> list[Result]:
    """What each of the ``seqlab`` ``commands`` returned and printed, run in one fresh interpreter in which
    ``packages`` cannot be imported."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(SOURCE)])}
    argvs = json.dumps([[str(a) for a in argv] for argv in commands])
    process = subprocess.run(
        [sys.executable, "-c", WITHOUT_PACKAGES, argvs, ",".join(packages)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert process.returncode == 0, process.stderr
    return [Result(*result) for result in json.loads(process.stdout.splitlines()[-1])]


def test_without_rdkit_the_smiles_recipe_fails_in_one_line_and_every_other_recipe_works(tmp_path):
    run = tmp_path / "molecules"  # a run directory of the smiles recipe
    run.mkdir()
    (run / "recipe.json").write_text(json.dumps({"recipe": "smiles"}))
    listed, shown, trained, predicted, generated, refused, protein = seqlab_without(
        ["rdkit", "selfies", "pyhmmer"],
        ["recipes"],
        ["recipes", "smiles"],
        ["train", "smiles", "--out", tmp_path / "new"],
        ["predict", run, "CCO"],
        ["generate", FIXTURES / "lm_gpt_9a192c4", "--prompt", "The", "--max-new-tokens", "4", "--seed", "0"],
        ["generate", FIXTURES / "g2p_v0_1", "--prompt", "The"],
        ["recipes", "protein"],
    )
    assert listed.code == 0 and listed.err == "", listed.err
    assert [line.split()[0] for line in listed.out.splitlines()[2:]] == sorted(BUILT_IN_RECIPES)
    missing = "recipe 'smiles' (seqlab.recipes.smiles) cannot be imported: ModuleNotFoundError: No module named"
    assert_error(shown, f"{missing} 'rdkit'")
    assert_error(trained, f"{missing} 'rdkit'")
    assert not (tmp_path / "new").exists()
    assert_error(predicted, f"{run / 'recipe.json'}: {missing} 'rdkit'")
    assert generated.code == 0 and generated.out.startswith("The"), generated.err
    # the recipes that generate, asked of every System: smiles (which does) cannot be imported, so it is left out
    message = f"{FIXTURES / 'g2p_v0_1'}: the g2p recipe does not generate; runs of lm, protein, vec2seq do"
    assert_error(refused, message)
    assert protein.code == 0 and protein.out.startswith("protein: "), protein.err  # pyhmmer only reads its data
