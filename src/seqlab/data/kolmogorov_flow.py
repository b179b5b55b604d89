"""Two-dimensional Kolmogorov flow: forced incompressible Navier-Stokes in vorticity form, simulated offline by a
pseudo-spectral solver with ETDRK4 time stepping.

    omega_t + u . grad(omega) = nu lap(omega) - alpha omega + f(y),    f = -n cos(n y),    (x, y) in [0, 2 pi)^2

with u = (psi_y, -psi_x) and lap(psi) = -omega (periodic in both directions). This is the setting of Chandler &
Kerswell (2013, J. Fluid Mech. 722, 554-595: forcing wavenumber n = 4, nu = 1 / Re, their turbulent regime at
Re = 40) with an optional linear drag alpha (Boffetta & Ecke, 2012, Annu. Rev. Fluid Mech. 44).

In Fourier space (omega_hat at wavevectors k = (k_x, k_y), |k|^2 = k_x^2 + k_y^2) the linear part is diagonal,
c_k = -nu |k|^2 - alpha, and is integrated exactly by ETDRK4 (Cox & Matthews, 2002; the contour coefficients of
Kassam & Trefethen, 2005: ``seqlab.data.kuramoto_sivashinsky.etdrk4_coefficients``); the advection and the
forcing form the nonlinear part

    N_k = -FFT(u omega_x + v omega_y)_k + f_k,    u_hat = i k_y psi_hat,  v_hat = -i k_x psi_hat,
                                                  psi_hat = omega_hat / |k|^2

with the products formed on the grid and dealiased by the 2/3 rule (Orszag, 1971): modes with |k_x| or |k_y| above
N / 3 are zeroed after every product. The k = 0 mode (the mean vorticity) is zero and stays zero. Without viscosity,
drag and forcing the truncated system conserves the energy sum |u_hat|^2 / 2 and the enstrophy sum |omega_hat|^2 / 2
exactly (only the time stepping errs); a single mode, or the Taylor-Green vortex omega = 2 cos x cos y, has zero
advection and decays as exp(c_k t): the tests hold the solver to both.
"""

from __future__ import annotations

import numpy as np

from seqlab.data.kuramoto_sivashinsky import etdrk4_coefficients, etdrk4_step
from seqlab.errors import ConfigError
from seqlab.validation import check_int, check_real


