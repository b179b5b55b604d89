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

The trainer sees every schedule through one interface, a ``Schedule``: a multiplier of the ``Progress`` of the
step about to be taken (its number, its epoch and the seconds of training so far), applied by ``LRScheduler``.
Two schedules read more than the step:

    cosine with a time budget T (budgeted training, Li, Yumer & Ramanan 2020, ICLR): the decay's progress is
        p = min(1, max((s - w) / (s_end - w), t / T)) for s >= w, t the seconds of training so far, so the
        learning rate reaches r lr when the budget runs out, however fast the machine; without T it is the
        step schedule above, value for value.
    cosine in M cycles (SGDR's warm restarts, Loshchilov & Hutter 2017, with equal cycles; the snapshot
        ensembles of Huang et al. 2017): with x = M p, the cycle k = max(1, ceil(x)) and q = x - (k - 1) in
        place of p, the decay runs M times from the peak to r, over 1 / M of the progress each.
    epoch_decay:   m(s) = 1 / f^max(0, e - a)                                  for s >= w, e the step's epoch
        (Zaremba et al. 2014, sec. 4.1: lr divided by f = ``decay_factor`` after every epoch past a =
        ``decay_after``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import torch
from torch.optim.lr_scheduler import LambdaLR

ScheduleName = Literal["constant", "inverse_sqrt", "cosine", "epoch_decay"]
SCHEDULES: tuple[ScheduleName, ...] = ("constant", "inverse_sqrt", "cosine", "epoch_decay")
STEP_SCHEDULES: tuple[ScheduleName, ...] = ("constant", "inverse_sqrt", "cosine")  # those of the step alone

Multiplier = Callable[[int], float]


class Progress(NamedTuple):
    """Where training stands when an optimizer step is about to be taken: what a ``Schedule`` reads."""

    step: int  # the step's number, from 1 (steps whose update was skipped are not counted)
    epoch: int = 1  # its epoch, from 1
    elapsed: float = 0.0  # seconds of training so far, validation included (a resumed run counts its past)


Schedule = Callable[[Progress], float]


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
    if total_steps is None:
        raise ValueError(f"total_steps ({total_steps!r}) must be an integer > warmup_steps ({warmup_steps})")
    schedule = budgeted_cosine(warmup_steps, total_steps=total_steps, min_ratio=min_ratio)
    return lambda step: schedule(Progress(step))


def budgeted_cosine(
    warmup_steps: int,
    *,
    total_steps: int | None = None,
    time_budget: float | None = None,
    min_ratio: float = 0.0,
    cycles: int = 1,
) -> Schedule:
    """``warmup_cosine`` whose decay ends at ``total_steps`` or when ``time_budget`` seconds are spent, whichever
    comes first (budgeted training, Li, Yumer & Ramanan 2020), in ``cycles`` equal cosines with warm restarts.

    m = s / w for s < w, then r + (1 - r) (1 + cos(pi q)) / 2 with
    p = min(1, max((s - w) / (total_steps - w), t / time_budget)), t = ``progress.elapsed``; a missing limit
    drops its term. With M = ``cycles`` the decay's progress p is cut into M equal cycles (SGDR, Loshchilov &
    Hutter 2017, with T_mult = 1; the snapshot ensembles of Huang et al. 2017): x = M p, cycle k = max(1, ceil(x))
    (``cosine_cycle``), q = x - (k - 1), so the learning rate falls from the peak to r lr over each cycle and
    restarts at the peak just after each cycle's end (m = r where x = k). Without ``time_budget`` and with M = 1
    this is ``warmup_cosine``, value for value.

    Args:
        warmup_steps: w >= 0 (warmup counts steps, budget or not; only the first cycle has one).
        total_steps: the step where the multiplier reaches r for the last time, > w; or None.
        time_budget: the seconds of training after which the multiplier is r, > 0; or None.
        min_ratio: r in [0, 1], the final learning rate as a fraction of the peak.
        cycles: M >= 1.
    Returns:
        ``m(progress) -> float``.
    Raises:
        ValueError: if warmup_steps is not an integer >= 0, both limits are None, total_steps is not an integer
            > warmup_steps, time_budget is not a finite number > 0, min_ratio is outside [0, 1] or cycles is not
            an integer >= 1 (the message shows the value); from ``m``, if the step is < 1.
    """
    position = _cosine_position(warmup_steps, total_steps=total_steps, time_budget=time_budget, cycles=cycles)
    if not (isinstance(min_ratio, numbers.Real) and 0.0 <= min_ratio <= 1.0):
        raise ValueError(f"min_ratio ({min_ratio!r}) must be in [0, 1]")

    def multiplier(progress: Progress) -> float:
        _check_step(progress.step)
        warm = _warmup(progress.step, warmup_steps)
        if warm is not None:
            return warm
        x = position(progress)
        within = x - (_cycle(x) - 1)
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * within))

    return multiplier


