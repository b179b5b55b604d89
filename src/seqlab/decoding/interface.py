"""What every search shares: its result type, input checks, next-token log-probabilities, and the one optional
capability a step model may declare (``InPlaceReorderModel``).

The step interface itself (``StepModel``, ``StepOutput``, ``select_rows``) is defined with the models, in
``seqlab.models.interfaces``, and re-exported here.
"""

from __future__ import annotations

import inspect
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor

from seqlab.models.interfaces import StepModel, StepOutput, select_rows

__all__ = [
    "InPlaceReorderModel",
    "SearchOutput",
    "StepModel",
    "StepOutput",
    "check_search_inputs",
    "next_token_log_probs",
    "reorders_in_place",
    "select_rows",
]


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


def check_search_inputs(start_tokens: Tensor, max_length: int) -> None:
    """Raise ValueError unless start_tokens is (B,) and max_length >= 1 (messages show the bad values)."""
    if start_tokens.dim() != 1:
        raise ValueError(f"start_tokens must have shape (B,), got {tuple(start_tokens.shape)}")
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")


def next_token_log_probs(logits: Tensor, *, rows: int, eos_id: int | None) -> Tensor:
    """log softmax of a step's logits (B, V), in float32 at least, after checking the model's output shape.

    Raises: ValueError if logits are not (rows, V) or eos_id is not None and not in [0, V).
    """
    if logits.dim() != 2 or logits.shape[0] != rows:
        raise ValueError(f"model.step must return logits of shape ({rows}, V), got {tuple(logits.shape)}")
    if eos_id is not None and not 0 <= eos_id < logits.shape[1]:
        raise ValueError(f"eos_id ({eos_id}) is outside the vocabulary [0, {logits.shape[1]})")
    dtype = logits.dtype if logits.dtype == torch.float64 else torch.float32  # not torch.promote_types: an op call
    return torch.log_softmax(logits, dim=-1, dtype=dtype)


class InPlaceReorderModel(StepModel, Protocol):
    """A step model whose state can be reordered in place, declared by ``reorder_state`` taking ``in_place``.

    ``reorder_state(state, index, *, in_place=False)``: as ``StepModel.reorder_state``; with ``in_place=True`` the
    caller gives ``state`` up (it never reads it again), so the model may reorder its buffers where they are
    instead of copying them (``GPT``'s ``KVCache``s move only the steps where the rows differ) and ``state`` may
    change with the result. A model whose ``reorder_state`` lacks the keyword is always reordered by copy; one that
    takes it but cannot reorder some part of its state in place copies that part.
    """

    def reorder_state(self, state: Any, index: Tensor, *, in_place: bool = False) -> Any: ...


def reorders_in_place(model: StepModel) -> bool:
    """Whether ``model`` declares ``InPlaceReorderModel``: its ``reorder_state`` takes a keyword ``in_place``.

    The keyword is the declaration, so it cannot disagree with what the method does (a separate flag could); a
    method taking only ``**kwargs`` does not declare it and is reordered by copy.
    """
    parameters = inspect.signature(model.reorder_state).parameters
    declared = parameters.get("in_place")
    return declared is not None and declared.kind in (declared.KEYWORD_ONLY, declared.POSITIONAL_OR_KEYWORD)
