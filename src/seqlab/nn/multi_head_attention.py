"""Scaled dot-product attention (Vaswani et al., 2017) and multi-head attention for Transformers.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                                  (Vaswani et al., eq. 1)
    MultiHead(Q, K, V) = Concat(head_1, ..., head_N) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

Inside attention, queries are (B, N, T, Dh) and keys/values (B, N, S, Dh). Boolean masks are keep-masks:
True where a query may attend a key.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from seqlab.nn.functional.attention import (
    AttentionOutput,
    linear_attention,
    local_attention,
    scaled_dot_product_attention,
)
from seqlab.nn.kv_cache import KVCache
from seqlab.validation import check_choice, check_int, check_probability

if TYPE_CHECKING:
    from seqlab.nn.positional import RotaryEmbedding


ATTENTION_KINDS = ("full", "local", "linear")
# Keyword names of the previous release -> today's; they keep working for one release with a DeprecationWarning.
# seqlab's key_padding_mask already meant True = real key, so it is keep_mask renamed, not inverted.
_RENAMED_FORWARD = {"key_padding_mask": "keep_mask", "positions_offset": "offset"}


def _renamed(values: dict[str, object], old_names: dict[str, object], renames: dict[str, str], where: str) -> None:
    """Move each deprecated keyword in ``old_names`` to its new name in ``values``, with a DeprecationWarning.

    Raises: TypeError for an unknown keyword, or for an old and a new name given together.
    """
    for old, value in old_names.items():
        if old not in renames:
            raise TypeError(f"{where} got an unexpected keyword argument {old!r}")
        new = renames[old]
        if values[new] is not None:
            raise TypeError(f"{where} got both {old!r} (deprecated) and {new!r}; pass only {new!r}")
        warnings.warn(f"{where}: {old!r} is deprecated, use {new!r}", DeprecationWarning, stacklevel=3)
        values[new] = value


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al., 2017, section 3.2.2) for self- and cross-attention.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_N) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),
    with the N heads' W_i^Q packed as one (D, D) projection (likewise K, V) and Dh = D / N.

    ``attention_kind`` picks the attention inside the heads: "full" is ``scaled_dot_product_attention`` (the fused SDPA
    path unless ``need_weights``, the reference path with weights otherwise); "local" (sliding window of
    ``window`` keys) and "linear" (Katharopoulos et al., 2020) call ``seqlab.nn.functional.attention``.

    Args:
        d_model: D, features of the queries and of the output.
        num_heads: N; must divide d_model.
        dropout: dropout probability on the attention weights while training (attention_kind "full" only: the
            other kinds form no weight matrix to drop).
        bias: biases in the four projections.
        kdim: features of the keys for cross-attention; D if None.
        vdim: features of the values for cross-attention; D if None.
        attention_kind: "full", "local" or "linear" (``kind=`` still works for one release, with a
            DeprecationWarning).
        window: keys per query for attention_kind "local" (required there, not allowed otherwise).
        rotary: a ``RotaryEmbedding`` (Su et al., 2021) applied to q and k of self-attention, or None.
    Inputs (``forward``):
        query: (B, T, D).
        key: (B, S, kdim), value: (B, S, vdim) for cross-attention; None for self-attention on ``query``.
            ``value`` defaults to ``key``.
        keep_mask: (B, S) bool, True where a key is real; with a cache, S counts the cached keys too.
        causal: query i attends key j only if j <= i + (S - T) (bottom-right aligned: works over a cache).
        need_weights: also return the per-head weights ("full" uses the reference path then, "local" builds
            them dense; "linear" has none and raises).
        cache: a ``KVCache`` for incremental self-attention: this call's keys and values are appended and
            attention runs over every cached key; gradients flow through it.
        offset: position of the first query for the rotary embedding; cache.length (or 0) if None.
        precomputed_kv: (k, v), each (B, N, S, Dh), from ``project_key_value``, so cross-attention projects a
            source once for all decoder steps; replaces key and value.
        attn_bias: float, broadcastable to (B, N, T, S), added to the scaled scores (attention_kind "full" only),
            e.g. ``seqlab.nn.alignment.monotonic_alibi_bias``; or None.
        The previous release's names ``key_padding_mask`` (same meaning as keep_mask: True = real key) and
        ``positions_offset`` still work for one release, with a DeprecationWarning.
    Outputs: ``AttentionOutput(output (B, T, D), weights (B, N, T, S) or None, cache or None)``.
    Raises:
        ValueError: if d_model is not divisible by num_heads, attention_kind is unknown, window does not fit
            attention_kind, dropout > 0 with attention_kind other than "full", need_weights with attention_kind
            "linear" or attn_bias with attention_kind other than "full", sizes are not integers >= 1, dropout is
            outside [0, 1), inputs have the wrong shape, a mask is not bool or its shape does not match (the
            message shows both shapes), or a cache / rotary embedding is used with cross-attention.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        attention_kind: str = "full",
        window: int | None = None,
        rotary: RotaryEmbedding | None = None,
        **deprecated: object,
    ) -> None:
        super().__init__()
        options: dict[str, object] = {"attention_kind": None if attention_kind == "full" else attention_kind}
        _renamed(options, deprecated, {"kind": "attention_kind"}, "MultiHeadAttention")
        kind = options["attention_kind"] or "full"
        check_int("d_model", d_model)
        check_int("num_heads", num_heads)
        check_probability("dropout", dropout)
        check_int("window", window, optional=True)
        if d_model % num_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        check_choice("attention_kind", kind, ATTENTION_KINDS)
        if kind == "local" and window is None:
            raise ValueError("attention_kind 'local' needs a window >= 1, got None")
        if kind != "local" and window is not None:
            raise ValueError(f"window ({window}) is only used by attention_kind 'local', got {kind!r}")
        if dropout > 0.0 and kind != "full":
            raise ValueError(f"attention dropout ({dropout}) needs attention_kind 'full', got {kind!r}")
        self.d_model, self.num_heads, self.head_dim = d_model, num_heads, d_model // num_heads
        self.kdim = d_model if kdim is None else kdim
        self.vdim = d_model if vdim is None else vdim
        self.dropout, self.attention_kind, self.window = dropout, kind, window
        self.rotary = rotary
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)  # W^Q of all heads
        self.k_proj = nn.Linear(self.kdim, d_model, bias=bias)  # W^K
        self.v_proj = nn.Linear(self.vdim, d_model, bias=bias)  # W^V
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform projections and zero biases, as torch.nn.MultiheadAttention."""
        for linear in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(linear.weight)
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)

    def _split_heads(self, x: Tensor) -> Tensor:
        B, L, _ = x.shape
        return x.view(B, L, self.num_heads, self.head_dim).transpose(1, 2)  # (B, N, L, Dh)

    def project_key_value(self, key: Tensor, value: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Project keys (B, S, kdim) and values (B, S, vdim; ``key`` if None) to per-head k, v (B, N, S, Dh).

        Raises: ValueError if the feature sizes are not (kdim, vdim) or key and value differ in (B, S).
        """
        value = key if value is None else value
        if key.dim() != 3 or key.shape[-1] != self.kdim:
            raise ValueError(f"key must be (B, S, kdim={self.kdim}), got shape {tuple(key.shape)}")
        if value.dim() != 3 or value.shape[-1] != self.vdim or value.shape[:2] != key.shape[:2]:
            raise ValueError(
                f"value must be (B, S, vdim) = {(*key.shape[:2], self.vdim)}, got shape {tuple(value.shape)}"
            )
        return self._split_heads(self.k_proj(key)), self._split_heads(self.v_proj(value))

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        keep_mask: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
        cache: KVCache | None = None,
        offset: int | None = None,
        precomputed_kv: tuple[Tensor, Tensor] | None = None,
        attn_bias: Tensor | None = None,
        **deprecated: object,
    ) -> AttentionOutput:
        if deprecated:
            renamed: dict[str, object] = {"keep_mask": keep_mask, "offset": offset}
            _renamed(renamed, deprecated, _RENAMED_FORWARD, "MultiHeadAttention.forward")
            keep_mask, offset = renamed["keep_mask"], renamed["offset"]  # type: ignore[assignment]
        if query.dim() != 3 or query.shape[-1] != self.d_model:
            raise ValueError(f"query must be (B, T, D={self.d_model}), got shape {tuple(query.shape)}")
        B, T, _ = query.shape
        self_attention = key is None and value is None and precomputed_kv is None
        if not self_attention and (cache is not None or self.rotary is not None):
            raise ValueError(
                "a KV cache and rotary embeddings are for self-attention: pass no key, value or precomputed_kv"
            )
        if precomputed_kv is not None and (key is not None or value is not None):
            raise ValueError("pass either key/value or precomputed_kv, not both")
        if attn_bias is not None and self.attention_kind != "full":
            raise ValueError(f"attn_bias needs attention_kind 'full', got {self.attention_kind!r}")

        q = self._split_heads(self.q_proj(query))  # (B, N, T, Dh)
        if precomputed_kv is not None:
            k, v = precomputed_kv
        elif self_attention:
            k, v = self.project_key_value(query)  # (B, N, T, Dh) each
        else:
            if key is None:
                raise ValueError("value was given without key")
            k, v = self.project_key_value(key, value)  # (B, N, S, Dh) each
        if self.rotary is not None:
            if offset is None:
                offset = cache.length if cache is not None else 0
            q, k = self.rotary(q, offset=offset), self.rotary(k, offset=offset)
        if cache is not None:
            cache = cache.append(k, v)
            k, v = cache.keys, cache.values  # (B, N, S, Dh) each, S = cached + T

        if keep_mask is not None:
            S = k.shape[2]
            if keep_mask.dtype != torch.bool:
                raise ValueError(f"keep_mask must be bool (True = real key), got {keep_mask.dtype}")
            if keep_mask.shape != (B, S):
                raise ValueError(f"keep_mask shape {tuple(keep_mask.shape)} != (B, S) = ({B}, {S})")
            keep_mask = keep_mask[:, None, None, :]  # (B, 1, 1, S)

        result = self._attend(
            q, k, v, keep_mask=keep_mask, causal=causal, need_weights=need_weights, attn_bias=attn_bias
        )
        output = result.output.transpose(1, 2).reshape(B, T, self.d_model)  # (B, T, D)
        return AttentionOutput(self.out_proj(output), result.weights, cache)

    def _attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        keep_mask: Tensor | None,
        causal: bool,
        need_weights: bool,
        attn_bias: Tensor | None,
    ) -> AttentionOutput:
        if self.attention_kind == "full":
            dropout_p = self.dropout if self.training else 0.0
            return scaled_dot_product_attention(
                q,
                k,
                v,
                keep_mask=keep_mask,
                causal=causal,
                dropout_p=dropout_p,
                need_weights=need_weights,
                attn_bias=attn_bias,
            )
        if self.attention_kind == "local":
            return local_attention(
                q, k, v, window=self.window, causal=causal, keep_mask=keep_mask, need_weights=need_weights
            )
        if need_weights:
            raise ValueError("attention_kind 'linear' forms no attention weights: need_weights must be False")
        return linear_attention(q, k, v, causal=causal, keep_mask=keep_mask)

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy a torch.nn.MultiheadAttention (packed in_proj or separate q/k/v weights; any batch_first).

        Raises: ValueError if the module uses add_bias_kv or add_zero_attn, which have no counterpart here.
        """
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("from_torch does not support add_bias_kv or add_zero_attn")
        weight = module.out_proj.weight
        mha = cls(
            module.embed_dim,
            module.num_heads,
            dropout=module.dropout,
            bias=module.in_proj_bias is not None,
            kdim=module.kdim,
            vdim=module.vdim,
        ).to(dtype=weight.dtype, device=weight.device)
        if module.in_proj_weight is not None:
            w_q, w_k, w_v = module.in_proj_weight.chunk(3)  # (D, D) each
        else:
            w_q, w_k, w_v = module.q_proj_weight, module.k_proj_weight, module.v_proj_weight
        with torch.no_grad():
            for linear, w in ((mha.q_proj, w_q), (mha.k_proj, w_k), (mha.v_proj, w_v)):
                linear.weight.copy_(w)
            mha.out_proj.weight.copy_(module.out_proj.weight)
            if module.in_proj_bias is not None:
                for linear, b in zip((mha.q_proj, mha.k_proj, mha.v_proj), module.in_proj_bias.chunk(3), strict=True):
                    linear.bias.copy_(b)
                mha.out_proj.bias.copy_(module.out_proj.bias)
        return mha

    def to_torch(self) -> nn.MultiheadAttention:
        """An equivalent torch.nn.MultiheadAttention with batch_first=True (its key_padding_mask is ~keep_mask:
        True = ignore).

        Raises: ValueError for attention_kind other than "full" or with a rotary embedding: torch.nn has neither.
        """
        if self.attention_kind != "full" or self.rotary is not None:
            raise ValueError(
                f"to_torch needs attention_kind 'full' without rotary, "
                f"got {self.attention_kind!r}, rotary {self.rotary}"
            )
        weight = self.out_proj.weight
        bias = self.out_proj.bias is not None
        module = nn.MultiheadAttention(
            self.d_model,
            self.num_heads,
            dropout=self.dropout,
            bias=bias,
            kdim=self.kdim,
            vdim=self.vdim,
            batch_first=True,
            device=weight.device,
            dtype=weight.dtype,
        )
        with torch.no_grad():
            if module.in_proj_weight is not None:
                module.in_proj_weight.copy_(torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]))
            else:
                module.q_proj_weight.copy_(self.q_proj.weight)
                module.k_proj_weight.copy_(self.k_proj.weight)
                module.v_proj_weight.copy_(self.v_proj.weight)
            module.out_proj.weight.copy_(self.out_proj.weight)
            if bias:
                module.in_proj_bias.copy_(torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]))
                module.out_proj.bias.copy_(self.out_proj.bias)
        return module

    def extra_repr(self) -> str:
        extra = f", window={self.window}" if self.window is not None else ""
        kind = f"attention_kind={self.attention_kind!r}"
        return f"d_model={self.d_model}, num_heads={self.num_heads}, dropout={self.dropout}, {kind}{extra}"
