"""RDKit properties of molecules and their quantile bins: the conditions of molecules generated to order.

Properties (RDKit): ``logp``, Wildman-Crippen logP (``Crippen.MolLogP``; Wildman & Crippen, J. Chem. Inf. Comput.
Sci. 1999, 39, 868); ``qed``, the quantitative estimate of drug-likeness in [0, 1] (``QED.qed``; Bickerton et al.,
Nat. Chem. 2012, 4, 90); ``mw``, the average molecular weight in g/mol (``Descriptors.MolWt``).

Bins: ``num_bins`` bins holding equal shares of the training molecules. Their edges are the quantiles
e_k = Q(k / num_bins), k = 1 .. num_bins - 1, of the training values, Q interpolating linearly between order
statistics (numpy's default, Hyndman & Fan 1996 definition 7): Q(p) = v_(j) + (h - j) (v_(j+1) - v_(j)) with
h = p (n - 1), j = floor(h), v_(0) <= ... <= v_(n-1) the sorted values. A value v lies in bin b = #{k: e_k <= v}:
bin 0 is (-inf, e_1), bin b is [e_b, e_(b+1)), the last bin [e_(num_bins-1), inf).

In-bin score of N generated SMILES asked for bin b (a conditional generator's check, as in the conditional RNN of
Kotsias et al., Nat. Mach. Intell. 2020, 2, 254): validity = valid / N and in_bin = valid molecules whose property
lies in bin b / N, both in %; an invalid string lies in no bin.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import NamedTuple

import numpy as np
from rdkit import Chem
from rdkit.Chem import QED, Crippen, Descriptors

from seqlab.data.files import read_json_file
from seqlab.errors import DataError
from seqlab.files import atomic_write

PROPERTIES: dict[str, Callable[[Chem.Mol], float]] = {
    "logp": Crippen.MolLogP,
    "qed": QED.qed,
    "mw": Descriptors.MolWt,
}
BINS_FILE = "bins.json"


def molecule_property(smiles: str, name: str) -> float | None:
    """The property ``name`` (``PROPERTIES``) of the molecule ``smiles``, or None if RDKit cannot parse it (or it
    is empty)."""
    molecule = Chem.MolFromSmiles(smiles) if smiles else None
    return None if molecule is None else float(PROPERTIES[name](molecule))


def quantile_edges(values: Sequence[float], num_bins: int) -> list[float]:
    """The num_bins - 1 inner edges e_k = Q(k / num_bins) of ``values`` (module docstring).

    Raises: DataError if two edges are equal (a bin would hold no training molecule: too few distinct values for
        num_bins bins), naming both numbers.
    """
    edges = [float(e) for e in np.quantile(np.asarray(values, dtype=np.float64), np.arange(1, num_bins) / num_bins)]
    for low, high in pairwise(edges):
        if not low < high:
            raise DataError(
                f"{len(values)} training values give equal bin edges ({low:g}, {high:g}): use fewer than "
                f"{num_bins} bins"
            )
    return edges


class InBinScores(NamedTuple):
    """Scores of samples asked for one bin (module docstring), in %, and how many were scored."""

    validity: float
    in_bin: float
    samples: int


@dataclass(frozen=True)
class PropertyBins:
    """The quantile bins of one property (module docstring).

    Attributes:
        name: the property's name (``PROPERTIES``).
        edges: the num_bins - 1 increasing inner edges, in the property's unit.
    """

    name: str
    edges: tuple[float, ...]

    @classmethod
    def fit(cls, molecules: Sequence[str], name: str, num_bins: int) -> PropertyBins:
        """The bins whose edges are the quantiles of the property over ``molecules`` (SMILES RDKit parses).

        Raises: DataError for a molecule RDKit cannot parse, or equal edges (``quantile_edges``).
        """
        return cls(name, tuple(quantile_edges([parsed_property(m, name) for m in molecules], num_bins)))

    @property
    def num_bins(self) -> int:
        return len(self.edges) + 1

    def bin_of(self, value: float) -> int:
        """The bin b = #{k: e_k <= value} of a property value."""
        return int(np.searchsorted(np.asarray(self.edges), value, side="right"))

    def bins_of(self, molecules: Sequence[str]) -> list[int]:
        """The bin of each molecule's property.

        Raises: DataError for a molecule RDKit cannot parse.
        """
        return [self.bin_of(parsed_property(m, self.name)) for m in molecules]

    def scores(self, samples: Sequence[str], requested: int) -> InBinScores:
        """Validity and in-bin share (%) of the SMILES ``samples`` asked for bin ``requested`` (module docstring).

        Raises: ValueError for no samples.
        """
        if not samples:
            raise ValueError("no samples to score")
        values = [v for v in (molecule_property(s, self.name) for s in samples) if v is not None]
        in_bin = sum(self.bin_of(v) == requested for v in values)
        return InBinScores(100.0 * len(values) / len(samples), 100.0 * in_bin / len(samples), len(samples))

    def describe(self) -> str:
        """The bins as intervals, e.g. ``logp bins 0: < 1.5, 1: [1.5, 3), 2: >= 3``."""
        if not self.edges:
            return f"{self.name}: one bin"
        e = [f"{edge:.4g}" for edge in self.edges]
        inner = [f"{b}: [{e[b - 1]}, {e[b]})" for b in range(1, len(e))]
        return f"{self.name} bins " + ", ".join([f"0: < {e[0]}", *inner, f"{len(e)}: >= {e[-1]}"])

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``bins.json`` into ``directory``."""
        target = Path(directory) / BINS_FILE
        atomic_write(target, json.dumps({"property": self.name, "edges": list(self.edges)}, indent=1) + "\n")
        return target

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> PropertyBins:
        """The bins saved in ``directory``.

        Raises: DataError for a missing or malformed file.
        """
        target = Path(directory) / BINS_FILE
        payload = read_json_file(target)
        try:
            name, edges = payload["property"], tuple(float(e) for e in payload["edges"])
        except (ValueError, KeyError, TypeError) as error:
            raise DataError(f"{target}: not a property bins file ({error})") from None
        if name not in PROPERTIES or any(not a < b for a, b in pairwise(edges)):
            raise DataError(f"{target}: not a property bins file (property {name!r}, edges {list(edges)})")
        return cls(name, edges)


def parsed_property(smiles: str, name: str) -> float:
    """The property ``name`` of a molecule that must parse.

    Raises: DataError naming the SMILES if RDKit cannot parse it.
    """
    value = molecule_property(smiles, name)
    if value is None:
        raise DataError(f"RDKit cannot parse the SMILES {smiles[:60]!r}")
    return value
