import copy
import dataclasses
import itertools
import random
import re

import numpy as np
import pytest
import torch
from torch import nn

from seqlab.config import apply_overrides
from seqlab.errors import ConfigError, DivergenceError
from seqlab.training.seeding import seed_everything
from seqlab.training.trainer import LossOutput, TrainConfig, Trainer

W_TRUE = torch.tensor([[1.5], [-2.0], [0.5]])


def make_data(n=32, seed=0, dtype=torch.float32):
    x = torch.randn(n, 3, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    return x, x @ W_TRUE.to(dtype) + 0.3


def batches_of(x, y, calls=None):
    def train_batches(epoch, generator, batch_size):
        if calls is not None:
            calls.append((epoch, generator, batch_size))
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), batch_size):
            index = order[start : start + batch_size]
            yield x[index], y[index]

    return train_batches


def train_config(**kwargs):
    """A TrainConfig with batches of 8 sequences (4 per epoch of make_data) unless told otherwise."""
    return TrainConfig(**{"batch_size": 8, **kwargs})


def mse_loss(model, batch):
    x, y = batch
    return LossOutput(nn.functional.mse_loss(model(x), y), len(x))


def mse_on(x, y):
    def validate(model):
        return {"valid_loss": nn.functional.mse_loss(model(x), y).item()}

    return validate


def scripted(values):
    """A validate fn returning the given monitored values in order, whatever the model."""
    values = iter(values)
    return lambda model: {"valid_loss": next(values)}


def mlp(seed=0, dropout=0.2):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Dropout(dropout), nn.Linear(8, 1))


def make_trainer(model, config, *, data=None, **kwargs):
    x, y = make_data() if data is None else data
    kwargs.setdefault("loss_fn", mse_loss)
    kwargs.setdefault("train_batches", batches_of(x, y))
    kwargs.setdefault("validate", mse_on(x, y))
    kwargs.setdefault("progress", False)
    kwargs.setdefault("log", None)
    return Trainer(model, config, **kwargs)


def params_of(model):
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def assert_same_params(a, b):
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0)


# ---------------------------------------------------------------- learning and determinism


def test_fit_learns_linear_regression():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    x, y = make_data()
    initial = mse_on(x, y)(model)["valid_loss"]
    config = train_config(lr=0.1, max_epochs=40, patience=None, clip_norm=None)
    result = make_trainer(model, config).fit()
    assert result.best["valid_loss"] < 1e-4 * initial
    torch.testing.assert_close(model.weight.detach(), W_TRUE.T, atol=1e-2, rtol=0)
    torch.testing.assert_close(model.bias.detach(), torch.tensor([0.3]), atol=1e-2, rtol=0)
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]


def test_same_seed_gives_bit_identical_parameters_and_another_seed_differs():
    initial = mlp(dropout=0.3)

    def run(seed):
        model = copy.deepcopy(initial)
        make_trainer(model, train_config(lr=0.05, max_epochs=3, seed=seed)).fit()
        return params_of(model)

    first, second, other = run(3), run(3), run(4)
    assert_same_params(first, second)
    assert any(not torch.equal(first[name], other[name]) for name in first)


def test_train_loss_is_the_token_weighted_mean_of_the_epoch():
    x, y = make_data(n=27)  # batches of 8, 8, 8 and 3 tokens
    seen = []

    def loss_fn(model, batch):
        output = mse_loss(model, batch)
        seen.append((output.loss.item(), output.num_tokens))
        return output

    config = train_config(max_epochs=1)
    result = make_trainer(mlp(), config, loss_fn=loss_fn, train_batches=batches_of(x, y)).fit()
    assert [n for _, n in seen] == [8, 8, 8, 3]
    expected = sum(loss * n for loss, n in seen) / 27
    assert result.history[0]["train_loss"] == pytest.approx(expected, rel=1e-12)
    assert result.history[0]["train_loss"] != pytest.approx(sum(loss for loss, _ in seen) / 4, rel=1e-6)


