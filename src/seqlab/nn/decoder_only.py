"""Decoder-only Transformer blocks (GPT; Radford et al., 2018): causal self-attention with a KV cache, then a
feed-forward network, with no cross-attention, composed of the sublayers in ``transformer_sublayers.py``.

    post-LN:  x = LN_1(x + Drop(CSA(x)));     x = LN_2(x + Drop(FFN(x)))
    pre-LN:   x = x + Drop(CSA(LN_1(x)));     x = x + Drop(FFN(LN_2(x)))       (GPT-2, Radford et al., 2019)

The parameter names are those of ``TransformerEncoderLayer`` (``self_attn``, ``feed_forward``, ``norm1``,
``norm2``), so an encoder layer's state_dict loads into a decoder-only layer, which then computes what the encoder
layer computes with causal=True. Incremental decoding carries one immutable ``KVCache`` per layer: start from
``empty_caches``, feed the prompt, then the newest token(s), each time with the caches the previous call returned.

``IncrementalStep`` is the fast path of one such call for a single new position (``forward`` is the reference):
at decoding sizes a step costs more in Python and dispatch than in arithmetic, so it runs the same equations as
plain tensor functions over weights gathered once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.nn.kv_cache import KVCache
from seqlab.nn.transformer import LayerOutput, TransformerEncoderLayer, check_layers, empty_self_attention_caches
from seqlab.nn.transformer_sublayers import ACTIVATIONS

if TYPE_CHECKING:
    from seqlab.nn.positional import RotaryEmbedding


class TransformerDecoderOnlyLayer(TransformerEncoderLayer):
    """Decoder-only (GPT) block: causal self-attention with an optional KV cache, then a feed-forward network.

    It is ``TransformerEncoderLayer`` (same arguments, sublayers and parameter names) with the causal mask always
    on: a GPT block differs from an encoder layer only in what each position may attend to. ``from_torch`` copies a
    torch.nn.TransformerEncoderLayer, which this layer then runs causally.

    Args:
        d_model, num_heads, d_ff, dropout, activation, norm_first, layer_norm_eps, bias, attention_kind, window,
            rotary: as ``TransformerEncoderLayer``.
    Inputs: x (B, T, D), the T newest positions; keep_mask (B, S) bool, True at real positions (S counts cached
        positions too), or None; cache: the self-attention KVCache of the earlier positions (``KVCache.empty``
        to start), or None to attend only to x. Causal masking is bottom-right aligned, so x's positions follow
        the cached ones.
    Outputs: ``LayerOutput(output (B, T, D), cache with x's keys and values appended, or None)``.
    Raises: ValueError for a bad activation, D not divisible by N, or a mask of the wrong shape (from
        ``MultiHeadAttention``).
    """

    def forward(  # type: ignore[override]  # causal is not an option here
        self, x: Tensor, *, keep_mask: Tensor | None = None, cache: KVCache | None = None
    ) -> LayerOutput:
        return super().forward(x, keep_mask=keep_mask, causal=True, cache=cache)


class DecoderOnlyOutput(NamedTuple):
    """output (B, T, D); caches: one KVCache per layer with this call's keys and values appended (None if none
    were given)."""

    output: Tensor
    caches: list[KVCache] | None


class TransformerDecoderOnly(nn.Module):
    """A stack of L ``TransformerDecoderOnlyLayer``, optionally followed by a layer norm (needed for pre-LN).

    y = LN_final(layer_L(... layer_1(x))), LN_final the identity when ``final_norm`` is None.

    Args:
        layers: the L decoder-only layers, in order (each with its own parameters).
        final_norm: the layer norm after the last layer; give one for pre-LN layers, None for post-LN.
    Inputs: x (B, T, D), the T newest positions; keep_mask (B, S) bool, True at real positions (S counts cached
        positions too), or None; caches: one KVCache per layer, or None to attend only to x.
    Outputs: ``DecoderOnlyOutput(output (B, T, D), caches or None)``.
    Raises: ValueError if layers is empty or holds something other than ``TransformerDecoderOnlyLayer``, or if
        caches does not hold one cache per layer; as the layers otherwise.
    """

    def __init__(
        self, layers: Iterable[TransformerDecoderOnlyLayer], *, final_norm: nn.LayerNorm | None = None
    ) -> None:
        super().__init__()
        self.layers = check_layers(layers, TransformerDecoderOnlyLayer)
        self.final_norm = final_norm

    def empty_caches(
        self, batch_size: int, *, dtype: torch.dtype | None = None, device: torch.device | None = None
    ) -> list[KVCache]:
        """One empty self-attention KVCache per layer (S = 0)."""
        return empty_self_attention_caches(self.layers, batch_size, dtype=dtype, device=device)

    def incremental_step(self) -> IncrementalStep | None:
        """The fast path of a one-position call with caches (``IncrementalStep``), or None where it does not apply:
        a dropout in effect (training with p > 0), or an attention kind other than "full"."""
        weights = []
        for layer in self.layers:
            attn, feed_forward = layer.self_attn, layer.feed_forward
            dropouts = (layer.dropout1, layer.dropout2, feed_forward.dropout)
            if attn.attention_kind != "full" or (
                layer.training and (attn.dropout > 0.0 or any(d.p > 0.0 for d in dropouts))
            ):
                return None
            weights.append(
                _LayerWeights(
                    norm_first=layer.norm_first,
                    norm1=_norm_weights(layer.norm1),
                    w_qkv=_stacked(attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight),
                    b_qkv=_stacked(attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias),
                    w_o=attn.out_proj.weight,
                    b_o=attn.out_proj.bias,
                    norm2=_norm_weights(layer.norm2),
                    w_1=feed_forward.linear1.weight,
                    b_1=feed_forward.linear1.bias,
                    w_2=feed_forward.linear2.weight,
                    b_2=feed_forward.linear2.bias,
                    activation=ACTIVATIONS[feed_forward.activation],
                    num_heads=attn.num_heads,
                    rotary=attn.rotary,
                )
            )
        return IncrementalStep(weights, None if self.final_norm is None else _norm_weights(self.final_norm))

    def forward(
        self, x: Tensor, *, keep_mask: Tensor | None = None, caches: Sequence[KVCache] | None = None
    ) -> DecoderOnlyOutput:
        L = len(self.layers)
        if caches is not None and len(caches) != L:
            raise ValueError(f"got {len(caches)} caches for a decoder of {L} layers")
        new_caches = []
        for i, layer in enumerate(self.layers):
            out = layer(x, keep_mask=keep_mask, cache=None if caches is None else caches[i])
            x = out.output
            new_caches.append(out.cache)
        x = x if self.final_norm is None else self.final_norm(x)
        return DecoderOnlyOutput(x, None if caches is None else new_caches)


class _NormWeights(NamedTuple):
    shape: tuple[int, ...]
    weight: Tensor | None
    bias: Tensor | None
    eps: float


def _norm_weights(norm: nn.LayerNorm) -> _NormWeights:
    return _NormWeights(tuple(norm.normalized_shape), norm.weight, norm.bias, norm.eps)


def _layer_norm(x: Tensor, norm: _NormWeights) -> Tensor:
    """``F.layer_norm`` without its Python wrapper's checks (a step calls it 2 L + 1 times)."""
    return torch.layer_norm(x, norm.shape, norm.weight, norm.bias, norm.eps)


