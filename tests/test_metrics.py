import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqlab.data.vocab import Vocabulary
from seqlab.metrics import (
    G2PScores,
    LengthCoverage,
    anomaly_correlation,
    field_rmse,
    g2p_scores,
    length_coverage,
    perplexity,
    phoneme_error_rate,
    unigram_score,
    word_error_rate,
)


def brute_force_edit_distance(a, b):
    """Textbook Wagner-Fischer table: the independent reference for rapidfuzz."""
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        for j in range(len(b) + 1):
            if i == 0 or j == 0:
                table[i][j] = i + j
            else:
                table[i][j] = min(
                    table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + (a[i - 1] != b[j - 1])
                )
    return table[len(a)][len(b)]


def test_hand_computed_closest_reference_tie_goes_to_shorter():
    # d([A,B,C], [A,B,D]) = 1 (a substitution), d([A,B,C], [A,C]) = 1 (a deletion): tie -> [A,C], length 2.
    assert phoneme_error_rate([["A", "B", "C"]], [[["A", "B", "D"], ["A", "C"]]]) == 50.0
    assert word_error_rate([["A", "B", "C"]], [[["A", "B", "D"], ["A", "C"]]]) == 100.0


def test_closest_reference_beats_shorter_reference():
    # d to [A] is 3, d to [A,B,C,E] is 1: the closer, longer reference counts (1 / 4).
    assert phoneme_error_rate([["A", "B", "C", "D"]], [[["A"], ["A", "B", "C", "E"]]]) == 25.0


def test_a_word_is_right_if_it_matches_any_reference():
    hypotheses = [["R", "EH", "D"], ("R", "IY", "D"), ["R", "AH", "D"]]
    references = [[("R", "IY", "D"), ("R", "EH", "D")]] * 3
    assert word_error_rate(hypotheses, references) == pytest.approx(100 / 3)
    assert phoneme_error_rate(hypotheses, references) == pytest.approx(100 / 9)
    assert g2p_scores(hypotheses, references) == G2PScores(pytest.approx(100 / 9), pytest.approx(100 / 3))


def test_per_sums_errors_over_words_before_dividing():
    hypotheses = [["A", "B", "C"], ["A", "B"], []]
    references = [[["A", "B", "D"], ["A", "C"]], [["A", "B"], ["X"]], [["K", "L", "M", "N"]]]
    # (1 + 0 + 4) / (2 + 2 + 4), not the mean of per-word rates.
    assert phoneme_error_rate(hypotheses, references) == 62.5
    assert word_error_rate(hypotheses, references) == pytest.approx(200 / 3)


def test_per_against_brute_force_dynamic_programming():
    rng = random.Random(0)
    alphabet = ["AA", "B", "CH", "D", "EH"]

    def sequence(min_length):
        return [rng.choice(alphabet) for _ in range(rng.randint(min_length, 7))]

    hypotheses = [sequence(0) for _ in range(60)]
    references = [[sequence(1) for _ in range(rng.randint(1, 3))] for _ in range(60)]
    errors = length = 0
    for hypothesis, variants in zip(hypotheses, references, strict=True):
        distance, reference_length = min((brute_force_edit_distance(hypothesis, v), len(v)) for v in variants)
        errors += distance
        length += reference_length
    assert phoneme_error_rate(hypotheses, references) == pytest.approx(100.0 * errors / length, rel=1e-12)
    wrong = sum(all(list(v) != h for v in variants) for h, variants in zip(hypotheses, references, strict=True))
    assert word_error_rate(hypotheses, references) == pytest.approx(100.0 * wrong / 60, rel=1e-12)


@pytest.mark.parametrize("metric", [phoneme_error_rate, word_error_rate, g2p_scores])
def test_input_errors(metric):
    with pytest.raises(ValueError, match=r"^2 hypotheses but 1 reference sets$"):
        metric([["A"], ["B"]], [[["A"]]])
    with pytest.raises(ValueError, match=r"^no words to score$"):
        metric([], [])
    with pytest.raises(ValueError, match=r"^word 1 has no reference pronunciation$"):
        metric([["A"], ["B"]], [[["A"]], []])
    with pytest.raises(ValueError, match=r"^word 0 has an empty reference pronunciation$"):
        metric([["A"]], [[["A"], []]])
    with pytest.raises(ValueError, match=r"^word 0: pass phonemes as a sequence of symbols, not a string$"):
        metric(["A B"], [[["A", "B"]]])
    with pytest.raises(ValueError, match=r"^word 0: pass phonemes as a sequence of symbols, not a string$"):
        metric([["A", "B"]], [["AB"]])


