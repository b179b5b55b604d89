"""Decoder-only Transformer blocks (GPT; Radford et al., 2018): causal self-attention with a KV cache, then a
feed-forward network, with no cross-attention, composed of the sublayers in ``transformer_sublayers.py``.

    post-LN:  x = LN_1(x + Drop(CSA(x)));     x = LN_2(x + Drop(FFN(x)))
    pre-LN:   x = x + Drop(CSA(LN_1(x)));     x = x + Drop(FFN(LN_2(x)))       (GPT-2, Radford et al., 2019)

The parameter names are those of ``TransformerEncoderLayer`` (``self_attn``, ``feed_forward``, ``norm1``,
``norm2``), so an encoder layer's state_dict loads into a decoder-only layer, which then computes what the encoder
layer computes with causal=True. Incremental decoding carries one immutable ``KVCache`` per layer: start from
``empty_caches``, feed the prompt, then the newest token(s), each time with the caches the previous call returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from seqlab.nn.kv_cache import KVCache
from seqlab.nn.transformer import LayerOutput, TransformerEncoderLayer, check_layers, empty_self_attention_caches


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