def test_train_batches_gets_each_epoch_and_one_generator_seeded_from_config():
    calls = []
    x, y = make_data()
    config = train_config(max_epochs=3, seed=7, patience=None)
    result = make_trainer(mlp(), config, train_batches=batches_of(x, y, calls=calls)).fit()
    assert [(epoch, batch_size) for epoch, _, batch_size in calls] == [(1, 8), (2, 8), (3, 8)]
    assert all(generator is calls[0][1] for _, generator, _ in calls)
    # The generator made 3 shuffles; a fresh one seeded with 7 replays them, so the next draw matches.
    reference = torch.Generator().manual_seed(7)
    for _ in range(3):
        torch.randperm(len(x), generator=reference)
    assert torch.equal(torch.randperm(5, generator=calls[0][1]), torch.randperm(5, generator=reference))
    assert result.stopped_by == "max_epochs"
    assert (result.steps, result.epochs) == (12, 3)
    assert [(r["epoch"], r["step"]) for r in result.history] == [(1, 4), (2, 8), (3, 12)]


# ---------------------------------------------------------------- stopping rules


@pytest.mark.parametrize(("max_steps", "epochs", "validated_at"), [(6, 2, [4, 6]), (8, 2, [4, 8]), (1, 1, [1])])
def test_max_steps_stops_after_exactly_n_optimizer_steps(max_steps, epochs, validated_at):
    model = mlp()
    calls = []

    def counting_loss(model, batch):
        calls.append(1)
        return mse_loss(model, batch)

    trainer = make_trainer(model, train_config(max_steps=max_steps, max_epochs=10), loss_fn=counting_loss)
    result = trainer.fit()
    assert result.stopped_by == "max_steps"
    assert (result.steps, result.epochs, len(calls)) == (max_steps, epochs, max_steps)
    adam_steps = {int(state["step"]) for state in trainer.optimizer.state.values()}
    assert adam_steps == {max_steps}
    # The stale validation runs once at the stopping step, never twice at an epoch's last step.
    assert [r["step"] for r in result.history] == validated_at


def test_early_stopping_after_patience_validations_without_improvement():
    improved_at = []
    config = train_config(max_epochs=10, patience=3)
    trainer = make_trainer(
        mlp(),
        config,
        validate=scripted([5.0, 4.0, 4.5, 4.0, 6.0, 3.0]),  # an equal value is no improvement
        on_best=lambda model, record: improved_at.append(record["epoch"]),
    )
    result = trainer.fit()
    assert result.stopped_by == "early_stopping"
    assert result.epochs == 5
    assert [r["valid_loss"] for r in result.history] == [5.0, 4.0, 4.5, 4.0, 6.0]
    assert (result.best["epoch"], result.best["valid_loss"]) == (2, 4.0)
    assert improved_at == [1, 2]


def test_without_patience_training_runs_all_epochs():
    config = train_config(max_epochs=6, patience=None)
    result = make_trainer(mlp(), config, validate=scripted([5.0, 4.0, 4.5, 4.0, 6.0, 3.0])).fit()
    assert result.stopped_by == "max_epochs"
    assert (result.best["epoch"], result.best["valid_loss"]) == (6, 3.0)


def test_patience_counts_mid_epoch_validations():
    config = train_config(max_epochs=10, patience=2, validate_every=3)
    result = make_trainer(mlp(), config, validate=scripted([3.0, 2.0, 2.5, 2.5, 1.0])).fit()
    # 4 batches per epoch: validations at steps 3, 4 (epoch end), 6, 8 (epoch end).
    assert [(r["epoch"], r["step"]) for r in result.history] == [(1, 3), (1, 4), (2, 6), (2, 8)]
    assert result.stopped_by == "early_stopping"


def test_time_budget_stops_after_the_step_that_exceeds_it_and_validates():
    config = train_config(max_epochs=100, time_budget=1e-9, patience=None)
    result = make_trainer(mlp(), config).fit()
    assert result.stopped_by == "time_budget"
    assert (result.steps, result.epochs) == (1, 1)
    assert [r["step"] for r in result.history] == [1]


