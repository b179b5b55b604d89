"""Attention as pure functions over per-head tensors: full softmax attention (reference and fused SDPA paths),
local (sliding-window) and linear attention, their one result type, and the causal keep-mask.

Every function takes q (B, N, T, Dh), k (B, N, S, Dh), v (B, N, S, Dv) (usually Dv = Dh) and returns an
``AttentionOutput``, so ``MultiHeadAttention`` can swap them. Positions are bottom-right aligned: query i sits at
absolute position p_i = i + S - T, so T new queries over a cache of S keys see exactly the keys they would see
inside the whole sequence. Boolean masks are keep-masks: True where a query may attend a key.

    full:    softmax(q k^T / sqrt(Dh)) v                                              (Vaswani et al., 2017, eq. 1)
    local:   the same restricted to a band of keys around each query (the sliding window of Beltagy et al.
             2020, Longformer, sec. 3.1; Child et al. 2019), computed block by block in O(T * window) memory.
    linear:  the softmax kernel replaced by phi(q)^T phi(k), phi(x) = elu(x) + 1 (Katharopoulos et al.
             2020, "Transformers are RNNs"): O(T * Dh * Dv) time; causal prefix sums taken chunk by chunk.

Local and linear attention take only key padding masks, (B, S) bool with True = real key (or the same as
(B, 1, 1, S)): a block or a prefix sum has no place for an arbitrary (B, N, T, S) mask. A query that sees no
real key gets an output row of zeros and, where weights are formed, a row of zero weights.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

LINEAR_CHUNK_SIZE = 64  # queries per chunk of causal linear attention unless chunk_size says otherwise


class AttentionOutput(NamedTuple):
    """The one result type of seqlab's attention: these functions, ``MultiHeadAttention`` and the RNN
    encoder-decoder attentions (``seqlab.nn.attention``).

    output: the attended values: (B, N, T, Dv) per head from these functions, (B, T, D) from
        ``MultiHeadAttention``, the context vectors (B, T, Hv) or (B, Hv) from the RNN attentions.
    weights: attention weights, (B, N, T, S) per head or (B, T, S) / (B, S) for the RNN attentions, or None when
        they were not requested (or not formed).
    cache: the ``seqlab.nn.kv_cache.KVCache`` holding this call's keys and values after ``MultiHeadAttention``
        appended them; None everywhere else.
    """

    output: Tensor
    weights: Tensor | None
    cache: Any = None


def causal_keep_mask(T: int, S: int, *, device: torch.device | None = None) -> Tensor:
    """Causal keep-mask (T, S): query i may attend key j iff j <= i + (S - T).

    The alignment is bottom-right: the last query sits at the last key, so T new queries over a cache of
    S - T earlier keys see all of them. With T == S this is the usual lower triangle; with T > S the first
    T - S queries have no key.
    """
    return torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=S - T)


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        raise ValueError(f"q, k, v must be (B, N, T, Dh), (B, N, S, Dh), (B, N, S, Dv); got {shapes}")
    if k.shape[:2] != q.shape[:2] or k.shape[3] != q.shape[3] or v.shape[:3] != k.shape[:3]:
        shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        raise ValueError(f"q, k, v disagree in (B, N), S or Dh: {shapes}")


def _check_keep_mask(keep_mask: Tensor, target: tuple[int, int, int, int]) -> None:
    if keep_mask.dtype != torch.bool:
        raise ValueError(f"keep_mask must be a bool tensor (True = may attend), got {keep_mask.dtype}")
    _check_broadcasts("keep_mask", keep_mask, target)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    keep_mask: Tensor | None = None,
    causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    scale: float | None = None,
    attn_bias: Tensor | None = None,
) -> AttentionOutput:
    """softmax(q k^T * scale + attn_bias) v with keep-masks (Vaswani et al., 2017, eq. 1), scale = 1 / sqrt(Dh)
    by default.

    Two paths with the same semantics (held together by the tests in float64):
    - reference (runs when ``need_weights=True``): the scores, -inf at masked positions, an explicit softmax,
      dropout on the weights, weights @ v; returns the weights.
    - fast (runs when ``need_weights=False``): ``torch.nn.functional.scaled_dot_product_attention`` (fused
      flash / memory-efficient kernels where the device has them, memory linear in T); weights are None.
      Causal attention with T == S and no keep_mask goes in as ``is_causal`` so no (T, S) mask is built.

    Masked positions get weight exactly 0. A query row with no key to attend (every key masked) has all-zero
    weights and a zero output row on both paths. An explicit softmax gives NaN there, and SDPA kernels have
    differed across versions and backends, so such rows attend every key internally and are zeroed afterwards,
    which also keeps their gradients finite.

    Args:
        keep_mask: bool, broadcastable to (B, N, T, S), True where a query may attend a key; e.g. (B, 1, 1, S)
            for key padding.
        causal: query i attends key j only if j <= i + (S - T) (bottom-right aligned, see ``causal_keep_mask``).
        dropout_p: dropout probability on the attention weights; pass 0.0 in evaluation.
        need_weights: return the weights (forces the reference path). They are the weights that multiplied v,
            so after dropout when dropout_p > 0 (as torch.nn.MultiheadAttention returns them).
        scale: score multiplier; 1 / sqrt(Dh) if None.
        attn_bias: float, broadcastable to (B, N, T, S), added to the scaled scores before the softmax (a position
            prior such as ``seqlab.nn.alignment.monotonic_alibi_bias``), or None; masked positions stay at weight 0.
    Inputs: q (B, N, T, Dh), k (B, N, S, Dh), v (B, N, S, Dv).
    Outputs: ``AttentionOutput(output (B, N, T, Dv), weights (B, N, T, S) or None)``.
    Raises: ValueError if q, k, v are not 4-D or disagree in (B, N), S or Dh, or keep_mask is not bool or does
        not broadcast to (B, N, T, S) (the message shows both shapes), or attn_bias does not broadcast to
        (B, N, T, S).
    """
    _check_qkv(q, k, v)
    B, N, T, Dh = q.shape
    S = k.shape[2]
    scale = 1.0 / math.sqrt(Dh) if scale is None else scale
    if keep_mask is not None:
        _check_keep_mask(keep_mask, (B, N, T, S))
    if attn_bias is not None:
        _check_bias(attn_bias, (B, N, T, S))

    # SDPA's own is_causal is top-left aligned, which equals bottom-right only for T == S. While exporting, T and S
    # are symbols, so whether T == S (or T > 1) is not known: the explicit mask serves every T and S.
    exporting = torch.compiler.is_exporting()
    is_causal = causal and not exporting and T == S and keep_mask is None and not need_weights and attn_bias is None
    mask = keep_mask
    if causal and (exporting or T > 1) and not is_causal:  # with T == 1 the causal mask would be all True
        causal_mask = causal_keep_mask(T, S, device=q.device)
        mask = causal_mask if mask is None else mask & causal_mask
    has_key = None
    if mask is not None and (keep_mask is not None or T > S):
        has_key = mask.any(dim=-1, keepdim=True)  # (..., T, 1)
        mask = mask | ~has_key

    if not need_weights:
        attn_mask = mask
        if attn_bias is not None:  # one float mask: the bias where a key may be attended, -inf elsewhere
            attn_mask = attn_bias if mask is None else attn_bias.masked_fill(~mask, float("-inf"))
        output = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale
        )  # (B, N, T, Dv)
        if has_key is not None:
            output = output.masked_fill(~has_key, 0.0)
        return AttentionOutput(output, None)

    scores = (q @ k.transpose(-2, -1)) * scale  # (B, N, T, S)
    if attn_bias is not None:
        scores = scores + attn_bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if has_key is not None:
        weights = weights.masked_fill(~has_key, 0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return AttentionOutput(weights @ v, weights)  # (B, N, T, Dv)


def _check_bias(attn_bias: Tensor, target: tuple[int, int, int, int]) -> None:
    if not attn_bias.is_floating_point():
        raise ValueError(f"attn_bias must be a float tensor (added to the scores), got {attn_bias.dtype}")
    _check_broadcasts("attn_bias", attn_bias, target)


def _check_broadcasts(name: str, tensor: Tensor, target: tuple[int, int, int, int]) -> None:
    try:
        fits = torch.broadcast_shapes(tensor.shape, target) == target
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"{name} shape {tuple(tensor.shape)} does not broadcast to (B, N, T, S) = {target}")


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, chunk: int | None) -> Tensor | None:
    """Raise for bad shapes; return the key padding mask as (B, S)."""
    for name, x, steps in (("q", q, "T"), ("k", k, "S"), ("v", v, "S")):
        if x.dim() != 4:
            raise ValueError(f"{name} must be (B, N, {steps}, Dh), got shape {tuple(x.shape)}")
    B, N, S, Dh = k.shape
    if q.shape[:2] != (B, N) or q.shape[3] != Dh:
        raise ValueError(f"q shape {tuple(q.shape)} does not match k shape {tuple(k.shape)} in (B, N, Dh)")
    if v.shape[:3] != (B, N, S):
        raise ValueError(f"v shape {tuple(v.shape)} does not match k shape {tuple(k.shape)} in (B, N, S)")
    if mask is not None:
        if mask.dtype != torch.bool:
            raise ValueError(f"keep_mask must be a bool tensor (True = real key), got {mask.dtype}")
        if mask.shape not in ((B, S), (B, 1, 1, S)):
            raise ValueError(
                f"keep_mask shape {tuple(mask.shape)} is neither (B, S) = ({B}, {S}) nor (B, 1, 1, S); "
                "only a key padding mask is supported"
            )
        mask = mask.reshape(B, S)
    if chunk is not None and chunk < 1:
        raise ValueError(f"chunk_size ({chunk}) must be >= 1")
    return mask


def local_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    window: int,
    causal: bool,
    keep_mask: Tensor | None = None,
    need_weights: bool = False,
    chunk_size: int | None = None,
) -> AttentionOutput:
    """Sliding-window softmax attention (Beltagy et al. 2020, sec. 3.1; Child et al. 2019), in blocks.

    With p_i = i + S - T, query i attends key j iff j is real and
        causal:      p_i - window < j <= p_i          (itself and the window - 1 keys before it)
        non-causal:  |p_i - j| < window               (window - 1 keys on each side)
    and alpha_ij = softmax_j(q_i . k_j / sqrt(Dh)) over those keys, out_i = sum_j alpha_ij v_j; every other
    weight is exactly 0. A window >= max(S, T) is full (causal) attention.

    The queries are cut into blocks of ``chunk_size``; each block attends only to the contiguous band of
    keys its rows need (chunk_size + window - 1 keys causally, chunk_size + 2 (window - 1) otherwise), so
    the scores take O(T * (chunk_size + window)) memory, never O(T * S).

    Args:
        window: keys per side that a query may see, counting its own position; >= 1.
        causal: whether queries see only keys at or before their own position.
        keep_mask: (B, S) bool (or the same as (B, 1, 1, S)), True where a key is real; None means every key
            is real. Full (B, N, T, S) masks are not supported (the band replaces them).
        need_weights: also return the weights as a dense (B, N, T, S) tensor (O(T * S) memory; for
            inspection, not for long sequences).
        chunk_size: queries per block; None means min(window, max(S, T)). The result does not depend on it.
    Inputs: q (B, N, T, Dh); k (B, N, S, Dh); v (B, N, S, Dv).
    Outputs: ``AttentionOutput(output (B, N, T, Dv), weights (B, N, T, S) or None)``; rows of zeros for
        queries that see no real key.
    Raises: ValueError (message shows the numbers) if window < 1, chunk_size < 1, a tensor is not 4-D, q
        and k differ in (B, N, Dh), v and k differ in (B, N, S), or keep_mask is not a bool tensor of shape
        (B, S) or (B, 1, 1, S).
    """
    keep_mask = _check_inputs(q, k, v, keep_mask, chunk_size)
    if window < 1:
        raise ValueError(f"window ({window}) must be >= 1")
    B, N, T, Dh = q.shape
    S, Dv = v.shape[2], v.shape[3]
    # No key is more than max(S, T) - 1 positions from a query, so a wider window only adds padding.
    window = min(window, max(S, T))
    chunk = max(1, min(chunk_size or window, T))
    n_blocks = -(-T // chunk)
    band = chunk + (window - 1 if causal else 2 * (window - 1))

    # Block b holds queries b*chunk + r at positions b*chunk + r + S - T; its band starts at key
    # first + b*chunk. Keys outside [0, S) are padding that the mask removes.
    first = S - T - (window - 1)
    span = (n_blocks - 1) * chunk + band  # keys from `first` that the last band reaches
    pads = (max(first, 0) - first, first + span - S)  # left, right; both >= 0 by construction

    def bands(x: Tensor) -> Tensor:
        x = F.pad(x[:, :, max(first, 0) :], (0, 0, *pads))  # (B, N, span, Dh or Dv)
        return x.unfold(2, band, chunk)  # (B, N, n_blocks, Dh or Dv, band)

    real = torch.ones(B, S, dtype=torch.bool, device=k.device) if keep_mask is None else keep_mask
    real = F.pad(real[:, max(first, 0) :], pads).unfold(1, band, chunk)  # (B, n_blocks, band)
    r = torch.arange(chunk, device=q.device).unsqueeze(1)
    c = torch.arange(band, device=q.device)
    offset = c - r - (window - 1)  # j - p_i for row r and band column c, the same in every block
    in_window = (offset <= 0) & (offset > -window) if causal else offset.abs() < window  # (chunk, band)
    keep = in_window & real[:, None, :, None, :]  # (B, 1, n_blocks, chunk, band)

    q_blocks = F.pad(q, (0, 0, 0, n_blocks * chunk - T)).view(B, N, n_blocks, chunk, Dh)
    scores = q_blocks @ bands(k) / math.sqrt(Dh)  # (B, N, n_blocks, chunk, band)
    # The most negative finite value, not -inf: a row with no key then gives uniform weights that the mask
    # zeroes below, so no NaN appears even in intermediate results (or under autograd anomaly detection).
    scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    alpha = torch.softmax(scores, dim=-1).masked_fill(~keep, 0.0)
    output = alpha @ bands(v).transpose(-1, -2)  # (B, N, n_blocks, chunk, Dv)
    output = output.reshape(B, N, n_blocks * chunk, Dv)[:, :, :T]  # (B, N, T, Dv)
    if not need_weights:
        return AttentionOutput(output, None)

    # Band column c of block b is key j = first + b*chunk + c: scatter into keys first .. first + span - 1.
    column = (torch.arange(n_blocks, device=q.device) * chunk).view(-1, 1, 1) + c  # (n_blocks, 1, band)
    column = column.expand(n_blocks, chunk, band).reshape(1, 1, n_blocks * chunk, band).expand(B, N, -1, -1)
    dense = alpha.new_zeros(B, N, n_blocks * chunk, span)
    dense = dense.scatter(-1, column, alpha.reshape(B, N, n_blocks * chunk, band))  # (B, N, T + pad, span)
    weights = F.pad(dense, (max(first, 0), 0))[:, :, :T, max(-first, 0) : max(-first, 0) + S]  # (B, N, T, S)
    return AttentionOutput(output, weights)


def linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool,
    keep_mask: Tensor | None = None,
    chunk_size: int = LINEAR_CHUNK_SIZE,
) -> AttentionOutput:
    """Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs", eq. 4-9), phi(x) = elu(x) + 1.

        out_i = phi(q_i)^T sum_j phi(k_j) v_j^T / (phi(q_i)^T sum_j phi(k_j))            (eq. 5-6)

    over the real keys j; causally only over j <= p_i = i + S - T, where the sums become prefix sums
    s_i = sum_{j<=p_i} phi(k_j) v_j^T and z_i = sum_{j<=p_i} phi(k_j) (eq. 8-9). Padded keys have phi(k_j) set
    to 0, so they enter neither sum. The causal sums are taken chunk by chunk: the state at the start of each
    chunk (a prefix sum over whole chunks) plus a masked chunk_size x chunk_size product inside it, so memory
    is O(T * chunk_size + T / chunk_size * Dh * Dv) instead of one (Dh, Dv) state per query.

    Args:
        causal: whether queries see only keys at or before their own position.
        keep_mask: (B, S) bool (or the same as (B, 1, 1, S)), True where a key is real; None means every key
            is real. Full (B, N, T, S) masks are not supported.
        chunk_size: queries per chunk of the causal prefix sums; the result does not depend on it.
    Inputs: q (B, N, T, Dh); k (B, N, S, Dh); v (B, N, S, Dv).
    Outputs: ``AttentionOutput(output (B, N, T, Dv), None)``: there is no weight matrix to return; rows of
        zeros for queries that see no real key.
    Raises: ValueError (message shows the numbers) if chunk_size < 1, a tensor is not 4-D, q and k differ
        in (B, N, Dh), v and k differ in (B, N, S), or keep_mask is not a bool tensor of shape (B, S) or
        (B, 1, 1, S).
    """
    keep_mask = _check_inputs(q, k, v, keep_mask, chunk_size)
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    if keep_mask is not None:
        phi_k = phi_k * keep_mask[:, None, :, None]
    if causal:
        numerator, denominator = _causal_sums(phi_q, phi_k, v, chunk_size=chunk_size)
    else:
        numerator = phi_q @ (phi_k.transpose(-1, -2) @ v)  # (B, N, T, Dv)
        denominator = phi_q @ phi_k.sum(dim=2).unsqueeze(-1)  # (B, N, T, 1)
    # phi > 0, so the denominator is 0 only when no real key is seen, and then the numerator is 0 as well.
    return AttentionOutput(numerator / torch.where(denominator > 0, denominator, 1.0), None)


def _exclusive_cumsum(x: Tensor) -> Tensor:
    """Sum over the chunks before each chunk (dim 2): 0, x_0, x_0 + x_1, ..."""
    return torch.cat([torch.zeros_like(x[:, :, :1]), x.cumsum(dim=2)[:, :, :-1]], dim=2)


def _causal_sums(phi_q: Tensor, phi_k: Tensor, v: Tensor, *, chunk_size: int) -> tuple[Tensor, Tensor]:
    """Numerator phi(q_i)^T s_i (B, N, T, Dv) and denominator phi(q_i)^T z_i (B, N, T, 1) of eq. 8-9."""
    B, N, T, Dh = phi_q.shape
    S, Dv = v.shape[2], v.shape[3]
    if S >= T:
        # Keys before query 0's position are seen by every query: they are the initial state.
        s_0 = phi_k[:, :, : S - T].transpose(-1, -2) @ v[:, :, : S - T]  # (B, N, Dh, Dv)
        z_0 = phi_k[:, :, : S - T].sum(dim=2)  # (B, N, Dh)
        phi_k, v = phi_k[:, :, S - T :], v[:, :, S - T :]
    else:
        # Queries before key 0 see nothing: give them T - S keys with phi = 0 to stand on.
        s_0, z_0 = phi_k.new_zeros(B, N, Dh, Dv), phi_k.new_zeros(B, N, Dh)
        phi_k, v = F.pad(phi_k, (0, 0, T - S, 0)), F.pad(v, (0, 0, T - S, 0))
    # Now key i sits at query i's position: query i sees keys 0 .. i.
    chunk = max(1, min(chunk_size, T))
    n_blocks = -(-T // chunk)
    pad = (0, 0, 0, n_blocks * chunk - T)
    phi_q = F.pad(phi_q, pad).view(B, N, n_blocks, chunk, Dh)
    phi_k = F.pad(phi_k, pad).view(B, N, n_blocks, chunk, Dh)
    v = F.pad(v, pad).view(B, N, n_blocks, chunk, Dv)

    s_before = s_0.unsqueeze(2) + _exclusive_cumsum(phi_k.transpose(-1, -2) @ v)  # (B, N, n_blocks, Dh, Dv)
    z_before = z_0.unsqueeze(2) + _exclusive_cumsum(phi_k.sum(dim=3))  # (B, N, n_blocks, Dh)
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=phi_q.device).tril()
    within = (phi_q @ phi_k.transpose(-1, -2)).masked_fill(~causal, 0.0)  # (B, N, n_blocks, chunk, chunk)
    numerator = phi_q @ s_before + within @ v  # (B, N, n_blocks, chunk, Dv)
    denominator = phi_q @ z_before.unsqueeze(-1) + within.sum(dim=-1, keepdim=True)  # (..., chunk, 1)
    numerator = numerator.reshape(B, N, n_blocks * chunk, Dv)[:, :, :T]  # (B, N, T, Dv)
    return numerator, denominator.reshape(B, N, n_blocks * chunk, 1)[:, :, :T]  # (B, N, T, 1)
