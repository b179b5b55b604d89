"""The generation engine for language models: prompts in, continuations out, by greedy, sampling or beam search.

One function serves every model that implements ``LanguageModelStepModel`` (the RNN and GPT language models):
``model.prefill`` reads the left-padded prompts once, then ``model.step`` feeds one token per row at a time. The
logits processors (``seqlab.decoding.processors``) shape each step's scores before the token is chosen.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from seqlab.decoding.beam_search import beam_search
from seqlab.decoding.interface import reorders_in_place
from seqlab.decoding.left_to_right import GenerateOutput, decode_left_to_right
from seqlab.decoding.processors import LogitsProcessor, logits_processor
from seqlab.errors import ConfigError
from seqlab.models import CompiledGPT
from seqlab.models.interfaces import LanguageModelStepModel, StepOutput, check_token_ids, select_rows
from seqlab.validation import check_bool, check_int, check_real, check_token_id

__all__ = ["GenerateOutput", "generate"]


def _in_inference_mode(search: Callable[..., GenerateOutput]) -> Callable[..., GenerateOutput]:
    """Run ``search`` under ``torch.inference_mode`` (no autograd bookkeeping at all; a char GPT at batch 1 ran
    about 5-15% faster per token than under ``no_grad`` here) and hand back ordinary tensors, since inference
    tensors cannot be changed in place outside inference mode."""

    @functools.wraps(search)
    def run(*args: Any, **kwargs: Any) -> GenerateOutput:
        with torch.inference_mode():
            output = search(*args, **kwargs)
        return GenerateOutput(*(t.clone() for t in output))

    return run


@_in_inference_mode
def generate(
    model: LanguageModelStepModel,
    input_ids: Tensor,
    *,
    keep_mask: Tensor | None = None,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    repetition_penalty: float = 1.0,
    no_repeat_ngram_size: int = 0,
    num_beams: int = 1,
    length_penalty: float = 1.0,
    eos_id: int | None = None,
    pad_id: int | None = None,
    stop: Callable[[list[int]], bool] | None = None,
    streamer: Callable[[Tensor], None] | None = None,
    generator: torch.Generator | None = None,
    compile: bool = False,
) -> GenerateOutput:
    """Continue each prompt: greedy (y_t = argmax), ancestral sampling from the processed distribution
    (``do_sample``), or beam search (``num_beams`` > 1, ranked by log p / n ** length_penalty).

    Each step's logits pass through ``logits_processor``: repetition penalty, no-repeat n-gram, then, when
    sampling, temperature, top-k, top-p, min-p (transformers' order). A row stops at eos_id, after
    max_new_tokens, when prompt + generated tokens fill ``model.context_length``, or when ``stop`` says so;
    finished rows leave the batch (``model.reorder_state``), so they cost nothing and never outgrow the context.

    Args:
        model: implements ``LanguageModelStepModel`` (prefill, step, reorder_state, context_length).
        input_ids: (B, T) prompts, left-padded to a common length.
        keep_mask: (B, T) bool, True at real tokens (None: all real); every row needs one real token.
        max_new_tokens: the most tokens generated per row, >= 1.
        do_sample: sample each token instead of taking the argmax.
        temperature, top_k, top_p, min_p: the sampling warpers (only with do_sample; see ``processors``).
        repetition_penalty: > 0, 1 = off (Keskar et al., 2019, over prompt and generated tokens).
        no_repeat_ngram_size: ban repeating an n-gram of this size, 0 = off.
        num_beams: K, beams per row; 1 = no beam search.
        length_penalty: exponent of the beam score's length normaliser (beam search only).
        eos_id: the token that ends a row (None: rows end only by length or ``stop``).
        pad_id: fills rows after they end (default eos_id, else 0).
        stop: ``stop(generated_ids: list[int]) -> bool``, asked after every token of a row (e.g. a stop-string
            check); True ends the row, keeping the token. Not with beam search.
        streamer: ``streamer(tokens (B,))``, called with every step's new tokens in order (pad_id for ended
            rows). Not with beam search.
        generator: the random source for sampling; a fixed seed reproduces the tokens.
        compile: decode a GPT with its step compiled (``seqlab.models.CompiledGPT(model)``: torch.compile of
            ``GPT.step`` over static KV caches). The first call compiles (seconds to minutes on a CPU); later calls
            with the same model and batch size reuse the graph. To hold the compiled step yourself, pass
            ``CompiledGPT(model)`` as the model instead.
    Returns: ``GenerateOutput(tokens (B, T + N), lengths (B,), log_probs (B,))``.
    Raises: ConfigError with a one-line message for a bad setting (e.g. ``max_new_tokens (0) must be an integer
        >= 1``, ``top_p (1.5) must be a finite number > 0.0 and <= 1.0``, ``temperature (0.0) must be a finite
        number > 0.0``, ``num_beams (3) > 1 is not supported with do_sample=True``, ``compile applies to GPT
        language models, not to a RNNLanguageModel``), a prompt that leaves no room
        in the context (``prompt of 9 tokens leaves no room to generate in the model's context_length (8)``),
        bad input shapes, no prompts (B = 0), token ids < 0 (``input_ids holds token id -1; token ids are >= 0``)
        or, from the model's prefill, >= V, or eos_id / pad_id outside the vocabulary. TypeError for input_ids
        that are not an integer tensor.
    """
    check_int("max_new_tokens", max_new_tokens, minimum=1)
    check_bool("do_sample", do_sample)
    check_int("num_beams", num_beams, minimum=1)
    check_real("length_penalty", length_penalty)
    check_bool("compile", compile)
    if compile and not isinstance(model, CompiledGPT):
        model = CompiledGPT(model)  # refuses a model that is not a GPT
    check_int("eos_id", eos_id, minimum=0, optional=True)
    check_int("pad_id", pad_id, minimum=0, optional=True)
    if num_beams > 1:
        if do_sample:
            raise ConfigError(f"num_beams ({num_beams}) > 1 is not supported with do_sample=True")
        for name, value in (("stop", stop), ("streamer", streamer)):
            if value is not None:
                raise ConfigError(f"{name} is not supported with num_beams ({num_beams}) > 1")
    process = logits_processor(
        do_sample=do_sample,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
        repetition_penalty=repetition_penalty,
        no_repeat_ngram_size=no_repeat_ngram_size,
    )
    keep_mask = _check_prompts(input_ids, keep_mask)
    limits = _length_limits(keep_mask.sum(dim=1), max_new_tokens, model.context_length)

    logits, state = model.prefill(input_ids, keep_mask)
    B, V = input_ids.shape[0], logits.shape[-1]
    if logits.shape != (B, V):
        raise ConfigError(f"model.prefill must return logits of shape ({B}, V), got {tuple(logits.shape)}")
    if eos_id is not None:
        check_token_id("eos_id", eos_id, V)
    if pad_id is not None:
        check_token_id("pad_id", pad_id, V)
    fill = pad_id if pad_id is not None else eos_id if eos_id is not None else 0
    prompts = _Prompts(input_ids, keep_mask, StepOutput(logits, state))
    penalized = repetition_penalty != 1.0 or no_repeat_ngram_size > 0  # only the penalties read the tokens so far
    # Greedy and beam search take no warpers (logits_processor refuses them), so without penalties the processors
    # change nothing and are skipped.
    process = process if penalized or do_sample else None
    if num_beams > 1:
        # One search length for the batch: the room left by the longest prompt.
        max_length = int(limits.min())
        return _beam(
            model,
            prompts,
            process=process,
            max_length=max_length,
            num_beams=num_beams,
            length_penalty=length_penalty,
            eos_id=eos_id,
            fill=fill,
        )
    return decode_left_to_right(
        model,
        prompts.prefilled,
        input_ids=input_ids,
        keep_mask=keep_mask,
        limits=limits,
        eos_id=eos_id,
        fill=fill,
        process=process,
        penalized=penalized,
        do_sample=do_sample,
        generator=generator,
        stop=stop,
        streamer=streamer,
    )


class _Prompts(NamedTuple):
    input_ids: Tensor  # (B, T)
    keep_mask: Tensor  # (B, T)
    prefilled: StepOutput  # logits (B, V) of the first new token, and the model's state after the prompts


def _check_prompts(input_ids: Tensor, keep_mask: Tensor | None) -> Tensor:
    """The keep_mask (B, T), all True when None, after checking shapes, ids (>= 0; the model checks < V) and that
    every row has a real token."""
    check_token_ids(input_ids)
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise ConfigError(f"input_ids must have shape (B, T) with T >= 1, got {tuple(input_ids.shape)}")
    if input_ids.shape[0] == 0:
        raise ConfigError(f"input_ids has no prompts (B = 0, shape {tuple(input_ids.shape)}); give at least one")
    if keep_mask is None:
        return torch.ones_like(input_ids, dtype=torch.bool)
    if keep_mask.shape != input_ids.shape or keep_mask.dtype != torch.bool:
        raise ConfigError(
            f"keep_mask must be a bool tensor of the shape of input_ids {tuple(input_ids.shape)}, "
            f"got {keep_mask.dtype} {tuple(keep_mask.shape)}"
        )
    empty = (~keep_mask.any(dim=1)).nonzero().flatten().tolist()
    if empty:
        raise ConfigError(f"prompts {empty} have no real token (keep_mask all False)")
    return keep_mask


def _length_limits(prompt_lengths: Tensor, max_new_tokens: int, context_length: int | None) -> Tensor:
    """(B,) the most tokens each row may generate: max_new_tokens, and prompt + generated <= context_length, so
    the whole output can be fed back to the model (e.g. to score it)."""
    limits = torch.full_like(prompt_lengths, max_new_tokens)
    if context_length is None:
        return limits
    longest = int(prompt_lengths.max())
    if longest >= context_length:
        raise ConfigError(
            f"prompt of {longest} tokens leaves no room to generate in the model's context_length ({context_length})"
        )
    return limits.clamp(max=context_length - prompt_lengths)


class _PrefilledStepModel:
    """The step interface that ``beam_search`` drives, over a model that has already read the prompts.

    State: (model state, the prefill's logits until the first step returns them; the start tokens are already
    consumed). ``beam_search`` never reads a state again once it has reordered it, so the state of a model that
    declares ``InPlaceReorderModel`` (``seqlab.decoding.interface``; a GPT's KV caches: only the steps where the
    beams differ are moved) is reordered in place, any other model's by copy.
    """

    def __init__(self, model: LanguageModelStepModel) -> None:
        self.model = model
        self.in_place = reorders_in_place(model)

    def step(self, tokens: Tensor, state: tuple[Any, Tensor | None]) -> StepOutput:
        model_state, logits = state
        if logits is None:
            logits, model_state = self.model.step(tokens, model_state)
        return StepOutput(logits, (model_state, None))

    def reorder_state(self, state: tuple[Any, Tensor | None], index: Tensor) -> tuple[Any, Tensor | None]:
        model_state = state[0]
        if self.in_place:
            model_state = self.model.reorder_state(model_state, index, in_place=True)
        else:
            model_state = self.model.reorder_state(model_state, index)
        return model_state, select_rows(state[1], index)


def _beam(
    model: LanguageModelStepModel,
    prompts: _Prompts,
    *,
    process: LogitsProcessor | None,
    max_length: int,
    num_beams: int,
    length_penalty: float,
    eos_id: int | None,
    fill: int,
) -> GenerateOutput:
    """The best beam of each row, by ``beam_search`` from the prefilled state; the processors (None: none)
    act on the log-probabilities, as in transformers' beam search."""
    input_ids, keep_mask, (logits, state) = prompts
    prompt = input_ids.repeat_interleave(num_beams, dim=0)  # (B * K, T), row b's beams are rows b * K + k
    prompt_keep = keep_mask.repeat_interleave(num_beams, dim=0)

    def process_beams(log_probs: Tensor, generated: Tensor) -> Tensor:
        tokens = torch.cat([prompt, generated], dim=1)
        keep = torch.cat([prompt_keep, torch.ones_like(generated, dtype=torch.bool)], dim=1)
        return process(log_probs, tokens, keep)

    out = beam_search(
        _PrefilledStepModel(model),
        (state, logits),
        input_ids[:, -1],  # already consumed: the first step returns the prefill's logits
        eos_id=eos_id,
        max_length=max_length,
        num_beams=num_beams,
        length_penalty=length_penalty,
        logits_processor=None if process is None else process_beams,
    )
    tokens, lengths = out.tokens[:, 0], out.lengths[:, 0]  # (B, N), (B,)
    beyond = torch.arange(tokens.shape[1], device=tokens.device) >= lengths.unsqueeze(1)
    tokens = tokens.masked_fill(beyond, fill)
    return GenerateOutput(torch.cat([input_ids, tokens], dim=1), lengths, out.log_probs[:, 0])
