"""The C scorer (``refold._scorer`` through ``store/sqlite/nativescore.py``) gives what the
Python paths give: the same ids, in the same order, with the same scores to the bit, on the
corpora ``test_plain_score.py`` builds (skewed frequencies, frequencies past one byte, long and
short messages, phrases, CJK, glued words, filters, a tail); it is the path such questions
take; what it does not suit goes to Python; bad input is an error, never a crash.
(``test_word_index.py`` runs its FTS5 comparisons on this path as well.)"""

from __future__ import annotations

import math
import random
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_plain_score import QUESTIONS, WORDS, archive

from refold.search.query import parse_query
from refold.search.rank import best_first
from refold.store.base import SearchQuery
from refold.store.sqlite import indexer, nativescore, plainscore, wordindex
from refold.store.sqlite.natural import fast_scores
from refold.store.sqlite.store import SQLiteStore

pytestmark = pytest.mark.usefixtures("native_scorer")


@pytest.fixture(autouse=True)
def small_archives_use_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wordindex, "MIN_ROWS", 0)
    monkeypatch.setattr(wordindex, "SEGMENT", 2)


def answer(store: SQLiteStore, question: str, limit: int, path: str,
           monkeypatch: pytest.MonkeyPatch, **filters: object) -> list[tuple[int, float]] | None:
    """``fast_scores``' best ``limit`` (id, score) through ``path``: native, plain or numpy."""
    monkeypatch.setenv("REFOLD_NATIVE", "1" if path == "native" else "0")
    postings = 10**12 if path == "plain" else -1
    monkeypatch.setattr(plainscore, "PLAIN_WARM", postings)
    monkeypatch.setattr(plainscore, "PLAIN_BUDGET", postings)
    parsed = parse_query(question)
    plan = parsed.natural or parsed.glued
    assert plan is not None
    query = SearchQuery(question, limit=limit, **filters)  # type: ignore[arg-type]
    with store.db.read() as conn:
        scores = fast_scores(conn, plan, query, limit)
    return None if scores is None else [(i, scores[i]) for i in best_first(scores, limit)]


@pytest.mark.parametrize(("seed", "skew"), [(1, 0.0), (2, 1.0), (3, 2.0)])
def test_native_scores_are_the_python_paths_to_the_bit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, skew: float) -> None:
    store = archive(tmp_path / "refold.db", seed, skew, 9000)  # two sealed chunks and a tail
    sessions = [s.id for s in store.list_sessions()]
    used = []
    scored = nativescore.fast_scores

    def counting(*args: object) -> dict[int, float] | None:
        found = scored(*args)  # type: ignore[arg-type]
        used.append((args[1], found is not None, args[2].session_id))  # type: ignore[attr-defined]
        return found

    monkeypatch.setattr(nativescore, "fast_scores", counting)
    glued = []
    check = nativescore._glued

    def checking(*args: object) -> bool:
        glued.append(check(*args))  # type: ignore[arg-type]
        return glued[-1]

    monkeypatch.setattr(nativescore, "_glued", checking)
    # (a word some CJK message holds glued, "用docker部署": scored in Python with it)
    questions = [*QUESTIONS, "alpha ticket", "the alpha and beta of theta",
                 "why is the alpha cache running to zeta", "alpha beta gamma delta went",
                 "docker cache build", "the support group 部署失败了", "alpha beta 什么部署失败",
                 "alpha beta 龘靐齉"]  # (no message holds that piece)
    answered = 0
    for question in questions:
        for limit, filters in ((1, {}), (20, {}), (300, {}), (20, {"source": "b"}),
                               (20, {"session_id": sessions[1]}), (20, {"role": "user"})):
            native = answer(store, question, limit, "native", monkeypatch, **filters)
            plain = answer(store, question, limit, "plain", monkeypatch, **filters)
            assert native == plain, (question, limit, filters)
            assert native == answer(store, question, limit, "numpy", monkeypatch, **filters)
            answered += bool(native)
    assert answered > 60
    # the C scorer answered the questions of words, a session's among them (not those with a
    # day or only CJK)
    assert len(used) >= len(questions) * 5, len(used)
    assert any(answered and session for _, answered, session in used)
    assert True in glued and False in glued
    # and questions mixing words and CJK pieces ("deploy 部署失败")
    assert any(answered and plan.cjk and plan.words  # type: ignore[attr-defined]
               for plan, answered, _ in used)


