"""Shared pieces of the serving tests: the committed fixture runs (and a tiny forecast run trained once), loaded
once per session; an app over them; a real uvicorn server on a free port; a generator that streams until closed."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI

from seqlab.recipes.system import GenerationChunk, GenerationRequest
from seqlab.serving import ServedModel, ServeLimits, create_app, load_models

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
RUNS = ("g2p_v0_1", "lm_gpt_9a192c4", "classify_9a192c4")


class EndlessGenerator:
    """A stand-in text generator that streams ``"la "`` every 10 ms until its generator is closed, and records
    that it was (``closed``): what a client that stops a stream must cause."""

    OPTIONS = frozenset()

    def __init__(self) -> None:
        self.closed = threading.Event()

    def generate(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        def chunks() -> Iterator[GenerationChunk]:
            try:
                while True:
                    time.sleep(0.01)
                    yield GenerationChunk(0, "la ", False)
            finally:
                self.closed.set()

        return chunks()


@pytest.fixture(scope="session")
def forecast_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A forecast run of a few steps on sunspots (a subprocess: this process never forks after torch)."""
    out = tmp_path_factory.mktemp("serving") / "forecast_tiny"
    settings = ["train.max_steps=3", "eval.arima=false", "model.hidden_size=4", "data.input_length=12",
                "data.horizon=3"]  # fmt: skip
    command = [sys.executable, "-m", "seqlab", "train", "forecast", "--out", str(out)]
    for setting in settings:
        command += ["--set", setting]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="session")
def models(forecast_run: Path) -> dict[str, ServedModel]:
    """The fixture runs and the tiny forecast run, loaded once (g2p with a 5-best), plus ``endless``."""
    served = load_models([FIXTURES / name for name in RUNS] + [forecast_run], nbest=5)
    served["endless"] = ServedModel("endless", EndlessGenerator(), "test", "none", 0)
    return served


@pytest.fixture(scope="session")
def app(models: dict[str, ServedModel]) -> FastAPI:
    return create_app(models, limits=ServeLimits(max_body_bytes=4096))


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """A uvicorn server running ``app`` in a thread on a free port of 127.0.0.1; yields its base URL."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start in 30 s"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        listener.close()


@pytest.fixture(scope="session")
def serve() -> Callable[[FastAPI], AbstractContextManager[str]]:
    """``serving``, for a test that runs an app of its own."""
    return serving


@pytest.fixture(scope="session")
def server_url(app: FastAPI) -> Iterator[str]:
    with serving(app) as url:
        yield url
