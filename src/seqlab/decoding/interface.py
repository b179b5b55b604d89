"""The step interface that every decodable model implements, and the result type of every search.

A model exposes one decoder step and a way to pick rows of its state. The state (an RNN hidden state, a KV
cache, encoder outputs and their mask) is an explicit value passed in and returned, so greedy search, beam
search and sampling are pure functions that serve RNN and Transformer encoder-decoders and language models.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor


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


class SearchOutput(NamedTuple):
    """Hypotheses of a search, best first.

    tokens: (B, K, T) long, the generated tokens without the start token, with EOS when generated, padded
        with eos_id.
    lengths: (B, K), generated tokens including EOS.
    scores: (B, K), the ranking score (log-prob after the length penalty).
    log_probs: (B, K), the sum of the tokens' log-probabilities, in nats.
    Greedy search has K = 1.
    """

    tokens: Tensor
    lengths: Tensor
    scores: Tensor
    log_probs: Tensor


def select_rows(state: Any, index: Tensor, dim: int = 0) -> Any:
    """Index-select rows ``index`` along ``dim`` of every tensor in a nested state.

    Args:
        state: a tensor, or a tuple, NamedTuple, list or dict nesting tensors; other leaves (None, ints,
            strings) are returned unchanged, as they are not per-row.
        index: (B',) long, the rows to keep, in order; repeats expand the state (e.g. into beams).
        dim: the batch dimension of every tensor (1 for a (L, B, H) RNN state).
    Returns: a state of the same structure whose tensors have B' rows along ``dim``.
    """
    if isinstance(state, Tensor):
        return state.index_select(dim, index.to(state.device))
    if isinstance(state, tuple) and hasattr(state, "_fields"):
        return type(state)(*(select_rows(x, index, dim) for x in state))
    if isinstance(state, (tuple, list)):
        return type(state)(select_rows(x, index, dim) for x in state)
    if isinstance(state, dict):
        return {key: select_rows(x, index, dim) for key, x in state.items()}
    return state


def check_search_inputs(start_tokens: Tensor, max_length: int) -> None:
    """Raise ValueError unless start_tokens is (B,) and max_length >= 1 (messages show the bad values)."""
    if start_tokens.dim() != 1:
        raise ValueError(f"start_tokens must have shape (B,), got {tuple(start_tokens.shape)}")
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")


def next_token_log_probs(logits: Tensor, *, rows: int, eos_id: int) -> Tensor:
    """log softmax of a step's logits (B, V), in float32 at least, after checking the model's output shape.

    Raises: ValueError if logits are not (rows, V) or eos_id is not in [0, V).
    """
    if logits.dim() != 2 or logits.shape[0] != rows:
        raise ValueError(f"model.step must return logits of shape ({rows}, V), got {tuple(logits.shape)}")
    if not 0 <= eos_id < logits.shape[1]:
        raise ValueError(f"eos_id ({eos_id}) is outside the vocabulary [0, {logits.shape[1]})")
    return torch.log_softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
