"""SQLite-specific behaviour: pragmas, WAL fallback, migrations, threads, errors, query plans."""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

import pytest

from refold.errors import MigrationError, StorageError
from refold.store import open_store
from refold.store.sqlite import SQLiteStore
from refold.store.sqlite.schema import LATEST_VERSION, MIGRATIONS, Migration, migrate


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_pragmas_and_info(tmp_path: Path) -> None:
    with SQLiteStore(str(tmp_path / "a.db")) as store:
        conn = store.db.conn
        assert store.journal_mode == "wal"
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30000
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        info = store.info()
        assert info["schema_version"] == LATEST_VERSION and info["journal_mode"] == "wal"
        assert store.url.startswith("sqlite:///")
    with SQLiteStore(str(tmp_path / "b.db"), synchronous="NORMAL") as store:
        assert store.db.conn.execute("PRAGMA synchronous").fetchone()[0] == 1


def test_a_pathlib_path_opens_the_store(tmp_path: Path) -> None:
    """``SQLiteStore(tmp_path / "a.db")``, as Python users write paths, was a TypeError deep
    in the WAL checkpointer (``Path + str``)."""
    with SQLiteStore(tmp_path / "a.db") as store:
        sid = store.create_session(title="p").id
        store.append_messages(sid, [user("kept")])
        assert store.path == str(tmp_path / "a.db")
    with SQLiteStore(tmp_path / "a.db") as again:
        assert [r.message["content"] for r in again.get_messages(sid)] == ["kept"]


