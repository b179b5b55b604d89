"""How long a chaotic system can be forecast: its largest Lyapunov exponent, and the valid prediction time.

Largest Lyapunov exponent, by two trajectories (Benettin, Galgani & Strelcyn, 1976, Phys. Rev. A 14, 2338; the
standard recipe of Wolf et al., 1985, Physica D 16, 285): run a reference x and a copy y = x + d0 e at distance d0;
every ``renormalise_every`` steps measure d = ||y - x||, add ln(d / d0), and pull y back along y - x to distance d0.
Then lambda_1 ~= sum ln(d_i / d0) / (number of renormalisations * renormalise_every * dt), once the first
``transient`` renormalisations (while the separation turns into the most unstable direction) are dropped.

Valid prediction time (Pathak et al., 2018, Phys. Rev. Lett. 120, 024102; Vlachas et al., 2020, Neural Networks
126, 191): the first step at which a free-running forecast's normalised error

    E(t) = ||u_hat(t) - u(t)|| / sqrt(<||u||^2>)            (<.>: the mean over the data's time steps)

exceeds a threshold; multiplied by dt * lambda_1 it is in Lyapunov times.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from seqlab.validation import check_int, check_real


def largest_lyapunov_exponent(
    step: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    *,
    dt: float,
    renormalisations: int,
    renormalise_every: int = 1,
    transient: int = 0,
    separation: float = 1e-8,
    seed: int = 0,
) -> float:
    """lambda_1 (per unit of time) of the map or flow ``step`` by two trajectories (module docstring).

    Args:
        step: x_{n+1} = step(x_n), one step of dt; x of any shape.
        x0: the reference trajectory's start (on the attractor, if the system has a transient).
        dt: time per step (1 for a map).
        renormalisations: renormalisations averaged; renormalise_every: steps between them.
        transient: renormalisations run first and not averaged.
        separation: d0, the distance kept between the two trajectories.
        seed: seed of the first separation's random direction.
    Raises: ConfigError for a non-positive dt, separation or count, or a negative transient.
    """
    check_real("dt", dt, greater_than=0.0)
    check_real("separation", separation, greater_than=0.0)
    check_int("renormalisations", renormalisations)
    check_int("renormalise_every", renormalise_every)
    check_int("transient", transient, minimum=0)
    x = np.asarray(x0, dtype=float)
    direction = np.random.default_rng(seed).normal(size=x.shape)
    y = x + separation * direction / np.linalg.norm(direction)
    total = 0.0
    for n in range(transient + renormalisations):
        for _ in range(renormalise_every):
            x, y = step(x), step(y)
        distance = float(np.linalg.norm(y - x))
        if n >= transient:
            total += np.log(distance / separation)
        y = x + (y - x) * (separation / distance)
    return total / (renormalisations * renormalise_every * dt)


def normalised_error(forecast: np.ndarray, truth: np.ndarray, *, scale: float) -> np.ndarray:
    """E (B, S): ||forecast - truth|| over the last axis, divided by ``scale`` (sqrt(<||u||^2>) of the data), for
    forecasts and truth (B, S, C)."""
    return np.linalg.norm(forecast - truth, axis=-1) / scale


def valid_steps(error: np.ndarray, threshold: float) -> np.ndarray:
    """(B,): for each row of ``error`` (B, S), the number of steps before it first exceeds ``threshold`` (S if it
    never does): the valid prediction time in steps.

    Raises: ConfigError for a threshold that is not a positive number.
    """
    check_real("threshold", threshold, greater_than=0.0)
    exceeded = error > threshold
    return np.where(exceeded.any(axis=1), exceeded.argmax(axis=1), error.shape[1])
