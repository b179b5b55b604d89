import copy
import dataclasses
import math
import re

import pytest
import torch
from torch import nn

from seqlab.config import apply_overrides
from seqlab.errors import ConfigError
from seqlab.models.language_model import zaremba_large, zaremba_medium, zaremba_small
from seqlab.training.callbacks import Callback
from seqlab.training.checkpoint import restore_training_state
from seqlab.training.run_state import RunState
from seqlab.training.schedules import (
    LRScheduler,
    Progress,
    budgeted_cosine,
    cosine_cycle,
    epoch_decay,
    inverse_sqrt,
    lambda_lr,
    lr_multiplier,
    lr_schedule,
    warmup_constant,
    warmup_cosine,
)
from seqlab.training.trainer import LossOutput, TrainConfig, Trainer
from seqlab.validation import MAX_STEPS


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


def lambda_lr_rates(lr, multiplier, steps):
    """The learning rates a ``LambdaLR`` (the trainer's scheduler before budgeted schedules) gives steps 1..steps."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler, rates = lambda_lr(optimizer, multiplier), []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def linear_regression_trainer(config, *, num_batches=4, clock=None):
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
        model,
        config,
        loss_fn=loss_fn,
        train_batches=train_batches,
        validate=validate,
        progress=False,
        log=None,
        clock=clock,
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
    assert result.steps == max_steps
    assert used == lambda_lr_rates(lr, multiplier, max_steps)  # today's LambdaLR, value for value
    assert [r["lr"] for r in result.history] == used  # validate_every=1: one record per step
    assert trainer.optimizer.param_groups[0]["lr"] == used[-1]  # set just before each step


def test_the_trainers_cosine_ends_at_min_lr_ratio_times_lr():
    lr, max_steps = 0.02, 9
    config = TrainConfig(lr=lr, schedule="cosine", warmup_steps=2, max_steps=max_steps, min_lr_ratio=0.1)
    trainer = linear_regression_trainer(config)
    used = []
    trainer.optimizer.register_step_pre_hook(lambda opt, args, kwargs: used.append(opt.param_groups[0]["lr"]))
    trainer.fit()
    assert used == lambda_lr_rates(lr, warmup_cosine(2, max_steps, min_ratio=0.1), max_steps)
    assert used[-1] == pytest.approx(0.1 * lr)


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
        (
            {"schedule": "linear"},
            "schedule ('linear') must be one of 'constant', 'inverse_sqrt', 'cosine', 'epoch_decay'",
        ),
        ({"warmup_steps": -1}, "warmup_steps (-1) must be an integer >= 0 and <= 1000000000"),
        ({"warmup_steps": 1.5}, "warmup_steps (1.5) must be an integer >= 0 and <= 1000000000"),
        ({"schedule": "cosine"}, "schedule 'cosine' needs max_steps or time_budget, where its decay ends"),
        (
            {"schedule": "cosine", "max_steps": 100, "warmup_steps": 100},
            "warmup_steps (100) must be < max_steps (100) for schedule 'cosine'",
        ),
        ({"min_lr_ratio": 1.5}, "min_lr_ratio (1.5) must be a finite number >= 0.0 and <= 1.0"),
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
        ConfigError, match=r"^--set train\.schedule: 'noam' is not one of constant, inverse_sqrt, cosine, epoch_decay$"
    ):
        apply_overrides(RecipeConfig(), {"train.schedule": "noam"})


# ---------------------------------------------------------------- budgeted training (Li, Yumer & Ramanan 2020)


def cosine_at(fraction):
    return 0.5 * (1.0 + math.cos(math.pi * fraction))


def test_budgeted_cosine_reaches_its_end_exactly_when_the_budget_runs_out():
    m = budgeted_cosine(0, total_steps=20_000, time_budget=540.0)
    assert m(Progress(step=6_000, elapsed=540.0)) == 0.0  # a slow machine: 6,000 steps when the budget is spent
    assert m(Progress(step=6_000, elapsed=600.0)) == 0.0  # and it stays there
    assert m(Progress(step=20_000, elapsed=100.0)) == 0.0  # a fast one: the step limit comes first


@pytest.mark.parametrize(("step", "elapsed"), [(10, 1.0), (10, 7.5), (30, 2.0), (30, 9.0), (40, 0.0), (1, 19.9)])
def test_budgeted_cosine_progress_is_the_larger_of_steps_and_time(step, elapsed):
    warmup, total, budget = 4, 44, 20.0
    m = budgeted_cosine(warmup, total_steps=total, time_budget=budget)
    decay = cosine_at(max((step - warmup) / (total - warmup), elapsed / budget))
    expected = step / warmup if step < warmup else decay
    assert m(Progress(step, elapsed=elapsed)) == expected


def test_a_cosine_without_max_steps_anneals_by_time_alone():
    m = lr_schedule("cosine", time_budget=8.0)
    assert [m(Progress(1000, elapsed=t)) for t in (0.0, 2.0, 4.0, 8.0)] == [1.0, cosine_at(0.25), cosine_at(0.5), 0.0]


@pytest.mark.parametrize("elapsed", [0.0, 3.0, 1e9])
def test_without_a_budget_every_schedule_is_todays_value_for_value(elapsed):
    for name, today in [
        ("constant", warmup_constant(3)),
        ("inverse_sqrt", inverse_sqrt(3)),
        ("cosine", warmup_cosine(3, 10)),
    ]:
        m = lr_schedule(name, warmup_steps=3, total_steps=10)
        assert [m(Progress(s, epoch=7, elapsed=elapsed)) for s in range(1, 13)] == values(today, range(1, 13))


class FakeClock:
    """Seconds that pass only when a training step reads its batch: one second per micro-batch."""

    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now


def clocked_trainer(config, clock):
    trainer = linear_regression_trainer(config, clock=clock)
    loss_fn = trainer.loss_fn

    def slow_loss(model, batch):
        clock.now += 1.0
        return loss_fn(model, batch)

    trainer.loss_fn = slow_loss
    rates = []
    trainer.optimizer.register_step_pre_hook(lambda opt, args, kwargs: rates.append(opt.param_groups[0]["lr"]))
    return trainer, rates


def test_a_budgeted_run_ends_at_the_bottom_of_its_cosine_whatever_the_clock_says():
    lr, budget = 0.02, 10.0
    config = TrainConfig(lr=lr, schedule="cosine", max_steps=20_000, time_budget=budget, max_epochs=100, patience=None)
    trainer, rates = clocked_trainer(config, FakeClock())
    result = trainer.fit()
    # Step s is set at s seconds (its micro-batch read): its rate follows t / T, 10 seconds end the run at step 10.
    assert (result.steps, result.stopped_by) == (10, "time_budget")
    assert rates == [lr * cosine_at(max(s / 20_000, s / budget)) for s in range(1, 11)]
    assert rates[-1] == 0.0


def test_a_resumed_budgeted_run_continues_its_progress_from_the_saved_elapsed_time():
    config = TrainConfig(
        lr=0.02, schedule="cosine", max_steps=20_000, time_budget=11.0, max_epochs=100, patience=None,
        checkpoint_every=3,
    )  # fmt: skip
    whole, whole_rates = clocked_trainer(config, FakeClock())
    whole.fit()
    states = []
    first, _ = clocked_trainer(config, FakeClock())
    first.checkpoint = lambda state: states.append(copy.deepcopy(state))
    first.fit()
    state = next(s for s in states if s["run"]["step"] == 6)
    assert state["elapsed"] == 6.0
    # A later process: its clock reads another time altogether; the run goes on at 6 s of its budget.
    resumed, resumed_rates = clocked_trainer(config, FakeClock(now=5_000.0))
    result = resumed.fit(resume_from=state)
    assert (result.steps, result.stopped_by) == (11, "time_budget")
    assert resumed_rates == whole_rates[6:]
    for a, b in zip(resumed.model.parameters(), whole.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_restoring_a_state_counts_its_elapsed_time_from_now():
    trainer, _ = clocked_trainer(TrainConfig(max_steps=2, checkpoint_every=1), FakeClock())
    states = []
    trainer.checkpoint = states.append
    trainer.fit()
    run = RunState(start=0.0)
    restore_training_state(trainer, states[-1], run, torch.Generator(), now=100.0)
    assert (run.start, states[-1]["elapsed"]) == (98.0, 2.0)


# ---------------------------------------------------------------- per-epoch decay (Zaremba et al. 2014)


@pytest.mark.parametrize("preset", [zaremba_small, zaremba_medium, zaremba_large])
def test_epoch_decay_is_the_zaremba_presets_lr_at(preset):
    training = preset(vocab_size=10).training
    m = epoch_decay(training.decay_factor, decay_after=training.decay_after)
    for epoch in range(1, training.epochs + 1):
        assert training.lr * m(Progress(step=1_000, epoch=epoch)) == pytest.approx(training.lr_at(epoch), rel=1e-15)


def test_the_trainer_gives_every_step_of_an_epoch_the_presets_lr_at_that_epoch():
    training = zaremba_small(vocab_size=10).training  # lr 1, halved after every epoch past the fourth
    config = TrainConfig(
        lr=training.lr, optimizer="sgd", schedule="epoch_decay", decay_factor=training.decay_factor,
        decay_after=training.decay_after, max_epochs=7, patience=None,
    )  # fmt: skip
    trainer = linear_regression_trainer(config, num_batches=3)
    steps = []

    class StepLog(Callback):
        def on_step_end(self, model, record):
            steps.append(record)

    trainer.callbacks.append(StepLog())
    result = trainer.fit()
    assert [(r.epoch, r.lr) for r in steps] == [(e, training.lr_at(e)) for e in range(1, 8) for _ in range(3)]
    assert [r["lr"] for r in result.history] == [training.lr_at(e) for e in range(1, 8)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"schedule": "epoch_decay", "decay_factor": 0.5}, "decay_factor (0.5) must be a finite number >= 1"),
        ({"schedule": "epoch_decay", "decay_after": -1}, "decay_after (-1) must be an integer >= 0 and <= 1000000000"),
        ({"decay_factor": 2.0}, "decay_factor (2.0) is used by schedule 'epoch_decay' only, not 'constant'"),
        (
            {"schedule": "cosine", "max_steps": 9, "decay_after": 3},
            "decay_after (3) is used by schedule 'epoch_decay' only, not 'cosine'",
        ),
    ],
)
def test_epoch_decay_settings_are_checked(kwargs, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        TrainConfig(**kwargs)


def test_the_scheduler_loads_the_lambda_lr_state_of_checkpoints_written_before_it():
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.5)
    old = lambda_lr(optimizer, warmup_cosine(0, 10))
    for _ in range(4):
        optimizer.step()
        old.step()
    scheduler = LRScheduler(optimizer, lr_schedule("cosine", total_steps=10))
    scheduler.load_state_dict(old.state_dict())
    assert (scheduler.steps_taken, scheduler.base_lrs) == (4, [0.5])
    assert scheduler.set_lr(epoch=1, elapsed=0.0) == warmup_cosine(0, 10)(5)  # the fifth step's, as LambdaLR's
    with pytest.raises(ValueError, match=r"^the scheduler state has 2 parameter groups, the optimizer 1$"):
        scheduler.load_state_dict({"last_epoch": 1, "base_lrs": [0.1, 0.2]})


# ---------------------------------------------------------------- cosine cycles (SGDR; snapshot ensembles)


def todays_cosine(step, elapsed, *, warmup, total, budget, r):
    """The one-cycle budgeted cosine as it was before ``cycles``, written out."""
    if step < warmup:
        return step / warmup
    fraction = 0.0 if total is None else (step - warmup) / (total - warmup)
    if budget is not None:
        fraction = max(fraction, elapsed / budget)
    return r + (1.0 - r) * 0.5 * (1.0 + math.cos(math.pi * min(1.0, fraction)))


@pytest.mark.parametrize(
    ("warmup", "total", "budget", "r"), [(0, 30, None, 0.0), (4, 31, None, 0.1), (3, 50, 7.0, 0.0), (0, None, 9.0, 0.2)]
)
def test_one_cycle_is_todays_cosine_value_for_value(warmup, total, budget, r):
    m = lr_schedule("cosine", warmup_steps=warmup, total_steps=total, time_budget=budget, min_ratio=r, cycles=1)
    for step in range(1, 60):
        for elapsed in (0.0, 0.7 * step, 1e9):
            assert m(Progress(step, elapsed=elapsed)) == todays_cosine(
                step, elapsed, warmup=warmup, total=total, budget=budget, r=r
            )


def test_three_cycles_restart_at_the_peak_and_end_at_min_lr_ratio():
    """Warmup 5, then steps 6-15, 16-25, 26-35: each cycle one cosine of 10 steps from the peak down to r."""
    r = 0.1
    m = lr_schedule("cosine", warmup_steps=5, total_steps=35, min_ratio=r, cycles=3)
    rates = {s: m(Progress(s)) for s in range(1, 41)}
    assert [rates[s] for s in range(1, 6)] == [0.2, 0.4, 0.6, 0.8, 1.0]  # warmup, once, to the peak at step 5
    one_cycle = [r + (1 - r) * cosine_at(i / 10) for i in range(1, 11)]  # the cycle's 1st..10th step
    for start in (6, 16, 26):
        assert [rates[s] for s in range(start, start + 10)] == pytest.approx(one_cycle, abs=1e-15)
    assert [rates[s] for s in (15, 25, 35, 40)] == [r, r, r, r]  # each cycle's last step, and after the last
    cycle = cosine_cycle(5, total_steps=35, cycles=3)
    assert [cycle(Progress(s)) for s in (1, 5, 6, 15, 16, 25, 26, 35, 40)] == [1, 1, 1, 1, 2, 2, 3, 3, 3]


def test_cycles_of_a_time_budget_split_the_seconds():
    m = lr_schedule("cosine", time_budget=9.0, cycles=3)
    cycle = cosine_cycle(0, time_budget=9.0, cycles=3)
    assert [m(Progress(100, elapsed=t)) for t in (0.0, 1.5, 3.0, 4.5, 6.0, 9.0)] == [
        1.0, cosine_at(0.5), 0.0, cosine_at(0.5), 0.0, 0.0
    ]  # fmt: skip
    assert [cycle(Progress(100, elapsed=t)) for t in (0.0, 3.0, 3.1, 6.0, 6.1, 9.0, 99.0)] == [1, 1, 2, 2, 3, 3, 3]
    # the step limit or the clock, whichever is further on: step 20 of 30 (x = 2) at 1 s of 9 is cycle 2's end
    both = cosine_cycle(0, total_steps=30, time_budget=9.0, cycles=3)
    assert (both(Progress(20, elapsed=1.0)), both(Progress(21, elapsed=1.0)), both(Progress(2, elapsed=7.0))) == (
        2,
        3,
        3,
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: budgeted_cosine(0, total_steps=10, cycles=0), "cycles (0) must be an integer >= 1"),
        (lambda: cosine_cycle(0, total_steps=10, cycles=1.5), "cycles (1.5) must be an integer >= 1"),
        (
            lambda: cosine_cycle(0, total_steps=10, cycles=2)(Progress(0)),
            "step (0) must be >= 1: steps count from 1 (use lambda_lr to drive LambdaLR)",
        ),
    ],
)
def test_cycle_errors(make, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        make()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"schedule": "cosine", "max_steps": 9, "cycles": 0}, f"cycles (0) must be an integer >= 1 and <= {MAX_STEPS}"),
        ({"schedule": "constant", "cycles": 3}, "cycles (3) is used by schedule 'cosine' only, not 'constant'"),
        ({"schedule": "inverse_sqrt", "cycles": 2}, "cycles (2) is used by schedule 'cosine' only, not 'inverse_sqrt'"),
        (
            {"schedule": "cosine", "max_steps": 9, "warmup_steps": 2, "cycles": 8},
            "cycles (8) must be <= max_steps - warmup_steps (7): each cycle needs a step",
        ),
    ],
)
def test_train_config_refuses_bad_cycles_in_one_line(kwargs, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        TrainConfig(**kwargs)


class CycleEnds(Callback):
    """Records each step's weights and each ``on_cycle_end`` with the weights the model holds then."""

    def __init__(self):
        self.after_step, self.ends = {}, []

    def on_step_end(self, model, step):
        self.after_step[step.step] = copy.deepcopy(model.state_dict())

    def on_cycle_end(self, model, cycle, step):
        self.ends.append((cycle, step, copy.deepcopy(model.state_dict())))


