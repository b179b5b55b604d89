"""The parts of a T5 stack (Raffel et al., 2020, sec. 2.1; the Mesh TensorFlow code it cites).

T5 departs from Vaswani et al. (2017) in four places, all here:
- Layer norm is RMS norm (Zhang & Sennrich, 2019): x * rsqrt(mean(x^2) + eps) * w, no mean subtraction and no bias
  (``torch.nn.RMSNorm``), applied before each sublayer (pre-norm) and once after the stack.
- Positions are a learned scalar per head added to the attention logits, looked up by the bucket of the relative
  distance j - i of key j from query i (``relative_position_bucket``). Only the first layer of a stack owns the
  table; its bias is shared by every layer of the stack. Cross-attention has none.
- Attention logits are not scaled by 1 / sqrt(Dh): the initialisation of W^Q absorbs it.
- No biases in any projection; the feed-forward is ReLU (v1.0) or gated GELU (v1.1, Shazeer 2020):
  W_o (gelu_tanh(W_0 x) * (W_1 x)).

Attention inputs are (B, T, D); inside, queries (B, N, T, Dh), keys and values (B, N, S, Dh). Position biases and
masks travel as one additive float tensor broadcastable to (B, N, T, S): the relative bias, and -inf where a query
may not attend a key.
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.nn.functional.attention import AttentionOutput
from seqlab.nn.kv_cache import KVCache
from seqlab.nn.transformer_sublayers import FeedForward, drop, feed_forward_sublayer

gelu_tanh = partial(F.gelu, approximate="tanh")  # Hugging Face's "gelu_new"


def relative_position_bucket(
    relative_position: Tensor, *, bidirectional: bool, num_buckets: int, max_distance: int
) -> Tensor:
    """The bucket of each relative position j - i (Raffel et al., 2020, sec. 2.1; Mesh TensorFlow).

    Bidirectional (encoder): half of the buckets for keys before the query, half for keys after it. Causal
    (decoder): keys after the query cannot be attended and share bucket 0 with distance 0. Within each half of
    n buckets, distances 0 .. n/2 - 1 get a bucket each; larger distances share buckets logarithmically spaced up
    to ``max_distance``, beyond which all fall into the last bucket.

    Inputs: relative_position: long tensor of any shape, key position minus query position.
    Outputs: long tensor of the same shape, values in [0, num_buckets).
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    # The clamp only keeps log() finite where the exact bucket is used anyway.
    log_ratio = torch.log(distance.clamp(min=max_exact).float() / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (log_ratio * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < max_exact, distance, large)


class RelativePositionBias(nn.Module):
    """The learned relative position bias of one stack: b[n, i, j] = table[bucket(j - i), n].

    Args:
        num_heads: N.  num_buckets, max_distance: as ``relative_position_bucket``.
        bidirectional: True in the encoder, False (causal buckets) in the decoder.
    Inputs: query_length T, key_length S; offset: absolute position of the first query (the keys start at 0).
    Outputs: (1, N, T, S) float bias added to the attention logits.
    """

    def __init__(self, num_heads: int, *, num_buckets: int, max_distance: int, bidirectional: bool) -> None:
        super().__init__()
        self.num_buckets, self.max_distance, self.bidirectional = num_buckets, max_distance, bidirectional
        self.embedding = nn.Embedding(num_buckets, num_heads)

    def forward(self, query_length: int, key_length: int, *, offset: int = 0) -> Tensor:
        device = self.embedding.weight.device
        queries = torch.arange(offset, offset + query_length, device=device)  # (T,)
        keys = torch.arange(key_length, device=device)  # (S,)
        buckets = relative_position_bucket(
            keys.unsqueeze(0) - queries.unsqueeze(1),  # (T, S), j - i
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )
        return self.embedding(buckets).permute(2, 0, 1).unsqueeze(0)  # (T, S, N) -> (1, N, T, S)

    def extra_repr(self) -> str:
        return f"num_buckets={self.num_buckets}, max_distance={self.max_distance}, bidirectional={self.bidirectional}"


class T5Attention(nn.Module):
    """Multi-head attention with an additive bias and no 1 / sqrt(Dh) scaling (Raffel et al., 2020):

        head_n = softmax(Q_n K_n^T + bias_n) V_n,   output = Concat(head_1 .. head_N) W^O

    computed by ``torch.nn.functional.scaled_dot_product_attention`` with ``scale=1`` and the bias as its float
    mask. seqlab's ``MultiHeadAttention`` ties Dh to D / N and takes boolean masks only, so T5's attention lives here.

    Args:
        d_model: D.  num_heads: N.  d_kv: Dh (N * Dh may differ from D).  dropout: on the attention weights.
    Inputs: x (B, T, D); bias: float, broadcastable to (B, N, T, S), -inf where a query may not attend;
        memory_kv: (k, v) from ``project_key_value`` for cross-attention, or None for self-attention on x;
        cache: a ``KVCache`` of earlier self-attention steps (x's keys and values are appended), or None.
    Outputs: ``AttentionOutput(output (B, T, D), weights None, the cache with x's keys and values appended, or
        None)``.
    """

    def __init__(self, d_model: int, num_heads: int, d_kv: int, *, dropout: float = 0.0) -> None:
        super().__init__()
        self.num_heads, self.d_kv = num_heads, d_kv
        inner = num_heads * d_kv
        self.q_proj = nn.Linear(d_model, inner, bias=False)  # W^Q
        self.k_proj = nn.Linear(d_model, inner, bias=False)  # W^K
        self.v_proj = nn.Linear(d_model, inner, bias=False)  # W^V
        self.out_proj = nn.Linear(inner, d_model, bias=False)  # W^O
        self.dropout = dropout

    def _heads(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, self.d_kv).transpose(1, 2)  # (B, N, T, Dh)

    def project_key_value(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """memory (B, S, D) -> keys and values (B, N, S, Dh) each, computed once per source for cross-attention."""
        return self._heads(self.k_proj(memory)), self._heads(self.v_proj(memory))

    def forward(
        self,
        x: Tensor,
        bias: Tensor,
        *,
        memory_kv: tuple[Tensor, Tensor] | None = None,
        cache: KVCache | None = None,
    ) -> AttentionOutput:
        q = self._heads(self.q_proj(x))  # (B, N, T, Dh)
        if memory_kv is None:
            k, v = self.project_key_value(x)  # (B, N, T, Dh) each
            if cache is not None:
                cache = cache.append(k, v)
                k, v = cache.keys, cache.values  # (B, N, S, Dh)
        else:
            k, v = memory_kv
        dropout_p = self.dropout if self.training else 0.0
        context = F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias.to(q.dtype), dropout_p=dropout_p, scale=1.0
        )  # (B, N, T, Dh)
        B, _, T, _ = context.shape
        merged = context.transpose(1, 2)  # (B, T, N, Dh)
        if torch.compiler.is_exporting():
            # The traced kernel's output is laid out (B, T, N, Dh), so a reshape is traced as a view; the exporter's
            # decomposition of the kernel lays it out (B, N, T, Dh), where that view fails. A copy serves both.
            merged = merged.clone(memory_format=torch.contiguous_format)
        output = self.out_proj(merged.reshape(B, T, -1))  # (B, T, N * Dh) -> (B, T, D)
        return AttentionOutput(output, None, cache)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, d_kv={self.d_kv}, dropout={self.dropout}"


class GatedFeedForward(nn.Module):
    """Gated-GELU feed-forward of T5 v1.1 (Shazeer, 2020, eq. 6: FFN_GEGLU):

        FFN(x) = W_2 Drop(gelu_tanh(W_gate x) * (W_1 x))

    Args: d_model: D.  d_ff: inner size.  dropout: on the inner activations.
    Inputs: x (..., D).  Outputs: (..., D).
    """

    def __init__(self, d_model: int, d_ff: int, *, dropout: float = 0.0) -> None:
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=False)  # W_gate (Hugging Face wi_0)
        self.linear1 = nn.Linear(d_model, d_ff, bias=False)  # W_1 (wi_1)
        self.linear2 = nn.Linear(d_ff, d_model, bias=False)  # W_2 (wo)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(drop(self.dropout, gelu_tanh(self.gate(x)) * self.linear1(x)))


