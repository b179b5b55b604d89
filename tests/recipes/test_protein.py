"""The protein recipe through the command line on a small FASTA file the test writes, causal and masked: it trains
a few steps and reports the model beside the unigram baseline; evaluate, predict and generate work from the saved
run; bad input gets one line and exit 2."""

import json
import math
import random

import pytest
from cli_helpers import assert_error, run_cli

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


@pytest.fixture(scope="module", params=["causal", "masked"])
def run(request, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / request.param
    settings = [f"data.train_path={data}", f"model.objective={request.param}", *TINY, *STEPS, *SPLIT]
    result = run_cli("train", "protein", "--out", out, "--no-progress", "--set", *settings)
    assert result.code == 0, result.err
    return request.param, out, json.loads((out / "results.json").read_text())


def test_training_reports_the_model_beside_the_unigram_baseline(run):
    objective, _, results = run
    assert results["test_perplexity"] == pytest.approx(math.exp(results["test_loss"]), rel=1e-4)
    assert results["unigram_perplexity"] == pytest.approx(math.exp(results["unigram_loss"]), rel=1e-4)
    if objective == "masked":
        assert 0 <= results["test_accuracy"] <= 100 and 0 <= results["unigram_accuracy"] <= 100


def test_evaluate_predict_and_generate_from_the_saved_run(run, tmp_path):
    objective, out, _ = run
    test = tmp_path / "t.faa"
    test.write_text(">a\nMKLVACDEFGHIKLMNPQRSTVWY\n>b\nMSTVWYACDE\n")
    evaluated = run_cli("evaluate", out, "--data", test)
    assert evaluated.code == 0, evaluated.err
    assert "perplexity" in evaluated.out
    if objective == "causal":
        predicted = run_cli("predict", out, "MKLV")
        assert predicted.code == 0, predicted.err
        assert predicted.out.startswith("MKLV\t")
        generated = run_cli("generate", out, "--prompt", "MK", "--num-samples", "2", "--seed", "3")
        assert generated.code == 0, generated.err
        assert [line[:2] for line in generated.out.splitlines()] == ["MK", "MK"]
    else:
        predicted = run_cli("predict", out, "MK_V_")
        assert predicted.code == 0, predicted.err
        filled = predicted.out.strip()
        assert len(filled) == 5 and filled[:2] == "MK" and filled[3] == "V" and "_" not in filled
        assert_error(run_cli("generate", out, "--prompt", "MK"),
                     f"{out}: a masked protein model does not generate; train model.objective=causal")  # fmt: skip


def test_bad_input_is_one_line(tmp_path):
    out = tmp_path / "out"
    bad = tmp_path / "bad.faa"
    bad.write_text(">a\nMK1\n")
    assert_error(run_cli("train", "protein", "--out", out, "--set", f"data.train_path={bad}"),
                 f"{bad}:2: '1' is no amino-acid code (ACDEFGHIKLMNPQRSTVWYUOBZJX)")  # fmt: skip
    empty = tmp_path / "empty.faa"
    empty.write_text("")
    assert_error(run_cli("train", "protein", "--out", out, "--set", f"data.train_path={empty}"),
                 f"{empty}: no '>' header, so no sequence (an empty file or not FASTA)")  # fmt: skip
    binary = tmp_path / "b.faa"
    binary.write_bytes(b">a\x00\x01\n")
    result = run_cli("train", "protein", "--out", out, "--set", f"data.train_path={binary}")
    assert result.code == 2 and result.err.startswith(f"seqlab: error: {binary}:1: not a text file")
    assert_error(run_cli("train", "protein", "--out", out, "--set", "model.objective=both"),
                 "--set: [model] objective ('both') must be one of 'causal', 'masked'")  # fmt: skip
    assert not out.exists()
