"""Sequence-level knowledge distillation data (``seqlab.recipes.g2p.distillation``, ``seqlab distill``): the
training file holds the teacher's beam outputs of the training split's words and nothing else, the held-out
files are the split's own references, and a student run reads them back as the same split. On the 0.1.0 fixture
run (an LSTM trained on ``train.dict``) and that dictionary."""

import json
import shutil
from pathlib import Path

from cli_helpers import assert_error, run_cli

from seqlab.data.cmudict import Pronunciation, read_cmudict
from seqlab.data.pronunciations import G2PDataConfig, load_splits
from seqlab.recipes.g2p import G2PSystem
from seqlab.recipes.g2p.distillation import cmudict_lines, distillation_files, teacher_pronunciations
from seqlab.recipes.system import SystemOptions

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
RNN, TRANSFORMER, DICTIONARY = FIXTURES / "g2p_v0_1", FIXTURES / "g2p_transformer_v0_1", FIXTURES / "train.dict"
DATA = G2PDataConfig(train_path=str(DICTIONARY), valid_path=None, test_path=None, valid_fraction=0.2, test_fraction=0.2)


def _words(entries):
    return {entry.word for entry in entries}


def test_teacher_pronunciations_are_the_beams_best_of_each_distinct_word_in_order():
    teacher = G2PSystem.load(RNN, SystemOptions(num_beams=3))
    words = ["cat", "dog", "cat", "pin"]
    best = teacher_pronunciations(teacher, words, num_beams=3)
    assert [p.word for p in best] == ["cat", "dog", "pin"]
    assert [p.phonemes for p in best] == [
        prediction.nbest[0][0] for prediction in teacher.predict(["cat", "dog", "pin"])
    ]


def test_cmudict_lines_read_back_as_the_same_entries_with_variants_numbered():
    entries = [
        Pronunciation("read", ("R", "IY", "D")),
        Pronunciation("cat", ("K", "AE", "T")),
        Pronunciation("read", ("R", "EH", "D")),
        Pronunciation("read", ("R", "IY", "D")),
    ]
    text = cmudict_lines(entries)
    assert text == "read  R IY D\nread(2)  R EH D\ncat  K AE T\n"


def test_the_files_hold_the_teachers_training_words_and_the_real_held_out_references(tmp_path):
    teacher = G2PSystem.load(RNN, SystemOptions(ensemble=(TRANSFORMER,)))
    counts = distillation_files(teacher, DATA, tmp_path, num_beams=5)
    train, valid, test = load_splits(DATA)
    distilled = read_cmudict(tmp_path / "train.txt")
    # every training word once, with the ensemble's best, and no held-out word
    assert [p.word for p in distilled] == list(dict.fromkeys(p.word for p in train))
    assert distilled == teacher_pronunciations(teacher, [p.word for p in train], num_beams=5)
    assert not _words(distilled) & (_words(valid) | _words(test))
    assert read_cmudict(tmp_path / "valid.txt") == valid
    assert read_cmudict(tmp_path / "test.txt") == test
    assert counts == {"train.txt": len(distilled), "valid.txt": len(valid), "test.txt": len(test)}
    # a student given the three files trains on all of train.txt and is tested on the same references
    student = G2PDataConfig(**{f"{name}_path": str(tmp_path / f"{name}.txt") for name in ("train", "valid", "test")})
    assert load_splits(student) == (distilled, valid, test)


def test_union_trains_on_the_references_and_the_teachers_pronunciations(tmp_path):
    teacher = G2PSystem.load(RNN)
    distillation_files(teacher, DATA, tmp_path, num_beams=2, union=True)
    train, _, _ = load_splits(DATA)
    best = teacher_pronunciations(teacher, [p.word for p in train], num_beams=2)
    union = read_cmudict(tmp_path / "train.txt")
    assert set(union) == set(train) | set(best)
    assert len(union) == len(set(union))


def _teacher_run(tmp_path, name, fixture, dictionary=DICTIONARY):
    """A copy of a fixture run whose ``[data]`` section reads ``dictionary`` (split 60/20/20 by word)."""
    run = tmp_path / name
    shutil.copytree(fixture, run)
    recipe = json.loads((run / "recipe.json").read_text())
    recipe["config"]["data"].update(
        train_path=str(dictionary), valid_path=None, test_path=None, valid_fraction=0.2, test_fraction=0.2
    )
    (run / "recipe.json").write_text(json.dumps(recipe))
    return run


