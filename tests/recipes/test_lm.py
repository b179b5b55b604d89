"""The lm recipe through the command line: train (each arch, each tokenizer), evaluate, generate, bad input.

Checkpoints are trained once per module for a few steps on a generated text of ~13 KB. Scores are held against
an independent computation from the saved model (one forward over the whole file), and generation against
``seqlab.decoding.generate`` called directly; a tiny GPT that overfits a short text must reproduce it greedily.
"""

import dataclasses
import json
import math
import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from cli_helpers import Result, assert_error, run_cli

from seqlab.data.tokenizers import load_tokenizer
from seqlab.decoding import generate
from seqlab.models import GPT, RNNLanguageModel, load_pretrained
from seqlab.recipes import lm, lm_config
from seqlab.training.trainer import TrainConfig

SENTENCE = "the lord said unto moses and aaron in the land of egypt this month shall be unto you the beginning"
WORDS = SENTENCE.split(" ")
TINY_GPT = ["model.num_layers=1", "model.d_model=32", "model.num_heads=2", "model.context_length=32"]
TINY_RNN = ["model.hidden_size=32", "model.embedding_size=32", "model.rnn_layers=1", "data.bptt_len=16"]
STEPS = ["train.max_steps=6", "data.batches_per_epoch=3", "train.batch_size=4", "data.valid_tokens=256"]
CHECKPOINT_FILES = {"config.json", "model.safetensors", "tokenizer.json", "recipe.json", "results.json"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    rng = random.Random(0)
    lines = []
    for i in range(300):
        lines.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))).capitalize() + ".")
        if i % 20 == 19:
            lines.append("")
    path = tmp_path_factory.mktemp("data") / "corpus.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def train_cli(out: Path, corpus: Path, *settings: str) -> Result:
    result = run_cli(
        "train", "lm", "--out", out, "--no-progress", "--set", f"data.train_path={corpus}", *STEPS, *settings
    )
    assert result.code == 0, result.err
    return result


@pytest.fixture(scope="module")
def checkpoints(corpus, tmp_path_factory) -> dict[str, Path]:
    """One tiny checkpoint per (arch, tokenizer) pair that the tests use."""
    runs = {
        "gpt-char": TINY_GPT,
        "lstm-char": [*TINY_RNN, "model.arch=lstm"],
        "gpt-word": [*TINY_GPT, "data.tokenizer=word"],
        "gru-bpe": [*TINY_RNN, "model.arch=gru", "data.tokenizer=bpe", "data.vocab_size=300"],
        "gpt-bpe": [*TINY_GPT, "data.tokenizer=bpe", "data.vocab_size=300"],
    }
    root = tmp_path_factory.mktemp("runs")
    for name, settings in runs.items():
        train_cli(root / name, corpus, *settings)
    return {name: root / name for name in runs}


@pytest.mark.parametrize("name", ["gpt-char", "lstm-char", "gpt-word", "gru-bpe", "gpt-bpe"])
def test_train_writes_a_checkpoint_with_results(checkpoints, name):
    directory = checkpoints[name]
    assert {p.name for p in directory.iterdir()} >= CHECKPOINT_FILES
    results = json.loads((directory / "results.json").read_text())
    assert results["test_perplexity"] == pytest.approx(math.exp(results["test_loss"]))
    assert results["steps"] == 6 and results["stopped_by"] == "max_steps"
    recipe = json.loads((directory / "recipe.json").read_text())
    assert recipe["recipe"] == "lm"
    arch, tokenizer = name.split("-")
    assert (recipe["config"]["model"]["arch"], recipe["config"]["data"]["tokenizer"]) == (arch, tokenizer)
    assert load_tokenizer(directory).kind == tokenizer
    model = load_pretrained(directory)
    assert isinstance(model, GPT if arch == "gpt" else RNNLanguageModel)


def whole_file_loss(directory: Path, text: str) -> tuple[float, int]:
    """Mean next-token loss over a text, by one forward of the whole file (no windows, no carried state)."""
    model, tokenizer = load_pretrained(directory), load_tokenizer(directory)
    ids = torch.tensor(tokenizer.encode(text))
    with torch.no_grad():
        logits = model(ids[None, :-1]).logits[0]  # (N - 1, V)
    return float(F.cross_entropy(logits, ids[1:])), len(ids) - 1


