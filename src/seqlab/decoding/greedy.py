"""Greedy search: at every step take the most probable next token."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from seqlab.decoding.interface import SearchOutput, StepModel, check_search_inputs
from seqlab.decoding.left_to_right import decode_left_to_right


@torch.no_grad()
def greedy_search(model: StepModel, state: Any, start_tokens: Tensor, *, eos_id: int, max_length: int) -> SearchOutput:
    """Decode every row by y_t = argmax_v log p(v | y_<t, x) until EOS or ``max_length`` tokens
    (``decode_left_to_right``, the loop ``generate`` runs too; a row that ends leaves the batch).

    Args:
        model: implements the ``StepModel`` interface.
        state: the model's initial state for the B rows (e.g. the encoder's outputs, or a prompt's KV cache).
        start_tokens: (B,) the first input token: BOS for seq2seq, the last prompt token for a language model.
        eos_id: the end-of-sequence token; it ends a row and pads the finished ones.
        max_length: the most tokens generated per row (EOS included).
    Returns: ``SearchOutput`` with K = 1: tokens (B, 1, T), T the number of steps run; lengths, scores and
        log_probs (B, 1), where scores = log_probs (no length penalty).
    Raises: ValueError if start_tokens is not (B,), max_length < 1, the model's logits are not (B, V), or
        eos_id is outside the vocabulary.
    """
    check_search_inputs(start_tokens, max_length)
    B = start_tokens.shape[0]
    out = decode_left_to_right(
        model,
        model.step(start_tokens, state),
        input_ids=start_tokens.new_empty(B, 0),  # the start token is consumed, not part of the output
        keep_mask=start_tokens.new_empty(B, 0, dtype=torch.bool),
        limits=torch.full_like(start_tokens, max_length),
        eos_id=eos_id,
        fill=eos_id,
    )
    log_probs = out.log_probs.unsqueeze(1)  # (B, 1)
    return SearchOutput(
        tokens=out.tokens.unsqueeze(1), lengths=out.lengths.unsqueeze(1), scores=log_probs, log_probs=log_probs
    )
