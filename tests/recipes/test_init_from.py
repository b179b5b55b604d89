"""Fine-tuning from a checkpoint: model.init_from loads a seqlab run or a Hugging Face GPT-2 / BERT folder by name
and names every tensor that does not fit; train.freeze and train.body_lr_scale; the lm recipe end to end from the
command line."""

import json
import random
import re
from dataclasses import replace

import pytest
import torch
from cli_helpers import assert_error, run_cli

from seqlab.errors import CheckpointError
from seqlab.models import (
    GPT,
    Bert,
    BertConfig,
    BertForMeanPooledClassification,
    RNNLanguageModel,
    RNNLanguageModelConfig,
    load_pretrained,
)
from seqlab.recipes.init_from import load_by_name


def lm(vocab_size=7, hidden_size=4, seed=0) -> RNNLanguageModel:
    torch.manual_seed(seed)
    return RNNLanguageModel(RNNLanguageModelConfig(vocab_size, embedding_size=4, hidden_size=hidden_size))


def test_matching_model_is_loaded_whole_by_name(tmp_path):
    source = lm(seed=0)
    source.save_pretrained(tmp_path)
    target, lines = lm(seed=1), []
    loaded = load_by_name(target, tmp_path, strict=True, log=lines.append)
    assert loaded == [name for name, _ in target.named_parameters()]
    for name, tensor in source.state_dict().items():
        assert torch.equal(target.state_dict()[name], tensor), name
    assert lines == [f"model.init_from {tmp_path}: loaded 11 of 11 tensors by name"]


def test_tensors_that_do_not_fit_are_named_in_one_line(tmp_path):
    lm(vocab_size=7).save_pretrained(tmp_path)
    message = (
        f"model.init_from {tmp_path}: tensors that do not fit (wrong shape: embedding.weight [7, 4] vs [9, 4], "
        "output.bias [7] vs [9], output.weight [7, 4] vs [9, 4]); --set model.init_strict=false skips them"
    )
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        load_by_name(lm(vocab_size=9), tmp_path, strict=True, log=print)


def test_missing_and_unexpected_tensors_are_named_and_skipped_when_not_strict(tmp_path):
    torch.manual_seed(0)
    source = RNNLanguageModel(RNNLanguageModelConfig(7, embedding_size=4, hidden_size=4, num_layers=2))
    source.save_pretrained(tmp_path)
    target = RNNLanguageModel(RNNLanguageModelConfig(9, embedding_size=4, hidden_size=4, num_layers=1))
    before, lines = {k: v.clone() for k, v in target.state_dict().items()}, []
    loaded = load_by_name(target, tmp_path, strict=False, log=lines.append)
    assert lines[0] == (
        f"model.init_from {tmp_path}: skipped tensors that do not fit (unexpected: rnn.cells.1.bias_hh, "
        "rnn.cells.1.bias_ih, rnn.cells.1.weight_hh, rnn.cells.1.weight_ih; wrong shape: embedding.weight [7, 4] "
        "vs [9, 4], output.bias [7] vs [9], output.weight [7, 4] vs [9, 4])"
    )
    assert loaded == [f"rnn.cells.0.{n}" for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    assert torch.equal(target.rnn.cells[0].weight_ih, source.rnn.cells[0].weight_ih)
    assert torch.equal(target.embedding.weight, before["embedding.weight"])


def test_a_directory_without_weights_is_one_line(tmp_path):
    with pytest.raises(
        CheckpointError, match=r"no model\.safetensors; is it a seqlab run directory or a Hugging Face folder\?$"
    ):
        load_by_name(lm(), tmp_path, strict=True, log=print)


WORDS = ["the", "lord", "said", "unto", "moses", "and", "aaron", "in", "the", "land", "of", "egypt"]
TINY_RNN = ["model.arch=lstm", "model.hidden_size=16", "model.embedding_size=16", "model.rnn_layers=1"]
STEPS = ["train.max_steps=3", "data.batches_per_epoch=3", "train.batch_size=4", "data.valid_tokens=128"]


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    rng = random.Random(0)
    corpus = tmp_path_factory.mktemp("data") / "corpus.txt"
    corpus.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(9)) for _ in range(200)) + "\n")
    out = tmp_path_factory.mktemp("runs") / "first"
    result = run_cli(
        "train", "lm", "--out", out, "--no-progress", "--set", f"data.train_path={corpus}", *TINY_RNN, *STEPS
    )
    assert result.code == 0, result.err
    return corpus, out


