import dataclasses
import math
import re

import pytest
import torch
from torch import nn

from seqlab.config import apply_overrides
from seqlab.errors import ConfigError
from seqlab.training.schedules import (
    inverse_sqrt,
    lambda_lr,
    lr_multiplier,
    warmup_constant,
    warmup_cosine,
)
from seqlab.training.trainer import LossOutput, TrainConfig, Trainer


def values(multiplier, steps):
    return [multiplier(s) for s in steps]


# ---------------------------------------------------------------- multipliers by hand


def test_inverse_sqrt_ramps_linearly_peaks_at_warmup_and_decays_as_one_over_sqrt():
    m = inverse_sqrt(4)
    assert values(m, [1, 2, 3, 4]) == pytest.approx([0.25, 0.5, 0.75, 1.0], abs=1e-15)
    assert values(m, [5, 9, 16, 100]) == pytest.approx([math.sqrt(4 / 5), 2 / 3, 0.5, 0.2], abs=1e-15)


def test_inverse_sqrt_is_vaswani_eq_3_with_the_constant_folded_into_lr():
    d_model, warmup = 512, 4000
    peak = d_model**-0.5 * warmup**-0.5  # Vaswani's lrate at step = warmup_steps
    m = inverse_sqrt(warmup)
    for step in [1, 100, 3999, 4000, 4001, 10_000, 100_000]:
        vaswani = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert peak * m(step) == pytest.approx(vaswani, rel=1e-12)


def test_inverse_sqrt_without_warmup_starts_at_the_peak():
    assert values(inverse_sqrt(0), [1, 4, 25]) == pytest.approx([1.0, 0.5, 0.2], abs=1e-15)


def test_warmup_cosine_values():
    m = warmup_cosine(2, 6, min_ratio=0.1)
    expected = [
        0.5,  # warmup 1/2
        1.0,  # peak at step = warmup
        0.1 + 0.9 * (1 + math.cos(math.pi / 4)) / 2,  # progress 1/4
        0.55,  # progress 1/2: halfway between peak and floor
        0.1 + 0.9 * (1 + math.cos(3 * math.pi / 4)) / 2,
        0.1,  # total_steps: the end value min_ratio
        0.1,  # stays there
        0.1,
    ]
    assert values(m, range(1, 9)) == pytest.approx(expected, abs=1e-15)


def test_warmup_cosine_without_warmup_and_to_zero():
    m = warmup_cosine(0, 4)
    assert values(m, [1, 2, 3, 4, 5]) == pytest.approx(
        [(1 + math.cos(math.pi / 4)) / 2, 0.5, (1 + math.cos(3 * math.pi / 4)) / 2, 0.0, 0.0], abs=1e-15
    )


def test_warmup_constant_values():
    assert values(warmup_constant(3), [1, 2, 3, 4, 50]) == pytest.approx([1 / 3, 2 / 3, 1, 1, 1], abs=1e-15)
    assert values(warmup_constant(0), [1, 2, 1000]) == [1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    ("schedule", "reference"),
    [
        ("constant", warmup_constant(3)),
        ("inverse_sqrt", inverse_sqrt(3)),
        ("cosine", warmup_cosine(3, 10)),
    ],
)
def test_lr_multiplier_picks_the_named_schedule(schedule, reference):
    m = lr_multiplier(schedule, warmup_steps=3, total_steps=10)
    assert values(m, range(1, 13)) == values(reference, range(1, 13))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: inverse_sqrt(-1), "warmup_steps (-1) must be an integer >= 0"),
        (lambda: warmup_constant(2.5), "warmup_steps (2.5) must be an integer >= 0"),
        (lambda: warmup_cosine(5, 5), "total_steps (5) must be an integer > warmup_steps (5)"),
        (lambda: warmup_cosine(0, None), "total_steps (None) must be an integer > warmup_steps (0)"),
        (lambda: warmup_cosine(0, 10, min_ratio=1.5), "min_ratio (1.5) must be in [0, 1]"),
        (lambda: warmup_cosine(0, 10, min_ratio=float("nan")), "min_ratio (nan) must be in [0, 1]"),
        (lambda: lr_multiplier("linear"), "schedule ('linear') must be one of 'constant', 'inverse_sqrt', 'cosine'"),
        (lambda: lr_multiplier("cosine"), "schedule 'cosine' needs total_steps, the step where its decay ends"),
        (
            lambda: inverse_sqrt(4)(0),
            "step (0) must be >= 1: steps count from 1 (use lambda_lr to drive LambdaLR)",
        ),
    ],
)
def test_schedule_errors(make, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        make()


# ---------------------------------------------------------------- LambdaLR


def test_lambda_lr_gives_step_s_the_rate_lr_times_m_s():
    param = nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([param], lr=0.5)
    m = warmup_cosine(3, 8, min_ratio=0.2)
    scheduler = lambda_lr(optimizer, m)
    used = []
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: used.append(opt.param_groups[0]["lr"]))
    for _ in range(10):
        param.grad = torch.ones(2)
        optimizer.step()
        scheduler.step()
    assert used == pytest.approx([0.5 * m(s) for s in range(1, 11)], abs=1e-15)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.5 * m(11), abs=1e-15)
    # SGD moved the parameter by exactly the sum of the rates used.
    torch.testing.assert_close(param.detach(), torch.full((2,), -sum(used)), rtol=1e-6, atol=0)


