"""Property bins: quantile edges and bins equal hand-computed values (molecular weights of the alkanes C1-C5), the
in-bin share of hand-made molecules, the bins file round-trips, and too few distinct values or a bad file give one
line."""

import pytest

from seqlab.data.molecule_properties import (
    PropertyBins,
    molecule_property,
    quantile_edges,
)
from seqlab.errors import DataError

ALKANES = ["C", "CC", "CCC", "CCCC", "CCCCC"]  # C_nH_(2n+2), n = 1 .. 5


def alkane_weight(n: int) -> float:
    """g/mol of C_nH_(2n+2) with RDKit's atomic weights C 12.011, H 1.008: 14.027 n + 2.016."""
    return 12.011 * n + 1.008 * (2 * n + 2)


def test_the_properties_are_rdkits():
    assert molecule_property("CCC", "mw") == pytest.approx(alkane_weight(3))
    assert molecule_property("CCO", "logp") == pytest.approx(-0.0014)  # Wildman-Crippen atom contributions
    assert 0 < molecule_property("c1ccccc1", "qed") < 1
    assert molecule_property("C1CC", "mw") is None and molecule_property("", "logp") is None


def test_quantile_edges_by_hand():
    """Q(p) = v_(j) + (h - j)(v_(j+1) - v_(j)), h = p (n - 1): n = 5, so h = 4p; the weights are 14.027 apart."""
    weights = [alkane_weight(n) for n in range(1, 6)]
    step = 14.027
    assert quantile_edges(weights, 2) == pytest.approx([weights[2]])  # h = 2: the median
    assert quantile_edges(weights, 4) == pytest.approx(weights[1:4])  # h = 1, 2, 3: order statistics
    # h = 4/3 and 8/3: a third and two thirds of the way to the next value
    assert quantile_edges(weights, 3) == pytest.approx([weights[1] + step / 3, weights[2] + 2 * step / 3])
    bins = PropertyBins.fit(list(reversed(ALKANES)), "mw", 3)  # the order of the molecules does not matter
    assert bins.edges == pytest.approx((weights[1] + step / 3, weights[2] + 2 * step / 3))
    assert bins.bins_of(ALKANES) == [0, 0, 1, 2, 2]


def test_a_value_on_an_edge_is_in_the_upper_bin():
    bins = PropertyBins("mw", (40.0, 60.0))
    assert [bins.bin_of(v) for v in (-1.0, 39.9, 40.0, 59.9, 60.0, 1e9)] == [0, 0, 1, 1, 2, 2]
    assert bins.num_bins == 3
    assert bins.describe() == "mw bins 0: < 40, 1: [40, 60), 2: >= 60"


def test_in_bin_share_of_hand_made_molecules():
    bins = PropertyBins("mw", (40.0, 60.0))
    samples = ["CC", "CCC", "CCCC", "C1CC", "CCCCC"]  # 30.1 (bin 0), 44.1 (1), 58.1 (1), invalid, 72.2 (2)
    assert bins.scores(samples, 1) == (80.0, 40.0, 5)
    assert bins.scores(samples, 0) == (80.0, 20.0, 5)
    assert bins.scores(["C1CC"], 2) == (0.0, 0.0, 1)
    with pytest.raises(ValueError, match=r"^no samples to score$"):
        bins.scores([], 0)


def test_the_bins_file_round_trips(tmp_path):
    bins = PropertyBins("logp", (-0.5, 1.25, 3.0))
    bins.save(tmp_path)
    assert PropertyBins.load(tmp_path) == bins


def test_bad_values_and_files_are_one_line(tmp_path):
    with pytest.raises(DataError) as error:
        quantile_edges([1.0, 1.0, 1.0, 1.0, 2.0], 4)
    assert str(error.value) == "5 training values give equal bin edges (1, 1): use fewer than 4 bins"
    with pytest.raises(DataError, match=r"^RDKit cannot parse the SMILES 'C1CC'$"):
        PropertyBins.fit(["CC", "C1CC"], "mw", 2)
    (tmp_path / "bins.json").write_text('{"property": "tpsa", "edges": [1.0]}')
    with pytest.raises(DataError) as error:
        PropertyBins.load(tmp_path)
    assert str(error.value) == f"{tmp_path / 'bins.json'}: not a property bins file (property 'tpsa', edges [1.0])"
