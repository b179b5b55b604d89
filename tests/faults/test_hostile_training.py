"""Divergence: a non-finite loss or gradient skips the step and is counted; too many in a row stop the run with a
DivergenceError (exit 3 from the command line); a non-finite validation or model is never the best."""

import math

import pytest
import torch
from torch import nn

from seqlab.errors import DivergenceError
from seqlab.training.trainer import LossOutput, TrainConfig, Trainer


def data():
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(0))
    return x, x.sum(dim=1, keepdim=True)


def batches(epoch, generator, batch_size):
    x, y = data()
    for start in range(0, len(x), batch_size):
        yield x[start : start + batch_size], y[start : start + batch_size]


def mse(model, batch):
    x, y = batch
    return LossOutput(nn.functional.mse_loss(model(x), y), len(x))


def validate(model):
    x, y = data()
    return {"valid_loss": nn.functional.mse_loss(model(x), y).item()}


def fit(model, *, loss_fn=mse, validate=validate, on_best=None, **config):
    config = TrainConfig(**{"batch_size": 4, "max_epochs": 2, "patience": None, "lr": 0.01, **config})
    trainer = Trainer(
        model,
        config,
        loss_fn=loss_fn,
        train_batches=batches,
        validate=validate,
        on_best=on_best,
        progress=False,
        log=None,
    )
    return trainer.fit()


def nan_at(steps):
    calls = []

    def loss_fn(model, batch):
        calls.append(1)
        out = mse(model, batch)
        return LossOutput(out.loss * math.nan, out.num_tokens) if len(calls) in steps else out

    return loss_fn


def test_non_finite_steps_are_skipped_counted_and_change_nothing():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    seen = {}

    def loss_fn(model, batch):
        seen[len(seen) + 1] = {k: v.clone() for k, v in model.state_dict().items()}
        out = mse(model, batch)
        return LossOutput(out.loss * math.nan, out.num_tokens) if len(seen) in {2, 3, 6} else out

    result = fit(model, loss_fn=loss_fn)
    assert [r["skipped_steps"] for r in result.history] == [2, 1]  # steps 2, 3 in epoch 1; step 6 in epoch 2
    assert result.steps == 8
    for skipped in (2, 3):  # a skipped step leaves the parameters as they were
        assert all(torch.equal(seen[skipped][k], seen[skipped + 1][k]) for k in seen[skipped])
    assert all(math.isfinite(r["train_loss"]) for r in result.history)


def test_too_many_non_finite_steps_in_a_row_stop_the_run_naming_the_step():
    with pytest.raises(DivergenceError, match=r"^training diverged: 3 steps in a row .* the latest step 4 \(epoch 1\)"):
        fit(nn.Linear(3, 1), loss_fn=nan_at({2, 3, 4}), max_nonfinite_steps=3)


def test_a_non_finite_validation_is_never_the_best_and_all_non_finite_is_divergence():
    values = iter([math.inf, 2.0, math.nan])
    best = []
    result = fit(nn.Linear(3, 1), validate=lambda m: {"valid_loss": next(values)}, on_best=lambda m, r: best.append(r))
    assert result.best["valid_loss"] == 2.0 and [r["valid_loss"] for r in best] == [2.0]
    with pytest.raises(DivergenceError, match="no validation had a finite valid_loss"):
        fit(nn.Linear(3, 1), validate=lambda m: {"valid_loss": math.nan})


def test_a_model_with_non_finite_weights_is_never_saved_as_best():
    def corrupting_validate(model):  # a finite loss, but the weights hold an inf (as after an overflowing step)
        metrics = validate(model)
        model.bias.fill_(math.inf)
        return metrics

    best = []
    with pytest.raises(DivergenceError, match="no validation had a finite valid_loss and finite parameters"):
        fit(nn.Linear(3, 1), validate=corrupting_validate, on_best=lambda m, r: best.append(r))
    assert best == []
