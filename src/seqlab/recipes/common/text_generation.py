"""Text around the generation engine for the recipes that continue a prompt: prompts to token ids, and tokens
to streamed text.

``seqlab.decoding.generate`` works on token ids; a person types and reads text. Four details live here:
- a continuation is decode(prompt + new) past decode(prompt), so a word tokenizer's joining space and a BPE
  piece that completes a character of the prompt come out right;
- a word tokenizer ends every line with ``<eos>``, but a prompt that does not end a line must not end with it;
- a GPT with learned positions cannot see past its context; generation goes on from the second half of it;
- a byte-level BPE piece may stop inside a UTF-8 character; such a trailing U+FFFD is held back until the next
  piece completes it (or the text ends), so what streams is exactly the final text.

``stream_continuation`` passes the pieces to a callback; ``continuation_pieces`` yields them, as a ``Generator``'s
``generate`` does (``seqlab.recipes.system``).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

from seqlab.data.tokenizers import Tokenizer, WordTokenizer
from seqlab.decoding.generate import generate
from seqlab.errors import ConfigError, DataError
from seqlab.models.interfaces import LanguageModelStepModel


def continuation(tokenizer: Tokenizer, prompt_ids: Sequence[int], new_ids: Sequence[int]) -> str:
    """The text that ``new_ids`` add after ``prompt_ids`` (module docstring)."""
    return tokenizer.decode([*prompt_ids, *new_ids])[len(tokenizer.decode(prompt_ids)) :]


def prompt_tokens(tokenizer: Tokenizer, prompt: str, *, context_length: int | None) -> list[int]:
    """The token ids of ``prompt`` (a word tokenizer's closing ``<eos>`` dropped unless the prompt ends a line).

    Raises:
        ConfigError: an empty prompt, or one of ``context_length`` tokens or more (no room to generate).
        DataError: a prompt with characters a char tokenizer never saw (``--prompt: text has characters ...``).
    """
    if not prompt:
        raise ConfigError("--prompt is empty; give at least one character")
    try:
        ids = tokenizer.encode(prompt)
    except DataError as e:
        raise DataError(f"--prompt: {e}") from None
    if isinstance(tokenizer, WordTokenizer) and not prompt.endswith("\n"):
        ids = ids[:-1]
    if not ids:
        raise ConfigError(f"--prompt {prompt!r} has no tokens")
    if context_length is not None and len(ids) >= context_length:
        raise ConfigError(
            f"--prompt is {len(ids)} tokens; the model's context_length is {context_length}, so a prompt may have "
            f"at most {context_length - 1}"
        )
    return ids


def stream_continuation(
    model: LanguageModelStepModel,
    tokenizer: Tokenizer,
    prompt_ids: Sequence[int],
    *,
    settings: dict[str, Any],
    stop: str | None,
    on_text: Callable[[str], None],
    generator: torch.Generator,
    cancelled: Callable[[], bool] = lambda: False,
) -> str:
    """Generate after one prompt with ``settings`` (``generate``'s keyword arguments), passing the text to
    ``on_text`` piece by piece as tokens arrive; return the whole continuation, which is exactly what streamed.

    With ``stop``, the continuation ends once it contains that string (kept, nothing after it). A model with a
    bounded context (a GPT with learned positions) that fills it goes on from the last context_length // 2
    tokens, read afresh, until max_new_tokens are generated (nanoGPT crops its input the same way). Beam search
    (num_beams > 1) cannot stream: its text is passed in one piece at the end, and it takes no stop string.

    Raises: ConfigError from ``generate`` for a bad setting, or for ``stop`` with beam search.
    """
    # A torch model takes its inputs where its parameters are; exported graphs (onnxruntime) take CPU tensors.
    device = next(model.parameters()).device if isinstance(model, torch.nn.Module) else torch.device("cpu")
    ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    if settings.get("num_beams", 1) > 1:
        if stop is not None:
            raise ConfigError("--stop cannot be combined with beam search (--num-beams > 1)")
        out = generate(model, ids, **settings, generator=generator)
        text = continuation(tokenizer, prompt_ids, out.tokens[0, len(prompt_ids) :].tolist())
        on_text(text)
        return text
    stream = _TextStream(tokenizer, prompt_ids, stop, on_text, cancelled)
    context, remaining = model.context_length, settings["max_new_tokens"]
    while True:
        ids = ids.new_tensor([[*prompt_ids, *stream.new_ids]])
        if stream.new_ids and context is not None:
            ids = ids[:, -(context // 2) :]  # the context is full: go on from its second half
        out = generate(
            model,
            ids,
            **{**settings, "max_new_tokens": remaining},
            stop=stream.stopped,
            streamer=stream.push,
            generator=generator,
        )
        remaining -= int(out.lengths[0])
        if remaining == 0 or stream.stopped([]):
            return stream.finish()


class _TextStream:
    """The streamer and stop test of one ``generate`` call over a single row (module docstring)."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_ids: Sequence[int],
        stop: str | None,
        on_text: Callable[[str], None],
        cancelled: Callable[[], bool],
    ) -> None:
        self.tokenizer, self.prompt_ids, self.stop, self.on_text = tokenizer, list(prompt_ids), stop, on_text
        self.cancelled = cancelled
        self.new_ids: list[int] = []
        self.text, self.emitted, self.done = "", 0, False

    def push(self, tokens: Tensor) -> None:
        """tokens (1,): the row's next token."""
        self.new_ids.append(int(tokens[0]))
        self.text = continuation(self.tokenizer, self.prompt_ids, self.new_ids)
        if self.stop is not None and self.stop in self.text:
            self.text, self.done = self.text[: self.text.index(self.stop) + len(self.stop)], True
        self._emit(self.text if self.done else self.text.rstrip("\ufffd"))

    def stopped(self, generated: list[int]) -> bool:
        """Whether the row is done: its text reached the stop string, or the caller cancelled."""
        return self.done or self.cancelled()

    def finish(self) -> str:
        """Pass on what was held back and return the whole continuation."""
        self._emit(self.text)
        return self.text

    def _emit(self, ready: str) -> None:
        if len(ready) > self.emitted:
            self.on_text(ready[self.emitted :])
            self.emitted = len(ready)


class _Failed(NamedTuple):
    """What the worker of ``continuation_pieces`` hands over when the generation raised."""

    error: BaseException


_END = object()  # what the worker of ``continuation_pieces`` hands over when the generation ended


def continuation_pieces(
    model: LanguageModelStepModel,
    tokenizer: Tokenizer,
    prompt_ids: Sequence[int],
    *,
    settings: dict[str, Any],
    stop: str | None,
    generator: torch.Generator,
) -> Iterator[str]:
    """The pieces that ``stream_continuation`` passes on, yielded as each token arrives (same arguments).

    The generation runs in a worker thread that hands each piece over a queue, since the engine calls back rather
    than yields; closing the iterator early cancels it after the current token and waits for the worker.

    Raises: what ``stream_continuation`` raises, from the worker.
    """
    pieces: queue.SimpleQueue[Any] = queue.SimpleQueue()
    cancelled = threading.Event()

    def work() -> None:
        try:
            stream_continuation(
                model, tokenizer, prompt_ids, settings=settings, stop=stop, on_text=pieces.put,
                generator=generator, cancelled=cancelled.is_set,
            )  # fmt: skip
            pieces.put(_END)
        except BaseException as error:  # re-raised in the caller's thread
            pieces.put(_Failed(error))

    worker = threading.Thread(target=work, name="continuation", daemon=True)
    worker.start()
    try:
        while (piece := pieces.get()) is not _END:
            if isinstance(piece, _Failed):
                raise piece.error
            yield piece
    finally:
        cancelled.set()
        worker.join()
