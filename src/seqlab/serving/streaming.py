"""Server-sent events from a generation: the System's chunk iterator runs in a worker thread and hands each chunk
to the event loop as it is produced, so the model never waits for the network.

The stream stops the generation when it ends early: a client that disconnects (or a server that shuts down)
closes the response's async iterator; its ``finally`` tells the thread to stop, and the thread closes the
System's generator (``GeneratorExit`` at its current ``yield``) after at most the chunk it is computing.
"""

from __future__ import annotations

import asyncio
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


async def chunk_events(chunks: Iterator[GenerationChunk], *, on_end: Callable[[], None]) -> AsyncIterator[bytes]:
    """``chunk`` events (``{"index", "text", "finished"}``) as the chunks are produced, then ``done`` (``{}``), or
    ``error`` (``{"error"}``) if the generation fails part-way. Chunks that wait together go out in one write.

    Args:
        chunks: the System's generation, consumed (and closed) in a worker thread.
        on_end: called on the event loop once the thread has finished with ``chunks`` (a semaphore's release).
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    stop = threading.Event()

    def produce() -> None:
        try:
            for chunk in chunks:
                if stop.is_set():
                    break
                loop.call_soon_threadsafe(queue.put_nowait, chunk)
        except Exception as e:  # reported to the client as an error event, never as a traceback
            loop.call_soon_threadsafe(queue.put_nowait, e)
        finally:
            if isinstance(chunks, Generator):
                chunks.close()
            loop.call_soon_threadsafe(queue.put_nowait, _END)
            loop.call_soon_threadsafe(on_end)

    worker = threading.Thread(target=produce, name="seqlab-generate", daemon=True)
    worker.start()
    try:
        while True:
            items = [await queue.get()]
            while not queue.empty():
                items.append(queue.get_nowait())
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
