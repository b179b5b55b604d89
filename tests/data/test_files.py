"""The guarded reader: each refusal's exact message, declared table formats, NFKC, and JSON files."""

import os
import re
import warnings

import pytest

from seqlab.data.files import (
    Column,
    TableFormat,
    check_regular_file,
    check_typed_text,
    iter_lines,
    read_json_file,
    read_table,
    read_text_file,
)
from seqlab.data.labelled_text import LABELLED_TEXT
from seqlab.errors import CheckpointError, DataError
from seqlab.recipes import classify, forecast
from seqlab.recipes.base import data_file_keys

PAIRS = TableFormat("TEXT<TAB>LABEL lines", (Column("TEXT"), Column("LABEL")))
SERIES = TableFormat("series", (Column("VALUE", float),), separator=r"[,\s]+", repeated=True)


def write(tmp_path, data: bytes, name: str = "data.txt"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def refused(path, message, read):
    with pytest.raises(DataError, match=f"^{re.escape(f'{path}{message}')}$"):
        read(path)


@pytest.mark.parametrize(
    "read",
    [
        read_text_file,
        lambda path: list(iter_lines(path, max_line_chars=80)),
        lambda path: list(read_table(path, PAIRS)),
    ],
    ids=["read_text_file", "iter_lines", "read_table"],
)
def test_a_byte_order_mark_is_refused_by_every_reader(tmp_path, read):
    path = write(tmp_path, b"\xef\xbb\xbfAnna\tit\n")
    refused(path, ":1: starts with a UTF-8 byte-order mark (U+FEFF); save the file without it", read)


def test_a_row_of_the_wrong_width_is_refused_naming_the_file_and_line(tmp_path):
    path = write(tmp_path, b"Anna\tit\n\nHans\tde\textra\n")
    refused(path, ":3: 3 columns, expected 2 (TEXT<TAB>LABEL lines)", lambda p: list(read_table(p, PAIRS)))
    path = write(tmp_path, b"Anna\tit\nHans\n")
    refused(path, ":2: 1 column, expected 2 (TEXT<TAB>LABEL lines)", lambda p: list(read_table(p, PAIRS)))


def test_an_empty_or_untyped_column_is_refused(tmp_path):
    refused(write(tmp_path, b"Anna\t \n"), ":1: column LABEL is empty", lambda p: list(read_table(p, PAIRS)))
    table = lambda p: list(read_table(p, SERIES))  # noqa: E731
    refused(write(tmp_path, b"1, 2\n3, x\n"), ":2: column VALUE: 'x' is not a number", table)
    refused(write(tmp_path, b"1, nan\n"), ":1: column VALUE: 'nan' is not a finite number", table)
    refused(write(tmp_path, b"1, 2\n3\n"), ":2: 1 values, but the first row has 2", table)


def test_a_table_reads_typed_values_and_skips_blank_lines(tmp_path):
    path = write(tmp_path, b"1, 2.5\n\n3 4\n")
    assert list(read_table(path, SERIES)) == [(1, (1.0, 2.5)), (3, (3.0, 4.0))]
    path = write(tmp_path, "Jos\u00e9 \tes\n".encode())
    assert list(read_table(path, LABELLED_TEXT)) == [(1, ("Jos\u00e9", "es"))]


def test_a_file_is_nfkc_normalised_with_one_warning_naming_the_first_change(tmp_path):
    path = write(tmp_path, "cat\n\u212aelvin\n\ufb01ne\n".encode())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [line for _, line in iter_lines(path, max_line_chars=80)] == ["cat", "Kelvin", "fine"]
        assert read_text_file(path) == "cat\nKelvin\nfine\n"
    expected = f"{path}:2: NFKC-normalised U+212A KELVIN SIGN to 'K', and so on"
    assert [str(w.message) for w in caught] == [expected, expected]


def test_typed_text_with_a_compatibility_character_or_nothing_is_refused():
    kelvin = "input 1: U+212A KELVIN SIGN is a compatibility character (NFKC: 'K'); type 'K'"
    with pytest.raises(DataError, match=f"^{re.escape(kelvin)}$"):
        check_typed_text("\u212aelvin", "input 1")
    with pytest.raises(DataError, match=r"^input 2 is empty$"):
        check_typed_text(" ", "input 2")
    check_typed_text("", "prompt", allow_empty=True)
    check_typed_text("Jos\u00e9", "input 3")  # NFC text with accents is NFKC already


def test_files_the_reader_must_not_open_are_refused_before_reading(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    refused(fifo, ": is not a regular file (a FIFO, socket or device), expected a text file", check_regular_file)
    loop = tmp_path / "loop"
    os.symlink(tmp_path / "other", loop)
    os.symlink(loop, tmp_path / "other")
    refused(loop, ": cannot read (Too many levels of symbolic links)", check_regular_file)
    big = write(tmp_path, b"x" * 11)
    with pytest.raises(DataError, match=re.escape(f"{big}: 11 bytes, more than the 10 read at most")):
        check_regular_file(big, max_file_bytes=10)


def test_a_long_line_is_refused_before_the_file_is_read_whole(tmp_path):
    path = write(tmp_path, b"short\n" + b"a" * 100_000)
    refused(path, ":2: longer than max_line_chars (80) characters", lambda p: list(iter_lines(p, max_line_chars=80)))
    refused(path, ":2: longer than max_line_chars (80) characters", lambda p: read_text_file(p, max_line_chars=80))


def test_json_files_directory_nesting_and_syntax_are_one_line_errors(tmp_path):
    (tmp_path / "recipe.json").mkdir()
    with pytest.raises(CheckpointError, match=f"^{tmp_path}/recipe.json: is a directory, expected a JSON file$"):
        read_json_file(tmp_path / "recipe.json", error=CheckpointError)
    deep = write(tmp_path, b"[" * 100_000 + b"]" * 100_000, "deep.json")
    with pytest.raises(DataError, match=f"^{deep}: not valid JSON \\(nested too deeply\\)$"):
        read_json_file(deep)
    broken = write(tmp_path, b'{\n"a": 1,\n}', "broken.json")
    with pytest.raises(DataError, match=f"^{broken}:3: not valid JSON \\(Expecting property name"):
        read_json_file(broken)
    assert read_json_file(write(tmp_path, b'{"a": [1]}', "ok.json")) == {"a": [1]}


def test_recipes_declare_their_data_files_and_formats():
    assert data_file_keys(classify.Config) == {"data.train_path": LABELLED_TEXT, "data.test_path": LABELLED_TEXT}
    (key, data_format), *others = data_file_keys(forecast.Config).items()
    assert key == "data.path" and not others and isinstance(data_format, TableFormat) and data_format.repeated
