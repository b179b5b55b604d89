"""The example recipe of the documentation's "Writing a recipe" page runs as written, so the page cannot go stale.

The example is cut out of docs/guide/writing-a-recipe.md, imported as a module, registered, and driven through the
command line: train for a few steps, then evaluate and predict, whose answers must agree with the bits' true majorities.
"""

import contextlib
import importlib.util
import io
import json

import pytest
from recipe_example import example_source

from seqlab.cli import main
from seqlab.models import Seq2VecClassifier, load_pretrained
from seqlab.recipes import RECIPES, register_recipe


def run_cli(*argv: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def majority(tmp_path):
    path = tmp_path / "majority.py"
    path.write_text(example_source())
    spec = importlib.util.spec_from_file_location("majority", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    register_recipe(module)
    yield module
    del RECIPES[module.NAME]


def test_the_example_is_at_most_75_lines():
    assert len(example_source().splitlines()) <= 75


def test_the_example_recipe_trains_evaluates_and_predicts(majority, tmp_path):
    out = tmp_path / "run"
    code, printed, log = run_cli("train", "majority", "--out", out, "--no-progress", "--set", "train.max_steps=3")
    assert code == 0, log
    results = json.loads((out / "results.json").read_text())
    assert results["steps"] == 3 and results["stopped_by"] == "max_steps"
    assert 0.0 <= results["accuracy"] <= 100.0
    assert json.loads((out / "recipe.json").read_text())["recipe"] == "majority"
    model = load_pretrained(out)
    assert isinstance(model, Seq2VecClassifier)
    parameters = sum(p.numel() for p in model.parameters())
    assert (
        f"checkpoint: {out}; data: 512 train / 512 valid / 512 test strings; model: {parameters:,} parameters\n" in log
    )
    assert printed.splitlines()[-1] == f"checkpoint: {out}"

    strings = ["011010011", "111011111", "000000000", "101100110", "011100000", "100000001"]
    code, printed, log = run_cli("predict", out, *strings)
    assert code == 0, log
    lines = printed.splitlines()
    assert [line.split("  ")[0] for line in lines] == strings
    truth = ["ones" if 2 * s.count("1") > len(s) else "zeros" for s in strings]
    hits = sum(line.split("  ")[1] == label for line, label in zip(lines, truth, strict=True))

    data = tmp_path / "bits.txt"
    data.write_text("\n".join(strings) + "\n")
    code, printed, log = run_cli("evaluate", out, "--data", data, "--json")
    assert code == 0, log
    assert json.loads(printed)["accuracy"] == pytest.approx(100.0 * hits / len(strings))

    code, printed, log = run_cli("predict", out, "011010011", "--nbest", "2")
    refused = "seqlab: error: --nbest: the majority recipe takes no such option\n"
    assert (code, printed, log) == (2, "", refused)
