"""The one guarded reader of the user's files: regular files only, size and line limits, strict UTF-8, declared
formats.

Every reader of a data file (and of a run's JSON files) goes through this module, so a new recipe inherits its
guarantees:

- :func:`check_regular_file` first: a FIFO (which would block forever), a device such as ``/dev/zero`` (which never
  ends), a directory or a symbolic-link loop is refused with one line before anything is read, and so is a file
  over ``max_file_bytes`` (``MAX_FILE_BYTES`` by default).
- Line-based readers (:func:`iter_lines`, :func:`read_table`) read one bounded line at a time: a line longer than
  the reader's ``max_line_chars`` is an error naming the file and line, never a read of the whole file into memory.
- Text is strict UTF-8: an invalid byte is an error naming the file, line and byte offset, never a silent Latin-1
  fallback. Control bytes that never occur in text (NUL and the like, as in binary, compressed or UTF-16 files) are
  an error too; tab, newline, vertical tab, form feed, carriage return and escape are allowed.
- A UTF-8 byte-order mark is refused, naming the file: it is invisible, and a reader that kept it would make it a
  symbol of the vocabulary (or part of the first word) while one that dropped it would read the file differently
  from every other tool. Saving the file without it is one click in any editor.
- A data file's text is NFKC-normalised (:func:`normalize_text`), as SentencePiece does by default: a
  compatibility character such as the Kelvin sign U+212A reads as the letter K, a ligature as its letters, a
  full-width digit as the digit; a file that normalisation changed gives one warning naming the first change. Text
  typed by the user (a ``predict`` input, a prompt) is not rewritten behind their back: a compatibility character
  there is refused, naming it and its NFKC form (:func:`check_typed_text`), so the model is only ever given NFKC
  text and a look-alike letter never passes for the letter the model knows.
- A recipe declares the format of each of its data files (:class:`TableFormat` of :class:`Column`, or a free
  :class:`TextFormat`) in its config field's metadata (:func:`data_file`), and gets the one-line errors of a wrong
  column count, an empty or non-numeric column for free (``read_table``); the fault tests find every declared data
  file of every registered recipe (``data_file_keys`` in ``seqlab.recipes.base``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import stat
import unicodedata
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from seqlab.errors import DataError, SeqlabError

_BOM = b"\xef\xbb\xbf"
_CONTROL_BYTE = re.compile(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f]")
_UTF8_BYTES_PER_CHAR = 4
MAX_FILE_BYTES = 8 * 2**30  # the largest data file read (8 GiB); a larger one is refused before it is opened
MAX_JSON_BYTES = 64 * 2**20  # the largest JSON file of a run (recipe.json, config.json, vocabularies): 64 MiB
DATA_FILE = "seqlab.data_file"  # the config field metadata key that holds a data file's format (``data_file``)


def check_regular_file(
    path: str | os.PathLike[str], *, expected: str = "a text file", max_file_bytes: int = MAX_FILE_BYTES
) -> None:
    """Refuse ``path`` unless it is an existing regular file of at most ``max_file_bytes`` (links are followed).

    Raises:
        DataError: one line naming ``path``: no such file, a directory, not a regular file (a FIFO, a socket,
            a device), a symbolic-link loop or another error of the file system, or too large, with
            ``expected`` saying what was wanted.
    """
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as error:
        raise DataError(f"{path}: cannot read ({error.strerror})") from None
    if stat.S_ISDIR(status.st_mode):
        raise DataError(f"{path}: is a directory, expected {expected}")
    if not stat.S_ISREG(status.st_mode):
        raise DataError(f"{path}: is not a regular file (a FIFO, socket or device), expected {expected}")
    if status.st_size > max_file_bytes:
        raise DataError(f"{path}: {status.st_size:,} bytes, more than the {max_file_bytes:,} read at most")


def decode_utf8(data: bytes, path: str | os.PathLike[str], *, first_line: int = 1, offset: int = 0) -> str:
    """``data`` decoded as strict UTF-8; ``first_line`` and ``offset`` place it in ``path`` for the message.

    Raises:
        DataError: ``{path}:{line}: ...`` for a byte-order mark at the start of the file, a control byte or an
            invalid UTF-8 byte, with its byte offset in the file.
    """
    if offset == 0 and data.startswith(_BOM):
        raise DataError(f"{path}:1: starts with a UTF-8 byte-order mark (U+FEFF); save the file without it")
    control = _CONTROL_BYTE.search(data)
    if control is not None:
        line = first_line + data.count(b"\n", 0, control.start())
        raise DataError(
            f"{path}:{line}: not a text file (control byte 0x{data[control.start()]:02x} "
            f"at byte offset {offset + control.start()})"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = first_line + data.count(b"\n", 0, error.start)
        raise DataError(
            f"{path}:{line}: not UTF-8 text (invalid byte 0x{data[error.start]:02x} "
            f"at byte offset {offset + error.start})"
        ) from None


def normalize_text(text: str) -> str:
    """``text`` in Unicode normal form NFKC (module docstring): what every reader and input encoder uses."""
    return text if unicodedata.is_normalized("NFKC", text) else unicodedata.normalize("NFKC", text)


def normalization_note(where: str, before: str, after: str) -> str:
    """The warning that NFKC changed ``before`` into ``after`` at ``where``, naming the first changed character."""
    for char in before:
        if normalize_text(char) != char:
            name = unicodedata.name(char, "unnamed")
            return f"{where}: NFKC-normalised U+{ord(char):04X} {name} to {normalize_text(char)!r}, and so on"
    return f"{where}: NFKC-normalised {before!r} to {after!r}"


def check_typed_text(text: str, where: str, *, allow_empty: bool = False) -> None:
    """Refuse ``text`` typed by the user (a ``predict`` input, a prompt) that is empty (only whitespace, unless
    ``allow_empty``) or that NFKC normalisation would change (module docstring); ``where`` names it in the message
    (``command line: input 2``).

    Raises:
        DataError: ``{where} is empty``, or ``{where}: U+212A KELVIN SIGN is a compatibility character (NFKC: 'K');
            type 'K'``.
    """
    if not allow_empty and not text.strip():
        raise DataError(f"{where} is empty")
    for char in text:
        normal = normalize_text(char)
        if normal != char:
            name = unicodedata.name(char, "unnamed")
            raise DataError(
                f"{where}: U+{ord(char):04X} {name} is a compatibility character (NFKC: {normal!r}); type {normal!r}"
            )


def read_text_file(
    path: str | os.PathLike[str],
    *,
    expected: str = "a text file",
    max_line_chars: int | None = None,
    max_file_bytes: int = MAX_FILE_BYTES,
) -> str:
    """The whole NFKC-normalised UTF-8 text of the regular file ``path`` (rules in the module docstring; a warning
    names the first line that normalisation changed).

    Raises:
        DataError: as :func:`check_regular_file` and :func:`decode_utf8`; ``{path}:{line}: longer than
            max_line_chars (N) characters``; the file cannot be read.
    """
    text = _read_utf8(path, expected=expected, max_file_bytes=max_file_bytes)
    if max_line_chars is not None and len(text) > max_line_chars:
        for lineno, line in enumerate(text.splitlines(), 1):
            if len(line) > max_line_chars:
                raise DataError(f"{path}:{lineno}: longer than max_line_chars ({max_line_chars}) characters")
    normal = normalize_text(text)
    if normal != text:
        lines = zip(text.splitlines(), normal.splitlines(), strict=False)
        first = next((n for n, (a, b) in enumerate(lines, 1) if a != b), 1)
        warnings.warn(normalization_note(f"{path}:{first}", text, normal), UserWarning, stacklevel=2)
    return normal


def _read_utf8(path: str | os.PathLike[str], *, expected: str, max_file_bytes: int) -> str:
    """The strict UTF-8 text of the regular file ``path``, not normalised. Raises: DataError."""
    check_regular_file(path, expected=expected, max_file_bytes=max_file_bytes)
    try:
        with open(path, "rb") as file:
            data = file.read(max_file_bytes + 1)  # the file may have grown since it was checked
    except OSError as error:
        raise DataError(f"{path}: cannot read ({error.strerror})") from None
    if len(data) > max_file_bytes:
        raise DataError(f"{path}: more than the {max_file_bytes:,} bytes read at most")
    return decode_utf8(data, path)


def iter_lines(
    path: str | os.PathLike[str],
    *,
    max_line_chars: int,
    expected: str = "a text file",
    max_file_bytes: int = MAX_FILE_BYTES,
) -> Iterator[tuple[int, str]]:
    """Stream ``(line number, text)`` of each line of the UTF-8 file ``path``, line ending removed, NFKC-normalised
    (a warning names the first line that normalisation changed, once the file is read).

    Args:
        path: a regular file.
        max_line_chars: the longest line allowed, in characters; no more than about 4 times as many bytes are
            read at once, so a file without newlines (or a 1 GB line) is refused early.
        expected: what the file should be, for the message about a directory or device.
        max_file_bytes: the largest file read, in bytes.
    Raises:
        DataError: as :func:`check_regular_file` and :func:`decode_utf8`; ``{path}:{line}: longer than
            max_line_chars (N) characters`` for a long line; the file cannot be read.
    """
    check_regular_file(path, expected=expected, max_file_bytes=max_file_bytes)
    max_bytes = _UTF8_BYTES_PER_CHAR * max_line_chars + 2  # + "\r\n"
    note = None
    try:
        with open(path, "rb") as file:
            offset = 0
            for lineno in itertools.count(1):
                raw = file.readline(max_bytes + 1)
                if not raw:
                    break
                too_long = len(raw) > max_bytes
                text = "" if too_long else decode_utf8(raw, path, first_line=lineno, offset=offset)
                text = text.rstrip("\n").rstrip("\r")
                if too_long or len(text) > max_line_chars:
                    raise DataError(f"{path}:{lineno}: longer than max_line_chars ({max_line_chars}) characters")
                normal = normalize_text(text)
                if note is None and normal != text:
                    note = normalization_note(f"{path}:{lineno}", text, normal)
                yield lineno, normal
                offset += len(raw)
    except OSError as error:
        raise DataError(f"{path}: cannot read ({error.strerror})") from None
    if note is not None:
        warnings.warn(note, UserWarning, stacklevel=2)


@dataclass(frozen=True)
class Column:
    """One column of a :class:`TableFormat`: its name in messages and the type its text converts to."""

    name: str  # as the format's description writes it: TEXT, LABEL, VALUE
    type: type = str  # str (not blank, stripped) | int | float (finite)


@dataclass(frozen=True)
class TextFormat:
    """A data file of free UTF-8 text lines, parsed by the recipe itself (a corpus, FASTA, SMILES, CMUdict)."""

    description: str  # what the file holds, for ``seqlab recipes`` and messages: "one sentence a line"
    max_line_chars: int = 100_000  # the longest line accepted, in characters
    suffix: str = ""  # the ending the file's name must have ("" = any)


@dataclass(frozen=True)
class TableFormat:
    """A data file of rows: blank lines skipped, each other line split at ``separator`` into ``columns``.

    With ``repeated``, the last column takes one or more values and every row has as many as the first row
    (a series file's channels). ``read_table`` refuses a row of another width, an empty column and a value that is
    not of its column's type, naming the file and line.
    """

    description: str  # "TEXT<TAB>LABEL lines"
    columns: tuple[Column, ...]
    separator: str = "\t"  # a regular expression; a line is stripped first unless it is a tab
    repeated: bool = False  # the last column repeats, as wide as in the first row
    max_line_chars: int = 100_000  # the longest line accepted, in characters
    suffix: str = ""  # the ending the file's name must have ("" = any)

    def split(self, line: str, where: str) -> tuple[Any, ...]:
        """The typed values of one line (``where`` = ``file:line`` for messages).

        Raises: DataError ``{where}: N columns, expected M (description)``, an empty column or a bad number.
        """
        parts = re.split(self.separator, line if self.separator == "\t" else line.strip())
        expected = len(self.columns)
        if (len(parts) < expected) if self.repeated else (len(parts) != expected):
            at_least = "at least " if self.repeated else ""
            found = f"{len(parts)} column{'s' * (len(parts) != 1)}"
            raise DataError(f"{where}: {found}, expected {at_least}{expected} ({self.description})")
        types = [column.type for column in self.columns] + [self.columns[-1].type] * (len(parts) - expected)
        names = [column.name for column in self.columns] + [self.columns[-1].name] * (len(parts) - expected)
        return tuple(_convert(part, kind, name, where) for part, kind, name in zip(parts, types, names, strict=True))


def _convert(text: str, kind: type, name: str, where: str) -> Any:
    value = text.strip()
    if not value:
        raise DataError(f"{where}: column {name} is empty")
    if kind is str:
        return value
    try:
        number = kind(value)
    except ValueError:
        raise DataError(
            f"{where}: column {name}: {value[:40]!r} is not {'an integer' if kind is int else 'a number'}"
        ) from None
    if kind is float and number - number != 0:  # NaN and infinities
        raise DataError(f"{where}: column {name}: {value!r} is not a finite number")
    return number


DataFormat = TextFormat | TableFormat


def read_table(path: str | os.PathLike[str], table: TableFormat) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """Stream ``(line number, values)`` of each non-blank line of ``path`` in ``table``'s format.

    Raises:
        DataError: as :func:`iter_lines`, and as :meth:`TableFormat.split` for a bad row; with ``table.repeated``,
            ``{path}:{line}: N values, but the first row has M``.
    """
    width = None
    for lineno, line in iter_lines(path, max_line_chars=table.max_line_chars, expected=table.description):
        if not line.strip():
            continue
        values = table.split(line, f"{path}:{lineno}")
        width = width or len(values)
        if len(values) != width:
            raise DataError(f"{path}:{lineno}: {len(values)} values, but the first row has {width}")
        yield lineno, values


def data_file(data_format: DataFormat) -> Any:
    """A config field naming a data file (default None) in ``data_format``: the fault tests and ``seqlab recipes``
    read the format from the field's metadata (``DATA_FILE``)."""
    return dataclasses.field(default=None, metadata={DATA_FILE: data_format})


def read_json_file(
    path: str | os.PathLike[str],
    *,
    error: type[SeqlabError] = DataError,
    missing: str = "no such file",
    max_file_bytes: int = MAX_JSON_BYTES,
) -> Any:
    """The JSON value of the regular UTF-8 file ``path`` (a run's ``recipe.json``, ``config.json``, vocabulary),
    not normalised (it holds what was written, symbols included).

    Raises:
        DataError: (or ``error``, e.g. CheckpointError for a run's files) one line naming ``path``: ``{path}:
            {missing}`` if it does not exist; as :func:`check_regular_file` if it is not a readable regular file (a
            directory, a FIFO); not UTF-8 text, not JSON (the line named), or nested too deeply.
    """
    if not os.path.lexists(path):
        raise error(f"{path}: {missing}")
    try:
        return json.loads(_read_utf8(path, expected="a JSON file", max_file_bytes=max_file_bytes))
    except DataError as e:
        raise error(str(e)) from None
    except json.JSONDecodeError as e:
        raise error(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    except RecursionError:
        raise error(f"{path}: not valid JSON (nested too deeply)") from None
