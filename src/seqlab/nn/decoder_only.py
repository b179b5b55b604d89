"""Decoder-only Transformer blocks (GPT; Radford et al., 2018): causal self-attention with a KV cache, then a
feed-forward network, with no cross-attention, composed of the sublayers in ``transformer_sublayers.py``.

    post-LN:  x = LN_1(x + Drop(CSA(x)));     x = LN_2(x + Drop(FFN(x)))
    pre-LN:   x = x + Drop(CSA(LN_1(x)));     x = x + Drop(FFN(LN_2(x)))       (GPT-2, Radford et al., 2019)

The parameter names are those of ``TransformerEncoderLayer`` (``self_attn``, ``feed_forward``, ``norm1``,
``norm2``), so an encoder layer's state_dict loads into a decoder-only layer, which then computes what the encoder
layer computes with causal=True. Incremental decoding carries one immutable ``KVCache`` per layer: start from
``empty_caches``, feed the prompt, then the newest token(s), each time with the caches the previous call returned.

``IncrementalStep`` is the fast path of one such call for a single new position (``forward`` is the reference):
at decoding sizes a step costs more in Python and dispatch than in arithmetic, so it runs the same equations
without the layers' module calls, over the modules the decoder holds at that call (plain Linear and LayerNorm
leaves from their current parameters, anything else called as a module), and calls the layers it cannot inline.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.nn import direct_calls
from seqlab.nn.direct_calls import is_plain
from seqlab.nn.kv_cache import KVCache, StaticKVCache
from seqlab.nn.multi_head_attention import MultiHeadAttention
from seqlab.nn.transformer import LayerOutput, TransformerEncoderLayer, check_layers, empty_self_attention_caches
from seqlab.nn.transformer_sublayers import ACTIVATIONS, FeedForward


class TransformerDecoderOnlyLayer(TransformerEncoderLayer):
    """Decoder-only (GPT) block: causal self-attention with an optional KV cache, then a feed-forward network.

    It is ``TransformerEncoderLayer`` (same arguments, sublayers and parameter names) with the causal mask always
    on: a GPT block differs from an encoder layer only in what each position may attend to. ``from_torch`` copies a
    torch.nn.TransformerEncoderLayer, which this layer then runs causally.

    Its arguments (d_model, num_heads, d_ff, dropout, activation, norm_first, layer_norm_eps, bias, attention_kind,
    window, rotary) are ``TransformerEncoderLayer``'s.

    Inputs: x (B, T, D), the T newest positions; keep_mask (B, S) bool, True at real positions (S counts cached
        positions too), or None; cache: the self-attention KVCache of the earlier positions (``KVCache.empty``
        to start), or None to attend only to x. Causal masking is bottom-right aligned, so x's positions follow
        the cached ones.
    Outputs: ``LayerOutput(output (B, T, D), cache with x's keys and values appended, or None)``.
    Raises:
        ValueError: for a bad activation, D not divisible by N, or a mask of the wrong shape (from
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
        positions too), or None; caches: one KVCache per layer, or None to attend only to x; outputs_to_keep: n in
        [1, T], the last n positions whose outputs are wanted, or None for all T. With n < T the last layer runs
        its full-attention layer on those n positions only, the earlier ones reaching it as keys and values (a
        cache of them, ``_last_layer_tail``): the same outputs at those positions, up to float rounding, for
        about (T - n) / T of one layer's work less (whole-file scoring by a sliding window scores only the tail of
        each window). A last layer of another attention kind runs on all T positions and its output is sliced.
    Outputs: ``DecoderOnlyOutput(output (B, n, D), caches or None)``; the caches hold all T positions.
    Raises:
        ValueError: if layers is empty or holds something other than ``TransformerDecoderOnlyLayer``, if caches
            does not hold one cache per layer, or outputs_to_keep is not None or an integer in [1, T]; as the
            layers otherwise.
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

    def incremental_step(self, *, derive: bool = True) -> IncrementalStep | None:
        """The fast path of a one-position call with caches (``IncrementalStep``), or None where no layer could
        take it: a dropout in effect (training with p > 0), or an attention kind other than "full". derive: as
        ``IncrementalStep``'s (False for a step made afresh at every position)."""
        if not any(_inlinable(layer) for layer in self.layers):
            return None
        return IncrementalStep(self, derive=derive)

    def forward(
        self,
        x: Tensor,
        *,
        keep_mask: Tensor | None = None,
        caches: Sequence[KVCache] | None = None,
        outputs_to_keep: int | None = None,
    ) -> DecoderOnlyOutput:
        L, T = len(self.layers), x.shape[1]
        if caches is not None and len(caches) != L:
            raise ValueError(f"got {len(caches)} caches for a decoder of {L} layers")
        if outputs_to_keep is not None and (
            isinstance(outputs_to_keep, bool) or not isinstance(outputs_to_keep, int) or not 1 <= outputs_to_keep <= T
        ):
            raise ValueError(f"outputs_to_keep ({outputs_to_keep!r}) must be None or an integer in [1, T] = [1, {T}]")
        new_caches = []
        for i, layer in enumerate(self.layers):
            cache = None if caches is None else caches[i]
            if i == L - 1 and outputs_to_keep is not None and outputs_to_keep < T:
                if layer.self_attn.attention_kind == "full":
                    out = _last_layer_tail(layer, x, outputs_to_keep, keep_mask=keep_mask, cache=cache)
                else:
                    out = layer(x, keep_mask=keep_mask, cache=cache)
                    out = out._replace(output=out.output[:, T - outputs_to_keep :])
            else:
                out = layer(x, keep_mask=keep_mask, cache=cache)
            x = out.output
            new_caches.append(out.cache)
        x = x if self.final_norm is None else self.final_norm(x)
        return DecoderOnlyOutput(x, None if caches is None else new_caches)


