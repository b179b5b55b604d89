"""The sinusoidal encoding's relative-position properties, measured on seqlab's own table."""

import pytest
import torch

from seqlab.analysis.positional import positional_analysis, rotation
from seqlab.errors import ConfigError


@pytest.mark.parametrize(("d_model", "max_length"), [(2, 10), (16, 64), (128, 300)])
def test_shift_is_a_fixed_rotation_to_1e_5(d_model, max_length):
    result = positional_analysis(d_model, max_length)
    assert result.max_shift_error < 1e-5
    assert result.shift_error.shape == (max_length,)


def test_dot_product_depends_only_on_the_distance_and_equals_the_closed_form():
    D, L = 16, 80
    result = positional_analysis(D, L)
    assert float(result.dot_spread.max()) < 1e-9
    w = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    closed_form = torch.cos(torch.arange(L, dtype=torch.float64)[:, None] * w).sum(dim=1)  # sum_i cos(d w_i)
    torch.testing.assert_close(result.dot, closed_form)
    # and a brute-force pair: PE(3) . PE(10) == PE(40) . PE(47)
    table = result.table
    torch.testing.assert_close(table[3] @ table[10], table[40] @ table[47])


def test_rotations_are_orthogonal_and_compose():
    a, b = rotation(3, 8), rotation(5, 8)
    torch.testing.assert_close(a @ a.T, torch.eye(8, dtype=torch.float64))
    torch.testing.assert_close(a @ b, rotation(8, 8))


def test_bad_sizes_are_refused():
    with pytest.raises(ConfigError, match="max_length"):
        positional_analysis(8, 1)
    with pytest.raises(ValueError, match="even"):
        positional_analysis(7, 10)
