"""Typed configuration: frozen dataclasses in sections, set from TOML files and ``section.key=value`` overrides.

A recipe's configuration is a frozen dataclass whose fields are section dataclasses (``data``, ``model``,
``train``, ``decode``). Users change it with a TOML file (one table per section) and with command-line
``--set section.key=value`` pairs; both go through :func:`apply_overrides`, which converts each value to the
field's declared type and lets the section's ``__post_init__`` validate it. Every problem is a
:class:`~seqlab.errors.ConfigError` whose message names the key and the bad value.
"""

from __future__ import annotations

import dataclasses
import stat
import sys
import types
import typing
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from seqlab.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

ConfigT = TypeVar("ConfigT")

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
_NONE = {"none", "null"}
ARCH = "arch"  # the field that names a choice section's architecture
# Keys renamed so that one concept has one name across the package and the CLI: old name -> new name. The old
# name keeps working for one release, with a FutureWarning; ``recipe.json`` files that hold it still load.
RENAMED_KEYS = {
    "beam_size": "num_beams",
    "max_positions": "context_length",
    "max_length": "context_length",
    "encoder": ARCH,  # forecast's model.encoder, before its model section became a choice section
}


@dataclass(frozen=True)
class ArchField:
    """The ``arch`` field of a choice section's classes, inherited last so that it comes first in their fields;
    each architecture's class sets its own name as the default (``architectures``)."""

    arch: str = ""


def refuse_set(section: Any, names: tuple[str, ...], reason: str) -> None:
    """Refuse the fields ``names`` of the dataclass ``section`` that differ from their defaults, because nothing
    reads them in the setting ``reason`` describes (a key that is set and then ignored misleads; the package
    refuses it instead).

    Raises:
        ConfigError: the first such field, "NAME (VALUE) REASON", e.g. "decay_factor (2.0) is used by schedule
            'epoch_decay' only, not 'cosine'".
    """
    defaults = {f.name: f.default for f in dataclasses.fields(section)}
    for name in names:
        value = getattr(section, name)
        if value != defaults[name]:
            raise ConfigError(f"{name} ({value!r}) {reason}")


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML configuration file into nested dicts.

    Raises:
        ConfigError: the file is missing, not a regular file, unreadable, or not valid TOML (message names the
            file and the reason).
    """
    path = Path(path)
    try:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise ConfigError(f"{path}: is a directory, not a config file")
        if not stat.S_ISREG(mode):  # a FIFO would block forever, a device never end
            raise ConfigError(f"{path}: is not a regular file (a FIFO, socket or device), not a config file")
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML ({' '.join(str(e).split())})") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the config file ({e.strerror})") from None


def parse_assignments(assignments: list[str]) -> dict[str, str]:
    """Turn ``["train.lr=0.001", ...]`` into ``{"train.lr": "0.001", ...}``.

    Raises:
        ConfigError: an item has no ``=`` or an empty key, or the same key is given twice (which one was meant
            is not for seqlab to guess).
    """
    parsed: dict[str, str] = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected section.key=value")
        if key in parsed:
            raise ConfigError(f"--set {key}: given twice ({parsed[key]!r} and {value.strip()!r}); give it once")
        parsed[key] = value.strip()
    return parsed


def flatten(nested: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train": {"lr": 1e-3}}`` -> ``{"train.lr": 1e-3}`` (TOML tables to dotted keys)."""
    flat: dict[str, Any] = {}
    for key, value in nested.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, prefix=f"{dotted}."))
        else:
            flat[dotted] = value
    return flat


