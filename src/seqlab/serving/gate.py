"""The bound on work a server does at once: ``Gate`` lets at most ``max_concurrency`` requests (or predict batches)
work, queues the others in arrival order, and refuses with 503 past ``max_waiting``; ``RequestError`` is a refusal
with its HTTP status."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi.concurrency import run_in_threadpool


class RequestError(Exception):
    """A request the server refuses, with its HTTP status and one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Gate:
    """At most ``capacity`` requests at work, at most ``max_waiting`` waiting (then 503), served in order.

    A predict batch (``seqlab.serving.batching``) holds one place for all of its requests.
    """

    def __init__(self, capacity: int, max_waiting: int) -> None:
        self.semaphore = asyncio.Semaphore(capacity)
        self.capacity = capacity
        self.max_waiting = max_waiting
        self.active = 0
        self.waiting = 0

    async def enter(self) -> None:
        """Wait for a place. Raises: RequestError 503 if ``max_waiting`` requests wait already."""
        if self.semaphore.locked() and self.waiting >= self.max_waiting:
            raise RequestError(503, f"server busy: {self.active} requests running, {self.waiting} waiting")
        self.waiting += 1
        try:
            await self.semaphore.acquire()
        finally:
            self.waiting -= 1
        self.active += 1

    def leave(self) -> None:
        """Give the place back (on the event loop's thread)."""
        self.active -= 1
        self.semaphore.release()

    async def run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` in a worker thread, once a place is free."""
        await self.enter()
        try:
            return await run_in_threadpool(function, *args, **kwargs)
        finally:
            self.leave()
