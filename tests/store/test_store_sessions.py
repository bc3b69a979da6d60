"""Conformance: sessions, titles, references and lineage (runs on every backend)."""

from __future__ import annotations

import pytest

from refold.errors import AmbiguousReference, Conflict, InvalidInput, NotFound
from refold.store import CheckpointDraft, Store


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_create_and_get_round_trip(store: Store) -> None:
    made = store.create_session(title="first", source="cli", model="m1", owner="team")
    got = store.get_session(made.id)
    assert got == made
    assert (got.title, got.source, got.model, got.owner) == ("first", "cli", "m1", "team")
    assert got.parent_session_id is None and got.link_kind is None
    assert got.ended_at is None and got.message_count == 0


def test_explicit_id_and_duplicate_id(store: Store) -> None:
    store.create_session(session_id="abc")
    with pytest.raises(Conflict):
        store.create_session(session_id="abc")


def test_missing_session_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        store.get_session("nope")
    with pytest.raises(NotFound):
        store.append_messages("nope", [user("x")])


def test_title_is_sanitized(store: Store) -> None:
    s = store.create_session(title="  a\tb\u200b c\n\x07d  " + "x" * 200)
    assert s.title is not None
    assert s.title.startswith("a b c d ")
    assert "\u200b" not in s.title and len(s.title) == 100


def test_title_keeps_cjk_and_emoji(store: Store) -> None:
    assert store.create_session(title="部署 🚀 計画").title == "部署 🚀 計画"


def test_titles_are_unique(store: Store) -> None:
    first = store.create_session(title="dup")
    with pytest.raises(Conflict) as created:
        store.create_session(title="dup")
    other = store.create_session(title="other")
    with pytest.raises(Conflict) as renamed:
        store.rename_session(other.id, " dup ")
    assert store.rename_session(first.id, "dup").title == "dup"  # own title is fine
    # the same words on either backend
    for refused in (created.value, renamed.value):
        assert str(refused) == (f"the title 'dup' is already used by session {first.id} "
                                "(choose another title)")


def test_rename_rejects_empty_title(store: Store) -> None:
    s = store.create_session()
    with pytest.raises(InvalidInput):
        store.rename_session(s.id, " \u200b ")
    assert store.rename_session(s.id, "named").title == "named"


def test_unknown_link_kind_is_invalid(store: Store) -> None:
    parent = store.create_session()
    with pytest.raises(InvalidInput):
        store.create_session(parent_session_id=parent.id, link_kind="cousin")


def test_parent_must_exist(store: Store) -> None:
    with pytest.raises(NotFound):
        store.create_session(parent_session_id="ghost", link_kind="compaction")


def test_next_lineage_title(store: Store) -> None:
    assert store.next_lineage_title("work") == "work"
    store.create_session(title="work")
    assert store.next_lineage_title("work") == "work #2"
    store.create_session(title="work #2")
    store.create_session(title="work #7")
    store.create_session(title="workshop")
    assert store.next_lineage_title("work") == "work #8"
    assert store.next_lineage_title("work #2") == "work #8"


def test_next_lineage_title_escapes_like_wildcards(store: Store) -> None:
    store.create_session(title="a_b #3")
    store.create_session(title="axb #9")
    assert store.next_lineage_title("a_b") == "a_b #4"


def test_resolve_by_id_prefix_and_title(store: Store) -> None:
    s1 = store.create_session(session_id="aaaa1111", title="alpha")
    store.create_session(session_id="aaaa2222")
    s3 = store.create_session(session_id="bbbb0000")
    assert store.resolve_session("aaaa1111") == s1
    assert store.resolve_session("bbb").id == s3.id
    assert store.resolve_session("alpha").id == s1.id
    with pytest.raises(AmbiguousReference) as err:
        store.resolve_session("aaaa")
    assert set(err.value.candidates) == {"aaaa1111", "aaaa2222"}
    with pytest.raises(NotFound):
        store.resolve_session("zzz")
    with pytest.raises(InvalidInput):
        store.resolve_session("  ")


def test_a_title_that_is_the_start_of_another_sessions_id_is_ambiguous(store: Store) -> None:
    """A session exported to ``<id>.jsonl`` and imported again is titled by the file's name:
    the id as ``sessions list`` shows it. Typed as an id, it found the copy by its title (and
    ``sessions rm`` deleted the copy): now both are named and nothing is chosen."""
    original = store.create_session(session_id="aa292c5d2cb0" + "7" * 20)
    copy = store.create_session(title="aa292c5d2cb0")
    with pytest.raises(AmbiguousReference) as err:
        store.resolve_session("aa292c5d2cb0")
    assert set(err.value.candidates) == {original.id, copy.id}
    assert "title of session" in str(err.value)
    assert store.resolve_session(original.id) == original  # a whole id is exact
    assert store.resolve_session("aa292c5d2cb0", prefix=False).id == copy.id  # a name: title
    assert store.resolve_session(copy.id).id == copy.id
    store.create_session(title="beta")
    assert store.resolve_session("beta").title == "beta"  # no id starts so: the title


