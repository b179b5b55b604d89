"""The request bodies of the API (pydantic: a field of the wrong type, or one it does not know, is refused) and
the limits a server puts on them; the decoding names are ``GenerationRequest``'s, whose own checks still apply."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from seqlab.errors import ConfigError
from seqlab.recipes.system import GenerationRequest


@dataclass(frozen=True)
class ServeLimits:
    """Bounds on what one request may ask, checked before any work (each a count, or bytes for ``max_body_bytes``).

    Attributes:
        max_body_bytes: size of a request body.
        max_inputs: inputs of one predict request.  max_input_chars: characters of one input.
        max_prompt_chars: characters of a prompt.  max_new_tokens: of a generation (given or not, the run's
            own default may be lower).  max_beams: ``num_beams``.  max_return_sequences: ``num_return_sequences``.
        max_steps: steps of a series to forecast from.
        max_concurrency: requests worked on at once (a stream counts until it ends, a predict batch once).
        max_waiting: requests waiting for a place; past it a request gets 503 at once.
        max_batch_size: most inputs of one batched ``System.predict`` call (1: every request runs alone).
        batch_wait_ms: how long a predict batch waits for more requests after its first (ms, 0: no wait).
    Raises: ConfigError for a limit below 1, or a negative ``batch_wait_ms`` (named).
    """

    max_body_bytes: int = 64 * 1024
    max_inputs: int = 64
    max_input_chars: int = 200
    max_prompt_chars: int = 2_000
    max_new_tokens: int = 1_024
    max_beams: int = 16
    max_return_sequences: int = 8
    max_steps: int = 10_000
    max_concurrency: int = 4
    max_waiting: int = 64
    max_batch_size: int = 32
    batch_wait_ms: int = 2

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            minimum = 0 if name == "batch_wait_ms" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigError(f"{name} ({value!r}) must be an integer >= {minimum}")

    def check_inputs(self, inputs: list[str]) -> None:
        """Raises: ConfigError for no inputs, too many, an empty or blank one, or one too long (named by index)."""
        if not inputs:
            raise ConfigError("inputs is empty; give at least one text")
        if len(inputs) > self.max_inputs:
            raise ConfigError(f"inputs: {len(inputs)} texts, more than the limit of {self.max_inputs}")
        for index, text in enumerate(inputs):
            if not text.strip():
                raise ConfigError(f"inputs[{index}] is empty")
            if len(text) > self.max_input_chars:
                raise ConfigError(
                    f"inputs[{index}]: {len(text)} characters, more than the limit of {self.max_input_chars}"
                )

    def check_generation(self, request: GenerationRequest) -> None:
        """Raises: ConfigError for an empty or too long prompt, or a count above its limit (named)."""
        if not request.prompt:
            raise ConfigError("prompt is empty; give the text to continue")
        if len(request.prompt) > self.max_prompt_chars:
            raise ConfigError(
                f"prompt: {len(request.prompt)} characters, more than the limit of {self.max_prompt_chars}"
            )
        for name, limit in (
            ("max_new_tokens", self.max_new_tokens),
            ("num_beams", self.max_beams),
            ("num_return_sequences", self.max_return_sequences),
        ):
            value = getattr(request, name)
            if value is not None and value > limit:
                raise ConfigError(f"{name} ({value}) is above this server's limit of {limit}")


class _Body(BaseModel):
    """A request body: unknown fields are refused, and no value is coerced from another type ("5" is no int)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class PredictBody(_Body):
    """``POST /v1/predict``: texts for ``System.predict`` (words, names, sentences)."""

    model: str = Field(description="the model's name, as GET /v1/models lists it")
    inputs: list[str] = Field(description="one prediction per text, in order")
    num_beams: int | None = Field(None, description="beam width of models that search (left out: the server's)")
    nbest: int | None = Field(None, description="hypotheses per input of those models (left out: the server's)")


class AttentionBody(_Body):
    """``POST /v1/attention``: one text whose attention maps to draw."""

    model: str
    text: str


class ForecastBody(_Body):
    """``POST /v1/forecast``: a series (T steps of C numbers, oldest first) to forecast from its end."""

    model: str
    values: list[list[float]] = Field(description="T rows of C numbers")


class GenerateBody(_Body):
    """``POST /v1/generate``: the fields of ``GenerationRequest`` (``seqlab generate``'s flags without dashes); a
    field left out takes the run's own decode setting."""

    model: str
    prompt: str
    max_new_tokens: int | None = None
    do_sample: bool | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    num_beams: int | None = None
    seed: int | None = None
    num_return_sequences: int = 1
    stop: str | None = None

    def request(self, limits: ServeLimits) -> GenerationRequest:
        """The ``GenerationRequest`` of this body.

        Raises: ConfigError for a value ``GenerationRequest`` refuses or one past ``limits``.
        """
        request = GenerationRequest(**self.model_dump(exclude={"model"}))
        limits.check_generation(request)
        return request
