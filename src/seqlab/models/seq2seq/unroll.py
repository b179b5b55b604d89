"""The decoder fed its own predictions: free running, and the mixed inputs of scheduled sampling.

Teacher forcing feeds the gold previous token y_{t-1} at every step; at test time the decoder reads its own
prediction instead, so it is trained on prefixes it never produces (exposure bias; Ranzato et al. 2016).
Scheduled sampling (Bengio et al. 2015, Sec. 2) feeds, at each step t >= 1 of each sequence, the gold y_{t-1}
with probability eps (a coin flipped per position) and the model's own previous prediction otherwise; eps = 1 is
teacher forcing, eps = 0 free running. The model's prediction here is its most probable token, argmax_v p(v | ...),
so that free running is greedy decoding (Bengio et al. sample from p instead; argmax keeps eps = 0 equal to the
decoder used at test time).

Two ways to form the inputs:
- ``unroll``: step by step through a ``StepModel`` (the RNN seq2seq): the prediction fed at t is made from the
  mixed prefix itself, exactly as Bengio et al. describe.
- ``mix_inputs``: for decoders that read the whole target at once (the Transformer): predictions come from one
  teacher-forced pass, then a second pass reads the mixed inputs (the usual two-pass approximation, e.g. Duckworth
  et al. 2019, "Parallel scheduled sampling", with one pass): a prediction at t is conditioned on the gold prefix,
  not on the mixed one.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from seqlab.models.interfaces import StepModel
from seqlab.validation import check_real


class UnrollOutput(NamedTuple):
    """logits (B, T, V) at every step; inputs (B, T) the token fed at each step (inputs[:, 0] = tgt_in[:, 0])."""

    logits: Tensor
    inputs: Tensor


def gold_coins(
    shape: torch.Size, teacher_forcing: float, *, device: torch.device, generator: torch.Generator | None
) -> Tensor:
    """(B, T) bool, True where the gold token is fed: P(True) = teacher_forcing per position, always at t = 0.

    torch.rand draws from [0, 1), so teacher_forcing 1 gives all True and 0 all False exactly. The coins are drawn
    on the CPU (where ``generator`` lives) and moved to ``device``.
    """
    coins = (torch.rand(shape, generator=generator) < teacher_forcing).to(device)
    coins[:, 0] = True
    return coins


def unroll(
    model: StepModel,
    state: Any,
    tgt_in: Tensor,
    *,
    teacher_forcing: float,
    generator: torch.Generator | None = None,
) -> UnrollOutput:
    """Run a decoder step by step, feeding the gold or its own previous argmax token (Bengio et al. 2015).

    Args:
        model: a ``StepModel``; its ``step`` is called T times (with gradients, if enabled).
        state: the model's initial decoder state (e.g. ``model.encode(src, src_lengths)``).
        tgt_in: (B, T) gold inputs [BOS] + y; t = 0 always feeds tgt_in[:, 0].
        teacher_forcing: eps in [0, 1], the probability of feeding the gold token at each later position.
        generator: for the coins; None = torch's global generator.
    Returns: UnrollOutput(logits (B, T, V), inputs (B, T)). With eps = 1 the logits are the teacher-forced ones;
        with eps = 0 inputs[:, 1:] is the greedy decode (continued past EOS) and logits its step logits.
    Raises:
        ConfigError: teacher_forcing outside [0, 1].
    """
    check_real("teacher_forcing", teacher_forcing, at_least=0.0, at_most=1.0)
    coins = gold_coins(tgt_in.shape, teacher_forcing, device=tgt_in.device, generator=generator)
    tokens, inputs, logits = tgt_in[:, 0], [], []
    for t in range(tgt_in.shape[1]):
        if t > 0:
            tokens = torch.where(coins[:, t], tgt_in[:, t], logits[-1].detach().argmax(dim=-1))
        step_logits, state = model.step(tokens, state)
        inputs.append(tokens)
        logits.append(step_logits)
    return UnrollOutput(torch.stack(logits, dim=1), torch.stack(inputs, dim=1))


def mix_inputs(
    tgt_in: Tensor,
    logits: Tensor,
    *,
    teacher_forcing: float,
    generator: torch.Generator | None = None,
) -> Tensor:
    """The second pass's inputs of two-pass scheduled sampling: gold or the first pass's previous argmax.

    Args:
        tgt_in: (B, T) gold inputs [BOS] + y.
        logits: (B, T, V) of a teacher-forced pass over tgt_in; position t - 1's argmax is the prediction fed at t.
        teacher_forcing: eps in [0, 1], the probability of keeping the gold token at each position t >= 1.
        generator: for the coins; None = torch's global generator.
    Returns: (B, T) long, tgt_in with positions replaced by predictions where the coin says so.
    Raises:
        ConfigError: teacher_forcing outside [0, 1].
    """
    check_real("teacher_forcing", teacher_forcing, at_least=0.0, at_most=1.0)
    predicted = torch.cat([tgt_in[:, :1], logits[:, :-1].argmax(dim=-1)], dim=1)  # (B, T), shifted right
    coins = gold_coins(tgt_in.shape, teacher_forcing, device=tgt_in.device, generator=generator)
    return torch.where(coins, tgt_in, predicted)
