"""The contact maths of ``seqlab.analysis.contacts`` against values computed by hand: symmetrization, the average
product correction, precision at L/k over the pairs |i - j| >= 6, the contact density, and true contacts from
coordinates."""

import pytest
import torch

from seqlab.analysis import contacts


def test_symmetrize_and_apc_match_the_hand_computed_values():
    a = torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, 1.0], [1.0, 2.0, 0.0]])
    f = contacts.symmetrize(a)
    assert f.tolist() == [[0.0, 2.0, 1.0], [2.0, 0.0, 3.0], [1.0, 3.0, 0.0]]
    # Row sums 3, 5, 4; total 12: F_ij - F_i F_j / 12.
    expected = torch.tensor(
        [[0 - 9 / 12, 2 - 15 / 12, 1 - 12 / 12], [2 - 15 / 12, 0 - 25 / 12, 3 - 20 / 12], [0.0, 3 - 20 / 12, -16 / 12]]
    )
    assert torch.allclose(contacts.apc(f), expected)
    # Averaged over heads: two heads, the second the first's transpose, give the same corrected map each.
    both = contacts.attention_contacts(torch.stack([a, a.T]))
    assert torch.allclose(both, expected.double())


def test_a_constant_map_has_no_signal_left_after_apc():
    assert torch.allclose(contacts.apc(torch.ones(2, 5, 5)), torch.zeros(2, 5, 5))


def ten_residue_case():
    """L = 10: the scored pairs are (0,6) (0,7) (0,8) (0,9) (1,7) (1,8) (1,9) (2,8) (2,9) (3,9)."""
    scores = torch.zeros(10, 10)
    scores[1, 8], scores[0, 6], scores[3, 9] = 5.0, 4.0, 3.0
    scores[0, 1] = 100.0  # too close (|i - j| = 1): never counted
    truth = torch.zeros(10, 10, dtype=torch.bool)
    truth[1, 8] = truth[3, 9] = truth[0, 1] = True
    return scores, truth


def test_precision_at_l_counts_the_true_contacts_among_the_top_pairs_at_separation_six_or_more():
    scores, truth = ten_residue_case()
    assert contacts.precision_at_l(scores, truth) == 0.5  # top L/5 = 2: (1,8) yes, (0,6) no
    assert contacts.precision_at_l(scores, truth, divisor=3) == pytest.approx(2 / 3)  # top 3 adds (3,9)
    assert contacts.precision_at_l(scores, truth, divisor=20) == 1.0  # at least one pair
    assert contacts.contact_density(truth) == 0.2  # 2 of the 10 pairs


def test_the_separation_baseline_ranks_the_nearest_scored_pairs_first():
    _, truth = ten_residue_case()
    # Top 2 by -|i - j|: the pairs at separation 6, in row-major order: (0,6) and (1,7), neither a contact.
    assert contacts.precision_at_l(contacts.separation_scores(10), truth) == 0.0
    truth[1, 7] = True
    assert contacts.precision_at_l(contacts.separation_scores(10), truth) == 0.5


def test_true_contacts_are_pairs_closer_than_eight_angstroms():
    points = torch.tensor([[0.0, 0.0, 0.0], [7.9, 0.0, 0.0], [0.0, 8.0, 0.0]])
    assert contacts.true_contacts(points).tolist() == [[True, True, False], [True, True, False], [False, False, True]]


def test_a_chain_without_a_scored_pair_is_refused():
    with pytest.raises(ValueError, match=r"^a chain of 6 residues has no pair with \|i - j\| >= 6$"):
        contacts.precision_at_l(torch.zeros(6, 6), torch.zeros(6, 6, dtype=torch.bool))


def test_the_fitted_head_weights_rank_the_contacts_first_when_one_head_marks_them():
    generator = torch.Generator().manual_seed(0)
    labels = torch.rand(200, generator=generator) < 0.2
    marking = labels.double() * 0.5 + 0.1 * torch.rand(200, generator=generator, dtype=torch.float64)
    noise = torch.rand(200, generator=generator, dtype=torch.float64)
    features = torch.stack([noise, 1000.0 * marking], dim=1)  # the raw scale of a feature does not matter
    weights = contacts.fit_head_weights(features, labels)
    order = torch.argsort(features @ weights, descending=True)
    assert labels[order[: int(labels.sum())]].all()
    with pytest.raises(ValueError, match=r"^fitting the head weights needs both contacts and non-contacts$"):
        contacts.fit_head_weights(features, torch.zeros(200, dtype=torch.bool))


def test_pair_features_lists_each_heads_value_of_the_scored_pairs():
    features = torch.arange(2 * 8 * 8, dtype=torch.float64).reshape(2, 8, 8)
    # L = 8: pairs (0,6) (0,7) (1,7) -> flat indices 6, 7, 15 of each head.
    assert contacts.pair_features(features).tolist() == [[6.0, 70.0], [7.0, 71.0], [15.0, 79.0]]
