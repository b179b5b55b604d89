"""``seqlab serve``: it binds 127.0.0.1 unless told otherwise and serves every run given; bad arguments are one
line, exit 2, before anything is loaded or bound."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import uvicorn
from cli_helpers import assert_error, run_cli
from fastapi.testclient import TestClient

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
G2P, GPT = FIXTURES / "g2p_v0_1", FIXTURES / "lm_gpt_9a192c4"
CPUS, THE_CPUS = os.cpu_count(), "this machine's CPUs"


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> dict:
    """What ``seqlab serve`` hands uvicorn, instead of serving."""
    calls: dict = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: calls.update(app=app, **kwargs))
    return calls


def test_serves_every_run_on_localhost_by_default(started: dict) -> None:
    result = run_cli("serve", G2P, GPT)
    assert result.code == 0 and result.err == "seqlab: serving 2 run(s) on http://127.0.0.1:8000/\n"
    assert (started["host"], started["port"]) == ("127.0.0.1", 8000)
    names = [m["name"] for m in TestClient(started["app"]).get("/v1/models").json()["models"]]
    assert names == ["g2p_v0_1", "lm_gpt_9a192c4"]


def test_host_and_port_are_passed_on(started: dict) -> None:
    assert run_cli("serve", GPT, "--host", "0.0.0.0", "--port", "8123").code == 0
    assert (started["host"], started["port"]) == ("0.0.0.0", 8123)


def test_batching_settings_are_passed_on(started: dict) -> None:
    assert run_cli("serve", G2P, "--max-batch-size", "1", "--batch-wait-ms", "0").code == 0
    batcher = started["app"].state.batcher
    assert (batcher.max_batch_size, batcher.batch_wait_ms) == (1, 0)
    assert run_cli("serve", G2P).code == 0
    assert (started["app"].state.batcher.max_batch_size, started["app"].state.batcher.batch_wait_ms) == (32, 2)


def test_threads_are_set_for_the_models(started: dict) -> None:
    threads = torch.get_num_threads()
    try:
        assert run_cli("serve", GPT, "--threads", "1").code == 0
        assert torch.get_num_threads() == 1
        torch.set_num_threads(threads + 1)
        assert run_cli("serve", GPT).code == 0
        assert torch.get_num_threads() == threads + 1  # not given: left as it is
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", FIXTURES / "missing"], f"{FIXTURES / 'missing'}: no such checkpoint directory"),
        (["serve", GPT, "--port", "70000"], "--port (70000) must be in [1, 65535]"),
        (["serve", GPT, "--max-concurrency", "0"], "--max-concurrency: max_concurrency (0) must be an integer >= 1"),
        (["serve", GPT, "--max-batch-size", "0"], "--max-batch-size: max_batch_size (0) must be an integer >= 1"),
        (["serve", GPT, "--batch-wait-ms", "-1"], "--batch-wait-ms: batch_wait_ms (-1) must be an integer >= 0"),
        (["serve", GPT, GPT], f"{GPT}: two runs are named {GPT.name!r}; serve runs from directories of distinct names"),
        (["serve", G2P, "--nbest", "0"], "--nbest (0) must be in [1, 16]"),
        (["serve", G2P, "--threads", "0"], f"--threads (0) must be an integer in [1, {CPUS}], {THE_CPUS}"),
        (["serve", G2P, "--threads", "99999"], f"--threads (99999) must be an integer in [1, {CPUS}], {THE_CPUS}"),
    ],
)  # fmt: skip
def test_bad_arguments(started: dict, argv: list, message: str) -> None:
    assert_error(run_cli(*argv), message)
    assert started == {}  # nothing served
