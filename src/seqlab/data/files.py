"""Opening the user's data files: regular files only, strict UTF-8, bounded lines, read as a stream.

Every reader of a data file goes through :func:`check_regular_file` first, so a FIFO (which would block forever),
a device such as ``/dev/zero`` (which never ends) or a directory is refused with one line before anything is read.
Line-based readers use :func:`iter_lines`, which reads one bounded line at a time: a line longer than the reader's
``max_line_chars`` is an error naming the file and line, never a read of the whole file into memory.

Text is strict UTF-8 (a leading byte-order mark is skipped): an invalid byte is an error naming the file, line and
byte offset, never a silent Latin-1 fallback. Control bytes that never occur in text (NUL and the like, as in
binary, compressed or UTF-16 files) are an error too; tab, newline, vertical tab, form feed, carriage return and
escape are allowed.
"""

from __future__ import annotations

import itertools
import os
import re
import stat
from collections.abc import Iterator

from seqlab.errors import DataError

_BOM = b"\xef\xbb\xbf"
_CONTROL_BYTE = re.compile(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f]")
_UTF8_BYTES_PER_CHAR = 4


def check_regular_file(path: str | os.PathLike[str], *, expected: str = "a text file") -> None:
    """Refuse ``path`` unless it is an existing regular file (symbolic links are followed).

    Raises:
        DataError: one line naming ``path``: no such file, a directory, or not a regular file (a FIFO, a socket,
            a device), with ``expected`` saying what was wanted.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as error:
        raise DataError(f"{path}: cannot read ({error.strerror})") from None
    if stat.S_ISDIR(mode):
        raise DataError(f"{path}: is a directory, expected {expected}")
    if not stat.S_ISREG(mode):
        raise DataError(f"{path}: is not a regular file (a FIFO, socket or device), expected {expected}")


def decode_utf8(data: bytes, path: str | os.PathLike[str], *, first_line: int = 1, offset: int = 0) -> str:
    """``data`` decoded as strict UTF-8; ``first_line`` and ``offset`` place it in ``path`` for the message.

    Raises:
        DataError: ``{path}:{line}: ...`` for a control byte or an invalid UTF-8 byte, with its byte offset in
            the file.
    """
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


def read_text_file(path: str | os.PathLike[str], *, expected: str = "a text file") -> str:
    """The whole UTF-8 text of the regular file ``path`` (a byte-order mark dropped; rules in the module docstring).

    Raises:
        DataError: as :func:`check_regular_file` and :func:`decode_utf8`, or the file cannot be read.
    """
    check_regular_file(path, expected=expected)
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as error:
        raise DataError(f"{path}: cannot read ({error.strerror})") from None
    skip = len(_BOM) if data.startswith(_BOM) else 0
    return decode_utf8(data[skip:], path, offset=skip)


def iter_lines(
    path: str | os.PathLike[str], *, max_line_chars: int, expected: str = "a text file"
) -> Iterator[tuple[int, str]]:
    """Stream ``(line number, text)`` of each line of the UTF-8 file ``path``, line ending removed.

    Args:
        path: a regular file.
        max_line_chars: the longest line allowed, in characters; no more than about 4 times as many bytes are
            read at once, so a file without newlines (or a 1 GB line) is refused early.
        expected: what the file should be, for the message about a directory or device.
    Raises:
        DataError: as :func:`check_regular_file` and :func:`decode_utf8`; ``{path}:{line}: longer than
            max_line_chars (N) characters`` for a long line; the file cannot be read.
    """
    check_regular_file(path, expected=expected)
    max_bytes = _UTF8_BYTES_PER_CHAR * max_line_chars + 2  # + "\r\n"
    try:
        with open(path, "rb") as file:
            offset = 0
            for lineno in itertools.count(1):
                raw = file.readline(max_bytes + 1)
                if not raw:
                    return
                skip = len(_BOM) if lineno == 1 and raw.startswith(_BOM) else 0
                too_long = len(raw) > max_bytes
                text = "" if too_long else decode_utf8(raw[skip:], path, first_line=lineno, offset=offset + skip)
                text = text.rstrip("\n").rstrip("\r")
                if too_long or len(text) > max_line_chars:
                    raise DataError(f"{path}:{lineno}: longer than max_line_chars ({max_line_chars}) characters")
                yield lineno, text
                offset += len(raw)
    except OSError as error:
        raise DataError(f"{path}: cannot read ({error.strerror})") from None
