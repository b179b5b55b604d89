"""SMILES and SELFIES tokens join back to their string, the scores of generated molecules equal hand-computed
values (MOSES definitions), SMILES files are read or refused with one line naming the file and line."""

import pytest

from seqlab.data.molecules import (
    MoleculeTokenizer,
    canonical_smiles,
    molecule_scores,
    read_smiles,
    split_tokens,
    to_selfies,
    to_smiles,
)
from seqlab.errors import DataError

SMILES = [
    "CC(=O)Oc1ccccc1C(=O)O",  # aspirin
    "C[C@@H](N)C(=O)O",  # L-alanine, a chiral bracket atom
    "Clc1ccc(Br)cc1",  # two-letter atoms
    "[Na+].[Cl-]",  # charges and fragments
    "C1CC2CCC3CCC4CCC5CCC6CCC7CCC8CCC9CCC%10CCCCC%10C9C8C7C6C5C4C3C2C1",  # a two-digit ring closure
    "O=[N+]([O-])c1ccc(/C=C/c2ccccc2)cc1",  # bond stereo
]


def test_the_schwaller_tokens_of_a_smiles_by_hand():
    assert split_tokens("C[C@@H](Cl)c1cc[nH]c1Br") == [
        "C", "[C@@H]", "(", "Cl", ")", "c", "1", "c", "c", "[nH]", "c", "1", "Br",
    ]  # fmt: skip
    assert split_tokens("C%12CC%12") == ["C", "%12", "C", "C", "%12"]


@pytest.mark.parametrize("smiles", SMILES)
def test_tokens_join_back_to_the_string(smiles):
    assert "".join(split_tokens(smiles)) == smiles
    selfies = to_selfies(smiles)
    assert "".join(split_tokens(selfies, "selfies")) == selfies
    assert canonical_smiles(to_smiles(selfies, "selfies")) == canonical_smiles(smiles)


def test_a_character_no_token_covers_is_named():
    with pytest.raises(DataError, match=r"^'CC&C': character '&' at 2 is no smiles token$"):
        split_tokens("CC&C")


def test_scores_by_hand():
    """MOSES scores of 7 hand-made samples against a training set holding ethanol."""
    samples = ["CCO", "OCC", "c1ccccc1", "C1CC", "", "C", "O"]
    scores = molecule_scores(samples, {canonical_smiles("CCO")})
    # valid: CCO, OCC, c1ccccc1, C, O = 5 of 7; distinct canonical: CCO, c1ccccc1, C, O = 4 of 5;
    # novel: c1ccccc1, C, O = 3 of the 4 distinct.
    assert scores == pytest.approx((100 * 5 / 7, 100 * 4 / 5, 100 * 3 / 4, 7))
    assert molecule_scores(["C1CC"], set()) == (0.0, 0.0, 0.0, 1)


def test_the_tokenizer_round_trips_a_stream_and_its_file(tmp_path):
    tokenizer = MoleculeTokenizer.train(SMILES, "smiles")
    text = "\n" + "\n".join(SMILES) + "\n"
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert ids[0] == ids[-1] == tokenizer.eos_id == 0
    tokenizer.save(tmp_path)
    loaded = MoleculeTokenizer.load(tmp_path)
    assert (loaded.symbols, loaded.representation) == (tokenizer.symbols, "smiles")
    with pytest.raises(DataError, match=r"^'CI': tokens the model never saw: I$"):
        tokenizer.encode("CI")


def test_read_smiles_takes_the_first_field_and_skips_a_header(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("smiles,name\nCCO,ethanol\n\nc1ccccc1 benzene\n")
    assert read_smiles(path) == ["CCO", "c1ccccc1"]


def test_the_default_molecules_are_the_wehi_set():
    molecules = read_smiles()
    assert len(molecules) == 10_000
    assert molecules[0] == "N(NC(=O)C1CCC1)c2ccc(cc2)C(C)(C)C"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"CCO\nC1CC\n", r"m.smi:2: RDKit cannot parse the SMILES 'C1CC'"),
        (b"\n\n", r"m.smi: no molecules \(the file is empty\)"),
        (b"CCO\x00\x01", r"m.smi:1: not a text file"),
    ],
)
def test_bad_files_are_one_line(tmp_path, content, message):
    path = tmp_path / "m.smi"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message):
        read_smiles(path)
    with pytest.raises(DataError, match=r"no such file"):
        read_smiles(tmp_path / "missing.smi")
