"""Greedy search: at every step take the most probable next token."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from seqlab.decoding.interface import SearchOutput, StepModel, check_search_inputs, next_token_log_probs


@torch.no_grad()
def greedy_search(model: StepModel, state: Any, start_tokens: Tensor, *, eos_id: int, max_length: int) -> SearchOutput:
    """Decode every row by y_t = argmax_v log p(v | y_<t, x) until EOS or ``max_length`` tokens.

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
    tokens = start_tokens
    finished = torch.zeros(B, dtype=torch.bool, device=start_tokens.device)
    lengths = torch.zeros(B, dtype=torch.long, device=start_tokens.device)
    generated, token_log_probs = [], []
    for _ in range(max_length):
        logits, state = model.step(tokens, state)
        log_probs = next_token_log_probs(logits, rows=B, eos_id=eos_id)  # (B, V)
        # Finished rows keep stepping (the batch moves in lockstep) on EOS tokens that are not counted.
        tokens = log_probs.argmax(dim=-1).masked_fill(finished, eos_id)
        token_log_probs.append(log_probs.gather(1, tokens.unsqueeze(1)).squeeze(1).masked_fill(finished, 0.0))
        generated.append(tokens)
        lengths += ~finished
        finished = finished | (tokens == eos_id)
        if finished.all():
            break
    log_probs = torch.stack(token_log_probs, dim=1).sum(dim=1, keepdim=True)  # (B, 1)
    return SearchOutput(
        tokens=torch.stack(generated, dim=1).unsqueeze(1),  # (B, 1, T)
        lengths=lengths.unsqueeze(1),
        scores=log_probs,
        log_probs=log_probs,
    )
