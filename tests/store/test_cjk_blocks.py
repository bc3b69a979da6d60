"""CJK lengths packed in blocks (``cjklen.py``, ``_cjklen.c``): a common character's postings
weighed from them equal the join with ``cjk_lengths`` row for row, through appends, deletes,
rewinds, rewrites, a repair and ids reused; a search ranks the same with them or without, and
a process that searches CJK again loads no copy of the table."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from refold.search.query import parse_query
from refold.store.base import SearchQuery
from refold.store.sqlite import cjklen, wordindex
from refold.store.sqlite.store import SQLiteStore

CHARS = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动"
PIECES = ["的", "在不", "国", "我们", "出", "动"]


@pytest.fixture
def c_readers(cjklen_reader: None, native_scorer: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The C readers (the packed blocks are kept without them, and read only with them)."""
    monkeypatch.setenv("REFOLD_NATIVE", "1")


def _text(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return "plain words only " + str(rng.random())
    return "".join(rng.choice(CHARS) for _ in range(rng.randint(1, 40)))


def _fill(store: SQLiteStore, rng: random.Random, rows: int) -> None:
    session = store.create_session()
    store.append_messages(session.id, [{"role": "user", "content": _text(rng)}
                                       for _ in range(rows)])


def _joined(conn: sqlite3.Connection, piece: str, inactive: bool) -> list[tuple[int, int]]:
    table = "messages_cjk_grams" if len(piece) <= 2 else "messages_trigram"
    active = "" if inactive else " AND l.active = 1"
    return [(int(a), int(b)) for a, b in conn.execute(
        f"SELECT l.id, l.chars FROM {table} f JOIN cjk_lengths l ON l.id = f.rowid "
        f"WHERE {table} MATCH ?{active} ORDER BY l.id", ('"' + piece + '"',))]


def _agree(store: SQLiteStore) -> int:
    """Assert the blocks give what the join gives, for each piece; returns the rows seen."""
    seen = 0
    with store.db.read() as conn:
        for inactive in (False, True):
            got = cjklen.weighed_postings(
                conn, [("messages_cjk_grams", '"' + p + '"') for p in PIECES], inactive)
            assert got is not None
            for piece, rows in zip(PIECES, got, strict=True):
                assert rows == _joined(conn, piece, inactive), piece
                seen += len(rows)
    return seen


@pytest.mark.usefixtures("c_readers")
def test_blocks_equal_the_join_through_every_change(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cjklen, "MANY", 0)
    monkeypatch.setattr(cjklen, "MOST_DIRTY", 10**6)
    store = SQLiteStore(str(tmp_path / "zh.db"))
    rng = random.Random(5)
    for _ in range(6):
        _fill(store, rng, 900)  # 5,400 ids: five blocks and a tail
    store.catch_up_index()
    with store.db.read() as conn:
        packed = conn.execute("SELECT count(*) FROM cjk_length_blocks").fetchone()[0]
    assert packed >= 2  # complete blocks were packed after their batches
    assert _agree(store) > 1000
    for step in range(40):
        with store.db.write() as conn:
            top = conn.execute("SELECT max(id) FROM messages").fetchone()[0]
            some = rng.randint(1, top)
            kind = step % 5
            if kind == 0:  # a rewind
                conn.execute("UPDATE messages SET active = 0 WHERE id BETWEEN ? AND ?",
                             (some, some + 30))
            elif kind == 1:  # rows brought back
                conn.execute("UPDATE messages SET active = 1 WHERE id BETWEEN ? AND ?",
                             (some - 50, some))
            elif kind == 2:  # rewritten in place
                conn.execute("UPDATE messages SET text = ?, has_cjk = 1 WHERE id = ?",
                             (_text(rng) + "出", some))
            elif kind == 3:  # deleted, the newest too (its id is used again)
                conn.execute("DELETE FROM messages WHERE id IN (?, ?)", (some, top))
            elif step % 10 == 4:
                cjklen.rebuild(conn)  # `refold doctor --repair`
        if step % 3 == 0:
            _fill(store, rng, rng.choice((5, 40, 300)))
            store.catch_up_index()
        if step % 7 == 0:
            with store.db.write() as conn:
                cjklen.seal_blocks(conn)
        _agree(store)
    with store.db.write() as conn:
        cjklen.seal_blocks(conn)
        dirty = conn.execute("SELECT block FROM cjk_length_dirty").fetchall()
        top = conn.execute("SELECT indexed_through FROM search_index_state").fetchone()[0]
    assert all(b >= (top + 1) >> cjklen.BLOCK_BITS for (b,) in dirty)  # only the open tail
    _agree(store)
    store.close()


@pytest.mark.usefixtures("c_readers")
def test_a_search_ranks_the_same_and_loads_no_copy(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wordindex, "MIN_ROWS", 0)
    monkeypatch.setattr(cjklen, "MANY", 50)
    store = SQLiteStore(str(tmp_path / "zh.db"))
    rng = random.Random(9)
    for _ in range(5):
        _fill(store, rng, 800)
    with store.db.write() as conn:  # some rows rewound: left out unless asked for
        conn.execute("UPDATE messages SET active = 0 WHERE id % 13 = 0")
    questions = ["我们什么时候出了发动吗？", "我们什么时候国了在不吗？", "主要的年份",
                 "我们什么时候来了用生吗？", "我们什么时候出了国吗？"]
    assert all(parse_query(q).natural for q in questions)  # questions, each piece weighed
    called: list[int] = []
    real = cjklen.weighed_postings
    monkeypatch.setattr(cjklen, "weighed_postings", lambda *a: (called.append(1), real(*a))[1])
    with_blocks = [[(h.message_id, h.score) for h in store.search(SearchQuery(
        q, include_inactive=inactive))] for q in questions for inactive in (False, True)]
    assert called and all(with_blocks)
    assert cjklen.lengths_for(str(store.db.path)).ids is None  # no NumPy copy was loaded
    monkeypatch.setattr(cjklen, "blocks_usable", lambda: False)
    joined = [[(h.message_id, h.score) for h in store.search(SearchQuery(
        q, include_inactive=inactive))] for q in questions for inactive in (False, True)]
    assert with_blocks == joined
    store.close()


def test_an_archive_from_before_the_blocks_gets_them(tmp_path: Path) -> None:
    path = str(tmp_path / "old.db")
    store = SQLiteStore(path)
    _fill(store, random.Random(1), 3000)
    store.catch_up_index()
    store.close()
    conn = sqlite3.connect(path)  # back to schema 19
    for trigger in ("insert", "delete", "update"):
        conn.execute(f"DROP TRIGGER cjk_length_blocks_{trigger}")
    conn.execute("DROP TABLE cjk_length_blocks")
    conn.execute("DROP TABLE cjk_length_dirty")
    conn.execute("DELETE FROM schema_migrations WHERE version = 20")
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    with store.db.read() as conn:
        assert conn.execute("SELECT count(*) FROM cjk_length_blocks").fetchone()[0] == 2
    store.close()


@pytest.mark.usefixtures("c_readers")
def test_the_c_reader_reads_what_it_is_given() -> None:
    from refold import _cjklen

    block = cjklen._pack([(1024 + 3, 7, 1), (1024 + 9, 12, 0), (1024 + 1000, 5, 1)])
    blocks = [(1, block)]
    assert _cjklen.rows("1027,1033,1500,2024", blocks, [], 10, False) == [(1027, 7), (2024, 5)]
    assert _cjklen.rows("2024,1033,1027", blocks, [], 10, True) == \
        [(1027, 7), (1033, 12), (2024, 5)]  # any order: sorted
    assert _cjklen.rows("5,9,3000", blocks, [(5, 4, 1), (3000, 2, 0)], 10, True) == \
        [(5, 4), (3000, 2)]  # rows not packed, from the extra rows
    assert _cjklen.rows(None, blocks, [], 10, False) == []
    assert _cjklen.span("9,30,41") == (3, 9, 41) and _cjklen.span(None) == (0, 0, -1)
    for bad in ("1,,2", "1,2,", "a", "-1", "1" * 30):
        with pytest.raises(ValueError):
            _cjklen.rows(bad, blocks, [], 10, False)
    with pytest.raises(ValueError):
        _cjklen.rows("1", [(1, b"\x00" * 5)], [], 10, False)
    with pytest.raises(ValueError):
        _cjklen.rows("1", [(2, block), (1, block)], [], 10, False)
    with pytest.raises(TypeError):
        _cjklen.rows("1", [(1, "text")], [], 10, False)  # type: ignore[list-item]


def test_doctor_reports_a_wrong_or_lost_block_and_repair_packs_them_again(
        tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "zh.db"))
    rng = random.Random(4)
    for _ in range(3):
        _fill(store, rng, 1000)
    store.catch_up_index()
    assert store.integrity_check() == []
    with store.db.write() as conn:
        first, second = [r[0] for r in conn.execute(
            "SELECT block FROM cjk_length_blocks ORDER BY block LIMIT 2")]
        # a byte changed under SQLite (no trigger saw it), and a block gone unmarked
        conn.execute("UPDATE cjk_length_blocks SET data = zeroblob(length(data)) "
                     "WHERE block = ?", (first,))
        conn.execute("DELETE FROM cjk_length_blocks WHERE block = ?", (second,))
    problems = store.integrity_check()
    assert any("differ from the rows they copy" in p and f"[{first}]" in p
               for p in problems), problems
    assert any("neither packed nor marked" in p and f"[{second}]" in p for p in problems)
    store.rebuild_search_indexes()  # `refold doctor --repair`
    assert store.integrity_check() == []
    with store.db.read() as conn:
        assert conn.execute("SELECT count(*) FROM cjk_length_blocks WHERE block IN (?, ?)",
                            (first, second)).fetchone()[0] == 2
    store.close()
