"""The vowels recipe: stratified validation split, training end to end through the CLI, evaluate, predict.

The end-to-end tests train once per module on a toy problem written here as ``.ts`` files: 3 classes whose two
channels have class-dependent means, 8 training and 4 test series per class, 3 to 9 steps each. A small
bidirectional GRU with mean pooling must separate them; the checkpoint is then checked against the files and
against a forward pass written out by hand, one unpadded series at a time.
"""

import json
import re
import shutil
import sys
from collections import Counter
from dataclasses import fields
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import torch
from cli_helpers import Result, assert_error, run_cli

from seqlab.config import apply_overrides
from seqlab.data.timeseries import AEON_HINT, read_ts_file
from seqlab.models.classifier import Seq2VecClassifier
from seqlab.recipes import load_system, vowels

CHECKPOINT_FILES = {"config.json", "model.safetensors", "labels.json", "recipe.json", "results.json", "metrics.jsonl"}
CHECKPOINT_FILES |= {"training_state.safetensors", ".seqlab.lock", ".seqlab-output"}
CLASSES = {"a": (-2.0, 1.0), "b": (0.0, -1.5), "c": (2.0, 1.0)}  # label: mean of channel 0 and channel 1
TRAIN_PER_CLASS, TEST_PER_CLASS = 8, 4
HIDDEN = 8
TINY = [
    f"model.hidden_size={HIDDEN}",
    "model.cell=gru",
    "model.bidirectional=true",
    "model.pooling=mean",
    "model.dropout=0",
    "train.max_epochs=30",
    "train.batch_size=8",
    "train.lr=0.02",
    "train.patience=none",
    "train.time_budget=none",
]


def table_rows(text: str) -> dict[str, str]:
    """``{first column: rest}`` of a table printed by the CLI (header and rule skipped)."""
    lines = text.strip().splitlines()
    assert set(lines[1]) <= {"-", " "}, lines[1]
    return dict(line.split(None, 1) for line in lines[2:])


def write_ts(path: Path, series: list[np.ndarray], labels: list[str]) -> Path:
    """An unequal-length multivariate .ts file of (T_i, C) series; values written with 4 decimals."""
    channels = series[0].shape[1]
    lines = [
        "@problemName toy",
        "@timeStamps false",
        "@missing false",
        f"@univariate {'true' if channels == 1 else 'false'}",
        f"@dimensions {channels}",
        "@equalLength false",
        f"@classLabel true {' '.join(sorted(set(labels)))}",
        "@data",
    ]
    for s, label in zip(series, labels, strict=True):
        lines.append(":".join([*(",".join(f"{v:.4f}" for v in s[:, c]) for c in range(channels)), label]))
    path.write_text("\n".join(lines) + "\n")
    return path


def toy_series(rng: np.random.Generator, per_class: int, *, channels: int = 2) -> tuple[list[np.ndarray], list[str]]:
    """Series of each class around its channel means (noise 0.3), 3 to 9 steps, classes interleaved."""
    series, labels = [], []
    for _ in range(per_class):
        for label, means in CLASSES.items():
            centre = np.resize(np.array(means), channels)
            series.append(centre + 0.3 * rng.normal(size=(int(rng.integers(3, 10)), channels)))
            labels.append(label)
    return series, labels


class Toy(NamedTuple):
    train: Path
    test: Path


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Toy:
    folder = tmp_path_factory.mktemp("toy")
    rng = np.random.default_rng(0)
    train = write_ts(folder / "train.ts", *toy_series(rng, TRAIN_PER_CLASS))
    test = write_ts(folder / "test.ts", *toy_series(rng, TEST_PER_CLASS))
    return Toy(train, test)


def data_args(train: Path, test: Path) -> list[str]:
    return [f"data.train_path={train}", f"data.test_path={test}"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, toy) -> tuple[Path, Result]:
    """Train once: (checkpoint directory, what `seqlab train vowels` printed)."""
    out = tmp_path_factory.mktemp("runs") / "vowels"
    result = run_cli("train", "vowels", "--out", out, "--no-progress", "--set", *data_args(*toy), *TINY)
    assert result.code == 0, result.err
    return out, result


@pytest.fixture(scope="module")
def checkpoint(trained) -> Path:
    return trained[0]


