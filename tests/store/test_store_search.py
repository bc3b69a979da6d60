"""Conformance: search (words, CJK of any length, filters, windows, sorting) on every backend."""

from __future__ import annotations

import time
from typing import Any

import pytest

from refold.errors import SearchQueryError
from refold.store import CheckpointDraft, SearchQuery, Store

NASTY = ["C++", '"unterminated', "(problem", "hello AND", "***", "{test}", "OR hello",
         "a AND OR b", "deploy*", "dotted.names", "hyphen-ated", "NOT", "'; DROP TABLE x; --",
         "%", "_", "\\", "\ud800", "中", "部署 AND", "a:b", "NEAR(a b)"]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def bot(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def seqs(store: Store, text: str, **kw: Any) -> list[tuple[str, int]]:
    return sorted((h.session_id, h.seq) for h in store.search(SearchQuery(text, **kw)))


@pytest.fixture
def filled(store: Store) -> tuple[Store, str, str]:
    a = store.create_session(title="ops", source="cli", owner="alice")
    b = store.create_session(title="notes", source="proxy", owner="bob")
    store.append_messages(a.id, [
        user("please deploy the server to production"),       # 1
        bot("Deploying now; the deployment finished"),         # 2
        user("我们需要部署服务器到生产环境"),                    # 3
        bot("好的，部署完成。"),                                # 4
        user("check dotted.names and hyphen-ated words in C++ code"),  # 5
    ])
    store.append_messages(b.id, [
        user("unrelated chat about tea"),                       # 1
        bot("中文 and English mixed: deploy 部署服务"),          # 2
        user("日本語のテキスト、カタカナ"),                       # 3
        user("한국어 문장 검색"),                                # 4
    ])
    return store, a.id, b.id


def test_english_words_are_stemmed(filled: tuple[Store, str, str]) -> None:
    store, a, b = filled
    assert seqs(store, "deploy") == sorted([(a, 1), (a, 2), (b, 2)])
    assert seqs(store, "deployments") == [(a, 2)]
    assert seqs(store, "TEA") == [(b, 1)]


def test_hit_fields(filled: tuple[Store, str, str]) -> None:
    store, a, _ = filled
    [hit] = store.search(SearchQuery("production"))
    assert (hit.session_id, hit.seq, hit.role, hit.session_title) == (a, 1, "user", "ops")
    assert "[production]" in hit.snippet
    assert hit.content == "please deploy the server to production"
    assert hit.created_at > 0 and isinstance(hit.score, float)


def test_window_holds_the_hit_and_its_neighbours(filled: tuple[Store, str, str]) -> None:
    store, a, _ = filled
    [hit] = store.search(SearchQuery("production", window=1))
    assert [(m.session_id, m.seq) for m in hit.window] == [(a, 1), (a, 2)]
    [hit] = store.search(SearchQuery("哈哈 OR 生产环境", window=2))
    assert [m.seq for m in hit.window] == [1, 2, 3, 4, 5]
    [hit] = store.search(SearchQuery("production", window=0))
    assert hit.window == []


@pytest.mark.parametrize("text", NASTY)
def test_no_user_input_raises(filled: tuple[Store, str, str], text: str) -> None:
    store, _, _ = filled
    assert isinstance(store.search(SearchQuery(text)), list)


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_query_is_an_error(filled: tuple[Store, str, str], text: str) -> None:
    store, _, _ = filled
    with pytest.raises(SearchQueryError):
        store.search(SearchQuery(text))


def test_sanitized_queries_find_their_words(filled: tuple[Store, str, str]) -> None:
    store, a, _ = filled
    for text in ("dotted.names", "hyphen-ated", "C++ code", '"hyphen ated', "(words",
                 "words AND", "OR words", "code AND OR nothingness"):
        assert (a, 5) in seqs(store, text), text
    assert seqs(store, "***") == []
    assert seqs(store, "deploy* production") == [(a, 1)]


def test_cjk_three_or_more_characters(filled: tuple[Store, str, str]) -> None:
    store, a, b = filled
    assert seqs(store, "部署服务") == sorted([(a, 3), (b, 2)])
    assert seqs(store, "生产环境") == [(a, 3)]
    assert seqs(store, "カタカナ") == [(b, 3)]
    assert seqs(store, "한국어") == [(b, 4)]


def test_cjk_one_and_two_characters_find_every_message(filled: tuple[Store, str, str]) -> None:
    store, a, b = filled
    assert seqs(store, "部署") == sorted([(a, 3), (a, 4), (b, 2)])
    assert seqs(store, "部") == sorted([(a, 3), (a, 4), (b, 2)])
    assert seqs(store, "好") == [(a, 4)]
    assert seqs(store, "文") == [(b, 2)]
    [hit] = store.search(SearchQuery("好"))
    assert "[好]" in hit.snippet


def test_short_cjk_finds_all_of_many(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user(f"第{i}条 消息 and filler {i}") for i in range(150)])
    store.append_messages(s.id, [user("no cjk here")] * 1)
    hits = store.search(SearchQuery("消息", limit=500, window=0))
    assert len(hits) == 150
    assert len(store.search(SearchQuery("消息", limit=10, window=0))) == 10


