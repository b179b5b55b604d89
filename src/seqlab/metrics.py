"""Evaluation metrics: perplexity, the unigram baseline, phoneme / word error rates and length coverage for
grapheme-to-phoneme conversion, and the root-mean-square error and anomaly correlation of forecast fields.

Edit distances come from ``rapidfuzz.distance.Levenshtein`` (unit-cost insertions, deletions and
substitutions), which compares sequences of any hashable symbols, here phoneme strings.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from typing import NamedTuple

import numpy as np
from rapidfuzz.distance import Levenshtein


class G2PScores(NamedTuple):
    """Phoneme error rate and word error rate, both in percent."""

    per: float
    wer: float


def _check(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[Sequence[str]]]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} reference sets")
    if not hypotheses:
        raise ValueError("no words to score")
    for i, (hypothesis, variants) in enumerate(zip(hypotheses, references, strict=True)):
        # A plain string would silently be compared character by character.
        if isinstance(hypothesis, str) or isinstance(variants, str) or any(isinstance(v, str) for v in variants):
            raise ValueError(f"word {i}: pass phonemes as a sequence of symbols, not a string")
        if not variants:
            raise ValueError(f"word {i} has no reference pronunciation")
        if any(len(variant) == 0 for variant in variants):
            raise ValueError(f"word {i} has an empty reference pronunciation")


def _closest(hypothesis: Sequence[str], variants: Sequence[Sequence[str]]) -> tuple[int, int]:
    """(edit distance, length) of the closest reference; ties go to the shorter one, then the first listed."""
    return min((Levenshtein.distance(hypothesis, variant), len(variant)) for variant in variants)


def phoneme_error_rate(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[Sequence[str]]]) -> float:
    """Phoneme error rate in percent, scoring each word against its closest reference pronunciation.

    PER = 100 * sum_w d(h_w, r_w*) / sum_w |r_w*|,  r_w* = argmin_{r in R_w} (d(h_w, r), |r|)

    where d is the Levenshtein distance over phonemes and R_w the word's reference pronunciations. Among
    equally close references the shorter one is chosen, which gives the larger (more conservative) error rate.

    Args:
        hypotheses: W predicted phoneme sequences.
        references: W lists of reference pronunciations, one list per word.
    Returns:
        PER in percent (can exceed 100 when hypotheses are longer than their references).
    Raises:
        ValueError: if the lengths differ, there are no words, a word has no (or an empty) reference, or a
            pronunciation is given as a string rather than a sequence of phonemes.
    """
    _check(hypotheses, references)
    errors = length = 0
    for hypothesis, variants in zip(hypotheses, references, strict=True):
        distance, reference_length = _closest(hypothesis, variants)
        errors += distance
        length += reference_length
    return 100.0 * errors / length


def word_error_rate(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[Sequence[str]]]) -> float:
    """Percentage of words whose hypothesis equals none of their reference pronunciations.

    Args and Raises: as :func:`phoneme_error_rate`.
    """
    _check(hypotheses, references)
    wrong = sum(
        tuple(hypothesis) not in {tuple(variant) for variant in variants}
        for hypothesis, variants in zip(hypotheses, references, strict=True)
    )
    return 100.0 * wrong / len(hypotheses)


def g2p_scores(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[Sequence[str]]]) -> G2PScores:
    """Both G2P metrics: G2PScores(per, wer) in percent. Args and Raises: as :func:`phoneme_error_rate`."""
    return G2PScores(phoneme_error_rate(hypotheses, references), word_error_rate(hypotheses, references))


DROPPED_END_RATIO = 0.7  # a hypothesis shorter than this fraction of its reference has lost its end
REPEAT_RATIO = 1.3  # a hypothesis longer than this fraction of its reference repeats part of it


class LengthCoverage(NamedTuple):
    """Whether a G2P model pronounces every letter: lengths of the hypotheses against the references.

    Attributes:
        phonemes_per_letter: hypothesis phonemes per letter, sum_w |h_w| / sum_w |x_w|.
        reference_phonemes_per_letter: the same for the references, sum_w |r_w*| / sum_w |x_w|.
        dropped_ends: % of words with |h_w| < ``DROPPED_END_RATIO`` |r_w*| (the end of the word left unsaid).
        repeats: % of words with |h_w| > ``REPEAT_RATIO`` |r_w*| (syllables said twice).
    """

    phonemes_per_letter: float
    reference_phonemes_per_letter: float
    dropped_ends: float
    repeats: float


def length_coverage(
    words: Sequence[str], hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[Sequence[str]]]
) -> LengthCoverage:
    """Phonemes per letter of the hypotheses and of the references, and the % of words whose hypothesis is much
    shorter (dropped ends) or much longer (repeats) than its reference (``LengthCoverage``, issue 25).

    Each word is held against its closest reference r_w* (the one the phoneme error rate counts: least edit
    distance, then the shorter), so a word with a short and a long variant is not called cut short for choosing
    the long one's neighbour.

    Args:
        words: W words (their lengths |x_w| in characters); hypotheses: W predicted phoneme sequences;
            references: W lists of reference pronunciations.
    Raises:
        ValueError: as :func:`phoneme_error_rate`, or if ``words`` is not as long as ``hypotheses`` or has an
            empty word.
    """
    _check(hypotheses, references)
    if len(words) != len(hypotheses):
        raise ValueError(f"{len(words)} words but {len(hypotheses)} hypotheses")
    if any(not word for word in words):
        raise ValueError("an empty word has no letters to pronounce")
    letters = hypothesis_length = reference_length = dropped = repeated = 0
    for word, hypothesis, variants in zip(words, hypotheses, references, strict=True):
        _, reference = _closest(hypothesis, variants)
        letters += len(word)
        hypothesis_length += len(hypothesis)
        reference_length += reference
        dropped += len(hypothesis) < DROPPED_END_RATIO * reference
        repeated += len(hypothesis) > REPEAT_RATIO * reference
    per_word = 100.0 / len(words)
    return LengthCoverage(
        hypothesis_length / letters, reference_length / letters, dropped * per_word, repeated * per_word
    )


def perplexity(total_nll_nats: float, num_tokens: int) -> float:
    """Perplexity exp(total NLL / tokens), the exponentiated mean negative log-likelihood per token.

    Args:
        total_nll_nats: summed negative log-likelihood in nats (natural log), >= 0.
        num_tokens: number of predicted tokens, > 0.
    Returns:
        The perplexity, ``inf`` when the mean NLL overflows exp.
    Raises:
        ValueError: if ``num_tokens`` < 1 or ``total_nll_nats`` < 0.
    """
    if num_tokens < 1:
        raise ValueError(f"num_tokens ({num_tokens}) must be at least 1")
    if total_nll_nats < 0:
        raise ValueError(f"total_nll_nats ({total_nll_nats}) must be >= 0")
    try:
        return math.exp(total_nll_nats / num_tokens)
    except OverflowError:
        return math.inf


class UnigramScore(NamedTuple):
    """A unigram model's score on test tokens: loss (nats/token), perplexity, accuracy (%) and tokens scored."""

    loss: float
    perplexity: float
    accuracy: float
    tokens: int


