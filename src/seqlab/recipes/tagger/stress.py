"""Stress patterns of pronunciations: the labels the tagger learns, its scores and the two baselines.

A stressed pronunciation (``HH AH0 L OW1``) is split into its stripped phonemes and one label per phoneme: a
vowel's stress digit (0, 1, 2), IGNORE for a consonant. A pronunciation that the dictionary lists with several
stress patterns is scored once, against the pattern closest to the prediction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from seqlab.data.cmudict import Pronunciation

NUM_LABELS = 3  # stress 0, 1, 2; the label id is the digit
IGNORE = -100  # the label of a consonant (and of padding): no loss, not scored
DIGITS = str.maketrans("", "", "012")  # str.translate table that strips stress digits


class StressedPronunciation(NamedTuple):
    """A pronunciation as the tagger sees it: stress-stripped phonemes and, per phoneme, the stress digit of a
    vowel or IGNORE for a consonant (``HH AH0 L OW1`` -> (HH, AH, L, OW), (-100, 0, -100, 1))."""

    phonemes: tuple[str, ...]
    stress: tuple[int, ...]


def split_stress(phonemes: Sequence[str]) -> StressedPronunciation:
    """Separate each phoneme from its stress digit (none: a consonant, label IGNORE)."""
    stress = tuple(int(p[-1]) if p[-1] in "012" else IGNORE for p in phonemes)
    return StressedPronunciation(tuple(p.translate(DIGITS) for p in phonemes), stress)


def join_stress(phonemes: Sequence[str], stress: Sequence[int]) -> str:
    """The stressed pronunciation as CMUdict writes it: a vowel's digit appended, consonants bare."""
    return " ".join(p if s == IGNORE else f"{p}{s}" for p, s in zip(phonemes, stress, strict=True))


def group_patterns(entries: Sequence[Pronunciation]) -> dict[tuple[str, tuple[str, ...]], list[tuple[int, ...]]]:
    """(word, stripped phonemes) -> every stress pattern the entries give it, in order of appearance."""
    groups: dict[tuple[str, tuple[str, ...]], list[tuple[int, ...]]] = {}
    for word, phonemes in entries:
        stripped, stress = split_stress(phonemes)
        patterns = groups.setdefault((word, stripped), [])
        if stress not in patterns:
            patterns.append(stress)
    return groups


class StressScores(NamedTuple):
    """Vowel accuracy and word accuracy (%), and how many vowels and pronunciations were scored."""

    vowel_accuracy: float
    word_accuracy: float
    vowels: int
    words: int


def stress_scores(predictions: Sequence[Sequence[int]], references: Sequence[Sequence[Sequence[int]]]) -> StressScores:
    """Score each predicted stress pattern against the closest of its references (most vowels in agreement);
    positions labelled IGNORE in the references are not scored. A pronunciation without vowels counts as right.

    Raises: ValueError if a prediction's length differs from its references'.
    """
    right_vowels = total_vowels = right_words = 0
    for predicted, patterns in zip(predictions, references, strict=True):
        agreement = []
        for pattern in patterns:
            if len(pattern) != len(predicted):
                raise ValueError(f"prediction of {len(predicted)} labels for a reference of {len(pattern)}")
            agreement.append(sum(p == r for p, r in zip(predicted, pattern, strict=True) if r != IGNORE))
        vowels = sum(r != IGNORE for r in patterns[0])
        best = max(agreement)
        right_vowels, total_vowels, right_words = (
            right_vowels + best,
            total_vowels + vowels,
            right_words + (best == vowels),
        )
    words = len(predictions)
    return StressScores(
        100.0 * right_vowels / max(1, total_vowels), 100.0 * right_words / max(1, words), total_vowels, words
    )


def baseline_patterns(
    train: Sequence[Pronunciation], inputs: Sequence[Sequence[str]]
) -> dict[str, list[tuple[int, ...]]]:
    """The baselines' stress patterns for stripped ``inputs``: ``majority`` (each vowel's most frequent stress in
    ``train``; a vowel never seen there gets 0) and ``first`` (1 on the first vowel, 0 on the others)."""
    counts: dict[str, Counter[int]] = {}
    for _, phonemes in train:
        for phoneme, stress in zip(*split_stress(phonemes), strict=True):
            if stress != IGNORE:
                counts.setdefault(phoneme, Counter())[stress] += 1
    majority = {phoneme: c.most_common(1)[0][0] for phoneme, c in counts.items()}
    result: dict[str, list[tuple[int, ...]]] = {"majority": [], "first": []}
    for phonemes in inputs:
        result["majority"].append(tuple(majority.get(p, 0) if p in counts else IGNORE for p in phonemes))
        vowel_positions = [i for i, p in enumerate(phonemes) if p in counts]
        result["first"].append(
            tuple(IGNORE if p not in counts else int(i == vowel_positions[0]) for i, p in enumerate(phonemes))
        )
    return result
