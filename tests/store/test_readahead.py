"""Read-ahead of a cold search's pages (``store/sqlite/readahead.py``): the walk of a b-tree
from the file finds the pages SQLite will read (each asked-for row's leaf, its first overflow
page, every page of a small tree), never raises on a page it does not expect (newer in the WAL,
reused, garbage), and a search returns the same hits with it as without. Each walk runs with
the C page reader (``refold._btree``) and with the Python one, which read pages alike."""

from __future__ import annotations

import os
import random
import sqlite3
from pathlib import Path

import pytest

from refold.store.base import SearchQuery
from refold.store.sqlite import readahead
from refold.store.sqlite.store import SQLiteStore


@pytest.fixture(params=["c", "python"])
def impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The walks read pages in C (where built; CI requires it) or in Python."""
    if request.param == "c":
        request.getfixturevalue("native_btree")
        monkeypatch.delenv("REFOLD_NATIVE", raising=False)
        assert readahead.native()
    else:
        monkeypatch.setattr(readahead, "_btree", None)
        assert not readahead.native()
    return str(request.param)


def _archive(path: Path, rows: int = 3000, seed: int = 1) -> sqlite3.Connection:
    """A table of ``rows`` rows, one in seven longer than a page (overflow), some deleted."""
    rng = random.Random(seed)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("CREATE INDEX t_body ON t(substr(body, 1, 20))")
    conn.execute("BEGIN")
    for i in range(1, rows + 1):
        size = rng.choice([30, 200, 900]) if i % 7 else rng.choice([5000, 9000, 20000])
        conn.execute("INSERT INTO t VALUES (?, ?)", (i, f"{i:06d} " + "x" * size))
    conn.execute("COMMIT")
    conn.execute("DELETE FROM t WHERE id % 97 = 0")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return conn


class _Asked:
    """What a walk asks the OS for, page by page (``posix_fadvise`` recorded, then done)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, size: int) -> None:
        self.pages: list[int] = []
        real = os.posix_fadvise

        def advise(fd: int, offset: int, length: int, advice: int) -> None:
            if advice == os.POSIX_FADV_WILLNEED:
                self.pages += range(offset // size + 1, (offset + length) // size + 1)
            real(fd, offset, length, advice)

        monkeypatch.setattr(readahead.os, "posix_fadvise", advise)


def _pages_of(conn: sqlite3.Connection, name: str, kind: str) -> set[int]:
    return {int(r[0]) for r in conn.execute(
        "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = ?", (name, kind))}


def _leaf_of(conn: sqlite3.Connection, path: Path, rowid: int) -> int:
    """The leaf page holding ``rowid``, found by reading every leaf of the (checkpointed)
    file: the slow, sure way."""
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    with open(path, "rb") as f:
        for page in sorted(_pages_of(conn, "t", "leaf")):
            f.seek((page - 1) * size)
            raw = f.read(size)
            for n in range(int.from_bytes(raw[3:5], "big")):
                cell = int.from_bytes(raw[8 + 2 * n:10 + 2 * n], "big")
                _, after = readahead._varint(raw, cell)
                if readahead._varint(raw, after)[0] == rowid:
                    return page
    raise AssertionError(f"no leaf holds {rowid}")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_walk_asks_for_each_rows_leaf_and_first_overflow_page(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, impl: str) -> None:
    conn = _archive(tmp_path / "a.db", seed=seed)
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    asked = _Asked(monkeypatch, size)
    rng = random.Random(seed)
    ids = sorted(rng.sample(range(1, 3001), 25))
    readahead.table_rows(conn, "t", [(i - 1, i + 1) for i in ids], ids)
    leaves, overflow = _pages_of(conn, "t", "leaf"), _pages_of(conn, "t", "overflow")
    assert set(asked.pages) <= _pages_of(conn, "t", "internal") | leaves | overflow
    stored = {int(r[0]) for r in conn.execute("SELECT id FROM t")}
    checked = 0
    for i in ids:
        for near in (i - 1, i, i + 1):
            if near in stored:
                assert _leaf_of(conn, tmp_path / "a.db", near) in asked.pages, near
                checked += 1
    assert checked > 60
    # each long row's first overflow page, and no other overflow page
    firsts = {int(r[0]) for r in conn.execute(
        "SELECT pageno FROM dbstat WHERE name = 't' AND pagetype = 'overflow' "
        "AND path LIKE '%+000000'")}
    long_rows = [i for i in ids if i in stored and i % 7 == 0]
    assert long_rows and len(set(asked.pages) & overflow) == len(long_rows)
    assert set(asked.pages) & overflow <= firsts
    conn.close()


def test_a_whole_small_tree_is_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         impl: str) -> None:
    conn = _archive(tmp_path / "a.db", rows=800)
    asked = _Asked(monkeypatch, conn.execute("PRAGMA page_size").fetchone()[0])
    readahead.ask(conn, [readahead.Want("t_body")])
    index = {int(r[0]) for r in conn.execute("SELECT pageno FROM dbstat WHERE name = 't_body'")}
    assert set(asked.pages) == index and len(index) > 3
    # a tree larger than ``most``: its levels that fit, none in part, and not said whole
    assert readahead.ask(conn, [readahead.Want("t_body", most=len(index))]) == {"t_body"}
    asked.pages.clear()
    assert readahead.ask(conn, [readahead.Want("t_body", most=len(index) - 1),
                                readahead.Want("t", spans=[(5, 9)])]) == {"t"}
    root = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = 't_body'").fetchone()
    assert set(asked.pages) & index == {root[0]}
    conn.close()