def _last_layer_tail(
    layer: TransformerDecoderOnlyLayer,
    x: Tensor,
    n: int,
    *,
    keep_mask: Tensor | None = None,
    cache: KVCache | None = None,
) -> LayerOutput:
    """A full-attention decoder-only layer's output at the last n of x's T positions only.

    The first T - n positions are needed there only as keys and values: they are normalised (pre-LN) and
    projected to keys and values (rotary positions from the cache's length), appended to ``cache`` (an empty one if
    None), and the layer runs on the last n positions over that cache, which is what the layer computes at those
    positions on all T (causal attention over a cache is bottom-right aligned). Their queries, attention output,
    residuals and feed-forward network are not computed for the first T - n.

    Inputs: layer: a ``TransformerDecoderOnlyLayer`` of attention_kind "full"; x (B, T, D); n in [1, T);
        keep_mask (B, S) bool over the cached and all T positions, or None; cache: the layer's KVCache of the
        earlier positions, or None.
    Outputs: ``LayerOutput(output (B, n, D), cache with all T positions appended, or None if cache was None)``.
    """
    T = x.shape[1]
    head, tail = x[:, : T - n], x[:, T - n :]
    attn = layer.self_attn
    k, v = attn.project_key_value(layer.norm1(head) if layer.norm_first else head)  # (B, N, T - n, Dh) each
    start = cache
    if start is None:
        start = KVCache.empty(x.shape[0], attn.num_heads, attn.head_dim, dtype=k.dtype, device=k.device)
    if attn.rotary is not None:
        k = attn.rotary(k, offset=start.length)
    out = layer(tail, keep_mask=keep_mask, cache=start.append(k, v))
    return out if cache is not None else out._replace(cache=None)


def _inlinable(layer: nn.Module) -> bool:
    """True when ``IncrementalStep`` may run this layer's equations instead of calling it: the layer, its attention
    and its feed-forward network are exactly the classes whose equations it runs, with no hooks, full attention,
    and no dropout in effect. Its Linear and LayerNorm leaves are checked where they are called
    (``seqlab.nn.direct_calls``)."""
    if not is_plain(layer, TransformerDecoderOnlyLayer):
        return False
    modules = layer._modules  # not layer.self_attn: see seqlab.nn.direct_calls
    attn, feed_forward = modules["self_attn"], modules["feed_forward"]
    if not (is_plain(attn, MultiHeadAttention) and is_plain(feed_forward, FeedForward)):
        return False
    if attn.attention_kind != "full":
        return False
    dropouts = (modules["dropout1"], modules["dropout2"], feed_forward._modules["dropout"])
    return not (layer.training and (attn.dropout > 0.0 or any(d.p > 0.0 for d in dropouts)))


