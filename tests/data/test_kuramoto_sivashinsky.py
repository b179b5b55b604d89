"""The Kuramoto-Sivashinsky solver: ETDRK4's coefficients against their closed forms and limits, the linear part
exact on a Fourier mode, the mean of u conserved, fourth-order convergence on Kassam & Trefethen's problem."""

import numpy as np
import pytest

from seqlab.data.kuramoto_sivashinsky import (
    KuramotoSivashinsky,
    etdrk4_coefficients,
    etdrk4_step,
    ks_trajectory,
    random_initial_field,
)
from seqlab.errors import ConfigError


def test_contour_coefficients_equal_the_closed_forms_away_from_zero_and_rk4_weights_at_zero():
    h, c = 0.5, np.array([-10.0, -3.0, 2.0])
    z = h * c
    coefficients = etdrk4_coefficients(c, h, contour_points=32)
    # Cox & Matthews (2002), eq. 26, where the closed forms do not cancel
    np.testing.assert_allclose(coefficients.Q, h * (np.exp(z / 2) - 1) / z, rtol=1e-12)
    np.testing.assert_allclose(coefficients.f1, h * (-4 - z + np.exp(z) * (4 - 3 * z + z**2)) / z**3, rtol=1e-10)
    np.testing.assert_allclose(coefficients.f2, h * (2 + z + np.exp(z) * (-2 + z)) / z**3, rtol=1e-10)
    np.testing.assert_allclose(coefficients.f3, h * (-4 - 3 * z - z**2 + np.exp(z) * (4 - z)) / z**3, rtol=1e-10)
    # at c = 0 the scheme is classical RK4: Q = h/2, weights h/6, 2h/6 (for N(a) + N(b) together), h/6
    at_zero = etdrk4_coefficients(np.zeros(1), h)
    np.testing.assert_allclose(
        [at_zero.Q[0], at_zero.f1[0], at_zero.f2[0], at_zero.f3[0]], [h / 2, h / 6, h / 6, h / 6], rtol=1e-14
    )


def test_the_linear_part_alone_is_exact_on_a_single_fourier_mode():
    solver = KuramotoSivashinsky(22.0, 64, 0.25)
    v = np.zeros(33, dtype=complex)
    v[3] = 1.0 + 0.5j  # k = 3 * 2 pi / 22: c = k^2 - k^4 > 0, a growing mode
    steps = 40
    for _ in range(steps):
        v = etdrk4_step(v, solver.coefficients, lambda w: np.zeros_like(w))
    expected = (1.0 + 0.5j) * np.exp(solver.linear[3] * 0.25 * steps)
    assert v[3] == pytest.approx(expected, rel=1e-13)
    assert np.count_nonzero(v) == 1


def test_the_mean_of_u_is_conserved():
    solver = KuramotoSivashinsky(22.0, 64, 0.25)
    u0 = random_initial_field(64, seed=3, amplitude=1.0) + 0.3
    fields = solver.simulate(u0, 400)
    np.testing.assert_allclose(fields.mean(axis=1), np.full(401, u0.mean()), atol=1e-12)
    assert np.abs(fields[-1] - u0).max() > 1.0  # it did evolve


def test_etdrk4_converges_at_fourth_order_on_kassam_and_trefethens_problem():
    """kursiv.m's setting: L = 32 pi, N = 128, u0 = cos(x/16) (1 + sin(x/16)); errors at t = 2 against h = 2/2560."""
    length, grid, t_end = 32 * np.pi, 128, 2.0
    x = length * np.arange(grid) / grid
    u0 = np.cos(x / 16) * (1 + np.sin(x / 16))

    def solve(steps: int) -> np.ndarray:
        return KuramotoSivashinsky(length, grid, t_end / steps).simulate(u0, steps)[-1]

    reference = solve(2560)
    errors = [np.abs(solve(n) - reference).max() for n in (10, 20, 40)]
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    np.testing.assert_allclose(orders, [4.0, 4.0], atol=0.1)


def test_trajectories_are_deterministic_and_chaotic():
    settings = dict(length=22.0, grid=64, dt=0.25, steps=300, transient_steps=400)
    first = ks_trajectory(**settings, seed=0)
    assert first.shape == (300, 64)
    np.testing.assert_array_equal(first, ks_trajectory(**settings, seed=0))
    assert np.abs(first - ks_trajectory(**settings, seed=1)).max() > 1.0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (dict(grid=63), r"^grid \(63\) must be even$"),
        (dict(dt=0.0), r"^dt \(0.0\) must be a finite number > 0.0$"),
        (dict(length=-1.0), r"^length \(-1.0\) must be a finite number > 0.0$"),
    ],
)
def test_bad_settings_are_one_line_errors(arguments, message):
    with pytest.raises(ConfigError, match=message):
        KuramotoSivashinsky(**{"length": 22.0, "grid": 64, "dt": 0.25, **arguments})
