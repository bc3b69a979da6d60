"""The word impact index (``store/sqlite/wordindex.py``) answers sentence queries exactly as
FTS5 over every match does: the same ids in the same order with the same scores, bit for bit,
through sealing, the per-process tail, deletes, rewrites, filters and a second process."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from refold.search.query import parse_query
from refold.search.rank import best_first
from refold.store.base import SearchQuery
from refold.store.sqlite import cjklen, indexer, plainscore, wordindex, wordrows, wordseal
from refold.store.sqlite.natural import fast_scores, natural_scores
from refold.store.sqlite.store import SQLiteStore

VOCAB = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "running", "runs", "ran", "file", "files", "object", "objects", "return", "returned", "name", "names", "caroline", "support", "group", "groups", "went", "talked", "talking", "deploy", "deployment", "build", "builds", "failed", "failure", "cache", "cached", "cafe", "café", "naïve", "résumé", "the", "of", "to", "is", "a", "and", "in", "that", "it"]
QUESTIONS = ["when did caroline go to the support group", "running file object",
             "alpha beta", "what was the name of the deployment that failed",
             "why is the cache so slow", "café résumé", "returned objects and names",
             "talking about groups of files", "theta eta running deploy",
             "build failure on 5月6号 部署"]


def text(rng: random.Random) -> str:
    words = [rng.choice(VOCAB) for _ in range(rng.choice((1, 3, 8, 20, 60)))]
    if rng.random() < 0.05:
        words.append("部署失败了")
    return " ".join(words)


def fill(store: SQLiteStore, rng: random.Random, sessions: int, per: int) -> list[str]:
    ids = []
    for _ in range(sessions):
        session = store.create_session(source=rng.choice(("a", "b")))
        store.append_messages(session.id, [
            {"role": rng.choice(("user", "assistant")), "content": text(rng)}
            for _ in range(per)])
        ids.append(session.id)
    return ids


def compare(store: SQLiteStore, question: str, limit: int = 20, **filters: object) -> int:
    """Assert the index's best ``limit`` equal FTS5's; returns how many there were."""
    parsed = parse_query(question)
    plan = parsed.natural or parsed.glued  # (a lone word also found glued in CJK text)
    assert plan is not None
    query = SearchQuery(question, limit=limit, **filters)  # type: ignore[arg-type]
    with store.db.read() as conn:
        fast = fast_scores(conn, plan, query, limit)
        assert fast is not None, "the index must answer this query"
        reference = natural_scores(conn, plan, query, limit, scan=True)
    got = [(i, fast[i]) for i in best_first(fast, limit)]
    want = [(i, reference[i]) for i in best_first(reference, limit)]
    assert got == want
    return len(want)


@pytest.fixture(autouse=True, params=["numpy", "plain", "native"])
def small_archives_use_the_index(request: pytest.FixtureRequest,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test three times: the index scored with NumPy, with the standard library
    (``plainscore.py``, what a fresh process uses for a query of few postings without the C
    scorer), and with the C scorer (``nativescore.py``) where the question suits it."""
    if request.param == "native":
        request.getfixturevalue("native_scorer")
    monkeypatch.setenv("REFOLD_NATIVE", "1" if request.param == "native" else "0")
    monkeypatch.setattr(wordindex, "MIN_ROWS", 0)
    monkeypatch.setattr(wordindex, "SEGMENT", 2)  # merges at 2 chunks: the tests cross them
    postings = 10**12 if request.param == "plain" else -1
    monkeypatch.setattr(plainscore, "PLAIN_WARM", postings)
    monkeypatch.setattr(plainscore, "PLAIN_BUDGET", postings)


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(str(tmp_path / "refold.db"))


def test_sealed_chunks_and_tail_rank_exactly_as_fts5(store: SQLiteStore) -> None:
    rng = random.Random(7)
    fill(store, rng, 5, 2000)  # 10,000 rows: two sealed chunks and a tail
    with store.db.read() as conn:
        assert wordindex.state(conn)[0] == 0  # appends seal nothing
    store.catch_up_index()  # a search seals one chunk
    with store.db.read() as conn:
        assert wordindex.state(conn)[0] == 1
    assert store.seal_word_index() == 1
    with store.db.read() as conn:
        chunks, rows, _, _ = wordindex.state(conn)
        assert chunks == 2 and rows == 2 * wordindex.CHUNK - 1  # ids start at 1
        # chunks 0 and 1 merged: one row a term, keyed by chunk 0 (the 1,808 rows above
        # them: a recent block)
        assert {r[0] for r in conn.execute(
            f"SELECT DISTINCT id & {wordrows.CHUNK_MASK} FROM word_blobs")} == {0}
    found = sum(compare(store, q) for q in QUESTIONS)
    assert found > 100
    for q in QUESTIONS[:4]:
        compare(store, q, limit=1)
        compare(store, q, limit=300)


