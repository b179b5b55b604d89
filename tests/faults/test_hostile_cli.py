"""Hostile input through the command line: every case ends in one line and the documented exit code (2 bad input,
3 diverged, 1 internal error), never a traceback, a hang or a silent exit 0."""

import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from cli_helpers import assert_error, run_cli
from safetensors.torch import load_file, save_file

from seqlab.recipes import g2p

ENTRIES = "hello  HH AH L OW\ncat  K AE T\ndog  D AO G\nbat  B AE T\nhat  HH AE T\nlow  L OW\ngo  G OW\ntoad  T OW D\n"
TINY = ["model.hidden_size=8", "model.embedding_size=4", "model.encoder_layers=1", "model.dropout=0"]
TINY += ["train.batch_size=4", "train.max_steps=2", "decode.num_beams=2"]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("data")
    paths = {"train": ENTRIES, "valid": "cat  K AE T\nlow  L OW\n", "test": "dog  D AO G\n"}
    for name, text in paths.items():
        (folder / f"{name}.dict").write_text(text)
    return {name: folder / f"{name}.dict" for name in paths}


def data_args(files, **replaced) -> list[str]:
    return [f"data.{name}_path={replaced.get(name, path)}" for name, path in files.items()]


@pytest.fixture(scope="module")
def checkpoint(files, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "g2p"
    result = run_cli("train", "g2p", "--out", out, "--no-progress", "--set", *data_args(files), *TINY)
    assert result.code == 0, result.err
    return out


def train(tmp_path, files, *settings, **replaced):
    return run_cli(
        "train",
        "g2p",
        "--out",
        tmp_path / "out",
        "--no-progress",
        "--set",
        *data_args(files, **replaced),
        *TINY,
        *settings,
    )


def test_an_unexpected_exception_is_one_line_exit_1_and_a_traceback_only_on_request(monkeypatch, checkpoint):
    def broken(*args, **kwargs):
        raise RuntimeError("kernel exploded\nsecond line")

    monkeypatch.setattr(g2p.G2PSystem, "predict", broken)
    result = run_cli("predict", checkpoint, "cat")
    assert result.code == 1 and result.out == ""
    assert result.err == (
        "seqlab: internal error: RuntimeError: kernel exploded second line "
        "(run with --debug or SEQLAB_DEBUG=1 for the traceback)\n"
    )
    for argv, env in ((["--debug", "predict", checkpoint, "cat"], "0"), (["predict", checkpoint, "cat"], "1")):
        monkeypatch.setenv("SEQLAB_DEBUG", env)
        result = run_cli(*argv)
        assert result.code == 1
        assert result.err.startswith("Traceback (most recent call last):")
        assert result.err.endswith("seqlab: internal error: RuntimeError: kernel exploded second line\n")


def test_a_diverging_run_stops_with_one_line_and_exit_3(tmp_path, files, monkeypatch):
    # train.lr is bounded (<= 10), too small to blow up this model in two steps: every loss is made NaN instead
    cross_entropy = torch.nn.functional.cross_entropy
    monkeypatch.setattr(torch.nn.functional, "cross_entropy", lambda *a, **k: cross_entropy(*a, **k) * math.nan)
    result = train(tmp_path, files, "train.max_nonfinite_steps=2")
    assert result.code == 3 and result.out == ""
    *_, last = result.err.splitlines()
    assert last.startswith("seqlab: error: training diverged: ")
    weights = tmp_path / "out" / "model.safetensors"
    assert not weights.exists() or all(torch.isfinite(t).all() for t in load_file(weights).values())


def test_unknown_phonemes_in_the_test_file_and_in_evaluate_data_are_errors_as_in_the_valid_file(
    tmp_path, files, checkpoint
):
    bad = tmp_path / "bad.dict"
    bad.write_text("dog  D AO G ZH\n")
    message = (
        f"{bad}: word 'dog': unknown symbol 'ZH' (not in the vocabulary of 14 symbols); "
        "every phoneme must occur in the training data"
    )
    for split in ("valid", "test"):
        assert_error(train(tmp_path, files, **{split: bad}), message)
    assert_error(run_cli("evaluate", checkpoint, "--data", bad), message)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (
            "model.decoder_layers=100000000000000000000",
            "--set: [model] decoder_layers (100000000000000000000) must be an integer >= 1 and <= 1024",
        ),
        ("train.lr=1e30", "--set: [train] lr (1e+30) must be a finite number > 0 and <= 10.0"),
        ("train.lr=0.5", "--set train.lr: given twice ('0.1' and '0.5'); give it once"),
    ],
)
def test_absurd_or_repeated_settings_are_one_line(tmp_path, files, setting, message):
    extra = ["train.lr=0.1"] if "given twice" in message else []
    assert_error(train(tmp_path, files, *extra, setting), message)