def test_time_spent_in_validation_counts_against_the_budget(monkeypatch):
    class Clock:  # a fake time module for the trainer only: time passes only when validate says so
        now = 0.0

        def perf_counter(self):
            return self.now

    clock = Clock()
    monkeypatch.setattr("seqlab.training.trainer.time", clock)

    def slow_validate(model):
        clock.now += 10.0
        return {"valid_loss": 1.0}

    config = train_config(max_epochs=100, time_budget=25.0, patience=None, validate_every=2)
    result = make_trainer(mlp(), config, validate=slow_validate).fit()
    # Validations at steps 2, 4 (epoch end), 6 use 30 s; training stops right after the third.
    assert result.stopped_by == "time_budget"
    assert [r["step"] for r in result.history] == [2, 4, 6]
    assert [r["seconds"] for r in result.history] == [10.0, 20.0, 30.0]
    assert result.steps == 6


def test_nan_validation_metric_never_counts_as_improvement():
    config = train_config(max_epochs=4, patience=None)
    result = make_trainer(mlp(), config, validate=scripted([float("nan"), 2.0, float("nan"), 3.0])).fit()
    assert (result.best["epoch"], result.best["valid_loss"]) == (2, 2.0)


# ---------------------------------------------------------------- best model


def test_on_best_fires_on_improvement_and_fit_restores_that_state():
    seen_by_validate, best_calls = [], []

    def validate(model):
        seen_by_validate.append(params_of(model))
        return {"valid_loss": [3.0, 1.0, 2.0, 2.5][len(seen_by_validate) - 1], "per": 0.5}

    def on_best(model, record):
        assert model.training
        best_calls.append((record, params_of(model)))

    model = mlp()
    result = make_trainer(
        model, train_config(lr=0.05, max_epochs=4, patience=None), validate=validate, on_best=on_best
    ).fit()
    assert [record["epoch"] for record, _ in best_calls] == [1, 2]
    assert best_calls[-1][0] == result.best == result.history[1]
    assert result.best["per"] == 0.5
    assert_same_params(params_of(model), best_calls[-1][1])
    assert_same_params(params_of(model), seen_by_validate[1])
    # Training went on after epoch 2, so restoring really changed the parameters.
    assert any(not torch.equal(seen_by_validate[-1][n], best_calls[-1][1][n]) for n in best_calls[-1][1])


# ---------------------------------------------------------------- gradient norm and clipping


@pytest.mark.parametrize("clip_norm", [0.05, None])
def test_reported_grad_norm_is_the_pre_clip_global_norm(clip_norm):
    model = mlp(dropout=0.0).double()
    data = make_data(dtype=torch.float64)
    config = train_config(lr=0.01, max_steps=5, clip_norm=clip_norm, validate_every=1, patience=None)
    trainer = make_trainer(model, config, data=data, validate=mse_on(*data))
    accumulated, pre_norms, post_norms = {}, [], []
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda p: accumulated.__setitem__(p, p.grad.clone()))

    def before_step(optimizer, args, kwargs):
        params = list(model.parameters())
        pre_norms.append(torch.linalg.vector_norm(torch.cat([accumulated[p].flatten() for p in params])))
        post_norms.append(torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in params])))

    trainer.optimizer.register_step_pre_hook(before_step)
    result = trainer.fit()
    # validate_every=1: each record's mean covers exactly one step.
    reported = torch.tensor([r["grad_norm"] for r in result.history], dtype=torch.float64)
    torch.testing.assert_close(reported, torch.stack(pre_norms))
    post = torch.stack(post_norms)
    if clip_norm is None:
        torch.testing.assert_close(post, torch.stack(pre_norms), rtol=0, atol=0)
    else:
        assert bool((torch.stack(pre_norms) > clip_norm).all())  # so clipping was active
        # The scale is exactly clip_norm / ||g|| (no epsilon), so the clipped norm is clip_norm up to rounding.
        torch.testing.assert_close(post, torch.full_like(post, clip_norm), rtol=1e-12, atol=0)


