"""The ranks of tests/training/test_distributed.py: a module of its own so that ``torch.multiprocessing``
can start them with ``spawn`` (a fresh interpreter imports ``worker`` by name). Forking pytest after
thousands of tests, with torch's thread pools running, can leave a child blocked on a lock it inherited."""

import os
import socket
from datetime import timedelta
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from seqlab.data.batching import batch_iterator
from seqlab.models.seq2seq.rnn import RNNSeq2Seq, RNNSeq2SeqConfig
from seqlab.training.checkpoint import load_training_state, save_training_state
from seqlab.training.distributed import process_group
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


def make_trainer(out: Path, tag: str, **kwargs) -> Trainer:
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


def seq2seq_trainer() -> Trainer:
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


def worker(rank: int, out: Path, port: int) -> None:
    """One rank: a fit with a checkpoint after step 3, then a fit resumed from it; each rank saves its weights."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    with process_group(timeout=timedelta(seconds=120)):  # a lost rank fails the test, never hangs it
        saved = out / "state.safetensors"

        def checkpoint(state):
            (out / f"checkpoint-{rank}").touch()
            if state["run"]["step"] == 3:
                save_training_state(saved, state)

        trainer = make_trainer(out, str(rank), checkpoint=checkpoint)
        trainer.fit()
        save_file(trainer.model.state_dict(), out / f"weights-{rank}.safetensors")
        torch.distributed.barrier()  # rank 0 has written the checkpoint
        resumed = make_trainer(out, f"resumed-{rank}")
        resumed.fit(resume_from=load_training_state(saved))
        save_file(resumed.model.state_dict(), out / f"resumed-{rank}.safetensors")
        seq2seq = seq2seq_trainer()
        seq2seq.fit()
        save_file(seq2seq.model.state_dict(), out / f"seq2seq-{rank}.safetensors")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
