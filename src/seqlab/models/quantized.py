"""Checkpoints of dynamically quantized models: int8 Linear weights with their scales in safetensors, rebuilt by
torchao on load, so a quantized run is smaller on disk than its float one and loads without unpickling anything.

Dynamic int8 (torchao's ``Int8DynamicActivationInt8WeightConfig``; Jacob et al., 2018, symmetric): a Linear's
weight W (out, in) is held as int8 values q_W with one float scale per output row, W ~ s_W q_W; at each call every
input row x is quantized the same way from its own absolute maximum, the product is taken in integers and rescaled:

    y = s_x s_W (q_x q_W^T) + b,    s = max|row| / 127,    q = round(row / s)

The module stays an ``nn.Linear``; its weight becomes a torchao tensor subclass (``Int8Tensor``) for which
``F.linear`` runs the int8 product. So every caller of ``F.linear`` on the module's weight (the module itself and
the GPT decoding fast path, ``seqlab.nn.direct_calls``) computes the same thing.

On disk, ``config.json`` holds ``"quantization": {"method": "dynamic-int8", "modules": [names]}`` beside the model's
config, and ``model.safetensors`` holds the float tensors under their names and, for each quantized Linear M, the
quantized weight's own tensors under ``M.weight.qdata`` (int8, (out, in)) and ``M.weight.scale`` (float, (out, 1)).
Loading builds the float model, quantizes the named Linear layers as ``quantize_linears`` does (so torchao sets
every attribute of the quantized weights), and overwrites their data with the stored tensors.

torchao is an optional dependency (``pip install seqlab[quantize]``), imported only to quantize a model or to load a
quantized one (its import takes longer than torch's): without it, a quantized checkpoint is refused in one line
that says what to install.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor, nn

from seqlab.errors import CheckpointError
from seqlab.logs import quiet_loggers

QUANTIZATION_KEY = "quantization"  # config.json's entry for a quantized model
METHODS = ("dynamic-int8",)
INSTALL_HINT = "install torchao (pip install 'seqlab[quantize]')"
TORCHAO = "torchao.quantization"
# Loggers that report, while torchao is imported, what does not concern a CPU run: CUDA-only extensions that did not
# load, and a torch.compile registration that torch now deprecates. Also for an import of a library that imports
# torchao itself where it is installed (transformers, in the benchmarks).
TORCHAO_IMPORT_LOGGERS = ("torchao", "torch.utils._pytree")
__all__ = [
    "METHODS",
    "QUANTIZATION_KEY",
    "TORCHAO_IMPORT_LOGGERS",
    "Quantization",
    "quantization_of",
    "quantize_linears",
]


@dataclass(frozen=True)
class Quantization:
    """How a model is quantized: its ``method`` (one of ``METHODS``) and the names of its quantized Linear
    ``modules``, as ``config.json`` records it."""

    method: str
    modules: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The ``config.json`` entry: ``{"method": ..., "modules": [...]}``."""
        return {"method": self.method, "modules": list(self.modules)}

    @classmethod
    def from_json(cls, entry: Any, config_path: Path) -> Quantization:
        """The record ``entry`` read from ``config_path``.

        Raises: CheckpointError for an entry that is not ``{"method": one of METHODS, "modules": [names]}``, or
            when torchao is not installed.
        """
        if not isinstance(entry, dict) or set(entry) != {"method", "modules"}:
            raise CheckpointError(f"{config_path}: {QUANTIZATION_KEY!r} must hold 'method' and 'modules' only")
        method, modules = entry["method"], entry["modules"]
        if method not in METHODS:
            raise CheckpointError(f"{config_path}: unknown quantization method {method!r}; known: {', '.join(METHODS)}")
        if not isinstance(modules, list) or not modules or not all(isinstance(m, str) for m in modules):
            raise CheckpointError(f"{config_path}: quantization 'modules' must be a non-empty list of module names")
        try:
            _torchao()
        except ModuleNotFoundError:
            raise CheckpointError(f"{config_path}: holds a {method} model; {INSTALL_HINT} to load it") from None
        return cls(method, tuple(modules))


def quantize_linears(model: nn.Module, names: Sequence[str], *, method: str) -> None:
    """Quantize the Linear layers of ``model`` called ``names`` in place with ``method`` (torchao).

    Raises:
        ValueError: an unknown method, or a name that is not an ``nn.Linear`` of the model.
        ModuleNotFoundError: torchao is not installed.
    """
    if method not in METHODS:
        raise ValueError(f"unknown quantization method {method!r}; known: {', '.join(METHODS)}")
    torchao = _torchao()
    modules = dict(model.named_modules())
    wanted = set(names)
    for name in sorted(wanted):
        if type(modules.get(name)) is not nn.Linear:
            raise ValueError(f"{name!r} is not a Linear layer of the model")
    # Per-row (per output channel) weight scales and per-row activation scales: torchao's defaults, written out.
    # set_inductor_config=False: the default changes torch.compile's global settings, which a model does not own.
    config = torchao.Int8DynamicActivationInt8WeightConfig(granularity=torchao.PerRow(), set_inductor_config=False)
    torchao.quantize_(model, config, filter_fn=lambda module, fqn: fqn in wanted)