def test_resolve_prefix_escapes_wildcards(store: Store) -> None:
    store.create_session(session_id="x1")
    store.create_session(session_id="x2")
    with pytest.raises(NotFound):
        store.resolve_session("%")
    with pytest.raises(NotFound):
        store.resolve_session("_1")
    store.create_session(session_id="a%b")
    assert store.resolve_session("a%").id == "a%b"


def test_resolve_title_exact_first_then_latest_numbered_variant(store: Store) -> None:
    exact = store.create_session(title="proj")
    store.create_session(title="proj #2")
    latest = store.create_session(title="proj #3")
    assert store.resolve_session("proj #2").title == "proj #2"
    assert store.resolve_session("proj").id == exact.id  # issue 14: exactly that title first
    store.rename_session(exact.id, "old proj")
    assert store.resolve_session("proj").id == latest.id  # no "proj" left: the newest variant


def test_a_branch_never_takes_over_its_lineage_name(store: Store) -> None:
    """Issue 14: after a compaction continuation and a --branch fork, ``lin`` is still ``lin``,
    resume follows the continuation (never the branch) and ``fork lin --at`` works."""
    from refold.compaction.session import fork_with_state

    lin = store.create_session(title="lin")
    store.append_messages(lin.id, [user(f"m{i}") for i in range(1, 31)])
    store.end_session(lin.id, "rotation")
    cont = store.create_session(title=store.next_lineage_title("lin"), parent_session_id=lin.id,
                                link_kind="compaction")
    store.append_messages(cont.id, [user("continued")])
    branch = fork_with_state(store, lin.id, 5, kind="branch", title=None)
    assert branch.title == "lin #3" and cont.title == "lin #2"
    assert store.resolve_session("lin").id == lin.id
    assert store.resolve_resume(store.resolve_session("lin").id).id == cont.id
    fork = fork_with_state(store, store.resolve_session("lin").id, 20, kind="fork", title=None)
    assert len(store.get_messages(fork.id)) == 20


def test_resolve_respects_owner(store: Store) -> None:
    mine = store.create_session(session_id="own1", title="t-own", owner="me")
    store.create_session(session_id="own2", owner="you")
    assert store.resolve_session("own", owner="me").id == mine.id
    with pytest.raises(NotFound):
        store.resolve_session("own1", owner="you")
    with pytest.raises(NotFound):
        store.resolve_session("t-own", owner="you")


def test_list_sessions_newest_first_with_filters(store: Store) -> None:
    a = store.create_session(source="cli", owner="x")
    b = store.create_session(source="proxy", owner="x")
    c = store.create_session(source="cli", owner="y")
    assert [s.id for s in store.list_sessions()] == [c.id, b.id, a.id]
    assert [s.id for s in store.list_sessions(source="cli")] == [c.id, a.id]
    assert [s.id for s in store.list_sessions(owner="x")] == [b.id, a.id]
    assert len(store.list_sessions(limit=2)) == 2


def test_end_session_and_usage(store: Store) -> None:
    s = store.create_session()
    store.add_usage(s.id, input_tokens=10, output_tokens=5, cache_read_tokens=2, cost_usd=0.5,
                    model="gpt")
    store.add_usage(s.id, input_tokens=1, cost_usd=0.25)
    store.end_session(s.id, "user_exit")
    got = store.get_session(s.id)
    assert (got.input_tokens, got.output_tokens, got.cache_read_tokens) == (11, 5, 2)
    assert got.cost_usd == pytest.approx(0.75)
    assert got.model == "gpt"
    assert got.ended_at is not None and got.end_reason == "user_exit"


def test_message_count_counts_active_and_inactive(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("a"), {"role": "assistant", "content": "b"}, user("c")])
    store.rewind(s.id, 3)
    assert store.get_session(s.id).message_count == 3


def test_ancestors_and_children(store: Store) -> None:
    root = store.create_session(title="root")
    mid = store.create_session(parent_session_id=root.id, link_kind="compaction")
    leaf = store.create_session(parent_session_id=mid.id, link_kind="branch")
    assert [s.id for s in store.ancestors(leaf.id)] == [mid.id, root.id]
    assert store.ancestors(root.id) == []
    assert [s.id for s in store.children(root.id)] == [mid.id]
    assert store.get_session(leaf.id).link_kind == "branch"


def test_resolve_resume_follows_compaction_chain(store: Store) -> None:
    root = store.create_session()
    store.append_messages(root.id, [user("hi")])
    child = store.create_session(parent_session_id=root.id, link_kind="compaction")
    store.append_messages(child.id, [user("more")])
    empty_tip = store.create_session(parent_session_id=child.id, link_kind="compaction")
    # an empty tip resolves to the deepest session that has messages
    assert store.resolve_resume(root.id).id == child.id
    assert store.resolve_resume(empty_tip.id).id == empty_tip.id  # nothing below it
    store.append_messages(empty_tip.id, [user("tip")])
    assert store.resolve_resume(root.id).id == empty_tip.id


def test_resolve_resume_newest_child_and_ignores_forks(store: Store) -> None:
    root = store.create_session()
    store.append_messages(root.id, [user("hi")])
    older = store.create_session(parent_session_id=root.id, link_kind="compaction")
    store.append_messages(older.id, [user("old")])
    newer = store.create_session(parent_session_id=root.id, link_kind="compaction")
    store.append_messages(newer.id, [user("new")])
    fork = store.fork_session(newer.id)
    store.append_messages(fork.id, [user("forked")])
    assert store.resolve_resume(root.id).id == newer.id


def test_resolve_resume_without_messages_anywhere(store: Store) -> None:
    root = store.create_session()
    store.create_session(parent_session_id=root.id, link_kind="compaction")
    assert store.resolve_resume(root.id).id == root.id


def test_delete_session_reparents_children(store: Store) -> None:
    root = store.create_session()
    mid = store.create_session(parent_session_id=root.id, link_kind="compaction")
    store.append_messages(mid.id, [user("a"), user("b")])
    store.add_checkpoint(mid.id, CheckpointDraft("sum", first_seq=1, last_seq=1,
                                                 tail_start_seq=2))
    store.append_event(mid.id, "todo", {"items": []})
    leaf = store.create_session(parent_session_id=mid.id, link_kind="compaction")
    assert store.delete_session(mid.id) == 2
    with pytest.raises(NotFound):
        store.get_session(mid.id)
    moved = store.get_session(leaf.id)
    assert moved.parent_session_id == root.id and moved.link_kind == "compaction"


def test_delete_root_detaches_children(store: Store) -> None:
    root = store.create_session()
    store.append_messages(root.id, [user("x")])
    fork = store.fork_session(root.id)
    store.delete_session(root.id)
    detached = store.get_session(fork.id)
    assert detached.parent_session_id is None and detached.link_kind is None
    assert [m.message["content"] for m in store.get_messages(fork.id)] == ["x"]


def test_delete_missing_session(store: Store) -> None:
    with pytest.raises(NotFound):
        store.delete_session("ghost")


def test_prune_removes_only_old_ended_sessions(store: Store) -> None:
    ended = store.create_session()
    store.append_messages(ended.id, [user("old")])
    store.end_session(ended.id, "done")
    running = store.create_session()
    assert store.prune_sessions(1) == 0  # ended just now: not older than a day
    assert store.prune_sessions(0) == 1
    with pytest.raises(NotFound):
        store.get_session(ended.id)
    assert store.get_session(running.id).id == running.id
    with pytest.raises(InvalidInput):
        store.prune_sessions(-1)



def test_titles_are_unique_per_owner_not_across_owners(store: Store) -> None:
    from refold.errors import AmbiguousReference, Conflict, NotFound

    mine = store.create_session(title="plan", owner="key-a")
    theirs = store.create_session(title="plan", owner="key-b")
    with pytest.raises(Conflict):
        store.create_session(title="plan", owner="key-a")
    assert store.resolve_session("plan", owner="key-a").id == mine.id
    assert store.resolve_session("plan", owner="key-b").id == theirs.id
    with pytest.raises(NotFound):
        store.resolve_session("plan", owner="key-c")
    with pytest.raises(AmbiguousReference, match="--owner"):
        store.resolve_session("plan")  # the operator, two tenants, no local session
    local = store.create_session(title="plan")
    assert store.resolve_session("plan").id == local.id  # the local owner's comes first
    other = store.create_session(title="other", owner="key-b")
    with pytest.raises(Conflict):
        store.rename_session(other.id, "plan")  # key-b already has "plan"
    store.rename_session(other.id, "plan #2")
    assert store.resolve_session("plan", owner="key-b").id == theirs.id  # the exact title
    assert store.resolve_session("plan #2", owner="key-b").id == other.id
    assert store.resolve_session("plan", owner="key-a").id == mine.id
