"""The smiles recipe through the command line on a small SMILES file the test writes: it trains a few steps, its
results hold the test perplexity, the unigram baseline and the sample scores; evaluate, predict and generate work
from the saved run; SELFIES samples decode to molecules; bad input gets one line and exit 2."""

import json
import math

import pytest
from cli_helpers import assert_error, run_cli

from seqlab.data.molecules import canonical_smiles

MOLECULES = [
    "CCO", "CCN", "CCC", "CCCl", "CCBr", "c1ccccc1", "Cc1ccccc1", "Oc1ccccc1", "Nc1ccccc1", "CC(=O)O",
    "CC(=O)N", "CC(C)O", "CC(C)N", "OCCO", "NCCN", "CCOCC", "CCNCC", "C1CCCCC1", "C1CCNCC1", "C1CCOCC1",
]  # fmt: skip
TINY = ["model.d_model=16", "model.num_heads=2", "model.num_layers=1", "model.context_length=16"]
STEPS = ["train.max_steps=6", "data.batches_per_epoch=3", "train.batch_size=4", "sample.count=20"]
SPLIT = ["data.valid_fraction=0.1", "data.test_fraction=0.1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "molecules.smi"
    path.write_text("smiles\n" + "\n".join(MOLECULES * 3) + "\n")
    return path


def train(data, out, *extra):
    result = run_cli("train", "smiles", "--out", out, "--no-progress", "--set", f"data.train_path={data}",
                     *TINY, *STEPS, *SPLIT, *extra)  # fmt: skip
    assert result.code == 0, result.err
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def run(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "smiles"
    return out, train(data, out)


def test_training_reports_perplexity_baseline_and_sample_scores(run):
    _, results = run
    assert results["test_perplexity"] == pytest.approx(math.exp(results["test_loss"]), rel=1e-4)
    assert results["unigram_perplexity"] == pytest.approx(math.exp(results["unigram_loss"]), rel=1e-4)
    for name in ("validity", "uniqueness", "novelty", "unigram_validity"):
        assert 0 <= results[name] <= 100


def test_evaluate_predict_and_generate_from_the_saved_run(run, data, tmp_path):
    out, _ = run
    test = tmp_path / "t.smi"
    test.write_text("CCO\nc1ccccc1\n")
    evaluated = run_cli("evaluate", out, "--data", test)
    assert evaluated.code == 0, evaluated.err
    assert "perplexity" in evaluated.out
    predicted = run_cli("predict", out, "CCO")
    assert predicted.code == 0, predicted.err
    molecule, loss = predicted.out.strip().split("\t")
    assert molecule == "CCO" and float(loss) > 0
    generated = run_cli("generate", out, "--prompt", "c1cc", "--num-samples", "3", "--seed", "1")
    assert generated.code == 0, generated.err
    lines = generated.out.splitlines()
    assert len(lines) == 3 and all(line.startswith("c1cc") for line in lines)
    again = run_cli("generate", out, "--prompt", "c1cc", "--num-samples", "3", "--seed", "1")
    assert again.out == generated.out


def test_selfies_samples_decode_to_molecules(data, tmp_path):
    """A SELFIES string always decodes to a molecule; only one that decodes to nothing (an empty sample) is
    invalid."""
    out = tmp_path / "selfies"
    results = train(data, out, "data.representation=selfies")
    generated = run_cli("generate", out, "--prompt", "[C]", "--num-samples", "5", "--seed", "0")
    assert generated.code == 0, generated.err
    for line in generated.out.splitlines():
        selfies, smiles = line.split("\t")
        assert selfies.startswith("[C]") and canonical_smiles(smiles) is not None
    assert results["validity"] >= 50


def test_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "bad.smi"
    bad.write_text("CCO\nC1CC\n")
    out = tmp_path / "out"
    assert_error(run_cli("train", "smiles", "--out", out, "--set", f"data.train_path={bad}"),
                 f"{bad}:2: RDKit cannot parse the SMILES 'C1CC'")  # fmt: skip
    empty = tmp_path / "empty.smi"
    empty.write_text("")
    assert_error(run_cli("train", "smiles", "--out", out, "--set", f"data.train_path={empty}"),
                 f"{empty}: no molecules (the file is empty)")  # fmt: skip
    assert_error(run_cli("train", "smiles", "--out", out, "--set", f"data.train_path={tmp_path / 'none.smi'}"),
                 f"{tmp_path / 'none.smi'}: no such file")  # fmt: skip
    assert not out.exists()


def test_recipes_documents_it():
    result = run_cli("recipes", "smiles")
    assert result.code == 0
    assert "data.representation" in result.out and "WEHI" in result.out
