"""The runs a server offers: each loaded once through ``load_system``, with what ``GET /v1/models`` says of it."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open

from seqlab.errors import CheckpointError, ConfigError
from seqlab.recipes import load_system, recipe_of_checkpoint
from seqlab.recipes.run_directory import RESULTS_FILE
from seqlab.recipes.system import (
    AttentionSource,
    FileInputs,
    SeriesForecaster,
    System,
    SystemOptions,
    TextGenerator,
)

MODEL_CONFIG_FILE = "config.json"  # written by save_pretrained, with the model's ``model_type``
WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True)
class ServedModel:
    """One run as a server offers it.

    Attributes:
        name: what requests call it (the run directory's name unless given).
        system: the loaded run (``seqlab.recipes.system.System``).
        recipe: the recipe that trained it.  model_type: its model's registry name ("gpt", "rnn_seq2seq", ...).
        num_parameters: numbers stored in its weights file.
        metrics: the numbers of its ``results.json`` (empty if the run has none).
    """

    name: str
    system: System
    recipe: str
    model_type: str
    num_parameters: int
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def capabilities(self) -> list[str]:
        """What the model answers: ``predict`` (texts), ``forecast`` (values), ``generate``, ``attention``."""
        offered = {
            "predict": not isinstance(self.system, FileInputs),
            "forecast": isinstance(self.system, SeriesForecaster),
            "generate": isinstance(self.system, TextGenerator),
            "attention": isinstance(self.system, AttentionSource),
        }
        return [name for name, yes in offered.items() if yes]

    def describe(self) -> dict[str, Any]:
        """The JSON object of ``GET /v1/models`` for this model."""
        return {
            "name": self.name,
            "recipe": self.recipe,
            "model_type": self.model_type,
            "num_parameters": self.num_parameters,
            "metrics": self.metrics,
            "capabilities": self.capabilities,
        }


def load_models(run_dirs: Sequence[Path], *, nbest: int = 5, compile: bool = False) -> dict[str, ServedModel]:
    """Every run of ``run_dirs``, loaded once, by name (the directory's name).

    Args:
        run_dirs: run directories (``seqlab train``'s output).
        nbest: hypotheses per input, and the beam width, of the systems that take ``nbest`` (g2p; vec2seq's
            samples per class).
        compile: compile the decoding steps of the runs whose systems take ``compile`` (``SystemOptions``), at load.
    Raises: CheckpointError for a directory that is not a readable run; ConfigError for two runs of one name, a
        bad ``nbest``, compile when no run takes it, or a run that takes it but cannot compile (not a GPT).
    """
    recipes = {directory: recipe_of_checkpoint(directory) for directory in run_dirs}
    if compile and not any("compile" in recipe.System.OPTIONS for recipe in recipes.values()):
        raise ConfigError("--compile: none of the runs generates with a compiled step (lm runs of a GPT do)")
    models: dict[str, ServedModel] = {}
    for directory in run_dirs:
        name = directory.resolve().name
        if name in models:
            raise ConfigError(
                f"{directory}: two runs are named {name!r}; serve runs from directories of distinct names"
            )
        recipe = recipes[directory]
        options = SystemOptions(num_beams=nbest, nbest=nbest) if "nbest" in recipe.System.OPTIONS else SystemOptions()
        if compile and "compile" in recipe.System.OPTIONS:
            options = replace(options, compile=True)
        models[name] = ServedModel(
            name=name,
            system=load_system(directory, options),
            recipe=recipe.NAME,
            model_type=_model_type(directory),
            num_parameters=_num_parameters(directory / WEIGHTS_FILE),
            metrics=_metrics(directory / RESULTS_FILE),
        )
    return models


def _model_type(directory: Path) -> str:
    """The ``model_type`` of the run's ``config.json``.

    Raises: CheckpointError if it is unreadable.
    """
    path = directory / MODEL_CONFIG_FILE
    try:
        return str(json.loads(path.read_text())["model_type"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: no readable model_type ({e})") from None


def _num_parameters(path: Path) -> int:
    """The numbers stored in a safetensors file, read from its header (no tensor is loaded).

    Raises: CheckpointError if the file is unreadable.
    """
    try:
        with safe_open(str(path), framework="pt") as weights:
            return sum(math.prod(weights.get_slice(key).get_shape()) for key in weights.keys())  # noqa: SIM118
    except (OSError, SafetensorError) as e:
        raise CheckpointError(f"{path}: unreadable weights ({e})") from None


def _metrics(path: Path) -> dict[str, float]:
    """The numeric entries of a run's ``results.json`` ({} if the run has none or it is unreadable)."""
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(results, dict):
        return {}
    return {
        key: value
        for key, value in results.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    }