def unigram_score(
    train_tokens: Iterable[Hashable], test_tokens: Sequence[Hashable], *, vocab_size: int
) -> UnigramScore:
    """The add-one smoothed unigram model of ``train_tokens`` scored on ``test_tokens``: the baseline that knows
    only how often each token occurs.

    p(w) = (c(w) + 1) / (N + V), c(w) the count of w among the N training tokens and V = ``vocab_size`` the types
    (Laplace smoothing, Jurafsky & Martin, Speech and Language Processing, 3rd ed., eq. 3.23). Loss is the mean
    -ln p(w) over the test tokens; accuracy is the % of test tokens equal to the most frequent training token
    (what the unigram model predicts everywhere).

    Raises:
        ValueError: no test tokens, or more token types than ``vocab_size``.
    """
    counts = Counter(train_tokens)
    if not test_tokens:
        raise ValueError("no test tokens to score")
    types = len(set(counts) | set(test_tokens))
    if types > vocab_size:
        raise ValueError(f"vocab_size ({vocab_size}) is smaller than the {types} token types seen")
    total = sum(counts.values()) + vocab_size
    nll = -sum(math.log((counts[token] + 1) / total) for token in test_tokens)
    best = counts.most_common(1)[0][0] if counts else None
    hits = sum(token == best for token in test_tokens)
    return UnigramScore(
        nll / len(test_tokens), perplexity(nll, len(test_tokens)), 100.0 * hits / len(test_tokens), len(test_tokens)
    )


def field_rmse(forecast: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Root-mean-square error of each field over its grid: sqrt(mean_ij (f_ij - o_ij)^2) (WeatherBench, Rasp et
    al., 2020, eq. 2, with equal weights on a flat grid).

    Inputs: forecast, truth: (..., Y, X), the same shape.
    Outputs: (...), in the field's units.
    Raises: ValueError if the shapes differ.
    """
    if np.shape(forecast) != np.shape(truth):
        raise ValueError(f"forecast {np.shape(forecast)} and truth {np.shape(truth)} differ in shape")
    return np.sqrt(((np.asarray(forecast) - truth) ** 2).mean(axis=(-2, -1)))


def anomaly_correlation(forecast: np.ndarray, truth: np.ndarray, climatology: np.ndarray) -> np.ndarray:
    """Anomaly correlation coefficient (ACC) of each field over its grid (Jolliffe & Stephenson, 2012, Sec. 6.4;
    WeatherBench, Rasp et al., 2020, eq. 3):

        ACC = sum_ij f'_ij o'_ij / sqrt(sum_ij f'_ij^2 sum_ij o'_ij^2),    f' = f - c,  o' = o - c

    the uncentred form (anomalies from the climatology c, not from their own means). A forecast with no anomaly
    (the climatology itself) has no correlation: its ACC is 0 by this convention.

    Inputs: forecast, truth: (..., Y, X); climatology: broadcastable to them.
    Outputs: (...), in [-1, 1].
    Raises: ValueError if forecast and truth differ in shape.
    """
    if np.shape(forecast) != np.shape(truth):
        raise ValueError(f"forecast {np.shape(forecast)} and truth {np.shape(truth)} differ in shape")
    f, o = np.asarray(forecast) - climatology, np.asarray(truth) - climatology
    covariance = (f * o).sum(axis=(-2, -1))
    scale = np.sqrt((f * f).sum(axis=(-2, -1)) * (o * o).sum(axis=(-2, -1)))
    return np.divide(covariance, scale, out=np.zeros_like(covariance), where=scale > 0)
