"""Training-state checkpoints: the file format round-trips bit for bit, and a fit resumed from any checkpoint
ends where the uninterrupted fit ends (the independent reference: the same fit without interruption)."""

import dataclasses
import math
import random
import time
from typing import NamedTuple

import numpy as np
import pytest
import torch
from torch import nn

from seqlab.errors import CheckpointError
from seqlab.nn.functional.recurrence import LSTMState
from seqlab.training.checkpoint import (
    load_training_state,
    restore_training_state,
    rng_state,
    save_training_state,
    set_rng_state,
    training_state,
)
from seqlab.training.run_state import RunState
from seqlab.training.trainer import LossOutput, TrainConfig, Trainer


def assert_identical(a, b):
    """Equal values of equal types, tensors bit for bit (dtype included), all the way down."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_identical(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_identical(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b


def test_a_nested_state_round_trips_bit_for_bit(tmp_path):
    weight = torch.randn(3, 4)
    state = {
        "optimizer": {"state": {0: {"step": torch.tensor(3.0), "exp_avg": weight}, 1: {"momentum_buffer": None}}},
        "groups": [{"betas": (0.9, 0.999), "lr": 1e-3, "params": [0, 1]}],
        "view": weight[:, 1],  # a strided view of a tensor stored too
        "half": torch.randn(5, dtype=torch.bfloat16),
        "lstm": LSTMState(torch.zeros(1, 2, 3), torch.ones(1, 2, 3)),
        "floats": [0.1, 1 / 3, math.inf, math.nan, -0.0],
        "empty": {},
        "text": "é",
    }
    save_training_state(tmp_path / "state.safetensors", state)
    assert_identical(load_training_state(tmp_path / "state.safetensors"), state)


class Other(NamedTuple):
    a: int


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"x": Other(1)}, "/x: NamedTuple Other is not registered in STATE_TYPES"),
        ({"x": {(1, 2): 3}}, r"/x: dict key \(1, 2\) is neither a str nor an int"),
        ({"x": object()}, "/x: cannot checkpoint a object"),
    ],
)
def test_what_cannot_be_saved_is_refused_and_nothing_is_written(tmp_path, state, message):
    with pytest.raises(TypeError, match=message):
        save_training_state(tmp_path / "state.safetensors", state)
    assert list(tmp_path.iterdir()) == []


def test_rng_states_restore_every_generator():
    saved = rng_state()
    drawn = (random.random(), np.random.rand(), torch.rand(3))
    set_rng_state(saved)
    assert (random.random(), np.random.rand()) == drawn[:2]
    assert torch.equal(torch.rand(3), drawn[2])


def test_numpys_cached_gaussian_is_restored_through_a_checkpoint(tmp_path):
    # The legacy generator draws normals in pairs and caches the second: after an odd number of draws the next
    # normal is that cached value, which a restored state must hold too (and Python's random.gauss likewise).
    np.random.seed(3)
    random.seed(3)
    np.random.standard_normal(3)
    random.gauss(0.0, 1.0)
    assert np.random.get_state()[3] == 1  # has_gauss
    save_training_state(tmp_path / "state.safetensors", {"rng": rng_state()})
    drawn = (np.random.standard_normal(3).tolist(), random.gauss(0.0, 1.0), np.random.rand())
    set_rng_state(load_training_state(tmp_path / "state.safetensors")["rng"])
    assert (np.random.standard_normal(3).tolist(), random.gauss(0.0, 1.0), np.random.rand()) == drawn


class CountingStrategy:
    """A strategy carrying a tensor between batches, so its state has something to restore."""

    def __init__(self, count):
        self.count = torch.tensor(count)

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state):
        self.count = state["count"]


@dataclasses.dataclass
class Parts:
    """A ``TrainingParts`` that is not a Trainer: the checkpoint needs nothing else (issue 21)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    strategy: CountingStrategy
    device: torch.device


def make_parts(seed, steps):
    torch.manual_seed(seed)
    model = nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 / (1 + step))
    for _ in range(steps):
        model(torch.randn(4, 3)).square().sum().backward()
        optimizer.step()
        scheduler.step()
    return Parts(
        model,
        optimizer,
        scheduler,
        torch.amp.GradScaler("cpu", enabled=False),
        CountingStrategy(steps),
        torch.device("cpu"),
    )