def apply_overrides(config: ConfigT, overrides: Mapping[str, Any], *, source: str = "--set") -> ConfigT:
    """Return a copy of a sectioned config with dotted-key overrides applied and validated.

    A section declared as a union of config classes (``model: RNNConfig | TransformerConfig``), each naming its
    architecture in the default of an ``arch`` field, is a choice (``architectures``): ``section.arch=X`` selects
    X's class, and the section then takes X's keys only. Fields the old and new class share keep the values given
    earlier (a TOML file, then ``--set``); a value given earlier for a key the new class lacks is refused.
    A key's old name (``RENAMED_KEYS``: ``decode.beam_size``) sets its new one, with a FutureWarning.

    A choice class may also list its own defaults for keys of other sections, in a ``SECTION_DEFAULTS`` class
    variable (``{"train": {"lr": 5e-3}}``: the g2p Transformer trains with other settings than the RNN).
    Switching to it sets those keys, and switching away sets them back to the recipe's defaults, except a key given
    in the same overrides or set earlier to a value other than the previous architecture's default (as for the
    shared fields above).

    A section may also give defaults for other sections from its values, by a ``section_defaults()`` method
    (``{"train": {"schedule": "epoch_decay"}}``: the lm recipe's LSTM ``preset``). A section given in these
    overrides takes them for its keys not given and still at the recipe's defaults, before it is validated (those
    its given keys refuse are left out); the choice sections are read first, so a preset set in the same overrides
    counts.

    Args:
        config: a frozen dataclass whose fields are frozen dataclasses (the sections).
        overrides: ``{"section.key": value}``; string values are converted to the field's type
            (``int``, ``float``, ``bool``, ``str``, ``X | None``, where ``none`` means None, and tuples, given as
            comma-separated values: ``train.betas=0.9,0.95``).
        source: where the overrides came from, for messages (``--set`` or a file name).

    Raises:
        ConfigError: unknown section or key (the message lists the valid ones), a key of another architecture
            (``--set model.num_heads: does not apply to model.arch=rnn``), a value that does not convert, or a
            value the section's validation rejects.
    """
    sections = {f.name: f for f in dataclasses.fields(config)}
    section_hints = typing.get_type_hints(type(config))
    grouped: dict[str, dict[str, Any]] = {}
    for dotted, raw in overrides.items():
        section, _, key = dotted.partition(".")
        if section not in sections or not key:
            raise ConfigError(f"{source} {dotted}: unknown key; sections are {', '.join(sections)}")
        grouped.setdefault(section, {})[key] = raw
    replaced = {}
    # Choice sections first: their section_defaults() may fill keys of the others.
    order = sorted(grouped, key=lambda name: architectures(section_hints[name]) is None)
    for section in order:
        given = grouped[section]
        choices = architectures(section_hints[section])
        current = getattr(config, section)
        if choices is not None:
            given = arch_renamed(given, f"{source} {section}")
        if choices is not None and ARCH in given:
            arch = _convert(given.pop(ARCH), Literal[tuple(choices)], f"{source} {section}.{ARCH}")
            current = _switch(current, choices[arch], section, source)
        hints = typing.get_type_hints(type(current))
        fields: dict[str, Any] = {}
        for key, raw in given.items():
            key = _current_name(key, hints, f"{source} {section}")
            if key not in hints:
                raise _unknown_key(source, section, key, current, choices)
            fields[key] = _convert(raw, hints[key], f"{source} {section}.{key}")
        defaults = {k: v for k, v in _given_defaults(config, replaced, section, current).items() if k not in fields}
        try:
            replaced[section] = dataclasses.replace(current, **{**defaults, **fields})
        except (ValueError, TypeError) as e:
            if not defaults:
                raise ConfigError(f"{source}: [{section}] {e}") from None
            # A given key that the defaults contradict (train.schedule=cosine beside a preset's decay_factor): the
            # given keys alone, then each default they accept.
            try:
                replaced[section] = _set_accepted(dataclasses.replace(current, **fields), defaults)
            except (ValueError, TypeError) as e:
                raise ConfigError(f"{source}: [{section}] {e}") from None
    switches = [
        (s, (type(getattr(config, s)), type(v))) for s, v in replaced.items() if type(v) is not type(getattr(config, s))
    ]
    for section, switch in switches:
        _follow_arch(config, replaced, grouped, switch, f"{source} {section}.{ARCH}={_arch_of(switch[1])}")
    return dataclasses.replace(config, **replaced)


def _given_defaults(config: Any, replaced: Mapping[str, Any], section: str, current: Any) -> dict[str, Any]:
    """The keys of ``section`` that the other sections' ``section_defaults()`` give (as replaced so far), where
    ``current`` still holds the recipe's default."""
    given: dict[str, Any] = {}
    for name in (f.name for f in dataclasses.fields(config)):
        hook = getattr(replaced.get(name, getattr(config, name)), "section_defaults", None)
        if name != section and hook is not None:
            given.update(hook().get(section, {}))
    if not given:
        return {}
    recipe = getattr(type(config)(), section)
    missing = object()
    return {key: value for key, value in given.items() if getattr(current, key) == getattr(recipe, key, missing)}


