"""The file backend: drift detection, atomic writes, no temp files, 8 concurrent processes."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from refold.errors import Conflict, StorageError
from refold.memory import open_file_store
from refold.memory.files import atomic_write


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_outside_edit_refuses_replace_and_remove_and_writes_backup(tmp_path: Path) -> None:
    mem = open_file_store(tmp_path)
    mem.add("memory", "first")
    path = tmp_path / "MEMORY.md"
    with path.open("a", encoding="utf-8") as fh:  # a shell append: `echo extra >> MEMORY.md`
        fh.write("appended by hand\n")
    edited = path.read_bytes()
    with pytest.raises(Conflict, match="changed outside refold") as err:
        mem.replace("memory", "first", "second")
    backup = Path(err.value.details["backup"])
    assert backup.name.startswith("MEMORY.md.bak.") and backup.read_bytes() == edited
    with pytest.raises(Conflict):
        mem.remove("memory", "first")
    assert path.read_bytes() == edited  # nothing overwritten
    assert len(list(tmp_path.glob("MEMORY.md.bak.*"))) == 1  # identical copy reused
    assert mem.read("memory").drift and mem.stats()["memory"]["drift"]


def test_add_still_works_under_drift_and_keeps_the_flag(tmp_path: Path) -> None:
    mem = open_file_store(tmp_path)
    mem.add("memory", "first")
    (tmp_path / "MEMORY.md").write_text("first\n§\nhand written\n", encoding="utf-8")
    mem.add("memory", "third")
    assert [e.text for e in mem.read("memory").entries] == ["first", "hand written", "third"]
    with pytest.raises(Conflict):
        mem.remove("memory", "third")
    view = mem.adopt("memory")
    assert not view.drift
    mem.remove("memory", "hand written")
    assert [e.text for e in mem.read("memory").entries] == ["first", "third"]


def test_handwritten_canonical_file_without_sidecar_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "USER.md").write_text("likes tea\n§\nlives in Oslo", encoding="utf-8")
    mem = open_file_store(tmp_path)
    mem.replace("user", "tea", "likes green tea")
    assert [e.text for e in mem.read("user").entries] == ["likes green tea", "lives in Oslo"]


def test_messy_handwritten_file_without_sidecar_is_drift(tmp_path: Path) -> None:
    (tmp_path / "USER.md").write_text("a\n§\na\n§\nb\n", encoding="utf-8")  # duplicates
    mem = open_file_store(tmp_path)
    assert [e.text for e in mem.read("user").entries] == ["a", "b"]
    with pytest.raises(Conflict):
        mem.remove("user", "b")


def test_crash_between_sidecar_and_file_is_not_drift(tmp_path: Path) -> None:
    mem = open_file_store(tmp_path)
    mem.add("memory", "one")
    before = (tmp_path / "MEMORY.md").read_bytes()
    mem.add("memory", "two")
    (tmp_path / "MEMORY.md").write_bytes(before)  # as if the file write never happened
    assert not mem.read("memory").drift
    mem.remove("memory", "one")


def test_atomic_write_leaves_no_temp_file_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "MEMORY.md"
    target.write_text("old", encoding="utf-8")

    class Boom(Exception):
        pass

    original = os.fsync

    def failing_fsync(fd: int) -> None:
        raise Boom

    os.fsync = failing_fsync  # type: ignore[assignment]
    try:
        with pytest.raises(Boom):
            atomic_write(target, b"new")
    finally:
        os.fsync = original
    assert target.read_text(encoding="utf-8") == "old"
    assert listing(tmp_path) == ["MEMORY.md"]


def test_no_temp_files_after_writes(tmp_path: Path) -> None:
    mem = open_file_store(tmp_path)
    for i in range(5):
        mem.add("memory", f"note {i}")
    mem.replace("memory", "note 1", "note one")
    mem.remove("memory", "note 2")
    assert not [n for n in listing(tmp_path) if n.endswith(".tmp")]


def test_unwritable_directory_is_a_storage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    mem = open_file_store(blocker / "memories")
    with pytest.raises(StorageError):
        mem.add("memory", "x")


WORKERS = 8
PER_WORKER = 12


def _worker(directory: str, worker: int, barrier: object) -> None:
    mem = open_file_store(directory)
    barrier.wait()  # type: ignore[attr-defined]
    for j in range(PER_WORKER):
        mem.add("memory", f"[w{worker}:{j}]")
    mem.replace("memory", f"[w{worker}:0]", f"[w{worker}:0] edited")
    mem.remove("memory", f"[w{worker}:1]")
    mem.add("user", f"user note from {worker}")


def test_eight_processes_lose_nothing(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(WORKERS)
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), w, barrier)) for w in range(WORKERS)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [p.exitcode for p in procs] == [0] * WORKERS
    mem = open_file_store(tmp_path)
    texts = {e.text for e in mem.read("memory").entries}
    expected = {f"[w{w}:{j}]" for w in range(WORKERS) for j in range(2, PER_WORKER)}
    expected |= {f"[w{w}:0] edited" for w in range(WORKERS)}
    assert texts == expected
    assert {e.text for e in mem.read("user").entries} == {f"user note from {w}" for w in range(WORKERS)}
    assert not mem.read("memory").drift
    assert not [n for n in listing(tmp_path) if n.endswith(".tmp") or ".bak." in n]


def test_add_under_drift_keeps_a_copy_of_the_outside_edit(tmp_path: Path) -> None:
    mem = open_file_store(tmp_path)
    mem.add("memory", "first")
    (tmp_path / "MEMORY.md").write_text("first   \n§\n\n§\nhand  written\n", encoding="utf-8")
    mem.add("memory", "second")
    [bak] = tmp_path.glob("MEMORY.md.bak.*")
    assert bak.read_text(encoding="utf-8") == "first   \n§\n\n§\nhand  written\n"


def test_undecodable_bytes_are_drift_and_never_rewritten(tmp_path: Path) -> None:
    (tmp_path / "USER.md").write_bytes(b"caf\xe9 au lait\n")  # latin-1, not UTF-8
    mem = open_file_store(tmp_path)
    assert mem.read("user").drift
    with pytest.raises(Conflict):
        mem.replace("user", "lait", "tea")
    assert (tmp_path / "USER.md").read_bytes() == b"caf\xe9 au lait\n"


def test_corrupt_sidecar_is_ignored_not_fatal(tmp_path: Path) -> None:
    mem = open_file_store(tmp_path)
    mem.add("memory", "one")
    (tmp_path / ".MEMORY.md.meta.json").write_text("{broken", encoding="utf-8")
    assert [e.text for e in mem.read("memory").entries] == ["one"]
    mem.replace("memory", "one", "uno")  # canonical file, so no drift without the sidecar
    assert [e.text for e in mem.read("memory").entries] == ["uno"]


def test_threads_in_one_process_lose_nothing(tmp_path: Path) -> None:
    import threading

    mem = open_file_store(tmp_path)

    def add_many(worker: int) -> None:
        for j in range(10):
            mem.add("memory", f"<t{worker}:{j}>")

    threads = [threading.Thread(target=add_many, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(mem.read("memory").entries) == 40


def test_a_memory_file_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    """Issue 14: a MEMORY.md symlink must not put the file it points to into every prompt."""
    from click.testing import CliRunner

    from refold.cli.main import cli
    from refold.errors import StorageError
    from refold.memory.files import open_file_store

    secret = tmp_path / "secret.txt"
    secret.write_text("AWS_SECRET=abc123\n", encoding="utf-8")
    memories = tmp_path / "home" / "memories"
    memories.mkdir(parents=True)
    (memories / "MEMORY.md").symlink_to(secret)
    store = open_file_store(memories)
    with pytest.raises(StorageError, match="is a symlink"):
        store.read("memory")
    with pytest.raises(StorageError, match="is a symlink"):
        store.add("memory", "a new note")
    assert secret.read_text(encoding="utf-8") == "AWS_SECRET=abc123\n"
    assert (memories / "MEMORY.md").is_symlink()
    result = CliRunner().invoke(cli, ["--home", str(tmp_path / "home"), "memory", "show"])
    assert isinstance(result.exception, StorageError) and "abc123" not in result.output


def test_a_killed_writers_temp_files_are_swept_by_a_later_write(tmp_path: Path) -> None:
    """A writer killed between writing its temp file and the rename left
    ``.MEMORY.md.*.tmp`` behind for ever; a later write removes those old enough to be no
    live writer's, and leaves a fresh one (another process may be writing it) alone."""
    import time

    from refold.memory.files import STALE_TEMP_SECONDS

    target = tmp_path / "MEMORY.md"
    old = tmp_path / ".MEMORY.md.k1ll3d.tmp"
    fresh = tmp_path / ".MEMORY.md.wr1t1ng.tmp"
    other = tmp_path / ".USER.md.k1ll3d.tmp"
    for path in (old, fresh, other):
        path.write_text("half an entry")
    stale = time.time() - STALE_TEMP_SECONDS - 60
    os.utime(old, (stale, stale))
    os.utime(other, (stale, stale))
    atomic_write(target, b"an entry\n")
    assert target.read_text() == "an entry\n"
    assert not old.exists() and fresh.exists() and other.exists()  # (USER.md's: its own write)
