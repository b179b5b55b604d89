"""benchmarks/g2p_slow_machine.py: its emulated clock gives the schedules a slow machine's wall clock would, and the
script trains, tests and tabulates end to end."""

import copy
import importlib.util
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from seqlab.training.schedules import warmup_cosine
from seqlab.training.trainer import LossOutput, TrainConfig

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "g2p_slow_machine.py"
spec = importlib.util.spec_from_file_location("g2p_slow_machine", SCRIPT)
slow = importlib.util.module_from_spec(spec)
spec.loader.exec_module(slow)

LR = 0.02


def linear_regression_run(config, *, num_batches=4):
    """The parts of a training run (``TrainingRun``'s) for y = sum(x): fixed batches of 8, since the schedule is
    under test."""
    torch.manual_seed(0)
    x = torch.randn(8 * num_batches, 3, generator=torch.Generator().manual_seed(1))
    y = x.sum(dim=1, keepdim=True)

    def loss_fn(model, batch):
        xb, yb = batch
        return LossOutput(nn.functional.mse_loss(model(xb), yb), len(xb))

    return SimpleNamespace(
        config=SimpleNamespace(train=config),
        model=nn.Linear(3, 1),
        loss_fn=loss_fn,
        train_batches=lambda epoch, generator, batch_size: [(x[i : i + 8], y[i : i + 8]) for i in range(0, len(x), 8)],
        validate=lambda model: {"valid_loss": nn.functional.mse_loss(model(x), y).item()},
        strategy=None,
    )


def fit_on(clock, config, schedule):
    trainer = slow.emulated_trainer(linear_regression_run(config), schedule, clock, log=None)
    rates = []
    trainer.optimizer.register_step_pre_hook(lambda opt, args, kwargs: rates.append(opt.param_groups[0]["lr"]))
    return trainer.fit(), rates


def budget_config(**changes):
    return TrainConfig(
        lr=LR, schedule="cosine", max_steps=20_000, time_budget=6.0, max_epochs=1_000, patience=None, **changes
    )


def test_a_budgeted_run_cut_by_the_emulated_clock_is_a_cosine_over_the_steps_it_reaches():
    # 0.25 s a step and a 6 s budget: a machine that reaches step S = 24, so the cosine is the one over 24 steps.
    result, rates = fit_on(slow.EmulatedClock(0.25, 0.0), budget_config(), "budgeted")
    assert (result.steps, result.stopped_by) == (24, "time_budget")
    over_24 = warmup_cosine(0, 24)
    assert rates == pytest.approx([LR * over_24(s) for s in range(1, 25)], abs=1e-15)
    assert rates[-1] == 0.0


def test_today_s_schedule_on_the_emulated_clock_is_the_20000_step_cosine_cut_where_the_budget_ends():
    result, rates = fit_on(slow.EmulatedClock(0.25, 0.0), budget_config(), "steps")
    assert (result.steps, result.stopped_by) == (24, "time_budget")
    assert rates == pytest.approx([LR * warmup_cosine(0, 20_000)(s) for s in range(1, 25)], abs=1e-15)


def test_validations_take_their_emulated_time_and_the_budgeted_cosine_counts_it():
    # Validation every 4 steps, 1 s each: step s starts after the validations at steps 4, 8, ... before it, so
    # its time is 0.25 s + 1 s * (s - 1) // 4; the budget of 6 s runs out in the validation after step 12
    # (3 s of steps + 3 s of validations), and each step's rate is the cosine at elapsed / budget.
    clock = slow.EmulatedClock(0.25, 1.0)
    result, rates = fit_on(clock, budget_config(validate_every=4), "budgeted")
    assert (result.steps, result.stopped_by, clock.now) == (12, "time_budget", 6.0)
    elapsed = [0.25 * s + 1.0 * ((s - 1) // 4) for s in range(1, 13)]
    assert rates == pytest.approx([LR * 0.5 * (1 + math.cos(math.pi * t / 6.0)) for t in elapsed], abs=1e-15)


def test_micro_batches_share_their_step_s_time():
    clock = slow.EmulatedClock(0.25, 0.0)
    result, _ = fit_on(clock, budget_config(batch_size=8, grad_accumulation_steps=2), "budgeted")
    # 4 batches of 8 make 2 steps an epoch; 6 s at 0.25 s a step are 24 steps whatever the accumulation.
    assert (result.steps, clock.now) == (24, 6.0)


def test_a_run_resumed_on_a_fresh_emulated_clock_goes_on_bit_for_bit():
    config = budget_config(checkpoint_every=5)
    whole, whole_rates = fit_on(slow.EmulatedClock(0.25, 0.0), config, "budgeted")
    states = []
    first = slow.emulated_trainer(linear_regression_run(config), "budgeted", slow.EmulatedClock(0.25, 0.0), log=None)
    first.checkpoint = lambda state: states.append(copy.deepcopy(state))
    first.fit()
    state = next(s for s in states if s["run"]["step"] == 10)
    resumed = slow.emulated_trainer(linear_regression_run(config), "budgeted", slow.EmulatedClock(0.25, 0.0), log=None)
    rates = []
    resumed.optimizer.register_step_pre_hook(lambda opt, args, kwargs: rates.append(opt.param_groups[0]["lr"]))
    assert resumed.fit(resume_from=state).steps == whole.steps == 24
    assert rates == whole_rates[10:]


def run_script(monkeypatch, capsys, *arguments):
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *arguments])
    threads = torch.get_num_threads()
    try:
        slow.main()
    finally:
        torch.set_num_threads(threads)
    return capsys.readouterr().out