class _LayerWeights(NamedTuple):
    """One layer's parameters as ``IncrementalStep`` reads them; w_qkv (3 D, D) and b_qkv (3 D,) stack W^Q, W^K,
    W^V (a copy), everything else is the layer's own parameter."""

    norm_first: bool
    norm1: _NormWeights
    w_qkv: Tensor
    b_qkv: Tensor | None
    w_o: Tensor
    b_o: Tensor | None
    norm2: _NormWeights
    w_1: Tensor
    b_1: Tensor | None
    w_2: Tensor
    b_2: Tensor | None
    activation: Callable[[Tensor], Tensor]
    num_heads: int
    rotary: RotaryEmbedding | None


def _stacked(*tensors: Tensor | None) -> Tensor | None:
    return None if tensors[0] is None else torch.cat([t.detach() for t in tensors])  # type: ignore[union-attr]


class IncrementalStep:
    """One new position per row through a ``TransformerDecoderOnly``: what ``decoder(x, keep_mask=keep_mask,
    caches=caches)`` computes for x (B, 1, D), without module calls and with one (3 D, D) product for q, k, v.

    Per layer (pre-LN; post-LN normalises after each sum instead), with the newest position's query attending every
    cached key, so no causal mask is built:
        [q; k; v] = LN_1(x) [W^Q; W^K; W^V]^T + b,   x = x + softmax(q K^T / sqrt(Dh)) V W^O + b^O,
        x = x + FFN(LN_2(x))                                                        (Vaswani et al., 2017, sec. 3)

    Build it with ``TransformerDecoderOnly.incremental_step()``. It is a snapshot of the weights at that moment
    (the stacked q/k/v matrix is a copy), like the KV caches computed with them: build a new one after changing
    the weights. It computes no gradient for the stacked projection; use ``forward`` to train.

    Inputs (``__call__``): x (B, 1, D), the newest position; caches: one KVCache per layer, S steps each;
        keep_mask (B, S + 1) bool, True at real positions, or None when all are real; the new position must be
        real (a query with no real key is the reference path's business).
    Outputs: ``DecoderOnlyOutput(output (B, 1, D), caches with S + 1 steps)``, final norm applied.
    Raises: ValueError if caches does not hold one cache per layer; as ``KVCache.append`` for a cache of the
        wrong shape or dtype.
    """

    def __init__(self, layers: Sequence[_LayerWeights], final_norm: _NormWeights | None) -> None:
        self.layers, self.final_norm = tuple(layers), final_norm

    def __call__(self, x: Tensor, *, caches: Sequence[KVCache], keep_mask: Tensor | None = None) -> DecoderOnlyOutput:
        if len(caches) != len(self.layers):
            raise ValueError(f"got {len(caches)} caches for a decoder of {len(self.layers)} layers")
        B, _, D = x.shape
        mask = None if keep_mask is None else keep_mask[:, None, None, :]  # (B, 1, 1, S + 1)
        new_caches = []
        for w, cache in zip(self.layers, caches, strict=True):
            N = w.num_heads
            h = _layer_norm(x, w.norm1) if w.norm_first else x
            qkv = F.linear(h, w.w_qkv, w.b_qkv).view(B, 3, N, D // N)  # (B, 3, N, Dh)
            q, k, v = qkv.unsqueeze(3).unbind(1)  # (B, N, 1, Dh) each
            if w.rotary is not None:
                q, k = w.rotary(q, offset=cache.length), w.rotary(k, offset=cache.length)
            cache = cache.append(k, v)
            new_caches.append(cache)
            attended = F.scaled_dot_product_attention(q, cache.keys, cache.values, attn_mask=mask)  # (B, N, 1, Dh)
            x = x + F.linear(attended.view(B, 1, D), w.w_o, w.b_o)
            x = x if w.norm_first else _layer_norm(x, w.norm1)
            h = _layer_norm(x, w.norm2) if w.norm_first else x
            x = x + F.linear(w.activation(F.linear(h, w.w_1, w.b_1)), w.w_2, w.b_2)
            x = x if w.norm_first else _layer_norm(x, w.norm2)
        if self.final_norm is not None:
            x = _layer_norm(x, self.final_norm)
        return DecoderOnlyOutput(x, new_caches)