def test_clip_value_clamps_after_norm_clipping_and_the_reported_norm_is_before_both():
    model = mlp(dropout=0.0).double()
    data = make_data(dtype=torch.float64)
    clip_norm, clip_value = 0.5, 0.05
    config = train_config(lr=0.01, max_steps=3, clip_norm=clip_norm, clip_value=clip_value, validate_every=1)
    trainer = make_trainer(model, config, data=data, validate=mse_on(*data))
    accumulated, expected, stepped, pre_norms = {}, [], [], []
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda p: accumulated.__setitem__(p, p.grad.clone()))

    def before_step(optimizer, args, kwargs):
        params = list(model.parameters())
        g = torch.cat([accumulated[p].flatten() for p in params])
        norm = torch.linalg.vector_norm(g)
        pre_norms.append(norm)
        expected.append((g * min(1.0, clip_norm / norm.item())).clamp(-clip_value, clip_value))
        stepped.append(torch.cat([p.grad.flatten() for p in params]))

    trainer.optimizer.register_step_pre_hook(before_step)
    result = trainer.fit()
    reported = torch.tensor([r["grad_norm"] for r in result.history], dtype=torch.float64)
    torch.testing.assert_close(reported, torch.stack(pre_norms))
    torch.testing.assert_close(torch.stack(stepped), torch.stack(expected))
    assert bool((torch.stack(pre_norms) > clip_norm).all())
    # Value clipping was active after norm clipping at every step, so the order (norm first) matters.
    assert all(bool((e.abs() == clip_value).any()) for e in expected)


# ---------------------------------------------------------------- modes


def test_validate_runs_in_eval_mode_without_grad_and_training_resumes_in_train_mode():
    x, y = make_data()
    modes = []

    def loss_fn(model, batch):
        modes.append(("train", model.training, torch.is_grad_enabled()))
        return mse_loss(model, batch)

    def validate(model):
        modes.append(("validate", all(not m.training for m in model.modules()), torch.is_grad_enabled()))
        torch.testing.assert_close(model(x), model(x), rtol=0, atol=0)  # dropout is off
        return {"valid_loss": nn.functional.mse_loss(model(x), y).item()}

    model = mlp(dropout=0.5)
    make_trainer(model, train_config(max_epochs=2), loss_fn=loss_fn, validate=validate).fit()
    assert [m for m in modes if m[0] == "train"] == [("train", True, True)] * 8
    assert [m for m in modes if m[0] == "validate"] == [("validate", True, False)] * 2
    assert all(m.training for m in model.modules())


def test_model_back_in_train_mode_when_validate_raises():
    def broken(model):
        raise RuntimeError("validation data missing")

    model = mlp()
    with pytest.raises(RuntimeError, match="validation data missing"):
        make_trainer(model, train_config(), validate=broken).fit()
    assert model.training


# ---------------------------------------------------------------- errors


def test_a_nan_loss_stops_at_max_nonfinite_steps_naming_the_step_and_leaves_parameters_unchanged():
    before_bad_step = {}
    calls = []

    def loss_fn(model, batch):
        calls.append(1)
        output = mse_loss(model, batch)
        if len(calls) == 3:
            before_bad_step.update(params_of(model))
            return LossOutput(output.loss * float("nan"), output.num_tokens)
        return output

    model = mlp()
    message = r"^training diverged: 1 steps in a row .* the latest step 3 \(epoch 1\) with loss nan"
    with pytest.raises(DivergenceError, match=message):
        make_trainer(model, train_config(max_nonfinite_steps=1), loss_fn=loss_fn).fit()
    assert_same_params(params_of(model), before_bad_step)