def cosine_cycle(
    warmup_steps: int, *, total_steps: int | None = None, time_budget: float | None = None, cycles: int = 1
) -> Callable[[Progress], int]:
    """The cycle, from 1 to ``cycles``, of each step of ``budgeted_cosine`` with the same arguments.

    Cycle k holds the steps whose position x = M p is in (k - 1, k] (and x = 0, the warmup's steps, is in cycle
    1): a cycle's last step is the one before the learning rate restarts at the peak, where a snapshot of the
    weights is taken (Huang et al. 2017).

    Returns:
        ``cycle(progress) -> int``.
    Raises:
        ValueError: as ``budgeted_cosine``.
    """
    position = _cosine_position(warmup_steps, total_steps=total_steps, time_budget=time_budget, cycles=cycles)

    def cycle(progress: Progress) -> int:
        _check_step(progress.step)
        return 1 if _warmup(progress.step, warmup_steps) is not None else _cycle(position(progress))

    return cycle


def _cycle(x: float) -> int:
    """The cycle of position x in [0, M]: ceil(x), and 1 at x = 0."""
    return max(1, math.ceil(x))


def _cosine_position(
    warmup_steps: int, *, total_steps: int | None, time_budget: float | None, cycles: int
) -> Callable[[Progress], float]:
    """Checks the cosine's limits; returns ``x(progress)`` = M p in [0, M] (M = ``cycles``, p the decay's progress).

    The step term is computed as M (s - w) / (total_steps - w) so that a cycle's end lands on x = k exactly when
    the steps divide evenly; with M = 1 it is (s - w) / (total_steps - w), value for value.
    """
    _check_warmup(warmup_steps)
    if total_steps is None and time_budget is None:
        raise ValueError("a cosine schedule needs total_steps or time_budget, where its decay ends")
    if total_steps is not None and (
        not (isinstance(total_steps, numbers.Integral) and not isinstance(total_steps, bool))
        or total_steps <= warmup_steps
    ):
        raise ValueError(f"total_steps ({total_steps!r}) must be an integer > warmup_steps ({warmup_steps})")
    if time_budget is not None and not (
        isinstance(time_budget, numbers.Real) and math.isfinite(time_budget) and time_budget > 0
    ):
        raise ValueError(f"time_budget ({time_budget!r}) must be a finite number of seconds > 0")
    if not (isinstance(cycles, numbers.Integral) and not isinstance(cycles, bool) and cycles >= 1):
        raise ValueError(f"cycles ({cycles!r}) must be an integer >= 1")

    def position(progress: Progress) -> float:
        step = progress.step
        _check_step(step)
        x = 0.0 if total_steps is None else cycles * (step - warmup_steps) / (total_steps - warmup_steps)
        if time_budget is not None:
            x = max(x, cycles * progress.elapsed / time_budget)
        return min(cycles, x)

    return position


def epoch_decay(decay_factor: float, *, decay_after: int = 0, warmup_steps: int = 0) -> Schedule:
    """Linear warmup, then the learning rate divided by ``decay_factor`` after every epoch past ``decay_after``
    (Zaremba et al. 2014, sec. 4.1; ``ZarembaTraining.lr_at``).

    m = s / w for s < w, then 1 / f^max(0, e - a) with e = ``progress.epoch``: epochs 1..a at the peak,
    epoch a + 1 at 1 / f, epoch a + 2 at 1 / f^2, ...

    Args:
        decay_factor: f >= 1.
        decay_after: a >= 0, the epochs at the peak.
        warmup_steps: w >= 0.
    Returns:
        ``m(progress) -> float``.
    Raises:
        ValueError: if decay_factor is not a finite number >= 1 or decay_after or warmup_steps is not an integer
            >= 0 (the message shows the value); from ``m``, if the step or the epoch is < 1.
    """
    _check_warmup(warmup_steps)
    if not (isinstance(decay_factor, numbers.Real) and math.isfinite(decay_factor) and decay_factor >= 1):
        raise ValueError(f"decay_factor ({decay_factor!r}) must be a finite number >= 1")
    if not (isinstance(decay_after, numbers.Integral) and not isinstance(decay_after, bool) and decay_after >= 0):
        raise ValueError(f"decay_after ({decay_after!r}) must be an integer >= 0")

    def multiplier(progress: Progress) -> float:
        _check_step(progress.step)
        if progress.epoch < 1:
            raise ValueError(f"epoch ({progress.epoch}) must be >= 1: epochs count from 1")
        warm = _warmup(progress.step, warmup_steps)
        return 1.0 / decay_factor ** max(0, progress.epoch - decay_after) if warm is None else warm

    return multiplier


