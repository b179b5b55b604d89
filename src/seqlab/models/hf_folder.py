"""Hugging Face model folders (config.json + model.safetensors), read and written the same way for every family
that converts (GPT-2, BERT, T5): one-line ``CheckpointError`` messages naming the file, and atomic writes."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor

from seqlab.errors import CheckpointError
from seqlab.files import atomic_path, atomic_write

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def read_hf_config(directory: Path, model_type: str, family: str) -> tuple[Path, dict[str, Any]]:
    """The path and the JSON object of ``directory``'s config.json, whose ``model_type`` must be ``model_type``.

    Raises: CheckpointError (one line) if the directory or file is missing, the file is not a JSON object, or it
        names another model type; ``family`` (e.g. "BERT") names the folder expected.
    """
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such directory")
    path = directory / CONFIG_FILE
    try:
        hf = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing; is {directory} a Hugging Face {family} folder?") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CheckpointError(f"{path}: not valid JSON") from None
    found = hf.get("model_type") if isinstance(hf, dict) else None
    if found != model_type:
        raise CheckpointError(f"{path}: model_type is {found!r}, expected {model_type!r}")
    return path, hf


def refuse_unsupported(path: Path, settings: dict[str, tuple[object, tuple[object, ...]]]) -> None:
    """Refuse a config field set to a value seqlab's model cannot compute: ``settings`` maps each field to (its
    value in the file, the supported values).

    Raises: CheckpointError naming the file, the field, its value and the supported ones.
    """
    for field, (value, supported) in settings.items():
        if value not in supported:
            choices = ", ".join(map(repr, supported))
            raise CheckpointError(f"{path}: unsupported {field} {value!r} (supported: {choices})")


@contextlib.contextmanager
def open_weights(directory: Path) -> Iterator[Any]:
    """``safe_open`` of ``directory``'s model.safetensors (torch tensors), its errors as one line.

    Raises: CheckpointError if the file is missing or unreadable.
    """
    path = directory / WEIGHTS_FILE
    try:
        with safe_open(str(path), framework="pt") as f:
            yield f
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing (only safetensors weights are read)") from None
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{path}: cannot read weights ({e})") from None


def write_hf_folder(directory: Path, hf_config: dict[str, Any], tensors: dict[str, Tensor]) -> None:
    """Write config.json and model.safetensors (contiguous CPU copies of ``tensors``) into ``directory``
    (created if missing), each file atomically.

    Raises: StorageError if a file cannot be written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write(directory / CONFIG_FILE, json.dumps(hf_config, indent=2) + "\n")
    contiguous = {name: t.detach().contiguous().cpu() for name, t in tensors.items()}
    with atomic_path(directory / WEIGHTS_FILE) as temporary:
        save_file(contiguous, str(temporary), metadata={"format": "pt"})