def _index_pages(conn: sqlite3.Connection, path: Path, name: str) -> dict[bytes, int]:
    """Each key of the index (its entries' first column) and the page holding it: a leaf,
    or an interior page (whose cells hold keys too), from reading every page of it."""
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = [int(r[0]) for r in conn.execute(
        "SELECT pageno FROM dbstat WHERE name = ? AND pagetype IN ('leaf', 'internal')",
        (name,))]
    found: dict[bytes, int] = {}
    with open(path, "rb") as f:
        for page in pages:
            f.seek((page - 1) * size)
            raw = f.read(size)
            interior = raw[0] == 0x02
            for n in range(int.from_bytes(raw[3:5], "big")):
                at = 12 + 2 * n if interior else 8 + 2 * n
                cell = int.from_bytes(raw[at:at + 2], "big") + (4 if interior else 0)
                _, record = readahead._varint(raw, cell)
                header, at = readahead._varint(raw, record)
                kind, _ = readahead._varint(raw, at)
                found[raw[record + header:record + header + (kind - 12) // 2]] = page
    return found


def test_the_walk_asks_for_the_pages_holding_an_index_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, impl: str) -> None:
    path = tmp_path / "k.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE terms (tid INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE)")
    rng = random.Random(6)
    words = sorted({"".join(rng.choice("abcdefghijklmnopqrstuvwxyzé") for _ in range(
        rng.randint(2, 14))) for _ in range(20_000)})
    rng.shuffle(words)
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO terms (term) VALUES (?)", [(w,) for w in words])
    conn.execute("COMMIT")
    name = conn.execute("SELECT name FROM sqlite_schema WHERE type = 'index'").fetchone()[0]
    asked = _Asked(monkeypatch, conn.execute("PRAGMA page_size").fetchone()[0])
    wanted = sorted(w.encode() for w in rng.sample(words, 12))
    readahead.ask(conn, [readahead.Want(name, keys=wanted)])
    depth = len(asked.pages)
    holding = _index_pages(conn, path, name)
    for key in wanted:
        assert holding[key] in asked.pages, key
    index = {int(r[0]) for r in conn.execute("SELECT pageno FROM dbstat WHERE name = ?",
                                             (name,))}
    assert set(asked.pages) <= index and depth < len(index) / 5  # a lookup, not a scan
    conn.close()


