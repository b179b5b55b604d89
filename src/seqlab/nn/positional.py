"""Positional encodings: sinusoidal and learned (added to the embeddings), rotary (applied to queries and keys).

Sinusoidal (Vaswani et al., 2017, section 3.5), for position pos and channel pair i = 0 .. D/2 - 1:

    PE(pos, 2i) = sin(pos / 10000^(2i/D)),        PE(pos, 2i+1) = cos(pos / 10000^(2i/D))

Each pair turns at its own frequency w_i = 10000^(-2i/D), so PE(pos + k) = M_k PE(pos) with M_k block diagonal,
one 2x2 rotation [[cos k w_i, sin k w_i], [-sin k w_i, cos k w_i]] per pair: a fixed linear map for each offset
k, the reason the paper gives for choosing it.

Rotary (RoPE; Su et al., 2021, "RoFormer", eq. 34) rotates each pair (x_{2i}, x_{2i+1}) of a query or key at
position m by the angle m theta_i, theta_i = base^(-2i/Dh); then <R(m) q, R(n) k> depends on m - n only.

The sin/cos tables are computed once in float64 for ``max_length`` positions and kept as non-persistent buffers
(never in checkpoints); forward casts the rows it needs to the input's dtype. Positions past the table are
computed from the same formula on the fly, so ``max_length`` bounds only the cache, never the input.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seqlab.validation import check_int


def _inverse_frequencies(dim: int, base: float, device: torch.device | None = None) -> Tensor:
    """w_i = base^(-2i/dim) for i = 0 .. dim/2 - 1, float64, (dim/2,)."""
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64, device=device) / dim)


def _angles(start: int, length: int, inverse_frequencies: Tensor) -> Tensor:
    """pos * w_i for pos = start .. start + length - 1, float64, (length, dim/2)."""
    positions = torch.arange(start, start + length, dtype=torch.float64, device=inverse_frequencies.device)
    return torch.outer(positions, inverse_frequencies)


def _check_offset(offset: int) -> None:
    if offset < 0:
        raise ValueError(f"offset ({offset}) must be >= 0")


def _check_input(x: Tensor, d_model: int) -> None:
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"x must be (B, T, D) with D = d_model ({d_model}), got shape {tuple(x.shape)}")


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal encoding of Vaswani et al. (2017, section 3.5) to a sequence.

    PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(pos / 10000^(2i/D));
    output = Dropout(x + PE[offset : offset + T]). Scaling the embeddings by sqrt(D) first, as the paper does,
    is the model's job.

    Args:
        d_model: D, even (each frequency needs its sin and its cos).
        max_length: positions whose encodings are cached; later positions are computed on the fly.
        base: the 10000 of the formula.
        dropout: dropout probability applied to the sum (the paper uses 0.1).
    Inputs: x (B, T, D); offset: position of x[:, 0] (e.g. the number of tokens already decoded).
    Outputs: (B, T, D), the dtype of x.
    Raises: ValueError if d_model is odd or < 2, max_length < 1, x is not (B, T, d_model), or offset < 0
        (messages show the numbers).
    """

    def __init__(self, d_model: int, *, max_length: int = 2048, base: float = 10000.0, dropout: float = 0.0):
        super().__init__()
        check_int("d_model", d_model, minimum=2)
        if d_model % 2:
            raise ValueError(f"d_model ({d_model}) must be even and >= 2: each frequency has a sin and a cos")
        check_int("max_length", max_length)
        self.d_model = d_model
        self.max_length = max_length
        self.base = base
        self.dropout = nn.Dropout(dropout)
        # float64 so that a float64 model sees the exact table; forward casts to the input's dtype.
        self.register_buffer("table", self._encoding_range(0, max_length), persistent=False)  # (max_length, D)

    def _encoding_range(self, start: int, length: int, device: torch.device | None = None) -> Tensor:
        """PE(pos) for pos = start .. start + length - 1, float64, (length, D)."""
        angles = _angles(start, length, _inverse_frequencies(self.d_model, self.base, device))  # (length, D/2)
        # Interleave so that sin lands on even channels and cos on odd ones.
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # (length, D)

    def encoding(self, positions: Tensor) -> Tensor:
        """PE(pos) for arbitrary positions, computed from the formula in float64.

        Inputs: positions: integer or floating tensor of any shape (...).
        Outputs: (..., D), float64, on the device of positions.
        """
        inverse_frequencies = _inverse_frequencies(self.d_model, self.base, positions.device)  # (D/2,)
        angles = positions.to(torch.float64).unsqueeze(-1) * inverse_frequencies  # (..., D/2)
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # (..., D)

    def forward(self, x: Tensor, *, offset: int = 0) -> Tensor:
        _check_input(x, self.d_model)
        _check_offset(offset)
        T = x.shape[1]
        # While exporting, offset is a symbol (the cache's length): the angles are computed for any offset.
        if not torch.compiler.is_exporting() and offset + T <= self.max_length:
            pe = self.table[offset : offset + T]
        else:
            pe = self._encoding_range(offset, T, x.device)
        return self.dropout(x + pe.to(x.dtype))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_length={self.max_length}, base={self.base}"


