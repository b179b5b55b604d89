"""The copy task and the adding problem: targets follow from the inputs as the papers define them."""

import math

import pytest
import torch

from seqlab.data.synthetic import AddingTask, CopyTask, make_task
from seqlab.errors import ConfigError


def test_copy_target_is_the_input_symbols_after_the_delimiter():
    task = CopyTask(lag=7, num_symbols=4)
    inputs, targets = task.batch(16, generator=torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (16, 7 + 2 * 4)
    symbols = inputs[:, :4]
    assert symbols.max() < 8
    # lag - 1 blanks, the delimiter, then S blanks (Arjovsky et al., 2016, sec. 4.1).
    assert (inputs[:, 4:10] == task.blank).all()
    assert (inputs[:, 10] == task.delimiter).all()
    assert (inputs[:, 11:] == task.blank).all()
    assert torch.equal(targets[:, -4:], symbols)
    assert (targets[:, :-4] == task.blank).all()
    assert task.baseline_loss == pytest.approx(4 * math.log(8) / 15)


def test_adding_target_is_the_sum_of_exactly_two_marked_values_one_per_half():
    task = AddingTask(lag=9)
    inputs, targets = task.batch(64, generator=torch.Generator().manual_seed(0))
    assert inputs.shape == (64, 9, 2) and targets.shape == (64,)
    values, markers = inputs[..., 0], inputs[..., 1]
    assert ((values >= 0) & (values <= 1)).all()
    assert set(markers.unique().tolist()) == {0.0, 1.0}
    assert (markers[:, :4].sum(1) == 1).all() and (markers[:, 4:].sum(1) == 1).all()
    for row in range(64):
        marked = [values[row, t].item() for t in range(9) if markers[row, t] == 1]
        assert targets[row].item() == pytest.approx(sum(marked))


def test_batches_repeat_with_the_generator_state_and_differ_after():
    task = AddingTask(lag=6)
    generator = torch.Generator().manual_seed(3)
    first, second = task.batch(4, generator=generator), task.batch(4, generator=generator)
    again = task.batch(4, generator=torch.Generator().manual_seed(3))
    assert torch.equal(first.inputs, again.inputs) and torch.equal(first.targets, again.targets)
    assert not torch.equal(first.inputs, second.inputs)


def test_predicting_one_scores_the_adding_baseline():
    task = AddingTask(lag=20)
    _, targets = task.batch(200_000, generator=torch.Generator().manual_seed(0))
    assert task.evaluate(torch.ones_like(targets), targets).metric == pytest.approx(task.baseline, rel=0.02)


def test_copy_metric_counts_the_recalled_symbols_only():
    task = CopyTask(lag=3, num_symbols=2)
    _, targets = task.batch(5, generator=torch.Generator().manual_seed(0))
    logits = torch.nn.functional.one_hot(targets, 9).float()  # (B, T, 9), right everywhere
    logits[:, 0] = 0.0  # wrong before the recall changes nothing
    assert task.evaluate(logits, targets).metric == 100.0
    logits[:, -1] = torch.nn.functional.one_hot((targets[:, -1] + 1) % 8, 9).float()
    assert task.evaluate(logits, targets).metric == 50.0


def test_bad_task_arguments():
    with pytest.raises(ConfigError, match="lag"):
        AddingTask(lag=1)
    with pytest.raises(ConfigError, match="num_symbols"):
        CopyTask(lag=3, num_symbols=0)
    with pytest.raises(ConfigError, match="'sort'"):
        make_task("sort", 3)