def lr_schedule(
    schedule: ScheduleName,
    *,
    warmup_steps: int = 0,
    total_steps: int | None = None,
    time_budget: float | None = None,
    decay_factor: float = 1.0,
    decay_after: int = 0,
    min_ratio: float = 0.0,
    cycles: int = 1,
) -> Schedule:
    """The ``Schedule`` named as in ``TrainConfig.schedule``, the one interface the trainer uses.

    "constant" and "inverse_sqrt" read the step only (``warmup_constant``, ``inverse_sqrt``); "cosine" decays to
    ``min_ratio`` at ``total_steps`` or when ``time_budget`` seconds are spent, whichever comes first
    (``budgeted_cosine``);
    "epoch_decay" divides by ``decay_factor`` after each epoch past ``decay_after`` (``epoch_decay``).

    Args:
        schedule: one of ``SCHEDULES``.
        warmup_steps: w >= 0, linear warmup steps (every schedule).
        total_steps: the step where the cosine decay ends (``TrainConfig.max_steps``).
        time_budget: the seconds of training where the cosine decay ends (``TrainConfig.time_budget``).
        decay_factor, decay_after: of "epoch_decay".
        min_ratio: r in [0, 1], where the cosine ends (``TrainConfig.min_lr_ratio``); ignored by
            the other schedules.
        cycles: M >= 1 cosine cycles (``TrainConfig.cycles``); ignored by the other schedules.
    Returns:
        ``m(progress) -> float``.
    Raises:
        ValueError: for an unknown schedule, or the errors of the schedule.
    """
    if schedule == "cosine":
        return budgeted_cosine(
            warmup_steps, total_steps=total_steps, time_budget=time_budget, min_ratio=min_ratio, cycles=cycles
        )
    if schedule == "epoch_decay":
        return epoch_decay(decay_factor, decay_after=decay_after, warmup_steps=warmup_steps)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule ({schedule!r}) must be one of {', '.join(map(repr, SCHEDULES))}")
    step_multiplier = lr_multiplier(schedule, warmup_steps=warmup_steps)
    return lambda progress: step_multiplier(progress.step)


def lr_multiplier(schedule: ScheduleName, *, warmup_steps: int = 0, total_steps: int | None = None) -> Multiplier:
    """The multiplier of a schedule named as in ``TrainConfig.schedule`` that reads the step only
    (``STEP_SCHEDULES``; ``lr_schedule`` gives every schedule, budgets and epochs included).

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
    if schedule == "epoch_decay":
        raise ValueError("schedule 'epoch_decay' reads the epoch, not only the step: use lr_schedule")
    raise ValueError(f"schedule ({schedule!r}) must be one of {', '.join(map(repr, STEP_SCHEDULES))}")


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


class LRScheduler:
    """Sets the learning rate of every optimizer step to ``lr_g * schedule(progress)`` for each parameter group g,
    ``lr_g`` being the group's learning rate when the scheduler is made.

    The trainer calls ``set_lr(epoch=, elapsed=)`` just before each optimizer step and ``step()`` after each one
    whose update was applied, so a skipped step does not consume its learning rate (as with ``LambdaLR``, whose
    values these are, bit for bit, for a schedule that reads the step only).

    Args:
        optimizer: any ``torch.optim.Optimizer``.
        schedule: ``m(progress) -> float``, e.g. ``lr_schedule("cosine", total_steps=100)``.
    Attributes:
        steps_taken: the applied steps so far; the next step is ``steps_taken + 1``.
        base_lrs: each group's ``lr_g``.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, schedule: Schedule) -> None:
        self.optimizer = optimizer
        self.schedule = schedule
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self.steps_taken = 0

    def set_lr(self, *, epoch: int, elapsed: float) -> float:
        """Give each group the learning rate of step ``steps_taken + 1`` of ``epoch``, ``elapsed`` seconds into
        training; return the multiplier."""
        multiplier = self.schedule(Progress(self.steps_taken + 1, epoch, elapsed))
        for group, base_lr in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = base_lr * multiplier
        return multiplier

    def step(self) -> None:
        """Count an applied optimizer step."""
        self.steps_taken += 1

    def state_dict(self) -> dict[str, Any]:
        """``{"last_epoch": steps_taken, "base_lrs": [...]}``, the keys ``LambdaLR`` saves them under."""
        return {"last_epoch": self.steps_taken, "base_lrs": list(self.base_lrs)}

    def load_state_dict(self, state_dict: dict[str, Any], /) -> None:
        """Restore ``state_dict()``'s value (or a ``LambdaLR``'s, from checkpoints written before this class).

        Raises: ValueError if it holds another number of parameter groups.
        """
        if len(state_dict["base_lrs"]) != len(self.base_lrs):
            raise ValueError(
                f"the scheduler state has {len(state_dict['base_lrs'])} parameter groups, the optimizer "
                f"{len(self.base_lrs)}"
            )
        self.steps_taken = int(state_dict["last_epoch"])
        self.base_lrs = list(state_dict["base_lrs"])
