"""The three sublayers every Transformer layer is composed of (Vaswani et al., 2017, sec. 3.1-3.3).

Each sublayer F (self-attention, cross-attention, feed-forward) is wrapped in a residual connection and a layer
norm, either after the sum as in the paper (post-LN) or before F (pre-LN, Xiong et al., 2020, fig. 1):

    post-LN:  x = LN(x + Drop(F(x)))            pre-LN:  x = x + Drop(F(LN(x)))

Dropout sits where torch.nn.TransformerEncoderLayer / DecoderLayer put it: on the attention weights, after the
activation inside the feed-forward network, and on each sublayer's output before the residual sum.

The sublayers are functions over a layer's own modules (its attention or feed-forward network, layer norm and
dropout), so every layer composed of them keeps torch.nn's flat parameter names (``self_attn``, ``norm1``, ...)
and checkpoints written before the composition load unchanged.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.nn.functional.attention import AttentionOutput
from seqlab.nn.kv_cache import KVCache
from seqlab.nn.multi_head_attention import MultiHeadAttention

if TYPE_CHECKING:
    from seqlab.nn.positional import RotaryEmbedding

# "gelu_tanh" is GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel,
# 2016, sec. 2), which GPT-2 uses (Hugging Face's "gelu_new").
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": partial(F.gelu, approximate="tanh")}

MemoryKV = tuple[Tensor, Tensor]
"""Cross-attention keys and values of one decoder layer, each (B, N, S, Dh), from ``project_memory``."""


class FeedForward(nn.Module):
    """Position-wise feed-forward network (Vaswani et al., 2017, eq. 2).

    FFN(x) = W_2 Drop(act(W_1 x + b_1)) + b_2, with act = max(0, .) (ReLU, as in the paper) or GELU (exact, or
    its tanh approximation as in GPT-2).

    Args:
        d_model: D, features in and out.
        d_ff: inner size.
        activation: "relu", "gelu" (exact erf form, as torch.nn's "gelu") or "gelu_tanh" (the tanh approximation).
        dropout: probability of zeroing an inner activation in training.
        bias: learn b_1 and b_2.
    Inputs: x (..., D).
    Outputs: (..., D).
    Raises: ValueError if activation is not "relu", "gelu" or "gelu_tanh".
    """

    def __init__(
        self, d_model: int, d_ff: int, *, activation: str = "relu", dropout: float = 0.0, bias: bool = True
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(map(repr, ACTIVATIONS))}, got {activation!r}")
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)  # W_1, b_1
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)  # W_2, b_2
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(drop(self.dropout, ACTIVATIONS[self.activation](self.linear1(x))))

    def extra_repr(self) -> str:
        return f"activation={self.activation!r}"


def make_self_attention(
    d_model: int,
    num_heads: int,
    *,
    dropout: float,
    bias: bool,
    attention_kind: str,
    window: int | None,
    rotary: RotaryEmbedding | None,
) -> MultiHeadAttention:
    """A layer's self-attention. Only full attention forms a weight matrix to drop; the layer's dropout still acts
    on the sublayer outputs for the other kinds."""
    attention_dropout = dropout if attention_kind == "full" else 0.0
    return MultiHeadAttention(
        d_model,
        num_heads,
        dropout=attention_dropout,
        bias=bias,
        attention_kind=attention_kind,
        window=window,
        rotary=rotary,
    )


def drop(dropout: nn.Dropout, x: Tensor) -> Tensor:
    """dropout(x), skipping the module call where it is the identity (evaluation, or p = 0): a decoding step
    would otherwise pay one call per dropout for nothing."""
    return dropout(x) if dropout.training and dropout.p > 0.0 else x


def _residual(x: Tensor, fx: Tensor, norm: nn.LayerNorm, dropout: nn.Dropout, *, norm_first: bool) -> Tensor:
    """x + Drop(F(.)), normalised afterwards for post-LN."""
    x = x + drop(dropout, fx)
    return x if norm_first else norm(x)


def self_attention_sublayer(
    x: Tensor,
    attn: MultiHeadAttention,
    norm: nn.LayerNorm,
    dropout: nn.Dropout,
    *,
    norm_first: bool,
    keep_mask: Tensor | None = None,
    causal: bool = False,
    cache: KVCache | None = None,
    need_weights: bool = False,
) -> AttentionOutput:
    """Residual self-attention: x + Drop(SA(LN(x))) (pre-LN) or LN(x + Drop(SA(x))) (post-LN).

    Inputs: x (B, T, D); attn, norm, dropout: the layer's self-attention, layer norm and output dropout;
        keep_mask (B, S) bool, True at real keys (S counts cached keys too), or None; causal: position i sees only
        positions <= i (bottom-right aligned over a cache); cache: a ``KVCache`` of the earlier positions, or None;
        need_weights: also return the attention weights.
    Outputs: ``AttentionOutput(output (B, T, D), weights (B, N, T, S) or None, cache with x's keys and values
        appended, or None)``.
    Raises: ValueError as ``MultiHeadAttention``.
    """
    h = norm(x) if norm_first else x
    attended = attn(h, keep_mask=keep_mask, causal=causal, cache=cache, need_weights=need_weights)
    return attended._replace(output=_residual(x, attended.output, norm, dropout, norm_first=norm_first))


def cross_attention_sublayer(
    x: Tensor,
    memory: Tensor | MemoryKV,
    attn: MultiHeadAttention,
    norm: nn.LayerNorm,
    dropout: nn.Dropout,
    *,
    norm_first: bool,
    memory_keep_mask: Tensor | None = None,
    need_weights: bool = False,
    attn_bias: Tensor | None = None,
) -> AttentionOutput:
    """Residual cross-attention to a memory M: x + Drop(CA(LN(x), M)) (pre-LN) or LN(x + Drop(CA(x, M))).

    Inputs: x (B, T, D); memory (B, S, D), or its keys and values (B, N, S, Dh) each from
        ``attn.project_key_value``, computed once per source for every decoding step; attn, norm, dropout: the
        layer's cross-attention, layer norm and output dropout; memory_keep_mask (B, S) bool, True at real memory
        positions, or None; need_weights: also return the attention weights; attn_bias: float, broadcastable to
        (B, N, T, S), added to the scores (a position prior), or None.
    Outputs: ``AttentionOutput(output (B, T, D), weights (B, N, T, S) or None, None)``.
    Raises: ValueError as ``MultiHeadAttention``.
    """
    h = norm(x) if norm_first else x
    if isinstance(memory, Tensor):
        crossed = attn(h, memory, memory, keep_mask=memory_keep_mask, need_weights=need_weights, attn_bias=attn_bias)
    else:
        crossed = attn(
            h, keep_mask=memory_keep_mask, need_weights=need_weights, precomputed_kv=memory, attn_bias=attn_bias
        )
    return crossed._replace(output=_residual(x, crossed.output, norm, dropout, norm_first=norm_first))


def feed_forward_sublayer(
    x: Tensor, feed_forward: FeedForward, norm: nn.LayerNorm, dropout: nn.Dropout, *, norm_first: bool
) -> Tensor:
    """Residual feed-forward network: x + Drop(FFN(LN(x))) (pre-LN) or LN(x + Drop(FFN(x))) (post-LN).

    Inputs: x (..., D); feed_forward, norm, dropout: the layer's network, layer norm and output dropout.
    Outputs: (..., D).
    """
    h = norm(x) if norm_first else x
    return _residual(x, feed_forward(h), norm, dropout, norm_first=norm_first)
