"""Transformer layers and stacks (Vaswani et al., 2017, sec. 3.1-3.3), post-LN and pre-LN, composed of the
sublayers in ``transformer_sublayers.py`` (residual self-attention, cross-attention and feed-forward):

    TransformerEncoderLayer      = self-attention (optional causal mask and KV cache) + feed-forward
    TransformerDecoderLayer      = causal self-attention (optional KV cache) + cross-attention + feed-forward
    TransformerDecoderOnlyLayer  = causal self-attention (optional KV cache) + feed-forward   (``decoder_only.py``)

Pre-LN stacks end with one more layer norm (``final_norm``), since their residual stream is never normalised.
Parameter names follow torch.nn's layers (``self_attn``, ``norm1``, ``dropout1``, ...).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.nn.kv_cache import KVCache
from seqlab.nn.multi_head_attention import MultiHeadAttention
from seqlab.nn.transformer_sublayers import (
    FeedForward,
    MemoryKV,
    cross_attention_sublayer,
    feed_forward_sublayer,
    make_self_attention,
    self_attention_sublayer,
)

if TYPE_CHECKING:
    from seqlab.nn.positional import RotaryEmbedding

_Layer = TypeVar("_Layer", "TransformerEncoderLayer", "TransformerDecoderLayer")


def _torch_activation(module: nn.Module) -> str:
    """The name of a torch.nn Transformer layer's activation; ValueError for one seqlab does not have."""
    activation = module.activation
    if activation is F.relu or isinstance(activation, nn.ReLU):
        return "relu"
    if activation is F.gelu or (isinstance(activation, nn.GELU) and activation.approximate == "none"):
        return "gelu"
    raise ValueError(f"{type(module).__name__}.activation must be relu or gelu, got {activation!r}")


def _layer_from_torch(cls: type[_Layer], module: nn.Module, torch_class: type[nn.Module]) -> _Layer:
    """Shared by the layers' ``from_torch``: read the configuration, then copy every weight, on module's
    device and dtype. torch's ``multihead_attn`` becomes ``cross_attn`` and ``linear1/2`` the feed-forward's."""
    if not isinstance(module, torch_class):
        raise ValueError(f"expected torch.nn.{torch_class.__name__}, got {type(module).__name__}")
    linear1 = module.linear1
    layer = cls(
        linear1.in_features,
        module.self_attn.num_heads,
        linear1.out_features,
        dropout=module.dropout.p,
        activation=_torch_activation(module),
        norm_first=module.norm_first,
        layer_norm_eps=module.norm1.eps,
        bias=linear1.bias is not None,
    ).to(device=linear1.weight.device, dtype=linear1.weight.dtype)
    layer.self_attn = MultiHeadAttention.from_torch(module.self_attn)
    if isinstance(module, nn.TransformerDecoderLayer):
        layer.cross_attn = MultiHeadAttention.from_torch(module.multihead_attn)
    copies = [(layer.feed_forward.linear1, module.linear1), (layer.feed_forward.linear2, module.linear2)]
    copies += [(norm, getattr(module, name)) for name, norm in layer.named_children() if name.startswith("norm")]
    with torch.no_grad():
        for ours, theirs in copies:
            ours.weight.copy_(theirs.weight)
            if theirs.bias is not None:
                ours.bias.copy_(theirs.bias)
    return layer


def empty_self_attention_caches(
    layers: Iterable[nn.Module],
    batch_size: int,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | None = None,
) -> list[KVCache]:
    """One empty KVCache (S = 0) for the ``self_attn`` of each layer, sized by its heads and head dimension."""
    attentions = [layer.self_attn for layer in layers]
    return [KVCache.empty(batch_size, a.num_heads, a.head_dim, dtype=dtype, device=device) for a in attentions]


class LayerOutput(NamedTuple):
    """output (B, T, D); cache: the self-attention KVCache with this call's keys and values appended (None if no
    cache was given)."""

    output: Tensor
    cache: KVCache | None