class IncrementalStep:
    """One new position per row through a ``TransformerDecoderOnly``: what ``decoder(x, keep_mask=keep_mask,
    caches=caches)`` computes for x (B, 1, D), without the layers' module calls.

    Per layer (pre-LN; post-LN normalises after each sum instead), with the newest position's query attending every
    cached key, so no causal mask is built:
        q, k, v = LN_1(x) W^Q + b^Q, LN_1(x) W^K + b^K, LN_1(x) W^V + b^V,
        x = x + softmax(q K^T / sqrt(Dh)) V W^O + b^O,   x = x + FFN(LN_2(x))    (Vaswani et al., 2017, sec. 3)

    It holds the decoder, not its weights: every call reads the modules the decoder holds then. A layer runs these
    equations only while ``_inlinable`` (exactly a ``TransformerDecoderOnlyLayer`` of plain sublayers, full
    attention, no dropout in effect), else the layer itself is called; within it, each Linear and LayerNorm is
    computed functionally from its current parameters when it is exactly ``nn.Linear`` / ``nn.LayerNorm`` without
    hooks, else called (a LoRA wrapper, a quantized Linear). So the result is the module path's for whatever the
    decoder holds, and a weight changed after the prompt is used by the next step. ``module_calls`` names what is
    called as a module.

    On the CPU, at one row (B = 1) the widening products, q, k and v stacked and the first feed-forward layer, run
    from transposed copies of their weights, and at a few rows (2 to ``direct_calls.FEW_ROWS``: beam search's) q, k
    and v run as one product over their weights stacked (``direct_calls.stacked_linear``); ``derived`` keeps those
    copies for the steps of this object and rebuilds them when a weight changes (``direct_calls.DerivedWeights``):
    build one per decoding run, as ``GPT.prefill`` does.

    Rows whose caches hold their first steps as copies of one another (beam search's beams from one prompt, after
    ``KVCache.select_rows``; ``KVCache.shared_steps``), with no keep_mask, attend those steps read once from one
    row (``_attend_shared``, equal to SDPA up to rounding) once there are ``SHARED_ATTENTION_STEPS`` of them.

    Build it with ``TransformerDecoderOnly.incremental_step()``; use ``forward`` to train.

    Args:
        decoder: the ``TransformerDecoderOnly`` whose modules every call reads.
        derive: keep derived weights (``derived``, a ``DerivedWeights``); False (``derived`` None) computes every
            product from the weights themselves, for an object made afresh at every position.

    Inputs (``__call__``): x (B, 1, D), the newest position; caches: one KVCache per layer, S steps each;
        keep_mask (B, S + 1) bool, True at real positions, or None when all are real; the new position must be
        real (a query with no real key is the reference path's business). Or one ``StaticKVCache`` per layer,
        capacity C, with keep_mask (B, C) True at the real positions written so far and at slot S, where this
        position's keys and values go (attention runs over all C slots).
    Outputs: ``DecoderOnlyOutput(output (B, 1, D), caches with S + 1 steps)``, final norm applied.
    Raises:
        ValueError: if caches does not hold one cache per layer; as ``KVCache.append`` for a cache of the
            wrong shape or dtype.
    """

    def __init__(self, decoder: TransformerDecoderOnly, *, derive: bool = True) -> None:
        self.decoder = decoder
        self.derived = direct_calls.DerivedWeights() if derive else None

    @property
    def module_calls(self) -> list[str]:
        """The submodules (names within the decoder) that a call now makes as module calls, not from their
        parameters: whole layers that are not ``_inlinable``, and the wrapped, quantized or hooked Linear and
        LayerNorm leaves of the others (every layer while a global forward hook is set); [] when none."""
        names = []
        for i, layer in enumerate(self.decoder.layers):
            if not _inlinable(layer):
                names.append(f"layers.{i}")
                continue
            leaves = {
                "norm1": (layer.norm1, nn.LayerNorm),
                "norm2": (layer.norm2, nn.LayerNorm),
                **{f"self_attn.{n}": (getattr(layer.self_attn, n), nn.Linear) for n in _ATTENTION_LINEARS},
                "feed_forward.linear1": (layer.feed_forward.linear1, nn.Linear),
                "feed_forward.linear2": (layer.feed_forward.linear2, nn.Linear),
            }
            names += [f"layers.{i}.{name}" for name, (leaf, kind) in leaves.items() if not is_plain(leaf, kind)]
        final_norm = self.decoder.final_norm
        if final_norm is not None and not is_plain(final_norm, nn.LayerNorm):
            names.append("final_norm")
        return names

    def __call__(
        self, x: Tensor, *, caches: Sequence[KVCache] | Sequence[StaticKVCache], keep_mask: Tensor | None = None
    ) -> DecoderOnlyOutput:
        decoder = self.decoder._modules  # not self.decoder.layers: see seqlab.nn.direct_calls
        layers, final_norm = decoder["layers"], decoder.get("final_norm")  # None: set as a plain attribute
        if len(caches) != len(layers):
            raise ValueError(f"got {len(caches)} caches for a decoder of {len(layers)} layers")
        mask = None if keep_mask is None else keep_mask[:, None, None, :]  # (B, 1, 1, S + 1)
        derived = self.derived if x.device.type == "cpu" else None  # see the class
        B, _, D = x.shape
        x = x.view(B, D)  # the rows' one position, as matrix products take it
        new_caches = []
        for layer, cache in zip(layers, caches, strict=True):
            if _inlinable(layer):
                x, cache = _layer_step(layer, x, cache, mask, derived)
            else:
                x, cache = layer(x.view(B, 1, D), keep_mask=keep_mask, cache=cache)
                x = x.view(B, D)
            new_caches.append(cache)
        if final_norm is not None:
            x = direct_calls.layer_norm(final_norm, x)
        return DecoderOnlyOutput(x.view(B, 1, D), new_caches)


