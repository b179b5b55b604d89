"""``seqlab.serving.app`` through FastAPI's TestClient: every endpoint answers what the System answers in process,
and every bad request gets its status and its one-line ``{"error": ...}``."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from safetensors.torch import load_file

from seqlab.errors import ConfigError
from seqlab.models import CompiledGPT
from seqlab.recipes.lm import system as lm_system
from seqlab.recipes.system import GenerationRequest
from seqlab.serving import ServedModel, create_app, load_models
from seqlab.serving.gate import Gate, RequestError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
G2P, GPT, CLASSIFY, FORECAST = "g2p_v0_1", "lm_gpt_9a192c4", "classify_9a192c4", "forecast_tiny"


@pytest.fixture(scope="module")
def client(app: FastAPI) -> TestClient:
    return TestClient(app)


def events(body: str) -> list[tuple[str, dict]]:
    """The (name, data) of each server-sent event of a stream's whole body."""
    parsed = []
    for block in body.strip().split("\n\n"):
        name_line, data_line = block.split("\n")
        parsed.append((name_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))))
    return parsed


def test_healthz(client: TestClient) -> None:
    health = client.get("/healthz").json()
    assert list(health) == ["status", "active", "waiting", "predict_calls", "predict_requests"]
    assert (health["status"], health["active"], health["waiting"]) == ("ok", 0, 0)


def test_models_describe_each_run(client: TestClient, models: dict[str, ServedModel]) -> None:
    listed = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
    assert listed[G2P]["recipe"] == "g2p" and listed[G2P]["model_type"] == "RNNSeq2Seq"
    assert listed[GPT]["model_type"] == "gpt"
    assert listed[G2P]["capabilities"] == ["predict", "attention"]
    assert listed[GPT]["capabilities"] == ["predict", "generate", "attention"]
    assert listed[CLASSIFY]["capabilities"] == ["predict"]
    assert listed[FORECAST]["capabilities"] == ["forecast"]  # its predict reads server files: never offered
    # Parameters: every number of the weights file, counted independently by loading it.
    weights = load_file(FIXTURES / GPT / "model.safetensors")
    assert listed[GPT]["num_parameters"] == sum(t.numel() for t in weights.values())
    # Metrics: the finished run's results.json (the committed fixtures have none).
    assert listed[FORECAST]["metrics"]["steps"] == 3
    assert listed[G2P]["metrics"] == {}


def test_predict_g2p_nbest_equals_the_system(client: TestClient, models: dict[str, ServedModel]) -> None:
    got = client.post("/v1/predict", json={"model": G2P, "inputs": ["cat", "dog"]}).json()["predictions"]
    expected = models[G2P].system.predict(["cat", "dog"])
    assert [p["lines"] for p in got] == [p.lines() for p in expected]
    assert got[0]["type"] == "G2PPrediction" and len(got[0]["fields"]["nbest"]) == 5
    for served, direct in zip(got, expected, strict=True):
        assert [(tuple(s), score) for s, score in served["fields"]["nbest"]] == list(direct.nbest)


def test_predict_classify_probabilities(client: TestClient, models: dict[str, ServedModel]) -> None:
    got = client.post("/v1/predict", json={"model": CLASSIFY, "inputs": ["Tanaka"]}).json()["predictions"][0]
    expected = models[CLASSIFY].system.predict(["Tanaka"])[0]
    assert got["fields"] == {"text": "Tanaka", "label": expected.label, "probabilities": expected.probabilities}
    assert math.isclose(sum(got["fields"]["probabilities"].values()), 1.0, rel_tol=1e-5)


def test_forecast_equals_predict_on_a_file(client: TestClient, models: dict[str, ServedModel], tmp_path) -> None:
    """The forecast of values sent is the System's forecast of a file holding the same values."""
    values = [[float(v)] for v in (3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987)]
    got = client.post("/v1/forecast", json={"model": FORECAST, "values": values}).json()["prediction"]
    series = tmp_path / "series.txt"
    series.write_text("".join(f"{row[0]}\n" for row in values))
    expected = models[FORECAST].system.predict([str(series)])[0]
    assert got["fields"]["values"] == expected.values.tolist()
    assert len(got["lines"]) == 3 and got["lines"][0].startswith("values +1  ")


def test_attention_equals_the_system(client: TestClient, models: dict[str, ServedModel]) -> None:
    got = client.post("/v1/attention", json={"model": G2P, "text": "cat"}).json()
    expected = models[G2P].system.attention_maps("cat")
    assert got["output"] == expected.output and got["caption"] == expected.caption
    assert [m["weights"] for m in got["maps"]] == [m.weights.tolist() for m in expected.maps]
    cross = got["maps"][0]
    assert cross["kind"] == "cross" and cross["cols"] == ["c", "a", "t"]
    assert len(cross["rows"]) == len(cross["weights"])


