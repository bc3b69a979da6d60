"""The word impact index scored without NumPy (``store/sqlite/plainscore.py``) gives what the
NumPy path gives: the same ids, in the same order, with the same scores to the bit, on varied
corpora (skewed word frequencies, repeated words, long and short messages, phrases, CJK, glued
words, filters, a tail); and a fresh process searching a few postings never imports NumPy.
(``test_word_index.py`` runs all its FTS5 comparisons on both paths as well.)"""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from refold.search.query import parse_query
from refold.search.rank import best_first
from refold.store.base import SearchQuery
from refold.store.sqlite import indexer, plainscore, wordindex
from refold.store.sqlite.natural import fast_scores
from refold.store.sqlite.store import SQLiteStore

WORDS = ["alpha", "beta", "gamma", "delta", "running", "runs", "file", "files", "object",
         "support", "group", "groups", "deploy", "deployment", "build", "failed", "cache",
         "café", "naïve", "e-mail", "docker-compose", "the", "of", "to", "is", "and",
         "caroline", "went", "talked", "zeta", "theta", "ticket"]
QUESTIONS = ["when did caroline go to the support group", "alpha beta", "alpha alpha beta",
             "running file object", "why is the cache so slow", "café naïve",
             "send the e-mail about docker-compose", "the support group deployment failed",
             "talked about groups of files", "zeta", "theta ticket went",
             "build failure on 5月6号 部署", "用docker部署 cache", "missingword alpha",
             "deploy 部署失败"]


def message(rng: random.Random, skew: float) -> str:
    """A message whose words follow a Zipf-like law of exponent ``skew`` (0: uniform);
    some repeat a word many times (term frequencies past one byte), some carry CJK, some a
    word glued to CJK text."""
    weights = [1.0 / (rank + 1) ** skew for rank in range(len(WORDS))]
    size = rng.choice((1, 2, 4, 9, 25, 80))
    words = rng.choices(WORDS, weights, k=size)
    roll = rng.random()
    if roll < 0.01:
        words += [rng.choice(WORDS)] * 300
    elif roll < 0.06:
        words.append(rng.choice(("部署失败了", "用docker部署", "5月6号的构建")))
    return " ".join(words)


def archive(path: Path, seed: int, skew: float, rows: int) -> SQLiteStore:
    store = SQLiteStore(str(path))
    rng = random.Random(seed)
    per = rows // 4
    for n in range(4):
        session = store.create_session(source=("a", "b")[n % 2])
        store.append_messages(session.id, [
            {"role": rng.choice(("user", "assistant")), "content": message(rng, skew)}
            for _ in range(per)])
    store.seal_word_index()
    return store


def answer(store: SQLiteStore, question: str, limit: int, plain: bool,
           monkeypatch: pytest.MonkeyPatch, **filters: object) -> list[tuple[int, float]] | None:
    postings = 10**12 if plain else -1
    monkeypatch.setattr(plainscore, "PLAIN_WARM", postings)
    monkeypatch.setattr(plainscore, "PLAIN_BUDGET", postings)
    parsed = parse_query(question)
    plan = parsed.natural or parsed.glued
    assert plan is not None
    query = SearchQuery(question, limit=limit, **filters)  # type: ignore[arg-type]
    with store.db.read() as conn:
        scores = fast_scores(conn, plan, query, limit)
    return None if scores is None else [(i, scores[i]) for i in best_first(scores, limit)]


@pytest.fixture(autouse=True)
def small_archives_use_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REFOLD_NATIVE", "0")  # the Python paths (test_native_score.py: C)
    monkeypatch.setattr(wordindex, "MIN_ROWS", 0)
    monkeypatch.setattr(wordindex, "SEGMENT", 2)


@pytest.mark.parametrize(("seed", "skew"), [(1, 0.0), (2, 1.0), (3, 2.0)])
def test_plain_scores_are_numpys_to_the_bit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            seed: int, skew: float) -> None:
    store = archive(tmp_path / "refold.db", seed, skew, 9000)  # two sealed chunks and a tail
    sessions = [s.id for s in store.list_sessions()]
    answered = 0
    for question in QUESTIONS:
        for limit, filters in ((1, {}), (20, {}), (300, {}), (20, {"source": "b"}),
                               (20, {"session_id": sessions[1]}), (20, {"role": "user"})):
            plain = answer(store, question, limit, True, monkeypatch, **filters)
            numpy = answer(store, question, limit, False, monkeypatch, **filters)
            assert plain == numpy, (question, limit, filters)
            answered += bool(plain)
    assert answered > 60


@pytest.mark.parametrize("skew", [1.0, 2.0])
def test_leaving_common_words_out_changes_no_score(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   skew: float) -> None:
    """``_pruned`` (a question's commonest words weighed only for the messages of its rarer
    ones) gives what weighing every message gives, and does engage on such questions."""
    store = archive(tmp_path / "refold.db", 6, skew, 12000)
    engaged = []
    pruned = plainscore._pruned

    def counting(*args: object) -> dict[int, float] | None:
        found = pruned(*args)  # type: ignore[arg-type]
        engaged.append(found is not None)
        return found

    monkeypatch.setattr(plainscore, "_pruned", counting)
    questions = [*QUESTIONS, "alpha ticket", "the alpha and beta of theta", "caroline alpha",
                 "alpha beta gamma delta went", "why is the alpha cache running to zeta"]
    for question in questions:
        for limit in (1, 20, 300):
            got = []
            for prune_from in (0, 10**12):
                monkeypatch.setattr(plainscore, "PRUNE_FROM", prune_from)
                got.append(answer(store, question, limit, True, monkeypatch))
            assert got[0] == got[1], (question, limit)
            assert got[0] == answer(store, question, limit, False, monkeypatch)
    assert sum(engaged) >= 5