class LearnedPositionalEncoding(nn.Module):
    """Adds a trained vector per absolute position (Gehring et al., 2017; BERT; GPT-2).

    output = Dropout(x + P[offset : offset + T]) with P a (max_length, D) parameter, initialised from
    N(0, 0.02^2) as in GPT-2 and BERT.

    Args:
        max_length: number of positions with a vector; inputs may not reach past it.
        d_model: D.
        dropout: dropout probability applied to the sum.
    Inputs: x (B, T, D); offset: position of x[:, 0].
    Outputs: (B, T, D).
    Raises: ValueError if max_length or d_model < 1, x is not (B, T, d_model), offset < 0, or
        offset + T > max_length (messages show the numbers).
    """

    def __init__(self, max_length: int, d_model: int, *, dropout: float = 0.0):
        super().__init__()
        check_int("max_length", max_length)
        check_int("d_model", d_model)
        self.max_length = max_length
        self.d_model = d_model
        self.weight = nn.Parameter(torch.empty(max_length, d_model))  # (max_length, D)
        self.dropout = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: Tensor, *, offset: int = 0) -> Tensor:
        _check_input(x, self.d_model)
        _check_offset(offset)
        T = x.shape[1]
        if offset + T > self.max_length:
            raise ValueError(
                f"positions {offset}..{offset + T - 1} exceed the learned positions 0..{self.max_length - 1} "
                f"(max_length {self.max_length})"
            )
        return self.dropout(x + self.weight[offset : offset + T])

    def extra_repr(self) -> str:
        return f"max_length={self.max_length}, d_model={self.d_model}"


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (RoPE; Su et al., 2021, "RoFormer", eq. 34), applied to queries and keys.

    For a vector x at position m, each channel pair turns by the angle m theta_i, theta_i = base^(-2i/Dh):

        (R(m) x)_{2i}   = x_{2i} cos(m theta_i) - x_{2i+1} sin(m theta_i)
        (R(m) x)_{2i+1} = x_{2i} sin(m theta_i) + x_{2i+1} cos(m theta_i)

    This is the paper's interleaved form: R(m) is the block-diagonal matrix of its eq. (15). (GPT-NeoX and
    LLaMA code pair channel i with i + Dh/2 instead, the same map up to a fixed permutation of channels.) Since
    R(m)^T R(n) = R(n - m), <R(m) q, R(n) k> = <q, R(n - m) k> depends only on the offset n - m, and R(m)
    preserves norms. Call it as ``rotary(q, offset=...)``: ``nn.Module.apply`` keeps its usual meaning.

    Args:
        head_dim: Dh, even.
        base: the 10000 of theta_i.
        max_length: positions whose cos/sin are cached; later positions are computed on the fly.
    Inputs: x (B, N, T, Dh), or any (..., T, Dh); offset: position of x[..., 0, :] (with a KV cache: the
        number of positions already cached), an int or a (1,) long tensor (a ``StaticKVCache``'s length, so that
        a compiled decoding step is one graph for every position; its angles are computed, not looked up).
    Outputs: R(offset + t) x[..., t, :] for every t, same shape and dtype as x.
    Raises: ValueError if head_dim is odd or < 2, max_length < 1, x's last dimension is not head_dim or it has
        fewer than 2 dimensions, or offset < 0 (messages show the numbers).
    """

    def __init__(self, head_dim: int, *, base: float = 10000.0, max_length: int = 2048):
        super().__init__()
        check_int("head_dim", head_dim, minimum=2)
        if head_dim % 2:
            raise ValueError(f"head_dim ({head_dim}) must be even and >= 2: RoPE rotates channel pairs")
        check_int("max_length", max_length)
        self.head_dim = head_dim
        self.base = base
        self.max_length = max_length
        angles = _angles(0, max_length, _inverse_frequencies(head_dim, base))  # (max_length, Dh/2)
        # float64 tables: a float64 model gets exact values; forward casts to the input's dtype.
        self.register_buffer("cos_table", angles.cos(), persistent=False)  # (max_length, Dh/2)
        self.register_buffer("sin_table", angles.sin(), persistent=False)  # (max_length, Dh/2)

    def _cos_sin(self, offset: int | Tensor, T: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """cos and sin of (offset + t) theta_i, float64, each (T, Dh/2)."""
        if isinstance(offset, Tensor):  # the same float64 products as the table's rows
            positions = (offset + torch.arange(T, device=device)).to(torch.float64)  # (T,)
            angles = torch.outer(positions, _inverse_frequencies(self.head_dim, self.base, device))  # (T, Dh/2)
            return angles.cos(), angles.sin()
        # While exporting, offset is a symbol (the cache's length): the angles are computed for any offset.
        if not torch.compiler.is_exporting() and offset + T <= self.max_length:
            return self.cos_table[offset : offset + T], self.sin_table[offset : offset + T]
        angles = _angles(offset, T, _inverse_frequencies(self.head_dim, self.base, device))  # (T, Dh/2)
        return angles.cos(), angles.sin()

    def forward(self, x: Tensor, *, offset: int | Tensor = 0) -> Tensor:
        if x.dim() < 2 or x.shape[-1] != self.head_dim:
            raise ValueError(f"x must be (..., T, Dh) with Dh = head_dim ({self.head_dim}), got shape {tuple(x.shape)}")
        if not isinstance(offset, Tensor):  # a tensor offset is data: its cache checked it when it was made
            _check_offset(offset)
        cos, sin = self._cos_sin(offset, x.shape[-2], x.device)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        pairs = x.unflatten(-1, (self.head_dim // 2, 2))  # (..., T, Dh/2, 2)
        x_even, x_odd = pairs.unbind(-1)  # each (..., T, Dh/2)
        rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)  # (..., T, Dh/2, 2)
        return rotated.flatten(-2)  # (..., T, Dh)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}, max_length={self.max_length}"