class TransformerEncoderLayer(nn.Module):
    """Transformer encoder layer: self-attention, then a feed-forward network (Vaswani et al., 2017, sec. 3.1).

    post-LN (norm_first=False, the paper):  x = LN_1(x + Drop(SA(x)));     x = LN_2(x + Drop(FFN(x)))
    pre-LN  (norm_first=True):              x = x + Drop(SA(LN_1(x)));     x = x + Drop(FFN(LN_2(x)))

    Args:
        d_model: D.
        num_heads: N; D must be divisible by N.
        d_ff: inner size of the feed-forward network.
        dropout: on the attention weights (attention_kind "full" only), inside the feed-forward network and on each
            sublayer's output.
        activation: "relu" or "gelu".
        norm_first: pre-LN instead of post-LN.
        layer_norm_eps: epsilon of both layer norms.
        bias: learn the biases of the projections, the feed-forward network and the layer norms.
        attention_kind: of the self-attention, as ``MultiHeadAttention``'s.
        window: of the self-attention, as ``MultiHeadAttention``'s.
        rotary: of the self-attention, as ``MultiHeadAttention``'s.
    Inputs: x (B, T, D); keep_mask (B, S) bool, True at real positions (S counts cached positions too), or None;
        causal: position i sees only positions <= i (for decoder-only use); cache: the self-attention KVCache of
        the earlier positions, or None.
    Outputs: ``LayerOutput(output (B, T, D), cache or None)``. Padded positions get values too; they never change
        the real positions.
    Raises:
        ValueError: for a bad activation, D not divisible by N, or a mask of the wrong shape (from
            ``MultiHeadAttention``).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        *,
        dropout: float = 0.1,
        activation: str = "relu",
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
        attention_kind: str = "full",
        window: int | None = None,
        rotary: RotaryEmbedding | None = None,
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = make_self_attention(
            d_model, num_heads, dropout=dropout, bias=bias, attention_kind=attention_kind, window=window, rotary=rotary
        )
        self.feed_forward = FeedForward(d_model, d_ff, activation=activation, dropout=dropout, bias=bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(
        self, x: Tensor, *, keep_mask: Tensor | None = None, causal: bool = False, cache: KVCache | None = None
    ) -> LayerOutput:
        norm_first = self.norm_first
        attended = self_attention_sublayer(
            x,
            self.self_attn,
            self.norm1,
            self.dropout1,
            norm_first=norm_first,
            keep_mask=keep_mask,
            causal=causal,
            cache=cache,
        )
        x = feed_forward_sublayer(attended.output, self.feed_forward, self.norm2, self.dropout2, norm_first=norm_first)
        return LayerOutput(x, attended.cache)

    @classmethod
    def from_torch(cls, module: nn.TransformerEncoderLayer) -> TransformerEncoderLayer:
        """A layer with the configuration, device, dtype and a copy of the weights of ``module``.

        batch_first does not matter: the weights are the same, and seqlab's layer is always batch-first.

        Raises:
            ValueError: if module is not a torch.nn.TransformerEncoderLayer or its activation is neither
                relu nor gelu.
        """
        return _layer_from_torch(cls, module, nn.TransformerEncoderLayer)


class DecoderLayerOutput(NamedTuple):
    """output (B, T, D); cache: the self-attention KVCache with this call's keys and values appended (None if
    no cache was given); cross_weights (B, N, T, S) cross-attention weights if requested, else None."""

    output: Tensor
    cache: KVCache | None
    cross_weights: Tensor | None


class TransformerDecoderLayer(nn.Module):
    """Transformer decoder layer: causal self-attention, cross-attention to the encoder memory, feed-forward
    network (Vaswani et al., 2017, sec. 3.1).

    post-LN: x = LN_1(x + Drop(SA(x))); x = LN_2(x + Drop(CA(x, M))); x = LN_3(x + Drop(FFN(x)))
    pre-LN:  x = x + Drop(SA(LN_1(x))); x = x + Drop(CA(LN_2(x), M)); x = x + Drop(FFN(LN_3(x)))

    For incremental decoding the self-attention keys and values of earlier steps live in an explicit ``KVCache``
    that is passed in and returned, and the cross-attention keys and values, which depend only on the memory M,
    can be computed once per source with ``project_memory`` and passed in place of M.

    d_model, num_heads, d_ff, dropout, activation, norm_first, layer_norm_eps and bias are as for
    ``TransformerEncoderLayer``; attention_kind, window and rotary are too, for the self-attention only.
    Cross-attention is always full and without rotary positions: target and source positions are not on one axis.

    Inputs:
        x: (B, T, D), the T newest target positions.
        memory: encoder output (B, S, D), or its keys and values from ``project_memory``.
        memory_keep_mask: (B, S) bool, True at real source positions, or None.
        cache: self-attention KVCache holding the earlier positions (``KVCache.empty`` to start), or None to
            attend only to x. Causal masking is bottom-right aligned, so x's positions follow the cached ones.
        need_weights: also return the cross-attention weights.
        cross_attn_bias: float, broadcastable to (B, N, T, S), added to the cross-attention scores (a position
            prior such as ``seqlab.nn.alignment.monotonic_alibi_bias``), or None.
    Outputs: ``DecoderLayerOutput(output (B, T, D), cache, cross_weights (B, N, T, S) or None)``.
    Raises:
        ValueError: as ``TransformerEncoderLayer``, and (from ``MultiHeadAttention`` / ``KVCache``) for a
            memory mask of the wrong shape or a cache too short for T more positions.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        *,
        dropout: float = 0.1,
        activation: str = "relu",
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
        attention_kind: str = "full",
        window: int | None = None,
        rotary: RotaryEmbedding | None = None,
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = make_self_attention(
            d_model, num_heads, dropout=dropout, bias=bias, attention_kind=attention_kind, window=window, rotary=rotary
        )
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout, bias=bias)
        self.feed_forward = FeedForward(d_model, d_ff, activation=activation, dropout=dropout, bias=bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def project_memory(self, memory: Tensor) -> MemoryKV:
        """Cross-attention keys and values (B, N, S, Dh) of memory (B, S, D), to compute once per source."""
        return self.cross_attn.project_key_value(memory, memory)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | MemoryKV,
        *,
        memory_keep_mask: Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
        cross_attn_bias: Tensor | None = None,
    ) -> DecoderLayerOutput:
        norm_first = self.norm_first
        attended = self_attention_sublayer(
            x, self.self_attn, self.norm1, self.dropout1, norm_first=norm_first, causal=True, cache=cache
        )
        crossed = cross_attention_sublayer(
            attended.output,
            memory,
            self.cross_attn,
            self.norm2,
            self.dropout2,
            norm_first=norm_first,
            memory_keep_mask=memory_keep_mask,
            need_weights=need_weights,
            attn_bias=cross_attn_bias,
        )
        x = feed_forward_sublayer(crossed.output, self.feed_forward, self.norm3, self.dropout3, norm_first=norm_first)
        return DecoderLayerOutput(x, attended.cache, crossed.weights)

    @classmethod
    def from_torch(cls, module: nn.TransformerDecoderLayer) -> TransformerDecoderLayer:
        """A layer with the configuration, device, dtype and a copy of the weights of ``module`` (its
        ``multihead_attn`` becomes ``cross_attn``).

        Raises:
            ValueError: if module is not a torch.nn.TransformerDecoderLayer or its activation is neither
                relu nor gelu.
        """
        return _layer_from_torch(cls, module, nn.TransformerDecoderLayer)


