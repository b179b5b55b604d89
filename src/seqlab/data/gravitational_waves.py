"""Simulated gravitational-wave strain: inspiral chirps in coloured Gaussian noise, whitening, SNR and overlap.

Chirp (leading, Newtonian quadrupole order; Maggiore, Gravitational Waves vol. 1, 2008, Sec. 4.1, eqs. 4.19, 4.30,
4.31; Cutler & Flanagan, 1994, Phys. Rev. D 49, 2658): with tau = t_c - t the time to coalescence and
T_c = G M_c / c^3 the chirp mass in seconds,

    f(tau)   = (1 / pi) (5 / (256 tau))^(3/8) T_c^(-5/8)        (the frequency of the wave, twice the orbit's)
    Phi(tau) = Phi_c - 2 (tau / (5 T_c))^(5/8)                  (dPhi/dt = 2 pi f)
    h(t)     = (f(tau) / f_max)^(2/3) cos Phi(tau)               (amplitude proportional to f^(2/3))

cut where f reaches ``f_max``, before the merger that this order does not describe. The overall amplitude (distance,
masses, orientation) only sets the SNR, which the data fix directly.

Noise: one-sided power spectral density S_n(f) of the shape of Ajith's (2011, Phys. Rev. D 84, 084037, eq. 4.7) fit
to Advanced LIGO's zero-detuned high-power design curve, in units of its 1e-49 / Hz scale:

    S_n(f) = x^(-4.14) - 5 x^(-2) + 111 (1 - x^2 + x^4 / 2) / (1 + x^2 / 2),    x = f / 215 Hz,

held at S_n(f_min) below ``f_min`` (where the real detector's seismic wall is). Gaussian noise of that PSD: white
noise (one-sided PSD 2 / f_s) shaped in the frequency domain by sqrt(S_n f_s / 2).

Inner product, SNR, whitening (Cutler & Flanagan, 1994, eqs. 2.3-2.4): for series a, b of n samples at f_s, with
rfft coefficients A_k, B_k (a_tilde(f_k) = A_k / f_s, df = f_s / n), over the bins 0 < k < n / 2,

    <a, b> = 4 Re sum_k a_tilde(f_k) b_tilde(f_k)^* / S_n(f_k) df = (4 / (n f_s)) sum_k Re(A_k B_k^*) / S_n(f_k),

the optimal (matched-filter) SNR of a signal h is rho = sqrt(<h, h>), and whitening w(a) = irfft(A_k /
sqrt(S_n(f_k) f_s / 2)) (DC and Nyquist bins zeroed) turns noise of PSD S_n into unit-variance white noise and the
inner product into a plain dot product: <a, b> = sum_t w(a)_t w(b)_t. The overlap (match at zero lag) of two
series is <a, b> / sqrt(<a, a> <b, b>), in [-1, 1].
"""

from __future__ import annotations

import numpy as np

from seqlab.errors import ConfigError
from seqlab.validation import check_real

SOLAR_MASS_SECONDS = 4.925490947e-6  # G M_sun / c^3 (s)
ALIGO_KNEE = 215.0  # Hz, x = f / 215 Hz in Ajith's fit


def chirp_frequency(tau: np.ndarray, chirp_mass: float) -> np.ndarray:
    """f (Hz) of the wave ``tau`` seconds (> 0) before coalescence, for a chirp mass in solar masses."""
    T_c = chirp_mass * SOLAR_MASS_SECONDS
    return (5.0 / (256.0 * tau)) ** 0.375 * T_c**-0.625 / np.pi


def chirp_phase(tau: np.ndarray, chirp_mass: float, *, phase: float = 0.0) -> np.ndarray:
    """Phi (radians) ``tau`` seconds (>= 0) before coalescence, Phi_c = ``phase``."""
    T_c = chirp_mass * SOLAR_MASS_SECONDS
    return phase - 2.0 * (tau / (5.0 * T_c)) ** 0.625


def time_to_frequency(frequency: float, chirp_mass: float) -> float:
    """tau (s) at which the chirp reaches ``frequency`` (Hz): the inverse of ``chirp_frequency``."""
    T_c = chirp_mass * SOLAR_MASS_SECONDS
    return 5.0 / 256.0 * (np.pi * frequency) ** (-8.0 / 3.0) * T_c ** (-5.0 / 3.0)


def chirp(t: np.ndarray, *, chirp_mass: float, cut_time: float, f_max: float, phase: float = 0.0) -> np.ndarray:
    """h(t) (module docstring) at times ``t`` (s): a chirp whose frequency reaches ``f_max`` (Hz) at ``cut_time``
    (s), zero from there on.

    Raises: ConfigError for a non-positive chirp mass or f_max.
    """
    check_real("chirp_mass", chirp_mass, greater_than=0.0)
    check_real("f_max", f_max, greater_than=0.0)
    t_c = cut_time + time_to_frequency(f_max, chirp_mass)
    tau = np.maximum(t_c - np.asarray(t, dtype=float), 1e-12)
    f = chirp_frequency(tau, chirp_mass)
    return np.where(
        np.asarray(t) < cut_time, (f / f_max) ** (2 / 3) * np.cos(chirp_phase(tau, chirp_mass, phase=phase)), 0.0
    )