def _follow_arch(
    config: Any,
    replaced: dict[str, Any],
    given: Mapping[str, Mapping[str, Any]],
    switch: tuple[type, type],
    source: str,
) -> None:
    """Set in ``replaced`` the keys of other sections that the new architecture's ``SECTION_DEFAULTS`` (or the
    old one's) lists: to the new architecture's default, or the recipe's where it lists none; a key ``given`` in
    the same overrides, or whose value is not the old architecture's default, keeps its value. ``source`` names
    the switch (``--set model.arch=transformer``). A default that the section refuses beside the values it holds
    is not set: Adam's betas with ``train.optimizer=sgd`` keep the recipe's (unused) value.
    """
    old, new = (getattr(cls, "SECTION_DEFAULTS", {}) for cls in switch)
    for section in dict.fromkeys([*old, *new]):
        earlier, recipe = getattr(config, section), getattr(type(config)(), section)
        fields = {}
        for key in dict.fromkeys([*old.get(section, {}), *new.get(section, {})]):
            before = old.get(section, {}).get(key, getattr(recipe, key))
            if key not in given.get(section, {}) and getattr(earlier, key) == before:
                fields[key] = new.get(section, {}).get(key, getattr(recipe, key))
        replaced[section] = _set_accepted(replaced.get(section, earlier), fields)


def _set_accepted(section: Any, fields: Mapping[str, Any]) -> Any:
    """``section`` with the ``fields`` its validation accepts: all at once, or else one at a time while one more
    is accepted (so an order that passes through a refused state is found); a refused field keeps its value."""
    try:
        return dataclasses.replace(section, **fields)
    except (ValueError, TypeError):
        pass
    pending = dict(fields)
    while pending:
        for key, value in pending.items():
            try:
                section = dataclasses.replace(section, **{key: value})
            except (ValueError, TypeError):
                continue
            del pending[key]
            break
        else:
            return section  # no pending field is accepted
    return section


def architectures(annotation: Any) -> dict[str, type] | None:
    """``{arch: config class}`` of a section annotated as a union of dataclasses whose ``arch`` field defaults to
    their architecture's name (a choice section), or None for a plain section."""
    if not _is_union(annotation):
        return None
    classes = [c for c in typing.get_args(annotation) if c is not type(None)]
    if not all(dataclasses.is_dataclass(c) and ARCH in {f.name for f in dataclasses.fields(c)} for c in classes):
        return None
    return {_arch_of(c): c for c in classes}


def check_sections(config: Any, config_class: type) -> None:
    """Check that ``config``, built in Python rather than read from a file, is a ``config_class`` whose every
    section holds an instance of its annotated class (one of them for a choice section).

    Raises: ConfigError naming the section and both classes, e.g. a ``TrainConfig`` given where the recipe reads a
        ``Seq2SeqTrainConfig`` (whose keys it would otherwise miss part-way through training).
    """
    if type(config) is not config_class:
        raise ConfigError(f"the config must be a {_qualified(config_class)}, not a {_qualified(type(config))}")
    for name, annotation in typing.get_type_hints(config_class).items():
        classes = tuple(c for c in typing.get_args(annotation) if c is not type(None)) or (annotation,)
        value = getattr(config, name)
        if all(dataclasses.is_dataclass(c) for c in classes) and not isinstance(value, classes):
            expected = " or ".join(_qualified(c) for c in classes)
            raise ConfigError(f"[{name}] must be a {expected}, not a {_qualified(type(value))}")


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def arch_renamed(given: Mapping[str, Any], where: str | None) -> dict[str, Any]:
    """A choice section's keys with an old name of ``arch`` (``RENAMED_KEYS``: forecast's ``model.encoder``)
    renamed, with a FutureWarning naming ``where`` the keys came from (None: a saved run's, renamed silently).

    Raises: ConfigError if both the old name and ``arch`` are given.
    """
    old = next((k for k in given if RENAMED_KEYS.get(k) == ARCH), None)
    if old is None:
        return dict(given)
    if ARCH in given:
        raise ConfigError(f"{where or 'the saved config'}: {old} is the old name of {ARCH}; give {ARCH} only")
    if where is not None:
        warning = f"{where}.{old} is renamed {ARCH}; the old name goes in the next release"
        warnings.warn(warning, FutureWarning, stacklevel=3)
    return {ARCH if k == old else k: v for k, v in given.items()}


