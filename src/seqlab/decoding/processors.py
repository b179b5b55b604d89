"""Logits processors: pure functions that reshape a step's next-token scores (B, V) before a token is chosen.

Each returns new logits (B, V) of the input's dtype; masked tokens get -inf, so softmax gives them probability 0.
The *penalties* (``repetition_penalty``, ``no_repeat_ngram``) depend on the tokens so far and apply to greedy, beam
and sampling alike; the *warpers* (``temperature``, ``top_k``, ``top_p``, ``min_p``) shape the sampling
distribution. ``logits_processor`` chains them in the order of transformers' ``generate``: penalties, then
temperature, top-k, top-p, min-p.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor

from seqlab.errors import ConfigError
from seqlab.validation import check_int, check_real

__all__ = [
    "LogitsProcessor",
    "logits_processor",
    "min_p",
    "no_repeat_ngram",
    "repetition_penalty",
    "temperature",
    "top_k",
    "top_p",
]

LogitsProcessor = Callable[[Tensor, Tensor, Tensor | None], Tensor]
"""``process(logits (B, V), tokens (B, t), keep_mask (B, t) | None) -> logits (B, V)``."""


def temperature(logits: Tensor, value: float) -> Tensor:
    """Divide the logits by a temperature: p_i = softmax(z / tau)_i (Ackley et al., 1985; the Boltzmann form).

    tau < 1 sharpens the distribution towards the argmax, tau > 1 flattens it towards uniform.

    Args: logits (B, V); value: tau > 0.
    Returns: logits (B, V) / tau.
    Raises: ConfigError ``temperature (0.0) must be a finite number > 0.0`` when tau <= 0 (or not finite).

    >>> temperature(torch.tensor([[2.0, -1.0]]), 0.5)
    tensor([[ 4., -2.]])
    """
    check_real("temperature", value, greater_than=0.0)
    return logits / value


def top_k(logits: Tensor, k: int) -> Tensor:
    """Keep exactly the k highest logits of each row, mask the rest (top-k sampling; Fan et al., 2018).

    Ties at the k-th value are broken towards the lower token id, so exactly min(k, V) tokens survive
    (transformers keeps every token tied with the k-th, which can be more than k).

    Args: logits (B, V); k >= 1 (k >= V keeps everything).
    Returns: logits (B, V) with all but the k best set to -inf.
    Raises: ConfigError ``top_k (0) must be an integer >= 1`` when k < 1.

    >>> top_k(torch.tensor([[1.0, 3.0, 2.0, 3.0]]), 2)
    tensor([[-inf, 3., -inf, 3.]])
    """
    check_int("top_k", k, minimum=1)
    if k >= logits.shape[-1]:
        return logits
    order = logits.argsort(dim=-1, descending=True, stable=True)  # ties keep the lower id first
    remove = torch.ones_like(logits, dtype=torch.bool).scatter(-1, order[..., :k], False)
    return logits.masked_fill(remove, float("-inf"))


def top_p(logits: Tensor, p: float) -> Tensor:
    """Keep the smallest set of most probable tokens whose probability mass reaches p (nucleus sampling;
    Holtzman et al., 2020, Eq. 3).

    With probabilities sorted p_(1) >= p_(2) >= ..., token (i) is kept iff sum_{j < i} p_(j) < p: the mass before
    it has not reached p yet. The most probable token is always kept; ties are ordered by lower token id first.
    p = 1 keeps every token.

    Args: logits (B, V); p in (0, 1].
    Returns: logits (B, V) with the tokens outside the nucleus set to -inf.
    Raises: ConfigError ``top_p (0.0) must be a finite number > 0.0 and <= 1.0`` when p is outside (0, 1].

    >>> top_p(torch.tensor([[0.5, 0.3, 0.2]]).log(), 0.75)  # 0.5 < 0.75, 0.5 + 0.3 >= 0.75
    tensor([[-0.6931, -1.2040,    -inf]])
    """
    check_real("top_p", p, greater_than=0.0, at_most=1.0)
    if p == 1.0:
        return logits
    order = logits.argsort(dim=-1, descending=True, stable=True)
    probs = torch.softmax(logits.gather(-1, order), dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
    mass_before = probs.cumsum(dim=-1) - probs  # (B, V) in sorted order
    remove_sorted = mass_before >= p
    remove_sorted[..., 0] = False
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, float("-inf"))


def min_p(logits: Tensor, p: float) -> Tensor:
    """Keep the tokens whose probability is at least p times the top token's (min-p sampling; Nguyen et al.,
    2024): keep i iff p_i >= p * max_j p_j. The most probable token is always kept; p = 0 keeps every token.

    Args: logits (B, V); p in [0, 1].
    Returns: logits (B, V) with the tokens below the threshold set to -inf.
    Raises: ConfigError ``min_p (1.5) must be a finite number >= 0.0 and <= 1.0`` when p is outside [0, 1].

    >>> min_p(torch.tensor([[0.6, 0.35, 0.05]]).log(), 0.5)  # threshold 0.3
    tensor([[-0.5108, -1.0498,    -inf]])
    """
    check_real("min_p", p, at_least=0.0, at_most=1.0)
    probs = torch.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
    remove = probs < p * probs.amax(dim=-1, keepdim=True)
    return logits.masked_fill(remove, float("-inf"))


def repetition_penalty(logits: Tensor, tokens: Tensor, penalty: float, keep_mask: Tensor | None = None) -> Tensor:
    """Penalise every token that already occurs in the row (Keskar et al., 2019, CTRL, Sec. 4.1, in the form of
    transformers' ``RepetitionPenaltyLogitsProcessor``): z_i / penalty if z_i > 0, else z_i * penalty, for every
    token i in the row's tokens (prompt included); each token is penalised once, however often it occurs.

    penalty > 1 discourages repetition, penalty < 1 encourages it, 1 changes nothing.

    Args:
        logits: (B, V).
        tokens: (B, t), the prompt and generated tokens.
        penalty: > 0.
        keep_mask: (B, t), True at real tokens (None: all real), so left padding is not penalised.
    Returns: logits (B, V).
    Raises: ConfigError ``repetition_penalty (0.0) must be a finite number > 0.0`` when penalty <= 0.

    >>> repetition_penalty(torch.tensor([[2.0, -1.0, 3.0]]), torch.tensor([[0, 1, 0]]), 2.0)
    tensor([[ 1., -2.,  3.]])
    """
    check_real("repetition_penalty", penalty, greater_than=0.0)
    seen = _seen(tokens, keep_mask, logits.shape[-1])
    penalised = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalised, logits)


def no_repeat_ngram(logits: Tensor, tokens: Tensor, n: int, keep_mask: Tensor | None = None) -> Tensor:
    """Ban every token that would complete an n-gram already present in the row (Paulus et al., 2018, Sec. 2.5,
    as transformers' ``NoRepeatNGramLogitsProcessor``, prompt included): if the last n - 1 tokens equal
    tokens[j : j + n - 1] for some j, token tokens[j + n - 1] gets -inf. n = 1 bans every token seen.

    Args:
        logits: (B, V).
        tokens: (B, t), the prompt and generated tokens.
        n: >= 1.
        keep_mask: (B, t), True at real tokens (None: all real): n-grams touching left padding do not count.
    Returns: logits (B, V).
    Raises:
        ConfigError: ``no_repeat_ngram_size (0) must be an integer >= 1`` when n < 1, and
            ``no_repeat_ngram_size (1) bans every token of the vocabulary in rows [0]`` when nothing is left to choose.

    >>> no_repeat_ngram(torch.zeros(1, 4), torch.tensor([[1, 2, 3, 1]]), 2)  # (1, 2) exists: ban 2 after 1
    tensor([[0., 0., -inf, 0.]])
    """
    check_int("no_repeat_ngram_size", n, minimum=1)
    if tokens.shape[1] < n:
        return logits
    keep = torch.ones_like(tokens, dtype=torch.bool) if keep_mask is None else keep_mask
    windows = tokens.unfold(1, n, 1)  # (B, W, n), every n-gram of the row
    valid = keep.unfold(1, n, 1).all(dim=-1)  # (B, W)
    last = tokens[:, tokens.shape[1] - n + 1 :]  # (B, n - 1)
    last_valid = keep[:, keep.shape[1] - n + 1 :].all(dim=-1, keepdim=True)  # (B, 1)
    match = (windows[..., :-1] == last.unsqueeze(1)).all(dim=-1) & valid & last_valid  # (B, W)
    banned = torch.zeros_like(logits, dtype=torch.bool).scatter_add(-1, windows[..., -1], match) > 0
    out = logits.masked_fill(banned, float("-inf"))
    stuck = out.isneginf().all(dim=-1)
    if stuck.any():
        rows = stuck.nonzero().flatten().tolist()
        raise ConfigError(f"no_repeat_ngram_size ({n}) bans every token of the vocabulary in rows {rows}")
    return out


def _seen(tokens: Tensor, keep_mask: Tensor | None, V: int) -> Tensor:
    """(B, V) bool: which tokens occur among the real tokens of each row."""
    counts = keep_mask.long() if keep_mask is not None else torch.ones_like(tokens)
    return torch.zeros(tokens.shape[0], V, dtype=torch.long, device=tokens.device).scatter_add(1, tokens, counts) > 0


def logits_processor(
    *,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    repetition_penalty: float = 1.0,
    no_repeat_ngram_size: int = 0,
) -> LogitsProcessor:
    """Chain the processors that the settings ask for, in transformers' ``generate`` order: repetition penalty,
    no-repeat n-gram, then (only when sampling) temperature, top-k, top-p, min-p. Settings that change nothing
    (temperature 1, top_p 1, penalty 1, n-gram size 0, None) are left out.

    Returns: ``process(logits (B, V), tokens (B, t), keep_mask (B, t) | None) -> logits (B, V)``.
    Raises:
        ConfigError: for a setting out of range (the message of the processor that checks it), and
            ``top_k (5) applies only with do_sample=True`` for a warper set without sampling (greedy and beam search
            rank by the model's scores; a warper would be silently ignored).

    >>> process = logits_processor(do_sample=True, temperature=0.5, top_k=1)
    >>> process(torch.tensor([[1.0, 2.0]]), torch.zeros(1, 0, dtype=torch.long), None)
    tensor([[-inf, 4.]])
    """
    check_real("repetition_penalty", repetition_penalty, greater_than=0.0)
    check_int("no_repeat_ngram_size", no_repeat_ngram_size, minimum=0)
    penalties: list[Callable[[Tensor, Tensor, Tensor | None], Tensor]] = []
    if repetition_penalty != 1.0:
        penalties.append(partial(_repetition, penalty=repetition_penalty))
    if no_repeat_ngram_size > 0:
        penalties.append(partial(_no_repeat, n=no_repeat_ngram_size))
    warpers: list[Callable[[Tensor], Tensor]] = []
    if not do_sample:
        for name, value, default in _warper_settings(temperature, top_k, top_p, min_p):
            if value != default:
                raise ConfigError(f"{name} ({value!r}) applies only with do_sample=True")
    else:
        check_real("temperature", temperature, greater_than=0.0)
        check_int("top_k", top_k, minimum=1, optional=True)
        check_real("top_p", top_p, greater_than=0.0, at_most=1.0, optional=True)
        check_real("min_p", min_p, at_least=0.0, at_most=1.0, optional=True)
        if temperature != 1.0:
            warpers.append(partial(_temperature, value=temperature))
        if top_k is not None:
            warpers.append(partial(_top_k, k=top_k))
        if top_p is not None and top_p < 1.0:
            warpers.append(partial(_top_p, p=top_p))
        if min_p is not None and min_p > 0.0:
            warpers.append(partial(_min_p, p=min_p))

    def process(logits: Tensor, tokens: Tensor, keep_mask: Tensor | None) -> Tensor:
        for penalty in penalties:
            logits = penalty(logits, tokens, keep_mask)
        for warp in warpers:
            logits = warp(logits)
        return logits

    return process


def _warper_settings(temperature: float, top_k: int | None, top_p: float | None, min_p: float | None) -> tuple:
    return (("temperature", temperature, 1.0), ("top_k", top_k, None), ("top_p", top_p, None), ("min_p", min_p, None))


# logits_processor's keyword arguments shadow the warpers' names.
_temperature, _top_k, _top_p, _min_p = temperature, top_k, top_p, min_p


def _repetition(logits: Tensor, tokens: Tensor, keep_mask: Tensor | None, *, penalty: float) -> Tensor:
    return repetition_penalty(logits, tokens, penalty, keep_mask)


def _no_repeat(logits: Tensor, tokens: Tensor, keep_mask: Tensor | None, *, n: int) -> Tensor:
    return no_repeat_ngram(logits, tokens, n, keep_mask)