_ATTENTION_LINEARS = ("q_proj", "k_proj", "v_proj", "out_proj")


def _layer_step(
    layer: TransformerDecoderOnlyLayer,
    x: Tensor,
    cache: KVCache | StaticKVCache,
    mask: Tensor | None,
    derived: direct_calls.DerivedWeights | None,
) -> tuple[Tensor, KVCache | StaticKVCache]:
    """One ``_inlinable`` layer on x (B, D), each row's one new position, over its cache; mask (B, 1, 1, S + 1) or
    None, or (B, 1, 1, C) for a static cache; derived: the run's derived weights (``direct_calls.stacked_linear``),
    or None. Returns the layer's output (B, D) and the cache with x's keys and values appended."""
    modules, norm_first = layer._modules, layer.norm_first  # not layer.self_attn: see seqlab.nn.direct_calls
    attn, feed_forward, norm1, norm2 = modules["self_attn"], modules["feed_forward"], modules["norm1"], modules["norm2"]
    projections, ff_modules = attn._modules, feed_forward._modules
    B, D = x.shape
    N, Dh = attn.num_heads, attn.head_dim
    few = direct_calls.few_rows(x)  # the products' orientation (direct_calls.affine)
    h = direct_calls.layer_norm(norm1, x) if norm_first else x
    qkv = None
    if derived is not None:
        stacked = (projections["q_proj"], projections["k_proj"], projections["v_proj"])
        qkv = direct_calls.stacked_linear(stacked, h, derived)  # (B, 3D)
    # With T = 1, (B, D) and (B, N, 1, Dh) have the same layout: the heads split by a view, no transpose.
    if qkv is not None:
        q, k, v = qkv.view(B, 3, N, 1, Dh).unbind(1)  # each (B, N, 1, Dh)
    else:
        q = direct_calls.linear(projections["q_proj"], h, few=few).view(B, N, 1, Dh)  # (B, N, 1, Dh)
        k = direct_calls.linear(projections["k_proj"], h, few=few).view(B, N, 1, Dh)
        v = direct_calls.linear(projections["v_proj"], h, few=few).view(B, N, 1, Dh)
    if attn.rotary is not None:  # a static cache's length is a (1,) tensor, which the rotary embedding takes
        q, k = attn.rotary(q, offset=cache.length), attn.rotary(k, offset=cache.length)
    cache = cache.append(k, v)
    shared = cache.shared_steps() if mask is None and isinstance(cache, KVCache) else 0
    if shared >= SHARED_ATTENTION_STEPS:
        attended = _attend_shared(q, cache.keys, cache.values, shared)
    else:
        attended = F.scaled_dot_product_attention(q, cache.keys, cache.values, attn_mask=mask)  # (B, N, 1, Dh)
    x = x + direct_calls.linear(projections["out_proj"], attended.view(B, D), few=few)  # heads merged, (B, D)
    x = x if norm_first else direct_calls.layer_norm(norm1, x)
    h = direct_calls.layer_norm(norm2, x) if norm_first else x
    linear1 = ff_modules["linear1"]
    widened = None if derived is None else direct_calls.stacked_linear((linear1,), h, derived)
    widened = direct_calls.linear(linear1, h, few=few) if widened is None else widened  # (B, d_ff)
    inner = ACTIVATIONS[feed_forward.activation](widened)
    x = x + direct_calls.linear(ff_modules["linear2"], inner, few=few)
    x = x if norm_first else direct_calls.layer_norm(norm2, x)
    return x, cache


