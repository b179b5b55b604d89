"""Protein structures: the residues and their Cβ coordinates of a PDB or mmCIF file's first protein chain.

The file is parsed by gemmi (Wojdyr, 2022, JOSS 7(73):4200; MPL-2.0), an optional dependency (``seqlab[proteins]``)
imported only here. The chain read is the first chain of the first model that holds an amino acid; its amino acids
(standard or modified, as gemmi's residue table knows them; waters and ligands are left out) give the sequence in
one-letter codes, a modified residue by its parent's letter (MSE -> M) and an unknown one as X. Each residue's
position is its Cβ atom, the Cα for glycine (which has no Cβ) or for a residue whose Cβ is missing (the convention
of the contact definitions of CASP and of Rao et al., 2021); a residue with neither is left out of the chain.
Alternate locations: the first one listed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from seqlab.data.proteins import RESIDUES
from seqlab.errors import ConfigError, DataError


class ProteinChain(NamedTuple):
    """One protein chain of a structure file.

    Attributes:
        name: the chain's name in the file ("A").
        sequence: its residues in one-letter codes (L,).
        coordinates: (L, 3) float64, Å: each residue's Cβ (Cα for glycine).
    """

    name: str
    sequence: str
    coordinates: Tensor


def read_chain(path: str | os.PathLike[str]) -> ProteinChain:
    """The first protein chain of a PDB or mmCIF file (plain or gzipped; module docstring).

    Raises:
        DataError: a missing or unreadable file, or one without an amino acid with a Cα or Cβ atom (file named).
        ConfigError: gemmi is not installed (``pip install seqlab[proteins]``).
    """
    try:
        import gemmi
    except ImportError:
        raise ConfigError("reading protein structures needs gemmi: pip install 'seqlab[proteins]'") from None
    file = Path(path)
    if not file.is_file():
        raise DataError(f"{file}: no such file")
    try:
        structure = gemmi.read_structure(str(file))
    except (RuntimeError, ValueError, OSError) as error:
        raise DataError(f"{file}: not a PDB or mmCIF file ({str(error).splitlines()[0][:120]})") from None
    for model in structure:
        for chain in model:
            letters, positions = [], []
            for residue in chain:
                info = gemmi.find_tabulated_residue(residue.name)
                if info is None or not info.is_amino_acid():
                    continue
                atom = residue.find_atom("CB", "*") or residue.find_atom("CA", "*")
                if atom is None:
                    continue
                letter = info.one_letter_code.upper()
                letters.append(letter if letter in RESIDUES else "X")
                positions.append((atom.pos.x, atom.pos.y, atom.pos.z))
            if letters:
                return ProteinChain(chain.name, "".join(letters), torch.tensor(positions, dtype=torch.float64))
        break  # only the first model
    raise DataError(f"{file}: no protein chain (no amino acid with a CA or CB atom)")
