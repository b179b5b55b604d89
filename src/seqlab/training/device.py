"""Devices and mixed precision: which device trains, moving batches there, autocast and the gradient scaler.

Mixed precision (Micikevicius et al., 2018) runs the forward pass and the loss under ``torch.autocast``, so
matrix products run in bf16 or fp16 while parameters, gradients and optimizer state stay in fp32. fp16's
narrow range lets small gradients underflow, so its loss is multiplied by a scale before backward and the
gradients divided by it after (``torch.amp.GradScaler``, which also skips a step whose gradient overflowed
and lowers the scale); bf16 has fp32's range and needs no scaler. bf16 is only faster where the hardware
multiplies it natively: on a CPU without AVX512-BF16 or AMX, oneDNN emulates it and a step is slower than in fp32
(measured 1.8-2.6x slower for g2p on an AVX2 machine), so precision "auto" chooses per device.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import torch
from torch import Tensor

from seqlab.errors import ConfigError
from seqlab.training.train_config import DeviceName, PrecisionName


def resolve_device(name: DeviceName) -> torch.device:
    """The device named in ``TrainConfig.device``; "auto" picks CUDA, else MPS, else the CPU.

    Args:
        name: "auto", "cpu", "cuda" or "mps".
    Returns:
        The ``torch.device``.
    Raises:
        ConfigError: if "cuda" or "mps" is named and torch cannot use it here.
    """
    cuda = torch.cuda.is_available()
    mps = torch.backends.mps.is_available()
    if name == "auto":
        return torch.device("cuda" if cuda else "mps" if mps else "cpu")
    if (name == "cuda" and not cuda) or (name == "mps" and not mps):
        raise ConfigError(f"device ({name!r}) is not available here; use device 'auto' or 'cpu'")
    return torch.device(name)


def move_to_device(batch: Any, device: torch.device) -> Any:
    """The batch with every tensor moved to ``device``, keeping its structure.

    Tuples, NamedTuples, lists, dicts and dataclass instances are rebuilt with their parts moved; other values
    (ints, strings, None) are returned as they are.
    """
    if isinstance(batch, Tensor):
        return batch.to(device)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a NamedTuple keeps its type and field names
        return type(batch)(*(move_to_device(part, device) for part in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(move_to_device(part, device) for part in batch)
    if isinstance(batch, dict):
        return {key: move_to_device(part, device) for key, part in batch.items()}
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        parts = {f.name: move_to_device(getattr(batch, f.name), device) for f in dataclasses.fields(batch) if f.init}
        return dataclasses.replace(batch, **parts)
    return batch


def check_precision(precision: PrecisionName, device: torch.device) -> None:
    """Refuse fp16 on the CPU, where torch has no gradient scaler for it.

    Raises:
        ConfigError: for precision "fp16" on a CPU device.
    """
    if precision == "fp16" and device.type == "cpu":
        raise ConfigError("precision ('fp16') needs a CUDA or MPS device, and training runs on the cpu; use 'bf16'")


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bf16 matrices natively: a CUDA GPU that supports bf16
    (``torch.cuda.is_bf16_supported``), or a CPU with AVX512-BF16 or AMX tiles (torch's CPU feature checks, private
    torch.cpu functions: torch has no public one); MPS and other devices: False."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return False


def resolve_precision(precision: PrecisionName, device: torch.device) -> PrecisionName:
    """The precision a run trains in: ``precision`` itself, or for "auto" bf16 where ``device`` multiplies bf16
    natively (``native_bf16``) and fp32 elsewhere (never fp16, whose gradient scaler can skip steps)."""
    if precision != "auto":
        return precision
    return "bf16" if native_bf16(device) else "fp32"


def training_device(device: DeviceName, precision: PrecisionName) -> torch.device:
    """The device a run with these ``TrainConfig`` settings trains on, after checking that the precision fits it;
    callers check this before they write anything, so a bad setting leaves no run directory behind.

    Raises:
        ConfigError: the named device is not available, or fp16 was asked for on the CPU.
    """
    resolved = resolve_device(device)
    check_precision(precision, resolved)
    return resolved


def autocast(precision: PrecisionName, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The context for the forward pass and the loss: ``torch.autocast`` in bf16 or fp16, nothing for fp32 (a
    resolved precision: see ``resolve_precision``)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


def grad_scaler(precision: PrecisionName, device: torch.device) -> torch.amp.GradScaler:
    """A ``torch.amp.GradScaler``, enabled for fp16 only; disabled, its methods pass through unchanged."""
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")
