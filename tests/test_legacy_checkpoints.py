"""Checkpoints written by earlier seqlab versions still load, predict, generate and evaluate as they did: exactly,
but for a language model's scores, which match to float32 rounding.

``tests/fixtures/checkpoints/`` holds tiny run directories, each with what ``seqlab`` printed for it when it was
written:
- ``g2p_v0_1`` and ``g2p_transformer_v0_1``: g2p runs (an RNN and a Transformer seq2seq) trained by seqlab 0.1.0
  on ``train.dict``, before the model registry;
- ``lm_gpt_9a192c4`` (a char GPT), ``lm_lstm_word_9a192c4`` (a word LSTM, trained on ``corpus.txt``) and
  ``classify_9a192c4`` (a BiLSTM over ``names.tsv``): written by main at commit 9a192c4, before the ``System``
  protocol replaced each recipe's own ``predict``/``evaluate``/``generate`` functions.
"""

import contextlib
import io
import json
from pathlib import Path

import pytest

from seqlab.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"
LANGUAGE_MODELS = ["lm_gpt_9a192c4", "lm_lstm_word_9a192c4"]


def printed(*argv: object) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([str(a) for a in argv])
    assert code == 0
    return out.getvalue()


@pytest.mark.parametrize("name", ["g2p_v0_1", "g2p_transformer_v0_1"])
def test_v0_1_checkpoint_predicts_as_it_did(name):
    got = printed("predict", FIXTURES / name, "cat", "dog", "pin", "--beam-size", "2", "--nbest", "2")
    assert got == (FIXTURES / name / "expected_predictions.txt").read_text()


@pytest.mark.parametrize("name", LANGUAGE_MODELS)
def test_language_model_predicts_generates_and_evaluates_as_it_did(name):
    run = FIXTURES / name
    assert printed("predict", run, "The lord", "And") == (run / "expected_predictions.txt").read_text()
    beam = printed("generate", run, "--prompt", "The land", "--max-new-tokens", "12", "--num-beams", "2")
    sampled = printed(
        "generate", run, "--prompt", "The land", "--max-new-tokens", "12", "--temperature", "0.8", "--top-k", "5",
        "--seed", "3", "--num-samples", "2",
    )  # fmt: skip
    assert beam + sampled == (run / "expected_generations.txt").read_text()
    evaluated = printed("evaluate", run, "--data", FIXTURES / "corpus.txt", "--json")
    # A GPT's windows are scored many per forward pass since issue 25: the same sums in another order, so the
    # float32 scores match to rounding, not to the last digit.
    expected = json.loads((run / "expected_evaluation.json").read_text())
    assert json.loads(evaluated) == pytest.approx(expected, rel=1e-6)


def test_classifier_predicts_and_evaluates_as_it_did():
    run = FIXTURES / "classify_9a192c4"
    assert printed("predict", run, "Ivanov", "Tanaka", "Lindberg") == (run / "expected_predictions.txt").read_text()
    evaluated = printed("evaluate", run, "--data", FIXTURES / "names.tsv", "--json")
    assert evaluated == (run / "expected_evaluation.json").read_text()
