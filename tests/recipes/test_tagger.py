"""The tagger recipe: the scoring against hand-computed values, and through the command line on a small generated
dictionary whose stress rule (last vowel if the word ends in T, else first) both baselines get wrong: the BiLSTM
and the Transformer arm beat them, evaluate equals an independent computation, predict prints stressed
pronunciations, bad input gets one line."""

import json
import random

import pytest
import torch
from cli_helpers import assert_error, run_cli

from seqlab.data.vocab import Vocabulary
from seqlab.models import BertForTokenClassification, RNNSequenceTagger, load_pretrained
from seqlab.recipes.tagger import IGNORE, baseline_patterns, split_stress, stress_scores

VOWELS, CONSONANTS = ("AA", "IY", "UW"), ("K", "S", "M", "N")
TINY = ["model.hidden_size=16", "model.embedding_size=8", "model.num_layers=1", "model.dropout=0.0"]
STEPS = ["train.max_steps=150", "train.lr=0.02", "train.batch_size=32", "train.patience=null"]


def stressed_word(rng: random.Random) -> str:
    vowels = [rng.choice(VOWELS) for _ in range(rng.randint(2, 3))]
    final = rng.choice(("T", "K"))
    stressed = len(vowels) - 1 if final == "T" else 0
    phonemes = []
    for i, vowel in enumerate(vowels):
        phonemes += [rng.choice(CONSONANTS), f"{vowel}{int(i == stressed)}"]
    return " ".join([*phonemes, final])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = random.Random(0)
    lines = [f"w{i}  {stressed_word(rng)}" for i in range(600)]
    path = tmp_path_factory.mktemp("data") / "dict.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def run(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "tagger"
    result = run_cli(
        "train", "tagger", "--out", out, "--no-progress", "--set", f"data.train_path={data}", *TINY, *STEPS
    )
    assert result.code == 0, result.err
    return out


def test_scores_against_the_closest_reference_by_hand():
    # Word 1: two patterns; the prediction matches the second fully. Word 2: 1 of 2 vowels right. Word 3: no vowel.
    predictions = [(IGNORE, 0, 1), (1, IGNORE, 1), (IGNORE,)]
    references = [[(IGNORE, 1, 0), (IGNORE, 0, 1)], [(0, IGNORE, 1)], [(IGNORE,)]]
    scores = stress_scores(predictions, references)
    assert scores.vowels == 4 and scores.words == 3
    assert scores.vowel_accuracy == pytest.approx(100 * 3 / 4)
    assert scores.word_accuracy == pytest.approx(100 * 2 / 3)


def test_split_stress_and_the_baselines():
    assert split_stress(("HH", "AH0", "L", "OW1")) == (("HH", "AH", "L", "OW"), (IGNORE, 0, IGNORE, 1))
    train = [("a", ("K", "AA1", "T", "IY0")), ("b", ("AA1",)), ("c", ("IY2", "AA0"))]
    patterns = baseline_patterns(train, [("IY", "K", "AA", "UW")])
    assert patterns["majority"] == [(0, IGNORE, 1, IGNORE)]  # IY: 0 once, 2 once -> first seen most common
    assert patterns["first"] == [(1, IGNORE, 0, IGNORE)]  # UW never carried stress in training: not a vowel


def test_the_tagger_beats_both_baselines(run):
    results = json.loads((run / "results.json").read_text())
    assert results["word_accuracy"] > 90.0
    assert results["word_accuracy"] > results["first_word_accuracy"] + 20  # the first vowel is right for half
    assert results["vowel_accuracy"] > results["majority_vowel_accuracy"] + 20


def test_evaluate_equals_an_independent_computation(run, data):
    result = run_cli("evaluate", run, "--data", data, "--json")
    assert result.code == 0, result.err
    model, vocab = RNNSequenceTagger.from_pretrained(run), Vocabulary.load(run / "vocab.json")
    right_vowels = vowels = right_words = 0
    with torch.no_grad():
        for line in data.read_text().splitlines():
            phonemes = line.split()[1:]
            stress = [int(p[-1]) if p[-1].isdigit() else None for p in phonemes]
            x = torch.tensor([vocab.encode(p.rstrip("012") for p in phonemes)])
            predicted = model(x).logits[0].argmax(-1).tolist()
            hits = [p == s for p, s in zip(predicted, stress, strict=True) if s is not None]
            right_vowels, vowels, right_words = right_vowels + sum(hits), vowels + len(hits), right_words + all(hits)
    scores = json.loads(result.out)
    assert scores["vowel_accuracy"] == pytest.approx(100 * right_vowels / vowels)
    assert scores["word_accuracy"] == pytest.approx(100 * right_words / 600)


def test_predict_prints_the_stressed_pronunciation(run):
    result = run_cli("predict", run, "K AA S IY T", "m iy1 n uw k")
    assert result.code == 0, result.err
    first, second = result.out.splitlines()
    assert first.split() == ["K", "AA0", "S", "IY1", "T"] and second.split()[::2] == ["M", "N", "K"]


def test_bad_input_gets_one_line(run):
    assert_error(
        run_cli("predict", run, "K AA ZH"),
        "command line: unknown phoneme 'ZH' in 'K AA ZH' (known: AA IY K M N S T UW)",
    )
    assert run_cli("recipes", "tagger").out.startswith("tagger: sequence labelling")


def test_the_transformer_arch_trains_and_predicts(data, tmp_path):
    out = tmp_path / "transformer"
    tiny = ["model.arch=transformer", "model.d_model=16", "model.num_heads=2", "model.d_ff=32", "model.num_layers=1"]
    result = run_cli(
        "train", "tagger", "--out", out, "--no-progress", "--set", f"data.train_path={data}", *tiny, *STEPS
    )
    assert result.code == 0, result.err
    assert type(load_pretrained(out)) is BertForTokenClassification
    results = json.loads((out / "results.json").read_text())
    assert results["word_accuracy"] > results["first_word_accuracy"] + 20
    predicted = run_cli("predict", out, "K AA S IY T")
    assert predicted.code == 0 and predicted.out.split()[::2] == ["K", "S", "T"]
    assert_error(
        run_cli("predict", out, " ".join(["K"] * 65)),
        f"command line: 65 phonemes in {' '.join(['K'] * 65)!r}, the model reads 64",
    )
