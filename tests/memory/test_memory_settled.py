"""``FileBackend.settled_load``: a snapshot reuses the last locked read of a memory file only
while neither the file nor its sidecar changed since — any write (refold's, an editor's, a
shell append, a rename over it, even one that restores the old mtime) is seen by the next
read, and a file that changed just before a read is read under the lock again next time."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from refold.errors import StorageError
from refold.memory import files, open_file_store


@pytest.fixture
def later(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads happen long after the files last changed (their ctime cannot be set back)."""
    monkeypatch.setattr(files, "_clock", lambda: 1e10)


def _counting_locks(mem: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    taken: list[str] = []
    backend = mem.backend
    original = backend._locked

    def locked(name: str) -> Any:
        taken.append(name)
        return original(name)

    monkeypatch.setattr(backend, "_locked", locked)
    return taken


def _texts(mem: Any) -> list[str]:
    return [e.text for e in mem.read("memory").entries]


def test_an_unchanged_settled_file_is_read_once(tmp_path: Path, later: None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    mem = open_file_store(tmp_path)
    mem.add("memory", "first")
    taken = _counting_locks(mem, monkeypatch)
    assert _texts(mem) == ["first"] and _texts(mem) == ["first"]
    assert mem.read("user").entries == [] and mem.read("user").entries == []
    assert taken == ["MEMORY.md", "USER.md"]  # each read under the lock once, then reused


def test_every_kind_of_write_is_seen_by_the_next_read(tmp_path: Path, later: None) -> None:
    mem = open_file_store(tmp_path)
    mem.add("memory", "first")
    assert _texts(mem) == ["first"]
    mem.add("memory", "second")  # refold's own write
    assert _texts(mem) == ["first", "second"]
    path = tmp_path / "MEMORY.md"
    stat = path.stat()
    with path.open("r+b") as fh:  # same size, and the old mtime put back: only ctime moved
        fh.write(b"F")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert _texts(mem) == ["First", "second"]
    other = tmp_path / "other.md"
    other.write_text("renamed\n§\nover it", encoding="utf-8")
    os.replace(other, path)
    assert _texts(mem) == ["renamed", "over it"]
    path.unlink()
    assert _texts(mem) == []
    (tmp_path / "elsewhere.md").write_text("secret", encoding="utf-8")
    path.symlink_to(tmp_path / "elsewhere.md")
    with pytest.raises(StorageError, match="symlink"):
        mem.read("memory")


def test_a_file_that_just_changed_is_read_under_the_lock_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mem = open_file_store(tmp_path)
    mem.add("memory", "first")
    taken = _counting_locks(mem, monkeypatch)
    for _ in range(3):
        assert _texts(mem) == ["first"]
    assert taken == ["MEMORY.md"] * 3  # not settled yet: no read is reused


def test_a_removed_directory_is_made_again_as_before(tmp_path: Path, later: None) -> None:
    directory = tmp_path / "memories"
    mem = open_file_store(directory)
    assert _texts(mem) == [] and directory.is_dir()
    for child in directory.iterdir():
        child.unlink()
    directory.rmdir()
    assert _texts(mem) == [] and directory.is_dir()
