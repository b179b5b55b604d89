"""Recipes from other distributions, through the ``seqlab.recipes`` entry-point group: a separate process (the
``seqlab`` command) sees them, and a broken plugin is named when used without breaking the other recipes.

A plugin is "installed" as pip would leave it, without pip: its modules and a ``*.dist-info`` folder holding
``METADATA`` and ``entry_points.txt`` in a folder on PYTHONPATH, where ``importlib.metadata`` finds it. Each test
runs its ``seqlab`` commands in one fresh interpreter (subprocess, never fork: the tests have run torch), through
the console script's ``main``; one interpreter per test, as importing seqlab costs seconds.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from cli_helpers import Result, assert_error
from recipe_example import example_source

import seqlab

TESTS = Path(__file__).parents[1]
SOURCE = Path(seqlab.__file__).parents[1]  # the seqlab under test
# Runs each argv of the JSON list in sys.argv[1] through seqlab's main, printing the Results as JSON.
RUN_COMMANDS = """
import json, sys
from cli_helpers import run_cli
print(json.dumps([run_cli(*argv) for argv in json.loads(sys.argv[1])]))
"""


def install(site: Path, modules: dict[str, str], entry_points: dict[str, str]) -> None:
    """Write ``modules`` (name -> source) and one distribution whose ``seqlab.recipes`` group has
    ``entry_points`` (name -> object reference) into ``site``."""
    site.mkdir(exist_ok=True)
    for name, source in modules.items():
        (site / f"{name}.py").write_text(source)
    info = site / "seqlab_plugins-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: seqlab-plugins\nVersion: 0.1\n")
    lines = [f"{name} = {value}" for name, value in entry_points.items()]
    (info / "entry_points.txt").write_text("[seqlab.recipes]\n" + "\n".join(lines) + "\n")


def seqlab(site: Path, *commands: list[object]) -> list[Result]:
    """What each of the ``seqlab`` ``commands`` returned and printed, run in one fresh interpreter with ``site`` on
    its path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(TESTS), str(SOURCE)])}
    argvs = json.dumps([[str(a) for a in argv] for argv in commands])
    process = subprocess.run(
        [sys.executable, "-c", RUN_COMMANDS, argvs], env=env, capture_output=True, text=True, timeout=600
    )
    assert process.returncode == 0, process.stderr
    return [Result(*result) for result in json.loads(process.stdout.splitlines()[-1])]


def test_a_recipe_installed_as_a_plugin_trains_from_the_command_line(tmp_path):
    site = tmp_path / "site"
    install(site, {"seqlab_majority": example_source()}, {"majority": "seqlab_majority"})

    out = tmp_path / "run"
    listed, trained = seqlab(
        site, ["recipes"], ["train", "majority", "--out", out, "--no-progress", "--set", "train.max_steps=2"]
    )
    assert listed.code == 0 and listed.err == "", listed.err
    rows = {line.split()[0]: line for line in listed.out.splitlines()[2:]}
    assert "majority bit of random bit strings" in rows["majority"] and "g2p" in rows
    assert trained.code == 0, trained.err
    assert json.loads((out / "recipe.json").read_text())["recipe"] == "majority"
    assert json.loads((out / "results.json").read_text())["steps"] == 2


BROKEN = 'raise ImportError("needs the package frobnicate\\n(second line of the message)")\n'


def test_a_broken_plugin_is_named_when_used_and_breaks_no_other_recipe(tmp_path):
    site = tmp_path / "site"
    install(
        site,
        {"seqlab_majority": example_source(), "seqlab_broken": BROKEN},
        {
            "broken": "seqlab_broken",
            "renamed": "seqlab_majority",  # its NAME is "majority"
            "g2p": "seqlab_majority:Config",  # a built-in's name, and not a recipe
        },
    )
    errors = {
        "broken": "recipe plugin 'broken' (seqlab_broken) failed to load: "
        "ImportError: needs the package frobnicate (second line of the message)",
        "g2p": "recipe plugin 'g2p' (seqlab_majority:Config) failed to load: "
        "TypeError: the entry point is named 'g2p' but its recipe's NAME is None",
        "renamed": "recipe plugin 'renamed' (seqlab_majority) failed to load: "
        "TypeError: the entry point is named 'renamed' but its recipe's NAME is 'majority'",
    }

    run = tmp_path / "run"  # a run directory the broken plugin once wrote
    run.mkdir()
    (run / "recipe.json").write_text(json.dumps({"recipe": "broken"}))
    listed, used, predicted, shown = seqlab(
        site, ["recipes"], ["recipes", "broken"], ["predict", run, "0"], ["recipes", "g2p"]
    )
    assert listed.code == 0
    assert listed.err.splitlines() == list(errors.values())
    names = [line.split()[0] for line in listed.out.splitlines()[2:]]
    assert "g2p" in names and "lm" in names and "majority" not in names and "broken" not in names
    assert_error(used, errors["broken"])
    assert_error(predicted, f"{run / 'recipe.json'}: {errors['broken']}")
    assert shown.code == 0 and shown.out.startswith("g2p: "), shown.err  # the built-in, unharmed