def test_the_trainer_ends_each_cycle_with_the_weights_of_its_last_step():
    lr, r = 0.02, 0.5  # r > 0: the last step of a cycle moves the weights, so a step too early or late shows
    config = TrainConfig(
        lr=lr, schedule="cosine", max_steps=12, cycles=3, min_lr_ratio=r, max_epochs=100, patience=None,
        validate_every=3,
    )  # fmt: skip
    trainer = linear_regression_trainer(config)
    recorder = CycleEnds()
    trainer.callbacks.append(recorder)
    rates = []
    trainer.optimizer.register_step_pre_hook(lambda opt, args, kwargs: rates.append(opt.param_groups[0]["lr"]))
    result = trainer.fit()
    assert [(cycle, step) for cycle, step, _ in recorder.ends] == [(1, 4), (2, 8), (3, 12)]
    for _, step, weights in recorder.ends:
        for name, tensor in weights.items():
            assert torch.equal(tensor, recorder.after_step[step][name])
    assert [rates[s - 1] for s in (4, 8, 12)] == [lr * r] * 3
    assert rates[0] == rates[4] == rates[8] == pytest.approx(lr * (r + (1 - r) * cosine_at(0.25)))
    assert result.steps == 12


def test_a_run_stopped_inside_a_cycle_ends_that_cycle_at_its_last_step():
    config = TrainConfig(
        lr=0.02, schedule="cosine", max_steps=12, cycles=3, min_lr_ratio=0.5, max_epochs=100, patience=None,
        time_budget=6.0,
    )  # fmt: skip
    trainer, _ = clocked_trainer(config, FakeClock())
    recorder = CycleEnds()
    trainer.callbacks.append(recorder)
    result = trainer.fit()  # one second a step: x = 3 t / 6, cycle 1 ends at step 2, cycle 2 at step 4
    assert (result.steps, result.stopped_by) == (6, "time_budget")
    assert [(cycle, step) for cycle, step, _ in recorder.ends] == [(1, 2), (2, 4), (3, 6)]


