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

Low in the layers (beside ``seqlab.validation``), so that models, data, training and recipes all write
through it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from seqlab.errors import ConfigError, StorageError

LOCK_FILE = ".seqlab.lock"
TEMPORARY_MARK = ".seqlab-tmp-"  # in the names of temporary files and staging directories
__all__ = ["LOCK_FILE", "RunLock", "atomic_path", "atomic_write", "is_bookkeeping", "storage_error"]


def storage_error(path: str | os.PathLike[str], error: OSError) -> StorageError:
    """One line for an ``OSError`` while writing ``path``: ``PATH: cannot write (No space left on device)``."""
    return StorageError(f"{path}: cannot write ({error.strerror or error})")


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
    except OSError as e:
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
    """True for the names seqlab leaves that are not results: the lock file and temporary files."""
    return name == LOCK_FILE or TEMPORARY_MARK in name


class RunLock:
    """An exclusive lock on a run directory, held from :meth:`acquire` to :meth:`release` (or the ``with`` block).

    Args:
        directory: the run directory; it must exist before ``acquire``.

    Raises:
        ConfigError: from ``acquire``, at once (no waiting) if another process holds the lock:
            ``DIR: in use by another seqlab run (pid 123 on host, since 2026-11-23 16:10:00 UTC)``.
        StorageError: from ``acquire``, if the lock file cannot be created.
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
        with open(self.path, "r+", encoding="utf-8") as file:  # the flock is on the inode, not the contents
            file.truncate()
            file.write(f"pid {os.getpid()} on {socket.gethostname()}, since {started}\n")
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
