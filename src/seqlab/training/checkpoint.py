"""Training-state checkpoints: everything ``Trainer.fit`` needs to continue a run as if it had never stopped.

A training state is a nested value of dicts (str or int keys), lists, tuples, registered NamedTuples (the
recurrent ``LSTMState``), tensors, numbers, strings and None: the model's and optimizer's state dicts, the
scheduler's and gradient scaler's, every random generator's state, the data-order position and the trainer's
bookkeeping (see ``Trainer.fit``). It is written as ONE safetensors file: the tensors under their paths in the
nesting (``optimizer/state/0/exp_avg``), and the nesting itself, with every non-tensor value, as JSON in the
file's metadata. Nothing is pickled, so loading a checkpoint can never run code, and one file means one atomic
``os.replace`` (``seqlab.files``): a crash leaves the previous checkpoint or the new one, never a mixture.

JSON keeps Python floats exactly (shortest round-trip repr; NaN and Infinity as Python's json writes them),
and the tensors keep their dtype and bits, so a state loads back equal, bit for bit.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save
from torch import Tensor

from seqlab.errors import CheckpointError
from seqlab.files import atomic_write
from seqlab.nn.functional.recurrence import LSTMState
from seqlab.training.device import move_to_device
from seqlab.training.run_state import RunState

STATE_FILE = "training_state.safetensors"
FORMAT = "seqlab.training_state"
VERSION = 1
# NamedTuples a state may hold, by name: rebuilt with their own type, because code tests isinstance on them.
STATE_TYPES: dict[str, type[tuple]] = {"LSTMState": LSTMState}

# Bookkeeping of Trainer.fit that is not saved: wall-clock instants, the best parameters (saved apart) and
# what a resume itself sets.
_UNSAVED_RUN_FIELDS = frozenset({"start", "segment_start", "step_start", "best_state", "resume_rng"})

__all__ = [
    "STATE_FILE",
    "Stateful",
    "TrainingParts",
    "load_training_state",
    "restore_training_state",
    "rng_state",
    "save_training_state",
    "set_rng_state",
    "training_state",
]


class Stateful(Protocol):
    """A part whose state a checkpoint saves and restores: torch's ``state_dict`` / ``load_state_dict`` pair
    (``nn.Module``, ``Optimizer``, ``LRScheduler``, ``GradScaler``, a training ``Strategy``)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any], /) -> Any: ...


class TrainingParts(Protocol):
    """What a training checkpoint saves from and restores into: the parts of a trainer that carry state, and the
    device the strategy's tensors go back to. ``seqlab.training.Trainer`` is one; this module never imports it,
    so the trainer depends on its checkpoints and not the other way round (issue 21)."""

    @property
    def model(self) -> Stateful: ...

    @property
    def optimizer(self) -> Stateful: ...

    @property
    def scheduler(self) -> Stateful: ...

    @property
    def scaler(self) -> Stateful: ...

    @property
    def strategy(self) -> Stateful: ...

    @property
    def device(self) -> torch.device: ...


def training_state(
    trainer: TrainingParts, run: RunState, *, epoch: int, stopped_by: str | None, now: float | None = None
) -> dict[str, Any]:
    """The state of ``trainer`` after a step of ``epoch``: what ``Trainer(checkpoint=...)`` receives.

    Keys: epoch, stopped_by (the stop reason decided at this step, or None), elapsed (seconds of training so far,
    ``now - run.start``; ``now`` is the trainer's clock, ``time.perf_counter()`` if None), run (the fit's
    bookkeeping: step, history, best record, patience count, sums since the latest validation, micro-batches of the
    epoch read so far, the data generator's state when the epoch began), best_model (the best validated parameters),
    model, optimizer, scheduler, scaler and strategy (their ``state_dict()``), rng (``rng_state()``).
    """
    return {
        "epoch": epoch,
        "stopped_by": stopped_by,
        "elapsed": (time.perf_counter() if now is None else now) - run.start,
        "run": {f.name: getattr(run, f.name) for f in dataclasses.fields(run) if f.name not in _UNSAVED_RUN_FIELDS},
        "best_model": run.best_state,
        "model": trainer.model.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "scheduler": trainer.scheduler.state_dict(),
        "scaler": trainer.scaler.state_dict(),
        "strategy": trainer.strategy.state_dict(),
        "rng": rng_state(),
    }