def test_a_non_finite_gradient_stops_at_max_nonfinite_steps():
    model = nn.Linear(3, 1)
    nn.init.zeros_(model.weight)

    def loss_fn(model, batch):  # sqrt'(0) is infinite, so the loss is finite and the gradient is not
        return LossOutput(model.weight.abs().sqrt().sum() + 0 * model.bias.sum(), 1)

    with pytest.raises(DivergenceError, match=r"the latest step 1 \(epoch 1\) with loss 0.0 and grad_norm nan"):
        make_trainer(model, train_config(max_nonfinite_steps=1), loss_fn=loss_fn).fit()
    assert torch.equal(model.weight.detach(), torch.zeros(1, 3))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"validate": lambda m: {"loss": 1.0}},
            "validate returned no 'valid_loss' metric (got keys ['loss'])",
        ),
        (
            {"validate": lambda m: {"valid_loss": 1.0, "step": 2}},
            "validate returned keys ['step'] that the trainer reserves for its records",
        ),
        ({"train_batches": lambda epoch, g, batch_size: []}, "train_batches yielded no batches for epoch 1"),
        (
            {"loss_fn": lambda m, b: LossOutput(m(b[0]) - b[1], 8)},
            "loss_fn must return a scalar loss, got shape (8, 1) at step 1",
        ),
        (
            {"loss_fn": lambda m, b: LossOutput(mse_loss(m, b).loss, 0)},
            "loss_fn returned num_tokens=0 at step 1; it must be >= 1",
        ),
    ],
)
def test_fit_rejects_bad_callables(kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        make_trainer(mlp(), train_config(), **kwargs).fit()


def test_trainer_rejects_frozen_model_and_empty_monitor():
    frozen = mlp().requires_grad_(False)
    with pytest.raises(ValueError, match=r"^model has no trainable parameters \(all have requires_grad=False\)$"):
        make_trainer(frozen, train_config())
    with pytest.raises(ValueError, match=r"^monitor must name a metric returned by validate, got an empty string$"):
        make_trainer(mlp(), train_config(), monitor="")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lr": -1.0}, "lr (-1.0) must be a finite number > 0 and <= 10.0"),
        ({"lr": float("nan")}, "lr (nan) must be a finite number > 0 and <= 10.0"),
        ({"lr": float("inf")}, "lr (inf) must be a finite number > 0 and <= 10.0"),
        ({"batch_size": 0}, "batch_size (0) must be an integer >= 1 and <= 1048576"),
        ({"max_epochs": 2.5}, "max_epochs (2.5) must be an integer >= 1 and <= 1000000000"),
        ({"max_steps": 0}, "max_steps (0) must be None or an integer >= 1 and <= 1000000000"),
        ({"patience": True}, "patience (True) must be None or an integer >= 1 and <= 1000000000"),
        ({"validate_every": -3}, "validate_every (-3) must be None or an integer >= 1 and <= 1000000000"),
        ({"time_budget": 0.0}, "time_budget (0.0) must be None or a finite number > 0"),
        ({"clip_norm": -1.0}, "clip_norm (-1.0) must be None or a finite number > 0"),
        ({"clip_value": 0.0}, "clip_value (0.0) must be None or a finite number > 0"),
        ({"weight_decay": -0.1}, "weight_decay (-0.1) must be a finite number >= 0"),
        ({"seed": -1}, "seed (-1) must be an integer >= 0 and <= 4294967295"),
        ({"seed": 2**32}, "seed (4294967296) must be an integer >= 0 and <= 4294967295"),
        (
            {"schedule": "linear"},
            "schedule ('linear') must be one of 'constant', 'inverse_sqrt', 'cosine', 'epoch_decay'",
        ),
        ({"schedule": "cosine"}, "schedule 'cosine' needs max_steps or time_budget, where its decay ends"),
        ({"optimizer": "lamb"}, "optimizer ('lamb') must be one of 'adam', 'adamw', 'sgd'"),
        ({"optimizer": "sgd", "momentum": 1.0}, "momentum (1.0) must be a finite number >= 0 and < 1"),
        ({"optimizer": "sgd", "nesterov": 1}, "nesterov (1) must be true or false"),
        ({"optimizer": "sgd", "nesterov": True}, "nesterov (True) needs momentum > 0, got momentum (0.0)"),
        ({"momentum": 0.9}, "momentum (0.9) is used by optimizer 'sgd' only, not 'adam'"),
        ({"optimizer": "adamw", "nesterov": True}, "nesterov (True) is used by optimizer 'sgd' only, not 'adamw'"),
        ({"device": "tpu"}, "device ('tpu') must be one of 'auto', 'cpu', 'cuda', 'mps'"),
        ({"precision": "fp8"}, "precision ('fp8') must be one of 'fp32', 'bf16', 'fp16', 'auto'"),
        ({"grad_accumulation_steps": 0}, "grad_accumulation_steps (0) must be an integer >= 1 and <= 1048576"),
        (
            {"batch_size": 6, "grad_accumulation_steps": 4},
            "batch_size (6) must be divisible by grad_accumulation_steps (4)",
        ),
    ],
)
def test_train_config_messages_show_the_bad_value(kwargs, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        TrainConfig(**kwargs)


def test_train_config_defaults_keep_the_former_behaviour():
    config = TrainConfig()
    assert (config.optimizer, config.momentum, config.nesterov, config.weight_decay) == ("adam", 0.0, False, 0.0)
    assert (config.device, config.precision, config.grad_accumulation_steps) == ("auto", "fp32", 1)
    # A recipe.json written before these fields existed holds only the former ones; it still loads.
    former = {"lr": 2e-3, "batch_size": 64, "max_epochs": 30, "max_steps": None, "time_budget": 480.0}
    former |= {"clip_norm": 1.0, "clip_value": None, "patience": 5, "weight_decay": 0.0, "seed": 0}
    former |= {"validate_every": None, "schedule": "constant", "warmup_steps": 0}
    assert TrainConfig(**former) == TrainConfig(lr=2e-3, time_budget=480.0)


def test_train_config_accepts_optional_limits_off():
    config = train_config(max_steps=None, time_budget=None, clip_norm=None, patience=None, validate_every=None)
    assert config.lr == 1e-3 and config.max_epochs == 30 and config.clip_value is None


# ---------------------------------------------------------------- logging and progress


def test_one_log_line_per_validation_and_silent_progress_off_a_terminal(capsys):
    lines = []
    config = train_config(max_epochs=3, patience=None)
    make_trainer(mlp(), config, validate=scripted([2.0, 1.0, 1.5]), log=lines.append, progress=True).fit()
    pattern = r"^epoch {} step {} \| train_loss \S+ grad_norm \S+ lr \S+ \| valid_loss {} \| \d+ tok/s \d+\.\d s{}$"
    expected = [(1, 4, "2", " \\*"), (2, 8, "1", " \\*"), (3, 12, "1.5", "")]
    assert len(lines) == 3
    for line, (epoch, step, value, star) in zip(lines, expected, strict=True):
        assert re.match(pattern.format(epoch, step, value, star), line), line
    assert capsys.readouterr() == ("", "")  # stderr is not a TTY here, so the bar stays silent


def test_default_log_writes_summaries_to_stderr(capsys):
    trainer = Trainer(
        mlp(),
        train_config(max_epochs=2),
        loss_fn=mse_loss,
        train_batches=batches_of(*make_data()),
        validate=mse_on(*make_data()),
    )
    trainer.fit()
    out, err = capsys.readouterr()
    assert out == ""
    assert [line.split(" |")[0] for line in err.splitlines()] == ["epoch 1 step 4", "epoch 2 step 8"]


# ---------------------------------------------------------------- seeding


def test_seed_everything_repeats_every_generator():
    def draws(seed):
        generator = seed_everything(seed)
        return (
            random.random(),
            np.random.rand(3).tolist(),
            torch.rand(3),
            torch.randperm(10, generator=generator),
        )

    first, second, other = draws(11), draws(11), draws(12)
    assert first[:2] == second[:2] and first[:2] != other[:2]
    torch.testing.assert_close(first[2], second[2], rtol=0, atol=0)
    assert torch.equal(first[3], second[3]) and not torch.equal(first[3], other[3])


def test_seed_everything_generator_is_independent_of_global_draws():
    generator = seed_everything(5)
    torch.rand(100)  # e.g. a model that draws more dropout masks
    assert torch.equal(
        torch.randperm(10, generator=generator),
        torch.randperm(10, generator=torch.Generator().manual_seed(5)),
    )


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, True])
def test_seed_everything_rejects_bad_seeds(seed):
    with pytest.raises(ValueError, match=rf"^seed \({re.escape(repr(seed))}\) must be an integer in \[0, 2\*\*32\)$"):
        seed_everything(seed)


