"""The classify recipe through the command line: each arch trains on a small generated task, evaluate equals an
independent computation, predict prints TEXT<TAB>LABEL, fine-tuning from a run, bad input."""

import json
import random

import pytest
import torch
from cli_helpers import assert_error, run_cli

from seqlab.data.vocab import Vocabulary
from seqlab.models import ELMoClassifier, Seq2VecClassifier, load_pretrained

TINY = {
    "bilstm": ["model.hidden_size=8", "model.embedding_size=8"],
    "static": ["model.hidden_size=8", "model.elmo_hidden_size=8"],
    "elmo": ["model.hidden_size=8", "model.elmo_hidden_size=8", "model.elmo_num_layers=1"],
}
STEPS = ["train.max_steps=40", "train.lr=0.01", "train.batch_size=16", "pretrain.max_steps=5", "pretrain.batch_size=16"]
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
def runs(data, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for arch in ("bilstm", "static", "elmo"):
        settings = [f"data.train_path={data}", f"model.arch={arch}", *TINY[arch], *STEPS]
        result = run_cli("train", "classify", "--out", root / arch, "--no-progress", "--set", *settings)
        assert result.code == 0, result.err
    return root


@pytest.mark.parametrize(
    ("arch", "model_class"), [("bilstm", Seq2VecClassifier), ("static", Seq2VecClassifier), ("elmo", ELMoClassifier)]
)
def test_each_arch_trains_and_leaves_its_model(runs, arch, model_class):
    model = load_pretrained(runs / arch)
    assert type(model) is model_class
    results = json.loads((runs / arch / "results.json").read_text())
    assert results["steps"] == 40 and results["test_texts"] == 18
    if arch == "static":
        assert model.embedding.embedding_dim == 2 * 8
    if arch == "elmo":
        assert not any(p.requires_grad for p in model.elmo.parameters())


def test_training_raises_accuracy_on_a_task_the_endings_decide(runs):
    assert json.loads((runs / "bilstm" / "results.json").read_text())["accuracy"] > 60.0  # chance is 33%


@pytest.mark.parametrize("arch", ["bilstm", "elmo"])
def test_evaluate_equals_an_independent_computation_and_predict_prints_labels(runs, data, arch):
    result = run_cli("evaluate", runs / arch, "--data", data, "--json")
    assert result.code == 0, result.err
    model = load_pretrained(runs / arch)
    vocab = Vocabulary.load(runs / arch / "vocab.json")
    labels = json.loads((runs / arch / "labels.json").read_text())["labels"]
    rows = [line.split("\t") for line in data.read_text().splitlines()]
    correct = 0
    with torch.no_grad():
        for text, label in rows:
            x = torch.tensor([vocab.encode(text, add_bos=True, add_eos=True)])
            correct += labels[int(model(x).logits.argmax())] == label
    assert json.loads(result.out)["accuracy"] == pytest.approx(100.0 * correct / len(rows))
    predicted = run_cli("predict", runs / arch, "Petrov", "Sato")
    assert predicted.code == 0 and [line.split("\t")[0] for line in predicted.out.splitlines()] == ["Petrov", "Sato"]
    assert all(line.split("\t")[1] in labels for line in predicted.out.splitlines())


def test_fine_tuning_from_a_run_with_a_frozen_encoder(runs, data, tmp_path):
    first = runs / "bilstm"
    settings = [f"data.train_path={data}", *TINY["bilstm"], *STEPS, f"model.init_from={first}", "train.freeze=rnn"]
    settings += ["train.body_lr_scale=0.1"]
    result = run_cli("train", "classify", "--out", tmp_path / "tuned", "--no-progress", "--set", *settings)
    assert result.code == 0, result.err
    assert f"model.init_from {first}: loaded" in result.out + result.err
    before, after = load_pretrained(first), load_pretrained(tmp_path / "tuned")
    assert torch.equal(after.rnn.cells[0].weight_ih, before.rnn.cells[0].weight_ih)
    assert not torch.equal(after.output.weight, before.output.weight)


def test_init_from_a_run_of_another_arch_names_the_tensors_that_do_not_fit(runs, data, tmp_path):
    settings = [f"data.train_path={data}", *TINY["bilstm"], *STEPS, f"model.init_from={runs / 'elmo'}"]
    result = run_cli("train", "classify", "--out", tmp_path / "run", "--no-progress", "--set", *settings)
    assert result.code == 2 and "tensors that do not fit (missing: embedding.weight" in result.err
    assert len(result.err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_train_size_trains_on_a_stratified_sample_and_elmo_concat_reads_the_embedding_beside_elmo(data, tmp_path):
    settings = [f"data.train_path={data}", "data.train_size=30", *STEPS]
    for arch, extra in (("static", []), ("elmo", ["model.elmo_concat=true"])):
        result = run_cli(
            "train", "classify", "--out", tmp_path / arch, "--set", f"model.arch={arch}", *settings, *TINY[arch], *extra
        )
        assert result.code == 0, result.err
        results = json.loads((tmp_path / arch / "results.json").read_text())
        assert results["train_texts"] == 30 and results["test_texts"] == 18  # 144 training texts without the option
    model = load_pretrained(tmp_path / "elmo")
    assert model.embedding.weight.shape == (len(Vocabulary.load(tmp_path / "elmo" / "vocab.json")), 2 * 8)
    assert model.classifier.rnn.input_size == 2 * 8 + 2 * 8


def test_bad_input_is_one_line(data, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("Petrov\trussian\nSato japanese\n")
    result = run_cli("train", "classify", "--out", tmp_path / "run", "--set", f"data.train_path={bad}")
    assert_error(result, f"{bad}:2: 1 column, expected 2 (TEXT<TAB>LABEL lines)")
    result = run_cli("train", "classify", "--out", tmp_path / "run", "--set", f"data.test_path={data}")
    assert_error(result, "data.test_path needs data.train_path (the names data is split into all three)")
    result = run_cli(
        "train", "classify", "--out", tmp_path / "run", "--set", f"data.train_path={data}", "data.train_size=2"
    )
    assert_error(
        result, f"{data}: data.train_size: cannot sample 2 of 144 examples in 3 classes: the size must lie in [3, 144]"
    )
    result = run_cli("train", "classify", "--set", "model.arch=static", "model.elmo_concat=true")
    assert_error(result, "--set model.elmo_concat: does not apply to model.arch=static (a key of model.arch=elmo)")
    result = run_cli("train", "classify", "--set", "model.arch=gpt")
    assert result.code == 2 and "'gpt' is not one of bilstm, static, elmo, minilm, bert, tcn" in result.err