def test_pages_it_does_not_expect_never_raise(tmp_path: Path, impl: str) -> None:
    path = tmp_path / "a.db"
    conn = _archive(path, rows=1500)
    # newer pages in the WAL, not checkpointed: the main file's tree is stale
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("DELETE FROM t WHERE id % 3 = 0")
    conn.execute("INSERT INTO t SELECT id + 100000, body FROM t WHERE id < 700")
    readahead.table_rows(conn, "t", [(i, i + 2) for i in range(1, 200_000, 3301)], [5, 7, 700])
    readahead.ask(conn, [readahead.Want("t")])
    conn.close()
    # garbage where the tree's pages were: the walk stops, quietly
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = raw.execute("SELECT rootpage FROM sqlite_schema WHERE name = 't'").fetchone()[0]
    size = raw.execute("PRAGMA page_size").fetchone()[0]
    raw.close()
    rng = random.Random(4)
    with open(path, "r+b") as f:
        for page in [root, *rng.sample(range(2, os.path.getsize(path) // size), 40)]:
            f.seek((page - 1) * size + (100 if page == 1 else 0))
            f.write(bytes([rng.choice([2, 5, 10, 13])]) + rng.randbytes(size - 200))
    reader = sqlite3.connect(path)
    readahead.table_rows(reader, "t", [(1, 10_000)], list(range(1, 3000)))
    readahead.ask(reader, [readahead.Want("t")])
    # what is asked of a tree of the other kind (an index's page where a table's was): no
    # error either
    readahead.ask(reader, [readahead.Want("t_body", spans=[(1, 50)], rows=[3]),
                           readahead.Want("t", keys=[b"000010"])])
    reader.close()


def test_only_a_search_that_reads_from_storage_asks(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    readahead.end()
    assert not readahead.cold()  # outside a search: never
    readahead.begin(str(tmp_path / "missing.db"))
    reads = iter([100, 100, 4196])
    monkeypatch.setattr(readahead, "_storage_reads", lambda: next(reads))
    readahead.begin(None)
    assert not readahead.cold()
    readahead.begin(str(tmp_path / "missing.db"))  # (begin only notes the count)
    assert not readahead.cold()  # nothing read since
    assert readahead.cold()  # blocks read from storage since the search began
    readahead.end()
    assert not readahead.cold()
    monkeypatch.setenv("REFOLD_READAHEAD", "0")
    assert not readahead.enabled()
    readahead.begin(str(tmp_path / "missing.db"))  # turned off: no search is cold
    assert not readahead.cold()


def _store(path: Path) -> SQLiteStore:
    store = SQLiteStore(str(path))
    rng = random.Random(9)
    words = ["deploy", "budget", "walrus", "migration", "timeout", "retry", "cache", "index"]
    for n in range(60):
        s = store.create_session(title=f"s{n}")
        store.append_messages(s.id, [
            {"role": "user", "content": " ".join(rng.choice(words) for _ in range(8))
             + (" long" * 3000 if n % 9 == 0 else "")} for _ in range(6)])
    return store


def test_a_cold_search_asks_ahead_and_finds_the_same(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path / "r.db")
    query = SearchQuery("when did the walrus deploy time out?", limit=10)
    monkeypatch.setenv("REFOLD_READAHEAD", "0")
    without = store.search(query)
    monkeypatch.delenv("REFOLD_READAHEAD")
    walked: list[str] = []
    real_ask = readahead.ask
    monkeypatch.setattr(readahead, "cold", lambda: True)  # as on a cold page cache
    monkeypatch.setattr(readahead, "ask", lambda conn, wants: (
        walked.extend(w.name for w in wants), real_ask(conn, wants))[1])
    assert store.search(query) == without and without
    assert {"messages", "sessions_card"} <= set(walked)
    store.close()


def test_the_c_reader_reads_pages_as_the_python_one(tmp_path: Path, native_btree: None) -> None:
    """Every interior and leaf page of a table and of a text index, read both ways: the same
    children, the same routes for rowid spans and keys, the same overflow pages; a page that
    is no b-tree page is refused (ValueError) or read as the Python reader reads it."""
    from refold import _btree

    conn = _archive(tmp_path / "a.db", rows=8000, seed=8)
    conn.execute("CREATE TABLE w (k TEXT PRIMARY KEY, v)")
    rng = random.Random(8)
    words = list({"".join(rng.choice("abcdefghijé日本") for _ in range(rng.randint(1, 40)))
                  for _ in range(30000)})
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO w VALUES (?, 1)", [(w,) for w in words])
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("SELECT name, pageno, pagetype FROM dbstat "
                         "WHERE name IN ('t', 'sqlite_autoindex_w_1')").fetchall()
    spans = sorted((a, a + rng.randint(0, 40)) for a in rng.sample(range(-5, 8100), 60))
    keys = sorted(w.encode() for w in rng.sample(words, 60))
    rows = sorted(rng.sample(range(1, 8100), 1200))
    seen = {"internal": 0, "leaf": 0}
    with open(tmp_path / "a.db", "rb") as f:
        for name, page, kind in pages:
            f.seek((page - 1) * size)
            data = f.read(size)
            at = 100 if page == 1 else 0
            if kind == "internal":
                seen[kind] += 1
                assert _btree.children(data, at) == readahead._py_children(data, at)
                targets: list[object] = list(spans) if name == "t" else list(keys)
                node = readahead._Node(data, at, data[at])
                assert _btree.route(data, at, targets) == readahead._py_route(node, targets)
            elif kind == "leaf" and name == "t":
                seen[kind] += 1
                assert _btree.overflow(data, at, size, rows) == \
                    readahead._py_overflow(data, at, size, rows)
    assert seen["internal"] > 5 and seen["leaf"] > 50
    for _ in range(300):  # no b-tree page: refused, or read as the Python reader does
        data = rng.choice([2, 5, 10, 13]).to_bytes(1, "big") + rng.randbytes(size - 1)
        for c_reader, python in ((_btree.children, readahead._py_children),
                                 (_btree.overflow, readahead._py_overflow)):
            more = () if c_reader is _btree.children else (size, rows)
            try:
                got = c_reader(data, 0, *more)  # type: ignore[operator]
            except ValueError:
                continue
            assert got == python(data, 0, *more)  # type: ignore[operator]
    with pytest.raises(TypeError):
        _btree.route(b"\x05" + bytes(size - 1), 0, "not a list")  # type: ignore[arg-type]
    conn.close()


def test_a_cold_chinese_search_asks_for_the_lengths_it_joins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CJK question's postings join ``cjk_lengths`` row by row: on a cold cache its pages
    are asked for first: those the postings name while they are few; else all of them while
    the table is small, and again those the postings name when it is not."""
    from refold.store.sqlite import cjklen, cjkread

    store = SQLiteStore(str(tmp_path / "zh.db"))
    rng = random.Random(2)
    chars = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动"
    for n in range(40):
        s = store.create_session(title=f"s{n}")
        store.append_messages(s.id, [{"role": "user", "content": "".join(
            rng.choice(chars) for _ in range(30))} for _ in range(5)])
    # in the file, where the walks read (not only the WAL): a tree walked whole says so
    store.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    query = SearchQuery("我们什么时候讨论了上个国家的发动机？", limit=5)
    monkeypatch.setenv("REFOLD_READAHEAD", "0")
    without = store.search(query)
    monkeypatch.delenv("REFOLD_READAHEAD")
    walked: list[list[tuple[str, object]]] = []
    real_ask = readahead.ask
    monkeypatch.setattr(readahead, "cold", lambda: True)
    monkeypatch.setattr(readahead, "ask", lambda conn, wants: (
        walked.append([(w.name, w.spans) for w in wants]), real_ask(conn, wants))[1])

    def lengths_asked() -> list[object]:
        asked = [w[1] for wants in walked for w in wants if w[0] == "cjk_lengths"]
        walked.clear()
        return asked

    assert store.search(query) == without and without
    few = lengths_asked()
    assert few and all(few), few  # the spans of its few postings, not the whole table
    monkeypatch.setattr(cjkread, "LENGTHS_FEW", 10)  # as if its postings were many
    if cjklen.blocks_usable():  # weighed from the packed blocks: those are asked for
        monkeypatch.setattr(cjklen, "MANY", 10)
        assert store.search(query) == without
        asked = [w for wants in walked for w in wants]
        assert ("cjk_length_blocks", None) in asked and not lengths_asked(), asked
    monkeypatch.setattr(cjklen, "blocks_usable", lambda: False)  # (no C reader: the join)
    assert store.search(query) == without
    assert lengths_asked() == [None]  # the whole (small) table
    monkeypatch.setattr(cjkread, "LENGTHS_WHOLE", 0)  # as if it were larger
    assert store.search(query) == without
    many = lengths_asked()
    assert many[0] is None and many[1:] and all(many[1:]), many  # tried whole: then spans
    store.close()


def test_searches_that_ask_ahead_while_a_writer_checkpoints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, impl: str) -> None:
    """The walk reads the main file while a checkpoint rewrites it (pages torn, moved,
    freed): the searches beside it never fail."""
    import threading
    import time

    path = tmp_path / "w.db"
    store = _store(path)
    monkeypatch.setattr(readahead, "cold", lambda: True)
    stop, going = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            writer = SQLiteStore(str(path))
            s = writer.create_session(title="busy")
            n = 0
            while not stop.is_set():
                writer.append_messages(s.id, [{"role": "user", "content": f"walrus deploy {n}"}
                                              for _ in range(20)])
                with writer.db.write() as conn:
                    conn.execute("DELETE FROM messages WHERE session_id = ? AND seq % 7 = 0",
                                 (s.id,))
                # (PASSIVE: pages copied into the file under the walks, no reader waited on)
                writer.db.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                n += 1
                going.set()
            writer.close()
        except BaseException as exc:  # pragma: no cover - the failure asserted below
            failures.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        assert going.wait(30)  # the writer is at work (or failed: asserted below)
        for _ in range(8):  # (a count, not a time: a slow machine runs the same searches)
            hits = store.search(SearchQuery("when did the walrus deploy time out?", limit=10))
            assert hits
            time.sleep(0.02)  # the writer's turn
    finally:
        stop.set()
        thread.join()
    assert not failures
    store.close()


def test_a_walk_that_fails_leaves_no_file_open(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever stops a walk (the file unreadable at its header, a page read failing), the
    file it opened is closed: a long-running server asks thousands of times."""
    conn = _archive(tmp_path / "a.db", rows=300)

    def open_files() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_files()
    for _ in range(20):
        assert readahead.ask(conn, [readahead.Want("t", spans=[(1, 50)])]) == {"t"}
    class FailingRead:
        """``os.pread`` failing at the ``failing``-th read of each walk."""

        def __init__(self, failing: int) -> None:
            self.failing, self.calls, self.real = failing, 0, os.pread

        def __call__(self, fd: int, n: int, at: int) -> bytes:
            self.calls += 1
            if self.calls - 1 == self.failing:
                raise OSError(5, "I/O error")
            return self.real(fd, n, at)

    for failing in (0, 1):  # the header read, then the first page's
        for _ in range(20):
            monkeypatch.setattr(readahead.os, "pread", FailingRead(failing))
            assert readahead.ask(conn, [readahead.Want("t", spans=[(1, 50)])]) == set()
        monkeypatch.undo()
    assert open_files() == before
    conn.close()
