"""A saved run's files as the recipes write and read them back.

``recipe.json`` holds the recipe's name and its whole sectioned config (``save_recipe_file``); a trained run is
found by it (``recipe_name_of``) and its config rebuilt from it, section by section, as the typed dataclasses, runs
saved by older versions included (``load_recipe_config``). A ``System``'s ``load`` then checks that the run's other
files belong together: ``recipe.json`` against the weights' ``config.json`` (``check_model_config``), a
vocabulary or label file against the weights' size (``check_vocabulary_size``), a JSON list file (``read_json_list``).
Every error is a one-line ``CheckpointError`` naming the file. The directory itself (where it goes, its lock, a run
replaced) is ``seqlab.recipes.run_directory``'s.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from seqlab.config import RENAMED_KEYS, arch_renamed, architectures, section_class
from seqlab.data.files import read_json_file
from seqlab.errors import CheckpointError
from seqlab.files import RECIPE_FILE, atomic_write
from seqlab.training.train_config import LEGACY_TEACHER_FORCING

ConfigT = TypeVar("ConfigT")


def save_recipe_file(directory: Path, name: str, config: Any) -> None:
    """Write ``recipe.json``: the recipe's ``name`` and its sectioned ``config``, section by section."""
    payload = {"recipe": name, "config": dataclasses.asdict(config)}
    atomic_write(directory / RECIPE_FILE, json.dumps(payload, indent=2) + "\n")


def load_recipe_config(directory: Path, config_class: type[ConfigT]) -> ConfigT:
    """The sectioned config saved in ``directory``'s ``recipe.json``, each section rebuilt (and validated) as its
    dataclass: a choice section (``model: RNNConfig | TransformerConfig``) as the class its ``arch`` names.

    Runs written before choice sections hold every architecture's fields in such a section: the fields of the
    other architectures are dropped. Runs written before ``ScheduledSamplingTrainConfig`` hold the
    ``teacher_forcing*`` fields in every train section: dropped where the section has none (they were at their
    defaults there, the only values such a recipe accepted). Keys saved under an old name (``RENAMED_KEYS``:
    ``beam_size``) load as their new one. A field a section's class lists in its ``OLDER_RUNS`` mapping, missing
    from the file, loads as the value it lists (what runs saved before the field existed used; a default changed
    since: the lm GPT's ``activation``); any other missing field loads as its default.

    Raises:
        CheckpointError: the file is missing or unreadable, a section is missing, or a section has unknown or
            invalid values (one line naming the file and the reason).
    """
    path = directory / RECIPE_FILE
    section_types = typing.get_type_hints(config_class)
    saved = read_json_file(path, error=CheckpointError, missing="missing")
    try:
        saved = saved["config"]
        sections = {
            f.name: _load_section(section_types[f.name], saved[f.name]) for f in dataclasses.fields(config_class)
        }
        return config_class(**sections)
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: bad recipe config ({e!s})") from None


def _load_section(annotation: Any, saved: dict[str, Any]) -> Any:
    """A section rebuilt from its saved fields (``load_recipe_config``). Raises: ValueError, TypeError, KeyError."""
    if architectures(annotation) is not None:
        saved = arch_renamed(saved, None)  # a run saved before its section became a choice (forecast's encoder)
    section = section_class(annotation, saved)
    saved = {**getattr(section, "OLDER_RUNS", {}), **saved}  # what a run saved before a field existed meant
    known = {f.name for f in dataclasses.fields(section)}
    saved = {RENAMED_KEYS[k] if k not in known and RENAMED_KEYS.get(k) in known else k: v for k, v in saved.items()}
    dropped = set(saved) - known
    if architectures(annotation) is not None:
        others = {f.name for c in architectures(annotation).values() for f in dataclasses.fields(c)}
        others |= {old for old, new in RENAMED_KEYS.items() if new in others}  # saved under an old name
        dropped -= others  # another architecture's field, saved by a run from before choice sections
    for name, default in LEGACY_TEACHER_FORCING.items():
        if name in dropped and saved[name] == default:
            dropped.discard(name)
    if dropped:
        raise TypeError(f"unexpected keys {', '.join(sorted(dropped))}")
    hints = typing.get_type_hints(section)
    return section(**{k: _as_saved(v, hints[k]) for k, v in saved.items() if k in known})


def _as_saved(value: Any, annotation: Any) -> Any:
    """A saved value as its field holds it: JSON's list as the tuple of a ``tuple[...]`` field."""
    kinds = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    is_tuple = any(typing.get_origin(kind) is tuple for kind in kinds)
    return tuple(value) if is_tuple and isinstance(value, list) else value


def read_json_list(path: Path, key: str) -> list[Any]:
    """The list stored under ``key`` in the JSON object file ``path`` (a run's labels, vowels, ...).

    Raises: CheckpointError (one line naming the file) if it is missing, not JSON, or has no list under ``key``.
    """
    payload = read_json_file(path, error=CheckpointError, missing="missing")
    try:
        value = payload[key]
    except (KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: bad {key} file ({e!s})") from None
    if not isinstance(value, list):
        raise CheckpointError(f"{path}: bad {key} file ({key} is not a list)")
    return value


def check_model_config(directory: Path, from_recipe: Any, from_weights: Any) -> None:
    """Refuse a run directory whose ``recipe.json`` describes another model than its ``config.json``.

    Args:
        directory: the run directory, for the message.
        from_recipe: the model config that the recipe's saved config (and data files) imply.
        from_weights: the model config that ``config.json`` holds (the weights were loaded with it).
    Raises:
        CheckpointError: naming the first field on which the two disagree, with both values.
    """
    for f in dataclasses.fields(from_recipe):
        wanted, found = getattr(from_recipe, f.name), getattr(from_weights, f.name)
        if wanted != found:
            raise CheckpointError(
                f"{directory}: {RECIPE_FILE} and config.json disagree on {f.name} ({wanted!r} vs {found!r})"
            )


def check_vocabulary_size(path: Path, size: int, model_size: int) -> None:
    """Refuse a vocabulary file (or labels, tokenizer) whose ``size`` is not the ``model_size`` of the weights.

    Raises:
        CheckpointError: naming ``path`` and both sizes.
    """
    if size != model_size:
        raise CheckpointError(
            f"{path}: {size} symbols, but the model's weights have {model_size}; not this model's file"
        )


def recipe_name_of(directory: Path) -> str:
    """The name of the recipe that wrote run directory ``directory``, from its ``recipe.json``.

    Raises:
        CheckpointError: the directory is missing or has no readable ``recipe.json``.
    """
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such checkpoint directory")
    path = directory / RECIPE_FILE
    if not path.exists() and not path.is_symlink():
        raise CheckpointError(f"{directory}: not a seqlab checkpoint (no {path.name})")
    payload = read_json_file(path, error=CheckpointError)
    name = payload.get("recipe") if isinstance(payload, dict) else None
    if not isinstance(name, str):
        raise CheckpointError(f"{path}: not a seqlab recipe file")
    return name
