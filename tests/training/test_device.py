import dataclasses
import math
import random
import re
from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.batching import batch_iterator
from seqlab.errors import ConfigError
from seqlab.models.seq2seq.rnn import RNNSeq2Seq, RNNSeq2SeqConfig
from seqlab.models.seq2seq.transformer import TransformerSeq2Seq, TransformerSeq2SeqConfig
from seqlab.training.callbacks import Callback
from seqlab.training.device import autocast, move_to_device, resolve_device, resolve_precision
from seqlab.training.objectives import LossOutput, teacher_forcing_loss
from seqlab.training.trainer import TrainConfig, Trainer

# ---------------------------------------------------------------- device="auto"


def pretend(monkeypatch, *, cuda, mps):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)


@pytest.mark.parametrize(
    ("cuda", "mps", "expected"),
    [(True, True, "cuda"), (True, False, "cuda"), (False, True, "mps"), (False, False, "cpu")],
)
def test_auto_picks_cuda_then_mps_then_cpu(monkeypatch, cuda, mps, expected):
    pretend(monkeypatch, cuda=cuda, mps=mps)
    assert resolve_device("auto") == torch.device(expected)
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("name", ["cuda", "mps"])
def test_a_named_device_that_is_missing_is_refused(monkeypatch, name):
    pretend(monkeypatch, cuda=False, mps=False)
    message = f"device ('{name}') is not available here; use device 'auto' or 'cpu'"
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        resolve_device(name)


def test_fp16_on_the_cpu_is_refused_with_one_line():
    config = TrainConfig(device="cpu", precision="fp16")
    message = "precision ('fp16') needs a CUDA or MPS device, and training runs on the cpu; use 'bf16'"
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        Trainer(nn.Linear(2, 1), config, loss_fn=None, train_batches=None, validate=None)


# ---------------------------------------------------------------- moving batches


class Pair(NamedTuple):
    x: torch.Tensor
    lengths: list


@dataclasses.dataclass(frozen=True)
class Batch:
    pair: Pair
    extra: dict
    name: str
    count: int = 3


def test_move_to_device_moves_every_nested_tensor_and_keeps_the_structure():
    batch = Batch(
        Pair(torch.zeros(2, 3), [torch.ones(2), 4]),
        {"mask": torch.ones(2, dtype=torch.bool), "ids": (torch.arange(3), None)},
        "words",
    )
    moved = move_to_device(batch, torch.device("meta"))  # a real move that needs no accelerator
    assert type(moved) is Batch and type(moved.pair) is Pair and isinstance(moved.pair.lengths, list)
    tensors = [moved.pair.x, moved.pair.lengths[0], moved.extra["mask"], moved.extra["ids"][0]]
    assert all(t.device.type == "meta" for t in tensors)
    assert [t.dtype for t in tensors] == [torch.float32, torch.float32, torch.bool, torch.int64]
    assert (moved.pair.lengths[1], moved.extra["ids"][1], moved.name, moved.count) == (4, None, "words", 3)
    assert batch.pair.x.device.type == "cpu"  # the input is not modified


def test_the_trainer_gives_the_strategy_each_batch_moved_to_its_device(monkeypatch):
    moves, seen = [], []

    def spy(batch, device):
        moves.append((batch, device))
        return ("moved", batch)

    monkeypatch.setattr("seqlab.training.trainer.move_to_device", spy)

    def loss_fn(model, batch):
        seen.append(batch)
        return LossOutput(model(torch.ones(1, 2)).sum(), 1)

    trainer = Trainer(
        nn.Linear(2, 1),
        TrainConfig(batch_size=2, max_epochs=1),
        loss_fn=loss_fn,
        train_batches=lambda epoch, generator, batch_size: ["a", "b"],
        validate=lambda model: {"valid_loss": 0.0},
        progress=False,
        log=None,
    )
    trainer.fit()
    assert trainer.device == resolve_device("auto")
    assert moves == [("a", trainer.device), ("b", trainer.device)]
    assert seen == [("moved", "a"), ("moved", "b")]


# ---------------------------------------------------------------- precision


def test_fp32_runs_without_autocast_and_bf16_casts_matrix_products():
    x, layer = torch.randn(2, 3), nn.Linear(3, 4)
    with autocast("fp32", torch.device("cpu")):
        assert layer(x).dtype == torch.float32
    with autocast("bf16", torch.device("cpu")):
        assert layer(x).dtype == torch.bfloat16


def test_the_cpu_feature_checks_auto_precision_reads_are_in_this_torch():
    # private torch.cpu functions (no public API tells whether the CPU has AVX512-BF16 or AMX): an upgrade that
    # removes them fails here rather than in a user's run
    assert isinstance(torch.cpu._is_avx512_bf16_supported(), bool)
    assert isinstance(torch.cpu._is_amx_tile_supported(), bool)


def pretend_cpu_bf16(monkeypatch, *, avx512_bf16, amx):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)


@pytest.mark.parametrize(
    ("avx512_bf16", "amx", "expected"),
    [(False, False, "fp32"), (True, False, "bf16"), (False, True, "bf16"), (True, True, "bf16")],
)
def test_auto_precision_is_bf16_only_on_a_cpu_that_multiplies_bf16_natively(monkeypatch, avx512_bf16, amx, expected):
    pretend_cpu_bf16(monkeypatch, avx512_bf16=avx512_bf16, amx=amx)
    assert resolve_precision("auto", torch.device("cpu")) == expected
    for named in ("fp32", "bf16", "fp16"):  # a named precision is kept whatever the hardware
        assert resolve_precision(named, torch.device("cpu")) == named