def test_perplexity():
    assert perplexity(5 * math.log(10.0), 5) == pytest.approx(10.0, rel=1e-12)
    assert perplexity(0.0, 3) == 1.0
    assert perplexity(1e6, 1) == math.inf
    with pytest.raises(ValueError, match=r"^num_tokens \(0\) must be at least 1$"):
        perplexity(1.0, 0)
    with pytest.raises(ValueError, match=r"^total_nll_nats \(-0.5\) must be >= 0$"):
        perplexity(-0.5, 2)


def test_a_hypothesis_with_pad_or_bos_inside_is_an_error():
    """Decoded through Vocabulary.decode, a PAD or BOS mid-word is an inserted symbol, not a silent gap."""
    vocab = Vocabulary(["B", "AH", "T"])
    B, AH, T = vocab.encode(["B", "AH", "T"])
    reference = [[["B", "AH", "T"]]]
    assert phoneme_error_rate([vocab.decode([B, AH, T, vocab.eos_id])], reference) == 0.0
    for inserted in (vocab.pad_id, vocab.bos_id):
        hypothesis = vocab.decode([B, inserted, AH, T, vocab.eos_id, vocab.eos_id])
        assert phoneme_error_rate([hypothesis], reference) == pytest.approx(100 / 3)
        assert word_error_rate([hypothesis], reference) == 100.0
    replaced = vocab.decode([B, vocab.pad_id, T, vocab.eos_id])  # PAD in place of AH: a substitution
    assert g2p_scores([replaced], reference) == G2PScores(pytest.approx(100 / 3), 100.0)


# Small alphabets so that generated sequences share symbols and edit distances are interesting.
SEQUENCES = st.lists(st.sampled_from(["AA", "B", "CH"]), max_size=6)
REFERENCES = st.lists(st.sampled_from(["AA", "B", "CH"]), min_size=1, max_size=6)
PROPERTY = settings(max_examples=50, deadline=None)


@PROPERTY
@given(st.lists(REFERENCES, min_size=1, max_size=5))
def test_identical_sequences_score_zero(words):
    references = [[word] for word in words]
    assert g2p_scores(words, references) == G2PScores(0.0, 0.0)


@PROPERTY
@given(REFERENCES, REFERENCES)
def test_per_of_one_word_is_a_symmetric_distance_over_the_reference_length(a, b):
    """PER * |r| / 100 is the edit distance, which is symmetric, zero only for equal sequences, and between
    the length difference and the longer length."""
    d_ab = phoneme_error_rate([a], [[b]]) * len(b) / 100
    d_ba = phoneme_error_rate([b], [[a]]) * len(a) / 100
    assert d_ab == pytest.approx(d_ba) == pytest.approx(brute_force_edit_distance(a, b))
    assert (round(d_ab) == 0) == (a == b)
    assert abs(len(a) - len(b)) <= round(d_ab) <= max(len(a), len(b))


@PROPERTY
@given(st.lists(st.tuples(SEQUENCES, st.lists(REFERENCES, min_size=1, max_size=3)), min_size=1, max_size=5))
def test_wer_is_a_percentage_of_words_and_per_is_bounded(words):
    hypotheses = [hypothesis for hypothesis, _ in words]
    references = [variants for _, variants in words]
    wer = word_error_rate(hypotheses, references)
    assert 0.0 <= wer <= 100.0
    assert wer * len(words) / 100 == pytest.approx(round(wer * len(words) / 100))
    assert (wer == 0.0) == all(list(h) in [list(v) for v in vs] for h, vs in words)
    per = phoneme_error_rate(hypotheses, references)
    assert per >= 0.0 and (per == 0.0) == (wer == 0.0)


@PROPERTY
@given(SEQUENCES, st.lists(REFERENCES, min_size=1, max_size=4))
def test_any_reference_rule_is_the_minimum_over_references(hypothesis, variants):
    """Against several references a word scores as against its closest one (ties: the shortest)."""
    alone = [
        (phoneme_error_rate([hypothesis], [[v]]) * len(v) / 100, len(v), word_error_rate([hypothesis], [[v]]))
        for v in variants
    ]
    distance, length, _ = min(alone, key=lambda score: (round(score[0]), score[1]))
    assert phoneme_error_rate([hypothesis], [variants]) == pytest.approx(100 * distance / length)
    assert word_error_rate([hypothesis], [variants]) == min(wer for _, _, wer in alone)


def test_unigram_score_by_hand():
    """Train a a b over V = 3 types: add-one p(a) = 3/6, p(b) = 2/6, p(c) = 1/6; test a c: loss = -(ln 1/2 +
    ln 1/6) / 2 nats, perplexity sqrt(2 * 6), accuracy 50% (a, the most frequent, is right once)."""
    score = unigram_score("aab", "ac", vocab_size=3)
    assert score.loss == pytest.approx(-(math.log(1 / 2) + math.log(1 / 6)) / 2)
    assert score.perplexity == pytest.approx(math.sqrt(12))
    assert (score.accuracy, score.tokens) == (50.0, 2)


