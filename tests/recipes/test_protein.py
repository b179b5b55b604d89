"""The protein recipe on a small FASTA file the test writes, causal and masked: it trains a few steps and reports
the model beside the unigram baseline; the saved run evaluates, predicts and generates through its System; the
masked training parts alone; bad input gets one line."""

import json
import math
import random

import pytest
import torch
from cli_helpers import assert_error, run_cli

from seqlab.config import apply_overrides, parse_assignments
from seqlab.errors import ConfigError, DataError
from seqlab.recipes import protein
from seqlab.recipes.base import run_training
from seqlab.recipes.system import GenerationRequest

TINY = ["model.d_model=16", "model.num_heads=2", "model.num_layers=1", "model.context_length=16"]
STEPS = ["train.max_steps=6", "data.batches_per_epoch=3", "train.batch_size=4", "sample.count=2"]
SPLIT = ["data.valid_fraction=0.1", "data.test_fraction=0.1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = random.Random(0)
    lines = []
    for i in range(40):
        lines += [f">p{i}", "M" + "".join(rng.choice("ACDEFGHIKLMNPQRSTVWY") for _ in range(rng.randint(20, 40)))]
    path = tmp_path_factory.mktemp("data") / "proteins.faa"
    path.write_text("\n".join(lines) + "\n")
    return path


def config_of(*assignments: str) -> protein.Config:
    return apply_overrides(protein.Config(), parse_assignments(list(assignments)))


@pytest.fixture(scope="module", params=["causal", "masked"])
def run(request, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / request.param
    config = config_of(f"data.train_path={data}", f"model.objective={request.param}", *TINY, *STEPS, *SPLIT)
    run_training(protein, config, out, progress=False, log=lambda line: None)
    return request.param, out, json.loads((out / "results.json").read_text())


def test_training_reports_the_model_beside_the_unigram_baseline(run):
    objective, _, results = run
    assert results["test_perplexity"] == pytest.approx(math.exp(results["test_loss"]), rel=1e-4)
    assert results["unigram_perplexity"] == pytest.approx(math.exp(results["unigram_loss"]), rel=1e-4)
    if objective == "masked":
        assert 0 <= results["test_accuracy"] <= 100 and 0 <= results["unigram_accuracy"] <= 100


def test_evaluate_predict_and_generate_from_the_saved_run(run, tmp_path):
    objective, out, _ = run
    system = protein.System.load(out)
    test = tmp_path / "t.faa"
    test.write_text(">a\nMKLVACDEFGHIKLMNPQRSTVWY\n>b\nMSTVWYACDE\n")
    assert "perplexity" in system.evaluate(str(test))
    if objective == "causal":
        (scored,) = system.predict(["MKLV"])
        assert scored.loss > 0 and scored.lines() == [f"MKLV\t{scored.loss:.4f}"]
        request = GenerationRequest("MK", num_return_sequences=2, seed=3)
        chunks = list(system.generate(request))
        assert [(c.index, c.finished) for c in chunks] == [(0, True), (1, True)]
        assert chunks == list(system.generate(request))  # the seed reproduces them
        assert all(set(c.text) <= set("ACDEFGHIKLMNPQRSTVWY") for c in chunks)
        with pytest.raises(ConfigError, match="--stop is not used by the protein recipe"):
            system.generate(GenerationRequest("MK", stop="K"))
    else:
        (filled,) = system.predict(["MK_V_"])[0].lines()  # a FilledProtein
        assert len(filled) == 5 and filled[:2] == "MK" and filled[3] == "V" and "_" not in filled
        with pytest.raises(DataError, match="has no _ to fill"):
            system.predict(["MKV"])
        with pytest.raises(ConfigError, match=r"^a masked protein model does not generate; train model.objective"):
            system.generate(GenerationRequest("MK"))


def test_masked_validation_scores_fixed_masks_and_training_draws_fresh_ones(data):
    config = config_of(f"data.train_path={data}", "model.objective=masked", *TINY, *STEPS, *SPLIT)
    run = protein.prepare(config)
    parts = run.validate.__self__
    assert parts.validate(run.model) == parts.validate(run.model)  # the same masks each time
    first, second = (next(iter(parts.train_batches(1, torch.Generator().manual_seed(s), 4))) for s in (0, 1))
    assert first.input_ids.shape == (4, 16) and not torch.equal(first.input_ids, second.input_ids)
    loss = parts.loss(run.model, first)
    assert loss.num_tokens == int((first.labels != -100).sum())


def test_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "bad.faa"
    bad.write_text(">a\nMK1\n")
    empty = tmp_path / "empty.faa"
    empty.write_text("")
    binary = tmp_path / "b.faa"
    binary.write_bytes(b">a\x00\x01\n")
    cases = {
        bad: f"{bad}:2: '1' is no amino-acid code (ACDEFGHIKLMNPQRSTVWYUOBZJX)",
        empty: f"{empty}: no '>' header, so no sequence (an empty file or not FASTA)",
        binary: f"{binary}:1: not a text file",
    }
    for path, message in cases.items():
        with pytest.raises(DataError) as error:
            protein.prepare(config_of(f"data.train_path={path}"))
        assert str(error.value).startswith(message)
    with pytest.raises(ConfigError, match=r"^--set: \[model\] objective \('both'\) must be one of 'causal', 'masked'"):
        config_of("model.objective=both")


def test_the_command_line_trains_and_refuses_in_one_line(data, tmp_path):
    out = tmp_path / "out"
    assert_error(
        run_cli("train", "protein", "--out", out, "--set", "model.objective=both"),
        "--set: [model] objective ('both') must be one of 'causal', 'masked'",
    )
    result = run_cli("train", "protein", "--out", out, "--no-progress", "--set", f"data.train_path={data}", *TINY,
                     *STEPS, *SPLIT)  # fmt: skip
    assert result.code == 0, result.err
    generated = run_cli("generate", out, "--prompt", "MK", "--seed", "3")
    assert generated.code == 0 and generated.out.startswith("MK") and generated.out.count("\n") == 1
