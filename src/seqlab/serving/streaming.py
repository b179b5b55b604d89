"""Server-sent events from a generation: the System's chunk iterator runs in a worker thread and hands each chunk
to the event loop as it is produced, so the model never waits for the network.

The thread wakes the event loop only when the loop waits for chunks: chunks produced while the loop is still
sending the previous ones are taken, with no wake-up of their own, when it comes back, and go out in one write.
Nothing is held back: the loop takes whatever has been produced each time it asks, and waits only when nothing has.

The stream stops the generation when it ends early: a client that disconnects (or a server that shuts down)
closes the response's async iterator; its ``finally`` tells the thread to stop, and the thread closes the
System's generator (``GeneratorExit`` at its current ``yield``) after at most the chunk it is computing.
"""

from __future__ import annotations

import asyncio
import collections
import json
import threading
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from typing import Any

from seqlab.errors import SeqlabError
from seqlab.recipes.system import GenerationChunk

_END = object()  # the thread's last item


def event(name: str, data: dict[str, Any]) -> bytes:
    """One server-sent event ``event: NAME`` whose data is ``data`` as one line of JSON."""
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def error_line(error: BaseException) -> str:
    """The one-line message of an error for a client: seqlab's own as it is, any other with its type."""
    message = " ".join(str(error).split())
    return message if isinstance(error, SeqlabError) else f"internal error: {type(error).__name__}: {message}"


class _Handoff:
    """Items from one worker thread to the event loop. The thread ``put``s each item; ``take`` (on the loop) returns
    every item put so far, waiting for one only when there is none; the thread wakes the loop (one
    ``call_soon_threadsafe``) only for an item that a ``take`` is waiting for."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.items: collections.deque[Any] = collections.deque()
        self.lock = threading.Lock()
        self.waiter: asyncio.Future[None] | None = None

    def put(self, item: Any) -> None:
        """Add ``item`` (on the worker thread); wake the loop if it waits."""
        with self.lock:
            self.items.append(item)
            waiter, self.waiter = self.waiter, None
        if waiter is not None:
            self.loop.call_soon_threadsafe(_wake, waiter)

    async def take(self) -> list[Any]:
        """Every item put and not yet taken, in order (at least one: waits while there is none)."""
        with self.lock:
            waiter = None if self.items else self.loop.create_future()
            self.waiter = waiter
        if waiter is not None:
            await waiter
        with self.lock:
            items = list(self.items)
            self.items.clear()
        return items


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():  # a stream that was cancelled meanwhile has no one waiting
        waiter.set_result(None)


async def chunk_events(chunks: Iterator[GenerationChunk], *, on_end: Callable[[], None]) -> AsyncIterator[bytes]:
    """``chunk`` events (``{"index", "text", "finished"}``) as the chunks are produced, then ``done`` (``{}``), or
    ``error`` (``{"error"}``) if the generation fails part-way. Chunks that wait together go out in one write.

    Args:
        chunks: the System's generation, consumed (and closed) in a worker thread.
        on_end: called on the event loop once the thread has finished with ``chunks`` (a semaphore's release).
    """
    loop = asyncio.get_running_loop()
    handoff = _Handoff(loop)
    stop = threading.Event()

    def produce() -> None:
        try:
            for chunk in chunks:
                if stop.is_set():
                    break
                handoff.put(chunk)
        except Exception as e:  # reported to the client as an error event, never as a traceback
            handoff.put(e)
        finally:
            if isinstance(chunks, Generator):
                chunks.close()
            handoff.put(_END)
            loop.call_soon_threadsafe(on_end)

    worker = threading.Thread(target=produce, name="seqlab-generate", daemon=True)
    worker.start()
    try:
        while True:
            items = await handoff.take()
            payload = b""
            for item in items:
                if item is _END:
                    yield payload + event("done", {})
                    return
                if isinstance(item, Exception):
                    yield payload + event("error", {"error": error_line(item)})
                    return
                payload += event("chunk", item._asdict())
            yield payload
    finally:
        stop.set()
