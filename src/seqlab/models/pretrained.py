"""``save_pretrained`` / ``from_pretrained``: a model directory is its frozen config as JSON plus safetensors weights.

Nothing is unpickled on load: ``config.json`` is plain JSON checked against the config dataclass, and the weights
are read by safetensors, so a checkpoint from elsewhere can never run code.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model, save_model
from torch import nn

from seqlab.errors import CheckpointError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"

ModelT = TypeVar("ModelT", bound="PretrainedMixin")


class PretrainedMixin:
    """Adds directory checkpoints to an ``nn.Module`` built from one frozen dataclass config.

    A subclass sets ``config_class`` and takes the config as its only constructor argument.
    """

    config_class: ClassVar[type]
    config: Any

    def save_pretrained(self, directory: str | Path) -> None:
        """Write ``config.json`` and ``model.safetensors`` into ``directory`` (created if needed)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        payload = {"model_type": type(self).__name__, "config": dataclasses.asdict(self.config)}
        (directory / CONFIG_FILE).write_text(json.dumps(payload, indent=2) + "\n")
        assert isinstance(self, nn.Module)
        save_model(self, str(directory / WEIGHTS_FILE))

    @classmethod
    def from_pretrained(cls: type[ModelT], directory: str | Path) -> ModelT:
        """Build the model from ``directory``'s config and load its weights (float32 parameters, eval mode).

        Raises:
            CheckpointError: the directory or one of its files is missing, the config was written for another
                model type or has unknown fields, or the weights do not match the config.
        """
        directory = Path(directory)
        if not directory.is_dir():
            raise CheckpointError(f"{directory}: no such checkpoint directory")
        config_path = directory / CONFIG_FILE
        try:
            payload = json.loads(config_path.read_text())
        except FileNotFoundError:
            raise CheckpointError(f"{config_path}: missing; is {directory} a seqlab checkpoint?") from None
        except IsADirectoryError:
            raise CheckpointError(f"{config_path}: is a directory, not a file") from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise CheckpointError(f"{config_path}: not valid JSON") from None
        found = payload.get("model_type") if isinstance(payload, dict) else None
        if found != cls.__name__:
            raise CheckpointError(f"{config_path}: holds a {found!r} model, expected {cls.__name__!r}")
        if not isinstance(payload.get("config"), dict):
            raise CheckpointError(f"{config_path}: no 'config' object")
        try:
            config = cls.config_class(**payload["config"])
            model = cls(config)
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"{config_path}: bad config ({e})") from None
        weights_path = directory / WEIGHTS_FILE
        if not weights_path.is_file():
            raise CheckpointError(f"{weights_path}: missing")
        _check_weight_shapes(model, weights_path)
        load_model(model, str(weights_path))
        model.eval()
        return model


def _check_weight_shapes(model: nn.Module, weights_path: Path) -> None:
    """Raise CheckpointError (one line) unless the file holds exactly the model's tensors, with its shapes."""
    state = model.state_dict()
    expected = {name: tuple(t.shape) for name, t in state.items()}
    try:
        with safe_open(str(weights_path), framework="pt") as f:
            stored = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{weights_path}: cannot load weights ({e})") from None
    # save_model keeps one name of tensors that share memory (tied weights): the others are not missing.
    kept = {state[name].data_ptr() for name in stored if name in state}
    missing = sorted(name for name in set(expected) - set(stored) if state[name].data_ptr() not in kept)
    unexpected = sorted(set(stored) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{weights_path}: weights do not match the config (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    for name, shape in stored.items():
        if shape != expected[name]:
            raise CheckpointError(
                f"{weights_path}: weights do not match the config ({name} is {list(shape)}, "
                f"the config needs {list(expected[name])})"
            )