def check_layers(layers: Iterable[nn.Module], kind: type[nn.Module]) -> nn.ModuleList:
    """The layers of a stack as a ModuleList; ValueError if there are none or one is not a ``kind``."""
    layers = nn.ModuleList(layers)
    if len(layers) == 0:
        raise ValueError(f"a stack needs at least one {kind.__name__}, got none")
    wrong = [type(layer).__name__ for layer in layers if not isinstance(layer, kind)]
    if wrong:
        raise ValueError(f"every layer must be a {kind.__name__}, got {', '.join(wrong)}")
    return layers


class TransformerEncoder(nn.Module):
    """A stack of L ``TransformerEncoderLayer``, optionally followed by a layer norm (needed for pre-LN).

    y = LN_final(layer_L(... layer_1(x))), LN_final the identity when ``final_norm`` is None.

    Build one from a layer factory:
    ``TransformerEncoder([TransformerEncoderLayer(D, N, d_ff, norm_first=True) for _ in range(L)],
    final_norm=nn.LayerNorm(D))``.

    Args:
        layers: the L encoder layers, in order (each with its own parameters).
        final_norm: the layer norm after the last layer; give one for pre-LN layers, None for post-LN.
    Inputs: x (B, S, D); keep_mask (B, S) bool, True at real positions, or None; causal as for the layers.
    Outputs: (B, S, D).
    Raises: ValueError if layers is empty or holds something other than ``TransformerEncoderLayer``.
    """

    def __init__(self, layers: Iterable[TransformerEncoderLayer], *, final_norm: nn.LayerNorm | None = None) -> None:
        super().__init__()
        self.layers = check_layers(layers, TransformerEncoderLayer)
        self.final_norm = final_norm

    def forward(self, x: Tensor, *, keep_mask: Tensor | None = None, causal: bool = False) -> Tensor:
        for layer in self.layers:
            x = layer(x, keep_mask=keep_mask, causal=causal).output
        return x if self.final_norm is None else self.final_norm(x)

    @classmethod
    def from_torch(cls, module: nn.TransformerEncoder) -> TransformerEncoder:
        """A stack with copies of the layers and final norm (``module.norm``) of ``module``."""
        norm = None if module.norm is None else copy.deepcopy(module.norm)
        return cls([TransformerEncoderLayer.from_torch(layer) for layer in module.layers], final_norm=norm)


