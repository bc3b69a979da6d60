"""Conformance: append, sync of full histories, reads, rewind and fork (every backend)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from refold.errors import Conflict, InvalidInput, MessageValidationError, NotFound
from refold.messages.model import chain_identities
from refold.store import Store


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def bot(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def contents(store: Store, session_id: str, **kw: Any) -> list[str]:
    return [m.message.get("content") for m in store.get_messages(session_id, **kw)]


def test_append_assigns_increasing_seq_and_chained_identity(store: Store) -> None:
    s = store.create_session()
    first = store.append_messages(s.id, [user("a"), bot("b")], token_counts=[3, 4])
    second = store.append_messages(s.id, [user("a")])
    assert [m.seq for m in first.appended] == [1, 2]
    assert [m.seq for m in second.appended] == [3]
    assert first.skipped == 0 and first.rewound == 0
    stored = store.get_messages(s.id)
    assert [m.identity for m in stored] == chain_identities([user("a"), bot("b"), user("a")])
    assert [m.token_count for m in stored] == [3, 4, None]
    assert all(m.active for m in stored)
    assert store.get_session(s.id).message_count == 3


def test_append_keeps_every_wire_field(store: Store) -> None:
    s = store.create_session()
    call = {"role": "assistant", "content": None, "reasoning_content": "think",
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "ls", "arguments": "{\"p\": \"/\"}"}}]}
    result = {"role": "tool", "tool_call_id": "c1", "name": "ls", "content": "a\nb"}
    parts = {"role": "user", "content": [{"type": "text", "text": "see"},
                                         {"type": "image_url", "image_url": {"url": "data:x"}}]}
    store.append_messages(s.id, [parts, call, result, {**user("x"), "_local": 1}])
    got = [m.message for m in store.get_messages(s.id)]
    assert got[:3] == [parts, call, result]
    assert got[3] == user("x")  # in-process "_" keys never reach the ledger
    assert store.get_messages(s.id)[2].role == "tool"


def test_append_with_expect_last_appends_only_after_that_identity(store: Store) -> None:
    s = store.create_session()
    first = store.append_messages(s.id, [user("a"), bot("b")])
    tip = first.appended[-1].identity
    more = store.append_messages(s.id, [user("c")], token_counts=[2], expect_last=tip)
    assert [m.seq for m in more.appended] == [3]
    assert [m.identity for m in store.get_messages(s.id)] == \
        chain_identities([user("a"), bot("b"), user("c")])
    # another writer moved the tip: refused in the transaction, nothing stored
    with pytest.raises(Conflict):
        store.append_messages(s.id, [user("d")], expect_last=tip)
    with pytest.raises(Conflict):
        store.append_messages(s.id, [], expect_last=tip)
    assert contents(store, s.id) == ["a", "b", "c"]
    # a rewound tip no longer counts: the last ACTIVE row is what must match
    store.rewind(s.id, 3)
    with pytest.raises(Conflict):
        store.append_messages(s.id, [user("e")], expect_last=more.appended[-1].identity)
    store.append_messages(s.id, [user("e")], expect_last=tip)
    assert contents(store, s.id) == ["a", "b", "e"]


def test_append_with_expect_last_on_an_empty_session_conflicts(store: Store) -> None:
    s = store.create_session()
    with pytest.raises(Conflict):
        store.append_messages(s.id, [user("a")], expect_last="0" * 64)
    assert store.get_messages(s.id) == []


def test_append_empty_batch(store: Store) -> None:
    s = store.create_session()
    assert store.append_messages(s.id, []).appended == []
    assert store.sync_messages(s.id, []).appended == []


def test_bad_batch_stores_nothing(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("keep")])
    with pytest.raises(MessageValidationError) as err:
        store.append_messages(s.id, [user("ok"), {"content": "no role"}])
    assert err.value.index == 1
    with pytest.raises(MessageValidationError):
        store.sync_messages(s.id, [user("keep"), "text"])  # type: ignore[list-item]
    with pytest.raises(InvalidInput):
        store.append_messages(s.id, [user("a")], token_counts=[1, 2])
    assert contents(store, s.id) == ["keep"]


def test_invalid_unicode_is_stored_safely(store: Store) -> None:
    s = store.create_session()
    weird = "lone \ud800 surrogate \udcff and nul \x00 end"
    store.append_messages(s.id, [user(weird), user("bytes \udc80\udcff via surrogateescape")])
    got = contents(store, s.id)
    assert got[0] == weird
    assert got[1].startswith("bytes ")
    assert store.integrity_check() == []


def test_sync_appends_only_the_new_suffix(store: Store) -> None:
    s = store.create_session()
    history = [user("q1"), bot("a1")]
    first = store.sync_messages(s.id, history)
    assert (len(first.appended), first.skipped) == (2, 0)
    again = store.sync_messages(s.id, history)
    assert (again.appended, again.skipped, again.rewound) == ([], 2, 0)
    longer = store.sync_messages(s.id, [*history, user("q2")], token_counts=[1, 2, 3])
    assert [m.seq for m in longer.appended] == [3] and longer.skipped == 2
    assert longer.appended[0].token_count == 3
    assert contents(store, s.id) == ["q1", "a1", "q2"]


def test_sync_after_append_matches_by_identity(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("q1")])
    store.append_messages(s.id, [bot("a1")])
    result = store.sync_messages(s.id, [user("q1"), bot("a1"), user("q2")])
    assert result.skipped == 2 and [m.message["content"] for m in result.appended] == ["q2"]


def test_sync_of_a_strict_prefix_changes_nothing(store: Store) -> None:
    s = store.create_session()
    store.sync_messages(s.id, [user("q1"), bot("a1"), user("q2")])
    result = store.sync_messages(s.id, [user("q1")])
    assert (result.appended, result.skipped, result.rewound) == ([], 1, 0)
    assert contents(store, s.id) == ["q1", "a1", "q2"]


def test_sync_divergence_rewinds_and_appends(store: Store) -> None:
    s = store.create_session()
    store.sync_messages(s.id, [user("q1"), bot("a1"), user("q2"), bot("a2")])
    edited = [user("q1"), bot("a1"), user("q2 edited")]
    result = store.sync_messages(s.id, edited)
    assert result.skipped == 2 and result.rewound == 2
    assert [m.seq for m in result.appended] == [5]  # seq never reused
    assert contents(store, s.id) == ["q1", "a1", "q2 edited"]
    everything = store.get_messages(s.id, include_inactive=True)
    assert [(m.seq, m.active) for m in everything] == [
        (1, True), (2, True), (3, False), (4, False), (5, True)]
    again = store.sync_messages(s.id, edited)
    assert (again.appended, again.skipped, again.rewound) == ([], 3, 0)


def test_sync_completely_different_history(store: Store) -> None:
    s = store.create_session()
    store.sync_messages(s.id, [user("a")])
    result = store.sync_messages(s.id, [user("b")])
    assert (result.skipped, result.rewound, len(result.appended)) == (0, 1, 1)
    assert contents(store, s.id) == ["b"]


def test_sync_back_to_a_rewound_history_reappends(store: Store) -> None:
    s = store.create_session()
    store.sync_messages(s.id, [user("a"), bot("x")])
    store.sync_messages(s.id, [user("a"), bot("y")])
    result = store.sync_messages(s.id, [user("a"), bot("x")])
    assert result.rewound == 1 and len(result.appended) == 1
    assert contents(store, s.id) == ["a", "x"]
    assert len(store.get_messages(s.id, include_inactive=True)) == 4


def test_get_messages_ranges_and_limits(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user(str(i)) for i in range(10)])
    assert contents(store, s.id, start_seq=3, end_seq=5) == ["2", "3", "4"]
    assert contents(store, s.id, limit=2) == ["0", "1"]
    assert [m.seq for m in store.iter_messages(s.id)] == list(range(1, 11))
    last = store.last_message(s.id)
    assert last is not None and last.seq == 10
    assert store.last_message(store.create_session().id) is None


def test_iter_messages_pages_through_large_sessions(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user(str(i)) for i in range(1203)])
    seqs = [m.seq for m in store.iter_messages(s.id)]
    assert seqs == list(range(1, 1204))


def test_messages_around(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user(str(i)) for i in range(1, 11)])
    assert [m.seq for m in store.messages_around(s.id, 5, before=2, after=1)] == [3, 4, 5, 6]
    assert [m.seq for m in store.messages_around(s.id, 1, before=3, after=0)] == [1]
    assert [m.seq for m in store.messages_around(s.id, 10, before=0, after=5)] == [10]


def test_set_token_counts(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("a"), user("b")])
    store.set_token_counts(s.id, {1: 7, 2: 9})
    assert [m.token_count for m in store.get_messages(s.id)] == [7, 9]


def test_rewind_marks_rows_inactive_and_undo_restores(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("q1"), bot("a1"), user("q2"), bot("a2")])
    record = store.rewind(s.id, 3)
    assert (record.from_seq, record.count, record.undone) == (3, 2, False)
    assert contents(store, s.id) == ["q1", "a1"]
    assert store.last_message(s.id).seq == 2  # type: ignore[union-attr]
    undone = store.undo_rewind(record.id)
    assert undone.undone and undone.count == 2
    assert contents(store, s.id) == ["q1", "a1", "q2", "a2"]
    with pytest.raises(Conflict):
        store.undo_rewind(record.id)


def test_rewind_must_start_at_an_active_user_message(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("q1"), bot("a1")])
    with pytest.raises(InvalidInput):
        store.rewind(s.id, 2)
    with pytest.raises(InvalidInput):
        store.rewind(s.id, 99)
    store.rewind(s.id, 1)
    with pytest.raises(InvalidInput):
        store.rewind(s.id, 1)  # already inactive
    with pytest.raises(NotFound):
        store.undo_rewind(424242)


def test_undo_rewind_after_new_messages_swaps_the_tails(store: Store) -> None:
    """An edit: a rewind, then the new tail appended (what every edit through the proxy, the
    chat and a re-import does in one transaction). Undoing it was refused whenever anything
    followed, so those rewinds could never be undone; now the new tail is rewound in turn
    (``replaced_by``), and undoing that swaps back."""
    s = store.create_session()
    store.append_messages(s.id, [user("q1"), bot("a1"), user("q2"), bot("a2")])
    record = store.rewind(s.id, 3)
    store.append_messages(s.id, [user("q2 again"), bot("a2 again")])
    undone = store.undo_rewind(record.id)
    assert undone.undone and undone.count == 2 and undone.replaced_by is not None
    assert contents(store, s.id) == ["q1", "a1", "q2", "a2"]
    assert [r.message["content"] for r in store.get_messages(s.id, include_inactive=True)] == [
        "q1", "a1", "q2", "a2", "q2 again", "a2 again"]  # nothing deleted
    back = store.undo_rewind(undone.replaced_by)
    assert back.replaced_by not in (None, record.id, undone.replaced_by)  # a new rewind
    assert contents(store, s.id) == ["q1", "a1", "q2 again", "a2 again"]
    store.append_messages(s.id, [user("q3")])  # the chain goes on from the tail it has
    assert contents(store, s.id)[-1] == "q3"
    assert store.last_message(s.id).seq > 6  # type: ignore[union-attr]


def test_undo_rewind_refused_when_the_prefix_changed(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("q1"), bot("a1"), user("q2"), bot("a2")])
    later = store.rewind(s.id, 3)
    earlier = store.rewind(s.id, 1)
    with pytest.raises(Conflict):
        store.undo_rewind(later.id)  # its rows chained from rows that are now inactive
    store.undo_rewind(earlier.id)
    store.undo_rewind(later.id)
    assert contents(store, s.id) == ["q1", "a1", "q2", "a2"]


def test_sync_after_rewind_appends_a_fresh_chain(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("q1"), bot("a1"), user("q2")])
    store.rewind(s.id, 3)
    result = store.sync_messages(s.id, [user("q1"), bot("a1"), user("q2")])
    assert result.skipped == 2 and [m.seq for m in result.appended] == [4]


def test_fork_copies_active_messages_up_to_seq(store: Store) -> None:
    parent = store.create_session(title="plan", source="cli", owner="me")
    store.append_messages(parent.id, [user("q1"), bot("a1"), user("q2"), bot("a2")])
    store.rewind(parent.id, 3)
    store.append_messages(parent.id, [user("q2b"), bot("a2b")])
    fork = store.fork_session(parent.id, 5)
    assert fork.parent_session_id == parent.id and fork.link_kind == "fork"
    assert fork.fork_seq == 5 and fork.title == "plan #2"
    assert (fork.source, fork.owner) == ("cli", "me")
    copied = store.get_messages(fork.id)
    assert [m.message["content"] for m in copied] == ["q1", "a1", "q2b"]
    assert [m.seq for m in copied] == [1, 2, 3]
    assert [m.identity for m in copied] == [m.identity for m in store.get_messages(parent.id)][:3]
    # the fork continues its own chain; the parent is untouched
    more = store.sync_messages(fork.id, [user("q1"), bot("a1"), user("q2b"), bot("other")])
    assert more.skipped == 3 and len(more.appended) == 1
    assert contents(store, parent.id) == ["q1", "a1", "q2b", "a2b"]


def test_branch_whole_session_with_title(store: Store) -> None:
    parent = store.create_session()
    store.append_messages(parent.id, [user("q1"), bot("a1")])
    branch = store.fork_session(parent.id, kind="branch", title="my branch")
    assert branch.link_kind == "branch" and branch.title == "my branch"
    assert branch.fork_seq == 2 and branch.message_count == 2


def test_fork_rejects_bad_input(store: Store) -> None:
    parent = store.create_session()
    store.append_messages(parent.id, [user("q1")])
    with pytest.raises(InvalidInput):
        store.fork_session(parent.id, 7)
    with pytest.raises(InvalidInput):
        store.fork_session(parent.id, kind="compaction")
    with pytest.raises(NotFound):
        store.fork_session("ghost")


def test_sync_keeps_the_times_an_import_states(store: Store) -> None:
    """An imported past conversation keeps when it was said (``refold search --since``, the
    "when" column); a bad stated time costs the time, never the message."""
    session = store.create_session()
    said = [1_700_000_000.0, 1_700_000_060.5, None, float("nan"), 4e12, "yesterday"]
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"}
               for i in range(len(said))]
    before = time.time()
    result = store.sync_messages(session.id, history, created_at=said)  # type: ignore[arg-type]
    after = time.time()
    rows = store.get_messages(session.id)
    assert [r.created_at for r in rows[:2]] == [1_700_000_000.0, 1_700_000_060.5]
    assert all(before <= r.created_at <= after for r in rows[2:])  # None, NaN, future, text
    assert [r.created_at for r in result.appended] == [r.created_at for r in rows]
    # a second sync stores nothing and changes no time; the new message gets its own
    again = store.sync_messages(session.id, [*history, {"role": "user", "content": "more"}],
                                created_at=[*said, 1_700_000_500.0])  # type: ignore[list-item]
    assert len(again.appended) == 1 and again.appended[0].created_at == 1_700_000_500.0
    assert [r.created_at for r in store.get_messages(session.id)][:2] == [1_700_000_000.0,
                                                                          1_700_000_060.5]
    with pytest.raises(InvalidInput, match="2 times for 1 messages"):
        store.sync_messages(session.id, history[:1], created_at=[1.0, 2.0])


def test_sync_adds_the_usage_of_the_messages_it_appends_and_no_more(store: Store) -> None:
    """An import states what each message's model calls used; the session's totals grow by
    the appended messages' share, in the same transaction, so a re-import adds nothing."""
    from refold.store.base import Usage

    session = store.create_session()
    history = [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
               {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}]
    spent: list[Usage | None] = [None, Usage(100, 10, 40, 0.5, "m-1"), None,
                                 Usage(200, 20, 80, 0.25, "m-2")]
    store.sync_messages(session.id, history[:2], usage=spent[:2])
    for _ in range(2):  # the grown history twice: the second time nothing is appended
        store.sync_messages(session.id, history, usage=spent)
        got = store.get_session(session.id)
        assert (got.input_tokens, got.output_tokens, got.cache_read_tokens, got.model) == (
            300, 30, 120, "m-2")
        assert got.cost_usd == pytest.approx(0.75)
    with pytest.raises(InvalidInput, match="1 usage entries for 4 messages"):
        store.sync_messages(session.id, history, usage=spent[:1])
    with pytest.raises(InvalidInput, match="Usage records"):
        store.sync_messages(session.id, [*history, {"role": "user", "content": "q3"}],
                            usage=[*spent, {"input_tokens": 1}])  # type: ignore[list-item]
    assert len(store.get_messages(session.id)) == 4  # a refused call stored nothing


