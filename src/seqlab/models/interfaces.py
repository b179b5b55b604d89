"""The interfaces that models offer to the rest of seqlab: the decoding step protocol and shared output types.

A decodable model exposes one decoder step and a way to pick rows of its state. The state (an RNN hidden state, a
KV cache, encoder outputs and their mask) is an explicit value passed in and returned, so greedy search, beam
search and sampling (``seqlab.decoding``) are pure functions that serve RNN and Transformer encoder-decoders and
language models alike. These types live on the models' side because models implement them and decoding uses them.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor

from seqlab.errors import ConfigError
from seqlab.nn.kv_cache import KVCache


class StepOutput(NamedTuple):
    """What one decoder step returns."""

    logits: Tensor  # (B, V) unnormalised scores of the next token
    state: Any  # the model's state after consuming the step's tokens


class StepModel(Protocol):
    """A model that can be decoded one token at a time.

    ``step(tokens, state)``: tokens (B,) is the previous token of each row (the start token on the first
    call); returns ``StepOutput(logits (B, V), new_state)``.
    ``reorder_state(state, index)``: the state of rows ``index`` (B',), in that order; used to expand each
    input into K beams and to follow beams to their origin. ``select_rows`` implements it for nested
    tensor containers.
    """

    def step(self, tokens: Tensor, state: Any) -> StepOutput: ...

    def reorder_state(self, state: Any, index: Tensor) -> Any: ...


class LanguageModelOutput(NamedTuple):
    """What a language model's ``forward(input_ids, state=None)`` returns.

    logits: (B, T, V), the scores of token t + 1 at every position t.
    state: what continues the sequence after the last position (an RNN's hidden state, a GPT's KV caches and
        position), to pass back as ``state`` with the next chunk of the same streams.
    """

    logits: Tensor
    state: Any


class LanguageModelStepModel(StepModel, Protocol):
    """A decoder-only language model (RNN or GPT) that generation can drive: a prompt, then one token at a time.

    ``prefill(input_ids, keep_mask)``: input_ids (B, T) prompts, left-padded to a common length; keep_mask
    (B, T) bool, True at real tokens (None = all real). Every row must have at least one real token. Returns
    ``StepOutput(logits (B, V) of the token after each row's last prompt token, state)``, where padding changed
    nothing: each row's logits equal those of its prompt alone (positions count real tokens only).
    ``step`` and ``reorder_state`` then continue as for any ``StepModel``.
    ``context_length``: the most tokens (prompt + generated) the model can attend to, or None when unbounded
    (a recurrent model carries its state instead).
    """

    context_length: int | None

    def prefill(self, input_ids: Tensor, keep_mask: Tensor | None = None) -> StepOutput: ...


def check_token_ids(input_ids: Tensor, vocab_size: int | None = None, *, name: str = "input_ids") -> None:
    """Refuse in one line what an embedding lookup would fail on: ``input_ids`` must be an integer tensor of ids
    >= 0, and < V when ``vocab_size`` V is given. Reads the smallest and largest id (one device sync).

    Raises: TypeError for anything but an integer tensor (a float or bool tensor, a list); ConfigError (a
        ValueError) naming the first bad id: ``input_ids holds token id 13, outside the vocabulary [0, 13)``.
    """
    if not isinstance(input_ids, Tensor):
        raise TypeError(f"{name} must be a tensor of token ids, got {type(input_ids).__name__}")
    if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor of token ids, got {input_ids.dtype}")
    if input_ids.numel() == 0:
        return
    low, high = int(input_ids.min()), int(input_ids.max())
    if low < 0:
        raise ConfigError(f"{name} holds token id {low}; token ids are >= 0")
    if vocab_size is not None and high >= vocab_size:
        raise ConfigError(f"{name} holds token id {high}, outside the vocabulary [0, {vocab_size})")


class Seq2SeqOutput(NamedTuple):
    """logits (B, T, V) for every target step; attention (B, T, S) cross-attention weights, or None when not
    requested or not formed (the fixed-context model)."""

    logits: Tensor
    attention: Tensor | None


def select_rows(state: Any, index: Tensor, dim: int = 0) -> Any:
    """Index-select rows ``index`` along ``dim`` of every tensor in a nested state.

    Args:
        state: a tensor, or a tuple, NamedTuple, list or dict nesting tensors; other leaves (None, ints,
            strings) are returned unchanged, as they are not per-row.
        index: (B',) long, the rows to keep, in order; repeats expand the state (e.g. into beams).
        dim: the batch dimension of every tensor (1 for a (L, B, H) RNN state).
    Returns: a state of the same structure whose tensors have B' rows along ``dim``. A ``KVCache`` (batch at
        dimension 0) is reordered by ``KVCache.select_rows``, which keeps its spare capacity, so the next step
        still appends in place instead of copying the cache into a new buffer.
    """
    if isinstance(state, Tensor):
        return state.index_select(dim, index.to(state.device))
    if isinstance(state, KVCache) and dim == 0:
        return state.select_rows(index.to(state.keys.device))
    if isinstance(state, tuple) and hasattr(state, "_fields"):
        return type(state)(*(select_rows(x, index, dim) for x in state))
    if isinstance(state, (tuple, list)):
        return type(state)(select_rows(x, index, dim) for x in state)
    if isinstance(state, dict):
        return {key: select_rows(x, index, dim) for key, x in state.items()}
    return state
