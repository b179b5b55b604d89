"""seqlab.files: atomic writes leave the old file or the new one, never a part; run locks exclude a second holder."""

import errno
import os
import re

import pytest

import seqlab.files
from seqlab.errors import ConfigError, StorageError
from seqlab.files import LOCK_FILE, RunLock, atomic_path, atomic_write, is_bookkeeping


def test_atomic_write_creates_and_replaces_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "results.json"
    atomic_write(path, "é\n")
    atomic_write(path, b"new")
    assert path.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_a_writer_that_fails_leaves_the_old_file_and_no_temporary_file(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="half-way"), atomic_path(path) as temporary:
        temporary.write_bytes(b"ne")
        raise RuntimeError("half-way")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["model.safetensors"]


def test_a_full_disk_is_a_storage_error_naming_the_file(tmp_path, monkeypatch):
    path = tmp_path / "config.json"
    path.write_text("old")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(seqlab.files.os, "fsync", full)
    with pytest.raises(StorageError, match=f"^{re.escape(str(path))}: cannot write \\(No space left on device\\)$"):
        atomic_write(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


def test_a_missing_directory_is_a_storage_error(tmp_path):
    with pytest.raises(StorageError, match=r"/missing/a.json: cannot write \(No such file or directory\)$"):
        atomic_write(tmp_path / "missing" / "a.json", "x")


def test_a_second_lock_is_refused_naming_the_holder_and_the_lock_file_does_not_outlive_its_holder(tmp_path):
    first = RunLock(tmp_path).acquire()
    pattern = rf"^{re.escape(str(tmp_path))}: in use by another seqlab run \(pid {os.getpid()} on .+, since .+ UTC\)$"
    with pytest.raises(ConfigError, match=pattern):
        RunLock(tmp_path).acquire()
    first.release()
    assert (tmp_path / LOCK_FILE).exists()
    with RunLock(tmp_path):  # the file left behind does not block
        pass


def test_a_lock_is_released_on_leaving_its_block_normally_or_by_an_exception_while_still_referenced(tmp_path):
    with RunLock(tmp_path) as held:
        pass
    RunLock(tmp_path).acquire().release()  # 'held' still refers to the first lock: only __exit__ released it
    with pytest.raises(RuntimeError, match="failed"), RunLock(tmp_path) as held:
        raise RuntimeError("failed")
    RunLock(tmp_path).acquire().release()
    assert held.path == tmp_path / LOCK_FILE


def test_bookkeeping_names_are_the_lock_and_temporary_files():
    assert is_bookkeeping(LOCK_FILE)
    assert is_bookkeeping(".model.safetensors.seqlab-tmp-x1y2")
    assert is_bookkeeping(".run.seqlab-tmp-123")
    assert not is_bookkeeping("model.safetensors")
    assert not is_bookkeeping(".hidden")
