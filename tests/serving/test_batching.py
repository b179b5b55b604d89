"""``seqlab.serving.batching``: concurrent predict requests are answered by one ``System.predict`` call (counted
by a wrapper, never by timing) with exactly what separate calls answer; a bad input fails only its own request;
requests with other options, over the size limit or whose client left are not mixed in; the gate still bounds the
work done at once."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from seqlab.errors import DataError
from seqlab.recipes.system import System
from seqlab.serving import ServedModel, ServeLimits, create_app, load_models
from seqlab.serving.batching import PredictBatcher
from seqlab.serving.gate import Gate, RequestError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
G2P, CLASSIFY = "g2p_v0_1", "classify_9a192c4"
WORDS = ["cat", "dog", "bat", "the", "withdraw", "a", "kitchen", "sorrow"]  # letters the fixture run knows
FOREVER_MS = 60_000  # a window that never ends in a test: batches start because they are full


class Upper:
    """A stand-in System: each input's prediction is the input upper-cased; an input ``"bad"`` fails the whole
    call with a DataError naming it. Records each call's inputs (``calls``) and the most calls running at once;
    a call waits for ``release`` (set unless a test clears it) and releases ``started`` once."""

    OPTIONS = frozenset()

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Semaphore(0)
        self.running = self.most_running = 0
        self.lock = threading.Lock()

    def predict(self, inputs: Sequence[str]) -> list[str]:
        with self.lock:
            self.calls.append(list(inputs))
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        self.started.release()
        try:
            self.release.wait(timeout=30)
            if "bad" in inputs:
                raise DataError(f"inputs: {'bad'!r} is not a word")
            return [text.upper() for text in inputs]
        finally:
            with self.lock:
                self.running -= 1


async def never() -> None:
    """A client that stays."""
    await asyncio.Event().wait()


def batcher(**settings: Any) -> PredictBatcher:
    gate = Gate(settings.pop("capacity", 4), settings.pop("max_waiting", 64))
    return PredictBatcher(gate, **{"max_batch_size": 32, "batch_wait_ms": FOREVER_MS, **settings})


def test_requests_that_arrive_together_share_one_call_and_get_their_own_part() -> None:
    async def scenario() -> None:
        system, batching = Upper(), batcher(max_batch_size=6)
        parts = [["a"], ["b", "c"], ["d"], ["e", "f"]]  # 6 inputs: the batch is full, it starts
        answers = await asyncio.gather(*(batching.predict("k", system, p, disconnected=never) for p in parts))
        assert system.calls == [["a", "b", "c", "d", "e", "f"]]
        assert answers == [["A"], ["B", "C"], ["D"], ["E", "F"]]
        assert (batching.calls, batching.requests) == (1, 4)

    asyncio.run(scenario())


def test_a_batch_holds_at_most_max_batch_size_inputs_and_never_splits_a_request() -> None:
    async def scenario() -> None:
        system, batching = Upper(), batcher(max_batch_size=2, batch_wait_ms=0)
        parts = [["a"], ["b"], ["c", "d", "e"], ["f"], ["g"]]
        answers = await asyncio.gather(*(batching.predict("k", system, p, disconnected=never) for p in parts))
        assert sorted(system.calls) == [["a", "b"], ["c", "d", "e"], ["f", "g"]]
        assert answers == [[t.upper() for t in p] for p in parts]

    asyncio.run(scenario())


def test_max_batch_size_one_gives_each_request_its_own_call() -> None:
    async def scenario() -> None:
        system, batching = Upper(), batcher(max_batch_size=1)
        await asyncio.gather(*(batching.predict("k", system, [t], disconnected=never) for t in "abc"))
        assert sorted(system.calls) == [["a"], ["b"], ["c"]]

    asyncio.run(scenario())


def test_a_bad_input_fails_only_its_own_request() -> None:
    async def scenario() -> None:
        system, batching = Upper(), batcher(max_batch_size=4)
        parts = [["a"], ["bad"], ["c", "d"]]
        answers = await asyncio.gather(
            *(batching.predict("k", system, p, disconnected=never) for p in parts), return_exceptions=True
        )
        assert answers[0] == ["A"] and answers[2] == ["C", "D"]
        assert isinstance(answers[1], DataError) and str(answers[1]) == "inputs: 'bad' is not a word"
        assert system.calls == [["a", "bad", "c", "d"], ["a"], ["bad"], ["c", "d"]]  # then each alone
        assert (batching.calls, batching.requests) == (4, 3)

    asyncio.run(scenario())


def test_requests_of_other_keys_are_not_mixed() -> None:
    async def scenario() -> None:
        system, batching = Upper(), batcher(max_batch_size=2)
        keyed = [("nbest=2", ["a"]), ("nbest=5", ["b"]), ("nbest=2", ["c"]), ("nbest=5", ["d"])]
        await asyncio.gather(*(batching.predict(k, system, p, disconnected=never) for k, p in keyed))
        assert sorted(system.calls) == [["a", "c"], ["b", "d"]]

    asyncio.run(scenario())


def test_a_client_that_disconnects_is_dropped_from_its_batch() -> None:
    async def scenario() -> None:
        system, batching = Upper(), batcher(max_batch_size=2)
        gone = asyncio.Event()
        leaving = asyncio.create_task(batching.predict("k", system, ["a"], disconnected=gone.wait))
        await asyncio.sleep(0)  # it has joined the batch
        gone.set()
        with pytest.raises(RequestError, match="client disconnected before its prediction") as refused:
            await leaving
        assert refused.value.status == 499
        answers = await asyncio.gather(*(batching.predict("k", system, [t], disconnected=never) for t in "bc"))
        assert answers == [["B"], ["C"]] and system.calls == [["b", "c"]]

    asyncio.run(scenario())


def test_the_gate_bounds_batches_and_a_waiting_batch_takes_the_requests_that_arrive() -> None:
    """With one place, held by a request of another key, a batch that waits for it keeps gathering requests."""

    async def scenario() -> None:
        system, batching = Upper(), batcher(capacity=1, max_batch_size=8, batch_wait_ms=0)
        system.release.clear()
        first = asyncio.create_task(batching.predict("other", system, ["a"], disconnected=never))
        await asyncio.to_thread(system.started.acquire, timeout=30)  # "a" is running, holding the only place
        later = [asyncio.create_task(batching.predict("k", system, [t], disconnected=never)) for t in "bcd"]
        while batching.gate.waiting < 1:
            await asyncio.sleep(0.001)
        assert (batching.gate.active, batching.gate.waiting) == (1, 1)  # one batch waits for the place
        system.release.set()
        assert await first == ["A"]
        assert [await task for task in later] == [["B"], ["C"], ["D"]]
        assert system.calls == [["a"], ["b", "c", "d"]] and system.most_running == 1

    asyncio.run(scenario())


def test_a_batch_waits_while_its_key_runs_unless_it_is_full() -> None:
    """Places are free, but a batch that is not full waits for the running call of its key, gathering the
    requests that arrive meanwhile; once full, it runs beside it."""

    async def scenario() -> None:
        system, batching = Upper(), batcher(capacity=4, max_batch_size=3, batch_wait_ms=0)
        system.release.clear()
        first = asyncio.create_task(batching.predict("k", system, ["a"], disconnected=never))
        await asyncio.to_thread(system.started.acquire, timeout=30)
        waiting = [asyncio.create_task(batching.predict("k", system, [t], disconnected=never)) for t in "bc"]
        for _ in range(10):  # however long it is given, the batch of "b" and "c" does not start
            await asyncio.sleep(0.001)
        assert system.calls == [["a"]] and batching.gate.active == 1
        filling = asyncio.create_task(batching.predict("k", system, ["d"], disconnected=never))
        await asyncio.to_thread(system.started.acquire, timeout=30)  # full now: it runs beside "a"
        assert system.calls == [["a"], ["b", "c", "d"]] and system.most_running == 2
        system.release.set()
        assert [await task for task in (first, *waiting, filling)] == [["A"], ["B"], ["C"], ["D"]]

    asyncio.run(scenario())


def test_a_full_queue_refuses_every_request_of_the_batch_that_cannot_wait() -> None:
    async def scenario() -> None:
        system, batching = Upper(), batcher(capacity=1, max_waiting=1, max_batch_size=1, batch_wait_ms=0)
        system.release.clear()
        running = asyncio.create_task(batching.predict("k", system, ["a"], disconnected=never))
        await asyncio.to_thread(system.started.acquire, timeout=30)
        waiting = asyncio.create_task(batching.predict("k", system, ["b"], disconnected=never))
        while batching.gate.waiting < 1:
            await asyncio.sleep(0.001)
        with pytest.raises(RequestError, match=r"server busy: 1 requests running, 1 waiting"):
            await batching.predict("k", system, ["c"], disconnected=never)
        system.release.set()
        assert (await running, await waiting) == (["A"], ["B"])

    asyncio.run(scenario())


# The app, with the committed g2p and classify runs.


class Counted:
    """A real System whose ``predict`` calls are recorded in ``calls`` (shared with the systems that
    ``with_search`` derives, each call with the (num_beams, nbest) it ran with)."""

    def __init__(self, system: System, calls: list[tuple[Any, list[str]]]) -> None:
        self.system, self.calls = system, calls
        self.OPTIONS = system.OPTIONS

    def predict(self, inputs: Sequence[str]) -> Sequence[Any]:
        self.calls.append(((self.system.num_beams, self.system.nbest), list(inputs)))
        return self.system.predict(inputs)

    def with_search(self, **given: Any) -> Counted:
        return Counted(self.system.with_search(**given), self.calls)


@pytest.fixture(scope="module")
def runs() -> dict[str, ServedModel]:
    return load_models([FIXTURES / G2P, FIXTURES / CLASSIFY], nbest=5)


def serve(runs: dict[str, ServedModel], **limits: Any) -> tuple[Any, list]:
    """An app over the runs whose g2p calls are counted, and the list they are recorded in."""
    calls: list = []
    counted = {**runs, G2P: dataclasses.replace(runs[G2P], system=Counted(runs[G2P].system, calls))}
    return create_app(counted, limits=ServeLimits(**limits)), calls


async def post_all(app: Any, bodies: list[dict]) -> list[httpx.Response]:
    """The bodies posted to /v1/predict at once."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await asyncio.gather(*(client.post("/v1/predict", json=body) for body in bodies))


