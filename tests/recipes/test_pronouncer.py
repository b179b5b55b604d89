"""The pronouncer that ships with the package (``seqlab.pronounce``, ``seqlab pronounce``; issue 25).

These tests prove that the shipped files are package data, load through ``load_system`` like any run directory and
decode; they are not its quality. The words below are ones it gets right; its test-split error rates (the honest
measure: WER 27.2%, PER 6.3% on 12,605 held-out words, beam 5) are in the shipped ``results.json`` and the
README, and ``test_the_shipped_results_are_the_test_split_scores`` holds them to those files.
"""

import fnmatch
import json
from importlib.resources import files
from pathlib import Path

import pytest
import tomllib
import torch
from cli_helpers import assert_error, run_cli

import seqlab
from seqlab.errors import DataError
from seqlab.recipes import load_system
from seqlab.recipes.g2p import G2PSystem
from seqlab.recipes.pronouncer import PRONOUNCER, load_pronouncer, pronouncer_path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("config.json", "model.safetensors", "recipe.json", "source_vocab.json", "target_vocab.json", "results.json")
# Common words the shipped model pronounces as CMUdict does (stress marks removed).
KNOWN = {
    "hello": "HH EH L OW",
    "world": "W ER L D",
    "water": "W AO T ER",
    "computer": "K AH M P Y UW T ER",
    "music": "M Y UW Z IH K",
    "speech": "S P IY CH",
    "people": "P IY P AH L",
    "yellow": "Y EH L OW",
}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_the_shipped_run_is_package_data_under_ten_megabytes():
    directory = files("seqlab").joinpath(*PRONOUNCER)
    assert sorted(p.name for p in directory.iterdir()) == sorted(SHIPPED)
    assert sum(directory.joinpath(name).stat().st_size for name in SHIPPED) <= 10 * 2**20
    # what setuptools puts in the wheel: every shipped file matches a package-data glob of the seqlab package
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["seqlab"]
    for name in SHIPPED:
        assert any(fnmatch.fnmatch("/".join((*PRONOUNCER, name)), glob) for glob in globs)


def test_the_pronouncer_loads_through_load_system_and_writes_nothing_into_the_package():
    before = sorted(p.name for p in pronouncer_path().iterdir())
    system = load_system(pronouncer_path())
    assert isinstance(system, G2PSystem) and isinstance(load_pronouncer(), G2PSystem)
    assert [p.nbest for p in system.predict(list(KNOWN))] == [p.nbest for p in load_pronouncer().predict(list(KNOWN))]
    assert sorted(p.name for p in pronouncer_path().iterdir()) == before


def test_common_words_are_pronounced_as_cmudict_does():
    assert seqlab.pronounce(list(KNOWN)) == list(KNOWN.values())
    word, phonemes = next(iter(KNOWN.items()))
    assert seqlab.pronounce(word) == phonemes
    assert seqlab.pronounce(word.upper()) == phonemes  # words are lower-cased as CMUdict spells them


def test_the_nbest_comes_with_log_probabilities_best_first():
    word, phonemes = next(iter(KNOWN.items()))
    nbest = seqlab.pronounce(word, nbest=3)
    assert len(nbest) == 3 and nbest[0][0] == phonemes
    scores = [score for _, score in nbest]
    assert scores == sorted(scores, reverse=True) and all(score < 0 for score in scores)
    assert len({p for p, _ in nbest}) == 3
    for row in seqlab.pronounce([word, word], nbest=3):  # batched: the same n-best, scores to float32 rounding
        assert [p for p, _ in row] == [p for p, _ in nbest]
        assert [s for _, s in row] == pytest.approx(scores, abs=1e-4)


def test_the_shipped_results_are_the_test_split_scores():
    results = json.loads(pronouncer_path().joinpath("results.json").read_text())
    assert results["test_words"] == 12605 and results["stopped_by"] == "max_steps"
    assert f"WER {results['wer']:.1f}%, PER {results['per']:.1f}%" in " ".join(__doc__.split())


def test_the_command_prints_cmudict_lines():
    word, phonemes = next(iter(KNOWN.items()))
    result = run_cli("pronounce", word, "--nbest", "2")
    assert result.code == 0 and result.err == ""
    first, second = result.out.splitlines()
    assert first == f"{word}  {phonemes}" and second.startswith(f"{word}(2)  ")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["hello", ""], "inputs: input 2 is empty"),
        (["c3po"], "inputs: word 'c3po' has letters the model never saw: '3'"),
        (["école"], "inputs: word 'école' has letters the model never saw: 'é'"),
        (["a" * 65], "inputs: word of 65 letters, longer than data.max_word_length (64)"),
        (["hello", "--num-beams", "0"], "--num-beams (0) must be >= 1"),
        (["hello", "--nbest", "9"], "nbest (9) cannot exceed the beam width num_beams (5)"),
        ([], "seqlab pronounce: the following arguments are required: WORD"),
    ],
)
def test_the_command_refuses_bad_input_in_one_line(argv, message):
    assert_error(run_cli("pronounce", *argv), message)


def test_the_python_function_refuses_what_the_command_refuses():
    with pytest.raises(DataError, match=r"^pronounce: input 1 is empty$"):
        seqlab.pronounce("")
    with pytest.raises(DataError, match="has letters the model never saw: '3'"):
        seqlab.pronounce(["c3po"])
