"""Timing helpers that the benchmark scripts share: runs timed in alternating order, and the median with its
interquartile range. Nothing here imports a model library, so a script that needs only these starts without
transformers (whose import loads torchao where it is installed)."""

from __future__ import annotations

import statistics
from collections.abc import Callable


def time_pair(
    runs: list[Callable[[], object]], *, repeats: int, sync: Callable[[], None], clock: Callable[[], float]
) -> list[list[float]]:
    """Seconds (of ``clock``: ``time.perf_counter`` or ``time.process_time``) per run (outer) and round (inner):
    ``1 + repeats`` rounds, each calling every run once and then ``sync`` (a device synchronisation, or nothing),
    in list order in even rounds and reversed in odd ones, so neither the order nor load from other processes
    favours one run; the first round is a warm-up and is not kept."""
    seconds: list[list[float]] = [[] for _ in runs]
    for i in range(1 + repeats):
        order = range(len(runs)) if i % 2 == 0 else reversed(range(len(runs)))
        for r in order:
            start = clock()
            runs[r]()
            sync()
            if i > 0:
                seconds[r].append(clock() - start)
    return seconds


def median_and_iqr(values: list[float]) -> tuple[float, float, float]:
    """(median, first quartile, third quartile) of ``values`` (``statistics.quantiles``, inclusive method); all
    three equal the value for a single one.

    Raises: statistics.StatisticsError for an empty list.
    """
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return median, q1, q3