def test_one_cycle_calls_no_cycle_end():
    config = TrainConfig(lr=0.02, schedule="cosine", max_steps=6, max_epochs=100, patience=None)
    trainer = linear_regression_trainer(config)
    recorder = CycleEnds()
    trainer.callbacks.append(recorder)
    trainer.fit()
    assert recorder.ends == []


@pytest.mark.parametrize(("resumed_at", "ends"), [(4, [(1, 4), (2, 8), (3, 12)]), (6, [(2, 8), (3, 12)])])
def test_a_resumed_run_ends_the_same_cycles_with_the_same_weights(resumed_at, ends):
    """Resumed at a cycle's end (step 4), the run ends that cycle again, with the same weights; inside one, not."""
    config = TrainConfig(
        lr=0.02, schedule="cosine", max_steps=12, cycles=3, min_lr_ratio=0.5, max_epochs=100, patience=None,
        checkpoint_every=1,
    )  # fmt: skip
    whole, states = linear_regression_trainer(config), []
    whole_ends = CycleEnds()
    whole.callbacks.append(whole_ends)
    whole.checkpoint = lambda state: states.append(copy.deepcopy(state))
    whole.fit()
    resumed = linear_regression_trainer(config)
    resumed_ends = CycleEnds()
    resumed.callbacks.append(resumed_ends)
    resumed.fit(resume_from=next(s for s in states if s["run"]["step"] == resumed_at))
    assert [(cycle, step) for cycle, step, _ in resumed_ends.ends] == ends
    expected = {(cycle, step): weights for cycle, step, weights in whole_ends.ends}
    for cycle, step, weights in resumed_ends.ends:
        for name, tensor in weights.items():
            assert torch.equal(tensor, expected[cycle, step][name])
