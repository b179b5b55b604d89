"""Spatio-temporal patch Transformer: forecasts a 2-D field H steps ahead from its last T steps.

Each field (C, Y, X) is cut into P = (Y / p)(X / p) non-overlapping p x p patches, each flattened and embedded
linearly, as in the Vision Transformer (Dosovitskiy et al., 2021, eq. 1) and the weather models built on it
(Pangu-Weather, Bi et al., 2023; ClimaX, Nguyen et al., 2023):

    z^0_{t,i} = E x_{t,i} + e^space_i + e^time_t        x_{t,i}: patch i of step t (C p^2 values); E: (D, C p^2)

with a learned position per patch (ViT) and the sinusoidal encoding of the step (Vaswani et al., 2017). Each of the
L blocks attends first over the patches of one step, then over the steps of one patch ("divided space-time
attention", Bertasius et al., 2021, TimeSformer, Sec. 3):

    z' = SpaceLayer(z[:, t])  for every t        (B T, P, D): all patches of a field see each other
    z  = TimeLayer(z'[:, :, i]) for every i      (B P, T, D): causal, step t sees steps <= t

both pre-LN ``seqlab.nn.TransformerEncoderLayer``s. A linear head maps each patch's last-step token to its H future
patches, which are put back in place ("unpatchified"); with ``residual`` the head forecasts the change from the
last field (an untrained head forecasts persistence). The time attention's causality makes the token of step t a
function of steps <= t only (tested), so the model also reads windows shorter than the one it was trained on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from seqlab.errors import ConfigError
from seqlab.models.pretrained import PretrainedMixin
from seqlab.nn.positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding
from seqlab.nn.transformer import TransformerEncoderLayer
from seqlab.validation import check_bool, check_int, check_probability


@dataclass(frozen=True)
class FieldTransformerConfig:
    """Hyperparameters of :class:`FieldTransformer`; saved as ``config.json`` with every checkpoint."""

    height: int  # Y, grid rows of a field
    width: int  # X, grid columns
    horizon: int  # H, steps forecast at once
    channels: int = 1  # C, variables per grid point
    patch_size: int = 8  # p, patch side (divides Y and X)
    d_model: int = 64  # D
    num_heads: int = 4  # N
    d_ff: int = 128  # feed-forward inner size
    num_layers: int = 2  # L blocks, each a space and a time layer
    context_length: int = 64  # longest window (steps) the time positions cover
    dropout: float = 0.0  # inside the layers
    residual: bool = True  # forecast the change from the last field

    def __post_init__(self) -> None:
        for name in ("height", "width", "horizon", "channels", "patch_size", "d_model", "num_heads", "d_ff"):
            check_int(name, getattr(self, name), maximum=8192)
        check_int("num_layers", self.num_layers, maximum=64)
        check_int("context_length", self.context_length, maximum=8192)
        check_probability("dropout", self.dropout)
        check_bool("residual", self.residual)
        for name in ("height", "width"):
            if getattr(self, name) % self.patch_size:
                raise ConfigError(
                    f"{name} ({getattr(self, name)}) must be a multiple of patch_size ({self.patch_size})"
                )
        if self.d_model % self.num_heads or self.d_model % 2:
            raise ConfigError(f"d_model ({self.d_model}) must be even and divisible by num_heads ({self.num_heads})")

    @property
    def num_patches(self) -> int:
        """P = (Y / p)(X / p)."""
        return (self.height // self.patch_size) * (self.width // self.patch_size)


def patchify(x: Tensor, patch_size: int) -> Tensor:
    """(..., C, Y, X) -> (..., P, C p^2): the p x p patches in row-major order, each flattened (C, p, p)."""
    *lead, C, Y, X = x.shape
    p = patch_size
    x = x.reshape(-1, C, Y // p, p, X // p, p).permute(0, 2, 4, 1, 3, 5)  # (B', Y/p, X/p, C, p, p)
    return x.reshape(*lead, (Y // p) * (X // p), C * p * p)


def unpatchify(patches: Tensor, patch_size: int, *, height: int, width: int) -> Tensor:
    """(..., P, C p^2) -> (..., C, Y, X): the inverse of ``patchify``."""
    *lead, _, size = patches.shape
    p, C = patch_size, size // (patch_size * patch_size)
    x = patches.reshape(-1, height // p, width // p, C, p, p).permute(0, 3, 1, 4, 2, 5)  # (B', C, Y/p, p, X/p, p)
    return x.reshape(*lead, C, height, width)


class FieldTransformer(PretrainedMixin, nn.Module):
    """Patch embedding, L blocks of divided space-time attention, a linear head per patch (module docstring).

    Args:
        config: FieldTransformerConfig.
    Inputs: x (B, T, C, Y, X) floating, the last T <= context_length fields.
    Outputs: (B, H, C, Y, X), the next H fields, in the units of x (the recipe standardises them).
    Raises:
        ValueError: x is not (B, T, C, Y, X) floating with the configured C, Y, X, or T exceeds context_length.
    """

    config_class: ClassVar[type] = FieldTransformerConfig
    model_type: ClassVar[str] = "field_transformer"

    def __init__(self, config: FieldTransformerConfig) -> None:
        super().__init__()
        self.config = config
        D, p = config.d_model, config.patch_size
        self.patch_embedding = nn.Linear(config.channels * p * p, D)  # E
        self.space_positions = LearnedPositionalEncoding(config.num_patches, D)  # e^space
        self.time_positions = SinusoidalPositionalEncoding(D, max_length=config.context_length)  # e^time

        def layer() -> TransformerEncoderLayer:
            return TransformerEncoderLayer(D, config.num_heads, config.d_ff, dropout=config.dropout, norm_first=True)

        self.space_layers = nn.ModuleList(layer() for _ in range(config.num_layers))
        self.time_layers = nn.ModuleList(layer() for _ in range(config.num_layers))
        self.final_norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, config.horizon * config.channels * p * p)

    def encode(self, x: Tensor) -> Tensor:
        """z^L (B, T, P, D): the tokens of every step and patch after the L blocks (token (t, i) reads steps <= t)."""
        self._check(x)
        B, T = x.shape[:2]
        P, D = self.config.num_patches, self.config.d_model
        z = self.patch_embedding(patchify(x, self.config.patch_size))  # (B, T, P, D)
        z = self.space_positions(z.reshape(B * T, P, D)).view(B, T, P, D)
        z = self.time_positions(z.transpose(1, 2).reshape(B * P, T, D)).view(B, P, T, D).transpose(1, 2)
        for space, time in zip(self.space_layers, self.time_layers, strict=True):
            z = space(z.reshape(B * T, P, D)).output.view(B, T, P, D)
            z = z.transpose(1, 2).reshape(B * P, T, D)  # (B P, T, D): one patch's steps
            z = time(z, causal=True).output.view(B, P, T, D).transpose(1, 2)  # (B, T, P, D)
        return self.final_norm(z)

    def forward(self, x: Tensor) -> Tensor:
        config = self.config
        B = x.shape[0]
        last = self.encode(x)[:, -1]  # (B, P, D): each patch's token at the last step
        patches = self.head(last).view(B, config.num_patches, config.horizon, -1).transpose(1, 2)  # (B, H, P, C p^2)
        fields = unpatchify(patches, config.patch_size, height=config.height, width=config.width)
        return fields + x[:, -1:] if config.residual else fields

    def _check(self, x: Tensor) -> None:
        c = self.config
        expected = (c.channels, c.height, c.width)
        if x.dim() != 5 or tuple(x.shape[2:]) != expected or not x.dtype.is_floating_point:
            raise ValueError(
                f"x must be (B, T, {', '.join(map(str, expected))}) floating, got shape {tuple(x.shape)} {x.dtype}"
            )
        if x.shape[1] > c.context_length:
            raise ValueError(f"window of {x.shape[1]} steps exceeds context_length ({c.context_length})")


def rollout_fields(model: FieldTransformer, x: Tensor, steps: int) -> Tensor:
    """(B, steps, C, Y, X): ``steps`` future fields from windows x (B, T, C, Y, X), feeding the model's forecasts
    back H at a time (the window keeps its length T)."""
    T = x.shape[1]
    outputs = []
    for _ in range(-(-steps // model.config.horizon)):
        block = model(x[:, -T:])  # (B, H, C, Y, X)
        outputs.append(block)
        x = torch.cat([x, block], dim=1)
    return torch.cat(outputs, dim=1)[:, :steps]
