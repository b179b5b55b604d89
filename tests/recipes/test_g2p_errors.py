"""The g2p recipe's ensembles (``--ensemble``), wrong-word lists (``--errors``) and WER by category, on the two
0.1.0 fixture runs (an LSTM and a Transformer trained on ``train.dict``, with the same vocabularies)."""

import dataclasses
import json
import shutil
from pathlib import Path

from cli_helpers import assert_error, run_cli

from seqlab.data.cmudict import group_references, read_cmudict
from seqlab.recipes import g2p
from seqlab.recipes.g2p.error_analysis import error_categories, write_errors

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
RNN, TRANSFORMER, DICTIONARY = FIXTURES / "g2p_v0_1", FIXTURES / "g2p_transformer_v0_1", FIXTURES / "train.dict"
WORDS = ("cat", "dog", "pin", "tap")


def _evaluate(*argv):
    result = run_cli("evaluate", *argv, "--data", DICTIONARY, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_an_ensemble_of_a_run_with_itself_scores_and_predicts_as_the_run():
    assert _evaluate(RNN, "--ensemble", RNN, RNN) == _evaluate(RNN)
    alone = run_cli("predict", RNN, *WORDS, "--nbest", "2", "--num-beams", "3")
    together = run_cli("predict", RNN, *WORDS, "--nbest", "2", "--num-beams", "3", "--ensemble", RNN)
    assert together.code == 0 and together.out == alone.out


def test_an_ensemble_of_two_architectures_decodes_their_mixture():
    """predict --ensemble equals a beam search over EnsembleStepModel built by hand from the two models."""
    system = dataclasses.replace(g2p.G2PSystem.load(RNN), ensemble=(g2p.G2PSystem.load(TRANSFORMER).model,))
    expected = [
        f"{word}  {' '.join(hyps[0][0])}"
        for word, hyps in zip(WORDS, system.transcribe(WORDS, source="t"), strict=True)
    ]
    result = run_cli("predict", RNN, *WORDS, "--ensemble", TRANSFORMER)
    assert result.code == 0, result.err
    assert result.out.splitlines() == expected
    metrics = _evaluate(RNN, "--ensemble", TRANSFORMER)
    assert 0 <= metrics["wer"] <= 100 and metrics["words"] == _evaluate(RNN)["words"]


def test_an_ensemble_member_with_another_vocabulary_or_recipe_is_refused_in_one_line(tmp_path):
    other = tmp_path / "other"
    shutil.copytree(TRANSFORMER, other)
    symbols = json.loads((other / "target_vocab.json").read_text())["symbols"]
    symbols[3], symbols[4] = symbols[4], symbols[3]  # AA and AE swap ids: the model would output the wrong one
    (other / "target_vocab.json").write_text(json.dumps({"symbols": symbols}))
    message = f"--ensemble {other}: its letter or phoneme vocabulary differs from {RNN}'s"
    assert_error(run_cli("predict", RNN, "cat", "--ensemble", other), message)
    assert_error(run_cli("evaluate", RNN, "--data", DICTIONARY, "--ensemble", other), message)
    recipe = json.loads((other / "recipe.json").read_text())
    (other / "recipe.json").write_text(json.dumps({**recipe, "recipe": "vowels"}))
    assert_error(
        run_cli("predict", RNN, "cat", "--ensemble", other), f"--ensemble {other}: a vowels run, not a g2p run"
    )
    assert_error(
        run_cli("evaluate", other, "--data", DICTIONARY, "--errors", tmp_path / "e.tsv"),
        "--errors: the vowels recipe takes no such option",
    )
    assert_error(
        run_cli("predict", other, "cat", "--ensemble", RNN),
        "--ensemble: the vowels recipe takes no such option",
    )


def test_errors_lists_every_wrong_word_and_never_overwrites(tmp_path):
    path = tmp_path / "errors.tsv"
    metrics = _evaluate(RNN, "--errors", path)
    header, *rows = path.read_text().splitlines()
    assert header == "word\treferences\thypothesis\tdistance"
    assert len(rows) == round(metrics["wer"] * metrics["words"] / 100)
    references = group_references(read_cmudict(DICTIONARY))
    predicted = dict(line.split("  ") for line in run_cli("predict", RNN, *references).out.splitlines())
    wrong = [w for w, variants in references.items() if tuple(predicted[w].split()) not in variants]
    assert [row.split("\t")[0] for row in rows] == wrong
    for row in rows:
        word, refs, hypothesis, distance = row.split("\t")
        assert refs == " | ".join(" ".join(v) for v in references[word]) and hypothesis == predicted[word]
        assert int(distance) >= 1
    before = path.read_text()
    assert_error(
        run_cli("evaluate", RNN, "--data", DICTIONARY, "--errors", path),
        f"--errors {path}: exists; give a new file name (an existing file is never overwritten)",
    )
    assert path.read_text() == before


def test_error_categories_by_hand():
    words = ["ab", "abcdefgh", "nth", "abcdefghijkl"]
    hypotheses = [("A",), ("X",), ("N",), ("L",)]
    references = [[("A",)], [("Y",), ("Z",)], [("EH", "N")], [("L",)]]
    rows = error_categories(words, hypotheses, references)
    assert rows["wer_letters_1_4"] == 50.0 and rows["words_letters_1_4"] == 2.0  # ab right, nth wrong
    assert "wer_letters_5_7" not in rows and rows["words_letters_5_7"] == 0.0
    assert rows["wer_letters_8_10"] == 100.0 and rows["wer_letters_11_up"] == 0.0
    assert rows["wer_one_pronunciation"] == 100 / 3 and rows["wer_several_pronunciations"] == 100.0
    assert rows["wer_no_vowel_letter"] == 100.0 and rows["words_no_vowel_letter"] == 1.0
    assert rows["words_letters_15_up"] == 0.0 and "dropped_ends_letters_15_up" not in rows
    # 1-4 letters: "ab" (2 letters, A for A) and "nth" (3 letters, N for the closest reference EH N: 1 of 2)
    assert rows["phonemes_per_letter_letters_1_4"] == 2 / 5
    assert rows["reference_phonemes_per_letter_letters_1_4"] == 3 / 5
    assert rows["dropped_ends_letters_1_4"] == 50.0 and rows["repeats_letters_1_4"] == 0.0
    # PER against the closest reference: 1-4 letters 0 + 1 edits of 1 + 2 reference phonemes; "abcdefgh" 1 of 1
    assert rows["per_letters_1_4"] == 100 / 3 and "per_letters_5_7" not in rows
    assert rows["per_letters_8_10"] == 100.0 and rows["per_letters_11_up"] == 0.0
    assert rows["per_several_pronunciations"] == 100.0 and rows["per_no_vowel_letter"] == 50.0


def test_the_15_up_bucket_lies_within_11_up_and_reports_dropped_ends_and_repeats():
    words = ["internationalization", "abcdefghijkl", "abcdefghijklmno"]
    hypotheses = [("IH", "N", "T", "ER"), ("A", "B", "C", "A", "B", "C"), ("A", "B", "C")]
    references = [[("IH", "N", "T", "ER", "N", "AE", "SH", "AH", "N")], [("A", "B", "C")], [("A", "B", "C")]]
    rows = error_categories(words, hypotheses, references)
    assert rows["words_letters_11_up"] == 3.0 and rows["words_letters_15_up"] == 2.0
    assert rows["wer_letters_15_up"] == 50.0 and rows["wer_letters_11_up"] == 200 / 3
    assert rows["dropped_ends_letters_15_up"] == 50.0 and rows["repeats_letters_15_up"] == 0.0
    assert rows["repeats_letters_11_up"] == 100 / 3 and rows["dropped_ends_letters_11_up"] == 100 / 3
    assert rows["phonemes_per_letter_letters_15_up"] == 7 / 35
    assert rows["reference_phonemes_per_letter_letters_15_up"] == 12 / 35


def test_write_errors_measures_the_distance_to_the_closest_reference(tmp_path):
    count = write_errors(tmp_path / "e.tsv", ["ab"], [("A", "B", "C")], [[("X",), ("A", "B")]])
    assert count == 1
    assert (tmp_path / "e.tsv").read_text().splitlines()[1] == "ab\tX | A B\tA B C\t1"
