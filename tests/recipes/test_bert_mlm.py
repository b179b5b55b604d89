"""The bert-mlm recipe through the command line at a tiny size: train, evaluate, predict, bad input.

One checkpoint is trained per module for a few steps on a generated text. The reported test scores are held
against an independent computation from the saved files (the masks redrawn with the same seed, cross-entropy over
every position with ignore_index), and ``evaluate`` of the test text reproduces them.
"""

import json
import random
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from cli_helpers import assert_error, run_cli
from faults.helpers import Killed, kill_at_micro_batch, resume, train

from seqlab.config import apply_overrides, parse_assignments
from seqlab.data.text import split_text
from seqlab.data.tokenizers import load_tokenizer
from seqlab.data.wordpiece import WordPieceTokenizer
from seqlab.errors import CheckpointError
from seqlab.models import BertForMaskedLM, BertForPreTraining, load_pretrained
from seqlab.recipes import bert_mlm, load_system
from seqlab.recipes.common import masked_lm
from seqlab.recipes.saved_run import load_recipe_config

WORDS = [
    "the",
    "lord",
    "said",
    "unto",
    "moses",
    "and",
    "aaron",
    "in",
    "the",
    "land",
    "of",
    "egypt",
    "this",
    "month",
    "shall",
    "be",
    "unto",
    "you",
]
TINY = ["model.num_layers=1", "model.d_model=16", "model.num_heads=2", "model.d_ff=32", "data.context_length=16"]
STEPS = ["train.max_steps=4", "data.batches_per_epoch=2", "train.batch_size=4", "data.vocab_size=60"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))) + "." for _ in range(200)]
    path = tmp_path_factory.mktemp("data") / "corpus.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def checkpoint(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "bert"
    result = run_cli(
        "train", "bert-mlm", "--out", out, "--no-progress", "--set", f"data.train_path={corpus}", *TINY, *STEPS
    )
    assert result.code == 0, result.err
    assert "test_accuracy" in result.out
    return out


