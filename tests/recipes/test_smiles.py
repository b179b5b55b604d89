"""The smiles recipe on a small SMILES file the test writes: it trains a few steps, its results hold the test
perplexity, the unigram baseline and the sample scores; the saved run evaluates, predicts and generates through its
System; SELFIES samples decode to molecules; the test part alone; bad input gets one line. Generated to order:
each molecule follows its property bin's token in the stream and the model's outputs depend on it; a conditioned
run reports validity and in-bin shares per bin, an unconditional one the share of its samples in each bin; bad
condition settings and prompts get one line."""

import json
import math

import pytest
import torch
from cli_helpers import assert_error, run_cli

from seqlab.config import apply_overrides, parse_assignments
from seqlab.data.molecule_properties import PropertyBins
from seqlab.data.molecules import MoleculeTokenizer, canonical_smiles
from seqlab.errors import ConfigError, DataError
from seqlab.models import GPT
from seqlab.recipes import smiles
from seqlab.recipes.base import run_training
from seqlab.recipes.system import GenerationRequest

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


def config_of(data, *extra: str) -> smiles.Config:
    assignments = [f"data.train_path={data}", *TINY, *STEPS, *SPLIT, *extra]
    return apply_overrides(smiles.Config(), parse_assignments(assignments))


def train(data, out, *extra):
    run_training(smiles, config_of(data, *extra), out, progress=False, log=lambda line: None)
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


def test_evaluate_predict_and_generate_from_the_saved_run(run, tmp_path):
    out, _ = run
    system = smiles.System.load(out)
    test = tmp_path / "t.smi"
    test.write_text("CCO\nc1ccccc1\n")
    assert "perplexity" in system.evaluate(str(test))
    (scored,) = system.predict(["CCO"])
    assert scored.loss > 0 and scored.lines() == [f"CCO\t{scored.loss:.4f}"]
    request = GenerationRequest("c1cc", num_return_sequences=3, seed=1)
    chunks = list(system.generate(request))
    assert [(c.index, c.finished) for c in chunks] == [(0, True), (1, True), (2, True)]
    assert chunks == list(system.generate(request))
    assert all("\n" not in c.text for c in chunks)
    with pytest.raises(ConfigError, match=r"^--stop is not used by the smiles recipe: a sample ends with its molecule"):
        system.generate(GenerationRequest("C", stop="O"))
    with pytest.raises(DataError):
        system.predict(["CC[Xe]"])


def test_the_test_part_alone_scores_samples_against_the_training_molecules(data):
    run = smiles.prepare(config_of(data))
    report = run.test()  # the untrained model: its samples are still scored, beside the unigram sampler's
    assert {"test_loss", "unigram_loss", "validity", "uniqueness", "novelty", "unigram_validity"} <= set(report.results)
    assert [row[0] for row in report.examples] == [f"sample {i}" for i in range(1, 6)]
    assert run.test() == report  # seeded by sample.seed


def test_selfies_samples_decode_to_molecules(data, tmp_path):
    """A SELFIES string always decodes to a molecule; only one that decodes to nothing (an empty sample) is
    invalid."""
    out = tmp_path / "selfies"
    results = train(data, out, "data.representation=selfies")
    system = smiles.System.load(out)
    for chunk in system.generate(GenerationRequest("[C]", num_return_sequences=5, seed=0)):
        selfies, molecule = ("[C]" + chunk.text).split("\t")
        assert selfies.startswith("[C]") and canonical_smiles(molecule) is not None
    assert results["validity"] >= 50


def test_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "bad.smi"
    bad.write_text("CCO\nC1CC\n")
    empty = tmp_path / "empty.smi"
    empty.write_text("")
    cases = {
        bad: f"{bad}:2: RDKit cannot parse the SMILES 'C1CC'",
        empty: f"{empty}: no molecules (the file is empty)",
        tmp_path / "none.smi": f"{tmp_path / 'none.smi'}: no such file",
    }
    for path, message in cases.items():
        with pytest.raises(DataError) as error:
            smiles.prepare(config_of(path))
        assert str(error.value) == message


def test_recipes_documents_it():
    result = run_cli("recipes", "smiles")
    assert result.code == 0
    assert "data.representation" in result.out and "WEHI" in result.out


