"""Models of ``seqlab compare``: parameter counts matched across archs, outputs shaped for each task."""

import pytest
import torch

from seqlab.analysis.compare import (
    ARCHITECTURES,
    TCN_KERNEL_SIZE,
    SequenceModel,
    matched_model,
    matched_width,
    parameter_count,
    tcn_levels,
)
from seqlab.data.synthetic import AddingTask, CopyTask
from seqlab.errors import ConfigError


@pytest.mark.parametrize("task", [CopyTask(lag=10), AddingTask(lag=10)], ids=["copy", "adding"])
@pytest.mark.parametrize("target", [3_000, 20_000])
def test_counts_match_the_target_within_ten_percent(task, target):
    for arch in ARCHITECTURES:
        matched = matched_model(arch, task, target, seed=0)
        assert matched.parameters == parameter_count(matched.model)
        assert abs(matched.parameters - target) <= 0.1 * target, (arch, matched.parameters)
        # The closest width: one step either way is no closer.
        step = 2 if arch == "transformer" else 1
        for other in (matched.width - step, matched.width + step):
            count = parameter_count(SequenceModel(arch, task, other))
            assert abs(count - target) >= abs(matched.parameters - target)


def test_recurrent_counts_equal_the_textbook_formula():
    task = AddingTask(lag=4)
    H = matched_width("lstm", task, 5_000)
    # input Linear(2, H) + LSTM 4 (H * H + H * H + 2 H) + head Linear(H, 1).
    assert parameter_count(SequenceModel("lstm", task, H)) == 3 * H + 4 * (2 * H * H + 2 * H) + H + 1


def test_outputs_per_task():
    copy, adding = CopyTask(lag=4, num_symbols=3), AddingTask(lag=6)
    generator = torch.Generator().manual_seed(0)
    for arch in ARCHITECTURES:
        assert SequenceModel(arch, copy, 8)(copy.batch(2, generator=generator).inputs).shape == (2, 10, 9)
        assert SequenceModel(arch, adding, 8)(adding.batch(2, generator=generator).inputs).shape == (2,)


def test_copy_transformer_is_causal():
    task = CopyTask(lag=4, num_symbols=3)
    model = SequenceModel("transformer", task, 8).eval()
    x = task.batch(1, generator=torch.Generator().manual_seed(0)).inputs
    changed = x.clone()
    changed[0, -1] = 3
    torch.testing.assert_close(model(x)[:, :-1], model(changed)[:, :-1])


def test_seed_fixes_the_initial_weights():
    task = CopyTask(lag=4)
    a, b = (matched_model("gru", task, 4_000, seed=5).model for _ in range(2))
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def test_unreachable_target_is_refused():
    with pytest.raises(ConfigError, match="no transformer width has about 50 parameters"):
        matched_width("transformer", CopyTask(lag=4), 50)


@pytest.mark.parametrize("task", [CopyTask(lag=10), AddingTask(lag=50), CopyTask(lag=50)], ids=str)
def test_tcn_reads_the_whole_sequence_with_the_fewest_levels(task):
    model = SequenceModel("tcn", task, 8)
    levels = tcn_levels(task.length)
    assert len(model.core.levels) == levels
    assert model.receptive_field == 1 + 2 * (TCN_KERNEL_SIZE - 1) * (2**levels - 1) >= task.length
    assert 1 + 2 * (TCN_KERNEL_SIZE - 1) * (2 ** (levels - 1) - 1) < task.length or levels == 1
    assert SequenceModel("gru", task, 8).receptive_field is None


def test_copy_tcn_is_causal():
    task = CopyTask(lag=4, num_symbols=3)
    model = SequenceModel("tcn", task, 8).eval()
    x = task.batch(1, generator=torch.Generator().manual_seed(0)).inputs
    changed = x.clone()
    changed[0, -1] = 3
    torch.testing.assert_close(model(x)[:, :-1], model(changed)[:, :-1])
