"""Conformance: questions typed as sentences, exact ranking, one hit per message (every backend)."""

from __future__ import annotations

import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.store import SearchQuery, Store


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def top(store: Store, text: str, **kw: Any) -> list[str]:
    return [h.content for h in store.search(SearchQuery(text, window=0, **kw))]


def test_a_question_typed_as_a_sentence_finds_its_answer(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [
        user("Caroline said she went to the LGBTQ support group on 7 May"),
        user("Caroline loves painting sunsets"),
        user("the group chat was noisy today"),
        user("what did you do when it rained?"),
    ])
    hits = top(store, "When did Caroline go to the LGBTQ support group?")
    assert hits[0].startswith("Caroline said she went to the LGBTQ support group")
    assert "what did you do when it rained?" not in hits  # only stop words in common
    assert len(hits) == 3


def test_the_message_holding_every_term_ranks_first(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("postgres replication lag alert"),
                                 user("replication replication replication"),
                                 user("the postgres server restarted")])
    assert top(store, "why is there postgres replication lag")[0] == \
        "postgres replication lag alert"


def test_equal_scores_tie_break_by_recency(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("kumquat jam"), user("kumquat jam")])
    hits = store.search(SearchQuery("kumquat jam recipe", window=0))
    assert [h.seq for h in hits] == [2, 1]


def test_ranking_is_exact_over_every_match_not_the_newest(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("zebra zebra zebra")])  # the best, and the oldest
    filler = " ".join(f"word{i}" for i in range(40))
    store.append_messages(s.id, [user(f"one zebra in {filler}") for _ in range(1100)])
    for text in ("zebra", "where are the zebra herds"):
        [best] = store.search(SearchQuery(text, limit=1, window=0))
        assert best.seq == 1, text


def test_chinese_japanese_korean_sentences(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("服务器部署完成，生产环境正常"), user("今天天气很好"),
                                 user("日本語のテキスト、カタカナ"), user("한국어 문장 검색"),
                                 user("目的地是上海")])
    assert top(store, "我们什么时候部署了服务器？")[0] == "服务器部署完成，生产环境正常"
    assert top(store, "日本語のテキストについて教えて")[0] == "日本語のテキスト、カタカナ"
    assert top(store, "한국어 문장을 검색했나요")[0] == "한국어 문장 검색"
    assert top(store, "目的地") == ["目的地是上海"]  # one CJK word stays an exact substring
    assert top(store, "的") == ["目的地是上海"]  # stop words alone: answered as typed


def test_explicit_syntax_keeps_its_meaning(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("deploy the server"), user("deploy the client"),
                                 user("server room key"), user("deployment notes")])
    assert top(store, "deploy -client") == ["deploy the server"]  # porter: deploy≠deployment
    assert top(store, "deploy AND server") == ["deploy the server"]
    assert top(store, '"server room"') == ["server room key"]
    assert sorted(top(store, "deplo*")) == ["deploy the client", "deploy the server",
                                          "deployment notes"]
    assert len(top(store, "deploy server")) == 3  # no syntax: ORed


def test_markdown_emphasis_in_a_question_is_a_plain_word(store: Store) -> None:
    """``*word*`` and ``**word**`` (pasted from an agent's answer) are emphasis, not the
    prefix operator: the question stays a sentence and finds its answer (it was an AND of
    every word, stop words included, and found nothing)."""
    s = store.create_session()
    store.append_messages(s.id, [user("the data is the contents of the pyc file"),
                                 user("a pyc file is compiled bytecode"),
                                 user("nothing to see here")])
    assert top(store, "what about *data* is the contents of the pyc file.?")[0] == \
        "the data is the contents of the pyc file"
    assert top(store, "which **pyc** file had the contents?")[:2] == [
        "the data is the contents of the pyc file", "a pyc file is compiled bytecode"]
    assert sorted(top(store, "com*")) == ["a pyc file is compiled bytecode"]  # still a prefix


def test_a_pasted_command_with_flags_finds_the_message_holding_it(store: Store) -> None:
    """``-q``, ``-rf``, ``-3`` are a command's flags, not exclusions (they excluded the very
    message holding the command, which was found by nothing); ``-word`` of three or more
    letters still excludes."""
    s = store.create_session()
    store.append_messages(s.id, [user("ran git log -3 --oneline to see the last commits"),
                                 user("kubectl -n staging rollout status deploy/api"),
                                 user("pytest tests/refunds tests/payments -q passed"),
                                 user("then rm -rf build and rebuild"),
                                 user("the staging deploy is green"),
                                 user("the production deploy is red")])
    assert top(store, "git log -3 --oneline")[0] == \
        "ran git log -3 --oneline to see the last commits"
    assert top(store, "kubectl -n staging rollout status")[0] == \
        "kubectl -n staging rollout status deploy/api"
    assert top(store, "pytest tests/refunds tests/payments -q")[0] == \
        "pytest tests/refunds tests/payments -q passed"
    assert top(store, "rm -rf build")[0] == "then rm -rf build and rebuild"
    assert top(store, "deploy -staging") == ["the production deploy is red"]


