"""The language-modelling objective and whole-file perplexity, for any model with the language-model forward.

A language model here is any module called as ``model(input_ids (B, T), state)`` that returns an object with
``logits`` (B, T, V) (the scores of token t + 1 at position t) and ``state`` (what continues the streams), as
``seqlab.models.LanguageModelOutput``: the RNN language model and GPT alike.

Maximum likelihood (Bengio et al., 2003; Mikolov et al., 2010): the loss is the mean negative log-likelihood

    loss = -(1 / N) sum_t log p(x_{t+1} | x_<=t)        in nats per token,

perplexity = exp(loss), and bits per character = (sum of the N token losses) / (characters * ln 2), which for a
character model (one token per character) is loss / ln 2.

Whole-file evaluation scores every token of the file, not random windows:
- ``perplexity_of_stream`` (recurrent models): the file is laid into B parallel streams
  (``seqlab.data.streams.batchify_stream``) and read in windows of ``bptt_len`` steps, the state carried from
  window to window through the whole file, as Zaremba et al. (2014) evaluate.
- ``perplexity_sliding_window`` (fixed-context models such as GPT): the strided sliding window of Hugging Face's
  "Perplexity of fixed-length models" (https://huggingface.co/docs/transformers/perplexity).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.data.streams import batchify_stream, stream_windows
from seqlab.training.objectives import LossOutput

WINDOW_BATCH_TOKENS = 4096  # perplexity_sliding_window: tokens per forward pass when batch_size is None


class LanguageModelLoss(NamedTuple):
    """What ``language_model_loss`` returns: ``output`` LossOutput(loss, num_tokens), the trainer's objective
    value, and ``state``, the model's state after the window, to carry into the next window of the streams."""

    output: LossOutput
    state: Any


class Perplexity(NamedTuple):
    """A whole-file evaluation.

    Fields:
        loss: mean negative log-likelihood, nats per scored token.
        perplexity: exp(loss).
        tokens: how many tokens were scored.
        bits_per_character: total nats / (num_characters * ln 2), or None when no character count was given.
    """

    loss: float
    perplexity: float
    tokens: int
    bits_per_character: float | None


def language_model_loss(
    model: nn.Module,
    inputs: Tensor,
    targets: Tensor,
    state: Any = None,
    *,
    keep_mask: Tensor | None = None,
    label_smoothing: float = 0.0,
) -> LanguageModelLoss:
    """Mean next-token cross-entropy of a language model over one window (module docstring).

    Args:
        model: called as ``model(inputs, state, keep_mask=keep_mask)``, returning ``logits`` (B, T, V) and
            ``state`` (a ``LanguageModelOutput``).
        inputs: (B, T) long, x_1..x_T.
        targets: (B, T) long, the next token of every input, x_2..x_{T+1}.
        state: the state from the previous window of the same streams, or None to start fresh.
        keep_mask: (B, T) bool, True where the input is real and its target is scored; None means all.
        label_smoothing: eps in [0, 1), as in ``torch.nn.functional.cross_entropy``.
    Returns:
        LanguageModelLoss(output=LossOutput(loss: scalar, nats per scored token; num_tokens: N), state).
    Raises:
        ValueError: targets not of the shape of inputs, or keep_mask with no True (messages show the shapes).
    """
    if targets.shape != inputs.shape:
        raise ValueError(f"targets {tuple(targets.shape)} must have the shape of inputs {tuple(inputs.shape)}")
    logits, state = model(inputs, state, keep_mask=keep_mask)  # (B, T, V)
    flat_targets = targets.flatten()  # (B*T,)
    if keep_mask is not None:
        flat_targets = flat_targets.masked_fill(~keep_mask.flatten(), -100)  # ignore_index of cross_entropy
    num_tokens = int((flat_targets != -100).sum())
    if num_tokens == 0:
        raise ValueError("keep_mask selects no token: nothing to score")
    loss = F.cross_entropy(
        logits.flatten(0, 1),  # (B*T, V)
        flat_targets,
        ignore_index=-100,
        label_smoothing=label_smoothing,
    )
    return LanguageModelLoss(LossOutput(loss, num_tokens), state)