def section_class(annotation: Any, saved: Mapping[str, Any]) -> type:
    """The class of a section whose saved fields are ``saved`` (a choice section's by its ``arch`` value).

    Raises: ConfigError if a choice section's ``arch`` names none of its classes.
    """
    choices = architectures(annotation)
    if choices is None:
        return annotation
    arch = saved.get(ARCH)
    if arch not in choices:
        raise ConfigError(f"{ARCH} {arch!r} is not one of {', '.join(choices)}")
    return choices[arch]


def describe(config: Any) -> list[tuple[str, Any, str]]:
    """``[("section.key", value, applies_to), ...]`` for every field of a sectioned config, in declaration order.

    ``applies_to`` is "" for a key of a plain section, or of every architecture of a choice section; a key of only
    some architectures says which (``"arch=rnn"``). A choice section lists the chosen architecture's keys with
    their values, then the other architectures' own keys with their defaults. A key whose default depends on the
    architecture (a shared field a class overrides, or a key of another section in a class's ``SECTION_DEFAULTS``)
    has a row per value, each naming its architectures (``"arch=transformer"``, ``"model.arch=transformer"``).
    """
    hints = typing.get_type_hints(type(config))
    rows = []
    for section in dataclasses.fields(config):
        value = getattr(config, section.name)
        choices = architectures(hints[section.name]) or {}
        rows.extend(
            (f"{section.name}.{f.name}", getattr(value, f.name), _applies_to(f.name, choices))
            for f in dataclasses.fields(value)
        )
        listed = _field_names(type(value))
        for other in choices.values():
            for f in dataclasses.fields(other):
                if f.name not in listed:
                    listed.add(f.name)
                    rows.append((f"{section.name}.{f.name}", getattr(other(), f.name), _applies_to(f.name, choices)))
    defaults = type(config)()  # the recipe's values, which an architecture without SECTION_DEFAULTS keeps
    for section in dataclasses.fields(config):
        choices = architectures(hints[section.name])
        if choices:
            chosen = getattr(config, section.name)
            rows = [split for row in rows for split in _split_by_arch(row, section.name, chosen, choices, defaults)]
    return rows


def _split_by_arch(
    row: tuple[str, Any, str], section: str, chosen: Any, choices: dict[str, type], defaults: Any
) -> list[tuple[str, Any, str]]:
    """``row`` of a key that every architecture of choice section ``section`` has: one row per value the key takes
    by architecture (the chosen one's first, with the row's value), or ``[row]`` where it takes one value."""
    key, value, applies_to = row
    where, name = key.split(".", 1)
    if applies_to or (where == section and name == ARCH):
        return [row]
    values = {_arch_of(type(chosen)): value}
    for arch, cls in choices.items():
        if where == section:
            values.setdefault(arch, getattr(cls(), name))
        else:  # a key of another section: the class's own default for it, or the recipe's
            values.setdefault(
                arch,
                getattr(cls, "SECTION_DEFAULTS", {}).get(where, {}).get(name, getattr(getattr(defaults, where), name)),
            )
    shown = list(dict.fromkeys(map(repr, values.values())))
    if len(shown) == 1:
        return [row]
    label = f"{ARCH}=" if where == section else f"{section}.{ARCH}="
    return [
        (
            key,
            next(v for v in values.values() if repr(v) == r),
            label + " | ".join(a for a, v in values.items() if repr(v) == r),
        )
        for r in shown
    ]


def _applies_to(key: str, choices: dict[str, type]) -> str:
    """ "" for a key of a plain section or of every architecture, else ``"arch=A | B"`` (those that have it)."""
    owners = [arch for arch, cls in choices.items() if key in _field_names(cls)]
    return "" if len(owners) == len(choices) else f"{ARCH}=" + " | ".join(owners)


def _current_name(key: str, hints: Mapping[str, Any], where: str) -> str:
    """``key``, or its new name (``RENAMED_KEYS``) with a FutureWarning where the section has only that."""
    new = RENAMED_KEYS.get(key)
    if key in hints or new not in hints:
        return key
    warnings.warn(f"{where}.{key} is renamed {new}; the old name goes in the next release", FutureWarning, stacklevel=3)
    return new


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _arch_of(cls: type) -> str:
    default = next(f.default for f in dataclasses.fields(cls) if f.name == ARCH)
    if not isinstance(default, str):
        raise TypeError(f"{cls.__name__}.{ARCH} must default to its architecture's name")
    return default


