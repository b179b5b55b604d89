"""Learning-rate schedules: linear warmup, then constant, inverse-square-root ("Noam") or cosine decay.

Each schedule is a multiplier m(s) of the peak learning rate ``lr`` for optimizer step s, counted from 1; the
learning rate of step s is ``lr * m(s)``. All three share the linear warmup m(s) = s / w for s < w, so
m(w) = 1 is the peak when ``warmup_steps`` = w >= 1; w = 0 means no warmup (the decay starts at step 1).

    constant:      m(s) = 1                                                    for s >= w
    inverse_sqrt:  m(s) = sqrt(max(w, 1) / s)                                  for s >= w
    cosine:        m(s) = r + (1 - r) (1 + cos(pi p)) / 2,  p = min(1, (s - w) / (s_end - w))   for s >= w

With w >= 1, inverse_sqrt is min(s / w, sqrt(w / s)): Vaswani et al. (2017), eq. (3),
lrate = d_model^-0.5 min(s^-0.5, s w^-1.5), with the constant d_model^-0.5 w^-0.5 folded into ``lr``. The
cosine decay is Loshchilov & Hutter (2017, SGDR), eq. (5), for one cycle from ``lr`` down to r lr at step s_end.

``torch.optim.lr_scheduler.LambdaLR`` calls its function with the number of steps already taken (0 before the
first step); ``lambda_lr`` shifts that count by one so that the multiplier functions here see step numbers.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Literal

import torch
from torch.optim.lr_scheduler import LambdaLR

ScheduleName = Literal["constant", "inverse_sqrt", "cosine"]
SCHEDULES: tuple[ScheduleName, ...] = ("constant", "inverse_sqrt", "cosine")

Multiplier = Callable[[int], float]


def _check_warmup(warmup_steps: int) -> None:
    if not (isinstance(warmup_steps, numbers.Integral) and not isinstance(warmup_steps, bool) and warmup_steps >= 0):
        raise ValueError(f"warmup_steps ({warmup_steps!r}) must be an integer >= 0")


def _check_step(step: int) -> None:
    # LambdaLR counts from 0: a call with step 0 means the multiplier was given to LambdaLR without lambda_lr.
    if step < 1:
        raise ValueError(f"step ({step}) must be >= 1: steps count from 1 (use lambda_lr to drive LambdaLR)")


def _warmup(step: int, warmup_steps: int) -> float | None:
    """The warmup multiplier s / w for s < w, or None once warmup is over."""
    return step / warmup_steps if step < warmup_steps else None


def warmup_constant(warmup_steps: int) -> Multiplier:
    """Linear warmup to the peak, then constant: m(s) = min(1, s / w); m(s) = 1 for every s when w = 0.

    Args:
        warmup_steps: w >= 0.
    Returns:
        ``m(step) -> float`` for steps counted from 1.
    Raises:
        ValueError: if warmup_steps is not an integer >= 0; from ``m``, if step < 1.
    """
    _check_warmup(warmup_steps)

    def multiplier(step: int) -> float:
        _check_step(step)
        warm = _warmup(step, warmup_steps)
        return 1.0 if warm is None else warm

    return multiplier


def inverse_sqrt(warmup_steps: int) -> Multiplier:
    """Linear warmup, then inverse-square-root decay (the "Noam" schedule of Vaswani et al., 2017, eq. 3).

    m(s) = s / w for s < w and sqrt(max(w, 1) / s) after, i.e. min(s / w, sqrt(w / s)) for w >= 1: the peak
    m(w) = 1, and m(4 w) = 1/2. With w = 0 the decay sqrt(1 / s) starts at the peak at step 1.

    Args:
        warmup_steps: w >= 0.
    Returns:
        ``m(step) -> float`` for steps counted from 1.
    Raises:
        ValueError: if warmup_steps is not an integer >= 0; from ``m``, if step < 1.
    """
    _check_warmup(warmup_steps)

    def multiplier(step: int) -> float:
        _check_step(step)
        warm = _warmup(step, warmup_steps)
        return math.sqrt(max(warmup_steps, 1) / step) if warm is None else warm

    return multiplier


def warmup_cosine(warmup_steps: int, total_steps: int, *, min_ratio: float = 0.0) -> Multiplier:
    """Linear warmup, then a half cosine from the peak down to ``min_ratio`` at ``total_steps``.

    m(s) = s / w for s < w, then m(s) = r + (1 - r) (1 + cos(pi p)) / 2 with p = (s - w) / (total_steps - w),
    so m(w) = 1 and m(total_steps) = r (Loshchilov & Hutter, 2017, eq. 5, one cycle); m stays r after.

    Args:
        warmup_steps: w >= 0.
        total_steps: the step where the multiplier reaches r; > warmup_steps.
        min_ratio: r in [0, 1], the final learning rate as a fraction of the peak.
    Returns:
        ``m(step) -> float`` for steps counted from 1.
    Raises:
        ValueError: if warmup_steps is not an integer >= 0, total_steps is not an integer > warmup_steps, or
            min_ratio is outside [0, 1] (the message shows the value); from ``m``, if step < 1.
    """
    _check_warmup(warmup_steps)
    if (
        not (isinstance(total_steps, numbers.Integral) and not isinstance(total_steps, bool))
        or total_steps <= warmup_steps
    ):
        raise ValueError(f"total_steps ({total_steps!r}) must be an integer > warmup_steps ({warmup_steps})")
    if not (isinstance(min_ratio, numbers.Real) and 0.0 <= min_ratio <= 1.0):
        raise ValueError(f"min_ratio ({min_ratio!r}) must be in [0, 1]")

    def multiplier(step: int) -> float:
        _check_step(step)
        warm = _warmup(step, warmup_steps)
        if warm is not None:
            return warm
        progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return multiplier


def lr_multiplier(schedule: ScheduleName, *, warmup_steps: int = 0, total_steps: int | None = None) -> Multiplier:
    """The multiplier of a schedule named as in ``TrainConfig.schedule``.

    Args:
        schedule: "constant" (``warmup_constant``), "inverse_sqrt" (``inverse_sqrt``) or "cosine"
            (``warmup_cosine`` down to 0 at ``total_steps``).
        warmup_steps: w >= 0, linear warmup steps.
        total_steps: last step of the cosine decay; required for "cosine", ignored otherwise.
    Returns:
        ``m(step) -> float`` for steps counted from 1.
    Raises:
        ValueError: for an unknown schedule, "cosine" without total_steps, or the errors of the schedule.
    """
    if schedule == "constant":
        return warmup_constant(warmup_steps)
    if schedule == "inverse_sqrt":
        return inverse_sqrt(warmup_steps)
    if schedule == "cosine":
        if total_steps is None:
            raise ValueError("schedule 'cosine' needs total_steps, the step where its decay ends")
        return warmup_cosine(warmup_steps, total_steps)
    raise ValueError(f"schedule ({schedule!r}) must be one of {', '.join(map(repr, SCHEDULES))}")


def lambda_lr(optimizer: torch.optim.Optimizer, multiplier: Multiplier) -> LambdaLR:
    """A ``LambdaLR`` that gives optimizer step s (counted from 1) the learning rate ``lr * multiplier(s)``.

    Call ``scheduler.step()`` after each ``optimizer.step()``; after n steps the optimizer's learning rate is
    ``lr * multiplier(n + 1)``, the rate of the next step. ``lr`` is each parameter group's learning rate when
    the scheduler is made.

    Args:
        optimizer: any ``torch.optim.Optimizer``; its learning rate is set for step 1 at once.
        multiplier: ``m(step) -> float`` for steps counted from 1, e.g. ``inverse_sqrt(4000)``.
    Returns:
        The ``torch.optim.lr_scheduler.LambdaLR``.
    """
    return LambdaLR(optimizer, lambda steps_taken: multiplier(steps_taken + 1))