def _totals(store: Store, session_id: str) -> tuple[int, int, int, float]:
    got = store.get_session(session_id)
    return got.input_tokens, got.output_tokens, got.cache_read_tokens, round(got.cost_usd, 9)


def test_a_history_read_while_it_was_written_then_whole_counts_each_call_once(
        store: Store) -> None:
    """An agent's transcript imported while the agent was still writing it, then again: the
    totals are those of the whole transcript imported once. A reply cut half-way (Claude Code
    writes one reply as several records, each with the call's usage so far) was rewound by
    the whole one, its usage stayed counted and the whole reply's was added too (13,200
    tokens for 12,000); a call Codex reported after its message was stored was never added
    (3000 input tokens for 4500). Now a sync takes out what the rows it rewinds held and adds
    the growth of a kept row's usage."""
    from refold.store.base import Usage

    question, reply, cut = user("q1"), bot("the whole reply"), bot("the whole")
    whole, half, late = Usage(1000, 200, 0, 0.006, "m"), Usage(1000, 100, 0, 0.0055, "m"), \
        Usage(500, 50, 20, 0.002, "m")
    once = store.create_session()
    store.sync_messages(once.id, [question, reply, user("q2"), bot("a2")],
                        usage=[Usage(), whole, Usage(), late])
    expected = _totals(store, once.id)

    live = store.create_session()
    store.sync_messages(live.id, [question, cut], usage=[Usage(), half])  # cut in the reply
    store.sync_messages(live.id, [question, reply, user("q2"), bot("a2")],  # its call unreported
                        usage=[Usage(), whole, Usage(), Usage()])
    for _ in range(2):  # the file as it ended; again: nothing more
        done = store.sync_messages(live.id, [question, reply, user("q2"), bot("a2")],
                                   usage=[Usage(), whole, Usage(), late])
        assert _totals(store, live.id) == expected and not done.appended

    # an edit of the last turn rewinds it (its usage out) and counts the new one
    edited = store.sync_messages(live.id, [question, reply, user("q2 again"), bot("a2'")],
                                 usage=[Usage(), whole, Usage(), late])
    assert edited.rewound == 2 and _totals(store, live.id) == expected
    store.rewind(live.id, edited.appended[0].seq)  # by hand: what was used stays counted
    assert _totals(store, live.id) == expected


