"""Files that are whole or absent, and run directories that one process owns at a time.

Every file seqlab writes goes through :func:`atomic_path` (or its shorthand :func:`atomic_write`): the bytes go
to a temporary name in the same directory, are flushed to disk (``fsync``), and ``os.replace`` renames the
temporary file over the final name. A rename within one directory is atomic on POSIX and Windows, so a reader,
a crash or ``kill -9`` sees the old file or the new one, never a half-written one (the pattern of
``write-to-temp-then-rename`` that SQLite's and git's lock files use). A failed write removes its temporary
file; only a process killed mid-write leaves one, a hidden ``.NAME.seqlab-tmp-*`` that later runs ignore.

A run directory is locked with ``filelock`` (an ``flock`` on ``.seqlab.lock``): the kernel drops the lock when
its process dies, however it dies, so a lock file left behind never blocks a later run. The holder writes its
process id, host and start time into the lock file so a refused run can name it.

Every command that writes a directory (train, average, analyze, plot, compare, export, ...) opens it through
:class:`OutputDirectory` (or the :func:`output_directory` context manager), one policy for all of them:

- checked before any work: a usable path (no file in the way, a writable parent), not holding one of the
  command's inputs, and, if it holds anything, replaced only with ``--overwrite`` and only if it holds the output
  of the same kind of command (the kind is written in ``.seqlab-output``; a directory with ``recipe.json`` and
  no such file is a training run, as every run before the kinds was);
- a replaced directory stays whole until the new output is committed: the new one is written in a hidden sibling
  and swapped in by two renames;
- a failure before the commit removes only what this command created: its own directory, then each parent it
  created if that parent is empty (another run put beside it since is never touched).

Low in the layers (beside ``seqlab.validation``), so that models, data, training and recipes all write
through it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

from filelock import FileLock, Timeout
from safetensors import SafetensorError

from seqlab.errors import ConfigError, StorageError

LOCK_FILE = ".seqlab.lock"
KIND_FILE = ".seqlab-output"  # the kind of an output directory: the command that wrote it ("train", "plot", ...)
RECIPE_FILE = "recipe.json"  # the recipe and its config: what makes a directory a training run
TEMPORARY_MARK = ".seqlab-tmp-"  # in the names of temporary files and staging directories
OutputMode = Literal["new", "overwrite", "resume"]
OUTPUT_MODES: tuple[OutputMode, ...] = ("new", "overwrite", "resume")
__all__ = [
    "KIND_FILE",
    "LOCK_FILE",
    "OUTPUT_MODES",
    "RECIPE_FILE",
    "OutputDirectory",
    "OutputMode",
    "RunLock",
    "atomic_path",
    "atomic_write",
    "check_output_file",
    "file_fingerprint",
    "has_results",
    "is_bookkeeping",
    "output_directory",
    "output_kind",
    "storage_error",
]


def storage_error(path: str | os.PathLike[str], error: OSError | SafetensorError) -> StorageError:
    """One line for an ``OSError`` (or safetensors' error, which wraps one) while writing ``path``:
    ``PATH: cannot write (No space left on device)``."""
    if isinstance(error, OSError):
        reason = error.strerror or str(error)
    else:  # "Error while serializing: I/O error: No space left on device (os error 28)"
        reason = re.sub(r" \(os error \d+\)$", "", " ".join(str(error).split()).split("I/O error: ")[-1])
    return StorageError(f"{path}: cannot write ({reason})")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` for a writer that takes a file name; on success, move it to ``path``.

    Example: ``with atomic_path(dir / "model.safetensors") as tmp: save_model(model, str(tmp))``.

    Raises:
        StorageError: the directory does not exist or the file cannot be written, flushed or renamed (a full
            disk, no permission); ``path`` is then unchanged and the temporary file removed.
    """
    path = Path(path)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}{TEMPORARY_MARK}", dir=path.parent)
    except OSError as e:
        raise storage_error(path, e) from None
    os.close(fd)
    temporary = Path(name)
    try:
        yield temporary
        with open(temporary, "rb+") as file:
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)  # mkstemp makes it 0600; a result file is as readable as any other
        os.replace(temporary, path)
    except (OSError, SafetensorError) as e:  # safetensors' save_file reports a full disk as a SafetensorError
        temporary.unlink(missing_ok=True)
        raise storage_error(path, e) from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def atomic_write(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically (see :func:`atomic_path`).

    Raises:
        StorageError: as :func:`atomic_path`.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_path(path) as temporary, open(temporary, "wb") as file:
        file.write(payload)


def is_bookkeeping(name: str) -> bool:
    """True for the names seqlab leaves that are not results: the lock file, the kind file and temporary files."""
    return name in (LOCK_FILE, KIND_FILE) or TEMPORARY_MARK in name


def file_fingerprint(path: str | os.PathLike[str]) -> dict[str, str | int]:
    """What identifies a data file's contents: its resolved path, size in bytes and SHA-256 (hex).

    The hash, not the modification time, so a file rewritten with the same bytes is the same data, and one edited
    within the file system's timestamp resolution is not.

    Raises:
        OSError: the file cannot be read.
    """
    resolved = os.path.realpath(path)
    digest = hashlib.sha256()
    with open(resolved, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return {"path": resolved, "size": os.path.getsize(resolved), "sha256": digest.hexdigest()}


class RunLock:
    """An exclusive lock on a run directory, held from :meth:`acquire` to :meth:`release` (or the ``with`` block).

    Args:
        directory: the run directory; it must exist before ``acquire``.

    Raises:
        ConfigError: from ``acquire``, at once (no waiting) if another process holds the lock:
            ``DIR: in use by another seqlab run (pid 123 on host, since 2026-11-23 16:10:00 UTC)``.
        StorageError: from ``acquire``, if the lock file cannot be created or written (a full disk).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE
        self._lock = FileLock(self.path, timeout=0)

    def acquire(self) -> RunLock:
        try:
            self._lock.acquire()
        except Timeout:
            raise ConfigError(f"{self.directory}: in use by another seqlab run ({self._holder()})") from None
        except OSError as e:
            raise storage_error(self.path, e) from None
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        try:
            with open(self.path, "r+", encoding="utf-8") as file:  # the flock is on the inode, not the contents
                file.truncate()
                file.write(f"pid {os.getpid()} on {socket.gethostname()}, since {started}\n")
        except OSError as e:
            self._lock.release()
            raise storage_error(self.path, e) from None
        return self

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def _holder(self) -> str:
        try:
            return self.path.read_text(encoding="utf-8").strip() or "holder unknown"
        except OSError:
            return "holder unknown"


def has_results(directory: str | os.PathLike[str]) -> bool:
    """True if ``directory`` holds anything but seqlab's lock, kind and temporary files."""
    directory = Path(directory)
    return directory.is_dir() and any(not is_bookkeeping(entry.name) for entry in directory.iterdir())


def output_kind(directory: str | os.PathLike[str]) -> str | None:
    """The command that wrote output directory ``directory`` ("train", "plot", "analyze gradients", ...): its
    ``.seqlab-output`` file, else "train" for a run written before kinds (one with ``recipe.json``), else None."""
    directory = Path(directory)
    try:
        kind = (directory / KIND_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        kind = ""
    if kind:
        return kind
    return "train" if (directory / RECIPE_FILE).is_file() else None


def check_output_path(target: Path, flag: str = "--out") -> None:
    """Refuse, as one line, an output path that could not be created or written, before any work is done.

    Creates and removes a probe directory in the nearest existing ancestor of ``target`` and of its parent (where
    a replacement is written aside), so permissions, read-only and virtual file systems (``/proc``) all answer as
    they would for the real directory.

    Raises:
        ConfigError: the path is empty, it or an ancestor is a file, or the directory cannot be created or written.
    """
    if str(target) in ("", "."):
        raise ConfigError(f"{flag} {str(target)!r}: give a directory name, not the current directory")
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{_named(flag, target)}: exists and is not a directory")
    for start in dict.fromkeys((target, target.parent)):
        _check_writable_from(start, target, flag)


def _check_writable_from(start: Path, target: Path, flag: str) -> None:
    """Refuse ``target`` unless the nearest existing ancestor of ``start`` (itself included) is a directory in
    which a probe directory can be created (and is removed again)."""
    ancestor = start
    while not ancestor.exists() and not ancestor.is_symlink() and ancestor.parent != ancestor:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(f"{_named(flag, target)}: {ancestor} is not a directory")
    try:
        Path(tempfile.mkdtemp(prefix=f".{target.name}{TEMPORARY_MARK}probe-", dir=ancestor)).rmdir()
    except OSError as e:
        raise ConfigError(f"{_named(flag, target)}: cannot write in {ancestor} ({e.strerror or e})") from None


def refuse_inputs(target: Path, inputs: Iterable[str | os.PathLike[str] | None], flag: str = "--out") -> None:
    """Refuse an output path that is, or holds, one of the command's inputs (symbolic links resolved): replacing
    it would delete what the command reads.

    Raises:
        ConfigError: ``--out RUN: holds RUN/train.dict, an input of this command; write the output elsewhere``.
    """
    root = Path(os.path.realpath(target))
    for given in inputs:
        if given is not None and Path(os.path.realpath(given)).is_relative_to(root):
            raise ConfigError(
                f"{_named(flag, target)}: holds {given}, an input of this command; write the output elsewhere"
            )


class OutputDirectory:
    """An output directory of command ``kind``, opened in one of three modes (module docstring for the policy).

    - "new": the directory must be absent or empty (seqlab's own bookkeeping files aside);
    - "overwrite": a directory that holds the output of the same ``kind`` is replaced (an empty one is as "new");
      the new output is written in a hidden sibling and swapped in by ``commit``;
    - "resume": the directory holds a run to continue; it is used as it is and counts as committed.

    Args:
        target: the directory the output ends up in.
        kind: the command that writes it ("train", "plot", "analyze gradients", "export", ...), saved in
            ``.seqlab-output``.
        mode: see above.
        inputs: paths the command reads; a target that is or holds one is refused (except to resume it).
        aside: write a new output in a hidden sibling too, so it appears whole at ``commit`` (False: in place,
            where it can be watched, as a training run is).
        flag: the command-line flag that named ``target``, for messages.

    Attributes:
        path: where the command writes now: the hidden sibling until ``commit``, then ``target``.
        committed: True once ``commit`` moved the output into place (at once for "resume").

    Raises:
        ValueError: an unknown mode.
        ConfigError: at construction, before any work: an unusable path (``check_output_path``), a target that holds
            an input, a non-empty target without "overwrite", or one that holds another kind of output (naming
            it); for "resume", a directory that does not exist. From ``lock_target`` and ``open``: the directory
            is in use by another seqlab process (naming it), or cannot be created.
    """

    def __init__(
        self,
        target: str | os.PathLike[str],
        *,
        kind: str,
        mode: OutputMode = "new",
        inputs: Iterable[str | os.PathLike[str] | None] = (),
        aside: bool = True,
        flag: str = "--out",
    ) -> None:
        if mode not in OUTPUT_MODES:
            raise ValueError(f"mode ({mode!r}) must be one of {', '.join(map(repr, OUTPUT_MODES))}")
        self.target, self.kind, self.flag = Path(target), kind, flag
        check_output_path(self.target, flag)
        if mode != "resume":  # a resumed run deletes nothing, so its data may lie in it
            refuse_inputs(self.target, inputs, flag)
        if mode == "resume" and not self.target.is_dir():
            raise ConfigError(f"{_named(flag, self.target)}: no such run directory")
        if mode != "resume" and has_results(self.target):
            if mode == "new":
                raise self.occupied()
            self._check_kind()
        elif mode == "overwrite":
            mode = "new"  # nothing to replace
        self.mode: OutputMode = mode
        self.aside = aside or mode == "overwrite"
        self.path = self.target
        self.committed = mode == "resume"
        self._locks: list[RunLock] = []
        self._opened = False
        self._made: list[Path] = []  # the directories this command created, outermost first

    def occupied(self) -> ConfigError:
        """The error for a "new" target that already holds something."""
        return ConfigError(
            f"{_named(self.flag, self.target)}: already exists and is not empty; pass --overwrite to replace it"
        )

    def _check_kind(self) -> None:
        found = output_kind(self.target)
        wanted = f"--overwrite replaces only what `seqlab {self.kind}` wrote"
        if found is None:
            raise ConfigError(
                f"{_named(self.flag, self.target)}: not a seqlab output (no {KIND_FILE} or {RECIPE_FILE}); {wanted}"
            )
        if found != self.kind:
            raise ConfigError(f"{_named(self.flag, self.target)}: holds what `seqlab {found}` wrote; {wanted}")

    def lock_target(self) -> None:
        """Lock an existing target now (to resume or replace it), so a busy one is refused before any work."""
        if self.mode != "new" and not self._locks:
            self._locks.append(RunLock(self.target).acquire())

    def open(self) -> Path:
        """Create and lock the directory the command writes into (``path``), with its kind file, and return it."""
        self.lock_target()
        self._opened = True
        parent = self.target.parent
        missing = self.target if not self.aside else parent
        while not missing.exists() and missing.parent != missing:
            self._made.insert(0, missing)
            missing = missing.parent
        try:
            if self.aside:
                parent.mkdir(parents=True, exist_ok=True)
                self._remove_abandoned()
                self.path = parent / f".{self.target.name}{TEMPORARY_MARK}{os.getpid()}-{os.urandom(4).hex()}"
                self.path.mkdir()  # not mkdtemp: the output gets the umask's permissions, not 0700
                self._made.append(self.path)
            else:
                self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"{_named(self.flag, self.target)}: cannot create it ({e.strerror or e})") from None
        if self.mode != "resume":
            self._locks.append(RunLock(self.path).acquire())
            if not self.aside and has_results(self.path):  # another process filled it since the check
                raise self.occupied()
            atomic_write(self.path / KIND_FILE, self.kind + "\n")
        return self.path

    def _remove_abandoned(self) -> None:
        """Remove the hidden siblings that killed commands left (their locks are free: their processes are dead)."""
        for sibling in self.target.parent.glob(f".{glob_escape(self.target.name)}{TEMPORARY_MARK}*"):
            if not sibling.is_dir() or sibling.is_symlink():
                continue
            try:
                lock = RunLock(sibling).acquire()
            except (ConfigError, StorageError):
                continue  # a live command's
            shutil.rmtree(sibling, ignore_errors=True)
            lock.release()

    def commit(self) -> Path:
        """Move the output into place (a replaced one is deleted only then); return ``target``.

        Raises:
            ConfigError: a "new" target was filled by another process since the check.
            StorageError: a rename failed; a replaced output is then still in place.
        """
        if self.committed:
            return self.path
        if self.aside:
            retired = None
            if self.mode == "new" and has_results(self.target):
                raise self.occupied()
            try:
                if self.target.exists():  # the replaced output, or a directory holding only bookkeeping
                    retired = self.target.parent / f".{self.target.name}{TEMPORARY_MARK}old-{os.getpid()}"
                    os.rename(self.target, retired)
                os.rename(self.path, self.target)
            except OSError as e:
                if retired is not None and retired.exists() and not self.target.exists():
                    os.rename(retired, self.target)
                raise storage_error(self.target, e) from None
            if retired is not None:
                shutil.rmtree(retired, ignore_errors=True)
            self.path = self.target
        self.committed = True
        return self.path

    def close(self, *, failed: bool) -> None:
        """Release the locks; after a failure before ``commit``, remove what this command created: its directory
        (or, in a directory that was empty, what it wrote there), then each created parent that is still empty."""
        try:
            if failed and self._opened and not self.committed:
                if self._made and self._made[-1] == self.path:
                    shutil.rmtree(self.path, ignore_errors=True)
                    self._made.pop()
                elif self.mode == "new" and self.path.is_dir():
                    for entry in self.path.iterdir():
                        if entry.name != LOCK_FILE:
                            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
                for directory in reversed(self._made):
                    try:
                        directory.rmdir()
                    except OSError:
                        break  # not empty: something else is in it now
        finally:
            for lock in reversed(self._locks):
                lock.release()
            self._locks.clear()


def _named(flag: str, path: Path) -> str:
    """``--out PATH`` for messages, or ``PATH`` alone for a positional argument (``flag`` empty)."""
    return f"{flag} {path}" if flag else str(path)


def glob_escape(name: str) -> str:
    """``name`` with the glob characters ``*?[`` matched literally."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


@contextlib.contextmanager
def output_directory(
    target: str | os.PathLike[str],
    *,
    kind: str,
    overwrite: bool = False,
    inputs: Iterable[str | os.PathLike[str] | None] = (),
    flag: str = "--out",
) -> Iterator[Path]:
    """Yield a directory to write command ``kind``'s output into; when the block ends without an exception, it
    becomes ``target`` (replacing, with ``overwrite``, an output of the same kind), else it is removed with every
    parent this call created, and ``target`` is as it was.

    Example: ``with output_directory(args.out, kind="plot", overwrite=args.overwrite, inputs=[args.run_dir]) as
    out: draw(out / "curves.png")``; print ``args.out``, not ``out`` (a hidden sibling until the block ends).

    Raises:
        ConfigError, StorageError: as :class:`OutputDirectory`, before the block runs (and at its end, from the
            final rename).
    """
    directory = OutputDirectory(target, kind=kind, mode="overwrite" if overwrite else "new", inputs=inputs, flag=flag)
    failed = True
    try:
        path = directory.open()
        try:
            yield path
        except StorageError as e:  # named where the file was going, not by the hidden sibling
            raise StorageError(str(e).replace(str(path), str(directory.target))) from None
        directory.commit()
        failed = False
    finally:
        directory.close(failed=failed)


def check_output_file(
    path: str | os.PathLike[str],
    *,
    overwrite: bool,
    inputs: Iterable[str | os.PathLike[str] | None] = (),
    flag: str = "--out",
) -> None:
    """Refuse, before any work, an output file that could not be written, or would replace what it must not: an
    existing file without ``overwrite``, a directory, or one of the command's ``inputs``.

    Raises:
        ConfigError: one line naming ``flag``, the path and the reason.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{_named(flag, path)}: is a directory")
    for given in inputs:
        if given is not None and os.path.realpath(given) == os.path.realpath(path):
            raise ConfigError(f"{_named(flag, path)}: is {given}, an input of this command; write the output elsewhere")
    if path.exists() and not overwrite:
        raise ConfigError(f"{_named(flag, path)}: already exists; pass --overwrite to replace it")
    _check_writable_from(path.parent, path, flag)