def nbests(response: httpx.Response) -> list[list[tuple[tuple[str, ...], float]]]:
    return [[(tuple(s), score) for s, score in p["fields"]["nbest"]] for p in response.json()["predictions"]]


def assert_same(served: list[list[tuple[tuple[str, ...], float]]], direct: Sequence[Any]) -> None:
    """The same pronunciations in the same order, scores within 1e-6 of each other (relative: a float32 batch of
    another shape sums each step's log-probability in another order; 1.4e-6 nats apart on a score of 2.7 here)."""
    assert [[s for s, _ in nbest] for nbest in served] == [[s for s, _ in p.nbest] for p in direct]
    for nbest, prediction in zip(served, direct, strict=True):
        assert [score for _, score in nbest] == pytest.approx([score for _, score in prediction.nbest], rel=1e-6)


def test_concurrent_predicts_are_one_call_that_answers_what_separate_calls_answer(runs) -> None:
    app, calls = serve(runs, max_batch_size=len(WORDS), batch_wait_ms=FOREVER_MS)
    responses = asyncio.run(post_all(app, [{"model": G2P, "inputs": [w]} for w in WORDS]))
    assert [r.status_code for r in responses] == [200] * len(WORDS)
    assert len(calls) == 1 and sorted(calls[0][1]) == sorted(WORDS)
    for word, response in zip(WORDS, responses, strict=True):
        assert response.json()["predictions"][0]["fields"]["word"] == word
        assert_same(nbests(response), runs[G2P].system.predict([word]))