# ---------------------------------------------------------------- gradient accumulation


def padded_sequences(n=24, T=5, seed=0):
    """n sequences of 1..T steps of 3 features, zero-padded, with regression targets; (x, y, lengths)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (n,), generator=g)
    keep = torch.arange(T) < lengths[:, None]  # (n, T)
    x = torch.randn(n, T, 3, generator=g, dtype=torch.float64) * keep[..., None]
    return x, (x @ W_TRUE.double()).tanh() * keep[..., None], lengths


def token_mean_loss(model, batch):
    """Mean squared error per real step: sequences of different lengths give micro-batches of different sizes."""
    x, y, lengths = batch
    keep = (torch.arange(x.shape[1]) < lengths[:, None])[..., None]  # (B, T, 1)
    num_tokens = int(lengths.sum())
    return LossOutput(((model(x) - y) ** 2 * keep).sum() / num_tokens, num_tokens)


def sequence_batches(x, y, lengths):
    def train_batches(epoch, generator, batch_size):
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), batch_size):
            index = order[start : start + batch_size]
            yield x[index], y[index], lengths[index]

    return train_batches


def countdown():
    """A validate fn that always improves, so fit() keeps the last parameters."""
    values = itertools.count(1)
    return lambda model: {"valid_loss": -float(next(values))}


@pytest.mark.parametrize(
    "optimizer", [{"optimizer": "adam", "weight_decay": 0.01}, {"optimizer": "sgd", "momentum": 0.9}]
)
@pytest.mark.parametrize("n", [24, 20])  # 20: each epoch ends with a step of half a batch
def test_two_micro_batches_of_half_a_batch_give_the_parameters_of_one_batch(optimizer, n):
    data = padded_sequences(n=n)
    initial = mlp(dropout=0.0).double()

    def run(k):
        model = copy.deepcopy(initial)
        config = train_config(lr=0.05, max_epochs=3, patience=None, clip_norm=0.5, grad_accumulation_steps=k)
        config = dataclasses.replace(config, **optimizer)
        trainer = make_trainer(
            model, config, loss_fn=token_mean_loss, train_batches=sequence_batches(*data), validate=countdown()
        )
        result = trainer.fit()
        return params_of(model), result

    (one, one_result), (two, two_result) = run(1), run(2)
    assert one_result.steps == two_result.steps == 3 * -(-n // 8)
    assert one.keys() == two.keys()
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-12, atol=1e-14)
    for a, b in zip(one_result.history, two_result.history, strict=True):
        assert (a["train_loss"], a["grad_norm"]) == pytest.approx((b["train_loss"], b["grad_norm"]), rel=1e-12)
    assert any(not torch.equal(one[name], params_of(initial)[name]) for name in one)


def test_accumulation_weights_micro_batches_by_their_tokens_not_equally():
    x, y, lengths = padded_sequences(n=16)
    seen = []

    def loss_fn(model, batch):
        output = token_mean_loss(model, batch)
        seen.append(output.num_tokens)
        return output

    config = train_config(max_steps=1, grad_accumulation_steps=2, clip_norm=None)
    model = mlp(dropout=0.0).double()
    trainer = make_trainer(
        model, config, loss_fn=loss_fn, train_batches=sequence_batches(x, y, lengths), validate=countdown()
    )
    grads = []
    trainer.optimizer.register_step_pre_hook(lambda *args: grads.append([p.grad.clone() for p in model.parameters()]))
    initial = copy.deepcopy(model)
    trainer.fit()
    assert len(seen) == 2 and seen[0] != seen[1]  # micro-batches of different token counts
    # The reference: the token mean over the step's 8 sequences in one batch.
    order = torch.randperm(16, generator=torch.Generator().manual_seed(0))[:8]
    loss = token_mean_loss(initial, (x[order], y[order], lengths[order])).loss
    for got, want in zip(grads[0], torch.autograd.grad(loss, list(initial.parameters())), strict=True):
        torch.testing.assert_close(got, want)


def test_the_new_keys_are_settable_from_the_command_line():
    @dataclasses.dataclass(frozen=True)
    class RecipeConfig:
        train: TrainConfig = dataclasses.field(default_factory=TrainConfig)

    overrides = {
        "train.optimizer": "sgd",
        "train.momentum": "0.9",
        "train.nesterov": "true",
        "train.weight_decay": "0.01",
        "train.device": "cpu",
        "train.precision": "bf16",
        "train.grad_accumulation_steps": "4",
    }
    train = apply_overrides(RecipeConfig(), overrides).train
    assert (train.optimizer, train.momentum, train.nesterov, train.weight_decay) == ("sgd", 0.9, True, 0.01)
    assert (train.device, train.precision, train.grad_accumulation_steps) == ("cpu", "bf16", 4)
    with pytest.raises(ConfigError, match=r"^--set train\.precision: 'fp8' is not one of fp32, bf16, fp16, auto$"):
        apply_overrides(RecipeConfig(), {"train.precision": "fp8"})
    message = "--set: [train] batch_size (64) must be divisible by grad_accumulation_steps (3)"
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        apply_overrides(RecipeConfig(), {"train.grad_accumulation_steps": "3"})
