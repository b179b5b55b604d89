"""Fine-tuning from a checkpoint: ``--set model.init_from=DIR`` loads a seqlab run directory's parameters by name.

A recipe's model section inherits :class:`InitFromConfig`; ``run_training`` then loads, before training, every
tensor of ``DIR/model.safetensors`` whose name and shape match a parameter (or buffer) of the freshly built
model. Tensors that do not fit (in the file but not in the model, in the model but not in the file, or of another
shape) are named in one line: an error by default, or, with ``model.init_strict=false``, skipped and listed in
the log. Never silently. The loaded parameters are the pretrained body that ``train.body_lr_scale`` trains at its
own learning rate; ``train.freeze`` fixes any of them (``seqlab.training.optim``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from seqlab.errors import CheckpointError
from seqlab.models.pretrained import WEIGHTS_FILE
from seqlab.validation import check_bool


@dataclass(frozen=True)
class InitFromConfig:
    """The model-section fields every fine-tunable recipe shares (its model section inherits them)."""

    init_from: str | None = None  # a seqlab run directory whose model.safetensors initialises the model by name
    init_strict: bool = True  # refuse tensors that do not fit; false: skip them and list them in the log

    def __post_init__(self) -> None:
        if self.init_from is not None and not isinstance(self.init_from, str):
            raise ValueError(f"init_from must be a directory path or None, got {self.init_from!r}")
        check_bool("init_strict", self.init_strict)


def load_by_name(model: nn.Module, directory: str | Path, *, strict: bool, log: Callable[[str], None]) -> list[str]:
    """Copy the tensors of ``directory``'s ``model.safetensors`` into ``model``'s parameters and buffers of the
    same name and shape.

    Args:
        model: the freshly built model.
        directory: a seqlab run (or model) directory.
        strict: raise if any tensor does not fit; else skip those and log them.
        log: receives one line of what was loaded (and, when not strict, one of what was skipped).
    Returns:
        The names of the model's parameters that were loaded (its pretrained body).
    Raises:
        CheckpointError: the directory or its weights file is missing or unreadable; with ``strict``, tensors
            that do not fit (one line naming each: missing, unexpected, wrong shape).
    """
    directory = Path(directory)
    path = directory / WEIGHTS_FILE
    if not directory.is_dir():
        raise CheckpointError(f"model.init_from {directory}: no such directory")
    if not path.is_file():
        raise CheckpointError(f"model.init_from {directory}: no {WEIGHTS_FILE}; is it a seqlab run directory?")
    try:
        stored = load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{path}: cannot load weights ({e})") from None
    state = model.state_dict()
    # A file keeps one name of tensors that share memory (tied weights); the model's other names are not missing.
    kept = {state[name].data_ptr() for name in stored if name in state}
    missing = sorted(n for n in state if n not in stored and state[n].data_ptr() not in kept)
    unexpected = sorted(n for n in stored if n not in state)
    wrong_shape = sorted(
        f"{n} {list(stored[n].shape)} vs {list(state[n].shape)}"
        for n in stored
        if n in state and stored[n].shape != state[n].shape
    )
    problems = "; ".join(
        f"{kind}: {', '.join(names)}"
        for kind, names in (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong_shape))
        if names
    )
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
