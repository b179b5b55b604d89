"""The pronouncer that ships with the package: a g2p run trained on CMUdict (``scripts/train_pronouncer.py``), kept
as package data in ``seqlab/pretrained/g2p_en`` and loaded through ``load_system`` like any run directory.

    >>> import seqlab
    >>> seqlab.pronounce("hello")
    'HH EH L OW'
    >>> seqlab.pronounce(["speech", "sound"], nbest=2)  # doctest: +SKIP
    [[('S P IY CH', -0.0...), ...], [('S AW N D', -0.0...), ...]]

Phonemes are CMUdict's ARPAbet without stress marks, separated by spaces. Words are lower-cased; a word that is
empty, longer than the model reads or has a character it never saw is refused (``DataError``), as by
``seqlab predict``. The test-split error rates of the shipped model are in ``PRONOUNCER/results.json`` and the
README.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import overload

from seqlab.errors import CheckpointError
from seqlab.recipes import load_system
from seqlab.recipes.g2p import G2PSystem
from seqlab.recipes.system import SystemOptions, check_inputs

PRONOUNCER = ("pretrained", "g2p_en")  # the run directory's path inside the ``seqlab`` package
__all__ = ["PRONOUNCER", "load_pronouncer", "pronounce", "pronouncer_path"]

# One word's n-best: (phonemes joined by spaces, log-probability in nats), best first.
Scored = list[tuple[str, float]]


def pronouncer_path() -> Path:
    """The shipped run directory, in the installed package.

    Raises: CheckpointError if the package was installed without its data (or inside a zip file, where the run
        directory is not a directory on disk).
    """
    resource = files("seqlab").joinpath(*PRONOUNCER)
    if not isinstance(resource, Path) or not resource.is_dir():
        raise CheckpointError(f"the pretrained pronouncer {'/'.join(PRONOUNCER)} is missing from the seqlab package")
    return resource


@functools.cache
def load_pronouncer(num_beams: int | None = None, nbest: int | None = None) -> G2PSystem:
    """The shipped pronouncer, loaded once per (num_beams, nbest) by ``load_system`` (None: the run's own beam
    width, one hypothesis).

    Raises: CheckpointError as ``pronouncer_path`` or for unreadable files; ConfigError for nbest above the beam.
    """
    system = load_system(pronouncer_path(), SystemOptions(num_beams=num_beams, nbest=nbest))
    assert isinstance(system, G2PSystem)  # the shipped run is a g2p run
    return system


@overload
def pronounce(words: str, *, nbest: None = None, num_beams: int | None = None) -> str: ...
@overload
def pronounce(words: Sequence[str], *, nbest: None = None, num_beams: int | None = None) -> list[str]: ...
@overload
def pronounce(words: str, *, nbest: int, num_beams: int | None = None) -> Scored: ...
@overload
def pronounce(words: Sequence[str], *, nbest: int, num_beams: int | None = None) -> list[Scored]: ...
def pronounce(
    words: str | Sequence[str], *, nbest: int | None = None, num_beams: int | None = None
) -> str | list[str] | Scored | list[Scored]:
    """The pronunciation of each word by the shipped model (beam search, ``num_beams`` beams; None: 5).

    Args:
        words: one word, or a sequence of words (one result each, in order).
        nbest: None for the best pronunciation as a string ``"HH AH L OW"``; N for the N best as
            ``(phonemes, log-probability in nats)`` pairs, best first (N <= the beam width).
        num_beams: the beam width K (1 = greedy search).
    Returns: a string (or a list of (string, score) pairs) for one word; a list of them for a sequence of words.
    Raises:
        DataError: a word is empty, longer than the model reads (64 letters) or has a character it never saw
            (a letter outside a-z and ' . - _ and digits in CMUdict's spellings), naming it.
        ConfigError: nbest or num_beams below 1, or nbest above the beam width.
        CheckpointError: the package data is missing.
    """
    batch = [words] if isinstance(words, str) else list(words)
    check_inputs(batch, source="pronounce")
    predictions = load_pronouncer(num_beams, nbest).predict(batch)
    if nbest is None:
        results: list = [" ".join(p.nbest[0][0]) for p in predictions]
    else:
        results = [[(" ".join(phonemes), score) for phonemes, score in p.nbest] for p in predictions]
    return results[0] if isinstance(words, str) else results
