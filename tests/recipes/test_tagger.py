"""The tagger recipe: the scoring against hand-computed values, and through the command line on a small generated
dictionary whose stress rule (last vowel if the word ends in T, else first) both baselines get wrong: the BiLSTM
and the Transformer arm beat them, evaluate equals an independent computation, predict prints stressed
pronunciations, bad input gets one line."""

import dataclasses
import json
import random
import shutil

import pytest
import torch
from cli_helpers import assert_error, run_cli

from seqlab.config import apply_overrides
from seqlab.data.vocab import Vocabulary
from seqlab.errors import ConfigError
from seqlab.models import BertForTokenClassification, RNNSequenceTagger, load_pretrained
from seqlab.recipes import load_system, tagger
from seqlab.recipes.saved_run import load_recipe_config
from seqlab.recipes.tagger import (
    IGNORE,
    RNNTaggerConfig,
    StressPrediction,
    TaggerData,
    TaggerSystem,
    TaggerTraining,
    TransformerTaggerConfig,
    baseline_patterns,
    split_stress,
    stress_scores,
)

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
        "inputs: unknown phoneme 'ZH' in 'K AA ZH' (known: AA IY K M N S T UW)",
    )
    assert run_cli("recipes", "tagger").out.startswith("tagger: sequence labelling")


def test_evaluate_refuses_a_file_without_stress_digits_naming_the_word(run, tmp_path):
    plain = tmp_path / "g2p.dict"
    plain.write_text("kiss  K IY1 S\nsit  S AA T\n")  # as g2p files are written: no stress digits
    assert_error(
        run_cli("evaluate", run, "--data", plain),
        f"{plain}: word 'sit': vowel AA has no stress digit; the tagger is scored on CMUdict's stress digits",
    )


@pytest.mark.parametrize(
    ("vowels", "reason"), [([], "no vowels"), (["AA", "ZH"], "'ZH' is not a phoneme of the vocabulary")]
)
def test_a_run_whose_vowel_set_was_emptied_or_damaged_is_refused_on_load(run, tmp_path, vowels, reason):
    damaged = tmp_path / "run"
    shutil.copytree(run, damaged)
    (damaged / "vowels.json").write_text(json.dumps({"vowels": vowels}))
    assert_error(run_cli("predict", damaged, "K AA S"), f"{damaged / 'vowels.json'}: bad vowels file ({reason})")


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
        f"inputs: 65 phonemes in {' '.join(['K'] * 65)!r}, the model reads 64",
    )


def test_predict_returns_typed_predictions_that_print_as_the_command_line(run):
    system = load_system(run)
    assert isinstance(system, TaggerSystem)
    (prediction,) = system.predict(["k aa s iy1 t"])
    assert isinstance(prediction, StressPrediction)
    assert prediction.phonemes == ("K", "AA", "S", "IY", "T")
    assert prediction.stress[::2] == (IGNORE, IGNORE, IGNORE) and set(prediction.stress[1::2]) <= {0, 1, 2}
    assert prediction.lines() == [run_cli("predict", run, "k aa s iy1 t").out.rstrip("\n")]


def test_the_validation_loss_is_the_mean_over_vowels_of_a_hand_made_batch():
    """TaggerTraining.validate alone, on batches of 2 (padded, 5 vowels) and 1 pronunciation (1 vowel): the mean
    over all 6 vowels of the unpadded model's cross-entropy, not the mean of the two batches' means."""
    train = [("a", ("K", "AA1", "T")), ("b", ("S", "IY0", "AA1")), ("c", ("M", "UW1"))]
    valid = [("d", ("K", "IY1", "AA0", "T")), ("f", ("N", "UW0", "IY1", "AA2")), ("e", ("AA0", "S"))]  # 5 + 1
    torch.manual_seed(0)
    training = TaggerTraining.build(
        TaggerData(train, valid, valid, "hand"),
        RNNTaggerConfig(hidden_size=4, embedding_size=4, num_layers=1, dropout=0.0),
    )
    training = dataclasses.replace(training, eval_batch_size=2)
    model = training.system.model.eval()
    nats, wrong = [], 0
    with torch.no_grad():
        for _, phonemes in valid:
            stripped, stress = split_stress(phonemes)
            logits = model(torch.tensor([training.system.vocab.encode(stripped)])).logits[0]  # (T, K)
            for t, label in enumerate(stress):
                if label != IGNORE:
                    nats.append(-torch.log_softmax(logits[t], -1)[label].item())
                    wrong += int(logits[t].argmax()) != label
    scores = training.validate(model)
    assert len(nats) == 6
    assert scores["valid_loss"] == pytest.approx(sum(nats) / len(nats), rel=1e-6)
    assert scores["valid_error"] == pytest.approx(100 * wrong / 6)


def test_building_refuses_training_data_without_stress_digits():
    plain = [("a", ("K", "AA", "T"))]
    with pytest.raises(Exception, match=r"^hand: no stress digits in the training pronunciations"):
        TaggerTraining.build(TaggerData(plain, plain, plain, "hand"), RNNTaggerConfig())


def test_the_model_section_is_a_choice_of_arch():
    config = apply_overrides(tagger.Config(), {"model.arch": "transformer", "model.num_heads": "2"})
    assert config.model == TransformerTaggerConfig(num_heads=2)
    with pytest.raises(ConfigError) as caught:
        apply_overrides(tagger.Config(), {"model.num_heads": "2"})
    assert (
        str(caught.value) == "--set model.num_heads: does not apply to model.arch=rnn (a key of model.arch=transformer)"
    )
    with pytest.warns(FutureWarning, match=r"^--set model.max_positions is renamed context_length"):
        config = apply_overrides(config, {"model.max_positions": "32"})
    assert config.model.context_length == 32


def test_a_key_of_the_other_arch_is_refused_on_the_command_line(tmp_path):
    out = tmp_path / "out"
    result = run_cli("train", "tagger", "--out", out, "--no-progress", "--set", "model.arch=rnn", "model.d_model=32")
    assert_error(result, "--set model.d_model: does not apply to model.arch=rnn (a key of model.arch=transformer)")
    assert not out.exists()


OLD_MODEL_SECTION = {  # recipe.json's model section before model.arch was a choice: both archs' keys
    "num_layers": 1,
    "dropout": 0.0,
    "cell": "lstm",
    "embedding_size": 8,
    "hidden_size": 16,
    "bidirectional": True,
    "d_model": 128,
    "num_heads": 4,
    "d_ff": 256,
    "max_positions": 64,
}


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_a_recipe_file_from_before_the_choice_loads(run, tmp_path, arch):
    copy = tmp_path / "old"
    shutil.copytree(run, copy)
    saved = json.loads((copy / "recipe.json").read_text())
    saved["config"]["model"] = {"arch": arch, **OLD_MODEL_SECTION}
    (copy / "recipe.json").write_text(json.dumps(saved))
    config = load_recipe_config(copy, tagger.Config)
    expected = RNNTaggerConfig(num_layers=1, dropout=0.0, embedding_size=8, hidden_size=16)
    if arch == "transformer":
        expected = TransformerTaggerConfig(num_layers=1, dropout=0.0, context_length=64)
    assert config.model == expected
