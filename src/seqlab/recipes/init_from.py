"""Fine-tuning from a checkpoint: ``--set model.init_from=DIR`` loads a seqlab run directory's or a Hugging Face
folder's parameters by name.

A recipe's model section inherits :class:`InitFromConfig`; ``run_training`` then loads, before training, every
tensor of ``DIR/model.safetensors`` whose name and shape match a parameter (or buffer) of the freshly built model. A
Hugging Face folder (config.json with the ``model_type`` "bert", "gpt2" or "t5", no seqlab ``config`` section) is
first converted by its family's ``from_hf`` (``Bert``, ``GPT``, ``T5``) into seqlab's names; a BERT body is matched
under ``bert.`` when the model keeps its body there (the task models of ``seqlab.models.bert``). Tensors that do not
fit (in the file but not in the model, in the model but not in the file, or of another shape) are named in one line:
an error by default, or, with ``model.init_strict=false``, skipped and listed in the log. Never silently. The loaded
parameters are the pretrained body that ``train.body_lr_scale`` trains at its own learning rate; ``train.freeze``
fixes any of them (``seqlab.training.optim``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor, nn

from seqlab.data.files import read_json_file
from seqlab.errors import CheckpointError, DataError
from seqlab.models import GPT, T5, Bert
from seqlab.models.pretrained import CONFIG_FILE, WEIGHTS_FILE
from seqlab.validation import check_bool


@dataclass(frozen=True)
class InitFromConfig:
    """The model-section fields every fine-tunable recipe shares (its model section inherits them)."""

    init_from: str | None = None  # a seqlab run directory or a Hugging Face BERT / GPT-2 / T5 folder, loaded by name
    init_strict: bool = True  # refuse tensors that do not fit; false: skip them and list them in the log

    def __post_init__(self) -> None:
        if self.init_from is not None and not isinstance(self.init_from, str):
            raise ValueError(f"init_from must be a directory path or None, got {self.init_from!r}")
        check_bool("init_strict", self.init_strict)


def load_by_name(model: nn.Module, directory: str | Path, *, strict: bool, log: Callable[[str], None]) -> list[str]:
    """Copy the tensors of ``directory``'s ``model.safetensors`` (converted to seqlab's names if it is a Hugging
    Face folder) into ``model``'s parameters and buffers of the same name and shape.

    Args:
        model: the freshly built model.
        directory: a seqlab run (or model) directory, or a Hugging Face BERT, GPT-2 or T5 folder.
        strict: raise if any tensor does not fit; else skip those and log them.
        log: receives one line of what was loaded (and, when not strict, one of what was skipped).
    Returns:
        The names of the model's parameters that were loaded (its pretrained body).
    Raises:
        CheckpointError: the directory or its weights file is missing or unreadable, a Hugging Face folder is of
            another family or does not convert (``from_hf``'s one line); with ``strict``, tensors that do not fit
            (one line naming each: missing, unexpected, wrong shape).
    """
    directory = Path(directory)
    state = model.state_dict()
    stored = _stored_tensors(directory, body_prefix=any(n.startswith("bert.") for n in state))
    problems = _misfits(state, stored)
    if problems and strict:
        raise CheckpointError(
            f"model.init_from {directory}: tensors that do not fit ({problems}); "
            "--set model.init_strict=false skips them"
        )
    if problems:
        log(f"model.init_from {directory}: skipped tensors that do not fit ({problems})")
    fitting = {n: t for n, t in stored.items() if n in state and t.shape == state[n].shape}
    with torch.no_grad():
        for name, tensor in fitting.items():
            state[name].copy_(tensor)
    loaded_ptrs = {state[n].data_ptr() for n in fitting}
    loaded = [n for n, p in model.named_parameters() if p.data_ptr() in loaded_ptrs]
    log(f"model.init_from {directory}: loaded {len(fitting)} of {len(state)} tensors by name")
    return loaded


def _stored_tensors(directory: Path, *, body_prefix: bool) -> dict[str, torch.Tensor]:
    """The tensors of ``directory``'s weights, by seqlab name (a Hugging Face folder's converted).

    Raises: CheckpointError for a missing directory or weights file, or weights that do not load.
    """
    path = directory / WEIGHTS_FILE
    if not directory.is_dir():
        raise CheckpointError(f"model.init_from {directory}: no such directory")
    if not path.is_file():
        raise CheckpointError(
            f"model.init_from {directory}: no {WEIGHTS_FILE}; is it a seqlab run directory or a Hugging Face folder?"
        )
    hf_type = hugging_face_type(directory)
    if hf_type is not None:
        return hugging_face_state(directory, hf_type, body_prefix=body_prefix)
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{path}: cannot load weights ({e})") from None


def _misfits(state: dict[str, torch.Tensor], stored: dict[str, torch.Tensor]) -> str:
    """One line of the tensors that do not fit (missing, unexpected, wrong shape), "" if all fit."""
    # A file keeps one name of tensors that share memory (tied weights); the model's other names are not missing.
    kept = {state[name].data_ptr() for name in stored if name in state}
    missing = sorted(n for n in state if n not in stored and state[n].data_ptr() not in kept)
    unexpected = sorted(n for n in stored if n not in state)
    wrong_shape = sorted(
        f"{n} {list(stored[n].shape)} vs {list(state[n].shape)}"
        for n in stored
        if n in state and stored[n].shape != state[n].shape
    )
    return "; ".join(
        f"{kind}: {', '.join(names)}"
        for kind, names in (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong_shape))
        if names
    )


HF_FAMILIES: dict[str, Any] = {"bert": Bert, "gpt2": GPT, "t5": T5}  # Hugging Face model_type -> seqlab class


def hugging_face_type(directory: Path) -> str | None:
    """The ``model_type`` of ``directory``'s config.json if it is a Hugging Face folder ("unknown" if it names
    none); None for a seqlab directory (its config.json has a ``config`` section) or one without a readable
    config.json."""
    try:
        payload = read_json_file(directory / CONFIG_FILE)
    except DataError:
        return None
    if not isinstance(payload, dict) or isinstance(payload.get("config"), dict):
        return None
    return str(payload.get("model_type", "unknown"))


def hugging_face_state(directory: Path, model_type: str, *, body_prefix: bool) -> dict[str, Tensor]:
    """The tensors of the Hugging Face folder ``directory`` under seqlab's names (its family's ``from_hf``); a
    BERT's under ``bert.`` when ``body_prefix``.

    Raises: CheckpointError for a family seqlab cannot convert, or as the family's ``from_hf``.
    """
    if model_type not in HF_FAMILIES:
        families = ", ".join(HF_FAMILIES)
        raise CheckpointError(
            f"model.init_from {directory}: a Hugging Face {model_type!r} folder; seqlab converts {families}"
        )
    state = HF_FAMILIES[model_type].from_hf(directory).state_dict()
    prefix = "bert." if model_type == "bert" and body_prefix else ""
    return {prefix + name: tensor for name, tensor in state.items()}