def test_symbols_and_lone_operators_are_found_as_typed(store: Store) -> None:
    """A query of emoji or other symbols is an exact substring, over every message (it found
    nothing: no word in it); ``AND`` / ``OR`` / ``NOT`` alone are the words."""
    s = store.create_session()
    store.append_messages(s.id, [user("Deploy went fine 🎉🚀 thanks"),
                                 user("Price is 5€ → ok ✅; NOT really"),
                                 user("部署 🎉 完成"),
                                 user("plain text without symbols")])
    assert sorted(top(store, "🎉")) == ["Deploy went fine 🎉🚀 thanks", "部署 🎉 完成"]
    assert top(store, "🎉🚀") == ["Deploy went fine 🎉🚀 thanks"]
    for symbol in ("€", "→", "✅", "(✅)"):
        assert top(store, symbol) == ["Price is 5€ → ok ✅; NOT really"], symbol
    assert top(store, "NOT") == ["Price is 5€ → ok ✅; NOT really"]
    assert top(store, "fine 🎉") == ["Deploy went fine 🎉🚀 thanks"]  # beside a word: the word
    assert top(store, "***") == [] and top(store, "🌵") == []


def test_sessions_whose_title_matches_rank_first(store: Store) -> None:
    plans = store.create_session(title="Kiwi harvest plans")
    other = store.create_session(title="misc")
    store.append_messages(plans.id, [user("we pick in March, kiwi season")])
    store.append_messages(other.id, [user("kiwi kiwi kiwi harvest harvest")])
    hits = store.search(SearchQuery("kiwi harvest", window=0))
    assert [h.session_id for h in hits] == [plans.id, other.id]


def test_a_compaction_child_carrying_a_message_gives_one_hit(store: Store) -> None:
    parent = store.create_session(title="work")
    store.append_messages(parent.id, [user("the quokka budget is 40 euros"), user("ok")])
    child = store.create_session(title="work #2", parent_session_id=parent.id,
                                 link_kind="compaction")
    store.append_messages(child.id, [user("the quokka budget is 40 euros")])
    unrelated = store.create_session()
    store.append_messages(unrelated.id, [user("the quokka budget is 40 euros")])
    hits = store.search(SearchQuery("quokka budget", window=0))
    assert len(hits) == 2  # the lineage's copies fold; another lineage's message stays
    folded = next(h for h in hits if len(h.lineage) == 2)
    assert set(folded.lineage) == {parent.id, child.id}
    assert next(h for h in hits if h is not folded).lineage == (unrelated.id,)


def test_a_sentence_honours_filters(store: Store) -> None:
    a = store.create_session(source="cli")
    b = store.create_session(source="proxy")
    store.append_messages(a.id, [user("alpaca wool order")])
    store.append_messages(b.id, [user("alpaca wool order"), {"role": "assistant",
                                                            "content": "alpaca shipped"}])
    q = "where is my alpaca wool"
    assert [h.session_id for h in store.search(SearchQuery(q, source="proxy"))] == [b.id, b.id]
    assert [h.role for h in store.search(SearchQuery(q, role="assistant"))] == ["assistant"]
    assert store.search(SearchQuery(q, since=time.time() + 60)) == []



def test_a_sentence_sorted_by_recency_lists_the_newest_matches_of_any_term(store: Store) -> None:
    s = store.create_session(source="cli")
    other = store.create_session(source="proxy")
    store.append_messages(s.id, [user("walrus tusk"), user("nothing here"), user("a walrus"),
                                 user("部署 finished"), user("tusk polish")])
    store.append_messages(other.id, [user("walrus again")])
    hits = store.search(SearchQuery("when did the walrus tusk 部署 happen", sort="recency",
                                    window=0))
    assert [(h.session_id, h.seq) for h in hits] == [
        (other.id, 1), (s.id, 5), (s.id, 4), (s.id, 3), (s.id, 1)]
    first = store.search(SearchQuery("the walrus tusk", sort="recency", limit=2, window=0,
                                     source="cli"))
    assert [h.seq for h in first] == [5, 3]

