"""Hostile typed inputs and run files, on the committed fixture runs: an empty ``predict`` input, a look-alike
letter (the Kelvin sign), a ``recipe.json`` that is a directory and a ``config.json`` nested too deeply each end in
one line and exit 2, for every recipe alike (the checks run before the recipe's own code)."""

import shutil
from pathlib import Path

import pytest
from cli_helpers import assert_error, run_cli

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
RUNS = [FIXTURES / name for name in ("classify_9a192c4", "g2p_v0_1", "lm_gpt_9a192c4")]
KELVIN = "\u212aelvin"  # U+212A KELVIN SIGN, which .lower() turns into an ASCII k


@pytest.mark.parametrize("run", RUNS, ids=lambda run: run.name)
def test_an_empty_predict_input_is_refused_in_one_line(run):
    assert_error(run_cli("predict", run, "cat", ""), "inputs: input 2 is empty")
    assert_error(run_cli("predict", run, "  "), "inputs: input 1 is empty")


@pytest.mark.parametrize("run", RUNS, ids=lambda run: run.name)
def test_a_compatibility_character_is_refused_not_read_as_its_look_alike(run):
    assert_error(
        run_cli("predict", run, KELVIN),
        f"inputs: input 1 {KELVIN!r}: U+212A KELVIN SIGN is a compatibility character (NFKC: 'K'); type 'K'",
    )


def test_a_prompt_with_a_compatibility_character_is_refused():
    assert_error(
        run_cli("generate", RUNS[2], "--prompt", "\ufb01ne", "--max-new-tokens", "2"),
        "prompt: U+FB01 LATIN SMALL LIGATURE FI is a compatibility character (NFKC: 'fi'); type 'fi'",
    )


@pytest.fixture
def copied(tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(RUNS[0], run)
    return run


def test_a_recipe_json_that_is_a_directory_is_one_line(copied):
    (copied / "recipe.json").unlink()
    (copied / "recipe.json").mkdir()
    message = f"{copied / 'recipe.json'}: is a directory, expected a JSON file"
    assert_error(run_cli("predict", copied, "Anna"), message)
    assert_error(run_cli("evaluate", copied, "--data", FIXTURES / "names.tsv"), message)


def test_a_config_json_nested_too_deeply_is_one_line(copied):
    (copied / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    assert_error(run_cli("predict", copied, "Anna"), f"{copied / 'config.json'}: not valid JSON (nested too deeply)")