def test_one_word_native_ranks_are_the_python_paths(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store = archive(tmp_path / "refold.db", 4, 1.0, 9000)
    found = 0
    with store.db.read() as conn:
        through = indexer.watermark(conn)
        for word in [*WORDS, "nothing"]:
            term = parse_query(word).terms[0]
            for limit in (1, 7, 60, 5000):
                got = []
                for native, postings in (("1", -1), ("0", 10**12), ("0", -1)):
                    monkeypatch.setenv("REFOLD_NATIVE", native)
                    monkeypatch.setattr(plainscore, "PLAIN_WARM", postings)
                    got.append(wordindex.best_of_term(conn, " ".join(term.words), term.fts5(),
                                                      through, limit))
                assert got[0] == got[1] == got[2], (word, limit)
                found += len(got[0] or ())
    assert found > 1000


def _blob(typecode: str, values: list[int]) -> bytes:
    return struct.pack(f"<{len(values)}{typecode}", *values)


def test_the_scorer_weighs_and_sums_as_the_python_expression() -> None:
    """Wide frequencies and lengths, postings out of order (sorted first), a tail with its
    lengths (an unknown one is 0), terms summed in their order; every float the one the Python
    expression gives; the k-th best bound and the messages whose boosted bound reaches a bar
    as ``plainscore._rank`` takes them."""
    from refold import _scorer

    k1, b, avgdl = wordindex.K1, wordindex.B, 7.3
    idfs = [0.7, 2.25, 1e-6]
    terms = [
        ([(4096, _blob("H", [5, 1, 9]), _blob("H", [1, 300, 2]), _blob("I", [3, 70000, 12]))],
         [(9001, 2), (9005, 1)]),
        ([(0, _blob("H", [1, 4101]), _blob("B", [1, 4]), _blob("H", [8, 2]))], [(9001, 7)]),
        ([], [(9005, 3), (9003, 1)]),
    ]
    lengths = {9001: 11, 9005: 2}
    count, ids, totals, masks = _scorer.merge(terms, lengths, idfs, avgdl, k1, b)

    def weight(idf: float, tf: int, dl: int) -> float:
        return idf * ((tf * (k1 + 1.0)) / (tf + k1 * (1 - b + b * dl / avgdl)))

    want: dict[int, tuple[float, int]] = {}
    postings = [
        [(4101, 1, 3), (4097, 300, 70000), (4105, 2, 12), (9001, 2, 11), (9005, 1, 2)],
        [(1, 1, 8), (4101, 4, 2), (9001, 7, 11)],
        [(9005, 3, 2), (9003, 1, 0)],
    ]
    for n, (idf, found) in enumerate(zip(idfs, postings, strict=True)):
        for i, tf, dl in found:
            w = weight(idf, tf, dl)
            total, mask = want.get(i, (0.0, 0))
            want[i] = (total + w if mask else w, mask | 1 << n)
    assert count == len(want)
    got_ids = list(struct.unpack(f"<{count}q", ids))
    assert got_ids == sorted(want)
    assert list(struct.unpack(f"<{count}d", totals)) == [want[i][0] for i in got_ids]
    assert list(struct.unpack(f"<{count}I", masks)) == [want[i][1] for i in got_ids]
    bounds = sorted((want[i][0] * 1.5 if want[i][1] == 3 else want[i][0] for i in want),
                    reverse=True)
    for k in range(1, count + 1):
        assert _scorer.kth(totals, masks, 3, 1.5, k) == bounds[k - 1]
    assert _scorer.kth(totals, masks, 3, 1.5, count + 1) == -math.inf
    # a session's rows among them: those it holds, in the order asked
    asked = [got_ids[2], 999_999, got_ids[0], -5]
    assert _scorer.picked(ids, totals, masks, asked) == (
        [got_ids[2], got_ids[0]], [want[got_ids[2]][0], want[got_ids[0]][0]],
        [want[got_ids[2]][1], want[got_ids[0]][1]])
    # many values, many of them equal (one-word queries: a weight per frequency and length),
    # on both sides of the one-pass heap's limit
    rng = random.Random(5)
    values = [rng.choice((0.5, 1.25, 2.0)) if rng.random() < 0.5 else rng.random() * 3
              for _ in range(5000)]
    marks = [rng.choice((1, 3)) for _ in values]
    packed = struct.pack(f"<{len(values)}d", *values), struct.pack(f"<{len(marks)}I", *marks)
    ranked = sorted((v * 1.5 if m == 3 else v for v, m in zip(values, marks, strict=True)),
                    reverse=True)
    for k in (1, 2, 20, 1023, 1024, 1025, 2000, 4999, 5000):
        assert _scorer.kth(*packed, 3, 1.5, k) == ranked[k - 1], k
    cut = sorted(want[i][0] for i in want)[3]
    factors = (1.0, 1.25, 1.5, 2.0)  # neither, could (a phrase), held (every term), both
    for pairs, anywhere in (([], False), ([0b11], False), ([0b101, 0b110], False), ([], True)):
        for bar in (cut, cut * 1.3, -math.inf):
            rows = []
            for i in got_ids:
                total, mask = want[i]
                could = anywhere or any(mask & bits == bits for bits in pairs)
                upper = total * factors[2 * (mask == 3) + could]
                if total >= cut and upper >= bar:
                    rows.append((i, total, mask, upper))
            assert rows, (pairs, bar)
            assert _scorer.chosen(ids, totals, masks, cut, bar, 3, factors, pairs,
                                  anywhere) == tuple(map(list, zip(*rows, strict=True)))


def test_a_phrases_rows_are_looked_up_in_its_tokens_postings() -> None:
    """``phrase_rows``: for each matched row, the least frequency of the phrase's tokens and
    the row's length (the first token's), as ``plainscore._phrase`` reads them; None when a
    token lacks a matched row or its postings are out of order (FTS5 answers then)."""
    from refold import _scorer

    first = ([(4096, _blob("H", [1, 5, 9]), _blob("B", [1, 3, 2]), _blob("H", [7, 20, 4]))],
             [(9001, 4)])
    second = ([(4096, _blob("H", [5, 9]), _blob("H", [300, 1]), _blob("H", [20, 4]))],
              [(9001, 2), (9002, 1)])
    lengths = {9001: 11, 9002: 3}
    assert _scorer.phrase_rows([4101, 4105, 9001], [first, second], lengths) == (
        [3.0, 1.0, 2.0], [20, 4, 11])
    assert _scorer.phrase_rows([4101, 4105, 9001], [second, first], lengths) == (
        [3.0, 1.0, 2.0], [20, 4, 11])
    assert _scorer.phrase_rows([4097, 4101], [first, second], lengths) is None  # 4097: not both
    assert _scorer.phrase_rows([], [first, second], lengths) == ([], [])
    backwards = ([(0, _blob("H", [9, 5]), _blob("B", [1, 1]), _blob("H", [2, 2]))], [])
    assert _scorer.phrase_rows([5], [backwards], {}) is None
    with pytest.raises(ValueError):
        _scorer.phrase_rows([4105, 4101], [first, second], lengths)  # matched must ascend
    with pytest.raises(TypeError):
        _scorer.phrase_rows([4101], [(first[0],)], lengths)


def test_the_scorer_refuses_bad_input_with_errors() -> None:
    from refold import _scorer

    good = [([(0, b"\1\0", b"\1", b"\2\0")], [])]
    assert _scorer.merge(good, {}, [1.0], 2.0, 1.2, 0.75)[0] == 1
    bad_calls = [
        lambda: _scorer.merge([], {}, [], 2.0, 1.2, 0.75),  # no term
        lambda: _scorer.merge(good * 33, {}, [1.0] * 33, 2.0, 1.2, 0.75),  # too many
        lambda: _scorer.merge(good, {}, [1.0, 2.0], 2.0, 1.2, 0.75),  # idfs disagree
        lambda: _scorer.merge([([(0, "x", b"", b"")], [])], {}, [1.0], 2.0, 1.2, 0.75),
        lambda: _scorer.merge([([(0, b"\1\0\2\0", b"", b"")], [])], {}, [1.0], 2, 1.2, 0.75),
        lambda: _scorer.merge([([], [(1,)])], {}, [1.0], 2.0, 1.2, 0.75),
        lambda: _scorer.merge([([], [("x", 1)])], {}, [1.0], 2.0, 1.2, 0.75),
        lambda: _scorer.merge([([], [(1, 1)])], {1: "x"}, [1.0], 2.0, 1.2, 0.75),
        lambda: _scorer.kth(b"\0" * 8, b"", 1, 1.0, 1),
        lambda: _scorer.chosen(b"", b"\0" * 8, b"\0" * 4, 0.0, 0.0, 1, (1.0,) * 4, [], False),
        lambda: _scorer.chosen(b"\0" * 8, b"\0" * 8, b"\0" * 4, 0.0, 0.0, 1, (1.0,), [], False),
        lambda: _scorer.chosen(b"\0" * 8, b"\0" * 8, b"\0" * 4, 0.0, 0.0, 1, (1.0,) * 4, ["x"],
                               False),
    ]
    for call in bad_calls:
        with pytest.raises((TypeError, ValueError)):
            call()


def test_a_large_archive_scores_the_same_on_every_path(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Realistic sizes: 60k messages over many sealed segments (the default ``SEGMENT``),
    questions whose words hold thousands of postings each."""
    monkeypatch.setattr(wordindex, "SEGMENT", 16)
    rng = random.Random(7)
    vocabulary = [f"w{n}" for n in range(3000)]
    weights = [1.0 / (rank + 1) for rank in range(len(vocabulary))]
    store = SQLiteStore(str(tmp_path / "refold.db"))
    for _ in range(6):
        session = store.create_session(source="bench")
        store.append_messages(session.id, [
            {"role": "user", "content": " ".join(rng.choices(vocabulary, weights,
                                                              k=rng.randint(3, 60)))}
            for _ in range(10_000)])
    store.seal_word_index()
    # (phrases: "w150-w151", "w200.w201", as identifiers and file names are typed)
    questions = ["when did we talk about w0 and w17", "w1 w2 w3 w4 w5", "w2999 w1 w0",
                 "where did I put the w30 of the w5", "w0 w0 w1",
                 "when did we see w150-w151 and w0", "w200.w201 w7"]
    phrases = []
    scored = nativescore.fast_scores

    def counting(*args: object) -> dict[int, float] | None:
        found = scored(*args)  # type: ignore[arg-type]
        plan = args[1]
        if any(len(t.words) > 1 for t in plan.words):  # type: ignore[attr-defined]
            phrases.append(found is not None)
        return found

    monkeypatch.setattr(nativescore, "fast_scores", counting)
    for question in questions:
        for limit in (1, 20, 100):
            native = answer(store, question, limit, "native", monkeypatch)
            assert native, question
            assert native == answer(store, question, limit, "plain", monkeypatch)
            assert native == answer(store, question, limit, "numpy", monkeypatch)
    assert phrases and all(phrases), phrases  # the phrase questions scored by the C scorer


def test_a_fresh_process_without_the_extension_searches_in_python(tmp_path: Path) -> None:
    """An install without a C compiler has no ``refold._scorer``: search answers the same
    through Python, and a fresh process with the scorer never imports NumPy."""
    path = tmp_path / "refold.db"
    store = archive(path, 5, 1.0, 9000)
    store.close()
    script = textwrap.dedent(f"""
        import sys
        if sys.argv[1] == "without":
            sys.modules["refold._scorer"] = None  # as if it was never built
        from refold.store.base import SearchQuery
        from refold.store.sqlite import nativescore, wordindex
        from refold.store.sqlite.store import SQLiteStore
        wordindex.MIN_ROWS = 0
        store = SQLiteStore({str(path)!r})
        hits = store.search(SearchQuery("when did caroline talk about the deployment"))
        hits += store.search(SearchQuery("deployment"))
        print(len(hits), nativescore.enabled(), "numpy" in sys.modules)
        for hit in hits:
            print(hit.session_id, hit.seq, repr(hit.score))
    """)
    runs = {how: subprocess.run([sys.executable, "-c", script, how], capture_output=True,
                                text=True, check=True).stdout.split("\n")
            for how in ("with", "without")}
    assert runs["with"][0] == "40 True False"
    assert runs["without"][0] == "40 False False"
    assert runs["with"][1:] == runs["without"][1:]


def test_a_first_cjk_question_scores_as_numpy_without_importing_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process's first CJK-only question (``natural.cjk_best`` before the process holds a
    copy of the lengths) is scored by the C scorer: the same ids and scores as NumPy's path
    with and without the copy, for questions of two to five pieces and several limits; a fresh process asking one imports no NumPy."""
    from refold.store.sqlite import cjklen, natural

    rng = random.Random(11)
    hanzi = "部署失败了我们什么时候知道说质三很志系最结门过物花被己口回热进干身区正打"
    store = SQLiteStore(str(tmp_path / "refold.db"))
    session = store.create_session()
    store.append_messages(session.id, [
        {"role": rng.choice(("user", "assistant")),
         "content": "".join(rng.choices(hanzi, k=rng.randint(2, 40)))
         + rng.choice(("", " 5月6号", " 6号 deploy"))} for _ in range(9000)])
    store.seal_word_index()
    questions = ["我们什么时候部署失败了吗？", "部署什么时候失败了？", "说质三很志吗？",
                 "我们什么时候回热进干吗？", "区正打什么时候失败了？", "物花被己口吗？"]
    answered = 0
    for question in questions:
        parsed = parse_query(question)
        plan = parsed.natural
        assert plan is not None and plan.cjk and not plan.words and not plan.days, question
        for limit in (1, 20, 500):
            query = SearchQuery(question, limit=limit)
            got = []
            for native in ("1", "0"):
                monkeypatch.setenv("REFOLD_NATIVE", native)
                monkeypatch.setattr(cjklen, "_COPIES", {})  # a fresh process: no copy yet
                with store.db.read() as conn:
                    got.append(natural.cjk_best(conn, plan, query, limit))
            monkeypatch.setenv("REFOLD_NATIVE", "0")
            with store.db.read() as conn:  # the process's copy of the lengths, with NumPy
                natural.cjk_best(conn, plan, query, limit)
                got.append(natural.cjk_best(conn, plan, query, limit))
            assert got[0] is not None and got[0] == got[1] == got[2], (question, limit)
            answered += len(got[0])
    assert answered > 500
    store.close()
    monkeypatch.setenv("REFOLD_NATIVE", "1")
    script = textwrap.dedent(f"""
        import sys
        from refold.store.base import SearchQuery
        from refold.store.sqlite import wordindex
        from refold.store.sqlite.store import SQLiteStore
        wordindex.MIN_ROWS = 0
        store = SQLiteStore({str(tmp_path / "refold.db")!r})
        hits = store.search(SearchQuery("我们什么时候部署失败了吗？"))
        print(len(hits), "numpy" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["20", "False"]