def test_unigram_score_refuses_no_test_tokens_and_too_small_a_vocabulary():
    with pytest.raises(ValueError, match=r"^no test tokens"):
        unigram_score("ab", "", vocab_size=2)
    with pytest.raises(ValueError, match=r"^vocab_size \(2\) is smaller than the 3 token types seen$"):
        unigram_score("ab", "c", vocab_size=2)


def test_length_coverage_by_hand():
    # "abcd": 2 of 4 phonemes (0.5 < 0.7: dropped end); "xyz": 4 of 3 (1.33 > 1.3: a repeat);
    # "ab": 2 against the variants (A B) and (A B C D): the closer (A B) is its reference, so not a dropped end;
    # "hello": 4 of 4, exact.
    words = ["abcd", "xyz", "ab", "hello"]
    hypotheses = [("A", "B"), ("X", "Y", "Z", "Z"), ("A", "B"), ("H", "EH", "L", "OW")]
    references = [
        [("A", "B", "C", "D")],
        [("X", "Y", "Z")],
        [("A", "B", "C", "D"), ("A", "B")],
        [("H", "EH", "L", "OW")],
    ]
    coverage = length_coverage(words, hypotheses, references)
    # letters 4 + 3 + 2 + 5 = 14; hypothesis phonemes 2 + 4 + 2 + 4 = 12; closest references 4 + 3 + 2 + 4 = 13
    assert coverage == pytest.approx(LengthCoverage(12 / 14, 13 / 14, 25.0, 25.0))


def test_length_coverage_thresholds_are_strict():
    # 7 of 10 phonemes is exactly 70%: not shorter than 70%; 13 of 10 exactly 130%: not longer.
    reference = [tuple(f"P{i}" for i in range(10))]
    hypotheses = [reference[0][:7], (*reference[0], "A", "B", "C")]
    coverage = length_coverage(["w" * 10, "w" * 10], hypotheses, [reference, reference])
    assert coverage.dropped_ends == 0.0 and coverage.repeats == 0.0
    coverage = length_coverage(["w" * 10], [reference[0][:6]], [reference])
    assert coverage.dropped_ends == 100.0


def test_length_coverage_input_errors():
    with pytest.raises(ValueError, match="2 words but 1 hypotheses"):
        length_coverage(["a", "b"], [("A",)], [[("A",)]])
    with pytest.raises(ValueError, match="an empty word has no letters to pronounce"):
        length_coverage([""], [("A",)], [[("A",)]])


def test_field_rmse_by_hand():
    truth = np.zeros((2, 2, 2))
    forecast = np.array([[[1.0, -1.0], [1.0, -1.0]], [[2.0, 0.0], [0.0, 0.0]]])  # errors^2: mean 1; mean 1
    np.testing.assert_allclose(field_rmse(forecast, truth), [1.0, 1.0], rtol=1e-15)
    np.testing.assert_allclose(field_rmse(np.array([[3.0, 4.0]]), np.zeros((1, 2))), np.sqrt(12.5), rtol=1e-15)
    with pytest.raises(ValueError, match=r"forecast \(1, 2\) and truth \(2, 1\) differ in shape"):
        field_rmse(np.zeros((1, 2)), np.zeros((2, 1)))


def test_anomaly_correlation_by_hand():
    climatology = np.array([[1.0, 1.0], [1.0, 1.0]])
    truth = np.array([[2.0, 0.0], [1.0, 3.0]])  # o' = [1, -1, 0, 2]
    forecast = np.array([[2.0, 1.0], [1.0, 2.0]])  # f' = [1, 0, 0, 1]
    # sum f'o' = 1 + 0 + 0 + 2 = 3; |f'|^2 = 2; |o'|^2 = 6: ACC = 3 / sqrt(12)
    assert anomaly_correlation(forecast, truth, climatology) == pytest.approx(3 / np.sqrt(12), rel=1e-15)
    # the sign of the anomaly counts, its size does not; the climatology itself scores 0
    assert anomaly_correlation(1 + 5 * (truth - 1), truth, climatology) == pytest.approx(1.0, rel=1e-15)
    assert anomaly_correlation(1 - (truth - 1), truth, climatology) == pytest.approx(-1.0, rel=1e-15)
    assert anomaly_correlation(climatology, truth, climatology) == 0.0
    stacked = anomaly_correlation(np.stack([forecast, climatology]), np.stack([truth, truth]), climatology)
    np.testing.assert_allclose(stacked, [3 / np.sqrt(12), 0.0], rtol=1e-15)
