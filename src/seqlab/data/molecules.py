"""Molecules as strings: reading SMILES, the atom-level tokens of Schwaller et al. (2018), SELFIES, and the scores of
generated molecules (validity, uniqueness, novelty) as MOSES and GuacaMol define them.

Tokens: a SMILES string is cut by the regular expression of Schwaller et al., "Found in Translation" (Chem. Sci.
2018, 9, 6091), into bracket atoms (``[nH]``, ``[C@@H]``), two-letter atoms (``Br``, ``Cl``), one-letter atoms,
bonds, branches and ring-closure digits (``%10`` for two digits). A SELFIES string (Krenn et al., Mach. Learn.: Sci.
Technol. 2020, 1, 045024; the ``selfies`` package) is cut into its bracketed symbols (``[C]``, ``[=Branch1]``) and
the ``.`` between fragments. The tokens of a string always join back to it exactly; a character no token covers is
an error.

Default data: the 10,000 molecules of the WEHI screening library sample that RDKit ships as the test set of its
PAINS filters (``rdkit/Data/Pains/test_data/wehi_mols.csv``; Saubern, Guha & Baell, Mol. Inform. 2011, 30, 847; in
the RDKit wheel under RDKit's BSD-3-Clause licence). All 10,000 parse with RDKit and are distinct.

Scores of N generated strings (Polykovskiy et al., MOSES, Front. Pharmacol. 2020, sec. 3; Brown et al., GuacaMol, J.
Chem. Inf. Model. 2019): validity = valid / N, where a string is valid if RDKit parses it (an empty string is not);
uniqueness = distinct canonical SMILES among the valid / valid; novelty = the distinct valid ones not among the
training set's canonical SMILES / distinct valid. All three in %.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import ClassVar, NamedTuple

import selfies
from rdkit import Chem, RDLogger

from seqlab.data.files import TextFormat, iter_lines, read_json_file
from seqlab.errors import DataError
from seqlab.files import atomic_write

RDLogger.DisableLog("rdApp.*")  # RDKit prints a warning for every string it cannot parse; the scores count them

# The regular expression of Schwaller et al. (2018), as published.
SMILES_PATTERN = (
    r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|\/|:|~|@|\?|>|\*|\$|\%[0-9]{2}|[0-9])"
)
SELFIES_PATTERN = r"(\[[^\]]*]|\.)"  # bracketed symbols, and "." between fragments
REPRESENTATIONS = ("smiles", "selfies")
SEPARATOR = "\n"  # ends every molecule of a token stream
SYMBOLS_FILE = "symbols.json"
MAX_SMILES_CHARS = 10_000  # the longest line a SMILES file may have
SMILES_FILE = TextFormat("one SMILES a line (first field)", max_line_chars=MAX_SMILES_CHARS)
DEFAULT_PACKAGE = "rdkit"
DEFAULT_FILE = "rdkit/Data/Pains/test_data/wehi_mols.csv"
DEFAULT_SOURCE = (
    "10,000 WEHI screening molecules shipped in the rdkit wheel (rdkit/Data/Pains/test_data/wehi_mols.csv, "
    "RDKit's BSD-3-Clause licence)"
)
_PATTERNS = {"smiles": re.compile(SMILES_PATTERN), "selfies": re.compile(SELFIES_PATTERN)}


def split_tokens(text: str, representation: str = "smiles") -> list[str]:
    """The tokens of one SMILES or SELFIES string (module docstring); ``"".join`` of them is ``text``.

    Raises: DataError naming the first character that no token covers.
    """
    tokens = _PATTERNS[representation].findall(text)
    if "".join(tokens) != text:
        position = next(
            (i for i, (a, b) in enumerate(zip("".join(tokens), text, strict=False)) if a != b), len("".join(tokens))
        )
        raise DataError(f"{text[:60]!r}: character {text[position]!r} at {position} is no {representation} token")
    return tokens


def canonical_smiles(smiles: str) -> str | None:
    """RDKit's canonical SMILES of ``smiles``, or None if RDKit cannot parse it (or it is empty)."""
    molecule = Chem.MolFromSmiles(smiles) if smiles else None
    return None if molecule is None else Chem.MolToSmiles(molecule)


def to_selfies(smiles: str) -> str:
    """The SELFIES string of a SMILES string.

    Raises: DataError if ``selfies`` cannot encode it.
    """
    try:
        return selfies.encoder(smiles, strict=False)
    except selfies.EncoderError:
        raise DataError(f"{smiles[:60]!r}: the selfies package cannot encode this SMILES") from None


def to_smiles(text: str, representation: str) -> str:
    """SMILES of a generated string: as it is, or decoded from SELFIES (an undecodable one gives "")."""
    if representation == "smiles":
        return text
    try:
        return selfies.decoder(text)
    except selfies.DecoderError:
        return ""


