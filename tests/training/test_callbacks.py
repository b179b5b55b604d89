import json
import math

import pytest
import torch
from torch import nn

from seqlab.training.callbacks import METRICS_FILE, Callback, MetricsLog, tensorboard_available
from seqlab.training.objectives import LossOutput
from seqlab.training.records import RECORD_KEYS, StepRecord, TrainResult
from seqlab.training.trainer import TrainConfig, Trainer

STEP_KEYS = {"event", "step", "epoch", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "seconds"}


def regression_trainer(config, **kwargs):
    """A linear model on 32 rows; with batch_size 8 an epoch has 4 steps."""
    torch.manual_seed(0)
    x = torch.randn(32, 3)
    y = x @ torch.tensor([[1.5], [-2.0], [0.5]])

    def train_batches(epoch, generator, batch_size):
        order = torch.randperm(len(x), generator=generator)
        return [(x[order[i : i + batch_size]], y[order[i : i + batch_size]]) for i in range(0, len(x), batch_size)]

    def loss_fn(model, batch):
        return LossOutput(nn.functional.mse_loss(model(batch[0]), batch[1]), len(batch[0]))

    kwargs.setdefault("validate", lambda model: {"valid_loss": nn.functional.mse_loss(model(x), y).item()})
    return Trainer(
        nn.Linear(3, 1), config, loss_fn=loss_fn, train_batches=train_batches, progress=False, log=None, **kwargs
    )


class Recorder(Callback):
    def __init__(self, name, events):
        self.name, self.events = name, events

    def on_step_end(self, model, step):
        assert isinstance(step, StepRecord) and model.training
        self.events.append((self.name, "step", step.step))

    def on_validation_end(self, model, record):
        self.events.append((self.name, "validation", record["step"]))

    def on_best(self, model, record):
        self.events.append((self.name, "best", record["step"]))

    def on_train_end(self, model, result):
        assert isinstance(result, TrainResult)
        self.events.append((self.name, "train_end", result.steps))


def test_callbacks_fire_on_each_event_in_order():
    events = []
    values = iter([3.0, 2.0, 2.5, 1.0])
    config = TrainConfig(batch_size=8, max_epochs=2, validate_every=3, patience=None)
    regression_trainer(
        config,
        validate=lambda model: {"valid_loss": next(values)},
        on_best=lambda model, record: events.append(("on_best", "best", record["step"])),
        callbacks=[Recorder("a", events), Recorder("b", events)],
    ).fit()
    # 4 steps per epoch: validations at steps 3, 4 (epoch end), 6 and 8 (epoch end); improvements at 3, 4, 8.
    expected = []
    for step in range(1, 9):
        expected += [("a", "step", step), ("b", "step", step)]
        if step in (3, 4, 6, 8):
            expected += [("a", "validation", step), ("b", "validation", step)]
        if step in (3, 4, 8):
            expected += [("on_best", "best", step), ("a", "best", step), ("b", "best", step)]
    expected += [("a", "train_end", 8), ("b", "train_end", 8)]
    assert events == expected


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_metrics_jsonl_holds_one_record_per_step_and_per_validation(tmp_path):
    run_dir = tmp_path / "run"  # created by the trainer
    config = TrainConfig(lr=0.05, batch_size=8, max_epochs=2, patience=None)
    result = regression_trainer(config, run_dir=run_dir).fit()
    records = read_jsonl(run_dir / METRICS_FILE)
    steps = [r for r in records if r["event"] == "step"]
    validations = [r for r in records if r["event"] == "validation"]
    assert [r["event"] for r in records] == (["step"] * 4 + ["validation"]) * 2
    assert all(set(r) == STEP_KEYS for r in steps)
    assert [(r["step"], r["epoch"]) for r in steps] == [(s, 1 + (s - 1) // 4) for s in range(1, 9)]
    assert all(r["tokens"] == 8 and r["lr"] == 0.05 for r in steps)
    assert all(math.isfinite(r["loss"]) and r["loss"] > 0 for r in steps)
    assert all(math.isfinite(r["grad_norm"]) and r["grad_norm"] > 0 for r in steps)
    assert all(r["tokens_per_s"] > 0 for r in steps)
    seconds = [r["seconds"] for r in records]
    assert seconds == sorted(seconds) and seconds[0] >= 0
    assert seconds[-1] <= result.seconds
    # The validation records are the history; each one's train_loss and grad_norm summarise its 4 steps.
    assert [{k: v for k, v in r.items() if k != "event"} for r in validations] == result.history
    for epoch, record in enumerate(validations):
        epoch_steps = steps[4 * epoch : 4 * epoch + 4]
        assert record["train_loss"] == pytest.approx(sum(r["loss"] for r in epoch_steps) / 4, rel=1e-12)
        assert record["grad_norm"] == pytest.approx(sum(r["grad_norm"] for r in epoch_steps) / 4, rel=1e-12)
        assert set(record) == RECORD_KEYS | {"event", "valid_loss"}
    assert steps[-1]["loss"] < steps[0]["loss"]


def test_metrics_jsonl_is_extended_never_overwritten(tmp_path):
    config = TrainConfig(batch_size=8, max_epochs=1)
    regression_trainer(config, run_dir=tmp_path).fit()
    regression_trainer(config, run_dir=tmp_path).fit()
    assert [r["step"] for r in read_jsonl(tmp_path / METRICS_FILE)] == [1, 2, 3, 4, 4] * 2


def test_without_run_dir_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    regression_trainer(TrainConfig(batch_size=8, max_epochs=1)).fit()
    assert list(tmp_path.iterdir()) == []


def test_without_tensorboard_the_run_dir_holds_only_metrics_jsonl(tmp_path, monkeypatch):
    monkeypatch.setattr("seqlab.training.callbacks.tensorboard_available", lambda: False)
    regression_trainer(TrainConfig(batch_size=8, max_epochs=1), run_dir=tmp_path).fit()
    assert [p.name for p in tmp_path.iterdir()] == [METRICS_FILE]


def test_tensorboard_event_files_are_written_when_tensorboard_is_installed(tmp_path):
    pytest.importorskip("tensorboard")
    assert tensorboard_available()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    regression_trainer(TrainConfig(batch_size=8, max_epochs=2), run_dir=tmp_path).fit()
    assert list(tmp_path.glob("events.out.tfevents.*"))
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == list(range(1, 9))
    assert [e.step for e in events.Scalars("valid/valid_loss")] == [4, 8]


def test_rewind_keeps_what_a_resumed_run_will_not_write_again(tmp_path):
    path = tmp_path / "metrics.jsonl"
    records = [
        {"event": "step", "step": 1},
        {"event": "step", "step": 2},
        {"event": "validation", "step": 2},
        {"event": "step", "step": 3},
        {"event": "validation", "step": 3},
        {"event": "step", "step": 4},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"event": "st')  # a kill mid-append
    MetricsLog(path).rewind(step=3, validated_at=2)  # the checkpoint came after step 3, before its validation
    assert [json.loads(line) for line in path.read_text().splitlines()] == records[:4]
