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

A Linear's product is ``affine``: ``F.linear`` except for a few rows (a beam search's K rows), where the same sums
in the other orientation run about 1.6 times as fast on the CPU (see ``affine``), so the result may differ from
the module's in the last bit.
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


FEW_ROWS = 8  # the most rows of x that ``affine`` computes as (W x^T)^T
_PLAIN_TENSORS = (nn.Parameter, Tensor)  # weight classes whose product is the BLAS's (not a tensor subclass's)


def affine(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x W^T + b, what ``F.linear(x, weight, bias)`` computes; x (..., in), weight (out, in), bias (out,) or None
    -> (..., out).

    For 2 to ``FEW_ROWS`` rows of x on the CPU with a plain tensor weight, it is computed as (W x^T)^T + b: the same
    sums, equal to rounding, which the BLAS runs at about 1.6 times the speed of x W^T, the orientation that
    ``F.linear`` asks for (a beam step of a 4-layer D = 256 GPT with V = 4096 at K = 5: its 25 products take 4.1 ms
    against 6.5 ms, one thread of an AMD EPYC with MKL). One row (a matrix-vector product either way) and more
    rows keep ``F.linear``, as does a tensor-subclass weight (torchao's int8 ones), whose class defines its own
    product.
    """
    if few_rows(x) and type(weight) in _PLAIN_TENSORS:
        flat = x.reshape(-1, x.shape[-1]).t()  # (in, rows)
        y = torch.mm(weight, flat) if bias is None else torch.addmm(bias.unsqueeze(1), weight, flat)  # (out, rows)
        return y.t().contiguous().view(*x.shape[:-1], weight.shape[0])
    return F.linear(x, weight, bias)


def few_rows(x: Tensor) -> bool:
    """Whether ``affine`` may take its few-row orientation for x (..., in): 2 to ``FEW_ROWS`` rows on the CPU.
    A step asks once for all its products: at one row, asking per product cost a char GPT ~5% of its step."""
    return 1 < x.shape[:-1].numel() <= FEW_ROWS and x.device.type == "cpu"


def linear(module: nn.Module, x: Tensor, *, few: bool = False) -> Tensor:
    """module(x) for a Linear-like module; x (..., in) -> (..., out). few: ``few_rows(x)``, so that a plain module's
    product is ``affine``'s (else ``F.linear``'s, as ``nn.Linear.forward``)."""
    if is_plain(module, nn.Linear):
        params = module._parameters
        return affine(x, params["weight"], params["bias"]) if few else F.linear(x, params["weight"], params["bias"])
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