class KolmogorovFlow:
    """The vorticity equation on [0, 2 pi)^2 with ``grid`` x ``grid`` points, stepped by ETDRK4 with step ``dt``
    (module docstring).

    Args:
        grid: N points a side (even, >= 8).  viscosity: nu (1 / Re).  drag: alpha >= 0.
        forcing_wavenumber: n of f = -n cos(n y); 0 for no forcing.  dt: h, the time step.
    Inputs: fields omega (..., N, N), indexed [y, x].
    Raises: ConfigError for an odd or too small N, nu < 0, alpha < 0, n < 0 or n >= N / 3, or dt <= 0.
    """

    def __init__(
        self,
        grid: int = 64,
        *,
        viscosity: float = 1 / 40,
        drag: float = 0.0,
        forcing_wavenumber: int = 4,
        dt: float = 0.01,
    ) -> None:
        check_int("grid", grid, minimum=8)
        if grid % 2:
            raise ConfigError(f"grid ({grid}) must be even")
        check_real("viscosity", viscosity, at_least=0.0)
        check_real("drag", drag, at_least=0.0)
        check_int("forcing_wavenumber", forcing_wavenumber, minimum=0, maximum=grid // 3 - 1)
        check_real("dt", dt, greater_than=0.0)
        self.grid, self.dt = grid, dt
        self.kx = np.fft.rfftfreq(grid, 1.0 / grid)[None, :]  # (1, N/2 + 1): integer wavenumbers on [0, 2 pi)
        self.ky = np.fft.fftfreq(grid, 1.0 / grid)[:, None]  # (N, 1)
        k2 = self.kx**2 + self.ky**2  # (N, N/2 + 1)
        self.inverse_laplacian = np.divide(1.0, k2, out=np.zeros_like(k2), where=k2 > 0)  # psi_hat = omega_hat / |k|^2
        self.keep = (np.abs(self.kx) < grid / 3) & (np.abs(self.ky) < grid / 3)  # the 2/3 rule
        self.linear = -viscosity * k2 - drag  # c_k
        y = 2 * np.pi * np.arange(grid) / grid
        forcing = np.broadcast_to((-forcing_wavenumber * np.cos(forcing_wavenumber * y))[:, None], (grid, grid))
        self.forcing = np.fft.rfft2(forcing) if forcing_wavenumber else np.zeros_like(k2, dtype=complex)
        self.coefficients = etdrk4_coefficients(self.linear, dt)

    def nonlinear(self, w: np.ndarray) -> np.ndarray:
        """N(w) = -FFT(u omega_x + v omega_y) + f, dealiased: the modes (..., N, N/2 + 1) of the advection and
        forcing of the vorticity modes ``w``."""
        psi = w * self.inverse_laplacian
        u = np.fft.irfft2(1j * self.ky * psi, s=(self.grid, self.grid))  # psi_y
        v = np.fft.irfft2(-1j * self.kx * psi, s=(self.grid, self.grid))  # -psi_x
        wx = np.fft.irfft2(1j * self.kx * w, s=(self.grid, self.grid))
        wy = np.fft.irfft2(1j * self.ky * w, s=(self.grid, self.grid))
        return self.keep * (self.forcing - np.fft.rfft2(u * wx + v * wy))

    def step_modes(self, w: np.ndarray, steps: int = 1) -> np.ndarray:
        """The vorticity modes ``w`` (..., N, N/2 + 1) ``steps`` steps of dt later."""
        for _ in range(steps):
            w = etdrk4_step(w, self.coefficients, self.nonlinear)
        return w

    def simulate(self, omega0: np.ndarray, samples: int, *, steps_per_sample: int = 1) -> np.ndarray:
        """(samples + 1, ..., N, N): omega0 (..., N, N) and the fields every ``steps_per_sample`` steps after it
        (kept in Fourier space, dealiased, in between)."""
        w = self.keep * np.fft.rfft2(omega0)
        out = np.empty((samples + 1, *np.shape(omega0)))
        out[0] = np.fft.irfft2(w, s=(self.grid, self.grid))
        for n in range(1, samples + 1):
            w = self.step_modes(w, steps_per_sample)
            out[n] = np.fft.irfft2(w, s=(self.grid, self.grid))
        return out

    def energy_and_enstrophy(self, omega: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(E, Z), each (...,): the mean kinetic energy <|u|^2> / 2 and enstrophy <omega^2> / 2 over the grid of
        fields omega (..., N, N), computed on the grid."""
        psi = np.fft.rfft2(omega) * self.inverse_laplacian
        u = np.fft.irfft2(1j * self.ky * psi, s=(self.grid, self.grid))
        v = np.fft.irfft2(-1j * self.kx * psi, s=(self.grid, self.grid))
        return (u**2 + v**2).mean(axis=(-2, -1)) / 2, (omega**2).mean(axis=(-2, -1)) / 2


def random_vorticity(grid: int, *, members: int, seed: int, amplitude: float = 1.0, modes: int = 4) -> np.ndarray:
    """(members, N, N): smooth zero-mean random fields, Gaussian Fourier coefficients on the wavenumbers with
    1 <= |k_x|, |k_y| <= ``modes`` (0 allowed for one of them), scaled to an rms of ``amplitude``; from ``seed``."""
    rng = np.random.default_rng(seed)
    kx = np.fft.rfftfreq(grid, 1.0 / grid)[None, :]
    ky = np.fft.fftfreq(grid, 1.0 / grid)[:, None]
    low = (np.abs(kx) <= modes) & (np.abs(ky) <= modes) & (kx**2 + ky**2 > 0)
    shape = (members, grid, grid // 2 + 1)
    w = low * (rng.normal(size=shape) + 1j * rng.normal(size=shape))
    omega = np.fft.irfft2(w, s=(grid, grid))
    return amplitude * omega / np.sqrt((omega**2).mean(axis=(-2, -1), keepdims=True))


def kolmogorov_trajectories(
    *,
    grid: int,
    viscosity: float,
    drag: float,
    forcing_wavenumber: int,
    dt: float,
    steps_per_sample: int,
    samples: int,
    transient_samples: int,
    members: int,
    seed: int,
) -> np.ndarray:
    """(members, samples, N, N): independent Kolmogorov-flow trajectories (one per member, from
    ``random_vorticity(seed)``), sampled every ``steps_per_sample`` steps of dt after ``transient_samples`` samples
    that bring them onto the attractor. Deterministic given the arguments.

    Raises: ConfigError for sizes or physical parameters out of range (``KolmogorovFlow``'s).
    """
    check_int("samples", samples)
    check_int("transient_samples", transient_samples, minimum=0)
    check_int("members", members)
    check_int("steps_per_sample", steps_per_sample)
    solver = KolmogorovFlow(grid, viscosity=viscosity, drag=drag, forcing_wavenumber=forcing_wavenumber, dt=dt)
    omega = random_vorticity(grid, members=members, seed=seed)
    if transient_samples:
        omega = solver.simulate(omega, transient_samples, steps_per_sample=steps_per_sample)[-1]
    fields = solver.simulate(omega, samples - 1, steps_per_sample=steps_per_sample)  # (S, M, N, N)
    return np.ascontiguousarray(fields.transpose(1, 0, 2, 3))