def test_appends_deletes_and_rewrites_stay_exact(store: SQLiteStore) -> None:
    rng = random.Random(11)
    sessions = fill(store, rng, 6, 1500)
    store.seal_word_index()
    for q in QUESTIONS[:3]:
        compare(store, q)
    # a session in the sealed chunks goes, a rewind, a message rewritten in place
    store.delete_session(sessions[1])
    with store.db.write() as conn:
        conn.execute("UPDATE messages SET text = 'caroline caroline support' WHERE id = 10")
        conn.execute("UPDATE messages SET text = 'alpha' WHERE id = 8500")  # the tail
    store.rewind(sessions[0], 100)
    fill(store, rng, 1, 700)
    for q in QUESTIONS:
        compare(store, q)
    with store.db.read() as conn:
        assert not conn.execute("SELECT count(*) FROM word_changes").fetchone()[0]
    hits = store.search(SearchQuery("caroline support", limit=1))
    assert hits and hits[0].content == "caroline caroline support"


def _watch_phrase_reads(store: SQLiteStore,
                        monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], set[int]]:
    """The text test forced (the pair's postings would be few enough here to ask FTS5
    instead): the ids whose text it reads (filled as it reads them), and the rows holding both
    words of "support group"."""
    from refold.store.sqlite import natural

    monkeypatch.setattr(natural, "phrase_by_index", lambda postings, candidates, limit: False)
    read: list[int] = []
    phrases = natural._phrases
    monkeypatch.setattr(natural, "_phrases",
                        lambda conn, plan, ids: read.extend(ids) or phrases(conn, plan, ids))
    with store.db.read() as conn:
        both = {int(r[0]) for r in conn.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'support AND group'")}
    return read, both


def test_the_phrase_test_reads_only_rows_that_can_place(store: SQLiteStore,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows holding both words of a pair, adjacent or not, compete for the phrase boost: the
    best come out exactly as FTS5 ranks them, and rows that cannot reach the top are never
    read for the phrase test (nor rows lacking one of the pair's words)."""
    rng = random.Random(23)
    session = store.create_session()
    rows = []
    for n in range(6000):
        filler = " ".join(rng.choice(VOCAB[:12]) for _ in range(rng.choice((2, 6, 15))))
        long = " ".join(rng.choice(VOCAB[:12]) for _ in range(15))
        kind = n % 20
        rows.append({"role": "user", "content": (
            f"{long} support group {long}" if kind == 0 else
            f"support {long} group" if kind == 1 else
            "support support support" if kind == 2 else  # a high score, but no "group"
            f"group {filler}" if kind == 3 else filler)})
    store.append_messages(session.id, rows)
    store.seal_word_index()
    read, both = _watch_phrase_reads(store, monkeypatch)
    for limit in (1, 20, 200):
        read.clear()
        compare(store, "the support group", limit=limit)
        plan = parse_query("the support group").natural
        assert plan is not None and plan.pairs
        assert read and set(read) <= both  # a row without both words cannot hold the phrase
        assert len(read) < len(both)  # ... and most of those cannot place


def test_the_phrase_test_reads_no_row_lacking_a_word_of_each_pair(
        store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows that score high on one word of the pair alone can place, but cannot hold the
    phrase: their text is never read for the phrase test (on a cold cache each costs a page),
    and the best come out as FTS5 ranks them."""
    session = store.create_session()
    rows = [{"role": "user", "content": "support support support" if n % 3 == 0 else
             "support group" if n % 50 == 1 else "group the alpha beta gamma delta epsilon"}
            for n in range(6000)]
    store.append_messages(session.id, rows)
    store.seal_word_index()
    read, both = _watch_phrase_reads(store, monkeypatch)
    for limit in (20, 200, 400):
        read.clear()
        assert compare(store, "the support group", limit=limit) == limit
        assert set(read) <= both


def test_the_phrase_test_through_the_index_reads_no_text_and_ranks_the_same(
        store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the pair words' postings are few, one FTS5 phrase query tests every candidate:
    no candidate's text is read, and the best come out as the text test and FTS5 give them."""
    from refold.store.sqlite import natural

    rng = random.Random(5)
    fill(store, rng, 4, 2500)
    store.seal_word_index()
    read: list[int] = []
    phrases = natural._phrases
    monkeypatch.setattr(natural, "_phrases",
                        lambda conn, plan, ids: read.extend(ids) or phrases(conn, plan, ids))
    results = {}
    for path in (True, False):
        monkeypatch.setattr(natural, "phrase_by_index",
                            lambda postings, candidates, limit, path=path: path)
        read.clear()
        results[path] = [compare(store, q, limit=limit) for q in QUESTIONS
                         for limit in (1, 20, 200)]
        assert bool(read) is (not path)  # the index path reads no row's text
    assert results[True] == results[False] and sum(results[True]) > 100


def test_the_phrase_test_asks_the_index_when_its_words_are_rare() -> None:
    from refold.store.sqlite.natural import phrase_by_index

    assert phrase_by_index(3_000, candidates=5_000, limit=20)  # ~11 pages against ~60
    assert not phrase_by_index(300_000, candidates=5_000, limit=20)  # ~300 pages
    assert not phrase_by_index(30_000, candidates=3, limit=20)  # three rows: read them
    assert not phrase_by_index(None, candidates=5_000, limit=20)  # unknown postings


def test_a_first_search_over_a_long_tail_reads_only_the_rows_its_words_match(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process's first search over a long unsealed tail (a CLI search) tokenizes only the
    tail rows FTS5 matches for its words, with the same ranks as the filled tail gives; the
    next search fills the tail; a disagreement between FTS5 and the tokenizer falls back."""
    monkeypatch.setattr(wordindex, "RECENT_ROWS", 10**9)  # no recent block: a long tail
    path = str(tmp_path / "refold.db")
    store = SQLiteStore(path)
    rng = random.Random(17)
    fill(store, rng, 3, 2000)  # one sealed chunk, a tail of ~1,900 rows
    store.seal_word_index()
    with store.db.read() as conn:
        chunks = wordindex.state(conn)[0]
        assert chunks == 1 and indexer.watermark(conn) - chunks * wordindex.CHUNK > 1000
    tokenized: list[int] = []
    real_counts = wordindex.Tokenizer.term_counts

    def counting(self: wordindex.Tokenizer, rows: list[tuple[int, str]],
                 terms: object) -> dict[str, dict[int, int]]:
        rows = list(rows)
        tokenized.append(len(rows))
        return real_counts(self, rows, terms)  # type: ignore[arg-type]

    monkeypatch.setattr(wordindex.Tokenizer, "term_counts", counting)
    question = "what about theta and zeta"
    wordindex._TAILS.clear()  # a new process
    first = compare(store, question)
    tail = wordindex.tail_for(path)
    assert tokenized and 0 < tokenized[0] < 1000  # the matching rows, not the whole tail
    assert tail.through < 0  # not filled
    again = compare(store, question)  # the second search fills the tail: the same answer
    assert again == first and tail.through > 0
    # FTS5 matching a row the tokenizer does not count: the whole tail is read instead
    wordindex._TAILS.clear()
    monkeypatch.setattr(wordindex.Tokenizer, "term_counts",
                        lambda self, rows, terms: {t: {} for t in terms})
    assert compare(store, question) == first
    assert wordindex.tail_for(path).through > 0


def test_ids_reused_under_the_sealed_chunks(store: SQLiteStore) -> None:
    rng = random.Random(13)
    sessions = fill(store, rng, 3, 3000)
    store.seal_word_index()  # chunks 0 and 1 sealed: ids up to 8191
    store.delete_session(sessions[2])  # ids 6001-9000: the newest rows go
    with store.db.read() as conn:
        assert conn.execute("SELECT max(id) FROM messages").fetchone()[0] == 6000
    fill(store, rng, 1, 500)  # ids 6001-6500 again, inside sealed chunk 1
    for q in QUESTIONS[:5]:
        compare(store, q)
    with store.db.read() as conn:
        assert not conn.execute("SELECT count(*) FROM word_changes").fetchone()[0]


def test_filters_take_the_best_allowed(store: SQLiteStore) -> None:
    rng = random.Random(5)
    sessions = fill(store, rng, 4, 2500)
    store.seal_word_index()
    compare(store, "caroline support group", source="b")
    compare(store, "running file object", session_id=sessions[2])
    store.rewind(sessions[1], 2000, any_role=True)
    compare(store, "caroline support group", session_id=sessions[1], role="user")
    compare(store, "caroline support group", session_id=sessions[1], include_inactive=True)
    compare(store, "caroline support group", include_inactive=True)  # rewound rows count too
    compare(store, "caroline support group", session_id=sessions[1], limit=400)
    compare(store, "alpha beta", role="assistant")
    compare(store, "theta deploy", exclude_session_id=sessions[0])


def test_a_second_process_sees_the_first_ones_writes(tmp_path: Path) -> None:
    path = str(tmp_path / "refold.db")
    one, two = SQLiteStore(path), SQLiteStore(path)
    rng = random.Random(2)
    fill(one, rng, 3, 3000)
    one.seal_word_index()
    compare(two, "caroline support")  # two fills its tail
    fill(one, rng, 1, 200)
    with one.db.write() as conn:
        conn.execute("DELETE FROM messages WHERE id = 9000")
    one.catch_up_index()
    compare(two, "caroline support")
    compare(two, "alpha beta gamma")


def test_an_archive_with_a_long_unsealed_tail_uses_fts5_until_sealed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wordindex, "RECENT_ROWS", 10**9)  # no recent block: a long tail
    path = tmp_path / "refold.db"
    store = SQLiteStore(str(path))
    fill(store, random.Random(3), 5, 3000)  # more rows above the sealed chunks than MAX_TAIL
    plan = parse_query("caroline support").natural
    assert plan is not None
    with store.db.read() as conn:
        assert fast_scores(conn, plan, SearchQuery("caroline support"), 20) is None
    assert store.seal_word_index() == 3
    compare(store, "caroline support")


def test_small_archives_never_load_the_index(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wordindex, "MIN_ROWS", 8 * wordindex.CHUNK)
    store = SQLiteStore(str(tmp_path / "refold.db"))
    fill(store, random.Random(4), 3, 3000)
    store.search(SearchQuery("caroline support"))  # a search seals nothing here
    with store.db.read() as conn:
        assert wordindex.state(conn)[0] == 0
        assert fast_scores(conn, parse_query("caroline support").natural,  # type: ignore[arg-type]
                           SearchQuery("caroline support"), 20) is None


def test_words_fts5_splits_into_a_phrase(store: SQLiteStore) -> None:
    rng = random.Random(1)
    fill(store, rng, 2, 3000)
    session = store.create_session()
    store.append_messages(session.id, [
        {"role": "user", "content": "e-mail the e mail e-mail: mail e e-mail"},
        {"role": "user", "content": "os.path.join and os path join, os.path"},
        {"role": "user", "content": "mail e"}])
    store.seal_word_index()
    # "dotted.names" is a phrase term; "e-mail" two tokens, a phrase: counted as FTS5 counts
    for q in ("what about dotted.names and e-mail", "send the e-mail via os.path.join",
              "os.path for caroline", "café e-mail support"):
        compare(store, q)
    with store.db.write() as conn:
        conn.execute("UPDATE messages SET text = 'e mail e mail e mail' WHERE id = 5")
    store.catch_up_index()  # what every search does first: the rewrite is folded in
    compare(store, "the e-mail and mail")


def test_tokens_are_fts5s() -> None:
    tok = wordindex.tokenizer()
    assert tok.word("Running") == ("run",)
    assert tok.word("café") == ("cafe",)
    assert tok.word("e-mail") == ("e", "mail")
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(text, tokenize='porter unicode61 "
                 "remove_diacritics 2')")
    conn.execute("INSERT INTO t VALUES ('Deployments were running')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    assert [r[0] for r in conn.execute("SELECT term FROM v ORDER BY offset")] == [
        tok.word(w)[0] for w in ("Deployments", "were", "running")]


def compare_term(store: SQLiteStore, word: str, limit: int = 20, **filters: object) -> int:
    """A one-word query: the index's ranked ids equal FTS5's ``ORDER BY rank, rowid DESC``."""
    parsed = parse_query(word)
    query = SearchQuery(word, limit=limit, **filters)  # type: ignore[arg-type]
    with store.db.read() as conn:
        fast = store._indexed(conn, parsed, query, limit)
        assert fast is not None, "the index must answer this query"
        reference = store._ranked(conn, "messages_fts", parsed.fts5_expression(),
                                  [t.fts5() for t in parsed.terms], ("", []), query, limit)
    assert fast == reference
    return len(fast)


def test_one_word_queries_rank_as_fts5(store: SQLiteStore) -> None:
    rng = random.Random(17)
    sessions = fill(store, rng, 5, 2000)
    store.seal_word_index()
    assert sum(compare_term(store, w) for w in ("caroline", "deployment", "café", "failed")) \
        == 80
    compare_term(store, "caroline", limit=500)
    compare_term(store, "runs", source="a")
    compare_term(store, "deploy", session_id=sessions[3])
    compare_term(store, "e-mail")  # no match: an empty list from both
    hits = store.search(SearchQuery("caroline", limit=5))
    assert len(hits) == 5 and all("caroline" in h.content for h in hits)


ZH = ["我们", "昨天", "部署", "了", "新的", "服务器", "然后", "测试", "失败", "了", "因为", "缓存", "没有", "清理", "数据库", "迁移", "完成"]


def zh_text(rng: random.Random) -> str:
    return "".join(rng.choice(ZH) for _ in range(rng.choice((2, 5, 12, 40))))


def test_chinese_questions_rank_as_before(store: SQLiteStore,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from refold.store.sqlite.natural import cjk_best

    monkeypatch.setattr(cjklen, "MANY", 0)  # the C readers weigh every question from blocks

    rng = random.Random(23)
    sessions = []
    for _ in range(3):
        session = store.create_session()
        store.append_messages(session.id, [
            {"role": "user", "content": zh_text(rng) if rng.random() < 0.7 else text(rng)}
            for _ in range(1500)])
        sessions.append(session.id)
    store.rewind(sessions[1], 700)
    store.delete_session(sessions[2])
    with store.db.write() as conn:
        conn.execute("UPDATE messages SET text = '部署部署失败' WHERE id = 3")
        conn.execute("UPDATE messages SET text = 'no longer chinese' WHERE id = 4")
    store.catch_up_index()
    with store.db.read() as conn:  # the narrow table holds exactly the indexed CJK rows
        want = conn.execute("SELECT id, length(text), active FROM messages WHERE has_cjk = 1 "
                            "ORDER BY id").fetchall()
        assert conn.execute("SELECT id, chars, active FROM cjk_lengths ORDER BY id"
                            ).fetchall() == want

    def same_as_the_dict_path() -> None:
        for question in ("我们什么时候部署了服务器？", "测试为什么失败了", "缓存清理了吗",
                         "数据库迁移完成了吗"):
            for include_inactive in (False, True):
                query = SearchQuery(question, include_inactive=include_inactive)
                plan = parse_query(question).natural
                assert plan is not None and plan.cjk and not plan.words
                with store.db.read() as conn:
                    fast = cjk_best(conn, plan, query, 20)
                    assert fast is not None
                    reference = natural_scores(conn, plan, query, 20, scan=True)
                assert [(i, fast[i]) for i in best_first(fast, 20)] == \
                    [(i, reference[i]) for i in best_first(reference, 20)]
                assert len(fast) >= 20

    # the first question joins in SQL, the rest use the NumPy copy (or, with the C readers,
    # every one the packed blocks)
    same_as_the_dict_path()
    store.rewind(sessions[0], 1200)  # active flags change: the copy reloads
    same_as_the_dict_path()
    session = store.create_session()  # rows added above: the copy extends
    store.append_messages(session.id, [{"role": "user", "content": zh_text(rng)}
                                       for _ in range(400)])
    store.catch_up_index()
    same_as_the_dict_path()
    with store.db.read() as conn:
        path = wordindex.database_path(conn)
        assert path is not None
        if cjklen.blocks_usable():
            assert cjklen.lengths_for(path).ids is None  # no copy loaded
            return
        copy = cjklen.lengths_for(path).current(conn, path)
        assert copy is not None
        assert copy.ids.tolist() == [r[0] for r in conn.execute(
            "SELECT id FROM cjk_lengths ORDER BY id")]


def test_glued_chunks_in_cjk_text_score_the_same_on_the_index_and_fts5(
        store: SQLiteStore) -> None:
    rng = random.Random(6)
    fill(store, rng, 3, 1500)
    s = store.create_session()
    store.append_messages(s.id, [
        {"role": "user", "content": f"第{n}次用Config.toml读取{'测试' * (n % 3)}"}
        for n in range(40)])
    store.append_messages(s.id, [{"role": "user", "content": "caroline 用 config.toml 跑"},
                                 {"role": "user", "content": "the config toml file"}])
    store.seal_word_index()
    for question in ("config.toml", "did caroline read config.toml?",
                     "config.toml support group"):
        plan = parse_query(question).natural or parse_query(question).glued
        assert plan is not None and plan.chunks == (("config toml", "config.toml"),)
        assert compare(store, question) == 20
        with store.db.read() as conn:
            scores = natural_scores(conn, plan, SearchQuery(question), 20, scan=True)
        assert sum(1 for i in scores if i > 4500) == 42  # every glued one, and the two words


def test_a_date_span_of_two_characters_ranks_the_same_on_every_path(
        store: SQLiteStore) -> None:
    """``6号`` (a digit joined to one CJK letter: its letter's gram, then the text) scores the
    same through the NumPy CJK path, the word impact index and FTS5, and never in ``16号``."""
    from refold.store.sqlite.natural import cjk_best

    rng = random.Random(29)
    session = store.create_session()
    store.append_messages(session.id, [
        {"role": "user", "content": rng.choice(("", "6号", "16号", "在6号", "6 号")) + (
            zh_text(rng) if rng.random() < 0.6 else " " + text(rng))} for _ in range(3000)])
    store.seal_word_index()
    for question in ("6号部署了什么", "6号的测试失败了吗", "6号部署了什么"):  # (2nd: the copy)
        plan = parse_query(question).natural
        assert plan is not None and "6号" in plan.cjk and not plan.words
        query = SearchQuery(question)
        with store.db.read() as conn:
            fast = cjk_best(conn, plan, query, 20)
            assert fast is not None
            reference = natural_scores(conn, plan, query, 20, scan=True)
            held = {int(r[0]) for r in conn.execute(
                "SELECT id FROM messages WHERE text GLOB '*6号*' AND NOT text GLOB '*16号*'")}
        assert [(i, fast[i]) for i in best_first(fast, 20)] == \
            [(i, reference[i]) for i in best_first(reference, 20)]
        assert held & set(reference) == held  # every message holding the span is a match
    assert compare(store, "6号 build failure of the deployment") == 20
    with store.db.read() as conn:
        scores = natural_scores(conn, parse_query("6号 zzzz").natural,  # type: ignore[arg-type]
                                SearchQuery("6号 zzzz"), 20, scan=True)
        assert set(scores) == held


def test_wide_counts_and_lengths(store: SQLiteStore) -> None:
    """A word 300 times in one message (a count over one byte) and a message of 70,000
    tokens (a length over two bytes): stored wide, merged, edited, ranked exactly."""
    rng = random.Random(29)
    session = store.create_session()
    rows = [{"role": "user", "content": text(rng)} for _ in range(9000)]
    rows[100] = {"role": "user", "content": "caroline " * 300 + "support"}
    rows[5000] = {"role": "user", "content": " ".join(rng.choice(VOCAB) for _ in range(70_000))}
    store.append_messages(session.id, rows)
    store.seal_word_index()  # chunks 0 and 1, merged (SEGMENT is 2 here)
    with store.db.read() as conn:
        widths = {(len(t) // (len(i) // 2), len(n) // (len(i) // 2)) for i, t, n in
                  conn.execute("SELECT ids, tfs, lens FROM word_blobs")}
    assert (2, 4) in widths and (1, 2) in widths
    for q in ("caroline support group", "running file object", "alpha beta"):
        compare(store, q)
    compare_term(store, "caroline")
    with store.db.write() as conn:  # the long message rewritten short: its rows narrow again
        conn.execute("UPDATE messages SET text = 'caroline support' WHERE id = 5001")
    store.catch_up_index()
    compare(store, "caroline support group")
    compare_term(store, "caroline")


def test_a_chunk_changed_while_it_was_tokenized_is_not_written(store: SQLiteStore) -> None:
    fill(store, random.Random(31), 2, 3000)
    store.seal_word_index()
    with store.db.read() as conn:
        assert wordindex.state(conn)[0] == 1
    fill(store, random.Random(32), 1, 3000)  # chunk 1 complete now
    store.catch_up_index()  # a search seals chunk 1
    with store.db.read() as conn:
        sealed = wordindex.state(conn)[0]
    assert sealed == 2
    fill(store, random.Random(33), 1, 4000)  # chunk 2 complete, not sealed yet
    with store.db.write() as conn:
        indexer.index_pending(conn)
    with store.db.read() as conn:
        plan = wordseal.prepare_seal(conn)
    assert plan is not None and plan.chunk == 2
    with store.db.write() as conn:  # a writer deletes a row of chunk 2 meanwhile
        conn.execute("DELETE FROM messages WHERE id = 9000")
    with store.db.write() as conn:
        assert not wordseal.commit_seal(conn, plan)
    assert store.seal_word_index() == 1
    compare(store, "caroline support group")


def test_doctor_repair_empties_the_index_and_it_seals_again(store: SQLiteStore) -> None:
    fill(store, random.Random(41), 3, 3000)
    store.seal_word_index()
    with store.db.write() as conn:  # damage: a term's postings lost
        conn.execute(f"DELETE FROM word_blobs WHERE id >> {wordrows.CHUNK_BITS} = "
                     "(SELECT min(tid) FROM word_terms)")
    store.rebuild_search_indexes()
    with store.db.read() as conn:
        assert wordindex.state(conn)[:3] == (0, 0, 0)
        assert not conn.execute("SELECT count(*) FROM word_blobs").fetchone()[0]
    assert store.seal_word_index() == 2
    for q in QUESTIONS[:4]:
        compare(store, q)


def test_a_lost_cjk_length_is_reported_and_repaired(store: SQLiteStore) -> None:
    from refold.store.sqlite.indexcheck import index_gaps

    session = store.create_session()
    store.append_messages(session.id, [{"role": "user", "content": "部署失败了"} for _ in range(20)])
    store.catch_up_index()
    with store.db.write() as conn:
        conn.execute("DELETE FROM cjk_lengths WHERE id = 3")
    with store.db.read() as conn:
        assert index_gaps(conn) == ["cjk_lengths holds 19 of 20 rows"]
    store.rebuild_search_indexes()
    with store.db.read() as conn:
        assert index_gaps(conn) == []


def test_a_failed_tokenizer_use_leaves_no_rows_behind() -> None:
    tok = wordindex.tokenizer()

    def rows() -> Iterator[tuple[int, str]]:
        yield 1, "caroline caroline"
        raise RuntimeError("a text source that fails midway")

    with pytest.raises(RuntimeError):
        tok.counts(rows())
    assert tok.counts([(7, "support")]) == [("support", 7, 1)]


def test_which_ids_hold_a_term_whatever_order_its_postings_come_in() -> None:
    import numpy as np

    scores = wordindex.WordScores(np.zeros(10), np.zeros(10, dtype=np.uint8),
                                  np.zeros(0, dtype=np.int64),
                                  [np.array([5, 1, 3]), np.array([2, 4]),
                                   np.zeros(0, dtype=np.int64)])
    asked = np.array([1, 2, 3, 5, 9])
    assert scores.holding(0, asked).tolist() == [True, False, True, True, False]
    assert scores.holding(1, asked).tolist() == [False, True, False, False, False]
    assert scores.holding(2, asked).tolist() == [False] * 5


def test_glued_words_in_cjk_text_score_the_same_on_the_index_and_fts5(
        store: SQLiteStore) -> None:
    rng = random.Random(5)
    fill(store, rng, 3, 1500)
    s = store.create_session()
    store.append_messages(s.id, [
        {"role": "user", "content": f"第{n}次用pytest跑{'测试' * (n % 3)}"} for n in range(40)])
    store.append_messages(s.id, [{"role": "user", "content": "caroline 用 pytest 跑"}])
    store.seal_word_index()
    for question in ("pytest", "did caroline run pytest?", "pytest support group"):
        plan = parse_query(question).natural or parse_query(question).glued
        assert plan is not None and "pytest" in plan.glued
        compare(store, question)


def _recent_keys(store: SQLiteStore) -> set[int]:
    with store.db.read() as conn:
        return {int(r[0]) for r in conn.execute(
            f"SELECT DISTINCT start FROM {wordindex.RECENT_TABLE}")}


def test_recent_blocks_rank_exactly_and_leave_a_fresh_process_a_short_tail(
        tmp_path: Path) -> None:
    """The rows above the sealed chunks are sealed in recent blocks as they are indexed, so a
    new process tokenizes only the few above them; a row of theirs rewritten or deleted (or an id
    of theirs inserted anew) leaves them out of every search until a new block replaces them;
    a sealed chunk replaces them. Ranks stay FTS5's throughout."""
    path = str(tmp_path / "refold.db")
    store = SQLiteStore(path)
    rng = random.Random(29)
    sessions = fill(store, rng, 3, 3000)  # chunks 0 and 1, and the 808 rows above
    store.seal_word_index()
    with store.db.read() as conn:
        index = wordindex.sealed(conn)
        assert (index.chunks, index.low, index.recent) == (2, 9001, True)
    assert _recent_keys(store) == {8192}
    wordindex._TAILS.clear()  # a new process
    assert sum(compare(store, q) for q in QUESTIONS) > 100
    assert not wordindex.tail_for(path).lengths  # nothing above the blocks to tokenize
    fill(store, rng, 1, 300)  # 300 more, indexed as they are stored: a second block
    assert _recent_keys(store) == {8192, 9001}
    assert compare(store, QUESTIONS[0]) and not wordindex.tail_for(path).lengths
    for q in QUESTIONS:
        compare(store, q)
    for edit in ("UPDATE messages SET text = 'caroline caroline support' WHERE id = 9100",
                 "DELETE FROM messages WHERE id = 9200"):
        with store.db.write() as conn:
            conn.execute(edit)
        with store.db.read() as conn:  # stale: left out, the tail covers their rows
            assert not wordindex.sealed(conn).recent
        for q in QUESTIONS[:4]:
            compare(store, q)
        fill(store, rng, 1, 40)  # the next rows indexed: one new block for them all
        assert _recent_keys(store) == {8192}
        for q in QUESTIONS[:4]:
            compare(store, q)
    store.delete_session(sessions[0])  # rows under the sealed chunks: folded in
    fill(store, rng, 1, 3100)  # chunk 2 completes: sealed, its blocks go
    store.catch_up_index()
    with store.db.read() as conn:
        assert wordindex.sealed(conn).chunks == 3
    store.seal_word_index()  # the 193 rows above chunk 2: too few for a block
    assert _recent_keys(store) == set()
    for q in QUESTIONS:
        compare(store, q)
    hits = store.search(SearchQuery("caroline support", limit=1))
    assert hits and hits[0].content == "caroline caroline support"


def test_the_ids_of_recent_blocks_deleted_and_stored_anew(store: SQLiteStore) -> None:
    rng = random.Random(37)
    sessions = fill(store, rng, 3, 3000)
    store.seal_word_index()
    assert _recent_keys(store) == {8192}
    store.delete_session(sessions[2])  # ids 6001-9000: the blocks' rows go
    store.catch_up_index()  # (the chunk's rows deleted folded in)
    with store.db.read() as conn:
        assert not wordindex.sealed(conn).recent
    for q in QUESTIONS[:5]:
        compare(store, q)
    fill(store, rng, 1, 2500)  # ids 6001-8500 again: a new block from 8192 holds theirs
    with store.db.read() as conn:
        assert wordindex.sealed(conn).recent
    assert _recent_keys(store) == {8192}
    for q in QUESTIONS[:5]:
        compare(store, q)


def test_a_recent_block_written_halfway_is_never_seen(store: SQLiteStore,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(41)
    fill(store, rng, 3, 3000)
    assert store.seal_word_index() == 2  # (its recent block: below, it fails halfway)
    with store.db.write() as conn:
        wordseal.reset(conn)
    store.seal_word_index()
    with store.db.write() as conn:  # the recent block dropped: its rows in the tail again
        wordseal._drop_recent(conn)

    def halfway(conn: sqlite3.Connection, plan: wordseal.Recent) -> bool:
        conn.executemany(f"INSERT OR REPLACE INTO {wordindex.RECENT_TABLE} VALUES (?, ?, ?, ?, ?)",
                         plan.postings[:len(plan.postings) // 2])
        raise KeyboardInterrupt  # the process interrupted mid-write
    monkeypatch.setattr(wordseal, "commit_recent", halfway)
    with pytest.raises(KeyboardInterrupt):
        store.seal_word_index()
    assert _recent_keys(store) == set()
    for q in QUESTIONS:
        compare(store, q)


_SEALER = """
import random, sys
from refold.store.sqlite import wordindex
from refold.store.sqlite.store import SQLiteStore
wordindex.MIN_ROWS, wordindex.SEGMENT = 0, 2
store = SQLiteStore(sys.argv[1])
rng = random.Random(int(sys.argv[2]))
words = sys.argv[3].split()
session = store.create_session().id
print("ready", flush=True)
while True:
    store.append_messages(session, [{"role": "user", "content": " ".join(
        rng.choice(words) for _ in range(rng.choice((3, 12, 40))))} for _ in range(90)])
    store.seal_word_index()
"""


def test_a_process_killed_while_it_seals_leaves_the_index_exact(tmp_path: Path) -> None:
    """A process appending and sealing chunks and recent blocks, killed at random moments:
    whatever it committed, the index still ranks as FTS5 does."""
    import os
    import signal
    import subprocess
    import sys
    import time

    path = str(tmp_path / "refold.db")
    SQLiteStore(path).close()
    rng = random.Random(43)
    for seed in range(4):
        child = subprocess.Popen([sys.executable, "-c", _SEALER, path, str(seed),
                                  " ".join(VOCAB)], stdout=subprocess.PIPE, env=os.environ)
        assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.3, 1.2))
        child.send_signal(signal.SIGKILL)
        child.wait()
        store = SQLiteStore(path)
        with store.db.read() as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        for q in QUESTIONS[:6]:
            compare(store, q)
        store.close()
    store = SQLiteStore(path)
    store.catch_up_index()
    with store.db.read() as conn:
        assert wordindex.state(conn)[0] >= 1  # chunks were sealed on the way
