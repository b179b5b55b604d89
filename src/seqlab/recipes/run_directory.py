"""The life of a run directory: checked before any work, locked while a run writes it, never left half-replaced.

Three ways to open one (``RunMode``):

- ``"new"``: the directory must be absent or empty (seqlab's lock and temporary files aside). It is created only
  once the recipe has read its data (``open``), so a failed start leaves nothing, and removed again if training
  fails before its first checkpoint.
- ``"overwrite"``: an existing run (a directory with ``recipe.json``; any other non-empty directory is refused,
  so a mistyped ``--out ~`` deletes nothing) is replaced, but not at once: the new run is written aside, in a hidden
  sibling ``.NAME.seqlab-tmp-PID`` directory, and swapped in by ``commit`` at its first training checkpoint
  (two renames: the old run moves aside, the new one takes its name, then the old one is deleted). A failure
  or a kill before that leaves the old run as it was; a later overwrite removes the abandoned sibling.
- ``"resume"``: the directory holds a run to continue; it is used as it is.

In every mode the run directory (and the sibling) is locked with ``seqlab.files.RunLock`` from ``open`` to
``close``: a second run on it is refused at once, naming the holder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Literal

from seqlab.errors import ConfigError
from seqlab.files import TEMPORARY_MARK, RunLock, is_bookkeeping, storage_error
from seqlab.training.checkpoint import STATE_FILE

RECIPE_FILE = "recipe.json"  # the recipe and its config: what makes a directory a seqlab run
RESULTS_FILE = "results.json"  # written last, by a run that finished
RunMode = Literal["new", "overwrite", "resume"]
RUN_MODES: tuple[RunMode, ...] = ("new", "overwrite", "resume")


def check_writable(directory: Path) -> None:
    """Refuse, as one line, a run directory that could not be created or written, before any work is done.

    Creates and removes a probe directory in the nearest existing ancestor, so permissions, read-only and
    virtual file systems (``/proc``) all answer as they would for the real directory.

    Raises:
        ConfigError: the path is empty, an ancestor is a file, or the directory cannot be created or written.
    """
    if str(directory) in ("", "."):
        raise ConfigError(f"--out {str(directory)!r}: give a directory name, not the current directory")
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"--out {directory}: exists and is not a directory")
    ancestor = directory
    while not ancestor.exists() and not ancestor.is_symlink():
        if ancestor.parent == ancestor:
            break
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(f"--out {directory}: {ancestor} is not a directory")
    try:
        Path(tempfile.mkdtemp(prefix=f".{directory.name}{TEMPORARY_MARK}probe-", dir=ancestor)).rmdir()
    except OSError as e:
        raise ConfigError(f"--out {directory}: cannot write in {ancestor} ({e.strerror or e})") from None


def refuse_occupied(directory: Path) -> ConfigError:
    """The error for a ``--out`` that holds a run: one that ended, or one that can be resumed."""
    if (directory / STATE_FILE).is_file() and not (directory / RESULTS_FILE).exists():
        return ConfigError(
            f"--out {directory}: holds an unfinished run; pass --resume {directory} to continue it, "
            "or --overwrite to replace it"
        )
    return ConfigError(f"--out {directory}: already exists and is not empty; pass --overwrite to replace it")


def has_results(directory: Path) -> bool:
    """True if ``directory`` holds anything but seqlab's lock and temporary files."""
    return directory.is_dir() and any(not is_bookkeeping(entry.name) for entry in directory.iterdir())


class RunDirectory:
    """A run directory in one of the ``RunMode``s (module docstring).

    Attributes:
        target: the directory the run ends up in.
        path: where the run writes now: the hidden sibling of an overwrite until ``commit``, else ``target``.
        committed: True once a training checkpoint is in ``target`` (at once for "resume").

    Raises:
        ConfigError: at construction, as ``check_writable``; for "new", a directory with results; for
            "resume", a directory that does not exist; from ``lock_target`` and ``open``: the directory is in
            use by another run (one line naming it and the holder), or it cannot be created.
    """

    def __init__(self, target: Path, mode: RunMode) -> None:
        if mode not in RUN_MODES:
            raise ValueError(f"mode ({mode!r}) must be one of {', '.join(map(repr, RUN_MODES))}")
        check_writable(target)
        if mode == "resume" and not target.is_dir():
            raise ConfigError(f"--resume {target}: no such run directory")
        if mode == "new" and has_results(target):
            raise refuse_occupied(target)
        self.target = target
        self.mode: RunMode = mode if mode != "overwrite" or has_results(target) else "new"
        if self.mode == "overwrite" and not any((target / name).is_file() for name in (RECIPE_FILE, STATE_FILE)):
            raise ConfigError(
                f"--out {target}: not a seqlab run (no {RECIPE_FILE}); --overwrite replaces run directories only"
            )
        self.path = target
        self.committed = mode == "resume"
        self._locks: list[RunLock] = []
        self._created: Path | None = None

    def lock_target(self) -> None:
        """Lock an existing target now (for "resume" and "overwrite"), so a busy run is refused before any work."""
        if self.mode != "new" and not self._locks:
            self._locks.append(RunLock(self.target).acquire())

    def open(self) -> Path:
        """Create and lock the directory the run writes into (``path``), and return it."""
        self.lock_target()
        if self.mode == "overwrite":
            for abandoned in self.target.parent.glob(f".{self.target.name}{TEMPORARY_MARK}*"):
                shutil.rmtree(abandoned, ignore_errors=True)  # we hold the target's lock: their runs are dead
            self.path = self.target.parent / f".{self.target.name}{TEMPORARY_MARK}{os.getpid()}"
        self._created = None if self.path.exists() else self.path  # the topmost directory this run creates
        while self._created is not None and not self._created.parent.exists():
            self._created = self._created.parent
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"--out {self.target}: cannot create it ({e.strerror or e})") from None
        if self.mode != "resume":
            self._locks.append(RunLock(self.path).acquire())
        if self.mode == "new" and has_results(self.path):  # another run filled it since the check
            self.close(failed=True)
            raise refuse_occupied(self.target)
        return self.path

    def commit(self) -> Path:
        """Called after each training checkpoint: the first one of an overwrite swaps the new run in. Returns the
        directory the run writes into from now on (``target``).

        Raises:
            StorageError: a rename failed; the old run is then still in place.
        """
        if self.committed:
            return self.path
        if self.mode == "overwrite":
            retired = self.target.parent / f".{self.target.name}{TEMPORARY_MARK}old-{os.getpid()}"
            try:
                os.rename(self.target, retired)
                os.rename(self.path, self.target)
            except OSError as e:
                if retired.exists() and not self.target.exists():
                    os.rename(retired, self.target)
                raise storage_error(self.target, e) from None
            shutil.rmtree(retired, ignore_errors=True)
            self.path = self.target
        self.committed = True
        return self.path

    def close(self, *, failed: bool) -> None:
        """Release the locks; after a failure before the first checkpoint, remove what this run created."""
        if failed and not self.committed and self._created is not None:  # an overwrite's sibling always is
            shutil.rmtree(self._created, ignore_errors=True)
        for lock in reversed(self._locks):
            lock.release()
        self._locks.clear()
