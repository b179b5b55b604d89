"""``seqlab average``: a run directory of averaged weights that evaluate and predict take like any run."""

import json
import shutil
from pathlib import Path

import torch
from cli_helpers import assert_error, run_cli
from safetensors.torch import load_file, save_file

from seqlab.files import is_bookkeeping

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
RNN, TRANSFORMER, DICTIONARY = FIXTURES / "g2p_v0_1", FIXTURES / "g2p_transformer_v0_1", FIXTURES / "train.dict"


def _evaluate(run):
    result = run_cli("evaluate", run, "--data", DICTIONARY, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_the_average_of_a_run_with_itself_is_the_run(tmp_path):
    out = tmp_path / "averaged"
    result = run_cli("average", out, RNN, RNN)
    assert result.code == 0, result.err
    assert result.out == f"averaged 2 runs into {out}\n"
    written = sorted(p.name for p in out.iterdir() if not is_bookkeeping(p.name))
    assert written == sorted([p.name for p in RNN.iterdir()] + ["averaged_from.json"])
    averaged, original = load_file(out / "model.safetensors"), load_file(RNN / "model.safetensors")
    assert averaged.keys() == original.keys() and all(torch.equal(averaged[k], original[k]) for k in original)
    assert _evaluate(out) == _evaluate(RNN)
    assert run_cli("predict", out, "cat", "dog").out == run_cli("predict", RNN, "cat", "dog").out


def test_the_average_of_two_runs_holds_the_mean_weights(tmp_path):
    shifted = tmp_path / "shifted"
    shutil.copytree(RNN, shifted)
    weights = load_file(RNN / "model.safetensors")
    save_file({k: v + 1.0 for k, v in weights.items()}, str(shifted / "model.safetensors"))
    assert run_cli("average", tmp_path / "out", RNN, shifted).code == 0
    averaged = load_file(tmp_path / "out" / "model.safetensors")
    for key, tensor in weights.items():
        torch.testing.assert_close(averaged[key], tensor + 0.5)
    assert json.loads((tmp_path / "out" / "averaged_from.json").read_text()) == {"runs": [str(RNN), str(shifted)]}


def test_average_refuses_other_architectures_vocabularies_and_an_occupied_out(tmp_path):
    out = tmp_path / "out"
    result = run_cli("average", out, RNN, TRANSFORMER)
    assert result.code == 2 and result.err.startswith(
        f"seqlab: error: {TRANSFORMER}: another architecture than {RNN} ("
    )
    assert not out.exists()
    other = tmp_path / "other"
    shutil.copytree(RNN, other)
    (other / "source_vocab.json").write_text(json.dumps({"symbols": ["<pad>", "<s>", "</s>", "z"]}))
    assert_error(
        run_cli("average", out, RNN, other),
        f"{other}: source_vocab.json differs from {RNN}'s; averaged runs must share it",
    )
    assert_error(run_cli("average", out, RNN), "average needs at least two runs, got 1")
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert_error(
        run_cli("average", out, RNN, RNN), f"{out}: already exists and is not empty; pass --overwrite to replace it"
    )
    assert (out / "keep.txt").read_text() == "mine"
