"""Data-parallel training: 2 CPU processes with gloo against one process with the same global batches, in float64."""

from pathlib import Path

import pytest
import torch
from cli_helpers import assert_error, run_cli
from ddp_ranks import free_port, make_trainer, seq2seq_trainer, worker
from safetensors.torch import load_file

from seqlab.training.distributed import shard_batch


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ddp")
    torch.multiprocessing.start_processes(worker, args=(out, free_port()), nprocs=2, start_method="spawn")
    return out


def test_two_processes_give_the_weights_of_one_process(two_ranks, tmp_path):
    single = make_trainer(tmp_path, "single")
    initial = {name: value.clone() for name, value in single.model.state_dict().items()}
    single.fit()
    expected = single.model.state_dict()
    for rank in (0, 1):
        weights = load_file(two_ranks / f"weights-{rank}.safetensors")
        assert weights.keys() == expected.keys()
        for name, value in expected.items():
            assert weights[name].dtype == torch.float64
            assert (weights[name] - value).abs().max().item() <= 1e-12, name
            assert torch.equal(value, initial[name]) == name.startswith("pooler.")  # training moved the rest


def test_two_processes_train_a_seq2seq_model_on_padded_batches_as_one_process(two_ranks):
    single = seq2seq_trainer()
    single.fit()
    for rank in (0, 1):
        weights = load_file(two_ranks / f"seq2seq-{rank}.safetensors")
        assert (
            max((weights[name] - value).abs().max().item() for name, value in single.model.state_dict().items())
            <= 1e-12
        )


def test_a_resumed_two_process_run_ends_with_the_uninterrupted_weights(two_ranks):
    uninterrupted = load_file(two_ranks / "weights-0.safetensors")
    for rank in (0, 1):
        resumed = load_file(two_ranks / f"resumed-{rank}.safetensors")
        assert all(torch.equal(resumed[name], value) for name, value in uninterrupted.items())


def test_only_rank_0_writes(two_ranks):
    written = sorted(path.name for path in two_ranks.iterdir())
    assert "checkpoint-0" in written and "best-0" in written and "logs-0" in written and "best-resumed-0" in written
    assert not [name for name in written if name.endswith("-1") and not name.startswith(("weights", "resumed"))]
    assert (two_ranks / "logs-0" / "metrics.jsonl").read_text().count('"event": "step"') == 8  # 2 epochs of 4 steps


def test_shard_batch_splits_rows_as_tensor_split():
    x, lengths = torch.arange(10).reshape(5, 2), torch.arange(5)
    shares = [shard_batch({"x": x, "n": (lengths, 3)}, rank, 3) for rank in range(3)]
    for share, rows in zip(shares, torch.tensor_split(torch.arange(5), 3), strict=True):
        assert not share.empty
        assert torch.equal(share.batch["x"], x[rows]) and torch.equal(share.batch["n"][0], lengths[rows])
        assert share.batch["n"][1] == 3
    empty = shard_batch((x[:1], lengths[:1]), 1, 2)
    assert empty.empty and torch.equal(empty.batch[0], x[:1])


def test_shard_batch_refuses_tensors_of_different_batch_sizes():
    with pytest.raises(ValueError, match=r"got sizes \[2, 3\]"):
        shard_batch((torch.zeros(2, 4), torch.zeros(3)), 0, 2)


@pytest.mark.parametrize("nproc", ["0", "-1"])
def test_a_bad_nproc_is_one_line(tmp_path, nproc):
    assert_error(
        run_cli("train", "vowels", "--out", tmp_path / "run", "--nproc", nproc), f"--nproc ({nproc}) must be >= 1"
    )
    assert not (tmp_path / "run").exists()


VOWELS = ["model.hidden_size=8", "model.dropout=0", "train.max_steps=3", "train.batch_size=8", "train.device=cpu"]


@pytest.mark.slow
def test_seqlab_train_nproc_2_saves_the_model_of_one_process(tmp_path, capfd):
    """Through the CLI and torchrun's launcher (float32, so equal up to rounding); rank 1 writes no file."""
    assert run_cli("train", "vowels", "--out", tmp_path / "one", "--no-progress", "--set", *VOWELS).code == 0
    assert (
        run_cli("train", "vowels", "--out", tmp_path / "two", "--no-progress", "--nproc", 2, "--set", *VOWELS).code == 0
    )
    captured = capfd.readouterr()  # the workers' output (run_cli captures only this process's)
    assert captured.err.count("checkpoint: ") == 1 and captured.out.count("accuracy") == 1  # rank 1 printed nothing
    one, two = (load_file(tmp_path / name / "model.safetensors") for name in ("one", "two"))
    assert all(torch.allclose(one[name], two[name], rtol=0, atol=1e-6) for name in one)
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == sorted(p.name for p in (tmp_path / "two").iterdir())


@pytest.mark.slow
def test_an_error_in_the_workers_is_one_line(tmp_path, capfd):
    settings = ["data.train_path=/nonexistent.ts", "data.test_path=/nonexistent.ts"]
    result = run_cli("train", "vowels", "--out", tmp_path / "run", "--nproc", 2, "--set", *settings)
    assert result.code == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and err.startswith("seqlab: error: ") and "/nonexistent.ts" in err, err
    assert not (tmp_path / "run").exists()