def test_an_impossible_width_is_refused_in_one_line_before_allocation_and_leaves_no_run(tmp_path, files):
    out, width = tmp_path / "out", "model.hidden_size=65536"  # ~190e9 parameters: 700 GB of weights
    result = run_cli("train", "g2p", "--out", out, "--no-progress", "--set", *data_args(files), width)
    assert result.code == 2 and result.out == ""
    assert re.fullmatch(
        r"seqlab: error: rnn_seq2seq: [0-9,]+ parameters, more than the limit of 1,000,000,000 "
        r"\(3\.7 GiB of float32 weights\); reduce hidden_size \(65536\)\n",
        result.err,
    )
    assert not out.exists()


def test_a_fifo_is_refused_as_training_data_evaluate_data_and_config(tmp_path, files, checkpoint):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    expected = "is not a regular file (a FIFO, socket or device)"
    assert expected in train(tmp_path, files, train=fifo).err
    assert expected in run_cli("evaluate", checkpoint, "--data", fifo).err
    assert_error(run_cli("train", "g2p", "--config", fifo), f"{fifo}: {expected}, not a config file")


def test_long_words_and_huge_options_at_predict_time_are_one_line(checkpoint):
    word = "ab" * 10_000
    assert_error(
        run_cli("predict", checkpoint, word),
        "inputs: word of 20000 letters, longer than data.max_word_length (64)",
    )
    assert_error(
        run_cli("predict", checkpoint, "cat", "--num-beams", 10**30), f"--num-beams ({10**30}) must be <= 1,000"
    )


def corrupted(checkpoint, tmp_path, change) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(checkpoint, copy)
    change(copy)
    return copy


def _weights(kind):
    def change(directory):
        tensors = load_file(directory / "model.safetensors")
        name = sorted(tensors)[0]
        tensors[name] = tensors[name].round().long() if kind == "int" else tensors[name].fill_(float(kind))
        save_file(tensors, directory / "model.safetensors")

    return change


def _vocabulary(directory):
    path = directory / "target_vocab.json"
    payload = json.loads(path.read_text())
    symbols = payload["symbols"] if isinstance(payload, dict) else payload
    symbols.append("ZZ")
    path.write_text(json.dumps(payload))


def _recipe(directory):
    path = directory / "recipe.json"
    payload = json.loads(path.read_text())
    payload["config"]["model"]["hidden_size"] = 12
    path.write_text(json.dumps(payload))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_weights("nan"), "model.safetensors: {name} holds NaN or infinite values (a diverged model?)"),
        (_weights("inf"), "model.safetensors: {name} holds NaN or infinite values (a diverged model?)"),
        (_weights("int"), "model.safetensors: {name} holds I64 values, expected floating point"),
        (
            _vocabulary,
            "target_vocab.json: {size} symbols, but the model's weights have {weights}; not this model's file",
        ),
        (_recipe, ": recipe.json and config.json disagree on hidden_size (12 vs 8)"),
    ],
    ids=["nan", "inf", "int", "vocabulary", "recipe"],
)
def test_a_checkpoint_that_contradicts_itself_is_refused_in_one_line(tmp_path, checkpoint, change, message):
    copy = corrupted(checkpoint, tmp_path, change)
    name = sorted(load_file(checkpoint / "model.safetensors"))[0]
    weights = json.loads((checkpoint / "config.json").read_text())["config"]["tgt_vocab_size"]
    for argv in (["predict", copy, "cat"], ["evaluate", copy, "--data", copy / ".." / "missing.dict"]):
        result = run_cli(*argv)
        assert result.code == 2 and result.out == "" and result.err.count("\n") == 1, result.err
        expected = message.format(name=name, size=weights + 1, weights=weights)
        assert result.err.startswith(f"seqlab: error: {copy}") and result.err.rstrip("\n").endswith(expected)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        # Only a recipe with scheduled sampling (g2p) has the teacher_forcing keys: elsewhere they do not exist.
        ("train.teacher_forcing=0.5", "--set train.teacher_forcing: unknown key in [train]; valid keys are lr,"),
        ("train.teacher_forcing_schedule=exponential", "--set train.teacher_forcing_schedule: unknown key in [train]"),
        ("train.body_lr_scale=0.1", "train.body_lr_scale: no pretrained body to scale; set model.init_from"),
    ],
)
def test_a_setting_the_run_would_ignore_is_refused(tmp_path, setting, message):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("abcab cabca bcabc\n" * 40)
    out = tmp_path / "run"
    tiny = ["model.d_model=8", "model.num_heads=2", "model.num_layers=1", "model.context_length=8"]
    settings = [setting, "train.teacher_forcing_k=0.99"] if "schedule" in setting else [setting]
    result = run_cli("train", "lm", "--out", out, "--set", f"data.train_path={corpus}", *tiny, *settings)
    assert result.code == 2 and result.err.startswith(f"seqlab: error: {message}"), result.err
    assert len(result.err.splitlines()) == 1
    assert not out.exists()
