"""Lyapunov exponents by two trajectories on systems with known exponents, and the valid prediction time by hand."""

import numpy as np
import pytest

from seqlab.analysis.chaos import largest_lyapunov_exponent, normalised_error, valid_steps
from seqlab.errors import ConfigError


def test_the_logistic_map_at_r_4_has_exponent_ln_2():
    exponent = largest_lyapunov_exponent(
        lambda x: 4 * x * (1 - x), np.array(0.3), dt=1.0, renormalisations=100_000, transient=100
    )
    assert exponent == pytest.approx(np.log(2), abs=0.01)


def test_a_linear_flow_has_its_largest_eigenvalue_as_exponent():
    """x(t + dt) = exp(A dt) x with A = diag(0.7, -0.2, 0.1): lambda_1 = 0.7 once the separation has turned into
    the first axis (from the fixed point 0: a growing reference would swamp the separation in rounding)."""
    dt, rates = 0.1, np.array([0.7, -0.2, 0.1])
    exponent = largest_lyapunov_exponent(
        lambda x: np.exp(rates * dt) * x, np.zeros(3), dt=dt, renormalisations=50, renormalise_every=10, transient=50
    )
    assert exponent == pytest.approx(0.7, rel=1e-9)


def test_valid_steps_and_normalised_error_by_hand():
    forecast = np.array([[[3.0, 4.0], [0.0, 1.0]]])  # (B=1, S=2, C=2)
    np.testing.assert_allclose(normalised_error(forecast, np.zeros_like(forecast), scale=5.0), [[1.0, 0.2]])
    error = np.array([[0.1, 0.3, 0.5, 0.1], [0.0, 0.0, 0.0, 0.0], [0.6, 0.0, 0.0, 0.0]])
    # first above 0.4 at index 2; never (all 4 steps valid); at once
    np.testing.assert_array_equal(valid_steps(error, 0.4), [2, 4, 0])


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ConfigError, match=r"^threshold \(0\) must be a finite number > 0.0$"):
        valid_steps(np.zeros((1, 2)), 0)
    with pytest.raises(ConfigError, match=r"^dt \(-1.0\) must be a finite number > 0.0$"):
        largest_lyapunov_exponent(lambda x: x, np.zeros(1), dt=-1.0, renormalisations=1)
