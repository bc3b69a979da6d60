"""The words CJK messages hold glued to their text (``store/sqlite/glued.py``): a question
skips the trigram lookup of the words the list rules out and finds the same messages; a CJK
row rewritten in place leaves the list stale (ruling nothing out) until ``refold index``
rebuilds it; a database from before the list gets it filled by its migration."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from refold.store.base import SearchQuery
from refold.store.sqlite import glued, natural
from refold.store.sqlite.store import SQLiteStore

ROWS = ["用pytest跑一下测试", "docker is running again", "部署失败了", "ＡＰＩキーを設定して",
        "run pytest please", "端口是5433。"]
QUESTIONS = ["how do I run pytest with docker?", "where do I set the api key?",
             "which port is 5433?", "docker", "kubectl logs", "pytest"]


def top(store: SQLiteStore, text: str, **kw: object) -> list[tuple[str, float]]:
    return [(h.content, h.score) for h in store.search(SearchQuery(text, window=0, **kw))]


@pytest.fixture
def looked_up(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The words and chunks each search looks up in the trigram index as glued."""
    seen: list[str] = []
    real = natural._in_cjk_text

    def recording(conn: sqlite3.Connection, lookups: list[tuple[str, str, list[str]]]) -> bool:
        seen.extend(term for term, _, _ in lookups)
        return real(conn, lookups)
    monkeypatch.setattr(natural, "_in_cjk_text", recording)
    return seen


def test_words_glued_nowhere_are_not_looked_up_and_the_hits_stay_the_same(
        tmp_path: Path, looked_up: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    store = SQLiteStore(str(tmp_path / "refold.db"))
    store.append_messages(store.create_session().id, [{"role": "user", "content": t}
                                                      for t in ROWS])
    answers = {q: top(store, q) for q in QUESTIONS}
    assert set(looked_up) == {"pytest", "api", "5433"}  # never docker, key, kubectl, logs
    assert "用pytest跑一下测试" in [c for c, _ in answers["how do I run pytest with docker?"]]
    assert [c for c, _ in answers["where do I set the api key?"]] == ["ＡＰＩキーを設定して"]
    monkeypatch.setattr(glued, "ruled_out", lambda conn, words: set())  # every word looked up
    looked_up.clear()
    assert {q: top(store, q) for q in QUESTIONS} == answers
    assert {"docker", "kubectl"} <= set(looked_up)


def test_a_cjk_row_rewritten_in_place_leaves_the_list_stale_until_rebuilt(
        tmp_path: Path, looked_up: list[str]) -> None:
    store = SQLiteStore(str(tmp_path / "refold.db"))
    store.append_messages(store.create_session().id, [{"role": "user", "content": t}
                                                      for t in ROWS])
    assert top(store, "kubectl") == []
    with store.db.write() as conn:
        conn.execute("UPDATE messages SET text = '用kubectl看日志' WHERE text = '部署失败了'")
    assert [c for c, _ in top(store, "kubectl")] == ["用kubectl看日志"]
    looked_up.clear()
    assert top(store, "docker")
    assert "docker" in looked_up  # stale: nothing ruled out
    store.seal_word_index()  # `refold index` rebuilds it
    with store.db.read() as conn:
        assert not glued.is_stale(conn)
    looked_up.clear()
    assert [c for c, _ in top(store, "kubectl")] == ["用kubectl看日志"]
    assert top(store, "docker") and "docker" not in looked_up


def test_the_migration_fills_the_list_from_the_messages_already_stored(tmp_path: Path) -> None:
    path = str(tmp_path / "refold.db")
    store = SQLiteStore(path)
    store.append_messages(store.create_session().id, [{"role": "user", "content": t}
                                                      for t in ROWS * 10])
    store.catch_up_index()
    with store.db.write() as conn:  # as a database from before migration 15
        conn.execute("DROP TRIGGER glued_words_stale")
        conn.execute(f"DROP TABLE {glued.TABLE}")
        conn.execute("DELETE FROM schema_migrations WHERE version = 15")
    store.close()
    store = SQLiteStore(path)
    with store.db.read() as conn:
        assert {r[0] for r in conn.execute(f"SELECT word FROM {glued.TABLE}")} == {
            "pytest", "api", "5433"}
    assert "用pytest跑一下测试" in [c for c, _ in top(store, "how do I run pytest?")]
