"""The coverage penalty of Wu et al. (2016), Google's neural machine translation system, eq. 14: a finished
hypothesis whose attention never reached part of the source (a dropped end) scores lower.

    s(Y, X) = log p(Y | X) / lp(Y) + cp(X; Y),    cp(X; Y) = beta * sum_{i=1}^{|X|} log(min(sum_{j=1}^{|Y|} p_ij, 1))

p_ij is the attention weight of target step j on source position i (EOS's step included). ``CoverageStepModel``
wraps a model whose ``attention_step`` returns each step's weights and keeps their running sum in the state;
``coverage_penalty`` reads cp off that state, the ``finished_score`` that ``beam_search`` adds to a hypothesis'
normalised score when it finishes. The sum is floored at the smallest positive float before the log, so a source
position that received no attention at all costs beta * 87 nats (float32) rather than making the hypothesis
impossible.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor

from seqlab.decoding.interface import StepOutput, select_rows

__all__ = ["AttentionStepModel", "CoverageState", "CoverageStepModel", "coverage_penalty"]


class AttentionStepModel(Protocol):
    """A step model that also returns each step's attention weights: ``attention_step(tokens (B,), state) ->
    (StepOutput(logits (B, V), state), weights (B, S))``, and ``reorder_state`` as a ``StepModel``."""

    def attention_step(self, tokens: Tensor, state: Any) -> tuple[StepOutput, Tensor]: ...

    def reorder_state(self, state: Any, index: Tensor) -> Any: ...


class CoverageState(NamedTuple):
    """inner: the wrapped model's state; coverage (B, S): attention summed over the steps so far;
    src_keep_mask (B, S): True at real source positions."""

    inner: Any
    coverage: Tensor
    src_keep_mask: Tensor


class CoverageStepModel:
    """A ``StepModel`` over ``model`` whose state also sums the attention weights of every step (``CoverageState``).

    Args:
        model: an ``AttentionStepModel`` (``RNNSeq2Seq`` with attention, ``TransformerSeq2Seq``).
    """

    def __init__(self, model: AttentionStepModel) -> None:
        self.model = model

    def start(self, state: Any, src_keep_mask: Tensor) -> CoverageState:
        """The wrapped initial state with no attention spent yet; src_keep_mask (B, S)."""
        return CoverageState(state, torch.zeros(src_keep_mask.shape, device=src_keep_mask.device), src_keep_mask)

    def step(self, tokens: Tensor, state: CoverageState) -> StepOutput:
        """The model's step; the step's attention weights join the coverage. tokens (B,) -> logits (B, V)."""
        out, weights = self.model.attention_step(tokens, state.inner)
        return StepOutput(out.logits, state._replace(inner=out.state, coverage=state.coverage + weights))

    def reorder_state(self, state: CoverageState, index: Tensor) -> CoverageState:
        """Rows ``index`` (B',) of the wrapped state, the coverage and the mask."""
        return CoverageState(
            self.model.reorder_state(state.inner, index),
            select_rows(state.coverage, index),
            select_rows(state.src_keep_mask, index),
        )


def coverage_penalty(state: CoverageState, beta: float) -> Tensor:
    """cp(X; Y) = beta * sum_i log(min(coverage_i, 1)) over the real source positions (module docstring): (B,),
    <= 0 for beta >= 0, and 0 once every letter has received a total weight of at least 1.

    Raises: ValueError if beta < 0 (a bonus for attention left unspent would break beam search's early stop).
    """
    if beta < 0:
        raise ValueError(f"the coverage penalty's beta must be >= 0, got {beta}")
    coverage = state.coverage.clamp(min=torch.finfo(state.coverage.dtype).tiny, max=1.0)
    return beta * coverage.log().masked_fill(~state.src_keep_mask, 0.0).sum(dim=-1)
