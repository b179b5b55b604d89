"""The FastAPI app of ``seqlab serve``: the API over the ``System`` protocol and the web page at ``/``.

Endpoints: ``GET /v1/models``; ``POST /v1/predict`` (texts), ``/v1/forecast`` (values), ``/v1/attention`` (one
text's maps), ``/v1/generate`` (server-sent events); ``GET /healthz``; ``/docs`` (FastAPI's OpenAPI page). A bad
request gets a 4xx status and one line ``{"error": "..."}``: 400 malformed JSON or a request the model cannot
answer (an unseen character, a value out of range), 404 an unknown model or path, 413 a body over the limit,
422 a field of the wrong type or unknown; 503 when ``max_waiting`` requests already wait for a place. An
unexpected failure is a 500 with one line, never a traceback.

Concurrency: at most ``limits.max_concurrency`` requests run at once (a stream holds its place until its
generation has stopped; a predict batch holds one place for all its requests); the others wait in arrival order.

Batching: predict requests for one model with the same ``num_beams`` and ``nbest`` that arrive within
``limits.batch_wait_ms`` of each other, or while the model's previous batch runs or a place is awaited, are
answered by one ``System.predict`` call of at most ``limits.max_batch_size`` inputs (``seqlab.serving.batching``);
a bad input still fails only its own request, and a client that disconnects first is dropped (499). Generations
are not batched: each has its own settings, seed and stream, and a decoding step shared by requests of different
lengths and stops would need a scheduler of its own.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Awaitable, Callable, Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np
import torch
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from seqlab.errors import ConfigError, SeqlabError
from seqlab.recipes import system as system_protocol
from seqlab.recipes.system import NBestSource, System
from seqlab.serving.batching import PredictBatcher
from seqlab.serving.catalog import ServedModel
from seqlab.serving.gate import Gate, RequestError
from seqlab.serving.schemas import AttentionBody, ForecastBody, GenerateBody, PredictBody, ServeLimits
from seqlab.serving.streaming import chunk_events, error_line

PAGE = files("seqlab.serving") / "static" / "index.html"


def create_app(models: Mapping[str, ServedModel], *, limits: ServeLimits | None = None) -> FastAPI:
    """The app serving ``models`` (by name; ``catalog.load_models``) under ``limits``.

    Raises: ConfigError if ``models`` is empty.
    """
    if not models:
        raise ConfigError("no model to serve; give at least one run directory")
    limits = limits or ServeLimits()
    gate = Gate(limits.max_concurrency, limits.max_waiting)
    batcher = PredictBatcher(gate, max_batch_size=limits.max_batch_size, batch_wait_ms=limits.batch_wait_ms)
    app = FastAPI(title="seqlab", summary="Trained seqlab runs: predict, generate, attention maps.")
    app.state.gate = gate
    app.state.batcher = batcher
    _add_error_handlers(app)
    app.add_middleware(_BodyLimit, max_bytes=limits.max_body_bytes)

    def served(name: str, capability: str) -> ServedModel:
        if name not in models:
            raise RequestError(404, f"unknown model {name!r}; served: {', '.join(sorted(models))}")
        model = models[name]
        if capability not in model.capabilities:
            offered = ", ".join(model.capabilities) or "nothing"
            raise RequestError(400, f"model {name!r} ({model.recipe}) does not {capability}; it offers {offered}")
        return model

    def searched(model: ServedModel, body: PredictBody) -> System:
        """The model's system with the request's ``num_beams`` and ``nbest`` (neither given: the served one)."""
        given = {name: getattr(body, name) for name in ("num_beams", "nbest") if getattr(body, name) is not None}
        if not given:
            return model.system
        if not isinstance(model.system, NBestSource):
            raise RequestError(400, f"model {model.name!r} ({model.recipe}) takes no {' or '.join(given)}")
        for name, value in given.items():
            if value > limits.max_beams:
                raise ConfigError(f"{name} ({value}) is above this server's limit of {limits.max_beams}")
        return model.system.with_search(**given)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        """``ok``, with the requests (or predict batches) running (``active``) and waiting (``waiting``), and the
        ``System.predict`` calls made so far (``predict_calls``) for the predict requests they answered
        (``predict_requests``)."""
        return {
            "status": "ok",
            "active": gate.active,
            "waiting": gate.waiting,
            "predict_calls": batcher.calls,
            "predict_requests": batcher.requests,
        }

    @app.get("/v1/models")
    def list_models() -> dict[str, Any]:
        """Each model: name, recipe, model_type, num_parameters, metrics (its results.json), capabilities."""
        return {"models": [model.describe() for model in models.values()]}

    @app.post("/v1/predict")
    async def predict(body: PredictBody, request: Request) -> dict[str, Any]:
        """One prediction per input: its type, its fields (n-best with scores, probabilities, tags, ...) and the
        lines ``seqlab predict`` prints. Requests that arrive together share one batched call."""
        model = served(body.model, "predict")
        limits.check_inputs(body.inputs)
        system_protocol.check_inputs(body.inputs, source="inputs")
        system = searched(model, body)
        key = (model.name, body.num_beams, body.nbest)
        predictions = await batcher.predict(key, system, body.inputs, disconnected=lambda: _disconnected(request))
        return {"model": model.name, "predictions": [_prediction_json(p) for p in predictions]}

    @app.post("/v1/forecast")
    async def forecast(body: ForecastBody) -> dict[str, Any]:
        """The forecast of the steps after the end of ``values``."""
        model = served(body.model, "forecast")
        if len(body.values) > limits.max_steps:
            raise ConfigError(f"values: {len(body.values)} steps, more than the limit of {limits.max_steps}")
        prediction = await gate.run(model.system.forecast_values, body.values, source="values")
        return {"model": model.name, "prediction": _prediction_json(prediction)}

    @app.post("/v1/attention")
    async def attention(body: AttentionBody) -> dict[str, Any]:
        """Every attention map of the model on ``text``: module, kind, head, weights (rows x cols) and the
        symbols of both axes."""
        model = served(body.model, "attention")
        limits.check_inputs([body.text])
        system_protocol.check_inputs([body.text], source="text")
        maps = await gate.run(model.system.attention_maps, body.text)
        return {
            "model": model.name,
            "caption": maps.caption,
            "output": maps.output,
            "maps": [
                {
                    "module": m.module,
                    "kind": m.kind,
                    "head": m.head,
                    "rows": maps.labels[(m.module.split(".")[0], m.kind)][0],
                    "cols": maps.labels[(m.module.split(".")[0], m.kind)][1],
                    "weights": _json_value(m.weights),
                }
                for m in maps.maps
            ],
        }

    @app.post("/v1/generate")
    async def generate(body: GenerateBody) -> StreamingResponse:
        """Server-sent events: ``chunk`` (``{"index", "text", "finished"}``) as tokens are produced, then
        ``done``; ``error`` if the generation fails part-way. Settings and prompt are checked before the stream
        starts (a 4xx answer). Disconnecting stops the generation."""
        model = served(body.model, "generate")
        request = body.request(limits)
        await gate.enter()
        try:
            chunks = model.system.generate(request)  # checks settings and prompt before it yields
        except BaseException:
            gate.leave()
            raise
        return StreamingResponse(
            chunk_events(chunks, on_end=gate.leave),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return app


async def _disconnected(request: Request) -> None:
    """Return once the client of ``request`` (whose body has been read) has disconnected."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class _BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` (declared or streamed) is answered 413."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = f"request body over the limit of {self.max_bytes:,} bytes"
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _error_response(413, message)(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message_in = await receive()
            received += len(message_in.get("body", b""))
            if received > self.max_bytes:
                raise HTTPException(413, message)  # FastAPI passes an HTTPException from reading the body on
            return message_in

        await self.app(scope, counted, send)


def _error_response(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": " ".join(message.split())}, status_code=status)


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as one line of JSON ``{"error": ...}`` with its status (see the module's docstring)."""

    def handler(status: int) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
        async def respond(request: Request, error: Exception) -> JSONResponse:
            return _error_response(status, error_line(error))

        return respond

    async def request_error(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestError)
        return _error_response(error.status, str(error))

    async def http_error(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, HTTPException)
        return _error_response(error.status_code, str(error.detail))

    async def validation_error(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        first = error.errors()[0]
        if first["type"] == "json_invalid":
            return _error_response(400, f"malformed JSON: {first.get('ctx', {}).get('error', first['msg'])}")
        where = ".".join(str(part) for part in first["loc"] if part != "body") or "body"
        return _error_response(422, f"{where}: {first['msg']}")

    app.add_exception_handler(RequestError, request_error)
    app.add_exception_handler(SeqlabError, handler(400))
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, handler(500))


def _prediction_json(prediction: Any) -> dict[str, Any]:
    """A recipe's prediction as JSON: its class name, its fields (a dataclass's or a NamedTuple's) and its lines."""
    if dataclasses.is_dataclass(prediction):
        fields = {f.name: getattr(prediction, f.name) for f in dataclasses.fields(prediction)}
    else:
        fields = prediction._asdict()
    return {"type": type(prediction).__name__, "fields": _json_value(fields), "lines": prediction.lines()}


def _json_value(value: Any) -> Any:
    """``value`` with arrays, tensors, tuples and paths as JSON values; a non-finite number becomes null."""
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return _json_value(value.tolist())
    if isinstance(value, np.generic):
        return _json_value(value.item())
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Path):
        return str(value)
    return value