def test_generate_streams_what_the_system_generates(client: TestClient, models: dict[str, ServedModel]) -> None:
    settings = {"prompt": "The ", "max_new_tokens": 40, "do_sample": True, "temperature": 0.8, "top_k": 5, "seed": 3,
                "num_return_sequences": 2}  # fmt: skip
    with client.stream("POST", "/v1/generate", json={"model": GPT, **settings}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        streamed = events(response.read().decode())
    expected = list(models[GPT].system.generate(GenerationRequest(**settings)))
    assert streamed[-1] == ("done", {})
    assert [tuple(data.values()) for _, data in streamed[:-1]] == [tuple(c) for c in expected]


def test_a_served_generation_runs_in_eval_mode_and_leaves_the_model_there(models: dict[str, ServedModel]) -> None:
    """The run's weights in a GPT with dropout 0.5 left in training mode (as a trainer leaves a model) stream the
    tokens the loaded run generates, and the model is in eval mode afterwards."""
    loaded = models[GPT].system
    model = type(loaded.model)(dataclasses.replace(loaded.model.config, dropout=0.5))
    model.load_state_dict(loaded.model.state_dict())
    model.train()
    served = dataclasses.replace(models[GPT], system=dataclasses.replace(loaded, model=model))
    settings = {"prompt": "The ", "max_new_tokens": 20, "do_sample": True, "top_k": 5, "seed": 3}
    with TestClient(create_app({GPT: served})).stream("POST", "/v1/generate", json={"model": GPT, **settings}) as r:
        streamed = events(r.read().decode())
    expected = list(loaded.generate(GenerationRequest(**settings)))
    assert [tuple(data.values()) for _, data in streamed[:-1]] == [tuple(c) for c in expected]
    assert not model.training


def test_docs_and_page(client: TestClient) -> None:
    assert "/v1/generate" in client.get("/openapi.json").json()["paths"]
    assert client.get("/docs").status_code == 200
    page = client.get("/").text
    assert "<canvas" in page and "/v1/generate" in page
    assert "http://" not in page and "https://" not in page  # nothing fetched from elsewhere: works offline


BAD_REQUESTS = [
    ("malformed JSON", "/v1/predict", b'{"model": "g2p_v0_1", "inputs": ["cat"', 400, "malformed JSON: "),
    ("unknown model", "/v1/predict", {"model": "nope", "inputs": ["cat"]}, 404,
     "unknown model 'nope'; served: classify_9a192c4, endless, forecast_tiny, g2p_v0_1, lm_gpt_9a192c4"),
    ("unseen characters", "/v1/predict", {"model": G2P, "inputs": ["c@t"]}, 400, None),
    ("no inputs", "/v1/predict", {"model": G2P, "inputs": []}, 400, "inputs is empty; give at least one text"),
    ("empty input", "/v1/predict", {"model": G2P, "inputs": ["cat", " "]}, 400, "inputs[1] is empty"),
    ("a look-alike letter", "/v1/predict", {"model": G2P, "inputs": ["cat", "\u212aelt"]}, 400,
     "inputs: input 2 '\u212aelt': U+212A KELVIN SIGN is a compatibility character (NFKC: 'K'); type 'K'"),
    ("oversized input", "/v1/predict", {"model": G2P, "inputs": ["a" * 201]}, 400,
     "inputs[0]: 201 characters, more than the limit of 200"),
    ("too many inputs", "/v1/predict", {"model": G2P, "inputs": ["cat"] * 65}, 400,
     "inputs: 65 texts, more than the limit of 64"),
    ("body over the limit", "/v1/predict", {"model": G2P, "inputs": ["cat"] * 1000}, 413,
     "request body over the limit of 4,096 bytes"),
    ("wrong type", "/v1/generate", {"model": GPT, "prompt": "The", "max_new_tokens": "5"}, 422,
     "max_new_tokens: Input should be a valid integer"),
    ("unknown field", "/v1/generate", {"model": GPT, "prompt": "The", "beam_size": 2}, 422,
     "beam_size: Extra inputs are not permitted"),
    ("missing field", "/v1/predict", {"model": G2P}, 422, "inputs: Field required"),
    ("empty prompt", "/v1/generate", {"model": GPT, "prompt": ""}, 400, "prompt is empty; give the text to continue"),
    ("prompt too long", "/v1/generate", {"model": GPT, "prompt": "a" * 2001}, 400,
     "prompt: 2001 characters, more than the limit of 2000"),
    ("prompt past the context", "/v1/generate", {"model": GPT, "prompt": "The land " * 4}, 400, None),
    ("unseen prompt character", "/v1/generate", {"model": GPT, "prompt": "The ☃"}, 400, None),
    ("max_new_tokens over the limit", "/v1/generate", {"model": GPT, "prompt": "The", "max_new_tokens": 5000}, 400,
     "max_new_tokens (5000) is above this server's limit of 1024"),
    ("num_beams over the limit", "/v1/generate", {"model": GPT, "prompt": "The", "num_beams": 17}, 400,
     "num_beams (17) is above this server's limit of 16"),
    ("max_new_tokens below 1", "/v1/generate", {"model": GPT, "prompt": "The", "max_new_tokens": 0}, 400,
     "max_new_tokens (0) must be >= 1"),
    ("temperature out of range", "/v1/generate", {"model": GPT, "prompt": "The", "temperature": 0}, 400,
     "temperature (0.0) must be a finite number > 0"),
    ("top_p out of range", "/v1/generate", {"model": GPT, "prompt": "The", "top_p": 1.5}, 400,
     "top_p (1.5) must be in (0, 1]"),
    ("seed out of range", "/v1/generate", {"model": GPT, "prompt": "The", "seed": -1}, 400,
     "seed (-1) must be in [0, 2**63)"),
    ("beams with sampling", "/v1/generate", {"model": GPT, "prompt": "The", "num_beams": 2, "do_sample": True}, 400,
     None),
    ("a model that does not generate", "/v1/generate", {"model": G2P, "prompt": "cat"}, 400,
     "model 'g2p_v0_1' (g2p) does not generate; it offers predict, attention"),
    ("a forecast from files", "/v1/predict", {"model": FORECAST, "inputs": ["/etc/passwd"]}, 400,
     "model 'forecast_tiny' (forecast) does not predict; it offers forecast"),
    ("ragged series", "/v1/forecast", {"model": FORECAST, "values": [[1.0], [2.0, 3.0]]}, 400,
     "values: rows of [1, 2] values, but the model forecasts 1 channels"),
    ("short series", "/v1/forecast", {"model": FORECAST, "values": [[1.0]] * 5}, 400,
     "values: 5 steps, but the model reads L = 12"),
    ("attention of an unseen character", "/v1/attention", {"model": G2P, "text": "c@t"}, 400, None),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "status", "message"), [case[1:] for case in BAD_REQUESTS],
                         ids=[case[0] for case in BAD_REQUESTS])  # fmt: skip