@pytest.mark.parametrize("name", ["gpt-char", "lstm-char", "gpt-word", "gru-bpe"])
def test_evaluate_json_equals_an_independent_computation(checkpoints, corpus, tmp_path, name):
    # A GPT reads the file in one window when the file fits its context (32 tokens).
    text = corpus.read_text() if name.startswith(("lstm", "gru")) else "The lord said unto moses.\n"
    path = tmp_path / "eval.txt"
    path.write_text(text)
    result = run_cli("evaluate", checkpoints[name], "--data", path, "--json")
    assert result.code == 0, result.err
    metrics = json.loads(result.out)
    assert set(metrics) == {"loss", "perplexity", "bpc", "tokens"}
    assert metrics["perplexity"] == pytest.approx(math.exp(metrics["loss"]), rel=1e-12)
    loss, tokens = whole_file_loss(checkpoints[name], text)
    assert metrics["tokens"] == tokens
    assert metrics["loss"] == pytest.approx(loss, rel=1e-5)
    assert metrics["bpc"] == pytest.approx(loss * tokens / (len(text) * math.log(2)), rel=1e-5)


@pytest.mark.parametrize("name", ["gpt-char", "lstm-char", "gpt-word", "gpt-bpe"])
def test_greedy_generation_streams_what_generate_returns(checkpoints, name):
    prompt = "The lord said"
    result = run_cli("generate", checkpoints[name], "--prompt", prompt, "--max-new-tokens", 12)
    assert result.code == 0, result.err
    model, tokenizer = load_pretrained(checkpoints[name]), load_tokenizer(checkpoints[name])
    ids = tokenizer.encode(prompt)
    ids = ids[:-1] if name.endswith("word") else ids  # a word prompt that does not end a line has no <eos>
    tokens = generate(model, torch.tensor([ids]), max_new_tokens=12).tokens[0].tolist()
    expected = tokenizer.decode(tokens)[len(tokenizer.decode(ids)) :]
    assert result.out == f"{prompt}{expected}\n"
    pieces = []
    texts = lm.generate(checkpoints[name], prompt, max_new_tokens=12, on_text=pieces.append)
    assert texts == [prompt + expected] and "".join(pieces) == result.out
    assert len(pieces) > 3  # streamed, not printed at the end


def test_a_gpt_generates_past_its_context_from_the_second_half_of_it(checkpoints):
    # context_length 32: the first 32 - 3 tokens are generate()'s, then it goes on from the last 16 tokens.
    model, tokenizer = load_pretrained(checkpoints["gpt-char"]), load_tokenizer(checkpoints["gpt-char"])
    (text,) = lm.generate(checkpoints["gpt-char"], "The", max_new_tokens=60)
    assert len(text) == 3 + 60
    first = generate(model, torch.tensor([tokenizer.encode("The")]), max_new_tokens=60).tokens[0]
    assert len(first) == 32 and tokenizer.decode(first) == text[:32]
    second = generate(model, first[None, 16:], max_new_tokens=60).tokens[0]
    assert tokenizer.decode(second[16:]) == text[32:48]


def test_sampling_is_reproducible_with_a_seed_and_samples_differ(checkpoints):
    argv = ["generate", checkpoints["gpt-char"], "--prompt", "The", "--temperature", "3", "--top-k", "20"]
    first = run_cli(*argv, "--seed", 7, "--num-samples", 3)
    assert first.code == 0, first.err
    assert first == run_cli(*argv, "--seed", 7, "--num-samples", 3)
    samples = first.out.split("--- sample ")[1:]
    assert [s.split(" ---\n")[0] for s in samples] == ["1/3", "2/3", "3/3"]
    assert len({s.split(" ---\n")[1] for s in samples}) == 3
    assert run_cli(*argv, "--seed", 8).out != run_cli(*argv, "--seed", 7).out


def test_stop_string_ends_the_continuation_and_beams_run(checkpoints):
    texts = lm.generate(checkpoints["gpt-char"], "The", temperature=3.0, seed=1, stop=" ", max_new_tokens=28)
    continuation = texts[0][3:]
    assert continuation.count(" ") <= 1 and (continuation.endswith(" ") or len(continuation) == 28)
    beam = run_cli("generate", checkpoints["lstm-char"], "--prompt", "The", "--num-beams", 3, "--max-new-tokens", 5)
    assert beam.code == 0 and beam.out.startswith("The") and len(beam.out) == 3 + 5 + 1


