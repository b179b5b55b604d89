"""FASTA files of proteins: multi-line sequences joined, a final stop '*' dropped, letters upper-cased, the default
proteome read from pyhmmer, bad files refused with one line naming the file and line."""

import pytest

from seqlab.data.proteins import read_fasta
from seqlab.errors import DataError


def test_sequences_are_joined_upper_cased_and_lose_the_stop(tmp_path):
    path = tmp_path / "p.faa"
    path.write_text(">one # a header\nMKV\nlle*\n\n>two\nMX\n")
    assert read_fasta(path) == ["MKVLLE", "MX"]


def test_the_default_proteome():
    proteins = read_fasta()
    assert len(proteins) == 2100
    assert proteins[0].startswith("MNINELLKDKDLKVTKYRKLILENLK") and proteins[0].endswith("GICPDCQKKSELPA")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (">a\nMK1V\n", r"p.faa:2: '1' is no amino-acid code"),
        ("MKV\n", r"p.faa:1: residues before the first '>' header; not a FASTA file"),
        (">a\n>b\nMK\n", r"p.faa:1: a header without residues"),
        (">a\nMK\n>b\n", r"p.faa:3: a header without residues"),
        ("", r"p.faa: no '>' header, so no sequence"),
    ],
)
def test_bad_files_are_one_line(tmp_path, content, message):
    path = tmp_path / "p.faa"
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        read_fasta(path)