def test_the_script_trains_tests_and_tabulates_both_schedules_and_resumes_an_interrupted_run(
    tmp_path, monkeypatch, capsys
):
    words = ROOT / "tests" / "fixtures" / "checkpoints" / "train.dict"
    sets = [f"data.{split}_path={words}" for split in ("train", "valid", "test")]
    sets += ["train.batch_size=4", "train.time_budget=0.5", "train.checkpoint_every=none", "train.device=cpu"]
    out = run_script(monkeypatch, capsys, "--out", str(tmp_path), "--seed", "0", "--set", *sets)
    # 496 s / (20,000 + 12 x 31.6) x 3 = 0.07302 s a step: 0.5 s of budget end in step 7 of the first epoch's 10.
    assert "0.07302 s per step, 2.307 s per validation; time budget 0.5 s" in out
    rows = {s: json.loads((tmp_path / f"{s}-seed0" / "results.json").read_text()) for s in ("budgeted", "steps")}
    for schedule, row in rows.items():
        assert (row["steps"], row["stopped_by"]) == (7, "time_budget")
        assert f"\n| {schedule} | {' '.join(sets)} | 0 | 7 | " in out
        assert row["changes"] == " ".join(sets) and row["per_letters_1_4"] >= 0
    last = {schedule: row["last_lr_ratio"] for schedule, row in rows.items()}
    assert last == {"budgeted": 0.0, "steps": pytest.approx(warmup_cosine(0, 20_000)(7), rel=1e-12)}
    # Interrupted after training (its results lost): it resumes from its checkpoint, to the same results.
    budgeted = tmp_path / "budgeted-seed0" / "results.json"
    before = budgeted.read_text()
    budgeted.unlink()
    again = run_script(
        monkeypatch, capsys, "--out", str(tmp_path), "--seed", "0", "--schedule", "budgeted", "--set", *sets
    )
    assert "budgeted-seed0: resumed at step 7" in again
    assert budgeted.read_text() == before


def test_the_table_gives_each_run_and_the_mean_and_sd_of_each_setting_s_seeds(tmp_path, capsys):
    buckets = {f"{k}_letters_{b}": v for b in slow.BUCKETS for k, v in (("wer", 30.0), ("per", 6.0))}
    for seed, wer, changes in ((0, 27.0, "train.batch_type=token"), (1, 29.0, "train.batch_type=token"), (0, 31.0, "")):
        row = {"schedule": "budgeted", "changes": changes, "steps": 7, "last_lr_ratio": 0.0, "valid_loss": 0.2}
        row |= {"wer": wer, "per": 6.5, **buckets, "dropped_ends_letters_15_up": 2.0 * seed}
        run = tmp_path / ("token" if changes else "sentence") / f"budgeted-seed{seed}"
        run.mkdir(parents=True)
        (run / "results.json").write_text(json.dumps(row))
    slow.print_table(tmp_path / "token")
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("| budgeted | train.batch_type=token | 0,1 | 7/7 | 0.0000 | 0.2000 ± 0.0000 |")
    assert "| 28.00 ± 1.41 | 6.50 ± 0.00 | 30.0 ± 0.0 / 6.00 ± 0.00 / - |" in lines[-1]  # 1-4: no dropped ends
    assert lines[-1].endswith("| 30.0 ± 0.0 / 6.00 ± 0.00 / 1.0 ± 1.4 |")  # 15+: dropped ends 0 and 2
    assert lines[-3].startswith("| budgeted | train.batch_type=token | 0 | 7 | 0.0000 | 0.2000 | 27.00 | 6.50 |")
    assert len(lines) == 6 and lines[1].startswith("| schedule | changes | seed |")