def test_a_state_restores_into_any_training_parts_not_only_a_trainer():
    saved = make_parts(seed=0, steps=3)
    run = RunState(
        start=time.perf_counter(), step=3, stale=1, epoch_generator=torch.Generator().manual_seed(7).get_state()
    )
    state = training_state(saved, run, epoch=2, stopped_by=None)
    restored, restored_run, generator = make_parts(seed=1, steps=1), RunState(start=0.0), torch.Generator()
    assert restore_training_state(restored, state, restored_run, generator) == (2, None)
    for part in ("model", "optimizer", "scheduler", "strategy"):
        assert_identical(getattr(restored, part).state_dict(), getattr(saved, part).state_dict())
    assert (restored_run.step, restored_run.stale) == (3, 1)
    assert torch.equal(generator.get_state(), run.epoch_generator)


# --- resuming Trainer.fit -----------------------------------------------------------------------------------


def make_data():
    x = torch.randn(36, 3, generator=torch.Generator().manual_seed(0))
    return x, x @ torch.tensor([[1.5], [-2.0], [0.5]]) + 0.3


def fit(config, checkpoint=None, resume_from=None):
    """A fit of a dropout MLP on shuffled batches: (model, TrainResult, trainer)."""
    x, y = make_data()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Dropout(0.3), nn.Linear(8, 1))

    def train_batches(epoch, generator, batch_size):
        order = torch.randperm(len(x), generator=generator)
        return ((x[i], y[i]) for i in order.split(batch_size))

    trainer = Trainer(
        model,
        config,
        loss_fn=lambda m, batch: LossOutput(nn.functional.mse_loss(m(batch[0]), batch[1]), len(batch[0])),
        train_batches=train_batches,
        validate=lambda m: {"valid_loss": nn.functional.mse_loss(m(x), y).item()},
        progress=False,
        log=None,
        checkpoint=checkpoint,
    )
    result = trainer.fit(resume_from=resume_from)
    return model, result, trainer


CONFIGS = {
    "adam-accumulation": TrainConfig(batch_size=8, grad_accumulation_steps=2, max_steps=20, validate_every=3),
    "sgd-nesterov-cosine": TrainConfig(
        batch_size=6, optimizer="sgd", momentum=0.9, nesterov=True, schedule="cosine", max_steps=20, warmup_steps=4
    ),
    "adamw-early-stopping": TrainConfig(batch_size=8, optimizer="adamw", weight_decay=0.1, patience=1, lr=0.3),
}


def saver(directory):
    """A ``checkpoint`` callable that writes each state to its own file (the state holds live tensors)."""
    paths = []

    def save(state):
        paths.append(directory / f"{len(paths)}.safetensors")
        save_training_state(paths[-1], state)

    return save, paths


@pytest.mark.parametrize("name", CONFIGS)
def test_a_fit_resumed_from_any_checkpoint_ends_as_the_uninterrupted_fit(tmp_path, name):
    config = dataclasses.replace(CONFIGS[name], checkpoint_every=1)
    save, paths = saver(tmp_path)
    model, result, trainer = fit(config, checkpoint=save)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    assert len(paths) >= result.steps
    for path in paths[:: max(1, len(paths) // 6)]:
        resumed, resumed_result, resumed_trainer = fit(config, resume_from=load_training_state(path))
        for key, value in expected.items():
            assert torch.equal(resumed.state_dict()[key], value), (path.name, key)
        assert resumed_result.steps == result.steps and resumed_result.stopped_by == result.stopped_by
        timing = {"tokens_per_s", "seconds"}
        for resumed_record, record in zip(resumed_result.history, result.history, strict=True):
            assert {k: v for k, v in resumed_record.items() if k not in timing} == {
                k: v for k, v in record.items() if k not in timing
            }
        assert_identical(resumed_trainer.optimizer.state_dict(), trainer.optimizer.state_dict())


def test_a_state_of_another_model_is_a_checkpoint_error(tmp_path):
    save, paths = saver(tmp_path)
    fit(TrainConfig(batch_size=8, max_steps=2, checkpoint_every=1), checkpoint=save)
    state = load_training_state(paths[0])
    state["model"]["0.weight"] = torch.zeros(4, 3)
    with pytest.raises(CheckpointError, match=r"^the training checkpoint does not fit this run \(Error\(s\) in "):
        fit(TrainConfig(batch_size=8, max_steps=2), resume_from=state)
    state = load_training_state(paths[1])
    del state["scheduler"]
    with pytest.raises(CheckpointError, match=r"^the training checkpoint does not fit this run \('scheduler'\)$"):
        fit(TrainConfig(batch_size=8, max_steps=2), resume_from=state)
