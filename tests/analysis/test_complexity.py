"""Cost against length: exponent fitting on synthetic data, and a run of every layer at tiny sizes."""

import math

import pytest

from seqlab.analysis.complexity import (
    COST_TABLE,
    LAYERS,
    MODES,
    cost_table,
    cost_table_headers,
    fit_exponent,
    measure_costs,
)
from seqlab.errors import ConfigError


@pytest.mark.parametrize("exponent", [1.0, 1.7, 2.0])
def test_fit_recovers_the_exponent_of_a_power_law(exponent):
    lengths = [64 * 2**i for i in range(8)]
    assert fit_exponent(lengths, [3e-6 * t**exponent for t in lengths]) == pytest.approx(exponent)


def test_fit_uses_the_upper_half_where_the_leading_term_dominates():
    lengths = [2**i for i in range(4, 16)]
    values = [100 * t + t**2 for t in lengths]  # linear below T = 100, quadratic above
    assert 1.9 < fit_exponent(lengths, values) < 2.0
    assert math.isnan(fit_exponent([8], [1.0]))


def test_every_layer_runs_at_tiny_sizes_in_both_modes():
    measurements = measure_costs(LAYERS, [4, 8], MODES, width=8, num_heads=2, window=2, repeats=1)
    assert len(measurements) == len(LAYERS) * len(MODES) * 2
    for m in measurements:
        assert not m.skipped and m.seconds >= 0 and m.peak_bytes > 0
    rows = cost_table(measurements)
    assert [row[0] for row in rows] == list(LAYERS)
    assert rows[3][1:5] == [*COST_TABLE["attention_reference"][:3], "2"]
    assert len(cost_table_headers(MODES)) == len(rows[0])


def test_lengths_past_the_memory_cap_are_skipped_with_the_reason():
    measurements = measure_costs(["attention_reference"], [4, 8, 16, 32], ["inference"], width=8, max_bytes=1)
    assert [m.seconds is None for m in measurements] == [False, False, True, True]
    assert "MiB cap" in measurements[2].skipped


def test_unknown_layers_and_modes_are_refused():
    with pytest.raises(ConfigError, match="layer"):
        measure_costs(["cnn"], [4], ["train"], width=8)
    with pytest.raises(ConfigError, match="mode"):
        measure_costs(["rnn"], [4], ["eval"], width=8)
