"""Dynamic batching of ``POST /v1/predict``: requests for one model with the same options that arrive together
are answered by one ``System.predict`` call over all their inputs, and each request gets back its own part.

A request joins the open batch of its key (the model and the request's options: requests with other options never
share a call) unless its inputs would take the batch past ``max_batch_size`` inputs; a request is never split, so
one with more inputs runs alone. A batch stays open ``batch_wait_ms`` after its first request (or until it is full),
then for as long as another batch of its key runs (unless it is full), then for as long as it waits for a place at
the ``Gate``: under load, the requests that arrive meanwhile ride along in one call instead of queueing for calls of
their own. Once it has a place it closes and runs in a worker thread, holding one place.

If the batched call raises, each request of the batch is run again alone, so that a bad input (a letter the model
never saw) fails only its own request while the others get their predictions. A client that disconnects before its
batch starts is dropped from it; a batch left empty never runs. ``max_batch_size`` = 1 answers every request by a
call of its own, as a server without batching does.

Batching assumes what every recipe's ``predict`` does: an input's prediction does not depend on the other inputs of
the call (batches are padded and the padding masked). In float32 the numbers of a batched call may differ from a
lone call's in their last digits (measured on the 20,000-step g2p run: scores by at most 3.4e-6 nats).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi.concurrency import run_in_threadpool

from seqlab.recipes.system import System
from seqlab.serving.gate import Gate, RequestError

# One request's answer: its predictions, or the error of its inputs.
Outcome = list[Any] | Exception


@dataclass(eq=False)
class _Batch:
    """Requests of one key answered by one call: each entry's inputs and the future its request awaits."""

    key: Hashable
    system: System
    entries: list[_Entry] = field(default_factory=list)
    size: int = 0  # the entries' inputs
    started: bool = False
    closed: asyncio.Event = field(default_factory=asyncio.Event)  # set once no request may join


@dataclass(eq=False)
class _Entry:
    inputs: Sequence[str]
    future: asyncio.Future[list[Any]]
    batch: _Batch