@pytest.mark.parametrize(("native", "dtype"), [(False, torch.float32), (True, torch.bfloat16)])
def test_a_run_with_auto_precision_trains_its_forward_pass_in_the_resolved_dtype(monkeypatch, native, dtype):
    pretend_cpu_bf16(monkeypatch, avx512_bf16=native, amx=False)
    layer, seen = nn.Linear(3, 1), []

    def loss_fn(model, batch):
        out = model(batch)
        seen.append(out.dtype)
        return LossOutput(out.float().pow(2).mean(), 1)

    config = TrainConfig(batch_size=2, max_epochs=1, patience=None, device="cpu", precision="auto")
    trainer = Trainer(
        layer,
        config,
        loss_fn=loss_fn,
        train_batches=lambda epoch, generator, batch_size: [torch.randn(2, 3)],
        validate=lambda model: {"valid_loss": 0.0},
        progress=False,
        log=None,
    )
    trainer.fit()
    assert (trainer.precision, seen) == ("bf16" if native else "fp32", [dtype])
    assert not trainer.scaler.is_enabled()


def reversal_pairs(n=48, seed=0):
    """Copy-in-reverse pairs over symbols 3..10 (0, 1, 2 are pad, bos, eos)."""
    rng = random.Random(seed)
    sources = [[rng.randrange(3, 11) for _ in range(rng.randrange(2, 6))] for _ in range(n)]
    return [(s, s[::-1]) for s in sources]


@pytest.mark.parametrize(
    "model",
    [
        lambda: RNNSeq2Seq(RNNSeq2SeqConfig(11, 11, embedding_size=16, hidden_size=32, encoder_layers=1, dropout=0.0)),
        lambda: TransformerSeq2Seq(
            TransformerSeq2SeqConfig(11, 11, d_model=32, num_heads=2, d_ff=64, encoder_layers=1, decoder_layers=1)
        ),
    ],
    ids=["rnn", "transformer"],
)
def test_a_tiny_seq2seq_trains_in_bf16_on_the_cpu_with_a_falling_loss(model):
    torch.manual_seed(0)
    model = model()
    pairs = reversal_pairs()
    dtypes = set()

    def loss_fn(model, batch):
        dtypes.add(model(batch.src, batch.src_lengths, batch.tgt_in).logits.dtype)
        return teacher_forcing_loss(model, batch)

    def validate(model):
        batch = next(batch_iterator(pairs, batch_size=len(pairs), shuffle=False))
        logits = model(batch.src, batch.src_lengths, batch.tgt_in).logits
        return {"valid_loss": F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=0).item()}

    config = TrainConfig(lr=1e-2, batch_size=16, max_epochs=8, patience=None, device="cpu", precision="bf16")
    result = Trainer(
        model,
        config,
        loss_fn=loss_fn,
        train_batches=lambda epoch, generator, batch_size: batch_iterator(
            pairs, batch_size=batch_size, shuffle=True, generator=generator
        ),
        validate=validate,
        progress=False,
        log=None,
    ).fit()
    losses = [record["train_loss"] for record in result.history]
    assert dtypes == {torch.bfloat16}  # the forward pass ran under bf16 autocast
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the parameters stayed fp32
    assert losses[-1] < 0.6 * losses[0], losses
    assert result.best["valid_loss"] < 0.6 * result.history[0]["valid_loss"]


def test_under_a_gradient_scaler_an_overflowing_step_is_skipped_not_raised():
    """fp16's control flow, run on the CPU by giving the trainer an enabled GradScaler (fp16 itself needs CUDA)."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    x, y = torch.randn(4, 3), torch.randn(4, 1)
    overflow_at = {2}
    steps, snapshots = [], []

    class Watch(Callback):
        def on_step_end(self, model, step):
            steps.append(step)
            snapshots.append([p.detach().clone() for p in model.parameters()])

    def loss_fn(model, batch):
        loss = nn.functional.mse_loss(model(x), y)
        if len(steps) + 1 in overflow_at:
            handles = []

            def overflow(grad):  # once: the hook would stay on the parameter
                handles.pop().remove()
                return grad * float("inf")

            handles.append(model.weight.register_hook(overflow))
        return LossOutput(loss, 4)

    trainer = Trainer(
        model,
        TrainConfig(batch_size=4, max_steps=3, clip_norm=None, device="cpu", validate_every=3),
        loss_fn=loss_fn,
        train_batches=lambda epoch, generator, batch_size: [None] * 3,
        validate=lambda model: {"valid_loss": 0.0},
        callbacks=[Watch()],
        progress=False,
        log=None,
    )
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    result = trainer.fit()
    assert [math.isfinite(s.grad_norm) for s in steps] == [True, False, True]
    assert all(torch.equal(a, b) for a, b in zip(snapshots[0], snapshots[1], strict=True))  # step 2 was skipped
    assert not torch.equal(snapshots[1][0], snapshots[2][0])  # step 3 was applied
    assert trainer.scaler.get_scale() == 512.0  # halved once, at the overflow
    assert trainer.scheduler.steps_taken == 2  # the skipped step consumed no learning rate
    assert result.history[0]["grad_norm"] == pytest.approx((steps[0].grad_norm + steps[2].grad_norm) / 2)
