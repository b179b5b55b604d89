"""``seqlab analyze contacts`` on tiny masked and causal protein runs and an 8-residue PDB file the test writes: the
table, CSV, JSON and figure, the contact density against the hand-computed one, the attention's own maps; bad
inputs (a missing file, a file with no protein chain, a causal run, a run of another recipe) get one line."""

import json
import random

import pytest
import torch
from cli_helpers import assert_error, run_cli

from seqlab.analysis import contacts
from seqlab.errors import DataError
from seqlab.recipes import load_system

pytest.importorskip("gemmi", reason="gemmi is not installed (pip install 'seqlab[proteins]')")

TINY = ["model.d_model=16", "model.num_heads=2", "model.num_layers=2", "model.context_length=16"]
STEPS = ["train.max_steps=2", "data.batches_per_epoch=2", "train.batch_size=4"]
G2P = "tests/fixtures/checkpoints/g2p_v0_1"

# A hairpin: residues 0-3 along x, 4-7 back. Cβ-Cβ pairs at |i - j| >= 6: (0,6) 9.77 Å, (0,7) 5.0 Å, (1,7) 6.28 Å.
RESIDUES = ["MET", "GLY", "ALA", "LEU", "LYS", "GLY", "VAL", "SER"]
POSITIONS = [(0.0, 0, 0), (3.8, 0, 0), (7.6, 0, 0), (11.4, 0, 0), (11.4, 5, 0), (7.6, 5, 0), (3.8, 9, 0), (0.0, 5, 0)]


def hairpin_pdb() -> str:
    lines = []
    for number, (name, (x, y, z)) in enumerate(zip(RESIDUES, POSITIONS, strict=True), start=1):
        atom = "CA" if name == "GLY" else "CB"
        lines.append(f"ATOM  {number:5d}  {atom:<3} {name} A{number:4d}    {x:8.3f}{y:8.3f}{z:8.3f}  1.00  0.00")
    return "\n".join([*lines, "END", ""])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    rng = random.Random(0)
    lines = []
    for i in range(40):
        lines += [f">p{i}", "M" + "".join(rng.choice("ACDEFGHIKLMNPQRSTVWY") for _ in range(rng.randint(20, 40)))]
    root = tmp_path_factory.mktemp("contacts")
    (root / "proteins.faa").write_text("\n".join(lines) + "\n")
    (root / "hairpin.pdb").write_text(hairpin_pdb())
    for objective in ("masked", "causal"):
        assignments = [f"data.train_path={root / 'proteins.faa'}", f"model.objective={objective}", *TINY, *STEPS]
        result = run_cli("train", "protein", "--out", root / objective, "--no-progress", "--set", *assignments)
        assert result.code == 0, result.err
    return root


def test_the_command_scores_the_attention_against_the_true_contacts(runs, tmp_path):
    out = tmp_path / "out"
    result = run_cli("analyze", "contacts", runs / "masked", "--structures", runs / "hairpin.pdb", "--out", out)
    assert result.code == 0, result.err
    assert "random pairs (contact density)" in result.out and "1 chains scored (0 cropped" in result.out
    record = json.loads((out / "contacts.json").read_text())
    (chain,) = record["chains"]
    assert chain["residues"] == chain["residues_used"] == 8
    assert chain["contact_density"] == pytest.approx(2 / 3)  # (0,7) and (1,7) of the three pairs
    assert chain["separation_precision_at_l5"] == 0.0  # top L/5 = 1 pair: (0,6), the nearest, 9.77 Å apart
    assert (out / "contacts.png").stat().st_size > 0
    assert (out / "contacts.csv").read_text().splitlines()[0].startswith("file,chain,residues,residues_used")
    # The score is the APC'd mean of the model's own maps: the attention of [CLS] GMALKGVS [SEP] less its ends.
    system = load_system(runs / "masked")
    maps = system.attention_maps("MGALKGVS").maps
    assert len(maps) == 4  # 2 layers x 2 heads
    inner = torch.stack([m.weights[1:-1, 1:-1] for m in maps])
    assert torch.equal(system.residue_attention("MGALKGVS"), inner)
    top = torch.sort(contacts.attention_contacts(inner)[[0, 0, 1], [6, 7, 7]], descending=True, stable=True)
    assert chain["precision_at_l5"] == (0.0 if top.indices[0] == 0 else 1.0)


def test_fit_heads_fits_on_the_first_half_and_scores_the_second(runs, tmp_path):
    hairpin, out = runs / "hairpin.pdb", tmp_path / "out"
    result = run_cli(
        "analyze", "contacts", runs / "masked", "--structures", hairpin, hairpin, "--fit-heads", "--out", out
    )
    assert result.code == 0, result.err
    assert "logistic regression over heads" in result.out
    record = json.loads((out / "contacts.json").read_text())
    assert record["fitted_on"] == [str(hairpin)] and len(record["chains"]) == 1
    assert len(record["head_weights"]) == 4
    assert record["chains"][0]["fitted_precision_at_l5"] in (0.0, 1.0)
    assert_error(
        run_cli(
            "analyze", "contacts", runs / "masked", "--structures", hairpin, "--fit-heads", "--out", tmp_path / "a"
        ),
        "--structures: two chains with a residue pair |i - j| >= 6 needed",
    )


def test_bad_inputs_get_one_line(runs, tmp_path):
    masked, hairpin = runs / "masked", runs / "hairpin.pdb"
    missing = tmp_path / "missing.pdb"
    assert_error(
        run_cli("analyze", "contacts", masked, "--structures", missing, "--out", tmp_path / "c"),
        f"{missing}: no such file",
    )
    waters = tmp_path / "waters.pdb"
    waters.write_text("HETATM    1  O   HOH A 101      20.000  20.000  20.000  1.00  0.00           O\nEND\n")
    assert_error(
        run_cli("analyze", "contacts", masked, "--structures", waters, "--out", tmp_path / "d"),
        f"{waters}: no protein chain (no amino acid with a CA or CB atom)",
    )
    assert_error(
        run_cli("analyze", "contacts", runs / "causal", "--structures", hairpin, "--out", tmp_path / "a"),
        "contacts need a masked (bidirectional) protein model; this run is causal",
    )
    assert_error(
        run_cli("analyze", "contacts", G2P, "--structures", hairpin, "--out", tmp_path / "b"),
        f"{G2P}: a g2p run; predicting contacts needs a run of protein",
    )


def test_the_protein_runs_offer_their_attention_maps_with_residue_labels(runs):
    masked, causal = load_system(runs / "masked"), load_system(runs / "causal")
    labelled = masked.attention_maps("mgal")
    assert labelled.labels["bert", "self"] == (["[CLS]", "M", "G", "A", "L", "[SEP]"],) * 2
    assert all(m.weights.shape == (6, 6) for m in labelled.maps)
    labelled = causal.attention_maps("MGAL")
    (labels,) = labelled.labels.values()
    assert labels == (["[SEP]", "M", "G", "A", "L"],) * 2
    assert masked.max_residues() == 14 and causal.max_residues() == 15  # context 16
    with pytest.raises(DataError, match=r"^sequence 'MMMMMMMMMMMMMMMMMMMM': 30 residues, more than the model's 14$"):
        masked.residue_attention("M" * 30)