class PredictBatcher:
    """Gathers the ``System.predict`` requests of one key that arrive together into one call (see the module's
    docstring); one per server, used on its event loop.

    Args:
        gate: the server's bound on work at once; a batch holds one place while it runs.
        max_batch_size: most inputs of one call (>= 1; 1: no batching).
        batch_wait_ms: how long a batch waits for more requests after its first, in milliseconds (>= 0).
    Attributes:
        calls: ``System.predict`` calls made (a batch that failed and was run again counts each call).
        requests: requests those calls answered.
    Raises: ValueError for a size below 1 or a negative wait.
    """

    def __init__(self, gate: Gate, *, max_batch_size: int, batch_wait_ms: float) -> None:
        if max_batch_size < 1 or batch_wait_ms < 0:
            raise ValueError(f"max_batch_size ({max_batch_size}) must be >= 1, batch_wait_ms ({batch_wait_ms}) >= 0")
        self.gate = gate
        self.max_batch_size = max_batch_size
        self.batch_wait_ms = batch_wait_ms
        self.calls = 0
        self.requests = 0
        self._open: dict[Hashable, _Batch] = {}
        self._running: collections.Counter[Hashable] = collections.Counter()  # batches running, by key
        self._finished: dict[Hashable, asyncio.Event] = {}  # set when a batch of the key ends
        self._tasks: set[asyncio.Task[None]] = set()  # held: the event loop keeps only weak references

    async def predict(
        self, key: Hashable, system: System, inputs: Sequence[str], *, disconnected: Callable[[], Awaitable[Any]]
    ) -> list[Any]:
        """``system.predict(inputs)``, answered by a call shared with the other requests of ``key``.

        Args:
            key: what requests must share to be batched together (the model and the request's options).
            system: what answers the batch (every request of one key must give an equivalent one).
            disconnected: a coroutine function that returns once the client has gone.
        Raises: what ``system.predict(inputs)`` raises alone; RequestError 503 if the gate's queue is full, 499 if
            the client disconnected before its answer.
        """
        entry = self._join(key, system, inputs)
        watcher = asyncio.ensure_future(disconnected())
        try:
            await asyncio.wait((entry.future, watcher), return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            answered = entry.future.done()
            if not answered:  # disconnected, or this request was cancelled
                self._drop(entry)
        if not answered:
            raise RequestError(499, "client disconnected before its prediction")
        return entry.future.result()

    def _join(self, key: Hashable, system: System, inputs: Sequence[str]) -> _Entry:
        """Add a request to its key's open batch, or to a new one if there is none or it has no room."""
        batch = self._open.get(key)
        if batch is None or batch.size + len(inputs) > self.max_batch_size:
            if batch is not None:
                self._close(batch)
            batch = _Batch(key, system)
            self._open[key] = batch
            task = asyncio.create_task(self._dispatch(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        entry = _Entry(inputs, asyncio.get_running_loop().create_future(), batch)
        batch.entries.append(entry)
        batch.size += len(inputs)
        if batch.size >= self.max_batch_size:
            self._close(batch)
        return entry

    def _close(self, batch: _Batch) -> None:
        """No request joins ``batch`` any more; it stops waiting for more."""
        if self._open.get(batch.key) is batch:
            del self._open[batch.key]
        batch.closed.set()

    def _drop(self, entry: _Entry) -> None:
        """Take a request out of its batch if the batch has not started (else its answer is thrown away)."""
        entry.future.cancel()  # nobody awaits it any more
        batch = entry.batch
        if not batch.started:
            batch.entries.remove(entry)
            batch.size -= len(entry.inputs)

    async def _dispatch(self, batch: _Batch) -> None:
        """Wait for more requests, then for a place, then answer the batch's requests; no request is left
        waiting, whatever happens (an error is each request's; a cancelled server cancels them)."""
        try:
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(batch.closed.wait(), self.batch_wait_ms / 1000)
                await self._turn(batch)
                await self.gate.enter()
            finally:
                self._close(batch)
            batch.started = True
            self._running[batch.key] += 1
            try:
                await self._answer(batch)
            finally:
                self.gate.leave()
                self._running[batch.key] -= 1
                if not self._running[batch.key]:
                    del self._running[batch.key]
                self._finished.pop(batch.key, asyncio.Event()).set()
        except Exception as error:  # the gate's 503, or a failure outside System.predict
            for entry in batch.entries:
                if not entry.future.done():
                    entry.future.set_exception(error)
        except BaseException:
            for entry in batch.entries:
                entry.future.cancel()
            raise

    async def _turn(self, batch: _Batch) -> None:
        """Wait while another batch of the key runs, unless ``batch`` is full (or closed for another reason)."""
        while self._running[batch.key] > 0 and not batch.closed.is_set():
            finished = self._finished.setdefault(batch.key, asyncio.Event())
            waits = {asyncio.ensure_future(finished.wait()), asyncio.ensure_future(batch.closed.wait())}
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()

    async def _answer(self, batch: _Batch) -> None:
        if not batch.entries:
            return
        outcomes, calls = await run_in_threadpool(predict_parts, batch.system, [e.inputs for e in batch.entries])
        self.calls += calls
        self.requests += len(batch.entries)
        for entry, outcome in zip(batch.entries, outcomes, strict=True):
            if entry.future.done():
                continue
            if isinstance(outcome, Exception):
                entry.future.set_exception(outcome)
            else:
                entry.future.set_result(outcome)


def predict_parts(system: System, parts: Sequence[Sequence[str]]) -> tuple[list[Outcome], int]:
    """Each part's predictions from one ``system.predict`` call over all the parts' inputs, or, if that call
    raises, from a call of its own (its error if that one raises too); and the number of calls made.

    Raises: RuntimeError if the system answers a number of predictions other than its inputs'.
    """
    inputs = [text for part in parts for text in part]
    try:
        predictions = list(system.predict(inputs))
    except Exception as error:
        if len(parts) == 1:
            return [error], 1
        return [_alone(system, part) for part in parts], 1 + len(parts)
    if len(predictions) != len(inputs):
        raise RuntimeError(f"predict answered {len(predictions)} predictions for {len(inputs)} inputs")
    outcomes: list[Outcome] = []
    start = 0
    for part in parts:
        outcomes.append(predictions[start : start + len(part)])
        start += len(part)
    return outcomes, 1


def _alone(system: System, part: Sequence[str]) -> Outcome:
    try:
        return list(system.predict(part))
    except Exception as error:
        return error
