"""A question naming a day on a crowded day: the messages only the day term scores are cut to
the few that can place (``natural.trim_days``), and the best hits stay exactly those of every
match scored (``natural_scores(scan=True)``), on each scoring path."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pytest

from refold.search.query import parse_query
from refold.search.rank import best_first
from refold.store.base import SearchQuery
from refold.store.sqlite import plainscore, wordindex
from refold.store.sqlite.natural import natural_scores, trim_days
from refold.store.sqlite.store import SQLiteStore

WORDS = ["deploy", "cache", "server", "failed", "parser", "review", "the", "we", "it"]
CJK = ["部署", "缓存", "服务器", "失败", "解析"]
QUESTIONS = ["what happened on 2026-10-17 with the deploy?", "what did we do on October 17?",
             "2026年10月17日我们部署了什么？", "on October 18 the cache server failed",
             "10月18日缓存失败了吗？", "what did we review on 2026-10-19?"]


@pytest.fixture(params=["numpy", "plain"])
def store(request: pytest.FixtureRequest, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> SQLiteStore:
    """Three crowded days of mixed English and Chinese messages, many of the same length."""
    monkeypatch.setattr(wordindex, "MIN_ROWS", 0)
    postings = 10**12 if request.param == "plain" else -1
    monkeypatch.setattr(plainscore, "PLAIN_WARM", postings)
    monkeypatch.setattr(plainscore, "PLAIN_BUDGET", postings)
    store = SQLiteStore(str(tmp_path / "days.db"))
    rng = random.Random(17)
    for _ in range(6):
        session = store.create_session()
        store.append_messages(session.id, [{"role": "user", "content": " ".join(
            rng.choice(WORDS) if rng.random() < 0.5 else rng.choice(CJK)
            for _ in range(rng.choice((1, 2, 2, 3, 8))))} for _ in range(400)])
    noon = dt.datetime(2026, 10, 17, 12, tzinfo=dt.UTC).timestamp()
    with store.db.write() as conn:  # 800 messages a day, Oct 16 to 18
        conn.execute("UPDATE messages SET created_at = ? + (id / 800 - 1) * 86400", (noon,))
        conn.execute("UPDATE sessions SET started_at = ?", (noon - 5 * 86400,))
    store.catch_up_index()
    return store


def test_a_crowded_day_ranks_exactly_as_every_match_scored(store: SQLiteStore) -> None:
    checked = 0
    for question in QUESTIONS:
        plan = parse_query(question).natural
        assert plan is not None and plan.days, question
        for limit in (1, 3, 20):
            query = SearchQuery(question, limit=limit)
            with store.db.read() as conn:
                fast = natural_scores(conn, plan, query, limit)
                reference = natural_scores(conn, plan, query, limit, scan=True)
            want = best_first(reference, limit)
            assert [(i, fast[i]) for i in best_first(fast, limit)] == \
                [(i, reference[i]) for i in want], (question, limit)
            checked += len(want)
            if limit == 20 and len(reference) > 800:  # the day's own were cut
                assert len(fast) < len(reference)
    assert checked > 100


def test_trimming_keeps_the_scored_and_every_tie_at_the_bar() -> None:
    days = {1: 5.0, 2: 4.0, 3: 4.0, 4: 3.0, 5: 1.0, 6: 0.5}
    assert trim_days(days, {6}, 2) == {1: 5.0, 2: 4.0, 3: 4.0, 6: 0.5}
    assert trim_days(days, set(), 10) == days
    assert trim_days(days, set(), 1) == {1: 5.0}