def test_a_words_bound_is_never_under_its_weight_in_a_message(tmp_path: Path) -> None:
    """``_bound`` (what a word weighs at most in one message: how ``_pruned`` decides a word
    cannot place a message alone) is at least the word's weight in every message holding it,
    sealed rows and tail alike, and tighter than pairing the highest frequency with the
    shortest length."""
    store = archive(tmp_path / "refold.db", 5, 1.0, 9000)  # sealed chunks, a tail, tf > 255
    looser = 0
    with store.db.read() as conn:
        through = indexer.watermark(conn)
        asked = [(word, parse_query(word).terms[0].fts5()) for word in WORDS]
        gathered = wordindex.gather(conn, asked, through)
        assert gathered is not None and gathered.tail
        for made in gathered.made:
            if len(made) != 1:  # (a phrase: "e-mail")
                continue
            token = made[0]
            weight = plainscore._weigher(gathered, plainscore._hits(gathered, token)).__getitem__
            weights = plainscore._weigh(gathered, token, weight)
            bound = plainscore._bound(gathered, token, weight)
            ids, tfs, lengths = plainscore.postings(gathered.parts[token],
                                                    gathered.tail[token], gathered.tail_lengths)
            assert len(weights) == len(ids) > 0, token
            assert bound >= max(weights.values()), token
            assert bound <= weight((max(tfs), min(lengths))), token
            looser += bound < weight((max(tfs), min(lengths)))
    assert looser >= len(WORDS) // 2, looser


def test_one_word_plain_ranks_are_numpys(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    store = archive(tmp_path / "refold.db", 4, 1.0, 9000)
    found = 0
    with store.db.read() as conn:
        through = indexer.watermark(conn)
        for word in [*WORDS, "nothing"]:
            term = parse_query(word).terms[0]
            for limit in (1, 7, 60, 5000):
                got = []
                for postings in (10**12, -1):
                    monkeypatch.setattr(plainscore, "PLAIN_WARM", postings)
                    got.append(wordindex.best_of_term(conn, " ".join(term.words), term.fts5(),
                                                      through, limit))
                assert got[0] == got[1], (word, limit)
                found += len(got[0] or ())
    assert found > 1000


def test_the_plain_path_is_for_few_postings_or_until_numpy_would_have_paid(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gathered = wordindex.Gathered((("alpha", "alpha"),), (("alpha",),),
                                  {"alpha": [(0, b"\0\0" * 5000, b"\1" * 5000, b"\0\1" * 5000)]},
                                  {"alpha": [(9000, 1)]}, {9000: 3}, 9001, 3.0)
    assert gathered.postings() == 5001
    monkeypatch.setattr(plainscore, "PLAIN_WARM", 6000)
    monkeypatch.setattr(plainscore, "PLAIN_BUDGET", 12000)
    monkeypatch.setattr(plainscore, "_spent", 0)
    assert "numpy" in sys.modules  # (pytest's plugins import it)
    assert plainscore.use_plain(gathered)  # few postings: here, NumPy or not
    monkeypatch.setattr(plainscore, "PLAIN_WARM", 4000)
    monkeypatch.setattr(plainscore, "PLAIN_FIRST", 6000)
    # NumPy is already here, but its first arrays cost page faults: the first postings here
    assert plainscore.use_plain(gathered)
    assert not plainscore.use_plain(gathered)  # 10,002 > 6,000: NumPy now
    monkeypatch.setattr(plainscore, "_spent", 0)
    monkeypatch.delitem(sys.modules, "numpy")  # a fresh process
    assert plainscore.use_plain(gathered) and plainscore.use_plain(gathered)
    assert plainscore._spent == 10002
    assert not plainscore.use_plain(gathered)  # 15,003 > 12,000: now NumPy has paid


def test_a_fresh_process_searches_few_postings_without_numpy(tmp_path: Path) -> None:
    """A CLI search is a fresh process: ranking a question's few postings must not import
    NumPy (its import costs more than the search), and the hits are the FTS5 path's."""
    path = tmp_path / "refold.db"
    store = archive(path, 5, 1.0, 9000)
    store.close()
    script = textwrap.dedent(f"""
        import sys
        from refold.store.base import SearchQuery
        from refold.store.sqlite import wordindex
        from refold.store.sqlite.store import SQLiteStore
        wordindex.MIN_ROWS = 0
        store = SQLiteStore({str(path)!r})
        hits = store.search(SearchQuery("when did caroline talk about the deployment"))
        hits += store.search(SearchQuery("deployment"))
        print(len(hits), "numpy" in sys.modules)
        for hit in hits:
            print(hit.session_id, hit.seq, repr(hit.score))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert out[0] == "40 False"
    reference = SQLiteStore(str(path))
    with pytest.MonkeyPatch.context() as patch:  # the same searches through FTS5 alone
        patch.setattr(wordindex, "MIN_ROWS", 10**9)
        hits = reference.search(SearchQuery("when did caroline talk about the deployment"))
        hits += reference.search(SearchQuery("deployment"))
    assert out[1:-1] == [f"{h.session_id} {h.seq} {h.score!r}" for h in hits]