# The fewest shared steps for which a step reads them once (``_attend_shared``) instead of one SDPA call over every
# row: its extra small ops cost more than the reads it saves over short caches. In the beam row of
# benchmarks/language_model.py (L4 D256 V4096, K = 5, one thread), 8 and 64 gave the same speed, 1.05x SDPA's.
SHARED_ATTENTION_STEPS = 64


def _attend_shared(q: Tensor, keys: Tensor, values: Tensor, shared: int) -> Tensor:
    """softmax(q K^T / sqrt(Dh)) V for q (B, N, 1, Dh) over keys, values (B, N, S, Dh) whose first ``shared`` steps
    are the same in every row (beams that descend from one hypothesis, ``KVCache.shared_steps``): those are read
    once, from row 0, for the B queries together, and each row's own S - shared steps for its query alone. Equal to
    ``F.scaled_dot_product_attention(q, keys, values)`` up to rounding; the shared steps are most of a beam's
    cache, which the step otherwise reads B times from memory. -> (B, N, 1, Dh)."""
    B, N, _, Dh = q.shape
    S = keys.shape[2]
    q = (q * Dh**-0.5).view(B, N, Dh)
    common_keys, common_values = keys[0, :, :shared], values[0, :, :shared]  # (N, shared, Dh)
    own_keys = keys[:, :, shared:].reshape(B * N, S - shared, Dh)  # views: B and N merge within the buffer
    own_values = values[:, :, shared:].reshape(B * N, S - shared, Dh)
    scores = torch.cat(
        [
            torch.bmm(q.transpose(0, 1), common_keys.transpose(1, 2)).transpose(0, 1),  # (B, N, shared)
            torch.bmm(q.view(B * N, 1, Dh), own_keys.transpose(1, 2)).view(B, N, S - shared),
        ],
        dim=-1,
    )
    weights = scores.softmax(dim=-1)  # (B, N, S)
    attended = torch.bmm(weights[..., shared:].reshape(B * N, 1, S - shared), own_values).view(B, N, 1, Dh)
    common = torch.bmm(weights[..., :shared].transpose(0, 1), common_values)  # (N, B, Dh)
    return attended.add_(common.transpose(0, 1).unsqueeze(2))
