"""Checkpoint averaging: the element-wise mean of the weights of several checkpoints of one architecture.

theta_avg = (1/k) sum_{i=1..k} theta_i, over the floating-point tensors of k state dicts. Vaswani et al. (2017,
section 6.1) average the last 5 (base) or 20 (big) checkpoints of a run, written at 10-minute intervals;
Junczys-Dowmunt et al. (2016) average the best checkpoints of one run. Averaging the checkpoints of one run
approximates a point at the centre of the region the optimiser visits late in training (Izmailov et al., 2018,
on stochastic weight averaging); checkpoints of independently initialised runs are not averaged this way (their
hidden units are permuted relative to each other), so ensembles decode them together instead
(``seqlab.decoding.ensemble``).

Integer and boolean tensors (step counters, masks) are not averaged: they must be equal in every checkpoint.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor, nn

from seqlab.data.files import read_json_file
from seqlab.errors import CheckpointError
from seqlab.models.pretrained import CONFIG_FILE, WEIGHTS_FILE, check_weight
from seqlab.training.callbacks import Callback
from seqlab.validation import check_int

__all__ = ["AverageLastValidated", "average_checkpoints", "average_state_dicts"]


def average_state_dicts(
    state_dicts: Sequence[Mapping[str, Tensor]], *, names: Sequence[str] | None = None
) -> dict[str, Tensor]:
    """The element-wise mean of the floating-point tensors of ``state_dicts``; other tensors must be equal.

    The mean is accumulated in float64 and returned in each tensor's own dtype.

    Args:
        state_dicts: k >= 1 mappings from parameter name to tensor, all with the same names and shapes.
        names: what to call each state dict in an error message (default "checkpoint 1", "checkpoint 2", ...).
    Returns: a new state dict with the first one's names, dtypes and shapes.
    Raises:
        CheckpointError: (one line) no state dicts, different parameter names, shapes or dtypes, or an integer
            or boolean tensor that differs between two of them.
    """
    if not state_dicts:
        raise CheckpointError("no checkpoints to average")
    names = list(names) if names is not None else [f"checkpoint {i}" for i in range(1, len(state_dicts) + 1)]
    first, first_name = state_dicts[0], names[0]
    for other, name in zip(state_dicts[1:], names[1:], strict=True):
        if set(other) != set(first):
            key = sorted(set(other) ^ set(first))[0]
            raise CheckpointError(f"{name} and {first_name} differ in parameters: {key!r} is in only one of them")
        for key, tensor in other.items():
            if tensor.shape != first[key].shape or tensor.dtype != first[key].dtype:
                raise CheckpointError(
                    f"{name}: {key} is {tuple(tensor.shape)} {tensor.dtype}, but {tuple(first[key].shape)} "
                    f"{first[key].dtype} in {first_name}"
                )
            if not first[key].is_floating_point() and not torch.equal(tensor, first[key]):
                raise CheckpointError(
                    f"{name}: integer tensor {key} differs from {first_name}'s; it cannot be averaged"
                )
    averaged = {}
    for key, tensor in first.items():
        if tensor.is_floating_point():
            total = sum(state[key].to(torch.float64) for state in state_dicts)
            averaged[key] = (total / len(state_dicts)).to(tensor.dtype)
        else:
            averaged[key] = tensor.clone()
    return averaged


def average_checkpoints(directories: Sequence[str | Path]) -> dict[str, Tensor]:
    """The averaged weights of the ``model.safetensors`` of k checkpoint directories of one architecture.

    Args:
        directories: k >= 1 directories written by ``save_pretrained`` (or ``seqlab train``).
    Returns: the averaged state dict (see :func:`average_state_dicts`), to write with ``save_file`` beside a
        copy of the first directory's ``config.json``.
    Raises:
        CheckpointError: (one line naming the directory) a missing or unreadable ``config.json`` or weights file,
            a ``config.json`` that differs from the first one's (another architecture), a weight holding a NaN
            or an infinity (``check_weight``), or weights that :func:`average_state_dicts` refuses.
    """
    directories = [Path(d) for d in directories]
    if not directories:
        raise CheckpointError("no checkpoints to average")
    configs, state_dicts = [], []
    for directory in directories:
        for name in (CONFIG_FILE, WEIGHTS_FILE):
            if not (directory / name).exists():
                raise CheckpointError(f"{directory}: not a model checkpoint (no {name})")
        configs.append(read_json_file(directory / CONFIG_FILE, error=CheckpointError))
        try:
            state_dicts.append(load_file(directory / WEIGHTS_FILE))
        except SafetensorError as e:
            raise CheckpointError(f"{directory / WEIGHTS_FILE}: unreadable ({e})") from None
    for directory, state in zip(directories, state_dicts, strict=True):
        for name, tensor in state.items():
            if tensor.is_floating_point():  # a diverged run's NaN would spread into every averaged weight
                check_weight(directory / WEIGHTS_FILE, name, tensor)
    first = _flatten(configs[0])
    for directory, config in zip(directories[1:], configs[1:], strict=True):
        flat = _flatten(config)
        differing = [key for key in sorted(set(flat) | set(first)) if flat.get(key) != first.get(key)]
        if differing:
            key = differing[0]
            raise CheckpointError(
                f"{directory}: another architecture than {directories[0]} ({key}: {flat.get(key)!r} vs "
                f"{first.get(key)!r})"
            )
    return average_state_dicts(state_dicts, names=[str(d) for d in directories])


class AverageLastValidated(Callback):
    """Keeps a CPU copy of the model's weights at each of the last ``k`` validations; ``average()`` is their mean.

    The weights at a validation are the checkpoint that validation scores, so this averages the last k validated
    checkpoints of a run (Vaswani et al. 2017's "last k checkpoints", at the trainer's validation interval).
    ``run_training`` loads the average into the model after training when ``TrainConfig.average_last`` is k.
    The copies live in memory; ``state_dict()`` goes into every training checkpoint and ``load_state_dict``
    restores it, so a resumed run averages the same validations as an uninterrupted one.

    Raises: ConfigError (a ValueError) if k is not an integer >= 1.
    """

    def __init__(self, k: int) -> None:
        check_int("average_last", k)
        self.kept: collections.deque[dict[str, Tensor]] = collections.deque(maxlen=k)

    def on_validation_end(self, model: nn.Module, record: dict[str, float]) -> None:
        self.kept.append({name: t.detach().to("cpu", copy=True) for name, t in model.state_dict().items()})

    def state_dict(self) -> dict[str, list[dict[str, Tensor]]]:
        """``{"kept": [weights, ...]}``, oldest first: the copies themselves, for a training checkpoint."""
        return {"kept": list(self.kept)}

    def load_state_dict(self, state: Mapping[str, Sequence[Mapping[str, Tensor]]]) -> None:
        """Replace the kept copies by those of ``state_dict()`` (the last k of them, oldest first).

        Raises: CheckpointError if ``state`` has no ``kept`` list.
        """
        kept = state.get("kept") if isinstance(state, Mapping) else None
        if not isinstance(kept, (list, tuple)):
            raise CheckpointError("the averaged validations' weights are missing from the training checkpoint")
        self.kept.clear()
        self.kept.extend({name: t.detach().to("cpu", copy=True) for name, t in weights.items()} for weights in kept)

    def average(self) -> dict[str, Tensor]:
        """The mean of the kept weights (fewer than k if the run validated fewer times).

        Raises: CheckpointError if no validation has happened.
        """
        return average_state_dicts(list(self.kept), names=[f"validation -{i}" for i in range(len(self.kept), 0, -1)])


def _flatten(payload: object, prefix: str = "") -> dict[str, object]:
    """``{"config": {"hidden_size": 8}}`` -> ``{"config.hidden_size": 8}``, to name the first differing field."""
    if not isinstance(payload, dict):
        return {prefix: payload}
    flat: dict[str, object] = {}
    for key, value in payload.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat
