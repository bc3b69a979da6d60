"""Conformance: what ``append_messages`` hands back and adds besides the rows (every backend).

- ``AppendResult.tip``: with ``expect_last`` the session's ``ViewTip`` as the write transaction
  ended — exactly what ``view_tip`` reads right after (last ACTIVE row, latest checkpoint);
  without ``expect_last`` None.
- ``usage=``: added to the session totals in the append's own transaction, exactly as
  ``add_usage`` adds it; a refused append (Conflict) stores neither the rows nor the usage.
"""

from __future__ import annotations

from typing import Any

import pytest

from refold.errors import Conflict, NotFound
from refold.store import Store
from refold.store.base import CheckpointDraft, Usage, ViewTip


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def bot(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def contents(store: Store, session_id: str) -> list[Any]:
    return [m.message.get("content") for m in store.get_messages(session_id)]


def totals(store: Store, session_id: str) -> tuple[int, int, int, float, str | None]:
    s = store.get_session(session_id)
    return s.input_tokens, s.output_tokens, s.cache_read_tokens, s.cost_usd, s.model


# -- AppendResult.tip ---------------------------------------------------------------------------
def test_tip_of_an_expect_last_append_is_the_view_tip(store: Store) -> None:
    s = store.create_session()
    first = store.append_messages(s.id, [user("a"), bot("b")])
    assert first.tip is None  # no expect_last: no tip
    result = store.append_messages(s.id, [user("c"), bot("d")],
                                   expect_last=first.appended[-1].identity)
    assert result.tip is not None
    assert result.tip == store.view_tip(s.id)
    assert result.tip == ViewTip(4, result.appended[-1].identity, None)


def test_tip_names_the_latest_checkpoint(store: Store) -> None:
    s = store.create_session()
    rows = store.append_messages(s.id, [user("a"), bot("b"), user("c"), bot("d")]).appended
    first = store.add_checkpoint(s.id, CheckpointDraft("one", 1, 2, 3))
    result = store.append_messages(s.id, [user("e")], expect_last=rows[-1].identity)
    assert result.tip == store.view_tip(s.id)
    assert result.tip is not None and result.tip.checkpoint_id == first.id
    assert (result.tip.last_seq, result.tip.last_identity) == (5, result.appended[0].identity)
    # a later checkpoint (with an empty append: nothing written, the tip still reported)
    second = store.add_checkpoint(s.id, CheckpointDraft("two", 1, 4, 5))
    assert second.id != first.id
    empty = store.append_messages(s.id, [], expect_last=result.appended[0].identity)
    assert empty.appended == []
    assert empty.tip == store.view_tip(s.id)
    assert empty.tip == ViewTip(5, result.appended[0].identity, second.id)


def test_tip_of_an_empty_append_with_expect_last(store: Store) -> None:
    s = store.create_session()
    rows = store.append_messages(s.id, [user("a"), bot("b")]).appended
    result = store.append_messages(s.id, [], expect_last=rows[-1].identity)
    assert result.appended == [] and result.skipped == 0
    assert result.tip == ViewTip(2, rows[-1].identity, None)
    assert result.tip == store.view_tip(s.id)
    assert store.get_session(s.id).message_count == 2


def test_tip_is_the_last_active_row_after_a_rewind(store: Store) -> None:
    """The tip's seq is the last ACTIVE row's, not the highest seq stored."""
    s = store.create_session()
    rows = store.append_messages(s.id, [user("a"), bot("b"), user("c"), bot("d")]).appended
    store.rewind(s.id, 3)  # seqs 3-4 inactive, still stored
    empty = store.append_messages(s.id, [], expect_last=rows[1].identity)
    assert empty.tip == ViewTip(2, rows[1].identity, None) == store.view_tip(s.id)
    more = store.append_messages(s.id, [user("c2")], expect_last=rows[1].identity)
    assert more.appended[0].seq == 5  # after the highest stored seq
    assert more.tip == ViewTip(5, more.appended[0].identity, None) == store.view_tip(s.id)


def test_no_tip_without_expect_last(store: Store) -> None:
    s = store.create_session()
    assert store.append_messages(s.id, [user("a")]).tip is None
    assert store.append_messages(s.id, []).tip is None
    assert store.append_messages(s.id, [bot("b")], usage=Usage(1, 2)).tip is None
    store.add_checkpoint(s.id, CheckpointDraft("sum", 1, 1, 2))
    assert store.append_messages(s.id, [user("c")]).tip is None


def test_tips_of_successive_appends_chain(store: Store) -> None:
    """Each append's tip is what the next one expects: a writer can go on without reading."""
    s = store.create_session()
    tip = store.append_messages(s.id, [user("start")]).appended[-1].identity
    for i in range(5):
        result = store.append_messages(s.id, [bot(f"r{i}"), user(f"u{i}")], expect_last=tip)
        assert result.tip is not None and result.tip == store.view_tip(s.id)
        assert result.tip.last_seq == 3 + 2 * i
        assert result.tip.last_identity is not None
        tip = result.tip.last_identity
    assert len(store.get_messages(s.id)) == 11


# -- usage ----------------------------------------------------------------------------------------
def test_append_usage_equals_add_usage(store: Store) -> None:
    by_append = store.create_session()
    by_call = store.create_session()
    steps = [Usage(10, 5, 2, 0.5, "gpt"), Usage(input_tokens=1, cost_usd=0.25),
             Usage(output_tokens=7, cache_read_tokens=3, model="other")]
    for i, usage in enumerate(steps):
        store.append_messages(by_append.id, [user(f"q{i}")], usage=usage)
        store.append_messages(by_call.id, [user(f"q{i}")])
        store.add_usage(by_call.id, input_tokens=usage.input_tokens,
                        output_tokens=usage.output_tokens,
                        cache_read_tokens=usage.cache_read_tokens, cost_usd=usage.cost_usd,
                        model=usage.model)
    got = totals(store, by_append.id)
    assert got == pytest.approx(totals(store, by_call.id))
    assert got[:3] == (11, 12, 5)
    assert got[3] == pytest.approx(0.75)
    assert got[4] == "other"
    assert contents(store, by_append.id) == ["q0", "q1", "q2"]


def test_usage_without_a_model_keeps_the_model(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("a")], usage=Usage(3, 4, model="gpt"))
    store.append_messages(s.id, [bot("b")], usage=Usage(1, 1))
    assert totals(store, s.id)[:3] == (4, 5, 0)
    assert totals(store, s.id)[4] == "gpt"


def test_usage_with_expect_last_and_with_no_messages(store: Store) -> None:
    s = store.create_session()
    tip = store.append_messages(s.id, [user("a")]).appended[-1].identity
    result = store.append_messages(s.id, [bot("b")], expect_last=tip,
                                   usage=Usage(100, 20, 50, 0.01, "m1"))
    assert result.tip == store.view_tip(s.id)
    # nothing to append: the totals still move (and nothing else)
    empty = store.append_messages(s.id, [], expect_last=result.appended[-1].identity,
                                  usage=Usage(1, 2, 3, 0.02))
    assert empty.appended == [] and empty.tip == result.tip
    store.append_messages(s.id, [], usage=Usage(output_tokens=1))
    got = totals(store, s.id)
    assert got[:3] == (101, 23, 53)
    assert got[3] == pytest.approx(0.03)
    assert got[4] == "m1"
    assert contents(store, s.id) == ["a", "b"]
    assert store.get_session(s.id).message_count == 2


def test_a_conflict_stores_neither_rows_nor_usage(store: Store) -> None:
    s = store.create_session()
    first = store.append_messages(s.id, [user("a")], usage=Usage(5, 5, 0, 0.5, "gpt"))
    stale = first.appended[-1].identity
    store.append_messages(s.id, [bot("b")])  # another writer moved the tip
    before = totals(store, s.id)
    with pytest.raises(Conflict):
        store.append_messages(s.id, [user("lost")], expect_last=stale,
                              usage=Usage(1000, 1000, 1000, 9.0, "never"))
    with pytest.raises(Conflict):
        store.append_messages(s.id, [], expect_last=stale, usage=Usage(7, 7))
    with pytest.raises(Conflict):  # an empty session has no last row to match
        fresh = store.create_session()
        store.append_messages(fresh.id, [user("x")], expect_last=stale, usage=Usage(3, 3))
    assert totals(store, s.id) == before
    assert totals(store, s.id)[:3] == (5, 5, 0) and totals(store, s.id)[4] == "gpt"
    assert contents(store, s.id) == ["a", "b"]
    assert store.get_session(s.id).message_count == 2
    assert store.get_messages(fresh.id) == []
    assert totals(store, fresh.id)[:4] == (0, 0, 0, 0.0)


def test_usage_for_a_missing_session_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        store.append_messages("no-such-session", [user("a")], usage=Usage(1, 1))
    with pytest.raises(NotFound):
        store.append_messages("no-such-session", [], usage=Usage(1, 1))