def test_a_session_can_begin_when_its_imported_conversation_did(store: Store) -> None:
    """``create_session(started_at=)`` for an imported past conversation; a time that is no
    time (NaN, far future, negative) costs the time (now), never the session."""
    old = store.create_session(started_at=1_700_000_000.0)
    assert store.get_session(old.id).started_at == 1_700_000_000.0
    before = time.time()
    for bad in (float("nan"), 4e12, -5.0):
        made = store.create_session(started_at=bad)
        assert before <= made.started_at <= time.time()
    listed = [s.id for s in store.list_sessions()]
    assert listed[-1] == old.id  # newest first: the old conversation sorts last


def test_sync_with_expect_last_refuses_a_session_another_writer_changed(store: Store) -> None:
    """``sync_messages(expect_last=…)`` writes only while the session still ends with the
    message the history was made from: a row appended since is a Conflict and nothing is
    stored or rewound (both backends)."""
    from refold.errors import Conflict

    session = store.create_session(title="synced")
    first = store.append_messages(session.id, [{"role": "user", "content": "one"}]).appended
    store.append_messages(session.id, [{"role": "assistant", "content": "the other writer"}])
    history = [{"role": "user", "content": "one"}, {"role": "user", "content": "mine"}]
    with pytest.raises(Conflict):
        store.sync_messages(session.id, history, expect_last=first[-1].identity)
    assert [m.message["content"] for m in store.get_messages(session.id,
                                                               include_inactive=True)] == [
        "one", "the other writer"]
    now = store.get_messages(session.id)[-1].identity
    grown = [{"role": "user", "content": "one"},
             {"role": "assistant", "content": "the other writer"},
             {"role": "user", "content": "mine"}]
    result = store.sync_messages(session.id, grown, expect_last=now)
    assert (len(result.appended), result.rewound) == (1, 0)
