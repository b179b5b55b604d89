"""Seq2vec pooling: one vector per sequence from a recurrent layer's per-step outputs, over the real steps only.

Every pooling takes h (B, T, C*H), the outputs of ``seqlab.nn.recurrent`` layers, and a keep mask (B, T) that is
True at real steps, and returns ``PoolingOutput(pooled (B, C*H), weights)``:

    last       s = [h_{n-1} fwd; h_0 bwd]                  (the layer's final state; n = the sequence's length)
    mean       s = (1/n) sum_{t real} h_t
    max        s_j = max_{t real} h_{tj}
    attention  s = sum_{t real} alpha_t h_t                 (Yang et al., 2016, Sec. 2.2; weights = alpha)
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
from torch import Tensor, nn

from seqlab.nn.attention import Attention

PoolingName = Literal["last", "mean", "max", "attention"]
POOLING_NAMES: tuple[str, ...] = ("last", "mean", "max", "attention")


class PoolingOutput(NamedTuple):
    """pooled (B, C*H): one vector per sequence; weights (B, T): attention weights, or None for other poolings."""

    pooled: Tensor
    weights: Tensor | None


def _check_inputs(h: Tensor, keep_mask: Tensor) -> None:
    """Raise ValueError unless h is (B, T, C*H) and keep_mask a bool (B, T) with a real step in every row."""
    if h.dim() != 3:
        raise ValueError(f"h must be (B, T, C*H), got shape {tuple(h.shape)}")
    if keep_mask.dtype != torch.bool:
        raise ValueError(f"keep_mask must be a bool tensor (True = real step), got {keep_mask.dtype}")
    B, T = h.shape[:2]
    if keep_mask.shape != (B, T):
        raise ValueError(f"keep_mask shape {tuple(keep_mask.shape)} != (B, T) = ({B}, {T})")
    if torch.compiler.is_exporting():
        return  # the mask's values are not known while exporting; the graph's caller checks them
    # A row without real steps has no last step, a 0/0 mean, an empty max and NaN attention weights.
    empty = (~keep_mask.any(dim=1)).nonzero()
    if len(empty):
        raise ValueError(f"keep_mask row {int(empty[0])} has no real step")


class LastPooling(nn.Module):
    """The last real state of each direction: what the recurrent layer's final state h_n holds.

    s = h_{n-1} for a unidirectional layer; s = [h_{n-1} fwd; h_0 bwd] for a bidirectional one, whose outputs
    concatenate [forward; backward] and whose backward direction ends at step 0. n is the sequence's length.

    Args:
        bidirectional: h holds [forward; backward] halves (C = 2).
    Inputs: h (B, T, C*H); keep_mask (B, T) bool, True on the first n steps of each row.
    Outputs: PoolingOutput(pooled (B, C*H), weights None).
    Raises:
        ValueError: h not 3-D; keep_mask not bool, not (B, T), with an empty row, or with padding before a real
            step; an odd feature size C*H when bidirectional. Messages show the numbers.
    """

    def __init__(self, *, bidirectional: bool) -> None:
        super().__init__()
        self.bidirectional = bidirectional

    def forward(self, h: Tensor, keep_mask: Tensor) -> PoolingOutput:
        _check_inputs(h, keep_mask)
        B, T, F = h.shape
        if self.bidirectional and F % 2:
            raise ValueError(f"bidirectional h needs an even feature size C*H, got {F}")
        lengths = keep_mask.sum(dim=1)  # (B,)
        prefix = torch.arange(T, device=h.device) < lengths.unsqueeze(1)  # (B, T)
        not_prefix = None if torch.compiler.is_exporting() else (keep_mask != prefix).any(dim=1).nonzero()
        if not_prefix is not None and len(not_prefix):  # (unchecked while exporting, as in _check_inputs)
            raise ValueError(f"keep_mask row {int(not_prefix[0])} has padding before a real step")
        last = h[torch.arange(B, device=h.device), lengths - 1]  # (B, C*H)
        if not self.bidirectional:
            return PoolingOutput(last, None)
        H = F // 2
        return PoolingOutput(torch.cat([last[:, :H], h[:, 0, H:]], dim=-1), None)

    def extra_repr(self) -> str:
        return f"bidirectional={self.bidirectional}"


class MeanPooling(nn.Module):
    """Masked mean over time: s = (1/n) sum_{t real} h_t, n = the number of real steps.

    Inputs: h (B, T, C*H); keep_mask (B, T) bool, True at real steps (any pattern).
    Outputs: PoolingOutput(pooled (B, C*H), weights None).
    Raises: ValueError if h is not 3-D or keep_mask is not a bool (B, T) tensor with a real step in every row.
    """

    def forward(self, h: Tensor, keep_mask: Tensor) -> PoolingOutput:
        _check_inputs(h, keep_mask)
        keep = keep_mask.unsqueeze(-1)  # (B, T, 1)
        # masked_fill, not multiplication: a non-finite value at a padded step must not reach the sum.
        total = h.masked_fill(~keep, 0.0).sum(dim=1)  # (B, C*H)
        return PoolingOutput(total / keep.sum(dim=1).to(h.dtype), None)


class MaxPooling(nn.Module):
    """Masked max over time: s_j = max_{t real} h_{tj} (Collobert et al., 2011, max-over-time).

    Padded steps are set to -inf first, so they never win, even where every real value is negative.

    Inputs: h (B, T, C*H); keep_mask (B, T) bool, True at real steps (any pattern).
    Outputs: PoolingOutput(pooled (B, C*H), weights None).
    Raises: ValueError if h is not 3-D or keep_mask is not a bool (B, T) tensor with a real step in every row.
    """

    def forward(self, h: Tensor, keep_mask: Tensor) -> PoolingOutput:
        _check_inputs(h, keep_mask)
        masked = h.masked_fill(~keep_mask.unsqueeze(-1), float("-inf"))  # (B, T, C*H)
        return PoolingOutput(masked.amax(dim=1), None)


class _ContextVectorAttention(Attention):
    """The HAN score e_s = q^T tanh(W k_s + b), where the query q is a learned context vector u_w.

    Subclassing ``Attention`` reuses its masked softmax and weighted sum.
    """

    def __init__(self, key_size: int, attention_size: int) -> None:
        super().__init__()
        self.key_proj = nn.Linear(key_size, attention_size)  # W, b

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        u = torch.tanh(self.key_proj(keys))  # (B, S, A): u_s
        return query @ u.transpose(1, 2)  # (B, T, A) @ (B, A, S) -> (B, T, S)


class AttentionPooling(nn.Module):
    """Attention pooling with a learned context vector u_w (Yang et al., 2016, HAN, Sec. 2.2 word attention).

    u_t = tanh(W h_t + b),   alpha_t = softmax_t(u_t^T u_w) over the real steps,   s = sum_t alpha_t h_t

    Args:
        input_size: C*H, features of each h_t.
        attention_size: A, size of u_t and of the context vector u_w.
    Inputs: h (B, T, C*H); keep_mask (B, T) bool, True at real steps (any pattern).
    Outputs: PoolingOutput(pooled (B, C*H), weights alpha (B, T)): rows sum to 1, exactly 0 at padded steps.
    Raises:
        ValueError: h not 3-D or h.shape[-1] != input_size; keep_mask not a bool (B, T) tensor with a real step
            in every row. Messages show the numbers.
    """

    def __init__(self, input_size: int, attention_size: int) -> None:
        super().__init__()
        self.input_size, self.attention_size = input_size, attention_size
        self.attention = _ContextVectorAttention(input_size, attention_size)
        # u_w, initialised like a Linear(attention_size, 1) weight so the first scores are O(1).
        bound = attention_size**-0.5
        self.context = nn.Parameter(torch.empty(attention_size).uniform_(-bound, bound))

    def forward(self, h: Tensor, keep_mask: Tensor) -> PoolingOutput:
        _check_inputs(h, keep_mask)
        if h.shape[-1] != self.input_size:
            raise ValueError(f"h feature size ({h.shape[-1]}) != input_size ({self.input_size})")
        query = self.context.expand(h.shape[0], -1)  # (B, A): the same u_w for every sequence
        pooled, weights, _ = self.attention(query, h, keep_mask=keep_mask)  # (B, C*H), (B, T)
        return PoolingOutput(pooled, weights)

    def extra_repr(self) -> str:
        return f"input_size={self.input_size}, attention_size={self.attention_size}"


Pooling = LastPooling | MeanPooling | MaxPooling | AttentionPooling


def make_pooling(
    name: str, input_size: int, *, bidirectional: bool = False, attention_size: int | None = None
) -> Pooling:
    """The pooling called ``name``: "last", "mean", "max" or "attention".

    Args:
        name: which pooling.
        input_size: C*H, features of each h_t (used by attention pooling).
        bidirectional: h holds [forward; backward] halves (used by last pooling).
        attention_size: A for attention pooling; None means input_size, as in Yang et al. (2016), where
            A = 2H = 100.
    Returns: the pooling module.
    Raises: ValueError if name is not one of the four.
    """
    if name == "last":
        return LastPooling(bidirectional=bidirectional)
    if name == "mean":
        return MeanPooling()
    if name == "max":
        return MaxPooling()
    if name == "attention":
        return AttentionPooling(input_size, input_size if attention_size is None else attention_size)
    raise ValueError(f"pooling ({name!r}) must be one of {', '.join(POOLING_NAMES)}")
