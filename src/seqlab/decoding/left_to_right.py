"""Left-to-right decoding, one token per row per step, chosen by argmax (greedy) or drawn (ancestral sampling).

The one loop behind ``greedy_search`` and ``generate``'s greedy and sampling modes. Rows that end leave the batch
(``model.reorder_state``), so they cost nothing more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from seqlab.decoding.interface import StepModel, StepOutput, next_token_log_probs
from seqlab.decoding.processors import LogitsProcessor
from seqlab.decoding.sampling import sample_from

__all__ = ["GenerateOutput", "decode_left_to_right"]


class GenerateOutput(NamedTuple):
    """What ``generate`` returns.

    tokens: (B, T + N) long, each prompt (as given, left padding included) followed by its generated tokens; a
        row that ended early is filled with pad_id (default eos_id) up to N, the longest continuation.
    lengths: (B,) long, generated tokens per row (EOS included when generated).
    log_probs: (B,) the sum of the generated tokens' log-probabilities, in nats. Greedy and sampling use the
        model's own distribution, before any processor (so temperature or top-k do not change it). Beam search
        sums what it ranks by, the model's log-probabilities after the penalties (transformers' sequence scores):
        the model's own unless repetition_penalty != 1 (a no-repeat ban never picks a banned token).
    """

    tokens: Tensor
    lengths: Tensor
    log_probs: Tensor


def decode_left_to_right(
    model: StepModel,
    first: StepOutput,
    *,
    input_ids: Tensor,
    keep_mask: Tensor,
    limits: Tensor,
    eos_id: int | None,
    fill: int,
    process: LogitsProcessor | None = None,
    penalized: bool = False,
    do_sample: bool = False,
    generator: torch.Generator | None = None,
    stop: Callable[[list[int]], bool] | None = None,
    streamer: Callable[[Tensor], None] | None = None,
) -> GenerateOutput:
    """Continue B rows token by token: y_t = argmax of the processed logits, or a draw from their softmax
    (``do_sample``), until eos_id, the row's length limit, or ``stop``; log_probs sums the model's own
    log-probabilities of the chosen tokens.

    Per step, only what the settings need runs: the tokens so far are gathered for the processors only when they
    read them (``penalized``), rows are indexed only after one has ended (before that, ``rows`` is a plain
    slice), and the end test runs only at steps where a row can end (every step with eos_id or stop, else once
    the shortest length limit is reached). Lengths and log-prob sums are written to a row's slot when it ends.

    Args:
        model: ``step`` and ``reorder_state`` of the ``StepModel`` interface.
        first: ``StepOutput(logits (B, V) of each row's first new token, the model's state)``, e.g. a prefill's.
        input_ids: (B, T) the tokens before the first new one (the prompts; T may be 0), for the processors and
            the output; keep_mask: (B, T) bool, True at real tokens.
        limits: (B,) long, the most tokens each row may generate, >= 1.
        eos_id: the token that ends a row, or None; fill: the token after a row's end.
        process: ``process(logits (B', V), tokens (B', t), keep_mask (B', t)) -> (B', V)`` before the choice, or
            None; penalized: whether it reads the tokens (the penalties do, the warpers do not).
        do_sample: draw each token (``sampling.sample_from``) instead of taking the argmax; generator: its
            random source.
        stop: ``stop(generated_ids: list[int]) -> bool`` after every token of a row; True ends the row.
        streamer: ``streamer(tokens (B,))`` with every step's new tokens (fill for ended rows).
    Returns: ``GenerateOutput(tokens (B, T + N), lengths (B,), log_probs (B,))``, N the longest continuation.
    Raises: ValueError if a step's logits are not (B', V) for the B' rows still in the batch, or eos_id is not
        in [0, V).
    """
    logits, state = first
    (B, T), device = input_ids.shape, input_ids.device
    N = int(limits.max())
    history = torch.cat([input_ids, torch.full((B, N), fill, device=device)], dim=1)  # (B, T + N)
    history_keep = torch.cat([keep_mask, torch.ones(B, N, dtype=torch.bool, device=device)], dim=1)
    lengths = torch.zeros(B, dtype=torch.long, device=device)
    log_probs = torch.zeros(B, dtype=torch.promote_types(logits.dtype, torch.float32), device=device)
    # The rows still in the batch: their original row, their log-prob sums so far, their length limits.
    active, running, row_limits = torch.arange(B, device=device), log_probs.clone(), limits
    rows: slice | Tensor = slice(None)  # indexes the rows still in the batch: all of them, or ``active``
    shortest = int(limits.min())  # no row ends by its length limit before this many tokens
    for i in range(N):
        model_log_probs = next_token_log_probs(logits, rows=len(active), eos_id=eos_id)  # (B', V)
        if process is None:
            processed = logits
        elif penalized:
            processed = process(logits, history[rows, : T + i], history_keep[rows, : T + i])
        else:  # the warpers read no tokens
            processed = process(logits, history[rows, :0], None)
        tokens = sample_from(processed, generator=generator) if do_sample else processed.argmax(dim=-1)
        running += model_log_probs.gather(1, tokens.unsqueeze(1)).squeeze(1)
        history[rows, T + i] = tokens
        if streamer is not None:
            streamer(torch.full((B,), fill, device=device).index_put((active,), tokens))
        if eos_id is not None or stop is not None or i + 1 >= shortest:
            done = row_limits <= i + 1  # every row in the batch has generated i + 1 tokens
            if eos_id is not None:
                done |= tokens == eos_id
            if stop is not None:
                ends = [stop(history[row, T : T + i + 1].tolist()) for row in active.tolist()]
                done |= torch.tensor(ends, device=device)
            ended = int(done.sum())
            if ended:
                lengths[active[done]] = i + 1
                log_probs[active[done]] = running[done]
                if ended == len(active):
                    break
                alive = (~done).nonzero().squeeze(1)
                active, running, row_limits = active[alive], running[alive], row_limits[alive]
                tokens, state = tokens[alive], model.reorder_state(state, alive)
                rows, shortest = active, int(row_limits.min())
        logits, state = model.step(tokens, state)
    return GenerateOutput(history[:, : T + int(lengths.max())], lengths, log_probs)