def hand_predictions(checkpoint: Path, path: Path) -> list[str]:
    """Labels predicted one series at a time (no padding), standardised from labels.json by hand."""
    model = Seq2VecClassifier.from_pretrained(checkpoint)
    stored = json.loads((checkpoint / "labels.json").read_text())
    mean, std = np.array(stored["mean"]), np.array(stored["std"])
    labels = []
    with torch.no_grad():
        for s in read_ts_file(path).series:
            x = torch.tensor((s - mean) / std, dtype=torch.float32).unsqueeze(0)  # (1, T, C)
            labels.append(stored["labels"][int(model(x).logits.argmax(-1))])
    return labels


# --- stratified_split -----------------------------------------------------------------------------------


def split_labels() -> list[str]:
    """Classes of 10, 7, 3, 2 and 1 series, interleaved so no class sits in one block."""
    counts = {"a": 10, "b": 7, "c": 3, "d": 2, "e": 1}
    labels = []
    for i in range(10):
        labels += [label for label, n in counts.items() if i < n]
    return labels


def test_stratified_split_holds_out_a_rounded_share_of_each_class():
    labels = split_labels()
    train, valid = vowels.stratified_split(labels, fraction=0.2, seed=0)
    assert train == sorted(train) and valid == sorted(valid)
    assert not set(train) & set(valid)
    assert sorted(train + valid) == list(range(len(labels)))
    # round(0.2 * n): 10 -> 2, 7 -> 1, 3 -> 1; at least one (2 -> 1); none from a class of one
    assert Counter(labels[i] for i in valid) == {"a": 2, "b": 1, "c": 1, "d": 1}


def test_stratified_split_is_deterministic_by_seed():
    labels = split_labels()
    first = vowels.stratified_split(labels, fraction=0.2, seed=3)
    assert vowels.stratified_split(labels, fraction=0.2, seed=3) == first
    assert any(vowels.stratified_split(labels, fraction=0.2, seed=s) != first for s in range(4, 8))


def test_stratified_split_of_japanese_vowels_shape():
    labels = [str(k) for k in range(1, 10) for _ in range(30)]
    train, valid = vowels.stratified_split(labels, fraction=0.15, seed=0)
    assert (len(train), len(valid)) == (234, 36)  # round(4.5) = 4 (half to even) of each class's 30
    assert Counter(labels[i] for i in valid) == {str(k): 4 for k in range(1, 10)}


# --- train -----------------------------------------------------------------------------------------------


def test_train_prints_results_and_an_example_and_writes_the_checkpoint(trained, toy):
    out, result = trained
    assert {p.name for p in out.iterdir()} == CHECKPOINT_FILES
    saved = json.loads((out / "results.json").read_text())
    assert saved["stopped_by"] == "max_epochs"
    assert (saved["epochs"], saved["steps"]) == (30, 30 * 3)  # 21 training series in batches of 8
    assert saved["test_series"] == 3 * TEST_PER_CLASS
    assert saved["accuracy"] >= 90.0

    results_table, examples_table, footer = result.out.strip().split("\n\n")
    rows = table_rows(results_table)
    assert list(rows) == ["accuracy", "test_series", "valid_error", "steps", "epochs", "train_seconds", "total_seconds"]
    for key in ("accuracy", "valid_error", "train_seconds", "total_seconds"):
        assert float(rows[key]) == pytest.approx(saved[key], abs=5e-4)
    assert rows["test_series"] == str(3 * TEST_PER_CLASS)
    assert 0 < saved["train_seconds"] <= saved["total_seconds"]

    header, rule, *examples = examples_table.splitlines()
    assert header.split() == ["input", "reference", "predicted"]
    assert set(rule) <= {"-", " "}
    first_label = read_ts_file(toy.test).labels[0]
    assert [re.split(r"\s{2,}", line) for line in examples] == [
        ["test series 1", first_label, hand_predictions(out, toy.test)[0]]
    ]
    assert footer == f"checkpoint: {out}"


def test_train_logs_the_data_and_model_it_built(trained):
    out, result = trained
    parameters = 2 * (3 * HIDDEN * (2 + HIDDEN) + 2 * 3 * HIDDEN) + (2 * HIDDEN + 1) * 3  # GRU both ways + W_y, b_y
    assert result.err.splitlines()[0] == (
        f"checkpoint: {out}; data: 21 train / 3 valid / 12 test series, 2 channels, 3 classes; "
        f"model: {parameters:,} parameters, fused path"
    )


