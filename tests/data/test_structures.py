"""Reading a protein chain with gemmi (``seqlab.data.structures``) from a tiny PDB file the test writes by hand: the
sequence in one-letter codes, Cβ coordinates and Cα for glycine, waters and ligands left out, the first chain only;
bad files get one line."""

import pytest
import torch

from seqlab.data.structures import read_chain
from seqlab.errors import DataError

pytest.importorskip("gemmi", reason="gemmi is not installed (pip install 'seqlab[proteins]')")

# Columns as the PDB format fixes them: name 13-16, residue 18-20, chain 22, number 23-26, x y z 31-54.
PDB = """\
HEADER    TEST
ATOM      1  N   MET A   1       0.000   1.000   0.000  1.00  0.00           N
ATOM      2  CA  MET A   1       0.000   0.000   1.000  1.00  0.00           C
ATOM      3  CB  MET A   1       1.000   2.000   3.000  1.00  0.00           C
ATOM      4  N   GLY A   2       3.000   1.000   0.000  1.00  0.00           N
ATOM      5  CA  GLY A   2       4.000   5.000   6.000  1.00  0.00           C
ATOM      6  CA  MSE A   3       9.000   9.000   9.000  1.00  0.00           C
ATOM      7  CB  MSE A   3       7.000   8.000   9.000  1.00  0.00           C
ATOM      8  CA  TRP A   4      10.000  11.000  12.000  1.00  0.00           C
HETATM    9  O   HOH A 101      20.000  20.000  20.000  1.00  0.00           O
HETATM   10  C1  NAG A 102      21.000  20.000  20.000  1.00  0.00           C
TER
ATOM     11  CA  LYS B   1      30.000  30.000  30.000  1.00  0.00           C
END
"""


def test_the_first_chain_reads_as_letters_and_beta_carbons(tmp_path):
    path = tmp_path / "tiny.pdb"
    path.write_text(PDB)
    chain = read_chain(path)
    assert chain.name == "A"
    assert chain.sequence == "MGMW"  # MSE (selenomethionine) read as M; water and NAG left out; chain B not read
    expected = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0], [10.0, 11.0, 12.0]]  # CB; CA for GLY and TRP
    assert torch.equal(chain.coordinates, torch.tensor(expected, dtype=torch.float64))


def test_bad_files_are_refused_in_one_line(tmp_path):
    with pytest.raises(DataError, match=r"^\S+missing.pdb: no such file$"):
        read_chain(tmp_path / "missing.pdb")
    waters = tmp_path / "waters.pdb"
    waters.write_text("HETATM    1  O   HOH A 101      20.000  20.000  20.000  1.00  0.00           O\nEND\n")
    with pytest.raises(DataError, match=r"^\S+waters.pdb: no protein chain \(no amino acid with a CA or CB atom\)$"):
        read_chain(waters)
    text = tmp_path / "notes.txt"
    text.write_text("not a structure\n")
    with pytest.raises(DataError, match=r"^\S+notes.txt: not a PDB or mmCIF file \("):
        read_chain(text)
