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
the module's in the last bit. At one row, a product that widens (out > in: a layer's q, k, v projections stacked,
its first feed-forward layer, a language model's head) runs from a transposed copy of the weight, and at a few
rows the products of one input (q, k and v) run as one over the weights stacked (``stacked_product``), copies that
``DerivedWeights`` keeps for one decoding run and rebuilds whenever a source changes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

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
Derived = TypeVar("Derived")


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
        matrix = x.dim() == 2
        flat = x.t() if matrix else x.reshape(-1, x.shape[-1]).t()  # (in, rows)
        y = torch.mm(weight, flat) if bias is None else torch.addmm(bias.unsqueeze(1), weight, flat)  # (out, rows)
        y = y.t().contiguous()
        return y if matrix else y.view(*x.shape[:-1], weight.shape[0])
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


class DerivedWeights:
    """Tensors derived from parameters (a transposed or stacked weight), each rebuilt at its first use after one of
    its sources changed. One decoding run holds one (``IncrementalStep``), so nothing derived outlives it.

    A source has changed when the tensor is another object, its storage moved (``param.data = ...``, ``.to()``) or
    its version counter moved: every in-place write through the parameter bumps it (``copy_`` or ``mul_`` under
    ``no_grad``, optimizer steps, ``load_state_dict``). A write through ``param.data`` bumps no version; it is
    seen by the next run (the next ``generate`` call), not by the steps of the run under way.
    """

    def __init__(self) -> None:
        # key -> (sources, their [version, address] stamps, what was derived); the sources are held, so the ids
        # in a key are never reused while it is stored
        self._entries: dict[tuple[Hashable, ...], tuple[tuple[Tensor, ...], list[int], Any]] = {}

    def __len__(self) -> int:
        """How many things are derived and kept (a None that ``derive`` gave is not counted)."""
        return sum(entry[2] is not None for entry in self._entries.values())

    def get(
        self, sources: tuple[Tensor, ...], derive: Callable[[], Derived], *, kind: Hashable = None
    ) -> Derived | None:
        """``derive()``, computed from ``sources`` when first asked and again whenever one of them has changed;
        ``kind`` tells apart things derived from the same sources (e.g. two orientations). None where a source
        tracks no version (an inference tensor), so that nothing derived from it could be kept up to date."""
        key = (kind, *map(id, sources))
        try:
            stamp = [n for t in sources for n in (t._version, t.data_ptr())]
        except RuntimeError:  # "Inference tensors do not track version counter"
            return None
        entry = self._entries.get(key)
        if entry is None or entry[1] != stamp:
            entry = self._entries[key] = (sources, stamp, derive())
        return entry[2]


def stacked_linear(modules: Sequence[nn.Module], x: Tensor, derived: DerivedWeights) -> Tensor | None:
    """[m(x) for m in modules] concatenated, for x (rows, in) and Linear modules of the same in_features (a layer's
    q, k and v projections, or one module): (rows, sum out), by ``stacked_product`` on their parameters. None
    (compute each module as usual) where a module is not plain or ``stacked_product`` gives None."""
    weights, biases = [], []
    for module in modules:
        if not is_plain(module, nn.Linear):
            return None
        params = module._parameters
        weights.append(params["weight"])
        if params["bias"] is not None:
            biases.append(params["bias"])
    return stacked_product(x, weights, biases, derived)


def stacked_product(
    x: Tensor, weights: Sequence[Tensor], biases: Sequence[Tensor], derived: DerivedWeights
) -> Tensor | None:
    """x [W_1; ...; W_m]^T + [b_1; ...; b_m] for x (rows, in), weights (out_i, in), biases (out_i,) (one per weight,
    or none) -> (rows, out_1 + ... + out_m), one product over a weight that ``derived`` keeps. None (compute it as
    usual) unless every tensor is a plain CPU tensor that tracks versions (not an inference tensor, not a subclass
    such as torchao's int8) and one of these applies:

    - One row whose product widens, sum out > in: ``torch.addmm(b, x, W^T)`` over a contiguous W^T (in, sum out).
    - 2 to ``FEW_ROWS`` rows and m >= 2 weights: ``affine``'s orientation, (W x^T)^T + b, over the stacked W
      (sum out, in): one product instead of m (with m = 1, ``affine`` on the weight itself is the same product).

    Why widening at one row: one row of x W^T is a matrix-vector product, and on this project's CPU (AMD EPYC, one
    thread, torch's MKL) the one over a row-major W (dot products of rows of length in) runs slower than the one
    over W^T (sums of its rows scaled by x) for in = 256, and faster for in = 1024. With the weights streamed from
    memory, as in a decoding step (D = 256, V = 4096): D -> 3D (q, k, v stacked) 116-138 us against 163-205 (three
    D -> D products: 207), D -> 4D 111-145 against 225-255, the D -> V head 387-395 against 835-942; D -> D 65-67
    against 69-72 (no gain), and 4D -> D 206-225 against 109-128 (a loss).
    """
    rows = x.shape[0]
    one_row = rows == 1
    if not (one_row or (len(weights) > 1 and rows <= FEW_ROWS)) or (biases and len(biases) != len(weights)):
        return None
    # What the checks find depends on the tensors alone, so it is derived (and kept) with the copies.
    sources = (*weights, *biases)
    stacked = derived.get(sources, lambda: _stacked(weights, biases, transposed=one_row), kind=one_row)
    if stacked is None:
        return None
    weight, bias = stacked
    if one_row:
        return torch.mm(x, weight) if bias is None else torch.addmm(bias, x, weight)
    y = torch.mm(weight, x.t()) if bias is None else torch.addmm(bias, weight, x.t())  # (sum out, rows)
    return y.t().contiguous()


def _stacked(
    weights: Sequence[Tensor], biases: Sequence[Tensor], *, transposed: bool
) -> tuple[Tensor, Tensor | None] | None:
    """The weights (out_i, in) stacked, (sum out, in), or its contiguous transpose (in, sum out), which must widen
    (sum out > in); the biases (out_i,) stacked, (sum out,), as a column (sum out, 1) for the untransposed weight, or
    None without biases. None where that does not apply: a transpose that would not widen, or a tensor that is not
    a plain CPU tensor."""
    if transposed and sum(w.shape[0] for w in weights) <= weights[0].shape[1]:
        return None
    for tensor in (*weights, *biases):
        if type(tensor) not in _PLAIN_TENSORS or tensor.device.type != "cpu":
            return None
    weight = torch.cat(weights) if len(weights) > 1 else weights[0]
    bias = (torch.cat(biases) if len(biases) > 1 else biases[0]) if biases else None
    if transposed:
        return weight.t().contiguous(), bias
    return weight, None if bias is None else bias.unsqueeze(1)


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
