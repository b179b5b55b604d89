"""The Kuramoto-Sivashinsky equation, integrated by ETDRK4: 1-D spatio-temporal chaos, simulated offline.

    u_t + u u_x + u_xx + u_xxxx = 0,    x in [0, L) periodic

In Fourier space (u_hat_k, wavenumbers k = 2 pi n / L) the stiff linear part is diagonal and the nonlinear part is
evaluated on the grid:

    d u_hat_k / dt = (k^2 - k^4) u_hat_k + N_k(u),    N_k = -(i k / 2) FFT(u^2)_k    (u u_x = (u^2 / 2)_x)

ETDRK4, the exponential time-differencing fourth-order Runge-Kutta scheme of Cox & Matthews (2002, J. Comput. Phys.
176, eq. 26), integrates the linear part exactly and the nonlinear part to fourth order; its coefficients
(phi functions of h * c, c = k^2 - k^4) are evaluated by the contour integral of Kassam & Trefethen (2005, SIAM J.
Sci. Comput. 26(4), 1214-1233, Sec. 3 and their program ``kursiv.m``): the mean over M points on a circle of radius
1 around each h * c, which avoids the cancellation of the textbook formulas near c = 0. The Nyquist mode's
derivative is zeroed (as in ``kursiv.m``), so the field stays real; the k = 0 mode (the mean of u) is conserved
exactly.

L = 22 (chaotic, a largest Lyapunov exponent of about 0.043 per time unit: Edson et al., 2019, Chaos 29, 043126)
with 64 grid points and h = 0.25 is the setting of Pathak et al. (2018, Phys. Rev. Lett. 120, 024102) and Vlachas
et al. (2020, Neural Networks 126).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from seqlab.errors import ConfigError
from seqlab.validation import check_int, check_real


class ETDRK4Coefficients(NamedTuple):
    """The per-mode coefficients of one ETDRK4 step of size h for the linear operator c (all like c).

    Attributes:
        E, E2: exp(h c), exp(h c / 2).  Q: h phi_1(h c / 2)-like factor of the half steps.
        f1, f2, f3: the full step's weights of N(v), N(a) + N(b) and N(c) (Kassam & Trefethen, eq. 2.5).
    """

    E: np.ndarray
    E2: np.ndarray
    Q: np.ndarray
    f1: np.ndarray
    f2: np.ndarray
    f3: np.ndarray


def etdrk4_coefficients(linear: np.ndarray, dt: float, *, contour_points: int = 16) -> ETDRK4Coefficients:
    """ETDRK4 coefficients of a diagonal linear operator ``linear`` (c, real, any shape) and step ``dt`` (h), by the
    contour-integral means of Kassam & Trefethen (2005, ``kursiv.m``): M points r_j = exp(i pi (j - 1/2) / M) on the
    unit circle around each h c.

    Raises: ConfigError for dt <= 0 or fewer than 4 contour points.
    """
    check_real("dt", dt, greater_than=0.0)
    check_int("contour_points", contour_points, minimum=4)
    hc = dt * np.asarray(linear, dtype=float)
    r = np.exp(1j * np.pi * (np.arange(1, contour_points + 1) - 0.5) / contour_points)  # (M,)
    z = hc[..., None] + r  # (..., M): the points of the contour around each h c
    ez = np.exp(z)
    Q = dt * np.real(np.mean((np.exp(z / 2) - 1) / z, axis=-1))
    f1 = dt * np.real(np.mean((-4 - z + ez * (4 - 3 * z + z**2)) / z**3, axis=-1))
    f2 = dt * np.real(np.mean((2 + z + ez * (-2 + z)) / z**3, axis=-1))
    f3 = dt * np.real(np.mean((-4 - 3 * z - z**2 + ez * (4 - z)) / z**3, axis=-1))
    return ETDRK4Coefficients(np.exp(hc), np.exp(hc / 2), Q, f1, f2, f3)


def etdrk4_step(
    v: np.ndarray, coefficients: ETDRK4Coefficients, nonlinear: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """One ETDRK4 step of dv/dt = c v + N(v) (Cox & Matthews 2002, eq. 26; Kassam & Trefethen 2005, eq. 2.5).

    Args:
        v: the state's modes (..., K) at t.  coefficients: ``etdrk4_coefficients`` of c and h, (K,).
        nonlinear: N, modes -> modes of the same shape.
    Outputs: the modes at t + h.
    """
    E, E2, Q, f1, f2, f3 = coefficients
    Nv = nonlinear(v)
    a = E2 * v + Q * Nv
    Na = nonlinear(a)
    b = E2 * v + Q * Na
    Nb = nonlinear(b)
    c = E2 * a + Q * (2 * Nb - Nv)
    Nc = nonlinear(c)
    return E * v + Nv * f1 + 2 * (Na + Nb) * f2 + Nc * f3


class KuramotoSivashinsky:
    """The KS equation on [0, length) with ``grid`` points, stepped by ETDRK4 with step ``dt`` (module docstring).

    Args:
        length: L, the domain's length.  grid: N, points (even).  dt: h, the time step.
    Raises: ConfigError for L <= 0, an odd or too small N (< 8), or dt <= 0.
    """

    def __init__(self, length: float = 22.0, grid: int = 64, dt: float = 0.25) -> None:
        check_real("length", length, greater_than=0.0)
        check_int("grid", grid, minimum=8)
        if grid % 2:
            raise ConfigError(f"grid ({grid}) must be even")
        self.length, self.grid, self.dt = length, grid, dt
        self.k = 2 * np.pi / length * np.arange(grid // 2 + 1)  # (N/2 + 1,): the rfft modes' wavenumbers
        self.linear = self.k**2 - self.k**4  # c_k: anti-diffusion at long waves, hyper-diffusion at short ones
        derivative = 1j * self.k
        derivative[-1] = 0.0  # the Nyquist mode's derivative is zeroed, as in kursiv.m: u stays real
        self.g = -0.5 * derivative  # N_k = g_k FFT(u^2)_k
        self.coefficients = etdrk4_coefficients(self.linear, dt)

    @property
    def x(self) -> np.ndarray:
        """(N,): the grid points j L / N."""
        return self.length * np.arange(self.grid) / self.grid

    def nonlinear(self, v: np.ndarray) -> np.ndarray:
        """N(v) = -(i k / 2) FFT(u^2), u = IFFT(v): the modes of -u u_x, (..., N/2 + 1)."""
        u = np.fft.irfft(v, n=self.grid)
        return self.g * np.fft.rfft(u * u)

    def step(self, u: np.ndarray) -> np.ndarray:
        """The field (..., N) one step dt later."""
        v = etdrk4_step(np.fft.rfft(u), self.coefficients, self.nonlinear)
        return np.fft.irfft(v, n=self.grid)

    def simulate(self, u0: np.ndarray, steps: int) -> np.ndarray:
        """(steps + 1, N): u0 and the fields after 1..steps steps (kept in Fourier space in between)."""
        v = np.fft.rfft(u0)
        out = np.empty((steps + 1, self.grid))
        out[0] = u0
        for n in range(1, steps + 1):
            v = etdrk4_step(v, self.coefficients, self.nonlinear)
            out[n] = np.fft.irfft(v, n=self.grid)
        return out


def random_initial_field(grid: int, *, seed: int, amplitude: float = 0.1, modes: int = 4) -> np.ndarray:
    """(N,): a small smooth zero-mean field, sum over n = 1..``modes`` of random cosines, from ``seed``."""
    rng = np.random.default_rng(seed)
    x = 2 * np.pi * np.arange(grid) / grid
    n = np.arange(1, modes + 1)[:, None]
    coefficients = rng.normal(size=(modes, 1))
    phases = rng.uniform(0, 2 * np.pi, size=(modes, 1))
    return amplitude * (coefficients * np.cos(n * x + phases)).sum(axis=0)


def ks_trajectory(*, length: float, grid: int, dt: float, steps: int, transient_steps: int, seed: int) -> np.ndarray:
    """(steps, N): a KS trajectory sampled every ``dt``, after ``transient_steps`` steps from a small random field
    (``random_initial_field(seed)``) that bring it onto the attractor. Deterministic given the arguments."""
    check_int("steps", steps)
    check_int("transient_steps", transient_steps, minimum=0)
    solver = KuramotoSivashinsky(length, grid, dt)
    u = random_initial_field(grid, seed=seed)
    if transient_steps:
        u = solver.simulate(u, transient_steps)[-1]
    return solver.simulate(u, steps - 1)
