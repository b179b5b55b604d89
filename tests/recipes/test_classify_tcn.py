"""The classify recipe with model.arch=tcn: trains, logs its receptive field, saves, loads and predicts the same;
evaluate equals an independent computation; bad sizes are refused in one line."""

import json
import random

import pytest
import torch
from cli_helpers import assert_error, run_cli

from seqlab.data.vocab import Vocabulary
from seqlab.models import TCNClassifier, load_pretrained
from seqlab.recipes import classify

TINY = ["model.arch=tcn", "model.embedding_size=8", "model.hidden_size=8", "model.num_levels=2", "model.dropout=0.1"]
STEPS = ["train.max_steps=30", "train.lr=0.01", "train.batch_size=16"]
STEMS = {"russian": ("ov", "ev", "in"), "japanese": ("ko", "ta", "mi"), "swedish": ("son", "berg", "ström")}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = random.Random(0)
    lines = []
    for label, endings in STEMS.items():
        for _ in range(60):
            stem = "".join(rng.choice("abdeiklmnoprstu") for _ in range(rng.randint(2, 5))).capitalize()
            lines.append(f"{stem}{rng.choice(endings)}\t{label}")
    path = tmp_path_factory.mktemp("data") / "names.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def run(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "tcn"
    result = run_cli(
        "train", "classify", "--out", out, "--no-progress", "--set", f"data.train_path={data}", *TINY, *STEPS
    )
    assert result.code == 0, result.err
    return out, result.out + result.err


def test_trains_logs_its_receptive_field_and_leaves_its_model(run):
    out, printed = run
    # R = 1 + 2 (k - 1)(2^L - 1) = 1 + 2 * 2 * 3.
    assert "parameters, arch tcn, receptive field 13 characters" in printed
    model = load_pretrained(out)
    assert type(model) is TCNClassifier and model.receptive_field == 13
    results = json.loads((out / "results.json").read_text())
    assert results["steps"] == 30 and results["test_texts"] == 18
    assert json.loads((out / "config.json").read_text())["model_type"] == "tcn_classifier"


def test_loaded_run_predicts_the_same_and_evaluate_equals_an_independent_computation(run, data):
    out, _ = run
    first, second = classify.System.load(out), classify.System.load(out)
    names = ["Petrov", "Sato", "Lindberg"]
    assert first.predict(names) == second.predict(names)
    result = run_cli("evaluate", out, "--data", data, "--json")
    assert result.code == 0, result.err
    model = load_pretrained(out).eval()
    vocab = Vocabulary.load(out / "vocab.json")
    labels = json.loads((out / "labels.json").read_text())["labels"]
    rows = [line.split("\t") for line in data.read_text().splitlines()]
    with torch.no_grad():
        correct = sum(
            labels[int(model(torch.tensor([vocab.encode(text, add_bos=True, add_eos=True)])).logits.argmax())] == label
            for text, label in rows
        )
    assert json.loads(result.out)["accuracy"] == pytest.approx(100.0 * correct / len(rows))


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("model.kernel_size=0", "--set: [model] kernel_size (0) must be an integer >= 1"),
        ("model.num_levels=-1", "--set: [model] num_levels (-1) must be an integer >= 1"),
        ("model.pooling=sum", "--set model.pooling: 'sum' is not one of last, mean, max, attention"),
    ],
)
def test_bad_sizes_are_refused_in_one_line(tmp_path, setting, message):
    assert_error(run_cli("train", "classify", "--out", tmp_path / "run", "--set", "model.arch=tcn", setting), message)
    assert not (tmp_path / "run").exists()
