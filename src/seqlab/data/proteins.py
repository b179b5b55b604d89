"""Protein sequences: reading FASTA files of amino-acid sequences, and the default proteome.

A sequence is the one-letter IUPAC code of its residues: the 20 standard amino acids, U (selenocysteine),
O (pyrrolysine), and the ambiguity codes B, Z, J and X; letters are upper-cased, and a final ``*`` (the stop codon
that gene callers write) is dropped. A FASTA file is ``>header`` lines each followed by the sequence's lines.

Default data: the 2,100 proteins predicted by Prodigal on the genome assembly HG003687 (ENA project PRJEB85,
NCBI taxon 938293), 690,000 residues, which the PyPI package ``pyhmmer`` ships as test data
(``pyhmmer/tests/data/seqs/938293.PRJEB85.HG003687.faa``; pyhmmer is MIT-licensed; ENA data is free of
restrictions).
"""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

from seqlab.data.files import TextFormat, iter_lines
from seqlab.errors import DataError

RESIDUES = "ACDEFGHIKLMNPQRSTVWYUOBZJX"  # the one-letter codes a sequence may use (module docstring)
MAX_LINE_CHARS = 100_000  # the longest line a FASTA file may have
FASTA = TextFormat("FASTA: a >header line, then its residues", max_line_chars=MAX_LINE_CHARS)
DEFAULT_PACKAGE = "pyhmmer"
DEFAULT_FILE = "pyhmmer/tests/data/seqs/938293.PRJEB85.HG003687.faa"
DEFAULT_SOURCE = (
    "2,100 proteins of assembly HG003687 (ENA PRJEB85) shipped in the pyhmmer wheel "
    "(pyhmmer/tests/data/seqs/938293.PRJEB85.HG003687.faa; pyhmmer MIT, ENA data unrestricted)"
)
_ALLOWED = frozenset(RESIDUES)


def read_fasta(path: str | os.PathLike[str] | None = None) -> list[str]:
    """The sequences of a FASTA file of proteins (module docstring), or of the default proteome when ``path`` is
    None.

    Raises:
        DataError: a missing, binary or empty file, residues before the first header, a letter that is no residue
            code (file and line named), or a header without residues.
    """
    if path is None:
        path = _default_file()
    sequences: list[list[str]] = []
    header_line = 0
    for lineno, line in iter_lines(path, max_line_chars=MAX_LINE_CHARS, expected="a FASTA file"):
        text = line.strip()
        if text.startswith(">"):
            _check_last(sequences, path, header_line)
            sequences.append([])
            header_line = lineno
            continue
        if not text:
            continue
        if not sequences:
            raise DataError(f"{path}:{lineno}: residues before the first '>' header; not a FASTA file")
        residues = text.upper().removesuffix("*")
        unknown = sorted(set(residues) - _ALLOWED)
        if unknown:
            raise DataError(f"{path}:{lineno}: {' '.join(map(repr, unknown))} is no amino-acid code ({RESIDUES})")
        sequences[-1].append(residues)
    if not sequences:
        raise DataError(f"{path}: no '>' header, so no sequence (an empty file or not FASTA)")
    _check_last(sequences, path, header_line)
    return ["".join(parts) for parts in sequences]


def _check_last(sequences: list[list[str]], path: str | os.PathLike[str], header_line: int) -> None:
    if sequences and not "".join(sequences[-1]):
        raise DataError(f"{path}:{header_line}: a header without residues")


def _default_file() -> Path:
    try:
        files = metadata.distribution(DEFAULT_PACKAGE).files or ()
    except metadata.PackageNotFoundError:
        raise DataError("the default proteins need the package pyhmmer (pip install pyhmmer)") from None
    located = [Path(file.locate()) for file in files if str(file) == DEFAULT_FILE]
    if not located or not located[0].is_file():
        raise DataError(f"the installed pyhmmer package has no {DEFAULT_FILE}")
    return located[0]