def test_train_saves_the_config_labels_and_training_statistics(checkpoint, toy):
    recipe = json.loads((checkpoint / "recipe.json").read_text())
    assert recipe["recipe"] == "vowels"
    assert recipe["config"]["data"] == {
        "train_path": str(toy.train),
        "test_path": str(toy.test),
        "valid_fraction": 0.15,
        "split_seed": 0,
        "max_line_chars": 1_000_000,
        "max_series_length": 10_000,
    }
    assert recipe["config"]["model"]["hidden_size"] == HIDDEN
    assert recipe["config"]["train"]["max_epochs"] == 30
    model = json.loads((checkpoint / "config.json").read_text())["config"]
    assert (model["input_size"], model["num_classes"], model["hidden_size"]) == (2, 3, HIDDEN)
    assert (model["cell"], model["bidirectional"], model["pooling"]) == ("gru", True, "mean")

    # Standardisation uses the frames of the training rows only (not the held-out validation series).
    data = read_ts_file(toy.train)
    train_rows, valid_rows = vowels.stratified_split(data.labels, fraction=0.15, seed=0)
    assert len(valid_rows) == 3
    frames = np.concatenate([data.series[i] for i in train_rows]).astype(np.float64)  # (sum T_i, C)
    stored = json.loads((checkpoint / "labels.json").read_text())
    assert stored["labels"] == ["a", "b", "c"]
    np.testing.assert_allclose(stored["mean"], frames.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(stored["std"], frames.std(axis=0), rtol=1e-6)


def test_the_checkpoint_loads_as_a_system_that_predicts_as_the_hand_loop(checkpoint, toy):
    system = vowels.VowelsSystem.load(checkpoint)
    assert system.labels == ["a", "b", "c"]
    assert system.config.model.hidden_size == HIDDEN
    assert system.config.data.train_path == str(toy.train)
    data = read_ts_file(toy.test)
    series, targets = system.standardise(data, source=str(toy.test))
    assert targets == [["a", "b", "c"].index(label) for label in data.labels]
    for mine, raw in zip(series, data.series, strict=True):
        np.testing.assert_allclose(mine, (raw - system.mean) / system.std, rtol=1e-6)
    predicted = [system.labels[i] for i in system.classify(series)]
    assert predicted == hand_predictions(checkpoint, toy.test)


# --- evaluate and predict --------------------------------------------------------------------------------


def test_evaluate_json_reproduces_the_training_accuracy(checkpoint, toy):
    result = run_cli("evaluate", checkpoint, "--data", toy.test, "--json")
    assert result.code == 0, result.err
    saved = json.loads((checkpoint / "results.json").read_text())
    assert json.loads(result.out) == {"accuracy": saved["accuracy"], "series": saved["test_series"]}


def test_evaluate_table_shows_the_json_values_and_the_hand_accuracy(checkpoint, toy):
    metrics = json.loads(run_cli("evaluate", checkpoint, "--data", toy.train, "--json").out)
    result = run_cli("evaluate", checkpoint, "--data", toy.train)
    assert result.code == 0, result.err
    rows = table_rows(result.out)
    assert rows["series"] == str(3 * TRAIN_PER_CLASS) and metrics["series"] == 3 * TRAIN_PER_CLASS
    assert float(rows["accuracy"]) == pytest.approx(metrics["accuracy"], abs=5e-4)
    predicted, labels = hand_predictions(checkpoint, toy.train), read_ts_file(toy.train).labels
    hits = sum(p == t for p, t in zip(predicted, labels, strict=True))
    assert metrics["accuracy"] == pytest.approx(100.0 * hits / len(labels), abs=1e-12)


def test_predict_prints_one_label_per_series_agreeing_with_evaluate(checkpoint, toy):
    result = run_cli("predict", checkpoint, toy.test, toy.train)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    test, train = read_ts_file(toy.test), read_ts_file(toy.train)
    expected_heads = [f"{toy.test}:{i}" for i in range(1, 13)] + [f"{toy.train}:{i}" for i in range(1, 25)]
    assert [line.split("  ")[0] for line in lines] == expected_heads
    predicted = [line.split("  ")[1] for line in lines]
    assert predicted == hand_predictions(checkpoint, toy.test) + hand_predictions(checkpoint, toy.train)
    accuracy = 100.0 * sum(p == t for p, t in zip(predicted[:12], test.labels, strict=True)) / 12
    assert accuracy == json.loads(run_cli("evaluate", checkpoint, "--data", toy.test, "--json").out)["accuracy"]
    assert set(predicted[12:]) <= set(train.labels)


@pytest.mark.parametrize("flags", [["--num-beams", "2"], ["--nbest", "1"], ["--num-beams", "2", "--nbest", "2"]])
def test_predict_refuses_options_the_recipe_does_not_take(checkpoint, toy, flags):
    """VowelsSystem takes no OPTIONS: a decoding flag is an error, not silently ignored."""
    refused = " ".join(flag for flag in flags if flag.startswith("--"))
    assert_error(run_cli("predict", checkpoint, toy.test, *flags), f"{refused}: the vowels recipe takes no such option")


def test_evaluate_refuses_an_errors_file(checkpoint, toy, tmp_path):
    errors = tmp_path / "errors.tsv"
    result = run_cli("evaluate", checkpoint, "--data", toy.test, "--errors", errors)
    assert_error(result, "--errors: the vowels recipe takes no such option")
    assert not errors.exists()


def test_predict_returns_one_typed_prediction_per_series(checkpoint, toy):
    system = load_system(checkpoint)
    assert isinstance(system, vowels.VowelsSystem)
    predictions = system.predict([str(toy.test)])
    assert [(p.source, p.number) for p in predictions] == [(str(toy.test), i) for i in range(1, 13)]
    assert [p.label for p in predictions] == hand_predictions(checkpoint, toy.test)
    assert predictions[0].lines() == [f"{toy.test}:1  {predictions[0].label}"]


def test_the_validation_loss_is_the_mean_over_series_of_batches_of_any_size(toy, monkeypatch):
    """VowelsTraining alone: validate on batches of 2 equals the cross-entropy of each unpadded series, averaged."""
    config = apply_overrides(
        vowels.Config(), {**dict(a.split("=") for a in TINY), **dict(a.split("=") for a in data_args(*toy))}
    )
    torch.manual_seed(0)
    training = vowels.VowelsTraining.build(config)
    model = training.system.model.eval()
    with torch.no_grad():
        nats = [
            torch.nn.functional.cross_entropy(model(torch.tensor(s).unsqueeze(0)).logits, torch.tensor([t])).item()
            for s, t in zip(*training.valid, strict=True)
        ]
    assert len(nats) == 3
    monkeypatch.setattr(vowels, "EVAL_BATCH_SIZE", 2)
    assert training.validate(model)["valid_loss"] == pytest.approx(sum(nats) / 3, rel=1e-5)


def unlabelled_copy(path: Path, out: Path) -> Path:
    """The series of ``path`` in a ``@classLabel false`` file (label fields dropped)."""
    body = path.read_text().split("@data\n")[1].splitlines()
    out.write_text(
        "@problemName toy\n@timeStamps false\n@missing false\n@univariate false\n@dimensions 2\n"
        "@equalLength false\n@classLabel false\n@data\n" + "".join(line.rsplit(":", 1)[0] + "\n" for line in body)
    )
    return out


def test_predict_reads_a_file_without_labels(checkpoint, toy, tmp_path):
    path = unlabelled_copy(toy.test, tmp_path / "unlabelled.ts")
    result = run_cli("predict", checkpoint, path)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert [line.split("  ")[0] for line in lines] == [f"{path}:{i}" for i in range(1, 13)]
    assert [line.split("  ")[1] for line in lines] == hand_predictions(checkpoint, toy.test)


# --- bad input: one line, exit 2, nothing written ---------------------------------------------------------


def train_into(out: Path, *assignments: str) -> Result:
    return run_cli("train", "vowels", "--out", out, "--no-progress", "--set", *TINY, *assignments)


@pytest.mark.parametrize("given", ["train_path", "test_path"])
def test_one_data_path_without_the_other_is_one_line(tmp_path, toy, given):
    out = tmp_path / "out"
    result = train_into(out, f"data.{given}={toy.train}")
    assert_error(result, "give both data.train_path and data.test_path (or neither, for aeon's Japanese Vowels)")
    assert not out.exists()


def test_a_test_class_absent_from_training_is_one_line(tmp_path, toy):
    series, labels = toy_series(np.random.default_rng(1), 2)
    test = write_ts(tmp_path / "test.ts", series, [("q" if label == "b" else label) for label in labels])
    out = tmp_path / "out"
    assert_error(train_into(out, *data_args(toy.train, test)), f"{test}: classes the model never saw: q")
    assert not out.exists()


def test_evaluate_on_a_class_the_checkpoint_never_saw_is_one_line(tmp_path, checkpoint):
    series, labels = toy_series(np.random.default_rng(1), 2)
    test = write_ts(tmp_path / "test.ts", series, [{"a": "z", "b": "y"}.get(label, label) for label in labels])
    assert_error(run_cli("evaluate", checkpoint, "--data", test), f"{test}: classes the model never saw: y, z")


def test_a_test_file_with_other_channels_is_one_line(tmp_path, toy, checkpoint):
    test = write_ts(tmp_path / "test3.ts", *toy_series(np.random.default_rng(1), 2, channels=3))
    out = tmp_path / "out"
    message = f"{test}: series 1 has 3 channels, the model reads 2"
    assert_error(train_into(out, *data_args(toy.train, test)), message)
    assert not out.exists()
    assert_error(run_cli("evaluate", checkpoint, "--data", test), message)
    assert_error(run_cli("predict", checkpoint, toy.test, test), message)


def test_too_few_training_series_to_validate_is_one_line(tmp_path, toy):
    train = write_ts(tmp_path / "one_each.ts", *toy_series(np.random.default_rng(1), 1))
    out = tmp_path / "out"
    assert_error(train_into(out, *data_args(train, toy.test)), f"{train}: too few series to hold out a validation set")
    assert not out.exists()


@pytest.mark.parametrize("which", ["train", "test"])
def test_a_missing_or_garbage_ts_file_is_one_line(tmp_path, toy, which):
    missing, garbage = tmp_path / "missing.ts", tmp_path / "garbage.ts"
    garbage.write_text(toy.test.read_text().replace("@data\n", "@data\n1,2,x:3,4,5:a\n"))
    for path, message in [
        (missing, f"{missing}: no such file"),
        (garbage, f"{garbage}: not a valid .ts classification file (could not convert string to float: 'x')"),
    ]:
        out = tmp_path / "out"
        paths = (path, toy.test) if which == "train" else (toy.train, path)
        assert_error(train_into(out, *data_args(*paths)), message)
        assert not out.exists()


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("model.pooling=foo", "--set model.pooling: 'foo' is not one of last, mean, max, attention"),
        ("model.cell=transformer", "--set model.cell: 'transformer' is not one of rnn, gru, gru_textbook, lstm"),
        ("model.hidden_size=0", "--set: [model] hidden_size (0) must be an integer >= 1 and <= 65536"),
        ("model.dropout=1", "--set: [model] dropout (1.0) must be in [0, 1)"),
        ("data.valid_fraction=0.5", "--set: [data] valid_fraction (0.5) must be a finite number > 0.0 and < 0.5"),
        (
            "data.shuffle=true",
            "--set data.shuffle: unknown key in [data]; valid keys are "
            "train_path, test_path, valid_fraction, split_seed, max_line_chars, max_series_length",
        ),
    ],
)
def test_a_bad_set_is_one_line_before_anything_is_created(tmp_path, toy, assignment, message):
    out = tmp_path / "out"
    tiny = [setting for setting in TINY if setting.split("=")[0] != assignment.split("=")[0]]  # each key once
    args = ["train", "vowels", "--out", out, "--no-progress", "--set", *tiny, *data_args(*toy), assignment]
    assert_error(run_cli(*args), message)
    assert not out.exists()


