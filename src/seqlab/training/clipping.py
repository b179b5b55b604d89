"""Gradient clipping by global norm and by value, each returning the pre-clip global norm for training logs.

Exploding gradients in recurrent networks (Pascanu, Mikolov & Bengio, 2013, "On the difficulty of training
recurrent neural networks", Algorithm 1) are tamed by rescaling the gradient g of all parameters together,

    ||g|| = sqrt(sum_p sum_i g_{p,i}^2),        g <- min(1, tau / ||g||) g,

which keeps its direction, or by clamping every component to [-v, v] (Mikolov, 2012), which does not. Both work
in place on ``p.grad`` and skip parameters whose ``grad`` is None.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor

Parameters = Tensor | Iterable[Tensor]


def _grads(parameters: Parameters) -> list[Tensor]:
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def _check_positive(name: str, value: float) -> None:
    # `not value > 0` also rejects NaN.
    if not value > 0:
        raise ValueError(f"{name} ({value!r}) must be > 0")


def _global_norm(grads: list[Tensor]) -> Tensor:
    if not grads:
        return torch.tensor(0.0)
    device = grads[0].device
    # The norm of the per-tensor norms is ||g|| without concatenating all gradients into one copy.
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g).to(device) for g in grads]))


def grad_norm(parameters: Parameters) -> Tensor:
    """Global L2 norm of the gradients, ||g|| = sqrt(sum over parameters p and entries i of g_{p,i}^2).

    Args:
        parameters: a tensor or an iterable of tensors; those whose ``grad`` is None are skipped.
    Returns:
        0-dim tensor on the first gradient's device (0.0 on the CPU if no parameter has a gradient); inf or NaN
        if a gradient holds one.
    """
    return _global_norm(_grads(parameters))


def clip_grad_norm(parameters: Parameters, max_norm: float) -> Tensor:
    """Rescale the gradients in place so that their global norm is at most ``max_norm``.

    g <- min(1, tau / ||g||) g with tau = ``max_norm`` (Pascanu et al., 2013, Algorithm 1): gradients with
    ||g|| <= tau are left exactly as they are, larger ones are scaled to norm tau (up to rounding). Unlike
    ``torch.nn.utils.clip_grad_norm_``, which divides by ||g|| + 1e-6, the scale is exactly tau / ||g||.
    The scale is computed on the device, so clipping needs no host synchronisation.

    If ||g|| is inf or NaN the gradients are left untouched (scaling by tau / inf would silently zero them,
    by NaN poison them) and the non-finite norm is returned: the caller should then skip the update or
    stop, as ``Trainer`` does.

    Args:
        parameters: a tensor or an iterable of tensors; those whose ``grad`` is None are skipped.
        max_norm: tau > 0; ``math.inf`` computes the norm and changes nothing.
    Returns:
        ||g|| before clipping, a 0-dim tensor (see ``grad_norm``).
    Raises:
        ValueError: if max_norm <= 0 or is NaN; the message shows it.
    """
    _check_positive("max_norm", max_norm)
    grads = _grads(parameters)
    norm = _global_norm(grads)
    if grads and max_norm != math.inf:
        # max_norm / 0 = inf is clamped to 1, so all-zero gradients need no special case.
        scale = torch.clamp(max_norm / norm, max=1.0)
        scale = torch.where(torch.isfinite(norm), scale, torch.ones_like(scale))
        for g in grads:
            g.mul_(scale.to(g.device, g.dtype))
    return norm


def clip_grad_value(parameters: Parameters, clip_value: float) -> Tensor:
    """Clamp every gradient entry in place to [-v, v] with v = ``clip_value``: g_i <- max(-v, min(v, g_i)).

    The clipped gradient generally changes direction (Pascanu et al., 2013, section 3.2, compare norm
    clipping). A NaN entry stays NaN and an infinite one becomes -v or v; the returned pre-clip norm is then
    non-finite, so the caller can still detect it.

    Args:
        parameters: a tensor or an iterable of tensors; those whose ``grad`` is None are skipped.
        clip_value: v > 0.
    Returns:
        ||g|| before clipping, a 0-dim tensor (see ``grad_norm``).
    Raises:
        ValueError: if clip_value <= 0 or is NaN; the message shows it.
    """
    _check_positive("clip_value", clip_value)
    grads = _grads(parameters)
    norm = _global_norm(grads)
    for g in grads:
        g.clamp_(-clip_value, clip_value)
    return norm
