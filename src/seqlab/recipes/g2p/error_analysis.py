"""Where a G2P model goes wrong: word and phoneme error rates by category, length coverage by word length, and the
list of wrong words.

Categories (each word of the scored set falls in one length bucket and one reference-count class):

- letters: the word's length in characters, bucketed 1-4, 5-7, 8-10 and 11+ (long words carry more chances to err),
  and 15+, the long words within 11+ (kept apart because that is where a model drops or repeats syllables; 11+
  stays whole so that earlier results compare). Each length bucket also reports its length coverage
  (``seqlab.metrics.length_coverage``): phonemes per letter of the hypotheses and of the references, and the % of
  words cut short (dropped ends) or too long (repeats).
- pronunciations: one reference, or several (a word with variants is right if it matches any of them, but its
  spelling is by definition ambiguous).
- no vowel letter: none of a, e, i, o, u, y (``nth``, ``mcgrw``, ``ltd``): abbreviations and initialisms, read
  letter by letter, which the letters' usual sounds do not predict.

CMUdict is all lower case, so there is no honest test for a proper name (no capital letter to see), and none for a
foreign word; neither category is reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rapidfuzz.distance import Levenshtein

from seqlab.errors import ConfigError
from seqlab.files import atomic_write
from seqlab.metrics import length_coverage, phoneme_error_rate, word_error_rate

LENGTH_BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("1_4", 1, 4),
    ("5_7", 5, 7),
    ("8_10", 8, 10),
    ("11_up", 11, None),
    ("15_up", 15, None),  # within 11_up
)
VOWEL_LETTERS = frozenset("aeiouy")
__all__ = ["LENGTH_BUCKETS", "VOWEL_LETTERS", "check_errors_path", "error_categories", "write_errors"]

Phonemes = Sequence[str]


def error_categories(
    words: Sequence[str], hypotheses: Sequence[Phonemes], references: Sequence[Sequence[Phonemes]]
) -> dict[str, float]:
    """Word and phoneme error rates (%) and word count of every category (module docstring), as ``wer_NAME``,
    ``per_NAME`` (``seqlab.metrics``: each word scored against its closest reference) and ``words_NAME``, and each
    length bucket's coverage as ``phonemes_per_letter_NAME``, ``reference_phonemes_per_letter_NAME``,
    ``dropped_ends_NAME`` and ``repeats_NAME`` (``seqlab.metrics.LengthCoverage``).

    Names: ``letters_1_4``, ``letters_5_7``, ``letters_8_10``, ``letters_11_up``, ``letters_15_up``,
    ``one_pronunciation``, ``several_pronunciations``, ``no_vowel_letter``. A category without words has only its
    count (0), no error rates or coverage.

    Args:
        words: W words; hypotheses: their W best hypotheses; references: W lists of reference pronunciations.
    """
    members: dict[str, list[int]] = {f"letters_{name}": [] for name, _, _ in LENGTH_BUCKETS}
    members.update(one_pronunciation=[], several_pronunciations=[], no_vowel_letter=[])
    for i, (word, variants) in enumerate(zip(words, references, strict=True)):
        for name, low, high in LENGTH_BUCKETS:
            if len(word) >= low and (high is None or len(word) <= high):
                members[f"letters_{name}"].append(i)
        members["one_pronunciation" if len(variants) == 1 else "several_pronunciations"].append(i)
        if not VOWEL_LETTERS.intersection(word):
            members["no_vowel_letter"].append(i)
    rows: dict[str, float] = {}
    for name, index in members.items():
        if not index:
            rows[f"words_{name}"] = 0.0
            continue
        mine = [hypotheses[i] for i in index], [references[i] for i in index]
        rows[f"wer_{name}"] = word_error_rate(*mine)
        rows[f"per_{name}"] = phoneme_error_rate(*mine)
        rows[f"words_{name}"] = float(len(index))
        if name.startswith("letters_"):
            coverage = length_coverage([words[i] for i in index], *mine)
            rows.update({f"{field}_{name}": value for field, value in coverage._asdict().items()})
    return rows


def check_errors_path(path: Path) -> None:
    """Refuse an errors file that exists (it is never overwritten) or whose directory does not.

    Raises: ConfigError naming the path.
    """
    if path.exists():
        raise ConfigError(f"--errors {path}: exists; give a new file name (an existing file is never overwritten)")
    if not path.parent.is_dir():
        raise ConfigError(f"--errors {path}: no such directory {path.parent}")


def write_errors(
    path: Path, words: Sequence[str], hypotheses: Sequence[Phonemes], references: Sequence[Sequence[Phonemes]]
) -> int:
    """Write every wrong word as a TSV line ``word<TAB>references<TAB>hypothesis<TAB>distance`` and return the count.

    References are joined by `` | ``, phonemes by spaces; distance is the Levenshtein distance in phonemes to the
    closest reference (as the phoneme error rate counts it). A header line names the columns.

    Raises: ConfigError if ``path`` exists (see :func:`check_errors_path`); StorageError if it cannot be written.
    """
    check_errors_path(path)
    lines = ["word\treferences\thypothesis\tdistance"]
    for word, hypothesis, variants in zip(words, hypotheses, references, strict=True):
        if tuple(hypothesis) in {tuple(v) for v in variants}:
            continue
        distance = min(Levenshtein.distance(hypothesis, v) for v in variants)
        lines.append(f"{word}\t{' | '.join(' '.join(v) for v in variants)}\t{' '.join(hypothesis)}\t{distance}")
    atomic_write(path, "\n".join(lines) + "\n")
    return len(lines) - 1