def quantization_of(model: nn.Module) -> Quantization | None:
    """The quantization of ``model``'s Linear layers, read from their weights; None for a float model."""
    torchao = sys.modules.get(TORCHAO)
    if torchao is None:  # not imported yet: no weight can be one of its tensors
        return None
    names = tuple(
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and isinstance(module.weight, torchao.Int8Tensor)
    )
    return Quantization(METHODS[0], names) if names else None


def quantized_tensors(model: nn.Module, quantization: Quantization) -> dict[str, Tensor]:
    """What ``model.safetensors`` holds for a quantized model (module docstring): its float tensors under their
    names and each quantized weight's data tensors; tensors shared by two names are stored once."""
    quantized = {f"{name}.weight" for name in quantization.modules}
    tensors: dict[str, Tensor] = {}
    stored: set[tuple[int, int]] = set()
    for name, tensor in model.state_dict().items():
        if name in quantized:
            for data_name in tensor.tensor_data_names:
                tensors[f"{name}.{data_name}"] = getattr(tensor, data_name).contiguous()
            continue
        key = (tensor.data_ptr(), tensor.numel())
        if key not in stored:  # tied weights (an embedding and a float output layer): one copy, as save_model
            stored.add(key)
            tensors[name] = tensor.contiguous()
    return tensors


def load_quantized(model: nn.Module, quantization: Quantization, weights_path: Path) -> None:
    """Quantize ``model`` (built from its config) as recorded and load ``weights_path`` into it.

    Raises: CheckpointError (one line naming the file) for a module that is not a Linear of the model, a file
        that cannot be read, tensors missing or unexpected, of another shape or dtype, or NaN or infinite values.
    """
    try:
        quantize_linears(model, quantization.modules, method=quantization.method)
    except ValueError as e:
        raise CheckpointError(f"{weights_path.parent / 'config.json'}: {e}") from None
    expected = _expected_tensors(model, quantization)
    try:
        stored = load_file(str(weights_path))
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{weights_path}: cannot load weights ({e})") from None
    missing = sorted(set(expected) - set(stored) - _tied_names(model, stored))
    unexpected = sorted(set(stored) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{weights_path}: weights do not match the config (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    for name, tensor in stored.items():
        target = expected[name]
        if tensor.shape != target.shape or tensor.dtype != target.dtype:
            raise CheckpointError(
                f"{weights_path}: {name} is {tensor.dtype} {list(tensor.shape)}, "
                f"the config needs {target.dtype} {list(target.shape)}"
            )
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(f"{weights_path}: {name} holds NaN or infinite values (a diverged model?)")
    with torch.no_grad():
        for name, tensor in stored.items():
            expected[name].copy_(tensor)
    model.eval()


def _expected_tensors(model: nn.Module, quantization: Quantization) -> dict[str, Tensor]:
    """Every tensor a quantized checkpoint of ``model`` may hold, by its name in the file: the model's own tensors
    (to copy into), quantized weights replaced by their data tensors."""
    quantized = {f"{name}.weight" for name in quantization.modules}
    expected = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if name in quantized:
            expected.update({f"{name}.{d}": getattr(tensor, d) for d in tensor.tensor_data_names})
        else:
            expected[name] = tensor.data
    return expected


def _tied_names(model: nn.Module, stored: dict[str, Tensor]) -> set[str]:
    """The names of tensors that share memory with a stored name (tied weights), which the file holds once."""
    state = model.state_dict()
    kept = {state[name].data_ptr() for name in stored if name in state and type(state[name]) is Tensor}
    return {name for name, t in state.items() if type(t) is Tensor and t.data_ptr() in kept and name not in stored}


def _torchao() -> ModuleType:
    """``torchao.quantization``, imported on first use without the log lines of ``TORCHAO_IMPORT_LOGGERS``.

    Raises: ModuleNotFoundError (saying what to install) if torchao is not installed.
    """
    try:
        with quiet_loggers(TORCHAO_IMPORT_LOGGERS):
            return importlib.import_module(TORCHAO)
    except ImportError:
        raise ModuleNotFoundError(f"quantization needs torchao: {INSTALL_HINT}") from None