class DecoderOutput(NamedTuple):
    """output (B, T, D); caches: one updated KVCache per layer (None if none were given); cross_weights: one
    (B, N, T, S) tensor per layer if requested, else None."""

    output: Tensor
    caches: list[KVCache] | None
    cross_weights: list[Tensor] | None


class TransformerDecoder(nn.Module):
    """A stack of L ``TransformerDecoderLayer``, optionally followed by a layer norm (needed for pre-LN).

    y = LN_final(layer_L(... layer_1(x, M) ..., M)), LN_final the identity when ``final_norm`` is None.

    Incremental decoding: start from ``empty_caches``, compute the memory's keys and values once with
    ``project_memory``, then feed the newest token(s) each step with the caches the previous step returned.

    Args:
        layers: the L decoder layers, in order.
        final_norm: the layer norm after the last layer; give one for pre-LN layers, None for post-LN.
    Inputs:
        x: (B, T, D), the T newest target positions.
        memory: encoder output (B, S, D), or the per-layer keys and values from ``project_memory``.
        memory_keep_mask: (B, S) bool, True at real source positions, or None.
        caches: one self-attention KVCache per layer, or None to attend only to x.
        need_weights: also return every layer's cross-attention weights.
        cross_attn_bias: float, broadcastable to (B, N, T, S), added to every layer's cross-attention scores, or
            None.
    Outputs: ``DecoderOutput(output (B, T, D), caches, cross_weights)``.
    Raises:
        ValueError: if layers is empty or holds something other than ``TransformerDecoderLayer``, or if
            memory or caches are lists whose length is not L; as the layers otherwise.
    """

    def __init__(self, layers: Iterable[TransformerDecoderLayer], *, final_norm: nn.LayerNorm | None = None) -> None:
        super().__init__()
        self.layers = check_layers(layers, TransformerDecoderLayer)
        self.final_norm = final_norm

    def empty_caches(
        self, batch_size: int, *, dtype: torch.dtype | None = None, device: torch.device | None = None
    ) -> list[KVCache]:
        """One empty self-attention KVCache per layer (S = 0)."""
        return empty_self_attention_caches(self.layers, batch_size, dtype=dtype, device=device)

    def project_memory(self, memory: Tensor) -> list[MemoryKV]:
        """Every layer's cross-attention keys and values (B, N, S, Dh) of memory (B, S, D)."""
        return [layer.project_memory(memory) for layer in self.layers]

    def forward(
        self,
        x: Tensor,
        memory: Tensor | Sequence[MemoryKV],
        *,
        memory_keep_mask: Tensor | None = None,
        caches: Sequence[KVCache] | None = None,
        need_weights: bool = False,
        cross_attn_bias: Tensor | None = None,
    ) -> DecoderOutput:
        L = len(self.layers)
        if not isinstance(memory, Tensor) and len(memory) != L:
            raise ValueError(f"memory holds keys and values for {len(memory)} layers, the decoder has {L}")
        if caches is not None and len(caches) != L:
            raise ValueError(f"got {len(caches)} caches for a decoder of {L} layers")
        new_caches, weights = [], []
        for i, layer in enumerate(self.layers):
            layer_memory = memory if isinstance(memory, Tensor) else memory[i]
            cache = None if caches is None else caches[i]
            out = layer(
                x,
                layer_memory,
                memory_keep_mask=memory_keep_mask,
                cache=cache,
                need_weights=need_weights,
                cross_attn_bias=cross_attn_bias,
            )
            x = out.output
            new_caches.append(out.cache)
            weights.append(out.cross_weights)
        x = x if self.final_norm is None else self.final_norm(x)
        return DecoderOutput(x, None if caches is None else new_caches, weights if need_weights else None)

    @classmethod
    def from_torch(cls, module: nn.TransformerDecoder) -> TransformerDecoder:
        """A stack with copies of the layers and final norm (``module.norm``) of ``module``."""
        norm = None if module.norm is None else copy.deepcopy(module.norm)
        return cls([TransformerDecoderLayer.from_torch(layer) for layer in module.layers], final_norm=norm)
