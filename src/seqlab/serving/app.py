"""The FastAPI app of ``seqlab serve``: the API over the ``System`` protocol and the web page at ``/``.

Endpoints: ``GET /v1/models``; ``POST /v1/predict`` (texts), ``/v1/forecast`` (values), ``/v1/attention`` (one
text's maps), ``/v1/generate`` (server-sent events); ``GET /healthz``; ``/docs`` (FastAPI's OpenAPI page). A bad
request gets a 4xx status and one line ``{"error": "..."}``: 400 malformed JSON or a request the model cannot
answer (an unseen character, a value out of range), 404 an unknown model or path, 413 a body over the limit,
422 a field of the wrong type or unknown; 503 when ``max_waiting`` requests already wait for a place. An
unexpected failure is a 500 with one line, never a traceback.

Concurrency: at most ``limits.max_concurrency`` requests run at once (a stream holds its place until its
generation has stopped); the others wait in arrival order. Requests are not batched together: one bad input
would fail the others' batch, and a generation's settings and seed are its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Awaitable, Callable, Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np
import torch
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from seqlab.errors import ConfigError, SeqlabError
from seqlab.recipes import system as system_protocol
from seqlab.serving.catalog import ServedModel
from seqlab.serving.schemas import AttentionBody, ForecastBody, GenerateBody, PredictBody, ServeLimits
from seqlab.serving.streaming import chunk_events, error_line

PAGE = files("seqlab.serving") / "static" / "index.html"


class RequestError(Exception):
    """A request the server refuses, with its HTTP status and one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def create_app(models: Mapping[str, ServedModel], *, limits: ServeLimits | None = None) -> FastAPI:
    """The app serving ``models`` (by name; ``catalog.load_models``) under ``limits``.

    Raises: ConfigError if ``models`` is empty.
    """
    if not models:
        raise ConfigError("no model to serve; give at least one run directory")
    limits = limits or ServeLimits()
    gate = _Gate(limits.max_concurrency, limits.max_waiting)
    app = FastAPI(title="seqlab", summary="Trained seqlab runs: predict, generate, attention maps.")
    app.state.gate = gate
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

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        """``ok``, with the requests running (``active``) and waiting (``waiting``)."""
        return {"status": "ok", "active": gate.active, "waiting": gate.waiting}

    @app.get("/v1/models")
    def list_models() -> dict[str, Any]:
        """Each model: name, recipe, model_type, num_parameters, metrics (its results.json), capabilities."""
        return {"models": [model.describe() for model in models.values()]}

    @app.post("/v1/predict")
    async def predict(body: PredictBody) -> dict[str, Any]:
        """One prediction per input: its type, its fields (n-best with scores, probabilities, tags, ...) and the
        lines ``seqlab predict`` prints."""
        model = served(body.model, "predict")
        limits.check_inputs(body.inputs)
        system_protocol.check_inputs(body.inputs, source="inputs")
        predictions = await gate.run(model.system.predict, body.inputs)
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


class _Gate:
    """At most ``capacity`` requests at work, at most ``max_waiting`` waiting (then 503), served in order."""

    def __init__(self, capacity: int, max_waiting: int) -> None:
        self.semaphore = asyncio.Semaphore(capacity)
        self.capacity = capacity
        self.max_waiting = max_waiting
        self.active = 0
        self.waiting = 0

    async def enter(self) -> None:
        """Wait for a place. Raises: RequestError 503 if ``max_waiting`` requests wait already."""
        if self.semaphore.locked() and self.waiting >= self.max_waiting:
            raise RequestError(503, f"server busy: {self.active} requests running, {self.waiting} waiting")
        self.waiting += 1
        try:
            await self.semaphore.acquire()
        finally:
            self.waiting -= 1
        self.active += 1

    def leave(self) -> None:
        """Give the place back (on the event loop's thread)."""
        self.active -= 1
        self.semaphore.release()

    async def run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` in a worker thread, once a place is free."""
        await self.enter()
        try:
            return await run_in_threadpool(function, *args, **kwargs)
        finally:
            self.leave()


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
