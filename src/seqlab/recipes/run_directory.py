"""The run directory of ``seqlab train``: where it goes (``run_directory``: ``--out``, else the first free
``runs/RECIPE``), and ``seqlab.files.OutputDirectory`` of kind "train", with a training run's own message for an
occupied ``--out``.

Three ways to open one (``RunMode``):

- ``"new"``: the directory must be absent or empty (seqlab's lock and temporary files aside). It is created only
  once the recipe has read its data (``open``), so a failed start leaves nothing; it is written in place, so its
  metrics can be watched, and removed again (with the parents created for it, if they are still empty) if
  training fails before its first checkpoint.
- ``"overwrite"``: an existing training run (any other non-empty directory is refused, naming what it holds, so
  a mistyped ``--out ~`` deletes nothing; so is one that holds the run's data) is replaced, but not at once: the
  new run is written aside, in a hidden sibling, and swapped in by ``commit`` at its first training checkpoint.
  A failure or a kill before that leaves the old run as it was; a later command removes the abandoned sibling.
- ``"resume"``: the directory holds a run to continue; it is used as it is.

In every mode the run directory (and the sibling) is locked with ``seqlab.files.RunLock`` from ``open`` to
``close``: a second run on it is refused at once, naming the holder.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from seqlab.errors import ConfigError
from seqlab.files import RECIPE_FILE, OutputDirectory, OutputMode, check_output_path, has_results
from seqlab.training.checkpoint import STATE_FILE

RESULTS_FILE = "results.json"  # written last, by a run that finished
RunMode = OutputMode
RUN_KIND = "train"  # the kind of a training run's directory (seqlab.files.output_kind)
__all__ = ["RECIPE_FILE", "RESULTS_FILE", "RUN_KIND", "RunDirectory", "RunMode", "refuse_occupied", "run_directory"]


def refuse_occupied(directory: Path) -> ConfigError:
    """The error for a ``--out`` that holds a run: one that ended, or one that can be resumed."""
    if (directory / STATE_FILE).is_file() and not (directory / RESULTS_FILE).exists():
        return ConfigError(
            f"--out {directory}: holds an unfinished run; pass --resume {directory} to continue it, "
            "or --overwrite to replace it"
        )
    return ConfigError(f"--out {directory}: already exists and is not empty; pass --overwrite to replace it")


class RunDirectory(OutputDirectory):
    """A training run's directory in one of the ``RunMode``s (module docstring); ``inputs`` are the run's data
    files (``--out`` must not hold them).

    Raises: as ``seqlab.files.OutputDirectory``; "new" on a directory with an unfinished run points to --resume.
    """

    def __init__(self, target: Path, mode: RunMode, inputs: Iterable[str | os.PathLike[str]] = ()) -> None:
        flag = "--resume" if mode == "resume" else "--out"
        super().__init__(target, kind=RUN_KIND, mode=mode, inputs=inputs, aside=False, flag=flag)

    def occupied(self) -> ConfigError:
        return refuse_occupied(self.target)


def run_directory(requested: Path | None, recipe: str, *, overwrite: bool) -> Path:
    """The run directory of ``seqlab train``: ``requested`` (``--out``; refused if it holds results, unless
    ``overwrite``), else the first free ``runs/RECIPE``, ``runs/RECIPE-2``, ...

    The recipe creates it only once its data and configuration have been checked, so a failed start leaves nothing.

    Raises:
        ConfigError: ``requested`` is unusable (``seqlab.files.check_output_path``), or a directory with results
            without ``overwrite``.
    """
    if requested is not None:
        check_output_path(requested)
        if has_results(requested) and not overwrite:
            raise refuse_occupied(requested)
        return requested
    candidate, n = Path("runs") / recipe, 1
    while candidate.exists():
        n += 1
        candidate = Path("runs") / f"{recipe}-{n}"
    return candidate