def test_one_bad_word_gets_its_own_400_and_the_others_their_predictions(runs) -> None:
    app, calls = serve(runs, max_batch_size=4, batch_wait_ms=FOREVER_MS)
    bodies = [{"model": G2P, "inputs": ["cat"]}, {"model": G2P, "inputs": ["c@t"]},
              {"model": G2P, "inputs": ["dog", "bat"]}]  # fmt: skip
    good, bad, pair = asyncio.run(post_all(app, bodies))
    assert (good.status_code, bad.status_code, pair.status_code) == (200, 400, 200)
    assert bad.json() == {"error": "inputs: word 'c@t' has letters the model never saw: '@'"}
    assert "\n" not in bad.text
    assert_same(nbests(good), runs[G2P].system.predict(["cat"]))
    assert_same(nbests(pair), runs[G2P].system.predict(["dog", "bat"]))
    assert len(calls) == 4  # the batch, then each request alone


def test_requests_with_other_options_are_not_mixed(runs) -> None:
    app, calls = serve(runs, max_batch_size=2, batch_wait_ms=FOREVER_MS)
    bodies = [{"model": G2P, "inputs": ["cat"], "nbest": 2}, {"model": G2P, "inputs": ["dog"]},
              {"model": G2P, "inputs": ["bat"], "nbest": 2}, {"model": G2P, "inputs": ["the"]},
              {"model": G2P, "inputs": ["sorrow"], "num_beams": 3},
              {"model": G2P, "inputs": ["a"], "num_beams": 3}]  # fmt: skip
    responses = asyncio.run(post_all(app, bodies))
    assert sorted((options, sorted(inputs)) for options, inputs in calls) == [
        ((3, 3), ["a", "sorrow"]), ((5, 2), ["bat", "cat"]), ((5, 5), ["dog", "the"])]  # fmt: skip
    system = runs[G2P].system
    for body, response in zip(bodies, responses, strict=True):
        options = {k: v for k, v in body.items() if k in ("nbest", "num_beams")}
        assert_same(nbests(response), system.with_search(**options).predict(body["inputs"]))
    assert [len(n) for r in responses for n in nbests(r)] == [2, 5, 2, 5, 3, 3]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"model": G2P, "inputs": ["cat"], "num_beams": 2, "nbest": 3},
         "nbest (3) cannot exceed the beam width num_beams (2)"),
        ({"model": G2P, "inputs": ["cat"], "nbest": 0}, "nbest (0) must be >= 1"),
        ({"model": G2P, "inputs": ["cat"], "num_beams": 17}, "num_beams (17) is above this server's limit of 16"),
        ({"model": CLASSIFY, "inputs": ["Tanaka"], "nbest": 2}, "model 'classify_9a192c4' (classify) takes no nbest"),
    ],
)  # fmt: skip
def test_bad_options_are_one_line_400s(runs, body: dict, message: str) -> None:
    app, calls = serve(runs)
    (response,) = asyncio.run(post_all(app, [body]))
    assert (response.status_code, response.json()) == (400, {"error": message}) and calls == []


def test_a_client_that_disconnects_is_dropped_from_the_batch(runs) -> None:
    """A raw ASGI request whose client is gone as soon as its body is read: the batch it opened runs without it."""
    app, calls = serve(runs, max_batch_size=2, batch_wait_ms=FOREVER_MS)

    async def leaving() -> int:
        body = json.dumps({"model": G2P, "inputs": ["kitchen"]}).encode()
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        sent: list[dict] = []

        async def receive() -> dict:
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
                 "path": "/v1/predict", "raw_path": b"/v1/predict", "query_string": b"", "root_path": "",
                 "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
                 "client": ("127.0.0.1", 1), "server": ("test", 80)}  # fmt: skip
        await app(scope, receive, send)
        return sent[0]["status"]

    async def scenario() -> tuple[int, list[httpx.Response]]:
        status = await leaving()
        return status, await post_all(app, [{"model": G2P, "inputs": [w]} for w in ("cat", "dog")])

    status, responses = asyncio.run(scenario())
    assert status == 499 and [r.status_code for r in responses] == [200, 200]
    assert [sorted(inputs) for _, inputs in calls] == [["cat", "dog"]]
