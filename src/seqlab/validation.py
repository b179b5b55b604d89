"""Checks for configuration values, shared by every config dataclass (models, recipes, the trainer).

Each check raises ``ConfigError`` (a ``ValueError``) whose message names the field and shows the bad value, e.g.
``hidden_size (0) must be an integer >= 1``, so the command line can print it as one line. Booleans are never
accepted as numbers, and real numbers must be finite (``nan`` and ``inf`` are refused).
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Collection

import torch

from seqlab.errors import ConfigError

# The largest width (hidden_size, d_model, embedding_size, d_ff, context_length) and depth (layers, heads) that a
# recipe config accepts: a 65,536-wide square weight matrix is already 16 GiB of float32, so anything larger is a
# typo that would otherwise end in an allocation failure.
MAX_WIDTH = 65_536
MAX_DEPTH = 1_024
# Counts of steps and epochs (max_steps, max_epochs, warmup_steps, ...): a billion optimizer steps is beyond any
# run seqlab makes, and keeps every count well inside the 64-bit integers torch's schedulers and counters hold.
MAX_STEPS = 1_000_000_000
# Sequences per optimizer step: a million is far past what fits a device at once.
MAX_BATCH_SIZE = 1_048_576
# Symbols of a vocabulary a recipe learns (data.bpe_size, ...): a million is past any tokenizer in use (GPT-4's has
# ~100k) and keeps the embedding of a 1k-wide model under the parameter limit below.
MAX_VOCAB_SIZE = 1_000_000
# Parameters of one model, counted before its weights are allocated (``seqlab.models.pretrained``): 3.7 GiB of
# float32 weights, about 15 GiB to train with Adam (weights, gradients and two moments). Every model built from a
# config is held to it, so a typo in a width fails in one line instead of in the allocator.
MAX_PARAMETERS = 1_000_000_000


def is_int(value: object) -> bool:
    """True for an integer that is not a bool; a ``torch.SymInt`` (a size while a model is exported) is one."""
    return isinstance(value, (numbers.Integral, torch.SymInt)) and not isinstance(value, bool)


def is_real(value: object) -> bool:
    """True for a finite real number that is not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def check_int(
    name: str, value: object, *, minimum: int | None = 1, maximum: int | None = None, optional: bool = False
) -> None:
    """``value`` is an integer in [minimum, maximum] (either bound may be None), or None when ``optional``.

    Raises: ConfigError naming ``name`` and showing the value otherwise.
    """
    if optional and value is None:
        return
    ok = is_int(value) and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
    if not ok:
        bounds = [f">= {minimum}" if minimum is not None else "", f"<= {maximum}" if maximum is not None else ""]
        wanted = " and ".join(b for b in bounds if b)
        raise ConfigError(f"{name} ({value!r}) must be {'None or ' if optional else ''}an integer {wanted}".rstrip())


def check_threads(name: str, value: int) -> None:
    """A torch CPU thread count (``torch.set_num_threads``): an integer from 1 to this machine's CPUs; more only
    slow torch down, and far more crash it (99,999 threads: a segmentation fault in the first matrix product).

    Raises: ConfigError naming ``name`` (a flag, ``--threads``) and the value, with the machine's CPU count.
    """
    cpus = os.cpu_count() or 1
    if not is_int(value) or not 1 <= value <= cpus:
        raise ConfigError(f"{name} ({value!r}) must be an integer in [1, {cpus}], this machine's CPUs")


def check_real(
    name: str,
    value: object,
    *,
    greater_than: float | None = None,
    at_least: float | None = None,
    below: float | None = None,
    at_most: float | None = None,
    optional: bool = False,
) -> None:
    """``value`` is a finite real number within the given bounds, or None when ``optional``.

    Raises: ConfigError naming ``name`` and showing the value otherwise (nan and inf included).
    """
    if optional and value is None:
        return
    checks = (
        (greater_than, "> {}", lambda v, b: v > b),
        (at_least, ">= {}", lambda v, b: v >= b),
        (below, "< {}", lambda v, b: v < b),
        (at_most, "<= {}", lambda v, b: v <= b),
    )
    ok = is_real(value) and all(bound is None or test(value, bound) for bound, _, test in checks)
    if not ok:
        wanted = " and ".join(text.format(bound) for bound, text, _ in checks if bound is not None)
        none = "None or " if optional else ""
        raise ConfigError(f"{name} ({value!r}) must be {none}a finite number{' ' + wanted if wanted else ''}")


def check_probability(name: str, value: object) -> None:
    """``value`` is a probability in [0, 1), as dropout rates and label smoothing are.

    Raises: ConfigError naming ``name`` and showing the value otherwise.
    """
    if not (is_real(value) and 0.0 <= value < 1.0):
        raise ConfigError(f"{name} ({value!r}) must be in [0, 1)")


def check_bool(name: str, value: object) -> None:
    """``value`` is True or False.

    Raises: ConfigError naming ``name`` and showing the value otherwise.
    """
    if not isinstance(value, bool):
        raise ConfigError(f"{name} ({value!r}) must be true or false")


def check_choice(name: str, value: object, choices: Collection[object]) -> None:
    """``value`` is one of ``choices``.

    Raises: ConfigError naming ``name``, showing the value and listing the choices otherwise.
    """
    if value not in choices:
        raise ConfigError(f"{name} ({value!r}) must be one of {', '.join(map(repr, choices))}")


def check_token_id(name: str, value: object, vocab_size: int) -> None:
    """``value`` is a token id of a vocabulary of ``vocab_size`` symbols: an integer in [0, vocab_size).

    Raises: ConfigError naming ``name`` and showing the value and the range otherwise.
    """
    if not (is_int(value) and 0 <= value < vocab_size):
        raise ConfigError(f"{name} ({value!r}) must be in [0, {vocab_size})")


def check_special_ids(
    *, src_vocab_size: int, tgt_vocab_size: int, pad_id: object, bos_id: object, eos_id: object
) -> None:
    """The special symbols of an encoder-decoder are ids of its vocabularies: ``pad_id`` of both (it pads source
    and target), ``bos_id`` and ``eos_id`` of the target.

    Raises: ConfigError naming the id and showing its value and range otherwise.
    """
    check_token_id("pad_id", pad_id, min(src_vocab_size, tgt_vocab_size))
    check_token_id("bos_id", bos_id, tgt_vocab_size)
    check_token_id("eos_id", eos_id, tgt_vocab_size)


def check_parameter_count(model_type: str, count: int, sizes: dict[str, int]) -> None:
    """A model of ``count`` parameters fits ``MAX_PARAMETERS``; ``sizes`` are its config's integer fields, the
    largest of which the message names as the one to reduce.

    Raises: ConfigError, e.g. ``gpt: 51,556,646,912 parameters, more than the limit of 1,000,000,000 (3.7 GiB of
        float32 weights); reduce d_model (65536)``.
    """
    if count <= MAX_PARAMETERS:
        return
    key = max(sizes, key=lambda name: sizes[name])
    raise ConfigError(
        f"{model_type}: {count:,} parameters, more than the limit of {MAX_PARAMETERS:,} "
        f"({MAX_PARAMETERS * 4 / 2**30:.1f} GiB of float32 weights); reduce {key} ({sizes[key]})"
    )