def perplexity_of_stream(
    model: nn.Module,
    token_ids: Tensor,
    *,
    batch_size: int,
    bptt_len: int,
    num_characters: int | None = None,
) -> Perplexity:
    """Perplexity of a recurrent language model over a whole file, its state carried through the file.

    The file's N tokens are laid into B = batch_size streams of N // B tokens (the last N mod B tokens are
    dropped) and read in windows of ``bptt_len`` steps; every token of a stream but its first is scored, with all
    of the stream before it as context. With batch_size 1 that is every token of the file but the first. The
    model runs in eval mode (restored afterwards) without gradients.

    Args:
        model: a language model (module docstring) whose state continues a stream from window to window.
        token_ids: (N,) long, the whole file.
        batch_size: B parallel streams (more is faster, fewer scores more tokens with longer contexts).
        bptt_len: steps per window (only speed and memory depend on it).
        num_characters: the file's characters, for bits per character; None to leave it out.
    Returns:
        Perplexity(loss nats/token, perplexity, tokens = B * (N // B - 1), bits_per_character or None).
    Raises:
        ValueError: token_ids not 1-D, fewer than 2 * batch_size tokens, batch_size or bptt_len < 1, or
            num_characters < 1 (messages show the numbers).
    """
    _check_file(token_ids, num_characters)
    stream = batchify_stream([token_ids.cpu()], batch_size)
    device = next(model.parameters()).device
    total, tokens, state = 0.0, 0, None
    with _evaluating(model):
        for window in stream_windows(stream, bptt_len):
            logits, state = model(window.inputs.to(device), state)  # (B, k, V)
            targets = window.targets.to(device)  # (B, k)
            total += float(F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum"))
            tokens += targets.numel()
    return _result(total, tokens, num_characters)


def perplexity_sliding_window(
    model: nn.Module,
    token_ids: Tensor,
    *,
    context_length: int,
    stride: int,
    num_characters: int | None = None,
    batch_size: int | None = None,
) -> Perplexity:
    """Perplexity of a fixed-context language model over a whole file by a strided sliding window.

    Hugging Face's method ("Perplexity of fixed-length models", https://huggingface.co/docs/transformers/perplexity):
    windows start at 0, stride, 2 * stride, ... and end at min(start + context_length, N); the last window is the
    one that reaches the end of the file. Each window scores only the tokens that the previous window did not
    (positions prev_end..end - 1), each with all of the window before it as context, so every token is scored
    once, with at least context_length - stride tokens of context once the first window is past. A window's
    first token has no context inside it and is not scored: with stride == context_length the windows are
    disjoint chunks whose first tokens go unscored; with stride 1 every token t >= 1 is scored with the
    min(t, context_length - 1) tokens before it. Unlike the guide's code, which weights each window's mean loss
    by its number of targets minus one, the losses of the scored tokens are summed exactly. The model runs in
    eval mode (restored afterwards) without gradients; the windows are independent (state None), so
    ``batch_size`` of them go through one forward pass as the rows of a batch (the last, shorter window, if the
    file ends inside one, in a batch of its own): the same scores as one window at a time, up to rounding. Only
    the logits of the positions that score something are computed where the model's forward takes
    ``logits_to_keep`` (GPT: its last layer then runs on a window's last stride + 1 positions alone, the others
    reaching it as keys and values), the same scores up to rounding for less work.

    Args:
        model: a language model (module docstring), e.g. GPT.
        token_ids: (N,) long, the whole file.
        context_length: the most tokens in one window (the model's context length).
        stride: tokens the window moves by, in [1, context_length]; smaller scores with more context but runs
            about context_length / stride times as many windows.
        num_characters: the file's characters, for bits per character; None to leave it out.
        batch_size: windows per forward pass; None = max(1, WINDOW_BATCH_TOKENS // context_length) (only speed
            and memory depend on it).
    Returns:
        Perplexity(loss nats/token, perplexity, tokens scored, bits_per_character or None).
    Raises:
        ValueError: token_ids not 1-D or shorter than 2 tokens, context_length < 2, stride outside
            [1, context_length], batch_size < 1, or num_characters < 1 (messages show the numbers).
    """
    _check_file(token_ids, num_characters)
    if isinstance(context_length, bool) or not isinstance(context_length, int) or context_length < 2:
        raise ValueError(f"context_length ({context_length!r}) must be an integer >= 2")
    if isinstance(stride, bool) or not isinstance(stride, int) or not 1 <= stride <= context_length:
        raise ValueError(f"stride ({stride!r}) must be an integer in [1, context_length] = [1, {context_length}]")
    if batch_size is None:
        batch_size = max(1, WINDOW_BATCH_TOKENS // context_length)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size ({batch_size!r}) must be None or an integer >= 1")
    device = next(model.parameters()).device
    windows = _sliding_windows(token_ids.shape[0], context_length, stride)
    total, tokens = 0.0, 0
    with _evaluating(model):
        for length in sorted({end - begin for begin, end, _ in windows}, reverse=True):
            same = [w for w in windows if w[1] - w[0] == length]
            for start in range(0, len(same), batch_size):
                batch = same[start : start + batch_size]
                inputs = torch.stack([token_ids[begin:end] for begin, end, _ in batch]).to(device)  # (B, W)
                targets = inputs[:, 1:].clone()  # (B, W - 1), row b position i: token begin_b + i + 1
                firsts = torch.tensor([first for _, _, first in batch], device=device)  # (B,)
                targets[torch.arange(length - 1, device=device) < firsts[:, None]] = -100  # scored before
                first = min(first for _, _, first in batch)  # logits before it score nothing in this batch
                logits = _logits_from(model, inputs, first)[:, :-1]  # (B, W - 1 - first, V)
                targets = targets[:, first:]  # (B, W - 1 - first)
                loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100, reduction="sum")
                total += float(loss)
                tokens += int((targets != -100).sum())
    return _result(total, tokens, num_characters)


def _logits_from(model: nn.Module, inputs: Tensor, first: int) -> Tensor:
    """The logits (B, W - first, V) of positions first..W - 1 of windows inputs (B, W): a model whose forward takes
    ``logits_to_keep`` (GPT) computes only those (its last layer runs on those positions alone), any other all W."""
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        return model(inputs, None, logits_to_keep=inputs.shape[1] - first).logits
    return model(inputs, None).logits[:, first:]


def _sliding_windows(N: int, context_length: int, stride: int) -> list[tuple[int, int, int]]:
    """(begin, end, first) of each window of ``perplexity_sliding_window`` over N tokens: the window is
    token_ids[begin:end], and its logits from index ``first`` on score the tokens that no earlier window did."""
    windows, prev_end = [], 0
    for begin in range(0, N, stride):
        end = min(begin + context_length, N)
        windows.append((begin, end, max(prev_end, begin + 1) - begin - 1))
        prev_end = end
        if end == N:
            break
    return windows


def _check_file(token_ids: Tensor, num_characters: int | None) -> None:
    if token_ids.dim() != 1 or token_ids.shape[0] < 2:
        raise ValueError(f"token_ids must be a 1-D tensor of at least 2 tokens, got shape {tuple(token_ids.shape)}")
    if num_characters is not None and (
        isinstance(num_characters, bool) or not isinstance(num_characters, int) or num_characters < 1
    ):
        raise ValueError(f"num_characters ({num_characters!r}) must be None or an integer >= 1")


def _result(total: float, tokens: int, num_characters: int | None) -> Perplexity:
    """Perplexity from the summed loss ``total`` (nats) over ``tokens`` scored tokens."""
    loss = total / tokens
    bpc = None if num_characters is None else total / (num_characters * math.log(2))
    return Perplexity(loss, math.exp(loss), tokens, bpc)


@contextmanager
def _evaluating(model: nn.Module) -> Iterator[None]:
    """Eval mode without gradients for the block; the model's previous mode afterwards."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)