def aligo_psd(frequencies: np.ndarray, *, f_min: float) -> np.ndarray:
    """S_n(f) (module docstring; units of 1e-49 / Hz) at ``frequencies`` (Hz), held at S_n(f_min) below f_min.

    Raises: ConfigError for f_min <= 0.
    """
    check_real("f_min", f_min, greater_than=0.0)
    x = np.maximum(np.asarray(frequencies, dtype=float), f_min) / ALIGO_KNEE
    return x**-4.14 - 5.0 * x**-2 + 111.0 * (1.0 - x**2 + x**4 / 2.0) / (1.0 + x**2 / 2.0)


def rfft_psd(n: int, *, sample_rate: float, f_min: float) -> np.ndarray:
    """(n // 2 + 1,): S_n at the rfft bins of n samples at ``sample_rate`` (Hz)."""
    return aligo_psd(np.fft.rfftfreq(n, d=1.0 / sample_rate), f_min=f_min)


def coloured_noise(
    shape: tuple[int, ...], psd: np.ndarray, *, sample_rate: float, rng: np.random.Generator
) -> np.ndarray:
    """Gaussian noise (..., n) of one-sided PSD ``psd`` ((n // 2 + 1,), at the rfft bins): white noise shaped by
    sqrt(S_n f_s / 2) in the frequency domain (DC and Nyquist bins zeroed).

    Raises: ConfigError for an odd n, or a ``psd`` without n // 2 + 1 bins.
    """
    n = shape[-1]
    _check_bins(psd, n)
    white = np.fft.rfft(rng.standard_normal(shape), axis=-1)  # one-sided PSD 2 / f_s
    return np.fft.irfft(white * _band(np.sqrt(psd * sample_rate / 2.0)), n=n, axis=-1)


def whiten(x: np.ndarray, psd: np.ndarray, *, sample_rate: float) -> np.ndarray:
    """w(x) (..., n): ``x`` divided by sqrt(S_n f_s / 2) in the frequency domain, DC and Nyquist bins zeroed; noise
    of PSD ``psd`` comes out white with unit variance.

    Raises: ConfigError for an odd n, or a ``psd`` without n // 2 + 1 bins.
    """
    n = x.shape[-1]
    _check_bins(psd, n)
    return np.fft.irfft(np.fft.rfft(x, axis=-1) * _band(1.0 / np.sqrt(psd * sample_rate / 2.0)), n=n, axis=-1)


def inner_product(a: np.ndarray, b: np.ndarray, psd: np.ndarray, *, sample_rate: float) -> np.ndarray:
    """<a, b> (...,) of series (..., n), noise-weighted by ``psd`` (module docstring).

    Raises: ConfigError for an odd n, or a ``psd`` without n // 2 + 1 bins.
    """
    n = a.shape[-1]
    _check_bins(psd, n)
    A, B = np.fft.rfft(a, axis=-1), np.fft.rfft(b, axis=-1)
    return 4.0 / (n * sample_rate) * (_band(1.0 / psd) * (A * B.conj()).real).sum(axis=-1)


def optimal_snr(h: np.ndarray, psd: np.ndarray, *, sample_rate: float) -> np.ndarray:
    """rho = sqrt(<h, h>) (...,), the matched-filter SNR of signals h (..., n) in noise of PSD ``psd``."""
    return np.sqrt(inner_product(h, h, psd, sample_rate=sample_rate))


def overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(...,): sum_t a_t b_t / sqrt(sum_t a_t^2 sum_t b_t^2) over the last axis: the overlap of whitened series
    (0 where either is all zeros)."""
    norms = np.sqrt((a * a).sum(axis=-1) * (b * b).sum(axis=-1))
    return np.divide((a * b).sum(axis=-1), norms, out=np.zeros_like(norms), where=norms > 0)


def signal_to_residual_db(estimate: np.ndarray, clean: np.ndarray) -> np.ndarray:
    """(...,): 10 log10(sum_t s_t^2 / sum_t (s_hat_t - s_t)^2), the output SNR (dB) of estimates of ``clean``
    signals (..., n)."""
    return 10.0 * np.log10((clean * clean).sum(axis=-1) / ((estimate - clean) ** 2).sum(axis=-1))


def _band(weights: np.ndarray) -> np.ndarray:
    """``weights`` with the DC and Nyquist bins zeroed (the inner product's sum runs over 0 < k < n / 2)."""
    weights = np.array(weights, dtype=float)
    weights[0] = 0.0
    weights[-1] = 0.0
    return weights


def _check_bins(psd: np.ndarray, n: int) -> None:
    """Raises: ConfigError unless n is even and ``psd`` has n // 2 + 1 bins."""
    if n % 2:
        raise ConfigError(f"series of {n} samples: an even number is needed (the last rfft bin is Nyquist's)")
    if psd.shape != (n // 2 + 1,):
        raise ConfigError(f"the PSD has {psd.shape} bins, but series of {n} samples have {n // 2 + 1}")