def test_lm_recipe_fine_tunes_from_a_run_with_a_frozen_embedding(lm_run, tmp_path):
    corpus, first = lm_run
    settings = [f"data.train_path={corpus}", *TINY_RNN, *STEPS, f"model.init_from={first}", "train.freeze=embedding"]
    result = run_cli("train", "lm", "--out", tmp_path / "second", "--no-progress", "--set", *settings)
    assert result.code == 0, result.err
    assert f"model.init_from {first}: loaded 7 of 7 tensors by name" in result.out + result.err
    before, after = load_pretrained(first), load_pretrained(tmp_path / "second")
    assert torch.equal(after.embedding.weight, before.embedding.weight)
    assert not torch.equal(after.output.weight, before.output.weight)


def test_lm_recipe_refuses_a_freeze_prefix_that_names_nothing(lm_run, tmp_path):
    corpus, _ = lm_run
    settings = [f"data.train_path={corpus}", *TINY_RNN, *STEPS, "train.freeze=encoder"]
    result = run_cli("train", "lm", "--out", tmp_path / "run", "--no-progress", "--set", *settings)
    assert_error(result, "train.freeze: 'encoder' names no parameter; the model's modules are embedding, output, rnn")
    assert not (tmp_path / "run").exists()


def test_a_hugging_face_gpt2_folder_loads_as_gpt_from_hf_converts_it(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf_config = transformers.GPT2Config(vocab_size=11, n_positions=8, n_embd=8, n_layer=1, n_head=2)
    transformers.GPT2LMHeadModel(hf_config).save_pretrained(tmp_path)
    reference = GPT.from_hf(tmp_path)
    torch.manual_seed(1)
    target, lines = GPT(reference.config), []
    load_by_name(target, tmp_path, strict=True, log=lines.append)
    for name, tensor in reference.state_dict().items():
        assert torch.equal(target.state_dict()[name], tensor), name
    assert lines == [
        f"model.init_from {tmp_path}: loaded {len(target.state_dict())} of {len(target.state_dict())} tensors by name"
    ]


def test_a_bert_folder_fills_a_task_models_body_and_names_what_does_not_fit_in_one_line(tmp_path):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=20, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_positions=8)
    body = Bert(config)
    body.save_hf(tmp_path)
    target = BertForMeanPooledClassification(replace(config, pooler=False, num_labels=3))
    with pytest.raises(CheckpointError) as raised:
        load_by_name(target, tmp_path, strict=True, log=print)
    expected = "missing: classifier.bias, classifier.weight; unexpected: bert.pooler.bias, bert.pooler.weight"
    assert f"tensors that do not fit ({expected})" in str(raised.value) and "\n" not in str(raised.value)
    lines = []
    loaded = load_by_name(target, tmp_path, strict=False, log=lines.append)
    assert loaded == [name for name, _ in target.named_parameters() if name.startswith("bert.")]
    for name, tensor in target.bert.state_dict().items():
        assert torch.equal(tensor, body.state_dict()[name]), name
    assert lines[0] == f"model.init_from {tmp_path}: skipped tensors that do not fit ({expected})"


def test_a_folder_of_another_family_is_one_line(tmp_path):
    Bert(BertConfig(vocab_size=20, d_model=8, num_heads=2, num_layers=1, d_ff=16)).save_hf(tmp_path)
    payload = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**payload, "model_type": "roberta"}))
    message = f"model.init_from {tmp_path}: a Hugging Face 'roberta' folder; seqlab converts bert, gpt2, t5"
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        load_by_name(Bert(BertConfig(vocab_size=20, d_model=8, num_heads=2)), tmp_path, strict=True, log=print)