def test_train_writes_a_checkpoint_whose_test_scores_are_reproducible(checkpoint, corpus):
    files = {"config.json", "model.safetensors", "tokenizer.json", "recipe.json"}
    assert {p.name for p in checkpoint.iterdir()} >= files
    results = json.loads((checkpoint / "results.json").read_text())
    assert results["steps"] == 4 and results["stopped_by"] == "max_steps"
    model, tokenizer = load_pretrained(checkpoint), load_tokenizer(checkpoint)
    assert isinstance(model, BertForMaskedLM) and model.config.max_positions == 16
    test = split_text(corpus.read_text()).test
    ids = torch.tensor(tokenizer.encode(test))
    T = 16
    starts = torch.arange(len(ids) // (T - 2)) * (T - 2)
    inputs = torch.stack([torch.cat([torch.tensor([2]), ids[s : s + T - 2], torch.tensor([3])]) for s in starts])
    masked = masked_lm.mask(inputs, tokenizer, 0.15, torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(masked.input_ids).logits
    loss = F.cross_entropy(logits.flatten(0, 1), masked.labels.flatten(), ignore_index=-100)
    scored = masked.labels != -100
    accuracy = 100.0 * float((logits.argmax(-1) == masked.labels)[scored].float().mean())
    assert results["test_loss"] == pytest.approx(float(loss), rel=1e-4)
    assert results["test_accuracy"] == pytest.approx(accuracy, rel=1e-4)
    assert results["test_tokens"] == int(scored.sum())


def test_evaluate_of_the_test_text_reproduces_the_test_scores_and_predict_fills_the_mask(checkpoint, corpus, tmp_path):
    test = tmp_path / "test.txt"
    test.write_text(split_text(corpus.read_text()).test)
    result = run_cli("evaluate", checkpoint, "--data", test, "--json")
    assert result.code == 0, result.err
    scores, results = json.loads(result.out), json.loads((checkpoint / "results.json").read_text())
    assert scores == pytest.approx({name: results[f"test_{name}"] for name in ("loss", "accuracy", "tokens")})
    result = run_cli("predict", checkpoint, "the lord [MASK] unto moses")
    assert result.code == 0, result.err
    line = result.out.strip()  # a predicted ## piece may join the word before it
    assert line.startswith("the lord") and line.endswith("unto moses") and "[MASK]" not in line


def test_predict_without_a_mask_is_one_line(checkpoint):
    assert_error(run_cli("predict", checkpoint, "no mask here"), "input 'no mask here' has no [MASK] to fill")


def test_a_text_too_short_for_one_sequence_is_one_line(tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("one line.\ntwo lines.\nthree.\n")
    result = run_cli("train", "bert-mlm", "--out", tmp_path / "run", "--set", f"data.train_path={short}", *TINY)
    assert result.code == 2 and result.err.startswith("seqlab: error: ")
    assert not (tmp_path / "run").exists()


def test_a_resumed_run_reads_its_own_wordpiece_vocabulary(corpus, tmp_path, monkeypatch):
    """WordPiece training is not deterministic (ties between pieces), so resume must not train a second one: the
    killed run's tokenizer.json is what the resumed run trains and tests with."""
    steps = [s for s in STEPS if not s.startswith("train.max_steps=")] + ["train.max_steps=6"]
    settings = [f"data.train_path={corpus}", *TINY, *steps, "train.checkpoint_every=2"]
    config = apply_overrides(bert_mlm.Config(), parse_assignments(settings))
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        kill_at_micro_batch(patch, 4)
        with pytest.raises(Killed):
            train("bert-mlm", config, out)
    vocabulary = (out / "tokenizer.json").read_bytes()
    resume("bert-mlm", out)
    assert (out / "tokenizer.json").read_bytes() == vocabulary
    assert json.loads((out / "results.json").read_text())["steps"] == 6


def test_nsp_trains_bert_for_pre_training_and_evaluate_reproduces_its_nsp_accuracy(corpus, tmp_path):
    out = tmp_path / "nsp"
    settings = [f"data.train_path={corpus}", *TINY, *STEPS, "data.nsp=true"]
    result = run_cli("train", "bert-mlm", "--out", out, "--no-progress", "--set", *settings)
    assert result.code == 0, result.err
    assert isinstance(load_pretrained(out), BertForPreTraining)
    results = json.loads((out / "results.json").read_text())
    assert 0.0 <= results["test_nsp_accuracy"] <= 100.0 and results["test_pairs"] > 0
    test = tmp_path / "test.txt"
    test.write_text(split_text(corpus.read_text()).test)
    scores = run_cli("evaluate", out, "--data", test, "--json")
    assert scores.code == 0, scores.err
    names = ("loss", "accuracy", "tokens", "nsp_loss", "nsp_accuracy", "pairs")
    assert json.loads(scores.out) == pytest.approx({name: results[f"test_{name}"] for name in names})
    predicted = run_cli("predict", out, "the lord [MASK] unto moses")
    assert predicted.code == 0 and "[MASK]" not in predicted.out


def test_predict_returns_the_filled_text_that_the_command_line_prints(checkpoint):
    system = load_system(checkpoint)
    assert isinstance(system, bert_mlm.BertMLMSystem)
    (filled,) = system.predict(["the lord [MASK] unto moses"])
    assert filled.text == "the lord [MASK] unto moses" and "[MASK]" not in filled.filled
    assert filled.lines() == [run_cli("predict", checkpoint, "the lord [MASK] unto moses").out.rstrip("\n")]


def test_validation_scores_the_fixed_masked_sequences_of_the_valid_split(corpus):
    """BertMLMTraining alone: validate is the masked-token cross-entropy (nats per masked token, over every
    position with ignore_index) and accuracy of the model on the valid split's masked windows, at any batch size."""
    config = apply_overrides(bert_mlm.Config(), parse_assignments([f"data.train_path={corpus}", *TINY, *STEPS]))
    torch.manual_seed(0)
    training = bert_mlm.BertMLMTraining.build(config)
    model = training.system.model.eval()
    valid = training.valid
    assert valid.input_ids.shape[1] == 16 and len(valid.input_ids) <= config.data.valid_sequences
    with torch.no_grad():
        logits = model(valid.input_ids).logits  # (B, T, V)
    scored = valid.labels != -100
    expected_loss = F.cross_entropy(logits.flatten(0, 1), valid.labels.flatten(), ignore_index=-100).item()
    expected_accuracy = 100.0 * float((logits.argmax(-1) == valid.labels)[scored].float().mean())
    scores = training.validate(model)
    assert scores == pytest.approx({"valid_loss": expected_loss, "valid_accuracy": expected_accuracy}, rel=1e-5)


def test_prepare_resumed_from_a_run_reads_its_tokenizer(checkpoint, corpus, tmp_path):
    config = load_recipe_config(checkpoint, bert_mlm.Config)
    run = bert_mlm.prepare(config, resume_from=checkpoint)
    run.save(tmp_path)
    assert (tmp_path / "tokenizer.json").read_bytes() == (checkpoint / "tokenizer.json").read_bytes()


def test_saving_into_a_run_of_another_vocabulary_is_refused(checkpoint, tmp_path):
    """A resumed run that trained a fresh vocabulary must not overwrite the one its weights were trained with;
    one that read its own (resume_from) saves over it."""
    config = load_recipe_config(checkpoint, bert_mlm.Config)
    other = tmp_path / "other"
    other.mkdir()
    WordPieceTokenizer.train("zebra quagga okapi " * 50, vocab_size=30).save(other)
    with pytest.raises(CheckpointError, match=r"tokenizer.json is another WordPiece vocabulary than this run's"):
        bert_mlm.BertMLMTraining.build(config).save(other)
    assert not (other / "model.safetensors").exists()
    own = tmp_path / "own"
    own.mkdir()
    (own / "tokenizer.json").write_bytes((checkpoint / "tokenizer.json").read_bytes())
    bert_mlm.BertMLMTraining.build(config, resume_from=checkpoint).save(own)
    assert (own / "tokenizer.json").read_bytes() == (checkpoint / "tokenizer.json").read_bytes()
    assert (own / "model.safetensors").exists()


def test_the_old_max_length_key_sets_context_length_with_a_warning_and_loads(checkpoint, tmp_path):
    with pytest.warns(FutureWarning, match=r"^--set data.max_length is renamed context_length"):
        config = apply_overrides(bert_mlm.Config(), {"data.max_length": "32"})
    assert config.data.context_length == 32
    old = tmp_path / "old"
    shutil.copytree(checkpoint, old)
    saved = json.loads((old / "recipe.json").read_text())
    saved["config"]["data"]["max_length"] = saved["config"]["data"].pop("context_length")
    (old / "recipe.json").write_text(json.dumps(saved))
    assert load_recipe_config(old, bert_mlm.Config).data.context_length == 16