def restore_training_state(
    trainer: TrainingParts,
    state: dict[str, Any],
    run: RunState,
    generator: torch.Generator,
    *,
    now: float | None = None,
) -> tuple[int, Any]:
    """Load ``training_state``'s value into ``trainer``, the fit's bookkeeping ``run`` and the data ``generator``
    (set to its state when the checkpoint's epoch began); the global RNG states wait in ``run.resume_rng``
    until the epoch's batches before the checkpoint have been skipped. ``run.start`` is set ``elapsed`` seconds
    before ``now`` (the trainer's clock, ``time.perf_counter()`` if None), so the time budget and a budgeted
    schedule go on from the saved elapsed time: the time between the checkpoint and the interruption, whose
    steps are trained again, is not counted twice.

    Returns: the checkpoint's epoch and stop reason.
    Raises:
        CheckpointError: the state does not fit the trainer's model, optimizer, strategy or bookkeeping (one
            line with the reason).
    """
    try:
        trainer.model.load_state_dict(state["model"])
        trainer.optimizer.load_state_dict(state["optimizer"])
        trainer.scheduler.load_state_dict(state["scheduler"])
        trainer.scaler.load_state_dict(state["scaler"])
        trainer.strategy.load_state_dict(move_to_device(state["strategy"], trainer.device))
        for f in dataclasses.fields(run):
            if f.name not in _UNSAVED_RUN_FIELDS:
                setattr(run, f.name, state["run"][f.name])
        run.best_state, run.resume_rng = state["best_model"], state["rng"]
        generator.set_state(run.epoch_generator)
        now = time.perf_counter() if now is None else now
        run.start = run.segment_start = run.step_start = now - state["elapsed"]
        return int(state["epoch"]), state["stopped_by"]
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        reason = " ".join(str(e).split()).split(". ")[0]  # load_state_dict lists every mismatch over many lines
        raise CheckpointError(f"the training checkpoint does not fit this run ({reason})") from None


def save_training_state(path: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` (nested as in the module docstring) to the safetensors file ``path``, atomically.

    Raises:
        TypeError: a value of another type (the message gives its path in the nesting).
        StorageError: the file cannot be written (a full disk); the previous file at ``path`` is unchanged.
    """
    tensors: dict[str, Tensor] = {}
    structure = _encode(state, "", tensors)
    metadata = {"format": FORMAT, "version": str(VERSION), "state": json.dumps(structure)}
    atomic_write(path, save(tensors, metadata=metadata))


def load_training_state(path: str | Path) -> dict[str, Any]:
    """The state that ``save_training_state`` wrote to ``path`` (tensors on the CPU).

    Raises:
        CheckpointError: the file is missing, truncated or corrupt, was not written by ``save_training_state``
            or names a tensor it does not hold (one line naming the file).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: missing; the run has no training checkpoint to resume from")
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{path}: unreadable training checkpoint ({e})") from None
    if metadata.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a seqlab training checkpoint (a safetensors file without its state)")
    if metadata.get("version") != str(VERSION):
        raise CheckpointError(
            f"{path}: training checkpoint version {metadata.get('version')}; this seqlab reads version {VERSION}"
        )
    try:
        state = _decode(json.loads(metadata["state"]), tensors)
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: corrupt training checkpoint ({e!r})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: corrupt training checkpoint (no state object)")
    return state


def rng_state() -> dict[str, Any]:
    """The states of Python's ``random``, NumPy's global generator and torch's CPU (and CUDA) generators."""
    name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [name, keys.tolist(), position, has_gauss, cached_gaussian],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the generators from ``rng_state()``'s value (CUDA's only when this machine has as many devices)."""
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    name, keys, position, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached_gaussian))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available() and torch.cuda.device_count() == len(state["cuda"]):
        torch.cuda.set_rng_state_all(state["cuda"])


def _encode(value: Any, path: str, tensors: dict[str, Tensor]) -> Any:
    """JSON for ``value``; its tensors go into ``tensors`` under their path (tagged objects mark non-JSON types)."""
    if isinstance(value, Tensor):
        tensors[path] = value.detach().cpu().contiguous().clone()  # shared or strided storage cannot be saved
        return {"tensor": path}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        name = type(value).__name__
        if STATE_TYPES.get(name) is not type(value):
            raise TypeError(f"{path or 'state'}: NamedTuple {name} is not registered in STATE_TYPES")
        return {"namedtuple": name, "items": [_encode(v, f"{path}/{i}", tensors) for i, v in enumerate(value)]}
    if isinstance(value, tuple):
        return {"tuple": [_encode(v, f"{path}/{i}", tensors) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f"{path}/{i}", tensors) for i, v in enumerate(value)]
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise TypeError(f"{path or 'state'}: dict key {key!r} is neither a str nor an int")
        return {"dict": [[k, _encode(v, f"{path}/{k}", tensors)] for k, v in value.items()]}
    raise TypeError(f"{path or 'state'}: cannot checkpoint a {type(value).__name__}")


def _decode(value: Any, tensors: dict[str, Tensor]) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if "tensor" in value:
        return tensors[value["tensor"]]
    if "tuple" in value:
        return tuple(_decode(v, tensors) for v in value["tuple"])
    if "namedtuple" in value:
        return STATE_TYPES[value["namedtuple"]](*(_decode(v, tensors) for v in value["items"]))
    return {k: _decode(v, tensors) for k, v in value["dict"]}
