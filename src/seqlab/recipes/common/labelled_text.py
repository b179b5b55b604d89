"""The ``[data]`` section of the recipes that read labelled texts (classify, vec2seq), and how they read them.

The default data is personal names by language of origin from the ``nameCreator`` package
(``seqlab.data.names``: 9 languages, 14,100 first and last names), split 80/10/10 per class with a fixed seed; the
user's own data is ``TEXT<TAB>LABEL`` files (``seqlab.data.labelled_text``). Texts become character ids (BOS, the
characters, EOS) and labels class ids, both named in one line where they cannot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from seqlab.data.files import data_file
from seqlab.data.labelled_text import (
    LABELLED_TEXT,
    LabelledText,
    read_labelled_file,
    stratified_sample,
    stratified_split,
)
from seqlab.data.names import name_origin_examples
from seqlab.data.vocab import Vocabulary
from seqlab.errors import ConfigError, DataError, UnknownSymbolError
from seqlab.validation import check_int, check_real

NAMES_SOURCE = "names by language (nameCreator)"


@dataclass(frozen=True)
class LabelledTextDataConfig:
    """Where the labelled texts come from and how they are split."""

    train_path: str | None = data_file(LABELLED_TEXT)  # TEXT<TAB>LABEL file; None = names by language (nameCreator)
    test_path: str | None = data_file(LABELLED_TEXT)  # TEXT<TAB>LABEL file; None = test_fraction of the training texts
    valid_fraction: float = 0.1  # share of each class held out for validation
    test_fraction: float = 0.1  # share of each class held out for testing when test_path is None
    split_seed: int = 0  # seed of the stratified split (and of the names data's per-class sample)
    min_per_class: int = 100  # names data: languages with fewer unambiguous names are left out
    max_per_class: int = 2500  # names data: at most this many names per language
    train_size: int | None = None  # labelled training texts kept: a class-stratified sample (a learning curve)

    def __post_init__(self) -> None:
        check_int("train_size", self.train_size, optional=True)
        check_real("valid_fraction", self.valid_fraction, greater_than=0.0, below=0.5)
        check_real("test_fraction", self.test_fraction, greater_than=0.0, below=0.5)
        check_int("split_seed", self.split_seed, minimum=0)
        check_int("min_per_class", self.min_per_class)
        check_int("max_per_class", self.max_per_class)


class LabelledSplits(NamedTuple):
    """The three splits of labelled texts and a description of where they came from (for messages and logs)."""

    train: list[LabelledText]
    valid: list[LabelledText]
    test: list[LabelledText]
    source: str

    def parts(self) -> tuple[tuple[str, list[LabelledText]], ...]:
        """``(("train", train), ("valid", valid), ("test", test))``, to encode each split alike."""
        return (("train", self.train), ("valid", self.valid), ("test", self.test))

    def labels(self) -> list[str]:
        """The sorted class names of the training texts.

        Raises: DataError naming the source if there are fewer than 2.
        """
        labels = sorted({e.label for e in self.train})
        if len(labels) < 2:
            raise DataError(f"{self.source}: needs at least 2 classes, found {len(labels)}")
        return labels


def read_labelled_splits(config: LabelledTextDataConfig) -> LabelledSplits:
    """The splits the data section names; with ``data.train_size``, the training texts are a class-stratified
    sample of that size (seeded by ``split_seed``, so every model gets the same sample), while valid and test
    stay whole.

    Raises:
        ConfigError: data.test_path without data.train_path; nameCreator missing (``name_origin_examples``).
        DataError: a file missing or malformed (naming it), a split empty, or ``data.train_size`` that does not
            fit the training texts.
    """
    splits = _read_splits(config)
    if config.train_size is None:
        return splits
    try:
        sample = stratified_sample(splits.train, config.train_size, seed=config.split_seed)
    except DataError as e:
        raise DataError(f"{splits.source}: data.train_size: {e}") from None
    return splits._replace(train=sample)


def _read_splits(config: LabelledTextDataConfig) -> LabelledSplits:
    if config.train_path is None and config.test_path is not None:
        raise ConfigError("data.test_path needs data.train_path (the names data is split into all three)")
    if config.train_path is None:
        examples = name_origin_examples(
            min_per_class=config.min_per_class, max_per_class=config.max_per_class, seed=config.split_seed
        )
        source = NAMES_SOURCE
    else:
        examples, source = read_labelled_file(config.train_path), config.train_path
    if config.test_path is None:
        splits = stratified_split(
            examples, valid_fraction=config.valid_fraction, test_fraction=config.test_fraction, seed=config.split_seed
        )
        return LabelledSplits(splits.train, splits.valid, splits.test, source)
    test = read_labelled_file(config.test_path)
    train, valid, _ = stratified_split(
        examples, valid_fraction=config.valid_fraction, test_fraction=0.0, seed=config.split_seed
    )
    return LabelledSplits(train, valid, test, source)


def character_ids(vocab: Vocabulary, texts: Sequence[str], *, source: str) -> list[list[int]]:
    """BOS, the character ids, EOS of each text.

    Raises: DataError ``SOURCE: ...`` for a character ``vocab`` lacks.
    """
    try:
        return [vocab.encode(text, add_bos=True, add_eos=True) for text in texts]
    except UnknownSymbolError as e:
        raise DataError(f"{source}: {e}") from None


def class_ids(labels: Sequence[str], examples: Sequence[LabelledText], *, source: str) -> list[int]:
    """The index in ``labels`` of each example's label.

    Raises: DataError ``SOURCE: classes the model never saw: ...`` naming every unknown label.
    """
    index = {label: i for i, label in enumerate(labels)}
    unknown = sorted({e.label for e in examples} - set(index))
    if unknown:
        raise DataError(f"{source}: classes the model never saw: {', '.join(unknown)}")
    return [index[e.label] for e in examples]