def test_without_aeon_train_and_evaluate_name_the_extra_to_install(tmp_path, toy, checkpoint, monkeypatch):
    monkeypatch.setitem(sys.modules, "aeon.datasets", None)  # makes `import aeon.datasets` raise ImportError
    out = tmp_path / "out"
    assert_error(train_into(out), AEON_HINT)
    assert_error(train_into(out, *data_args(*toy)), AEON_HINT)
    assert not out.exists()
    assert_error(run_cli("evaluate", checkpoint, "--data", toy.test), AEON_HINT)
    assert_error(run_cli("predict", checkpoint, toy.test), AEON_HINT)


def cmudict_file(tmp_path: Path) -> Path:
    path = tmp_path / "words.dict"
    path.write_text(";;; a CMUdict file, as the g2p recipe reads\nHELLO  HH AH0 L OW1\nWORLD  W ER1 L D\n")
    return path


def test_a_dictionary_file_given_to_a_vowels_checkpoint_is_one_line(tmp_path, checkpoint):
    path = cmudict_file(tmp_path)
    for result in (run_cli("evaluate", checkpoint, "--data", path), run_cli("predict", checkpoint, path)):
        assert result.code == 2 and result.out == ""
        assert result.err.startswith(f"seqlab: error: {path}: ")
        assert result.err.count("\n") == 1


