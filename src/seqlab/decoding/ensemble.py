"""Ensemble decoding: N encoder-decoders that share a target vocabulary, searched as one ``StepModel``.

Two ways to combine the members' next-token distributions p_m(v | y_<t, x), m = 1..N, are standard:

    mean:        log p(v) = log (1/N) sum_m p_m(v)          (the mixture; fairseq's ``EnsembleModel``:
                                                             ``logsumexp(log_probs) - log N``)
    log_linear:  log p(v) = (1/N) sum_m log p_m(v) - log Z   (the renormalised product of experts; OpenNMT-py's
                                                             ``EnsembleGenerator`` averages log-softmax outputs)

``mean`` is the default, as in fairseq and in the G2P ensembles of Toshniwal & Livescu (2016). Each member keeps
its own state (its encoder outputs, hidden state or KV cache); the ensemble's state is the tuple of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, Protocol

import torch
from torch import Tensor

from seqlab.models.interfaces import StepModel, StepOutput
from seqlab.validation import check_choice

CombineName = Literal["mean", "log_linear"]
COMBINE_NAMES: tuple[CombineName, ...] = ("mean", "log_linear")
__all__ = ["COMBINE_NAMES", "CombineName", "EncoderDecoder", "EnsembleStepModel"]


class EncoderDecoder(StepModel, Protocol):
    """A ``StepModel`` whose initial state comes from ``encode(src (B, S), src_lengths (B,))``, as
    ``RNNSeq2Seq`` and ``TransformerSeq2Seq`` offer."""

    def encode(self, src: Tensor, src_lengths: Tensor) -> Any: ...


class EnsembleStepModel:
    """N encoder-decoders decoded together; greedy and beam search take it like any ``StepModel``.

    Args:
        members: the N >= 1 models, all over the same target vocabulary (ids mean the same symbols; the caller
            checks the vocabularies, this class checks that the logits have the same width V).
        combine: "mean" (log of the mean probability) or "log_linear" (mean of the log-probabilities,
            renormalised); see the module docstring.
    Inputs: ``encode(src (B, S), src_lengths (B,))`` -> a tuple of the N members' states;
        ``step(tokens (B,), state)`` -> StepOutput(logits (B, V), state), where logits are normalised
        log-probabilities in nats (so ``log_softmax`` leaves them unchanged);
        ``reorder_state(state, index (B',))`` -> each member's state reordered by that member.
    Raises: ValueError for no members or an unknown ``combine``; ``step`` raises ValueError when the members'
        logits differ in shape (the message shows the shapes).
    """

    def __init__(self, members: Sequence[EncoderDecoder], *, combine: CombineName = "mean") -> None:
        if not members:
            raise ValueError("an ensemble needs at least one member")
        check_choice("combine", combine, COMBINE_NAMES)
        self.members = tuple(members)
        self.combine = combine

    def encode(self, src: Tensor, src_lengths: Tensor) -> tuple[Any, ...]:
        return tuple(member.encode(src, src_lengths) for member in self.members)

    def step(self, tokens: Tensor, state: tuple[Any, ...]) -> StepOutput:
        outputs = [member.step(tokens, member_state) for member, member_state in zip(self.members, state, strict=True)]
        shapes = {tuple(out.logits.shape) for out in outputs}
        if len(shapes) > 1:
            raise ValueError(f"ensemble members' logits differ in shape: {sorted(shapes)}")
        dtype = torch.promote_types(outputs[0].logits.dtype, torch.float32)
        log_probs = torch.stack([torch.log_softmax(out.logits, dim=-1, dtype=dtype) for out in outputs])  # (N, B, V)
        if self.combine == "mean":
            combined = torch.logsumexp(log_probs, dim=0) - math.log(len(self.members))
        else:
            combined = torch.log_softmax(log_probs.mean(dim=0), dim=-1)
        return StepOutput(combined, tuple(out.state for out in outputs))

    def reorder_state(self, state: tuple[Any, ...], index: Tensor) -> tuple[Any, ...]:
        return tuple(
            member.reorder_state(member_state, index) for member, member_state in zip(self.members, state, strict=True)
        )
