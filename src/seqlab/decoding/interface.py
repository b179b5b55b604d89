"""What every search shares: its result type, input checks and next-token log-probabilities.

The step interface itself (``StepModel``, ``StepOutput``, ``select_rows``) is defined with the models, in
``seqlab.models.interfaces``, and re-exported here.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from seqlab.models.interfaces import StepModel, StepOutput, select_rows

__all__ = ["SearchOutput", "StepModel", "StepOutput", "check_search_inputs", "next_token_log_probs", "select_rows"]


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