def read_smiles(path: str | os.PathLike[str] | None = None) -> list[str]:
    """The molecules of a SMILES file (the first whitespace- or comma-separated field of each non-blank line; a
    header line ``smiles`` is skipped), or of the default set when ``path`` is None (module docstring).

    Raises:
        DataError: a missing, binary or empty file, or a line RDKit cannot parse (its line number named).
    """
    if path is None:
        return _default_molecules()
    molecules = []
    for lineno, line in iter_lines(path, max_line_chars=MAX_SMILES_CHARS, expected="a SMILES file"):
        fields = re.split(r"[\s,]+", line.strip())
        if not fields[0] or (not molecules and fields[0].lower() == "smiles"):
            continue
        if canonical_smiles(fields[0]) is None:
            raise DataError(f"{path}:{lineno}: RDKit cannot parse the SMILES {fields[0][:60]!r}")
        molecules.append(fields[0])
    if not molecules:
        raise DataError(f"{path}: no molecules (the file is empty)")
    return molecules


def _default_molecules() -> list[str]:
    try:
        files = metadata.distribution(DEFAULT_PACKAGE).files or ()
    except metadata.PackageNotFoundError:
        raise DataError("the default molecules need the package rdkit (pip install rdkit)") from None
    located = [Path(file.locate()) for file in files if str(file) == DEFAULT_FILE]
    if not located or not located[0].is_file():
        raise DataError(f"the installed rdkit package has no {DEFAULT_FILE}")
    with located[0].open(encoding="utf-8", newline="") as file:
        return [row[0] for row in csv.reader(file) if row]


class MoleculeScores(NamedTuple):
    """Scores of generated molecules (module docstring), in %, and how many were scored."""

    validity: float
    uniqueness: float
    novelty: float
    samples: int


def molecule_scores(samples: Sequence[str], training: Iterable[str]) -> MoleculeScores:
    """Validity, uniqueness and novelty (%) of the SMILES ``samples`` against the ``training`` molecules' canonical
    SMILES (module docstring); uniqueness and novelty are 0 when no sample is valid.

    Raises: ValueError for no samples.
    """
    if not samples:
        raise ValueError("no samples to score")
    valid = [c for c in map(canonical_smiles, samples) if c is not None]
    unique = set(valid)
    novel = unique - set(training)
    return MoleculeScores(
        validity=100.0 * len(valid) / len(samples),
        uniqueness=100.0 * len(unique) / len(valid) if valid else 0.0,
        novelty=100.0 * len(novel) / len(unique) if unique else 0.0,
        samples=len(samples),
    )


class MoleculeTokenizer:
    """Token ids of a stream of molecules in one representation, each molecule ended by ``SEPARATOR``.

    Id 0 is the separator, then the tokens seen in training in sorted order. Satisfies
    ``seqlab.data.tokenizers.Tokenizer`` (``eos_id`` is the separator); saved as ``symbols.json``.
    """

    kind: ClassVar[str] = "molecule"

    def __init__(self, symbols: Sequence[str], representation: str) -> None:
        self.representation = representation
        self.symbols = (SEPARATOR, *symbols)
        self._ids = {symbol: i for i, symbol in enumerate(self.symbols)}

    @classmethod
    def train(cls, molecules: Iterable[str], representation: str) -> MoleculeTokenizer:
        """The tokens of ``molecules`` (strings in ``representation``).

        Raises: DataError for a string with a character no token covers.
        """
        return cls(sorted({t for m in molecules for t in split_tokens(m, representation)}), representation)

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    @property
    def eos_id(self) -> int:
        return 0

    @property
    def pad_id(self) -> None:
        return None

    def encode(self, text: str) -> list[int]:
        """Ids of ``text``: molecules separated (and ended) by newlines.

        Raises: DataError for a token the tokenizer never saw, or a character no token covers.
        """
        ids = []
        for line in text.split(SEPARATOR):
            tokens = split_tokens(line, self.representation)
            unseen = sorted({t for t in tokens if t not in self._ids})
            if unseen:
                raise DataError(f"{line[:60]!r}: tokens the model never saw: {' '.join(unseen)}")
            ids.extend([*(self._ids[t] for t in tokens), self.eos_id])
        return ids[:-1]

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.symbols[i] for i in ids)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write ``symbols.json`` into the directory ``path``."""
        target = Path(path) / SYMBOLS_FILE
        payload = {"representation": self.representation, "symbols": list(self.symbols[1:])}
        atomic_write(target, json.dumps(payload, indent=1) + "\n")
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> MoleculeTokenizer:
        """The tokenizer saved in the directory ``path``.

        Raises: DataError for a missing or malformed file.
        """
        target = Path(path) / SYMBOLS_FILE
        payload = read_json_file(target)
        try:
            representation, symbols = payload["representation"], payload["symbols"]
        except (KeyError, TypeError) as error:
            raise DataError(f"{target}: not a molecule tokenizer file ({error})") from None
        if representation not in REPRESENTATIONS or not all(isinstance(s, str) and s for s in symbols):
            raise DataError(f"{target}: not a molecule tokenizer file")
        return cls(symbols, representation)
