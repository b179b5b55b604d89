"""Calling a plain module's computation without its ``nn.Module.__call__`` wrapper, checked at every call.

A decoding step makes dozens of module calls whose Python wrapper (hooks, ``forward`` lookup, argument checks)
costs more than their arithmetic at batch 1. For a module that is exactly ``nn.Linear`` / ``nn.LayerNorm`` /
``nn.Embedding`` with no hooks and no ``forward`` of its own on the instance, ``module(x)`` is by definition the
functional form on the module's current parameters (``F.linear(x, module.weight, module.bias)`` is
``nn.Linear.forward``); anything else (a LoRA wrapper, torch.ao's dynamically quantized Linear, a parametrization,
which swaps the class, or a hook) is called as the module itself. A weight that is a tensor subclass (torchao's
int8 weights, ``seqlab.models.quantized``) keeps its class's own ``F.linear``, as the module would. Nothing is
copied or gathered, so a weight changed in place or replaced is what the next call reads.

The checks run at every call, so they read what they need from the module's own dictionaries (``_modules``,
``_parameters``) rather than through ``nn.Module.__getattr__``, a Python call per attribute that would cost a
decoding step more than the module calls it saves. An exact ``nn.Linear`` / ``nn.LayerNorm`` / ``nn.Embedding``
holds its weight and bias there: ``Module.__setattr__`` refuses a plain tensor in a parameter's place.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules import module as _module


def is_plain(module: nn.Module, kind: type[nn.Module]) -> bool:
    """True when ``module(...)`` is exactly ``kind.forward`` on the module's own parameters: its class is ``kind``
    itself (not a subclass or wrapper), no forward hook would run (its own or a global one,
    ``register_module_forward_hook``), and no ``forward`` was set on the instance."""
    return (
        type(module) is kind
        and not module._forward_hooks
        and not module._forward_pre_hooks
        and "forward" not in module.__dict__
        and not _module._global_forward_hooks
        and not _module._global_forward_pre_hooks
    )


def linear(module: nn.Module, x: Tensor) -> Tensor:
    """module(x) for a Linear-like module; x (..., in) -> (..., out)."""
    if is_plain(module, nn.Linear):
        params = module._parameters
        return F.linear(x, params["weight"], params["bias"])
    return module(x)


def layer_norm(module: nn.Module, x: Tensor) -> Tensor:
    """module(x) for a LayerNorm-like module; x (..., D) -> (..., D). The plain case calls ``torch.layer_norm``,
    what ``F.layer_norm`` calls after its Python-level checks."""
    if is_plain(module, nn.LayerNorm):
        params = module._parameters
        return torch.layer_norm(x, module.normalized_shape, params["weight"], params["bias"], module.eps)
    return module(x)


def embedding(module: nn.Module, ids: Tensor) -> Tensor:
    """module(ids) for an Embedding-like module; ids (...) long -> (..., E). A max_norm (which renormalises the
    looked-up rows in place) is left to the module; padding_idx and sparse change only the gradient."""
    if is_plain(module, nn.Embedding) and module.max_norm is None:
        return F.embedding(ids, module._parameters["weight"])
    return module(ids)
