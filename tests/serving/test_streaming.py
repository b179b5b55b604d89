"""Streaming against a real uvicorn server (TestClient does not disconnect): a client that disconnects mid-stream
stops its generation (the System's generator is closed and the request's place is given back); tokens reach the
client as they are produced, never held back for more; an error part-way ends the stream with an ``error`` event;
the event loop is woken only when it waits for chunks."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from seqlab.errors import DataError
from seqlab.recipes.system import GenerationChunk, GenerationRequest
from seqlab.serving import ServedModel, create_app
from seqlab.serving.streaming import chunk_events


def wait_until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_disconnect_closes_the_generator(server_url: str, models: dict[str, ServedModel]) -> None:
    endless = models["endless"].system
    endless.closed.clear()
    with httpx.Client(base_url=server_url, timeout=10) as client:
        with client.stream("POST", "/v1/generate", json={"model": "endless", "prompt": "la"}) as response:
            assert response.status_code == 200
            lines = response.iter_lines()  # kept: a dropped iterator closes the connection (httpcore)
            assert next(lines) == "event: chunk"
            assert client.get("/healthz").json()["active"] == 1
        # Leaving the block closes the connection with the generation still running.
        assert wait_until(endless.closed.is_set), "the generator was not closed after the client left"
        assert wait_until(lambda: client.get("/healthz").json()["active"] == 0)


def test_disconnect_stops_a_language_model(server_url: str) -> None:
    body = {"model": "lm_gpt_9a192c4", "prompt": "The ", "max_new_tokens": 1024, "do_sample": True, "seed": 0,
            "num_return_sequences": 8}  # fmt: skip
    with httpx.Client(base_url=server_url, timeout=10) as client:
        with client.stream("POST", "/v1/generate", json=body) as response:
            assert next(response.iter_lines()) == "event: chunk"
        assert wait_until(lambda: client.get("/healthz").json()["active"] == 0)


class GatedGenerator:
    """A stand-in text generator that streams ``tokens`` chunks, then waits until ``gate`` is set (``waiting`` is
    set meanwhile), then ends with ``ending``: a last empty chunk, or an exception raised part-way."""

    OPTIONS = frozenset()

    def __init__(self, tokens: int, ending: BaseException | None = None) -> None:
        self.tokens = tokens
        self.ending = ending
        self.waiting = threading.Event()
        self.gate = threading.Event()

    def generate(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        def chunks() -> Iterator[GenerationChunk]:
            for i in range(self.tokens):
                yield GenerationChunk(0, f"t{i} ", False)
            self.waiting.set()
            assert self.gate.wait(30), "the test never opened the gate"
            if self.ending is not None:
                raise self.ending
            yield GenerationChunk(0, "", True)

        return chunks()


def read_events(lines: Iterator[str], count: int) -> list[tuple[str, dict]]:
    """The next ``count`` server-sent events of a stream's lines, as (name, data)."""
    events = []
    while len(events) < count:
        name, data, blank = next(lines), next(lines), next(lines)
        assert (name[:7], data[:6], blank) == ("event: ", "data: ", "")
        events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


def test_tokens_are_not_held_back(serve) -> None:
    """A generation that stops after its 3rd token has sent those 3 to the client: nothing waits for more."""
    gated = GatedGenerator(tokens=3)
    app = create_app({"gated": ServedModel("gated", gated, "test", "none", 0)})
    body = {"model": "gated", "prompt": "la"}
    with (
        serve(app) as url,
        httpx.Client(base_url=url, timeout=10) as client,
        client.stream("POST", "/v1/generate", json=body) as response,
    ):
        lines = response.iter_lines()
        first = read_events(lines, 3)  # a read timeout here: tokens held back
        assert gated.waiting.is_set() and not gated.gate.is_set()
        gated.gate.set()
        rest = read_events(lines, 2)
    assert first == [("chunk", {"index": 0, "text": f"t{i} ", "finished": False}) for i in range(3)]
    assert rest == [("chunk", {"index": 0, "text": "", "finished": True}), ("done", {})]


@pytest.mark.parametrize(
    ("ending", "message"),
    [
        (RuntimeError("out of\nmemory"), "internal error: RuntimeError: out of memory"),
        (DataError("prompt: the character '☃' was never seen"), "prompt: the character '☃' was never seen"),
    ],
)
def test_an_error_part_way_is_an_error_event(serve, ending: BaseException, message: str) -> None:
    """The tokens before the failure, then one ``error`` event with the one-line message; the place is given back."""
    gated = GatedGenerator(tokens=2, ending=ending)
    gated.gate.set()
    app = create_app({"gated": ServedModel("gated", gated, "test", "none", 0)})
    with serve(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        with client.stream("POST", "/v1/generate", json={"model": "gated", "prompt": "la"}) as response:
            events = read_events(response.iter_lines(), 3)
        assert wait_until(lambda: client.get("/healthz").json()["active"] == 0)
    assert events[:2] == [("chunk", {"index": 0, "text": f"t{i} ", "finished": False}) for i in range(2)]
    assert events[2] == ("error", {"error": message})


def test_the_loop_is_woken_only_when_it_waits() -> None:
    """Chunks produced while the event loop is busy are taken together, with no wake-up of their own: 20 chunks
    cost at most 3 ``call_soon_threadsafe`` (the first chunk's, the end's, the release of the place), never one
    each; all 20 come in order."""
    produced = threading.Event()

    def chunks() -> Iterator[GenerationChunk]:
        for i in range(20):
            yield GenerationChunk(0, f"t{i} ", False)
        produced.set()

    async def consume() -> tuple[bytes, int]:
        loop = asyncio.get_running_loop()
        wakes = 0
        call_soon_threadsafe = loop.call_soon_threadsafe

        def counted(*args):
            nonlocal wakes
            wakes += 1
            return call_soon_threadsafe(*args)

        loop.call_soon_threadsafe = counted
        ended = asyncio.Event()
        events = chunk_events(chunks(), on_end=ended.set)
        received = await anext(events)
        assert produced.wait(10)  # the loop is blocked while the thread produces the other 19
        received += b"".join([payload async for payload in events])
        await asyncio.wait_for(ended.wait(), 10)
        return received, wakes

    with ThreadPoolExecutor(1) as own_thread:  # the browser tests leave an event loop running in this one
        received, wakes = own_thread.submit(asyncio.run, consume()).result()
    texts = [json.loads(line.removeprefix("data: "))["text"] for line in received.decode().split("\n")
             if line.startswith("data: {\"index\"")]  # fmt: skip
    assert texts == [f"t{i} " for i in range(20)] and received.endswith(b"event: done\ndata: {}\n\n")
    assert wakes <= 3