def test_bad_request(client: TestClient, path: str, body: object, status: int, message: str | None) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = client.post(path, content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == status
    error = response.json()
    assert list(error) == ["error"] and "\n" not in error["error"] and "Traceback" not in error["error"]
    if message is None:
        assert error["error"]  # the System's own one-line message (their wording is the recipes' tests')
    elif message.endswith(": "):
        assert error["error"].startswith(message)
    else:
        assert error["error"] == message


def test_unknown_path_is_a_json_404(client: TestClient) -> None:
    response = client.get("/v2/nothing")
    assert (response.status_code, response.json()) == (404, {"error": "Not Found"})


def test_gate_bounds_running_and_waiting_requests() -> None:
    async def scenario() -> None:
        gate = Gate(capacity=1, max_waiting=1)
        await gate.enter()
        second = asyncio.create_task(gate.enter())
        await asyncio.sleep(0)
        assert (gate.active, gate.waiting) == (1, 1)
        with pytest.raises(RequestError, match=r"server busy: 1 requests running, 1 waiting"):
            await gate.enter()
        gate.leave()
        await second
        assert (gate.active, gate.waiting) == (1, 0)

    asyncio.run(scenario())


def test_a_streamed_body_over_the_limit_is_refused(client: TestClient) -> None:
    chunks = iter([b'{"model": "g2p_v0_1", "inputs": ["' + b"a" * 3000, b"a" * 3000 + b'"]}'])  # no Content-Length
    response = client.post("/v1/predict", content=chunks, headers={"Content-Type": "application/json"})
    assert (response.status_code, response.json()) == (413, {"error": "request body over the limit of 4,096 bytes"})


def test_the_generate_body_has_exactly_the_generation_requests_fields_and_defaults():
    """The request schema is a second list of GenerationRequest's fields (pydantic needs one to validate and document
    the body): a field added to or renamed in the protocol must appear here too."""
    from dataclasses import fields

    from seqlab.serving.schemas import GenerateBody

    protocol = {f.name: f.default for f in fields(GenerationRequest) if f.name != "prompt"}
    body = {name: field.default for name, field in GenerateBody.model_fields.items() if name not in ("model", "prompt")}
    assert body == protocol
    assert "prompt" in GenerateBody.model_fields and GenerateBody.model_fields["prompt"].is_required()


def test_compile_is_refused_when_no_run_takes_it_and_given_only_to_the_runs_that_do(monkeypatch) -> None:
    with pytest.raises(ConfigError, match=r"^--compile: none of the runs generates with a compiled step"):
        load_models([FIXTURES / G2P], compile=True)
    compiled = []  # aot_eager traces what inductor would compile, in seconds

    def tracing(model: object) -> CompiledGPT:
        compiled.append(CompiledGPT(model, compile_backend="aot_eager"))
        return compiled[-1]

    monkeypatch.setattr(lm_system, "CompiledGPT", tracing)
    served = load_models([FIXTURES / G2P, FIXTURES / GPT], compile=True)
    assert len(compiled) == 1 and served[GPT].system.step_model is compiled[0]
