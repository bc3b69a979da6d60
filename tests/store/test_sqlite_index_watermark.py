"""SQLite: search indexing off the commit path (``refold.store.sqlite.indexer``).

Appends leave their rows above the watermark; a search indexes them first, so it still finds
every stored message; deletes and id reuse never corrupt the indexes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from refold.store import SearchQuery
from refold.store.sqlite import SQLiteStore, indexer


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def fts_rows(store: SQLiteStore) -> int:
    with store.db.read() as conn:
        return int(conn.execute("SELECT count(*) FROM messages_fts_docsize").fetchone()[0])


def state(store: SQLiteStore) -> tuple[int, int]:
    with store.db.read() as conn:
        return indexer.watermark(conn), indexer.pending(conn)


def test_a_small_append_is_not_indexed_in_its_commit_and_search_still_finds_it(
        tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "a.db"))
    session = store.create_session()
    store.append_messages(session.id, [user("the deployment of zebrafish finished")])
    store.append_messages(session.id, [user("我们需要部署服务器")])
    assert state(store) == (0, 2) and fts_rows(store) == 0
    found = {h.seq for h in store.search(SearchQuery("zebrafish"))}
    assert found == {1}
    assert state(store) == (2, 0) and fts_rows(store) == 2
    store.append_messages(session.id, [user("部署 again, zebrafish")])
    assert {h.seq for h in store.search(SearchQuery("部署"))} == {2, 3}  # gram index (2 chars)
    store.append_messages(session.id, [user("服务器 down")])
    assert {h.seq for h in store.search(SearchQuery("服务器"))} == {2, 4}  # trigram index
    assert store.integrity_check() == []
    store.close()


def test_the_tail_is_indexed_in_one_batch_and_bulk_calls_index_in_their_commit(
        tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "b.db"))
    session = store.create_session()
    for i in range(indexer.TAIL_ROWS - 1):
        store.append_messages(session.id, [user(f"message {i}")])
    assert state(store) == (0, indexer.TAIL_ROWS - 1)
    store.append_messages(session.id, [user("the one that fills the batch")])
    assert state(store) == (indexer.TAIL_ROWS, 0)
    store.append_messages(session.id, [user(f"bulk {i}") for i in range(indexer.INLINE_ROWS)])
    assert state(store) == (indexer.TAIL_ROWS + indexer.INLINE_ROWS, 0)
    assert fts_rows(store) == indexer.TAIL_ROWS + indexer.INLINE_ROWS
    store.close()


def test_deleting_unindexed_rows_and_reusing_their_ids_keeps_the_index_exact(
        tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "c.db"))
    keep, gone = store.create_session(), store.create_session()
    store.append_messages(keep.id, [user("kept words 保留")])
    assert store.search(SearchQuery("kept"))  # indexes id 1
    store.append_messages(gone.id, [user("doomed words 删除"), user("more doomed")])
    store.delete_session(gone.id)  # ids 2-3, never indexed: no FTS5 delete may touch them
    assert store.integrity_check() == []
    store.search(SearchQuery("kept"))
    store.append_messages(keep.id, [user("fresh row 新的")])
    # an indexed last row deleted, then its id reused by a new row: it must be indexed anew
    other = store.create_session()
    store.append_messages(other.id, [user("short lived 短暂")])
    store.search(SearchQuery("short"))  # indexes it
    store.delete_session(other.id)
    assert state(store)[0] <= 2
    again = store.create_session()
    store.append_messages(again.id, [user("reused identity 重用")])
    assert [h.session_id for h in store.search(SearchQuery("reused"))] == [again.id]
    assert [h.session_id for h in store.search(SearchQuery("重用"))] == [again.id]
    assert store.search(SearchQuery("short")) == []
    assert store.integrity_check() == []
    store.close()


def test_a_fork_and_a_rebuild_leave_every_row_searchable(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "d.db"))
    session = store.create_session()
    store.append_messages(session.id, [user("original 原文"), user("second line")])
    child = store.fork_session(session.id)
    hits = store.search(SearchQuery("原文"))  # the fork's copy collapses into one hit
    assert len(hits) == 1 and set(hits[0].lineage) == {session.id, child.id}
    store.append_messages(session.id, [user("after the fork")])
    store.rebuild_search_indexes()
    assert state(store) == (5, 0) and fts_rows(store) == 5
    assert store.integrity_check() == []
    store.close()
