"""``save_pretrained`` / ``from_pretrained``: a model directory is its frozen config as JSON plus safetensors weights.

Nothing is unpickled on load: ``config.json`` is plain JSON checked against the config dataclass, and the weights
are read by safetensors, so a checkpoint from elsewhere can never run code.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from safetensors import SafetensorError
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
        """Build the model from ``directory``'s config and load its weights (in eval mode).

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
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise CheckpointError(f"{config_path}: not valid JSON") from None
        if not isinstance(payload, dict) or payload.get("model_type") != cls.__name__:
            found = payload.get("model_type") if isinstance(payload, dict) else None
            raise CheckpointError(f"{config_path}: holds a {found!r} model, expected {cls.__name__!r}")
        try:
            config = cls.config_class(**payload["config"])
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"{config_path}: bad config ({e})") from None
        model = cls(config)
        weights_path = directory / WEIGHTS_FILE
        if not weights_path.is_file():
            raise CheckpointError(f"{weights_path}: missing")
        try:
            missing, unexpected = load_model(model, str(weights_path), strict=False)
        except (SafetensorError, OSError, RuntimeError) as e:
            raise CheckpointError(f"{weights_path}: cannot load weights ({e})") from None
        if missing or unexpected:
            raise CheckpointError(
                f"{weights_path}: weights do not match the config (missing {sorted(missing)[:3]}, "
                f"unexpected {sorted(unexpected)[:3]})"
            )
        model.eval()
        return model
