"""Batched beam search with length-normalised n-best lists (Hugging Face conventions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from seqlab.decoding.interface import SearchOutput, StepModel, check_search_inputs, next_token_log_probs


@torch.no_grad()
def beam_search(
    model: StepModel,
    state: Any,
    start_tokens: Tensor,
    *,
    eos_id: int | None,
    max_length: int,
    num_beams: int = 4,
    length_penalty: float = 1.0,
    num_return_sequences: int = 1,
    logits_processor: Callable[[Tensor, Tensor], Tensor] | None = None,
    finished_score: Callable[[Any], Tensor] | None = None,
) -> SearchOutput:
    """Keep the ``num_beams`` most probable unfinished prefixes per row, extend them by every token, repeat.

    A hypothesis y of n generated tokens (EOS included) is ranked by
    score(y) = log p(y | x) / n ** length_penalty (the Hugging Face form of Wu et al., 2016's normaliser).
    Each step takes the K = num_beams best extensions of the live prefixes over K x V: those ending in EOS
    join the row's pool of K finished hypotheses, and the K best that do not end in EOS stay live. Live
    prefixes that reach ``max_length`` join the pool too. A row stops once its pool is full and no live
    prefix can beat the pool's worst score; the bound is exact: the best of
    log p(prefix) / n ** length_penalty over every length n in [t + 1, max_length].
    With num_beams = 1 and length_penalty = 0 this is greedy search.

    Args:
        model: implements the ``StepModel`` interface.
        state: the model's initial state for the B rows; expanded once to B * K rows by ``reorder_state``.
        start_tokens: (B,) the first input token: BOS for seq2seq, the last prompt token for a language model.
        eos_id: the end-of-sequence token; it ends hypotheses and pads them. None: no token ends a hypothesis
            (every one runs max_length steps, e.g. a language model's continuation) and padding is 0.
        max_length: the most tokens generated per hypothesis (EOS included).
        num_beams: K, live prefixes kept per row.
        length_penalty: exponent of the length normaliser; 0 ranks by the raw sum of log-probs, > 0 favours
            longer hypotheses.
        num_return_sequences: hypotheses returned per row, at most num_beams.
        logits_processor: ``process(log_probs (B * K, V), prefixes (B * K, t)) -> (B * K, V)``, applied to each
            step's log-probabilities given the live prefixes' generated tokens, before ranking (as transformers'
            beam search applies its processors, without renormalising); scores and log_probs then sum the
            processed values, which must stay <= 0 for the early stop to be exact (penalties and bans do).
        finished_score: ``score(state) -> (B * K,)``, a term added to each hypothesis' normalised score when it
            finishes, from the model's state after its last step (e.g. ``seqlab.decoding.coverage.coverage_penalty``,
            Wu et al. 2016's s(Y, X) = log p / lp + cp); values <= 0 keep the early stop exact. Live prefixes are
            still ranked by their log-probabilities.
    Returns: ``SearchOutput`` with num_return_sequences hypotheses per row, best first; tokens (B, K', T),
        T the longest returned hypothesis. If a row has fewer possible hypotheses, the rest score -inf.
    Raises: ValueError if num_beams < 1, num_return_sequences is not in [1, num_beams], max_length < 1,
        start_tokens is not (B,), the model's logits are not (B * K, V), or eos_id is outside the vocabulary.
    """
    check_search_inputs(start_tokens, max_length)
    if num_beams < 1:
        raise ValueError(f"num_beams must be >= 1, got {num_beams}")
    if not 1 <= num_return_sequences <= num_beams:
        raise ValueError(f"num_return_sequences ({num_return_sequences}) must be in [1, {num_beams}] (num_beams)")
    B, K, device = start_tokens.shape[0], num_beams, start_tokens.device
    pad = 0 if eos_id is None else eos_id
    state = model.reorder_state(state, torch.arange(B, device=device).repeat_interleave(K))  # B * K rows
    tokens = start_tokens.repeat_interleave(K)  # (B * K,)
    # Only the first copy of each row is live at first, or the first top-k would pick K identical hypotheses.
    live_log_probs = torch.full((B, K), float("-inf"), device=device)
    live_log_probs[:, 0] = 0.0
    history = torch.full((B, K, max_length), pad, device=device)  # live prefixes; columns >= t hold the pad
    pool = SearchOutput(
        tokens=history.clone(),
        lengths=torch.zeros(B, K, dtype=torch.long, device=device),
        scores=torch.full((B, K), float("-inf"), device=device),
        log_probs=torch.full((B, K), float("-inf"), device=device),
    )
    done = torch.zeros(B, dtype=torch.bool, device=device)
    pooled = False  # whether any hypothesis has joined the pool; until one has, no row can stop early
    row_offset = torch.arange(B, device=device).unsqueeze(1) * K  # (B, 1)
    rows = torch.arange(B * K, device=device)
    for t in range(1, max_length + 1):
        logits, state = model.step(tokens, state)
        finish_terms = None if finished_score is None else finished_score(state).view(B, K)
        log_probs = next_token_log_probs(logits, rows=B * K, eos_id=eos_id)  # (B * K, V)
        if logits_processor is not None:
            log_probs = logits_processor(log_probs, history[:, :, : t - 1].reshape(B * K, t - 1))
        V = log_probs.shape[1]
        total = (live_log_probs.view(B * K, 1) + log_probs).view(B, K, V)
        if eos_id is not None:
            # EOS joins the pool only from among the K best extensions (as in Hugging Face): beam 1 is greedy.
            best, flat = total.view(B, K * V).topk(K, dim=1)  # (B, K)
            ends = (flat % V == eos_id) & ~done.unsqueeze(1)
            if ends.any():  # (a -inf hypothesis is never returned: a step that ends none leaves the pool as it is)
                finished = best.masked_fill(~ends, float("-inf"))
                # Column t - 1 of each prefix still holds eos_id, which is the hypothesis' last token.
                parent = flat // V
                extra = None if finish_terms is None else _take(finish_terms, parent)
                pool = _add_to_pool(pool, _take(history, parent), finished, t, length_penalty, extra)
                pooled = True
            total[:, :, eos_id] = float("-inf")
        live_log_probs, flat = total.view(B, K * V).topk(K, dim=1)  # (B, K)
        origin, next_tokens = flat // V, flat % V
        history = _take(history, origin)
        history[:, :, t - 1] = next_tokens
        if t == max_length:
            live = live_log_probs.masked_fill(done.unsqueeze(1), float("-inf"))
            extra = None if finish_terms is None else _take(finish_terms, origin)
            pool = _add_to_pool(pool, history, live, t, length_penalty, extra)
            break
        # Log-probs are <= 0: a continuation of n tokens scores at most log p(prefix) / n ** length_penalty,
        # which over n in [t + 1, max_length] is largest at one end.
        if pooled:
            shortest, longest = (t + 1) ** length_penalty, max_length**length_penalty
            bound = torch.maximum(live_log_probs / shortest, live_log_probs / longest)
            done |= pool.scores[:, -1] >= bound.amax(dim=1)
            if done.all():
                break
        parents = (origin + row_offset).view(B * K)
        if not torch.equal(parents, rows):  # every beam extends itself: the state is already in order
            state = model.reorder_state(state, parents)
        tokens = next_tokens.view(B * K)

    tokens, lengths, scores, log_probs = (x[:, :num_return_sequences] for x in pool)
    impossible = scores.isneginf()  # slots never filled, or filled from the -inf copies of the first step
    lengths = lengths.masked_fill(impossible, 0)
    T = max(int(lengths.max()), 1)
    tokens = tokens[:, :, :T].masked_fill(impossible.unsqueeze(-1), pad)
    return SearchOutput(tokens, lengths, scores, log_probs)


def _take(x: Tensor, index: Tensor) -> Tensor:
    """x[b, index[b, k], ...] for x (B, M, ...) and index (B, K): gather whole entries along dim 1."""
    index = index.view(*index.shape, *[1] * (x.dim() - 2)).expand(*index.shape, *x.shape[2:])
    return x.gather(1, index)


def _add_to_pool(
    pool: SearchOutput, tokens: Tensor, log_probs: Tensor, length: int, length_penalty: float, extra: Tensor | None
) -> SearchOutput:
    """The K best of the pool (B, K) and K new hypotheses of ``length`` tokens (-inf log_probs: none), whose
    scores gain ``extra`` (B, K) when given (``finished_score``)."""
    K = pool.scores.shape[1]
    scores = log_probs / length**length_penalty
    if extra is not None:
        scores = scores + extra
    merged_scores, index = torch.cat([pool.scores, scores], dim=1).topk(K, dim=1)  # (B, K) of (B, 2K)
    lengths = torch.full_like(pool.lengths, length)
    return SearchOutput(
        tokens=_take(torch.cat([pool.tokens, tokens], dim=1), index),
        lengths=_take(torch.cat([pool.lengths, lengths], dim=1), index),
        scores=merged_scores,
        log_probs=_take(torch.cat([pool.log_probs, log_probs], dim=1), index),
    )