def test_a_dictionary_file_is_refused_as_not_ts(tmp_path, checkpoint):
    path = cmudict_file(tmp_path)
    result = run_cli("evaluate", checkpoint, "--data", path)
    assert result.err == f"seqlab: error: {path}: expected a .ts file (the UCR/UEA archive format)\n"


def test_evaluate_on_a_file_without_labels_is_one_line(tmp_path, checkpoint, toy):
    path = unlabelled_copy(toy.test, tmp_path / "unlabelled.ts")
    result = run_cli("evaluate", checkpoint, "--data", path)
    assert result.code == 2 and result.out == ""
    assert result.err.startswith(f"seqlab: error: {path}: ")
    assert result.err.count("\n") == 1


def test_training_with_an_unlabelled_test_file_is_one_line_before_anything_is_created(tmp_path, toy):
    path = unlabelled_copy(toy.test, tmp_path / "unlabelled.ts")
    out = tmp_path / "out"
    result = train_into(out, *data_args(toy.train, path))
    assert result.code == 2 and result.out == ""
    assert result.err.startswith(f"seqlab: error: {path}: ")
    assert result.err.count("\n") == 1
    assert not out.exists()


# --- checkpoints ----------------------------------------------------------------------------------------


def damaged(tmp_path: Path, checkpoint: Path) -> Path:
    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint, ckpt)
    return ckpt


