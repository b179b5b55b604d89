"""Resume: a run killed at any point and resumed ends with the same weights, bit for bit, as one never interrupted.

The kill is simulated in-process (``Killed`` raised when a given micro-batch starts, mid-step, so the state
after the last checkpoint is lost as with SIGKILL); the resumed run reads only what the killed one left on disk.
Covered: g2p (attention RNN seq2seq, FullSequence, shuffled batches, dropout, gradient accumulation, scheduled
sampling's coins and step), lm with a
GPT (FullSequence, random blocks drawn from the data generator) and lm with an LSTM (TruncatedBPTT with its
carried state and context, document resets). Each kill point falls at a different place relative to the
checkpoints (every 3 steps), the validations (every 5 steps) and the epoch ends.
"""

import json

import pytest
import torch
from faults.helpers import (
    Killed,
    assert_equal_tensors,
    final_state,
    g2p_config,
    kill_at_micro_batch,
    lm_recipe_config,
    resume,
    train,
    weights,
)


@pytest.fixture(scope="module")
def setups(dictionary, corpus):
    return {
        "g2p": ("g2p", g2p_config(dictionary)),
        "g2p-accumulation": ("g2p", g2p_config(dictionary, grad_accumulation_steps=2)),
        "g2p-scheduled-sampling": (
            "g2p",
            g2p_config(dictionary, teacher_forcing_schedule="inverse_sigmoid", teacher_forcing_k=4.0),
        ),
        "lm-gpt": ("lm", lm_recipe_config(corpus, "gpt")),
        "lm-lstm-tbptt": ("lm", lm_recipe_config(corpus, "lstm")),
    }


@pytest.fixture(scope="module")
def uninterrupted(setups, tmp_path_factory):
    """Each setup's run without a kill: its run directory."""
    runs = {}
    for name, (recipe, config) in setups.items():
        runs[name] = tmp_path_factory.mktemp("whole") / name
        train(recipe, config, runs[name])
    return runs


@pytest.mark.parametrize(
    ("setup", "kill_at"),
    [
        ("g2p", 5),  # after the first checkpoint (step 3), before the first validation
        ("g2p", 13),  # after a validation's checkpoint, in the third epoch
        ("g2p-accumulation", 18),  # between the two micro-batches of a step
        ("g2p-scheduled-sampling", 8),  # the coins and the schedule's step continue
        ("lm-gpt", 7),
        ("lm-gpt", 12),  # right after a checkpoint at an epoch end
        ("lm-lstm-tbptt", 6),
        ("lm-lstm-tbptt", 11),
    ],
)
def test_a_killed_run_resumes_to_the_same_weights_bit_for_bit(
    setups, uninterrupted, tmp_path, monkeypatch, setup, kill_at
):
    recipe, config = setups[setup]
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        kill_at_micro_batch(patch, kill_at)
        with pytest.raises(Killed):
            train(recipe, config, out)
    assert not (out / "results.json").exists()
    resume(recipe, out)
    whole = uninterrupted[setup]
    assert_equal_tensors(weights(out), weights(whole))  # the best parameters, the run's product
    assert_equal_tensors(final_state(out), final_state(whole))  # the parameters after the last step
    results, expected = (json.loads((d / "results.json").read_text()) for d in (out, whole))
    timing = {"train_seconds", "total_seconds"}
    assert {k: v for k, v in results.items() if k not in timing} == {
        k: v for k, v in expected.items() if k not in timing
    }
    assert metrics(out) == metrics(whole)  # every step and validation logged once, with the same numbers


def metrics(out):
    """metrics.jsonl's records without their timings."""
    timing = {"seconds", "tokens_per_s"}
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in record.items() if k not in timing} for record in records]


def test_a_run_killed_twice_resumes_to_the_same_weights(setups, uninterrupted, tmp_path, monkeypatch):
    recipe, config = setups["lm-lstm-tbptt"]
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        kill_at_micro_batch(patch, 4)
        with pytest.raises(Killed):
            train(recipe, config, out)
    with monkeypatch.context() as patch:
        kill_at_micro_batch(patch, 6)  # counts the resumed run's micro-batches
        with pytest.raises(Killed):
            resume(recipe, out)
    resume(recipe, out)
    assert_equal_tensors(weights(out), weights(uninterrupted["lm-lstm-tbptt"]))


def test_resuming_a_finished_run_changes_nothing(setups, uninterrupted, tmp_path):
    recipe, config = setups["g2p"]
    out = tmp_path / "run"
    train(recipe, config, out)
    before = weights(out)
    resume(recipe, out)
    assert_equal_tensors(weights(out), before)


def test_a_resumed_run_averages_the_same_validations_as_an_uninterrupted_one(dictionary, tmp_path, monkeypatch):
    """train.average_last=2, validations at steps 5, 10 and 14, killed after step 12's checkpoint: the weights of
    step 10's validation come back from the checkpoint, so the saved average is that of steps 10 and 14."""
    config = g2p_config(dictionary, average_last=2)
    whole, out = tmp_path / "whole", tmp_path / "run"
    train("g2p", config, whole)
    with monkeypatch.context() as patch:
        kill_at_micro_batch(patch, 13)
        with pytest.raises(Killed):
            train("g2p", config, out)
    resume("g2p", out)
    assert_equal_tensors(weights(out), weights(whole))
    best = tmp_path / "best"
    train("g2p", g2p_config(dictionary), best)  # the same steps without averaging: other saved weights
    assert any(not torch.equal(a, b) for a, b in zip(weights(best).values(), weights(whole).values(), strict=True))