def test_mixed_latin_and_cjk(filled: tuple[Store, str, str]) -> None:
    store, a, b = filled
    assert seqs(store, "deploy AND 部署服务") == [(b, 2)]
    assert seqs(store, "English AND 部署") == [(b, 2)]
    assert seqs(store, "english AND 中文") == [(b, 2)]
    # typed without syntax: ORed, the message holding every term first
    for text in ("deploy 部署服务", "English 部署", "english 中文"):
        hits = store.search(SearchQuery(text))
        assert (hits[0].session_id, hits[0].seq) == (b, 2), text
    assert len(store.search(SearchQuery("deploy 部署服务"))) == 4  # a1, a2, a3 and b2
    assert seqs(store, "部署 NOT English") == sorted([(a, 3), (a, 4)])


def test_filters(filled: tuple[Store, str, str]) -> None:
    store, a, b = filled
    assert seqs(store, "deploy", session_id=b) == [(b, 2)]
    assert seqs(store, "deploy", exclude_session_id=b) == [(a, 1), (a, 2)]
    assert seqs(store, "deploy", role="assistant") == sorted([(a, 2), (b, 2)])
    assert seqs(store, "deploy", source="cli") == [(a, 1), (a, 2)]
    assert seqs(store, "部署", owner="bob") == [(b, 2)]
    assert seqs(store, "部", session_id=a, role="assistant") == [(a, 4)]
    assert seqs(store, "deploy", since=time.time() + 60) == []
    assert seqs(store, "deploy", until=time.time() - 3600) == []
    assert len(seqs(store, "deploy", since=time.time() - 3600, until=time.time() + 1)) == 3


def test_rewound_rows_hidden_unless_asked(filled: tuple[Store, str, str]) -> None:
    store, a, _ = filled
    store.rewind(a, 3)
    assert seqs(store, "生产环境") == []
    assert seqs(store, "好") == []
    assert seqs(store, "C++ code") == []
    assert seqs(store, "生产环境", include_inactive=True) == [(a, 3)]
    assert seqs(store, "好", include_inactive=True) == [(a, 4)]
    assert seqs(store, "C++ code", include_inactive=True) == [(a, 5)]


def test_archived_rows_stay_searchable(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("ancient zebra fact"), bot("ok"), user("古老的斑马"),
                                 bot("fine"), user("new")])
    store.add_checkpoint(s.id, CheckpointDraft("summary", 1, 4, 5))
    assert seqs(store, "zebra") == [(s.id, 1)]
    assert seqs(store, "斑马") == [(s.id, 3)]
    assert seqs(store, "古老的") == [(s.id, 3)]


def test_sort_by_recency_and_relevance(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("kiwi kiwi kiwi kiwi"), user("kiwi once with many other "
                                                                   "words around it here"),
                                 user("kiwi kiwi")])
    recent = store.search(SearchQuery("kiwi", sort="recency"))
    assert [h.seq for h in recent] == [3, 2, 1]
    relevant = store.search(SearchQuery("kiwi", sort="relevance"))
    assert relevant[0].seq in (1, 3) and relevant[-1].seq == 2
    assert relevant[0].score >= relevant[-1].score
    assert len(store.search(SearchQuery("kiwi", limit=2))) == 2


def test_tool_calls_are_searchable(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "read_file", "arguments": "{\"path\": \"/srv/app/settings.yaml\"}"}}]}])
    assert seqs(store, "settings.yaml") == [(s.id, 1)]
    assert seqs(store, "read_file") == [(s.id, 1)]


def test_deleted_sessions_leave_the_index(filled: tuple[Store, str, str]) -> None:
    store, a, b = filled
    store.delete_session(b)
    assert seqs(store, "tea") == []
    assert seqs(store, "部署") == sorted([(a, 3), (a, 4)])
    assert seqs(store, "部署服务") == [(a, 3)]