@pytest.mark.parametrize("name", ["labels.json", "model.safetensors", "config.json"])
def test_a_checkpoint_missing_a_file_is_one_line(tmp_path, checkpoint, toy, name):
    ckpt = damaged(tmp_path, checkpoint)
    (ckpt / name).unlink()
    message = {
        "labels.json": f"{ckpt / 'labels.json'}: missing",
        "model.safetensors": f"{ckpt / 'model.safetensors'}: missing",
        "config.json": f"{ckpt / 'config.json'}: missing; is {ckpt} a seqlab checkpoint?",
    }[name]
    assert_error(run_cli("evaluate", ckpt, "--data", toy.test), message)
    assert_error(run_cli("predict", ckpt, toy.test), message)


def test_a_checkpoint_with_broken_labels_is_one_line(tmp_path, checkpoint, toy):
    ckpt = damaged(tmp_path, checkpoint)
    (ckpt / "labels.json").write_text("{ nope")
    result = run_cli("evaluate", ckpt, "--data", toy.test)
    assert result.code == 2 and result.out == ""
    assert result.err.startswith(f"seqlab: error: {ckpt / 'labels.json'}:1: not valid JSON (Expecting")
    assert result.err.count("\n") == 1


# --- recipes --------------------------------------------------------------------------------------------


def test_recipes_lists_vowels():
    result = run_cli("recipes")
    assert result.code == 0
    assert table_rows(result.out)["vowels"] == vowels.DESCRIPTION


def test_recipes_vowels_shows_every_key_with_its_default():
    result = run_cli("recipes", "vowels")
    assert result.code == 0
    title, table = result.out.split("\n\n")
    assert title == f"vowels: {vowels.DESCRIPTION}"
    rows = table_rows(table)
    assert rows["data.train_path"] == rows["data.test_path"] == "None"
    defaults = vowels.Config()
    assert rows["model.pooling"] == repr(defaults.model.pooling)
    assert rows["train.lr"] == repr(defaults.train.lr)
    assert len(rows) == sum(len(fields(section)) for section in (defaults.data, defaults.model, defaults.train))