def test_unconditional_samples_fall_in_the_bins_as_a_baseline(run):
    """Every valid sample lies in exactly one bin: the bins' shares add up to the validity."""
    _, results = run
    shares = [results[f"bin{b}_in_bin"] for b in range(3)]
    assert sum(shares) == pytest.approx(results["validity"])
    assert "bin0_validity" not in results


def conditioned_system(num_bins: int = 3) -> smiles.SmilesSystem:
    tokenizer = MoleculeTokenizer.train(MOLECULES, "smiles")
    bins = PropertyBins("mw", (40.0, 60.0, 80.0)[: num_bins - 1])
    data = smiles.SmilesDataConfig(condition="prefix", property="mw", num_bins=num_bins)
    config = smiles.Config(data=data, model=smiles.GPTSectionConfig(d_model=16, num_heads=2, num_layers=1))
    torch.manual_seed(0)
    model = GPT(config.model.model_config(vocab_size=smiles.SmilesSystem.vocab_size(tokenizer, bins)))
    return smiles.SmilesSystem(model.eval(), tokenizer, config, bins)


def test_each_molecule_follows_its_bins_token_in_the_stream():
    system = conditioned_system()
    tokenizer, V = system.tokenizer, system.tokenizer.vocab_size
    assert system.model.config.vocab_size == V + 3  # one token per bin after the tokenizer's
    ids = system.stream(["CCCCC", "CC", "CCC"], source="test")  # 72.2, 30.1, 44.1 g/mol: bins 2, 0, 1
    C, eos = tokenizer.encode("C")[0], tokenizer.eos_id
    expected = [eos, V + 2, C, C, C, C, C, eos, V + 0, C, C, eos, V + 1, C, C, C, eos]
    assert ids.tolist() == expected
    assert system.text([C, V + 1, C]) == "C<bin 1>C"


def test_the_model_sees_the_bins_token():
    """Outputs before the bin token are unchanged (causal), every output from it on changes with the bin."""
    system = conditioned_system()
    V, C = system.tokenizer.vocab_size, system.tokenizer.encode("C")[0]
    with torch.no_grad():
        low, high = (system.model(torch.tensor([[0, V + b, C, C]])).logits for b in (0, 2))
    torch.testing.assert_close(low[:, 0], high[:, 0])
    assert (low[0, 1:] - high[0, 1:]).abs().amax(dim=-1).min() > 1e-4
    (prompt, prefix), (bare, _) = system.prompt_ids("2:CC"), system.prompt_ids("0")
    assert prompt == [0, V + 2, C, C] and prefix == "CC" and bare == [0, V]


def test_a_conditioned_run_reports_validity_and_in_bin_shares_per_bin(data, tmp_path):
    out = tmp_path / "conditioned"
    results = train(data, out, "data.condition=prefix", "data.property=mw", "data.num_bins=2")
    for b in range(2):
        assert 0 <= results[f"bin{b}_in_bin"] <= results[f"bin{b}_validity"] <= 100
    assert {"validity", "uniqueness", "novelty", "unigram_validity"} <= set(results)
    system = smiles.System.load(out)
    assert system.bins is not None and system.bins.name == "mw" and system.bins.num_bins == 2
    assert len(list(system.generate(GenerationRequest("1:C", num_return_sequences=2, seed=0)))) == 2
    edges = f"mw bins 0: < {system.bins.edges[0]:.4g}, 1: >= {system.bins.edges[0]:.4g}"
    for prompt in ("2", "x:C", "C"):
        assert_error(
            run_cli("generate", out, "--prompt", prompt),
            f"--prompt {prompt!r}: this run generates to order; give B or B:PREFIX, B a bin from 0 to 1 ({edges})",
        )


def test_bad_condition_settings_are_one_line(data, tmp_path):
    cases = {
        "data.condition=logp": "--set data.condition: 'logp' is not one of prefix, none",
        "data.property=tpsa": "--set: [data] property ('tpsa') must be one of 'logp', 'qed', 'mw'",
        "data.num_bins=1": "--set: [data] num_bins (1) must be an integer >= 2 and <= 100",
    }
    for setting, message in cases.items():
        assert_error(run_cli("train", "smiles", "--out", tmp_path / "r", "--set", setting), message)
    with pytest.raises(DataError, match=r"give equal bin edges .*: use fewer than 100 bins$"):
        smiles.prepare(config_of(data, "data.condition=prefix", "data.num_bins=100"))
