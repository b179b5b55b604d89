"""Simulated strain: the chirp's frequency against the formula, the SNR by hand, whitening as the noise-weighted
inner product, overlaps of +1 and -1, and the noise's PSD measured by Welch's method."""

import numpy as np
import pytest
from scipy.signal import hilbert, welch

from seqlab.data.gravitational_waves import (
    aligo_psd,
    chirp,
    chirp_frequency,
    chirp_phase,
    coloured_noise,
    inner_product,
    optimal_snr,
    overlap,
    rfft_psd,
    signal_to_residual_db,
    time_to_frequency,
    whiten,
)
from seqlab.errors import ConfigError

FS, N = 256.0, 512


def test_the_chirps_instantaneous_frequency_follows_the_newtonian_sweep():
    """f from the analytic signal's phase (scipy's Hilbert transform) against (1/pi) (5 / 256 tau)^(3/8) T_c^(-5/8)."""
    fs, mass, cut_time, f_max = 4096.0, 10.0, 3.5, 150.0
    t = np.arange(int(4 * fs)) / fs
    h = chirp(t, chirp_mass=mass, cut_time=cut_time, f_max=f_max)
    t_c, before = cut_time + time_to_frequency(f_max, mass), t < cut_time
    amplitude_free = h[before] / (chirp_frequency(t_c - t[before], mass) / f_max) ** (2 / 3)
    measured = np.gradient(np.unwrap(np.angle(hilbert(amplitude_free))), 1 / fs) / (2 * np.pi)
    inside = slice(int(0.5 * fs), int((cut_time - 0.5) * fs))  # away from the ends' Hilbert ripples
    np.testing.assert_allclose(measured[inside], chirp_frequency(t_c - t[inside], mass), rtol=0.01)
    # the formula itself: 35.8 Hz one second before coalescence for M_c = 10 M_sun, f_max reached at cut_time
    assert chirp_frequency(np.array(1.0), 10.0) == pytest.approx(35.8, abs=0.1)
    assert chirp_frequency(np.array(time_to_frequency(f_max, mass)), mass) == pytest.approx(f_max)
    assert np.all(h[t >= cut_time] == 0)


def test_the_phase_advances_at_two_pi_f():
    tau, mass, d = np.linspace(0.5, 3.0, 11), 8.0, 1e-6
    rate = (chirp_phase(tau - d, mass) - chirp_phase(tau + d, mass)) / (2 * d)  # dPhi/dt = -dPhi/dtau
    np.testing.assert_allclose(rate, 2 * np.pi * chirp_frequency(tau, mass), rtol=1e-8)


def test_the_snr_of_a_sinusoid_in_flat_noise_by_hand():
    """h = A cos(2 pi f_k t) on a bin, S_n = S0: rho^2 = (2 / S0) int h^2 dt = A^2 T / S0."""
    A, S0, k = 3.0, 0.5, 40
    t = np.arange(N) / FS
    h = A * np.cos(2 * np.pi * k * FS / N * t)
    assert optimal_snr(h, np.full(N // 2 + 1, S0), sample_rate=FS) == pytest.approx(np.sqrt(A**2 * (N / FS) / S0))


def test_whitening_turns_the_inner_product_into_a_dot_product():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 3, N))
    psd = rfft_psd(N, sample_rate=FS, f_min=15.0)
    dot = (whiten(a, psd, sample_rate=FS) * whiten(b, psd, sample_rate=FS)).sum(axis=-1)
    np.testing.assert_allclose(inner_product(a, b, psd, sample_rate=FS), dot, rtol=1e-10)


def test_overlap_with_itself_is_one_and_with_its_negative_minus_one():
    rng = np.random.default_rng(1)
    a = rng.normal(size=N)
    assert overlap(a, a) == pytest.approx(1.0)
    assert overlap(a, -2 * a) == pytest.approx(-1.0)
    t = np.arange(N) / FS
    assert overlap(np.sin(2 * np.pi * 8 * t), np.cos(2 * np.pi * 8 * t)) == pytest.approx(0.0, abs=1e-12)
    assert overlap(a, np.zeros(N)) == 0.0


def test_the_noise_has_the_psd_it_was_shaped_with():
    """Welch's estimate (scipy) over 200 segments, averaged in 10-Hz bands, within 5% of S_n: the PSD's shape
    (a factor of 2,000 from 15 to 120 Hz) and its one-sided normalisation."""
    n = 200 * N
    noise = coloured_noise((n,), rfft_psd(n, sample_rate=FS, f_min=15.0), sample_rate=FS, rng=np.random.default_rng(2))
    f, measured = welch(noise, fs=FS, nperseg=N)
    for low in range(20, 120, 10):
        band = (f >= low) & (f < low + 10)
        ratio = measured[band].mean() / aligo_psd(f[band], f_min=15.0).mean()
        assert ratio == pytest.approx(1.0, abs=0.05), low
    psd = rfft_psd(N, sample_rate=FS, f_min=15.0)
    series = coloured_noise((200, N), psd, sample_rate=FS, rng=np.random.default_rng(3))  # as the recipe draws it
    assert whiten(series, psd, sample_rate=FS).var() == pytest.approx(1.0 - 2 / N, abs=0.01)  # DC, Nyquist zeroed


def test_the_psd_follows_ajiths_fit_and_is_held_below_f_min():
    x = 100.0 / 215.0
    expected = x**-4.14 - 5 * x**-2 + 111 * (1 - x**2 + x**4 / 2) / (1 + x**2 / 2)
    assert aligo_psd(np.array(100.0), f_min=10.0) == pytest.approx(expected)
    np.testing.assert_array_equal(aligo_psd(np.array([0.0, 5.0, 15.0]), f_min=15.0), aligo_psd(15.0, f_min=15.0))


def test_output_snr_by_hand():
    clean = np.array([3.0, 4.0])
    assert signal_to_residual_db(clean + np.array([1.0, 0.0]), clean) == pytest.approx(10 * np.log10(25.0))


def test_series_that_do_not_fit_the_psd_are_one_line_errors():
    with pytest.raises(ConfigError, match=r"^series of 511 samples: an even number is needed"):
        whiten(np.zeros(511), np.ones(256), sample_rate=FS)
    with pytest.raises(ConfigError, match=r"^the PSD has \(10,\) bins, but series of 512 samples have 257$"):
        optimal_snr(np.zeros(512), np.ones(10), sample_rate=FS)
