"""Attention for RNN encoder-decoders: additive (Bahdanau), dot and scaled dot (Luong; Vaswani), bilinear.

The variants differ only in the score e_{ts} = score(q_t, k_s); ``Attention.forward`` turns scores into
weights and a context vector once for all of them:

    alpha_{ts} = softmax_s(e_{ts})  over the real source positions,      context_t = sum_s alpha_{ts} v_s

A row with no real source position gets zero weights and a zero context, the rule of every seqlab attention
module (``MultiHeadAttention`` and ``seqlab.nn.functional.attention`` too), so padded rows need no special case.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch
from torch import Tensor, nn

from seqlab.nn.functional.attention import AttentionOutput


def _check_feature_size(what: str, got: int, expected: int) -> None:
    if got != expected:
        raise ValueError(f"{what} feature size ({got}) != {what}_size ({expected})")


class Attention(nn.Module, ABC):
    """Shared forward of score-based attention; subclasses define ``score(query, keys) -> (B, T, S)``.

    alpha = softmax(score(q, K)) with masked positions set to -inf first (so they get exactly zero weight),
    context = alpha V.

    Inputs:
        query: (B, T, Hq), or (B, Hq) for a single decoder step.
        keys: (B, S, Hk).
        values: (B, S, Hv), defaults to ``keys``.
        keep_mask: (B, S) bool, True where a source position is real; None means every position is real.
    Outputs: ``AttentionOutput(output, weights)``: output the context vectors (B, T, Hv), weights (B, T, S), rows
        summing to 1 (all zeros, and a zero context, for a batch row whose mask has no real position); without
        the T dimension for a 2-D query.
    Raises: ValueError (message shows the numbers) if a tensor has the wrong rank, batch sizes differ,
        values do not match keys in (B, S), feature sizes do not fit the score, or mask is not a bool (B, S)
        tensor.
    """

    @abstractmethod
    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        """Unnormalised scores e (B, T, S) of query (B, T, Hq) against keys (B, S, Hk)."""

    def forward(
        self, query: Tensor, keys: Tensor, values: Tensor | None = None, *, keep_mask: Tensor | None = None
    ) -> AttentionOutput:
        if query.dim() not in (2, 3):
            raise ValueError(f"query must be (B, T, Hq) or (B, Hq), got shape {tuple(query.shape)}")
        if keys.dim() != 3:
            raise ValueError(f"keys must be (B, S, Hk), got shape {tuple(keys.shape)}")
        B, S = keys.shape[:2]
        if query.shape[0] != B:
            raise ValueError(f"query batch ({query.shape[0]}) != keys batch ({B})")
        values = keys if values is None else values
        if values.dim() != 3 or values.shape[:2] != (B, S):
            raise ValueError(f"values must be (B, S, Hv) with (B, S) = ({B}, {S}), got shape {tuple(values.shape)}")
        if keep_mask is not None:
            _check_keep_mask(keep_mask, B, S)

        single_step = query.dim() == 2
        if single_step:
            query = query.unsqueeze(1)  # (B, 1, Hq)
        scores = self.score(query, keys)  # (B, T, S)
        if keep_mask is not None:
            seen = keep_mask.any(dim=1)[:, None, None]  # (B, 1, 1): the row has a real position
            # An all-masked row is left unmasked, then zeroed: softmax(-inf, ..., -inf) would be NaN.
            scores = scores.masked_fill(~keep_mask.unsqueeze(1) & seen, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # (B, T, S)
        if keep_mask is not None:
            weights = weights * seen
        context = weights @ values  # (B, T, Hv)
        if single_step:
            return AttentionOutput(context.squeeze(1), weights.squeeze(1))
        return AttentionOutput(context, weights)


def _check_keep_mask(keep_mask: Tensor, B: int, S: int) -> None:
    if keep_mask.dtype != torch.bool:
        raise ValueError(f"keep_mask must be a bool tensor (True = real position), got {keep_mask.dtype}")
    if keep_mask.shape != (B, S):
        raise ValueError(f"keep_mask shape {tuple(keep_mask.shape)} != (B, S) = ({B}, {S})")


class AdditiveAttention(Attention):
    """Additive attention (Bahdanau, Cho & Bengio, 2015, eq. 6 and appendix A.1.2).

    e_{ts} = v^T tanh(W_q q_t + W_k k_s), without biases as in the paper.

    Args:
        query_size: Hq, features of the query (decoder state).
        key_size: Hk, features of each key (encoder output).
        attention_size: A, size of the hidden layer of the scoring network.
    Inputs / Outputs / Raises: as ``Attention``; also ValueError if Hq != query_size or Hk != key_size.
    """

    def __init__(self, query_size: int, key_size: int, attention_size: int) -> None:
        super().__init__()
        self.query_size, self.key_size, self.attention_size = query_size, key_size, attention_size
        self.query_proj = nn.Linear(query_size, attention_size, bias=False)  # W_q
        self.key_proj = nn.Linear(key_size, attention_size, bias=False)  # W_k
        self.v = nn.Linear(attention_size, 1, bias=False)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        _check_feature_size("query", query.shape[-1], self.query_size)
        _check_feature_size("key", keys.shape[-1], self.key_size)
        hidden = torch.tanh(self.query_proj(query).unsqueeze(2) + self.key_proj(keys).unsqueeze(1))  # (B, T, S, A)
        return self.v(hidden).squeeze(-1)  # (B, T, S)

    def extra_repr(self) -> str:
        return f"query_size={self.query_size}, key_size={self.key_size}, attention_size={self.attention_size}"


class DotProductAttention(Attention):
    """Dot-product attention (Luong et al., 2015, eq. 8 "dot"), optionally scaled (Vaswani et al., 2017).

    e_{ts} = q_t^T k_s, or q_t^T k_s / sqrt(d_k) with d_k = Hk when ``scaled``. No parameters.

    Args:
        scaled: divide by sqrt(d_k) so the scores' variance does not grow with the feature size.
    Inputs / Outputs / Raises: as ``Attention``; also ValueError if Hq != Hk.
    """

    def __init__(self, *, scaled: bool = False) -> None:
        super().__init__()
        self.scaled = scaled

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        if query.shape[-1] != keys.shape[-1]:
            Hq, Hk = query.shape[-1], keys.shape[-1]
            raise ValueError(f"dot-product attention needs query size == key size, got Hq={Hq}, Hk={Hk}")
        scores = query @ keys.transpose(1, 2)  # (B, T, S)
        return scores / math.sqrt(keys.shape[-1]) if self.scaled else scores

    def extra_repr(self) -> str:
        return f"scaled={self.scaled}"


class BilinearAttention(Attention):
    """Bilinear attention (Luong, Pham & Manning, 2015, eq. 8 "general").

    e_{ts} = q_t^T W k_s with W (Hq, Hk).

    Args:
        query_size: Hq, features of the query (decoder state).
        key_size: Hk, features of each key (encoder output).
    Inputs / Outputs / Raises: as ``Attention``; also ValueError if Hq != query_size or Hk != key_size.
    """

    def __init__(self, query_size: int, key_size: int) -> None:
        super().__init__()
        self.query_size, self.key_size = query_size, key_size
        self.key_proj = nn.Linear(key_size, query_size, bias=False)  # weight is W (Hq, Hk): W k_s

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        _check_feature_size("query", query.shape[-1], self.query_size)
        _check_feature_size("key", keys.shape[-1], self.key_size)
        return query @ self.key_proj(keys).transpose(1, 2)  # (B, T, Hq) @ (B, Hq, S) -> (B, T, S)

    def extra_repr(self) -> str:
        return f"query_size={self.query_size}, key_size={self.key_size}"
