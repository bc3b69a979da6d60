"""Memory as a user meets it: the CLI keeps the configured limits, `approve --all` goes past
a write that no longer applies, malformed queue items and sidecars are skipped with a warning,
a read-only memories directory is read, a byte-order mark is dropped."""

from __future__ import annotations

import errno
import json
import logging
from pathlib import Path
from typing import Any

import filelock
import pytest
from click.testing import CliRunner, Result

from refold.cli.main import cli
from refold.errors import InvalidInput, MemoryError_, NotFound, StorageError
from refold.memory import MemoryWriter, make_op, open_file_store, take_snapshot
from refold.memory.entries import parse_entries
from refold.memory.files import FileBackend, atomic_write


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("REFOLD_HOME", "REFOLD_DB", "REFOLD_MEMORY_APPROVAL", "REFOLD_MEMORY_BACKEND"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


def run(home: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--home", str(home), "memory", *args])


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


# -- 1: the CLI uses the configured limits ----------------------------------------------------

@pytest.mark.parametrize("backend", ["file", "db"])
def test_cli_uses_the_char_limits_of_refold_toml(home: Path, backend: str) -> None:
    home.mkdir(parents=True)
    (home / "refold.toml").write_text(f'memory_backend = "{backend}"\n[memory]\n'
                                      "memory_char_limit = 50\nuser_char_limit = 40\n")
    refused = run(home, "add", "y" * 100)
    assert isinstance(refused.exception, MemoryError_) and "100/50" in str(refused.exception)
    ok(run(home, "add", "--target", "user", "short"))
    shown = json.loads(ok(run(home, "show", "--json")))
    assert [view["usage"]["limit"] for view in shown] == [50, 40]
    assert shown[0]["entries"] == []


# -- 2: approve --all goes on past a write that no longer applies -----------------------------

def _stage_one_stale_two_good(directory: Path) -> list[str]:
    """Three staged writes; the first no longer applies when the user approves (the entry it
    removes was removed another way meanwhile)."""
    store = open_file_store(directory)
    store.add("memory", "an entry that is not there by then")
    writer = MemoryWriter(store, "stage")
    ops = [[make_op("remove", old_text="an entry that is not there")],
           [make_op("add", content="good note one")], [make_op("add", content="good note two")]]
    ids = [str(writer.submit("memory", op).pending_id) for op in ops]
    store.remove("memory", "an entry that is not there")
    return ids


def test_approve_all_applies_the_rest_and_names_the_failed_id(home: Path) -> None:
    stale, *good = _stage_one_stale_two_good(home / "memories")
    result = run(home, "approve", "--all")
    assert result.exit_code != 0
    assert f"{stale}: not applied, still pending: no entry matched" in result.stderr
    assert all(f"{pending_id}: entry added" in result.stdout for pending_id in good)
    assert isinstance(result.exception, MemoryError_)
    assert f"1 of 3 pending memory writes were not applied: {stale}" in str(result.exception)
    pending = json.loads(ok(run(home, "pending", "--json")))
    assert [p["id"] for p in pending] == [stale]
    shown = json.loads(ok(run(home, "show", "-t", "memory", "--json")))[0]["entries"]
    assert [e["text"] for e in shown] == ["good note one", "good note two"]


def test_approve_one_that_fails_names_it_and_keeps_exit_code(home: Path) -> None:
    stale, *_ = _stage_one_stale_two_good(home / "memories")
    result = run(home, "approve", stale)
    assert isinstance(result.exception, NotFound)
    assert f"{stale} not applied, still pending: no entry matched" in str(result.exception)
    assert isinstance(run(home, "approve", "zzz").exception, NotFound)


def test_a_failed_approve_keeps_its_place_in_the_queue(tmp_path: Path) -> None:
    ids = _stage_one_stale_two_good(tmp_path)
    writer = MemoryWriter(open_file_store(tmp_path), "stage")
    with pytest.raises(NotFound) as err:
        writer.approve(ids[0])
    assert err.value.details["pending_id"] == ids[0]
    assert [p.id for p in writer.pending()] == ids


# -- 3: malformed queue items and sidecars ----------------------------------------------------

GOOD = {"id": "good0001", "target": "memory", "origin": "tool", "created_at": 1.0,
        "ops": [{"action": "add", "content": "a good staged note"}]}


@pytest.mark.parametrize("bad", [
    {"id": "abc12345", "ops": [{"action": "add", "content": "hi"}], "created_at": 1},
    {"id": "abc12345", "target": "memory", "created_at": "yesterday", "ops": []},
    {"id": "abc12345", "target": "memory", "created_at": "nan", "ops": []},
    {"id": "abc12345", "target": "memory", "created_at": 1, "ops": {"action": "add"}},
    {"id": "abc12345", "target": "memory", "created_at": 1, "ops": [{"action": "eat"}]},
    {"id": "abc12345", "target": "nowhere", "created_at": 1, "ops": []},
    {"target": "memory", "created_at": 1, "ops": []},
])
def test_a_malformed_queue_item_is_skipped_with_a_warning(
        home: Path, bad: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    memories = home / "memories"
    memories.mkdir(parents=True)
    (memories / "pending.json").write_text(json.dumps([bad, GOOD]))
    with caplog.at_level(logging.WARNING, logger="refold.memory.approval"):
        listed = json.loads(ok(run(home, "pending", "--json")))
    assert [p["id"] for p in listed] == ["good0001"]
    assert "skipping malformed pending memory write" in caplog.text
    assert "good0001: entry added" in ok(run(home, "approve", "--all"))
    left = json.loads((memories / "pending.json").read_text())
    assert left == [bad]  # kept for the person to fix or reject
    if "id" in bad:
        approve = run(home, "approve", "abc12345")
        assert isinstance(approve.exception, InvalidInput)
        assert "pending memory write 'abc12345' is malformed" in str(approve.exception)
        assert json.loads((memories / "pending.json").read_text()) == [bad]
        assert "abc12345: rejected" in ok(run(home, "reject", "abc12345"))
        assert json.loads((memories / "pending.json").read_text()) == []


@pytest.mark.parametrize("entries", [["x"], "x", 3])
def test_a_sidecar_with_entries_of_the_wrong_shape_is_ignored(
        tmp_path: Path, entries: Any, caplog: pytest.LogCaptureFixture) -> None:
    store = open_file_store(tmp_path)
    store.add("memory", "hello")
    meta_path = tmp_path / ".MEMORY.md.meta.json"
    meta = json.loads(meta_path.read_text())
    meta["entries"] = entries
    meta_path.write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING, logger="refold.memory.files"):
        view = open_file_store(tmp_path).read("memory")
    assert [e.text for e in view.entries] == ["hello"] and not view.drift
    assert "malformed entry times" in caplog.text


@pytest.mark.parametrize("stamps", [["a", "b"], [1.0, None], [1.0, "nan", 3.0], [1.0, 2.0, {}]])
def test_malformed_entry_times_fall_back_to_the_file_time(
        tmp_path: Path, stamps: list[Any], caplog: pytest.LogCaptureFixture) -> None:
    store = open_file_store(tmp_path)
    store.add("memory", "hello")
    store.add("memory", "world")
    meta_path = tmp_path / ".MEMORY.md.meta.json"
    meta = json.loads(meta_path.read_text())
    first = next(iter(meta["entries"]))
    kept = meta["entries"][next(k for k in meta["entries"] if k != first)]
    meta["entries"][first] = stamps
    meta_path.write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING, logger="refold.memory.files"):
        hello, world = open_file_store(tmp_path).read("memory").entries
    assert hello.created_at == hello.updated_at == (tmp_path / "MEMORY.md").stat().st_mtime
    assert [world.created_at, world.updated_at, world.last_used_at] == kept
    assert "malformed entry times" in caplog.text


def test_show_with_an_out_of_range_time_does_not_crash(home: Path) -> None:
    ok(run(home, "add", "hello"))
    meta_path = home / "memories" / ".MEMORY.md.meta.json"
    meta = json.loads(meta_path.read_text())
    meta["entries"] = {key: [1e300, 1e300, 0.0] for key in meta["entries"]}
    meta_path.write_text(json.dumps(meta))
    assert "(unknown time)" in ok(run(home, "show", "-t", "memory"))


# -- 4: a read-only memories directory can be read --------------------------------------------

@pytest.fixture
def read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tmp_path`` as a read-only mount shows it (also to root, whom modes do not stop): not
    writable, and no lock file can be created there."""
    (tmp_path / "MEMORY.md").write_text("Project uses pytest\n", encoding="utf-8")
    real_access = __import__("os").access

    def access(path: Any, mode: int, **kwargs: Any) -> bool:
        if Path(path) == tmp_path and mode & 2:
            return False
        return real_access(path, mode, **kwargs)

    def refuse(self: filelock.BaseFileLock, *args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EROFS, "Read-only file system", self.lock_file)

    monkeypatch.setattr("refold.memory.files.os.access", access)
    monkeypatch.setattr(filelock.FileLock, "acquire", refuse)
    return tmp_path


def test_a_read_only_directory_is_read_without_the_lock(read_only: Path) -> None:
    store = open_file_store(read_only)
    assert [e.text for e in store.read("memory").entries] == ["Project uses pytest"]
    assert "Project uses pytest" in take_snapshot(store).text
    assert store.stats()["memory"]["entries"] == 1
    with pytest.raises(StorageError, match="Read-only file system") as err:
        store.add("memory", "another note")
    assert err.value.hint and "read there but not changed" in err.value.hint


def test_an_unlocked_read_is_repeated_when_the_files_change_under_it(
        read_only: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_load = FileBackend.load
    calls: list[str] = []

    def load(self: FileBackend, target: str) -> Any:
        if not calls:  # another process replaces the file between the stamp and the read
            atomic_write(read_only / "MEMORY.md", b"Project uses tox\n")
        calls.append(target)
        return real_load(self, target)

    monkeypatch.setattr(FileBackend, "load", load)
    entries = open_file_store(read_only).read("memory").entries
    assert [e.text for e in entries] == ["Project uses tox"] and len(calls) == 2


# -- 5: a byte-order mark ---------------------------------------------------------------------

def test_a_leading_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    (tmp_path / "MEMORY.md").write_bytes(
        b"\xef\xbb\xbfProject uses pytest\r\n\xc2\xa7\r\nDeploys go through staging\r\n")
    store = open_file_store(tmp_path)
    entries = store.read("memory").entries
    assert [e.text for e in entries] == ["Project uses pytest", "Deploys go through staging"]
    assert all(e.blocked is None for e in entries)
    assert "BLOCKED" not in take_snapshot(store).text
    assert parse_entries("\ufeff") == [] and parse_entries("\ufeffa\n§\nb") == ["a", "b"]
    assert parse_entries("a \ufeffb") == ["a \ufeffb"]  # only a leading mark is dropped