def test_forked_copies_are_searchable_in_the_fork(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("walrus 海象动物")])
    fork = store.fork_session(s.id)
    for text in ("walrus", "海象动物", "walrus 海象动物"):
        [hit] = store.search(SearchQuery(text))  # one hit for the message and its copy
        # the best-ranked copy stands for all (equal scores: the newest, the fork)
        assert (hit.session_id, hit.seq) == (fork.id, 1), text
        assert set(hit.lineage) == {s.id, fork.id}
    assert seqs(store, "walrus", session_id=fork.id) == [(fork.id, 1)]
    assert seqs(store, "海象动物", session_id=fork.id) == [(fork.id, 1)]


def test_or_groups_mixing_scripts(filled: tuple[Store, str, str]) -> None:
    store, a, b = filled
    assert seqs(store, "好 OR tea") == sorted([(a, 4), (b, 1)])
    assert seqs(store, "生产环境 OR 한국어") == sorted([(a, 3), (b, 4)])
    assert seqs(store, "部署完成 OR 部署服务") == sorted([(a, 3), (a, 4), (b, 2)])
    hits = store.search(SearchQuery("好 OR tea OR 部署", sort="recency", limit=2, window=0))
    assert len(hits) == 2


def test_needle_mixing_cjk_and_latin_in_one_word(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("版本v2发布"), user("版本 v2"), user("nothing")])
    assert seqs(store, "本v2") == [(s.id, 1)]
    assert seqs(store, "本v2", session_id=s.id) == [(s.id, 1)]
    assert seqs(store, "版本v2发布") == [(s.id, 1)]
    hits = store.search(SearchQuery("版本 发布"))  # ORed terms: the one holding both first
    assert [h.seq for h in hits] == [1, 2]


def test_filters_apply_before_the_limit_on_large_result_sets(store: Store) -> None:
    loud = store.create_session()
    quiet = store.create_session()
    store.append_messages(loud.id, [user("kiwi kiwi kiwi") for _ in range(260)])
    store.append_messages(quiet.id, [user(f"one kiwi among many other words {i}")
                                     for i in range(3)])
    for sort in ("relevance", "recency"):
        hits = store.search(SearchQuery("kiwi", session_id=quiet.id, sort=sort, window=0))
        assert sorted(h.seq for h in hits) == [1, 2, 3], sort
    everything = store.search(SearchQuery("kiwi", limit=500, window=0))
    assert len(everything) == 263


def test_accents_fold_alike_on_every_backend(store: Store) -> None:
    """"cafe" finds "café" and the other way round, on SQLite (unicode61 remove_diacritics)
    and PostgreSQL (unaccent) alike; ASCII text is untouched."""
    s = store.create_session(title="travel")
    store.append_messages(s.id, [user("Let's meet at the café in Zürich"),
                                 bot("a naïve résumé of the Ærø ferry"),
                                 user("plain cafe, resume and Zurich here")])
    assert seqs(store, "cafe") == seqs(store, "café") == [(s.id, 1), (s.id, 3)]
    assert seqs(store, "Zurich") == seqs(store, "zürich") == [(s.id, 1), (s.id, 3)]
    assert seqs(store, "naive AND resume") == seqs(store, "naïve AND résumé") == [(s.id, 2)]
    for text in ("naive resume", "naïve résumé"):
        assert [h.seq for h in store.search(SearchQuery(text))] == [2, 3], text
    assert seqs(store, '"naive resume"') == [(s.id, 2)]  # a phrase too
    assert seqs(store, "Zür*") == [(s.id, 1), (s.id, 3)]
    assert seqs(store, "ferry") == [(s.id, 2)]


@pytest.mark.parametrize("query", ["zebra", '"after the nul"', "zebra AND marker",
                                   "what about the zebra marker?"])
def test_a_snippet_keeps_the_words_around_a_nul_in_the_text(store: Store, query: str) -> None:
    """FTS5's snippet() drops the words between a NUL and the match; the snippet is the text
    as stored (the NUL as the ledger keeps it), the match marked."""
    session = store.create_session(title="nul")
    store.append_messages(session.id, [user("before the nul \x00 after the nul marker zebra")])
    [hit] = store.search(SearchQuery(query))
    plain = " ".join(hit.snippet.replace("\x00", " ").replace("\ufffd", " ").split())
    words = plain.replace("[", "").replace("]", "")
    assert "before the nul after the nul marker zebra" in words, hit.snippet
    assert "[zebra]" in plain or "[after" in plain, hit.snippet