def test_distill_command_writes_the_files_and_says_how_to_train_on_them(tmp_path):
    rnn, transformer = _teacher_run(tmp_path, "rnn", RNN), _teacher_run(tmp_path, "tf", TRANSFORMER)
    out = tmp_path / "new" / "kd"
    result = run_cli("distill", rnn, "--ensemble", transformer, "--out", out, "--num-beams", "2")
    assert result.code == 0, result.err
    assert sorted(p.name for p in out.iterdir()) == ["test.txt", "train.txt", "valid.txt"]
    assert f"data.train_path={out / 'train.txt'} data.valid_path={out / 'valid.txt'}" in result.out
    teacher = G2PSystem.load(RNN, SystemOptions(ensemble=(TRANSFORMER,)))
    train, _, test = load_splits(DATA)
    assert read_cmudict(out / "train.txt") == teacher_pronunciations(teacher, [p.word for p in train], num_beams=2)
    assert read_cmudict(out / "test.txt") == test


def test_a_rescored_teacher_writes_its_re_ranked_best(tmp_path):
    rnn, transformer = _teacher_run(tmp_path, "rnn", RNN), _teacher_run(tmp_path, "tf", TRANSFORMER)
    out = tmp_path / "kd"
    argv = ("--rescore", transformer, "--rescore-weight", "1", "--num-beams", "3")
    result = run_cli("distill", rnn, *argv, "--out", out)
    assert result.code == 0, result.err
    teacher = G2PSystem.load(RNN, SystemOptions(rescore=(TRANSFORMER,), rescore_weight=1.0))
    train, _, _ = load_splits(DATA)
    words = [p.word for p in train]
    assert read_cmudict(out / "train.txt") == teacher_pronunciations(teacher, words, num_beams=3)
    alone = teacher_pronunciations(G2PSystem.load(RNN), words, num_beams=3)
    assert read_cmudict(out / "train.txt") != alone  # the weight-1 rescorer changes some words' best
    result = run_cli("distill", rnn, *argv[:2], "--rescore-weight", "1.5", "--out", tmp_path / "kd2")
    assert_error(result, "--rescore-weight (1.5) must be in [0, 1]")
    assert not (tmp_path / "kd2").exists()


def test_distill_refuses_an_ensemble_member_or_rescorer_of_another_split(tmp_path):
    rnn = _teacher_run(tmp_path, "rnn", RNN)
    other = _teacher_run(tmp_path, "other", TRANSFORMER)
    recipe = json.loads((other / "recipe.json").read_text())
    recipe["config"]["data"]["split_seed"] = 1
    (other / "recipe.json").write_text(json.dumps(recipe))
    for flag in ("--ensemble", "--rescore"):
        result = run_cli("distill", rnn, flag, other, "--out", tmp_path / "kd")
        assert_error(result, f"{flag} {other}: trained on other data or another split than {rnn}")
        assert not (tmp_path / "kd").exists()


def test_distill_refuses_a_bad_beam_width_and_a_run_of_another_recipe(tmp_path):
    assert_error(
        run_cli("distill", RNN, "--out", tmp_path / "kd", "--num-beams", "0"), "--num-beams must be at least 1, got 0"
    )
    lm = FIXTURES / "lm_gpt_9a192c4"
    assert_error(run_cli("distill", lm, "--out", tmp_path / "kd"), f"{lm}: a lm run; distill takes g2p runs")
    assert not (tmp_path / "kd").exists()


def test_distill_never_overwrites_a_file_and_names_a_word_the_teacher_cannot_read(tmp_path):
    rnn = _teacher_run(tmp_path, "rnn", RNN)
    out = tmp_path / "kd"
    out.mkdir()
    (out / "valid.txt").write_text("keep  K IY P\n")
    assert_error(
        run_cli("distill", rnn, "--out", out), f"--out {out}: valid.txt exists (distill never overwrites data)"
    )
    assert (out / "valid.txt").read_text() == "keep  K IY P\n"
    strange = tmp_path / "strange.dict"
    strange.write_text(DICTIONARY.read_text() + "".join(f"QU{c}Z  K W IH Z\n" for c in "abcdefghij"))
    data = G2PDataConfig(
        train_path=str(strange), valid_path=None, test_path=None, valid_fraction=0.2, test_fraction=0.2
    )
    word = next(p.word for p in load_splits(data)[0] if p.word.startswith("qu"))
    letters = G2PSystem.load(RNN).letters
    unseen = " ".join(repr(c) for c in sorted({c for c in word if c not in letters}))
    result = run_cli("distill", _teacher_run(tmp_path, "strange", RNN, strange), "--out", tmp_path / "kd2")
    assert_error(result, f"{strange}: word {word!r} has letters the model never saw: {unseen}")
    assert not (tmp_path / "kd2").exists()
