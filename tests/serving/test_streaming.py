"""A client that disconnects mid-stream stops its generation: against a real uvicorn server (TestClient does not
disconnect), the System's generator is closed and the request's place is given back."""

from __future__ import annotations

import time

import httpx

from seqlab.serving import ServedModel


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
