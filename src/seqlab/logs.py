"""Silencing the log lines of libraries seqlab calls, where seqlab says what went wrong itself in one line."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence

__all__ = ["quiet_loggers"]


@contextlib.contextmanager
def quiet_loggers(names: Sequence[str], level: int = logging.ERROR) -> Iterator[None]:
    """Only records at ``level`` or above from the loggers ``names`` and their existing descendants (whose own
    levels would otherwise let records through) inside the block; every level is restored after it. A
    descendant created inside the block inherits the silenced level of its ancestor.

    Args:
        names: logger names, e.g. ``("torch.distributed",)``.
        level: a ``logging`` level.
    """
    prefixes = tuple(f"{name}." for name in names)
    loggers = [logging.getLogger(name) for name in names] + [
        logger
        for name, logger in logging.root.manager.loggerDict.items()
        if name.startswith(prefixes) and isinstance(logger, logging.Logger)
    ]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(level)
    try:
        yield
    finally:
        for logger, old in zip(loggers, levels, strict=True):
            logger.setLevel(old)
