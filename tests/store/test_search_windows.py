"""A search hit's window read from the rows stored next to it (``_around_id``) is exactly the
window the session index gives (``_around``): interleaved sessions, rewound rows, the
session's first and last messages, every window size."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from refold.store.base import SearchQuery
from refold.store.sqlite import ledger
from refold.store.sqlite.store import SQLiteStore


def _index_asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sides of windows asked of the session index (``_earlier``, ``_from``), as asked."""
    asked: list[str] = []
    for name in ("_earlier", "_from"):
        real = getattr(ledger, name)
        monkeypatch.setattr(ledger, name, lambda *a, real=real, name=name: (
            asked.append(name), real(*a))[1])
    return asked


def test_windows_from_neighbouring_rows_equal_the_index_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _index_asked(monkeypatch)  # windows (sides) the neighbourhood could not settle
    store = SQLiteStore(str(tmp_path / "refold.db"))
    rng = random.Random(3)
    sessions = [store.create_session().id for _ in range(4)]
    for n in range(160):  # sessions written in turns of 1-6 messages: ids interleave
        session = rng.choice(sessions)
        stored = store.append_messages(session, [{"role": "user", "content": f"note {n} {k}"}
                                                 for k in range(rng.randint(1, 6))])
        if n % 40 == 39:  # a rewind leaves inactive rows in the middle of a session
            store.rewind(session, max(1, stored.appended[-1].seq - 3), any_role=True)
    with store.db.read() as conn:
        rows = conn.execute("SELECT id, session_id, seq FROM messages").fetchall()
        compared = settled = 0
        for message_id, session_id, seq in rows:
            for before, after in ((0, 0), (1, 1), (2, 0), (0, 3), (5, 5)):
                for inactive in (False, True):
                    want = store._around(conn, session_id, seq, before, after, inactive)
                    asked.clear()
                    got = store._around_id(conn, message_id, session_id, seq, before, after,
                                           inactive)
                    settled += not asked
                    assert got == want, (message_id, before, after, inactive)
                    compared += 1
    assert compared == len(rows) * 10 and len(rows) > 400
    assert compared * 0.5 < settled < compared  # both ways were taken, mostly without the index


def test_search_hits_carry_the_same_windows(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "refold.db"))
    a, b = store.create_session().id, store.create_session().id
    for n in range(30):
        store.append_messages(a if n % 3 else b, [
            {"role": "user", "content": f"deploy step {n}"},
            {"role": "assistant", "content": f"ok {n}"}])
    hits = store.search(SearchQuery("deploy step", limit=50, window=2))
    assert len(hits) == 30
    for hit in hits:
        assert hit.window == store.messages_around(hit.session_id, hit.seq, before=2, after=2)
        assert any(m.seq == hit.seq for m in hit.window)


def test_a_search_settles_each_window_from_the_rows_around_its_own_hit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows read once for all hits settle each window exactly as a read of the rows
    around that hit alone would: the index is asked for the same sides, no more."""
    asked = _index_asked(monkeypatch)
    store = SQLiteStore(str(tmp_path / "refold.db"))
    rng = random.Random(5)
    sessions = [store.create_session().id for _ in range(3)]
    for n in range(90):
        store.append_messages(rng.choice(sessions), [
            {"role": "user", "content": f"deploy step {n}"},
            {"role": "assistant", "content": f"ok {n}"}][:rng.randint(1, 2)])
    for window in (1, 2):
        asked.clear()
        hits = store.search(SearchQuery("deploy step", limit=100, window=window))
        by_search = len(asked)
        assert len(hits) == 90
        asked.clear()
        with store.db.read() as conn:
            for hit in hits:
                message_id = conn.execute("SELECT id FROM messages WHERE session_id = ? AND "
                                          "seq = ?", (hit.session_id, hit.seq)).fetchone()[0]
                assert store._around_id(conn, message_id, hit.session_id, hit.seq, window,
                                        window, False) == hit.window
        assert 0 < by_search == len(asked) < 2 * len(hits)  # (each hit has two sides)