PIECES = st.sampled_from(['"', "AND", "OR", "NOT", "-", "*", "(", ")", "NEAR", "^", ":",
                          "deploy", "the", "部署", "中", "服务器", "검색을", "\ud800", "-x",
                          "x*", "", " ", "日本語の", "'", "\\", "%", "_"])


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(PIECES, min_size=1, max_size=10), glue=st.sampled_from(["", " "]))
def test_operators_in_odd_places_never_raise(store: Store, parts: list[str], glue: str) -> None:
    from refold.errors import SearchQueryError

    if not store.list_sessions(limit=1):  # the fixture's store lives across examples
        s = store.create_session()
        store.append_messages(s.id, [user("deploy the 部署服务器 中 검색"), user("x y z")])
    text = glue.join(parts)
    try:
        hits = store.search(SearchQuery(text, window=0))
    except SearchQueryError:
        assert not text.strip()
    else:
        assert isinstance(hits, list)


def test_many_lineage_copies_still_leave_limit_distinct_hits(store: Store) -> None:
    root = store.create_session()
    store.append_messages(root.id, [user("narwhal sighting near the pier")])
    for _ in range(24):  # 25 copies: more than a search fetches for 3 hits (3 * 2 + 10)
        store.fork_session(root.id)
    older = store.create_session()
    store.append_messages(older.id, [user(f"narwhal note {i}") for i in range(5)])
    store.append_messages(root.id, [user("narwhal sighting near the pier again")])
    for text in ("narwhal sighting", "narwhal"):
        hits = store.search(SearchQuery(text, limit=3, window=0))
        assert len(hits) == 3, text
        assert len({h.content for h in hits}) == 3, text  # each copy folded into one hit
    [pier] = [h for h in store.search(SearchQuery("narwhal sighting", limit=3, window=0))
              if h.content == "narwhal sighting near the pier"]
    assert len(pier.lineage) == 25


def test_a_speakers_name_is_searchable_and_leads_the_hit(store: Store) -> None:
    """A group chat imported with each speaker as the message's ``name``: a question naming
    the speaker finds what that speaker said, and the hit says who said it."""
    s = store.create_session()
    store.append_messages(s.id, [
        {"role": "user", "name": "Caroline", "content": "I went to the support group today"},
        {"role": "assistant", "name": "Melanie", "content": "the support group sounds great"},
        {"role": "user", "name": " ", "content": "a support group of another kind"},
        {"role": "user", "content": "nothing like that here"},
    ])
    hits = store.search(SearchQuery("What did Caroline say about the support group?",
                                    window=0))
    assert hits[0].content == "Caroline: I went to the support group today"
    assert hits[0].seq == 1
    assert {h.content for h in hits[1:]} == {"Melanie: the support group sounds great",
                                             "a support group of another kind"}
    # the stored message is the one sent: the name stays a field, not part of the content
    assert store.projection(s.id).messages[0].message == {
        "role": "user", "name": "Caroline", "content": "I went to the support group today"}


def test_a_harness_system_message_in_every_session_is_one_hit(store: Store) -> None:
    """Claude Code sends its ~6 KB agent and skills list as a system message in every
    conversation; through ``refold serve`` each copy is stored in its session, and a search for
    its common words came back once per session, crowding out the conversations themselves."""
    boiler = ("Available agents: a reviewer that checks pull requests, a planner that "
              "edits permission settings and configuration files")
    for n in range(12):
        s = store.create_session(title=f"conversation {n}")
        store.append_messages(s.id, [user(f"task {n}: tidy the README"),
                                     {"role": "system", "content": boiler},
                                     {"role": "assistant", "content": f"done with task {n}"}])
    mine = store.create_session(title="mine")
    store.append_messages(mine.id, [user("can you review the permission settings of deploy?")])
    hits = store.search(SearchQuery("review the permission settings", limit=5, window=0))
    assert [h.content for h in hits].count(boiler) == 1
    [shared] = [h for h in hits if h.content == boiler]
    assert len(shared.lineage) == 12  # it names every session holding the text
    assert any(h.session_id == mine.id for h in hits)
    # a user's words said alike in two unrelated sessions stay two hits
    other = store.create_session(title="other")
    store.append_messages(other.id, [user("can you review the permission settings of deploy?")])
    said = [h for h in store.search(SearchQuery("permission settings of deploy", window=0))
            if h.role == "user"]
    assert len(said) == 2
