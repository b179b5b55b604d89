"""The CPU peak-memory counter against allocations of known size."""

import pytest
import torch

from seqlab.analysis.memory import PeakTensorMemory, measure_call
from seqlab.errors import ConfigError


def test_peak_and_current_count_live_storages_exactly():
    with PeakTensorMemory() as tracker:
        a = torch.empty(1000)  # 4000 bytes
        b = torch.empty(2000, dtype=torch.float64)  # 16000 bytes
        view = b[:10]  # no new storage
        del a
        c = torch.empty(500)  # 2000 bytes
    assert tracker.peak == 20000
    assert tracker.current == 18000
    del b, c, view
    assert tracker.current == 0


def test_backward_allocations_are_counted():
    x = torch.randn(64, 64, requires_grad=True)
    with PeakTensorMemory() as forward_only:
        (x @ x).sum()
    with PeakTensorMemory() as with_backward:
        (x @ x).sum().backward()
    assert with_backward.peak > forward_only.peak >= 64 * 64 * 4


def test_measure_call_times_and_counts():
    cost = measure_call(lambda: torch.ones(256, 256) @ torch.ones(256, 256), device=torch.device("cpu"), repeats=2)
    assert cost.seconds >= 0 and cost.peak_bytes >= 3 * 256 * 256 * 4
    with pytest.raises(ConfigError, match="repeats"):
        measure_call(lambda: None, device=torch.device("cpu"), repeats=0)