# ---------------------------------------------------------------- trainer integration


def linear_regression_trainer(config, *, num_batches=4):
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    x = torch.randn(8 * num_batches, 3, generator=torch.Generator().manual_seed(1))
    y = x.sum(dim=1, keepdim=True)

    def loss_fn(model, batch):
        xb, yb = batch
        return LossOutput(nn.functional.mse_loss(model(xb), yb), len(xb))

    def train_batches(epoch, generator, batch_size):  # fixed batches of 8: the schedule is under test
        return [(x[i : i + 8], y[i : i + 8]) for i in range(0, len(x), 8)]

    def validate(model):
        return {"valid_loss": nn.functional.mse_loss(model(x), y).item()}

    return Trainer(
        model, config, loss_fn=loss_fn, train_batches=train_batches, validate=validate, progress=False, log=None
    )


@pytest.mark.parametrize(
    ("schedule", "warmup_steps", "multiplier"),
    [
        ("inverse_sqrt", 3, inverse_sqrt(3)),
        ("cosine", 2, warmup_cosine(2, 9)),
        ("constant", 4, warmup_constant(4)),
    ],
)
def test_trainer_follows_the_schedule_and_logs_each_steps_lr(schedule, warmup_steps, multiplier):
    lr, max_steps = 0.02, 9
    config = TrainConfig(
        lr=lr, schedule=schedule, warmup_steps=warmup_steps, max_steps=max_steps, validate_every=1, patience=None
    )
    trainer = linear_regression_trainer(config)
    used = []
    trainer.optimizer.register_step_pre_hook(lambda opt, args, kwargs: used.append(opt.param_groups[0]["lr"]))
    result = trainer.fit()
    expected = [lr * multiplier(s) for s in range(1, max_steps + 1)]
    assert result.steps == max_steps
    assert used == pytest.approx(expected, abs=1e-15)
    assert [r["lr"] for r in result.history] == used  # validate_every=1: one record per step
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(lr * multiplier(max_steps + 1), abs=1e-15)


def test_default_config_keeps_lr_constant_and_records_it():
    trainer = linear_regression_trainer(TrainConfig(lr=0.01, max_epochs=2))
    result = trainer.fit()
    assert trainer.optimizer.param_groups[0]["lr"] == 0.01
    assert [r["lr"] for r in result.history] == [0.01, 0.01]


def test_validate_may_not_return_the_lr_key():
    trainer = linear_regression_trainer(TrainConfig(max_epochs=1))
    trainer.validate = lambda model: {"valid_loss": 1.0, "lr": 0.1}
    with pytest.raises(ValueError, match=r"^validate returned keys \['lr'\] that the trainer reserves"):
        trainer.fit()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"schedule": "linear"}, "schedule ('linear') must be one of 'constant', 'inverse_sqrt', 'cosine'"),
        ({"warmup_steps": -1}, "warmup_steps (-1) must be an integer >= 0 and <= 1000000000"),
        ({"warmup_steps": 1.5}, "warmup_steps (1.5) must be an integer >= 0 and <= 1000000000"),
        ({"schedule": "cosine"}, "schedule 'cosine' needs max_steps, the step where its decay ends"),
        (
            {"schedule": "cosine", "max_steps": 100, "warmup_steps": 100},
            "warmup_steps (100) must be < max_steps (100) for schedule 'cosine'",
        ),
    ],
)
def test_train_config_schedule_messages_show_the_bad_value(kwargs, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        TrainConfig(**kwargs)


def test_schedule_fields_convert_from_the_command_line():
    @dataclasses.dataclass(frozen=True)
    class RecipeConfig:
        train: TrainConfig = dataclasses.field(default_factory=TrainConfig)

    config = apply_overrides(
        RecipeConfig(), {"train.schedule": "cosine", "train.warmup_steps": "10", "train.max_steps": "200"}
    )
    assert (config.train.schedule, config.train.warmup_steps, config.train.max_steps) == ("cosine", 10, 200)
    with pytest.raises(
        ConfigError, match=r"^--set train\.schedule: 'noam' is not one of constant, inverse_sqrt, cosine$"
    ):
        apply_overrides(RecipeConfig(), {"train.schedule": "noam"})