class T5Layer(nn.Module):
    """One pre-norm T5 layer: self-attention, cross-attention (decoder only), feed-forward, each as
    x = x + Drop(F(RMSNorm(x))).

    Args:
        d_model, num_heads, d_kv, d_ff, dropout, layer_norm_eps: as ``T5Config``.
        feed_forward_proj: "relu" (``FeedForward`` without biases) or "gated-gelu" (``GatedFeedForward``).
        cross_attention: add the cross-attention sublayer (decoder layers).
    Inputs: x (B, T, D); self_bias: the self-attention bias and mask, broadcastable to (B, N, T, S_self);
        memory_kv: this layer's cross-attention keys and values (decoder); cross_bias: broadcastable to
        (B, N, T, S), -inf at padded source positions (decoder); cache: ``KVCache`` of self-attention, or None.
    Outputs: (x (B, T, D), the cache with x's keys and values appended, or None).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_kv: int,
        d_ff: int,
        *,
        dropout: float,
        layer_norm_eps: float,
        feed_forward_proj: str,
        cross_attention: bool,
    ) -> None:
        super().__init__()
        self.self_attn_norm = nn.RMSNorm(d_model, eps=layer_norm_eps)
        self.self_attn = T5Attention(d_model, num_heads, d_kv, dropout=dropout)
        if cross_attention:
            self.cross_attn_norm = nn.RMSNorm(d_model, eps=layer_norm_eps)
            self.cross_attn = T5Attention(d_model, num_heads, d_kv, dropout=dropout)
        self.ff_norm = nn.RMSNorm(d_model, eps=layer_norm_eps)
        self.feed_forward = (
            GatedFeedForward(d_model, d_ff, dropout=dropout)
            if feed_forward_proj == "gated-gelu"
            else FeedForward(d_model, d_ff, activation="relu", dropout=dropout, bias=False)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        self_bias: Tensor,
        *,
        memory_kv: tuple[Tensor, Tensor] | None = None,
        cross_bias: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> tuple[Tensor, KVCache | None]:
        attended, _, cache = self.self_attn(self.self_attn_norm(x), self_bias, cache=cache)
        x = x + drop(self.dropout, attended)
        if memory_kv is not None:
            crossed = self.cross_attn(self.cross_attn_norm(x), cross_bias, memory_kv=memory_kv).output
            x = x + drop(self.dropout, crossed)
        return feed_forward_sublayer(x, self.feed_forward, self.ff_norm, self.dropout, norm_first=True), cache