def _switch(current: Any, chosen: type, section: str, source: str) -> Any:
    """``chosen``'s defaults with the values given earlier for the fields of ``current`` (another class, perhaps)."""
    if type(current) is chosen:
        return current
    defaults, fresh = type(current)(), chosen()
    carried = {}
    for f in dataclasses.fields(current):
        value = getattr(current, f.name)
        if f.name == ARCH or value == getattr(defaults, f.name):
            continue
        if not hasattr(fresh, f.name):
            raise ConfigError(
                f"{source} {section}.{ARCH}={_arch_of(chosen)}: {section}.{f.name} (set to {value!r}) "
                f"does not apply to it"
            )
        carried[f.name] = value
    return dataclasses.replace(fresh, **carried)


def _unknown_key(source: str, section: str, key: str, current: Any, choices: dict[str, type] | None) -> ConfigError:
    if choices is not None:
        owners = [arch for arch, c in choices.items() if key in {f.name for f in dataclasses.fields(c)}]
        if owners:
            arch = getattr(current, ARCH)
            return ConfigError(
                f"{source} {section}.{key}: does not apply to {section}.{ARCH}={arch} "
                f"(a key of {section}.{ARCH}={' | '.join(owners)})"
            )
    valid = ", ".join(f.name for f in dataclasses.fields(current))
    return ConfigError(f"{source} {section}.{key}: unknown key in [{section}]; valid keys are {valid}")


def _convert(raw: Any, annotation: Any, where: str) -> Any:
    """Convert ``raw`` (a string from the command line, or a TOML value) to ``annotation``'s type."""
    options = typing.get_args(annotation) if _is_union(annotation) else (annotation,)
    optional = type(None) in options
    kinds = [t for t in options if t is not type(None)]
    literals = [value for t in kinds if typing.get_origin(t) is typing.Literal for value in typing.get_args(t)]
    if isinstance(raw, str) and raw in literals:  # a choice spelled "none" (model.attention=none) is that choice
        return raw
    if raw is None or (isinstance(raw, str) and raw.lower() in _NONE):
        if optional:
            return None
        raise ConfigError(f"{where}: a value is required (this key cannot be none)")
    kind = kinds[0]
    if typing.get_origin(kind) is tuple:  # "0.9,0.95" from the command line, a list from TOML
        items = raw.split(",") if isinstance(raw, str) else raw
        parts = typing.get_args(kind)
        if len(parts) == 2 and parts[1] is Ellipsis:  # tuple[float, ...]: any number of values, at least one
            if not isinstance(items, (list, tuple)) or not items:
                raise ConfigError(f"{where}: expected comma-separated values, got {raw!r}")
            parts = (parts[0],) * len(items)
        if not isinstance(items, (list, tuple)) or len(items) != len(parts):
            raise ConfigError(f"{where}: expected {len(parts)} comma-separated values, got {raw!r}")
        return tuple(
            _convert(item.strip() if isinstance(item, str) else item, part, where)
            for item, part in zip(items, parts, strict=True)
        )
    if typing.get_origin(kind) is typing.Literal:
        allowed = typing.get_args(kind)
        if raw not in allowed:
            raise ConfigError(f"{where}: {raw!r} is not one of {', '.join(map(str, allowed))}")
        return raw
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).lower()
        if text in _TRUE | _FALSE:
            return text in _TRUE
        raise ConfigError(f"{where}: expected true or false, got {raw!r}")
    if kind in (int, float):
        if isinstance(raw, bool):
            raise ConfigError(f"{where}: expected {kind.__name__}, got {raw!r}")
        try:
            value = kind(raw)
        except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
            raise ConfigError(f"{where}: expected {kind.__name__}, got {raw!r}") from None
        if kind is int and isinstance(raw, float) and raw != value:
            raise ConfigError(f"{where}: expected int, got {raw!r}")
        return value
    if not isinstance(raw, str):  # a TOML list, table or number where a path or name is expected
        raise ConfigError(f"{where}: expected a string, got {raw!r}")
    return raw


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)