def test_open_store_picks_sqlite(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/c.db")
    assert isinstance(store, SQLiteStore) and store.path == f"{tmp_path}/c.db"
    store.close()
    memory = open_store(":memory:")
    session = memory.create_session()
    memory.append_messages(session.id, [user("x")])
    assert len(memory.get_messages(session.id)) == 1
    memory.close()


def test_wal_unavailable_falls_back_with_a_warning(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    # The dot-file-locking VFS has no shared memory, like many network filesystems: no WAL.
    with caplog.at_level(logging.WARNING, logger="refold.store.sqlite.database"):
        store = SQLiteStore(str(tmp_path / "nfs.db"), vfs="unix-dotfile")
    assert store.journal_mode == "delete"
    assert any("cannot use WAL" in r.getMessage() for r in caplog.records)
    session = store.create_session()
    store.append_messages(session.id, [user("still works")])
    assert store.integrity_check() == []
    store.close()


def test_migrations_are_recorded_once(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    SQLiteStore(path).close()
    SQLiteStore(path).close()
    raw = sqlite3.connect(path)
    rows = raw.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
    assert rows == [(m.version, m.name) for m in MIGRATIONS]
    raw.close()


def test_failed_migration_leaves_nothing(tmp_path: Path) -> None:
    conn = sqlite3.connect(str(tmp_path / "f.db"), isolation_level=None)
    broken = (*MIGRATIONS, Migration(99, "broken", (
        "CREATE TABLE half_done (x INTEGER)", "THIS IS NOT SQL")))
    with pytest.raises(MigrationError) as err:
        migrate(conn, broken)
    assert "99" in str(err.value)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "half_done" not in tables and "messages" in tables
    assert 99 not in {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
    assert migrate(conn) == []  # the good ones stay applied


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "new.db")
    SQLiteStore(path).close()
    raw = sqlite3.connect(path)
    raw.execute("INSERT INTO schema_migrations VALUES (999, 'future', 0)")
    raw.commit()
    raw.close()
    with pytest.raises(MigrationError):
        SQLiteStore(path)


def test_garbage_file_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StorageError):
        SQLiteStore(str(path))


def test_a_directory_is_refused_with_a_file_to_name_instead(tmp_path: Path) -> None:
    """``--db ~/data`` named a directory: the error said only "unable to open database file
    (check the path and its permissions)", which sent users to chmod."""
    with pytest.raises(StorageError) as refused:
        SQLiteStore(tmp_path)
    assert "it is a directory" in str(refused.value)
    assert str(tmp_path / "refold.db") in (refused.value.hint or "")
    assert list(tmp_path.iterdir()) == []  # nothing made in it


def test_closed_store_raises_storage_error(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "closed.db"))
    store.close()
    store.close()  # idempotent
    with pytest.raises(StorageError):
        store.list_sessions()


def test_unique_identity_index_backs_the_no_duplicate_rule(sqlite_store: SQLiteStore) -> None:
    session = sqlite_store.create_session()
    [row] = sqlite_store.append_messages(session.id, [user("x")]).appended
    with pytest.raises(sqlite3.IntegrityError):
        sqlite_store.db.conn.execute(
            "INSERT INTO messages (session_id, seq, role, message, created_at, identity) "
            "VALUES (?, 99, 'user', '{}', 0, ?)", (session.id, row.identity))


def test_integrity_check_finds_a_broken_index(tmp_path: Path) -> None:
    path = str(tmp_path / "broken.db")
    with SQLiteStore(path) as store:
        session = store.create_session()
        store.append_messages(session.id, [user("alpha"), user("beta 中文字符")])
        assert store.integrity_check() == []
    raw = sqlite3.connect(path)
    raw.execute("DROP TRIGGER messages_fts_delete")
    raw.execute("DELETE FROM messages WHERE seq = 1")
    raw.commit()
    raw.close()
    with SQLiteStore(path) as store:
        problems = store.integrity_check()
        assert problems and any("messages_fts" in p for p in problems)
        store.rebuild_search_indexes()
        assert store.integrity_check() == []
        from refold.store import SearchQuery

        assert store.search(SearchQuery("alpha")) == []
        assert [h.seq for h in store.search(SearchQuery("中文字符"))] == [2]
        assert [h.seq for h in store.search(SearchQuery("字"))] == [2]


def test_threads_share_one_store(sqlite_store: SQLiteStore) -> None:
    session = sqlite_store.create_session()
    history = [user(f"turn {i}") for i in range(30)]
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            own = sqlite_store.create_session()
            for i in range(1, 31):
                sqlite_store.sync_messages(session.id, history[:i])
                sqlite_store.append_messages(own.id, [user(f"t{n} {i}")])
        except BaseException as exc:  # collected and re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    rows = sqlite_store.get_messages(session.id, include_inactive=True)
    assert [m.message for m in rows] == history
    assert len(sqlite_store.list_sessions()) == 7


@pytest.mark.parametrize("sql_fragment", ["projection", "latest_checkpoint"])
def test_projection_reads_through_indexes(sqlite_store: SQLiteStore, sql_fragment: str) -> None:
    conn = sqlite_store.db.conn
    plans = {
        "projection": ("SELECT session_id FROM messages WHERE session_id = ? AND seq >= ? "
                       "AND active = 1 ORDER BY seq", ("s", 5)),
        "latest_checkpoint": ("SELECT id FROM checkpoints WHERE session_id = ? "
                              "ORDER BY id DESC LIMIT 1", ("s",)),
    }
    sql, args = plans[sql_fragment]
    detail = " ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, args))
    assert "USING INDEX" in detail or "USING COVERING INDEX" in detail
    assert "TEMP B-TREE" not in detail


def test_short_cjk_scan_respects_its_time_budget(tmp_path: Path) -> None:
    with SQLiteStore(str(tmp_path / "scan.db"), scan_budget_seconds=0.0) as store:
        from refold.store import SearchQuery
        session = store.create_session()
        store.append_messages(session.id, [user(f"中 {i}") for i in range(5)])
        # a zero budget still scans the newest chunk before stopping
        assert len(store.search(SearchQuery("中", limit=50, window=0))) == 5


def test_gram_index_migration_backfills_existing_rows(tmp_path: Path) -> None:
    path = str(tmp_path / "v2.db")
    conn = sqlite3.connect(path, isolation_level=None)
    assert migrate(conn, MIGRATIONS[:2]) == [1, 2]
    conn.execute("INSERT INTO sessions (id, started_at) VALUES ('old', 0)")
    conn.execute("INSERT INTO messages (session_id, seq, role, message, text, created_at, "
                 "identity, has_cjk) VALUES ('old', 1, 'user', '{}', '旧的消息', 0, 'x', 1)")
    conn.close()
    from refold.store import SearchQuery

    with SQLiteStore(path) as store:
        assert store.info()["schema_version"] == MIGRATIONS[-1].version
        assert [h.seq for h in store.search(SearchQuery("消息"))] == [1]
        assert [h.seq for h in store.search(SearchQuery("旧"))] == [1]
        assert store.integrity_check() == []


def test_reads_do_not_wait_for_a_writer_on_another_thread(sqlite_store: SQLiteStore) -> None:
    session = sqlite_store.create_session()
    sqlite_store.append_messages(session.id, [user("committed")])
    inside, release = threading.Event(), threading.Event()

    def hold_write() -> None:
        with sqlite_store.db.write() as conn:
            conn.execute("UPDATE sessions SET model = 'uncommitted' WHERE id = ?", (session.id,))
            inside.set()
            release.wait(10)

    writer = threading.Thread(target=hold_write)
    writer.start()
    try:
        assert inside.wait(10)
        seen: list[object] = []
        reader = threading.Thread(target=lambda: seen.extend(
            [sqlite_store.get_session(session.id).model,
             len(sqlite_store.get_messages(session.id))]))
        reader.start()
        reader.join(5)
        assert not reader.is_alive(), "a read waited for the writer"
        assert seen == [None, 1]  # the snapshot excludes the uncommitted change
    finally:
        release.set()
        writer.join()
    assert sqlite_store.get_session(session.id).model == "uncommitted"


def test_many_threads_reading_and_writing(sqlite_store: SQLiteStore) -> None:
    from refold.store import SearchQuery

    session = sqlite_store.create_session()
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(40):
                sqlite_store.append_messages(session.id, [user(f"w{n} 消息 {i}")])
        except BaseException as exc:  # collected and re-raised in the main thread
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(40):
                rows = sqlite_store.get_messages(session.id)
                assert [m.seq for m in rows] == list(range(1, len(rows) + 1))
                sqlite_store.search(SearchQuery("消息", limit=5))
                sqlite_store.projection(session.id)
        except BaseException as exc:  # collected and re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    threads += [threading.Thread(target=reader) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(sqlite_store.get_messages(session.id)) == 120
    sqlite_store.close()
    with pytest.raises(StorageError):
        sqlite_store.get_messages(session.id)


def test_relevance_ranks_every_match_not_the_newest(sqlite_store: SQLiteStore) -> None:
    """No recency window: the best matches win however old they are (issue 12)."""
    from refold.store import SearchQuery

    old = sqlite_store.create_session()
    sqlite_store.append_messages(old.id, [user("kiwi kiwi kiwi kiwi")] * 5)  # best bm25, oldest
    new = sqlite_store.create_session()
    sqlite_store.append_messages(new.id, [user(f"a kiwi in a longer sentence {i}")
                                          for i in range(30)])
    hits = sqlite_store.search(SearchQuery("kiwi", limit=5, window=0))
    assert {h.session_id for h in hits} == {old.id}
    assert [h.seq for h in hits] == [5, 4, 3, 2, 1]  # equal scores: newest first
    filtered = sqlite_store.search(SearchQuery("kiwi", session_id=new.id, window=0))
    assert len(filtered) == 20


def test_the_trigram_index_ranks_every_match(sqlite_store: SQLiteStore) -> None:
    from refold.store import SearchQuery

    old = sqlite_store.create_session()
    sqlite_store.append_messages(old.id, [user("部署服务部署服务部署服务")] * 5)
    new = sqlite_store.create_session()
    sqlite_store.append_messages(new.id, [user(f"我们今天要部署服务然后休息 {i}")
                                          for i in range(30)])
    hits = sqlite_store.search(SearchQuery("部署服务", limit=5, window=0))
    assert {h.session_id for h in hits} == {old.id}
    assert all("[部署服务]" in h.snippet for h in hits)
    filtered = sqlite_store.search(SearchQuery("部署服务", session_id=new.id, window=0))
    assert len(filtered) == 20
    assert len(sqlite_store.search(SearchQuery("部署服务 NOT 休息", window=0))) == 5


def test_terms_too_broad_for_bm25_are_ordered_newest_first(
        sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    from refold.store import SearchQuery
    from refold.store.sqlite import search

    session = sqlite_store.create_session()
    sqlite_store.append_messages(session.id, [user("the kiwi kiwi kiwi")] + [
        user(f"the note {i} about a kiwi among other words") for i in range(20)])
    ranked = sqlite_store.search(SearchQuery("kiwi", window=0))
    assert ranked[0].seq == 1  # bm25: the densest message first
    monkeypatch.setattr(search, "BROAD_MATCHES", 5)
    for text in ("kiwi", "the note"):
        newest = sqlite_store.search(SearchQuery(text, window=0, limit=5))
        assert [h.seq for h in newest] == [21, 20, 19, 18, 17], text