def test_a_tiny_gpt_overfits_a_short_text_and_reproduces_it_greedily(tmp_path):
    text = "In the beginning God created the heaven and the earth.\n"
    path = tmp_path / "genesis.txt"
    path.write_text(text)
    config = lm.Config(
        data=lm_config.LMDataConfig(
            train_path=str(path), valid_path=str(path), test_path=str(path), batches_per_epoch=50
        ),
        model=lm_config.LMModelConfig(num_layers=2, d_model=64, context_length=48),
        train=TrainConfig(lr=3e-3, batch_size=16, max_steps=300, patience=None, max_epochs=100),
    )
    report = lm.train(config, tmp_path / "run", progress=False, log=lambda line: None)
    assert report.results["valid_loss"] < 0.05
    (generated,) = lm.generate(tmp_path / "run", text[:8], max_new_tokens=39)
    assert generated == text[:47]


def test_preset_fills_the_fields_left_at_their_defaults():
    config = lm.apply_preset(dataclasses.replace(lm.Config(), model=lm_config.LMModelConfig(preset="zaremba_medium")))
    assert (config.model.arch, config.model.hidden_size, config.model.dropout) == ("lstm", 650, 0.5)
    assert (config.train.optimizer, config.train.lr, config.train.clip_norm) == ("sgd", 1.0, 5.0)
    assert (config.data.bptt_len, config.train.batch_size) == (35, 20)
    kept = dataclasses.replace(lm.Config(), model=lm_config.LMModelConfig(preset="zaremba_small", hidden_size=64))
    assert lm.apply_preset(kept).model.hidden_size == 64


def test_generate_refuses_bad_options_and_prompts(checkpoints):
    gpt = checkpoints["gpt-char"]
    cases = {
        ("--top-p", 1.5): "--top-p (1.5) must be in (0, 1]",
        ("--top-p", 0): "--top-p (0.0) must be in (0, 1]",
        ("--top-k", 0): "--top-k (0) must be >= 1",
        ("--temperature", 0): "--temperature (0.0) must be a finite number > 0",
        ("--num-samples", 0): "--num-samples (0) must be >= 1",
    }
    for option, message in cases.items():
        assert_error(run_cli("generate", gpt, "--prompt", "The", *option), message)
    assert_error(
        run_cli("generate", gpt, "--prompt", "Thé lörd"),
        "--prompt: text has characters the model never saw: 'é' 'ö'",
    )
    assert_error(
        run_cli("generate", gpt, "--prompt", "a" * 40),
        "--prompt is 40 tokens; the model's context_length is 32, so a prompt may have at most 31",
    )
    assert_error(
        run_cli("generate", gpt, "--prompt", "The", "--num-beams", 2, "--temperature", 1),
        "num_beams (2) > 1 cannot be combined with sampling",
    )
    assert_error(
        run_cli("generate", gpt, "--prompt", "The", "--num-beams", 2, "--stop", "."),
        "--stop cannot be combined with beam search (--num-beams > 1)",
    )


def test_train_refuses_bad_input_and_writes_nothing(corpus, tmp_path):
    out = tmp_path / "out"
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n\n")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\xe9\n".encode("latin-1") * 50)
    small = tmp_path / "small.txt"
    small.write_text("a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl\nm\nn\no\np\nq\nr\ns\nt\n")
    cases = {
        f"data.train_path={empty}": f"{empty}: is empty",
        f"data.train_path={latin1}": f"{latin1}:1: not UTF-8 text (invalid byte 0xe9 at byte offset 3)",
        f"data.train_path={small}": (
            f"{small}: the train split has 36 tokens, too few for one block of model.context_length 64 "
            "(a block needs 65)"
        ),
        "data.tokenizer=sentencepiece": "--set data.tokenizer: 'sentencepiece' is not one of char, word, bpe",
        "model.arch=mamba": "--set model.arch: 'mamba' is not one of gpt, lstm, gru, rnn",
    }
    for setting, message in cases.items():
        assert_error(run_cli("train", "lm", "--out", out, "--set", setting), message)
        assert not out.exists()
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert_error(
        run_cli("train", "lm", "--out", out, "--set", f"data.train_path={corpus}"),
        f"--out {out}: already exists and is not empty; pass --overwrite to replace it",
    )
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_evaluate_refuses_text_with_unseen_characters(checkpoints, tmp_path):
    path = tmp_path / "other.txt"
    path.write_text("Zürich\n")
    assert_error(
        run_cli("evaluate", checkpoints["gpt-char"], "--data", path),
        f"{path}: text has characters the model never saw: 'Z' 'ü' 'c'",
    )
