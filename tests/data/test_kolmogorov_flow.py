"""The Kolmogorov-flow solver against exact solutions of the Navier-Stokes equations (the Taylor-Green vortex's decay,
the laminar Kolmogorov flow at rest, a single mode's decay), the inviscid invariants (energy and enstrophy), and
the trajectories' shape and determinism."""

import numpy as np
import pytest

from seqlab.data.kolmogorov_flow import KolmogorovFlow, kolmogorov_trajectories, random_vorticity
from seqlab.errors import ConfigError

GRID = 32
Y, X = np.meshgrid(2 * np.pi * np.arange(GRID) / GRID, 2 * np.pi * np.arange(GRID) / GRID, indexing="ij")


def test_the_taylor_green_vortex_decays_as_exp_of_minus_2_nu_t_through_the_full_solver():
    """omega = 2 cos x cos y: psi = omega / 2, so u . grad(omega) = 0 and omega(t) = omega(0) exp(-2 nu t)."""
    nu, dt = 0.05, 0.1
    solver = KolmogorovFlow(GRID, viscosity=nu, forcing_wavenumber=0, dt=dt)
    omega0 = 2 * np.cos(X) * np.cos(Y)
    fields = solver.simulate(omega0, 5, steps_per_sample=10)
    expected = omega0 * np.exp(-2 * nu * dt * 10 * np.arange(6))[:, None, None]
    np.testing.assert_allclose(fields, expected, atol=1e-12)


def test_a_sheared_mode_translates_nowhere_and_decays_at_its_own_rate_with_drag():
    """omega = cos(3 x + 1): a parallel shear, no advection; c = -nu 9 - alpha."""
    nu, alpha, dt = 0.02, 0.1, 0.05
    solver = KolmogorovFlow(GRID, viscosity=nu, drag=alpha, forcing_wavenumber=0, dt=dt)
    omega0 = np.cos(3 * X + 1.0)
    fields = solver.simulate(omega0, 4, steps_per_sample=20)
    decay = np.exp(-(9 * nu + alpha) * dt * 20 * np.arange(5))
    np.testing.assert_allclose(fields, omega0 * decay[:, None, None], atol=1e-12)


def test_the_laminar_kolmogorov_flow_is_a_steady_state():
    """f = -n cos(n y) balanced by viscosity and drag: omega = -n cos(n y) / (nu n^2 + alpha)."""
    nu, alpha, n = 1 / 40, 0.05, 4
    solver = KolmogorovFlow(GRID, viscosity=nu, drag=alpha, forcing_wavenumber=n, dt=0.1)
    laminar = -n * np.cos(n * Y) / (nu * n**2 + alpha)
    fields = solver.simulate(laminar, 3, steps_per_sample=10)
    np.testing.assert_allclose(fields, np.broadcast_to(laminar, fields.shape), atol=1e-11)


def test_without_viscosity_drag_and_forcing_energy_and_enstrophy_are_conserved():
    solver = KolmogorovFlow(GRID, viscosity=0.0, forcing_wavenumber=0, dt=0.01)
    omega0 = random_vorticity(GRID, members=2, seed=1)
    fields = solver.simulate(omega0, 10, steps_per_sample=20)  # 2 time units: omega rearranges
    energy, enstrophy = solver.energy_and_enstrophy(fields)  # (11, 2) each
    np.testing.assert_allclose(energy, np.broadcast_to(energy[0], energy.shape), rtol=1e-6)
    np.testing.assert_allclose(enstrophy, np.broadcast_to(enstrophy[0], enstrophy.shape), rtol=1e-6)
    assert np.abs(fields[-1] - fields[0]).max() > 0.5  # it did evolve
    np.testing.assert_allclose(fields.mean(axis=(-2, -1)), 0.0, atol=1e-12)  # the mean vorticity stays zero


def test_trajectories_are_members_by_samples_by_grid_and_deterministic():
    arguments = dict(
        grid=16, viscosity=1 / 40, drag=0.0, forcing_wavenumber=2, dt=0.1, steps_per_sample=2, samples=5, members=3
    )
    first = kolmogorov_trajectories(**arguments, transient_samples=2, seed=4)
    assert first.shape == (3, 5, 16, 16)
    np.testing.assert_array_equal(first, kolmogorov_trajectories(**arguments, transient_samples=2, seed=4))
    assert not np.allclose(first, kolmogorov_trajectories(**arguments, transient_samples=2, seed=5))
    no_transient = kolmogorov_trajectories(**arguments, transient_samples=0, seed=4)
    np.testing.assert_allclose(no_transient[:, 0], random_vorticity(16, members=3, seed=4), atol=1e-12)


def test_bad_sizes_are_refused_with_the_value():
    with pytest.raises(ConfigError, match=r"grid \(15\) must be even"):
        KolmogorovFlow(15)
    with pytest.raises(ConfigError, match=r"forcing_wavenumber \(11\) must be an integer >= 0 and <= 9"):
        KolmogorovFlow(32, forcing_wavenumber=11)
    with pytest.raises(ConfigError, match=r"viscosity \(-1\.0\) must be a finite number >= 0\.0"):
        KolmogorovFlow(32, viscosity=-1.0)
