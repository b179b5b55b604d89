"""The lm recipe with model.arch=tcn: trains a few steps, logs its receptive field, saves, loads and predicts the
same; its whole-file score equals one forward over the file; bad sizes are refused in one line."""

import json
import math
import random

import pytest
import torch
import torch.nn.functional as F

from seqlab.config import apply_overrides, parse_assignments
from seqlab.data.tokenizers import load_tokenizer
from seqlab.decoding import generate
from seqlab.errors import ConfigError
from seqlab.models import TCNLanguageModel, load_pretrained
from seqlab.recipes import lm
from seqlab.recipes.base import run_training
from seqlab.recipes.system import GenerationRequest

TINY_TCN = [
    "model.arch=tcn",
    "model.embedding_size=16",
    "model.hidden_size=16",
    "model.num_levels=2",
    "model.kernel_size=3",
    "data.bptt_len=16",
]
STEPS = ["train.max_steps=6", "data.batches_per_epoch=3", "train.batch_size=4", "data.valid_tokens=256"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = random.Random(0)
    words = ["the", "lord", "said", "unto", "moses", "and", "aaron", "in", "the", "land", "of", "egypt"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 12))).capitalize() + "." for _ in range(200)]
    path = tmp_path_factory.mktemp("data") / "corpus.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def run(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "tcn"
    config = apply_overrides(lm.Config(), parse_assignments([f"data.train_path={corpus}", *STEPS, *TINY_TCN]))
    lines = []
    run_training(lm, config, out, progress=False, log=lines.append)
    return out, lines


def test_trains_logs_its_receptive_field_and_saves_its_config(run):
    out, lines = run
    # R = 1 + 2 (k - 1)(2^L - 1) = 1 + 2 * 2 * 3.
    assert any(line.endswith("parameters, tcn, receptive field 13 tokens") for line in lines), lines
    results = json.loads((out / "results.json").read_text())
    assert results["steps"] == 6 and results["test_perplexity"] == pytest.approx(math.exp(results["test_loss"]))
    model = load_pretrained(out)
    assert isinstance(model, TCNLanguageModel) and model.receptive_field == 13
    saved = json.loads((out / "config.json").read_text())
    assert saved["model_type"] == "tcn_language_model"
    assert (saved["config"]["num_levels"], saved["config"]["kernel_size"]) == (2, 3)
    assert json.loads((out / "recipe.json").read_text())["config"]["model"]["arch"] == "tcn"


def test_loaded_run_predicts_and_generates_what_the_model_does(run):
    out, _ = run
    first, second = lm.System.load(out), lm.System.load(out)
    assert [c.text for c in first.predict(["The lord", "And"])] == [c.text for c in second.predict(["The lord", "And"])]
    request = GenerationRequest("The lord", max_new_tokens=12)
    streamed = "".join(chunk.text for chunk in first.generate(request))
    tokenizer = load_tokenizer(out)
    prompt = torch.tensor([tokenizer.encode("The lord")])
    expected = generate(load_pretrained(out).eval(), prompt, max_new_tokens=12).tokens[0, prompt.shape[1] :]
    assert streamed == tokenizer.decode(expected.tolist())


def test_evaluate_equals_one_forward_over_the_whole_file(run, corpus, tmp_path):
    out, _ = run
    text = corpus.read_text()[:3000]
    path = tmp_path / "eval.txt"
    path.write_text(text)
    metrics = lm.System.load(out).evaluate(str(path))
    model, tokenizer = load_pretrained(out).eval(), load_tokenizer(out)
    ids = torch.tensor(tokenizer.encode(text))
    with torch.no_grad():
        loss = float(F.cross_entropy(model(ids[None, :-1]).logits[0], ids[1:]))
    assert metrics["tokens"] == len(ids) - 1
    assert metrics["loss"] == pytest.approx(loss, rel=1e-5)


def test_a_tcn_has_no_attention_to_draw(run):
    with pytest.raises(ConfigError, match=r"^a TCN language model has no attention to draw$"):
        lm.System.load(run[0]).attention_maps("The lord")


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("model.kernel_size=0", "kernel_size (0) must be an integer >= 1"),
        ("model.num_levels=-1", "num_levels (-1) must be an integer >= 1"),
        ("model.hidden_size=0", "hidden_size (0) must be an integer >= 1 and <= 65536"),
        (
            "model.num_levels=20",
            "num_levels (20) and kernel_size (3) give a receptive field over 65536 steps (MAX_RECEPTIVE_FIELD)",
        ),
    ],
)
def test_bad_sizes_are_refused_in_one_line(setting, message):
    with pytest.raises(ConfigError) as error:
        apply_overrides(lm.Config(), parse_assignments(["model.arch=tcn", setting]))
    assert str(error.value) == f"--set: [model] {message}"
