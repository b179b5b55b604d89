"""Data-parallel training: 2 CPU processes with gloo against one process with the same global batches, in float64."""

import os
import socket
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from cli_helpers import assert_error, run_cli
from safetensors.torch import load_file, save_file
from torch import nn

from seqlab.data.batching import batch_iterator
from seqlab.models.seq2seq.rnn import RNNSeq2Seq, RNNSeq2SeqConfig
from seqlab.training.checkpoint import load_training_state, save_training_state
from seqlab.training.distributed import process_group, shard_batch
from seqlab.training.objectives import LossOutput, teacher_forcing_loss
from seqlab.training.trainer import TrainConfig, Trainer

VOCAB, SEQUENCES, LENGTH = 7, 13, 5


class TokenModel(nn.Module):
    """Embedding -> GRU -> Linear: a tiny next-token model. The loss calls ``logits``, not ``forward``, and
    never uses ``pooler`` (as a masked LM leaves BERT's pooler unused): DDP must cope with both."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 6)
        self.rnn = nn.GRU(6, 8, batch_first=True)
        self.out = nn.Linear(8, VOCAB)
        self.pooler = nn.Linear(8, 8)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.rnn(self.embed(x))[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pooler(self.logits(x))


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    """13 sequences of 5 tokens with 1 to 5 real ones, so ranks' shares have different token counts."""
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (SEQUENCES, LENGTH + 1), generator=g)
    lengths = torch.randint(1, LENGTH + 1, (SEQUENCES,), generator=g)
    keep = torch.arange(LENGTH) < lengths[:, None]
    return tokens, keep


def _loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> LossOutput:
    tokens, keep = batch
    logits = model.logits(tokens[:, :-1])
    return LossOutput(F.cross_entropy(logits[keep], tokens[:, 1:][keep]), int(keep.sum()))


def _train_batches(epoch: int, generator: torch.Generator, batch_size: int):
    tokens, keep = _data()
    order = torch.randperm(SEQUENCES, generator=generator)
    for start in range(0, SEQUENCES, batch_size):
        rows = order[start : start + batch_size]
        yield tokens[rows], keep[rows]


def _validate(model: nn.Module) -> dict[str, float]:
    tokens, keep = _data()
    return {"valid_loss": _loss(model, (tokens, keep)).loss.item()}


# batch_size 4 in 2 micro-batches of 2: the epoch's last micro-batch has 1 sequence, so rank 1's share is empty.
CONFIG = TrainConfig(
    lr=0.02, batch_size=4, grad_accumulation_steps=2, max_epochs=2, patience=None, device="cpu", checkpoint_every=1
)


def _trainer(out: Path, tag: str, **kwargs) -> Trainer:
    torch.manual_seed(0)
    model = TokenModel().double()
    return Trainer(
        model,
        CONFIG,
        loss_fn=_loss,
        train_batches=_train_batches,
        validate=_validate,
        progress=False,
        log=None,
        run_dir=out / f"logs-{tag}",
        on_best=lambda m, record: (out / f"best-{tag}").touch(),
        **kwargs,
    )


def _seq2seq_trainer() -> Trainer:
    """seqlab's attention RNN seq2seq on padded batches of pairs of 1-6 tokens: a share keeps the global padding."""
    g = torch.Generator().manual_seed(2)
    pairs = [
        tuple(torch.randint(3, 9, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g).tolist() for _ in "st")
        for _ in range(15)
    ]
    torch.manual_seed(0)
    config = RNNSeq2SeqConfig(src_vocab_size=9, tgt_vocab_size=9, embedding_size=4, hidden_size=6, dropout=0.0)
    return Trainer(
        RNNSeq2Seq(config).double(),
        TrainConfig(lr=0.01, batch_size=6, grad_accumulation_steps=2, max_epochs=1, device="cpu"),
        loss_fn=teacher_forcing_loss,
        train_batches=lambda epoch, generator, size: batch_iterator(
            pairs, batch_size=size, shuffle=True, generator=generator
        ),
        validate=lambda model: {"valid_loss": 0.0},
        progress=False,
        log=None,
    )


def _worker(rank: int, out: Path, port: int) -> None:
    """One rank: a fit with a checkpoint after step 3, then a fit resumed from it; each rank saves its weights."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    with process_group():
        saved = out / "state.safetensors"

        def checkpoint(state):
            (out / f"checkpoint-{rank}").touch()
            if state["run"]["step"] == 3:
                save_training_state(saved, state)

        trainer = _trainer(out, str(rank), checkpoint=checkpoint)
        trainer.fit()
        save_file(trainer.model.state_dict(), out / f"weights-{rank}.safetensors")
        torch.distributed.barrier()  # rank 0 has written the checkpoint
        resumed = _trainer(out, f"resumed-{rank}")
        resumed.fit(resume_from=load_training_state(saved))
        save_file(resumed.model.state_dict(), out / f"resumed-{rank}.safetensors")
        seq2seq = _seq2seq_trainer()
        seq2seq.fit()
        save_file(seq2seq.model.state_dict(), out / f"seq2seq-{rank}.safetensors")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ddp")
    torch.multiprocessing.start_processes(_worker, args=(out, _free_port()), nprocs=2, start_method="fork")
    return out


def test_two_processes_give_the_weights_of_one_process(two_ranks, tmp_path):
    single = _trainer(tmp_path, "single")
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
    single = _seq2seq_trainer()
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
