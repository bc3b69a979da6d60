"""The proxy's fast path: a re-sent history that starts with the known chain only appends its
suffix — and every case where that would differ from a full ``sync_messages`` falls back to it.

The store is real (both backends); ``CountingStore`` only counts which ledger call ran.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.errors import MessageValidationError
from refold.messages.model import chain_identities
from refold.runtime import Engine
from refold.runtime.chain import resent, same
from refold.store import Store


class CountingStore:
    """The real store, with a count of full syncs."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.syncs = 0

    def sync_messages(self, *args: Any, **kwargs: Any) -> Any:
        self.syncs += 1
        return self._store.sync_messages(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.fixture
def counting(store: Store) -> CountingStore:
    return CountingStore(store)


@pytest.fixture
def eng(counting: CountingStore, tmp_path: Path) -> Iterator[Engine]:
    engine = Engine(counting, model="gpt-4o-mini", context_length=100_000,  # type: ignore[arg-type]
                    memory_dir=tmp_path / "memories")
    yield engine
    engine.close()


def user(text: Any) -> dict[str, Any]:
    return {"role": "user", "content": text}


def bot(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def active_chain(store: Store, session_id: str) -> list[str]:
    return [m.identity for m in store.get_messages(session_id)]


def test_resent_history_appends_only_the_suffix(eng: Engine, counting: CountingStore,
                                                store: Store) -> None:
    rt = eng.open_session(new=True)
    history: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, user("one")]
    for turn in range(5):
        rt.prepare_history(history)
        reply = bot(f"answer {turn}")
        rt.record(reply, usage={"prompt_tokens": 30, "completion_tokens": 5})
        # an SDK re-sends the reply with None fields and local keys: still the same message
        history = [*history, {**reply, "refusal": None, "_local": 1}, user(f"next {turn}")]
    assert counting.syncs == 1  # the first turn only; every later turn took the fast path
    conversation = [m for m in history[1:-1]]
    rows = store.get_messages(rt.session_id)
    assert [r.message["content"] for r in rows] == [m["content"] for m in conversation]
    assert active_chain(store, rt.session_id) == chain_identities(
        [{k: v for k, v in m.items() if k in ("role", "content")} for m in conversation])
    assert len(store.list_events(rt.session_id, "system_prompt")) == 1


def test_another_writer_between_turns_is_caught(eng: Engine, counting: CountingStore,
                                                store: Store) -> None:
    rt = eng.open_session(new=True)
    history = [user("one")]
    rt.prepare_history(history)
    rt.record(bot("a1"))
    store.append_messages(rt.session_id, [user("written by another process")])
    history = [*history, bot("a1"), user("two")]
    rt.prepare_history(history)
    assert counting.syncs == 2  # the tip moved: the fast path refused, the full sync ran
    # exactly what a full sync makes of it: the foreign row rewound, the history's suffix stored
    assert active_chain(store, rt.session_id) == chain_identities(history)
    rt.record(bot("a2"))
    rt.prepare_history([*history, bot("a2"), user("three")])
    assert counting.syncs == 2  # back on the fast path
    assert [m.message["content"] for m in store.get_messages(rt.session_id)] == [
        "one", "a1", "two", "a2", "three"]


def test_another_writer_before_the_record(eng: Engine, counting: CountingStore,
                                          store: Store) -> None:
    rt = eng.open_session(new=True)
    rt.prepare_history([user("one")])
    store.append_messages(rt.session_id, [user("foreign")])
    # the reply answers "one": it goes right after it, the foreign row rewound (reversibly),
    # as a request re-sending ["one"] would place it; never after the foreign row
    rt.record(bot("a1"))
    assert [m.message["content"] for m in store.get_messages(rt.session_id)] == ["one", "a1"]
    assert [r.message["content"] for r in store.get_messages(rt.session_id,
                                                             include_inactive=True)
            if not r.active] == ["foreign"]
    history = [user("one"), bot("a1"), user("two")]
    rt.prepare_history(history)
    assert counting.syncs == 1  # the reply's chain is known: the fast path continues it
    assert active_chain(store, rt.session_id) == chain_identities(history)


def test_json_different_values_are_not_the_known_prefix(eng: Engine, counting: CountingStore,
                                                        store: Store) -> None:
    rt = eng.open_session(new=True)
    first = user([{"type": "text", "text": "x", "weight": 1}])
    rt.prepare_history([first])
    rt.record(bot("a1"))
    # True == 1 in Python but not in JSON (nor in the identity): treated as a divergence
    changed = user([{"type": "text", "text": "x", "weight": True}])
    history = [changed, bot("a1"), user("two")]
    rt.prepare_history(history)
    assert counting.syncs == 2
    assert active_chain(store, rt.session_id) == chain_identities(history)
    assert not same(1, True) and not same(0.0, -0.0) and same({"a": [1.5]}, {"a": [1.5]})


def test_caller_mutating_its_messages_is_not_fooled(eng: Engine, counting: CountingStore,
                                                    store: Store) -> None:
    rt = eng.open_session(new=True)
    history = [user([{"type": "text", "text": "original"}])]
    rt.prepare_history(history)
    rt.record(bot("a1"))
    history[0]["content"][0]["text"] = "edited in place"
    history = [*history, bot("a1"), user("two")]
    rt.prepare_history(history)
    assert counting.syncs == 2
    assert active_chain(store, rt.session_id) == chain_identities(history)


def test_invalid_suffix_names_its_real_index(eng: Engine, store: Store) -> None:
    rt = eng.open_session(new=True)
    history = [{"role": "system", "content": "s"}, user("one")]
    rt.prepare_history(history)
    rt.record(bot("a1"))
    before = active_chain(store, rt.session_id)
    with pytest.raises(MessageValidationError) as caught:
        rt.prepare_history([*history, bot("a1"), user("ok"), {"role": "user", "content": 5}])
    assert caught.value.index == 4
    assert active_chain(store, rt.session_id) == before  # nothing stored


def test_known_prefix_fast_and_exact_paths_agree() -> None:
    """The all-string fast path and the exact comparison accept and refuse the same re-sends,
    and a chain extended with nested messages keeps its per-message flags aligned."""
    from refold.runtime.chain import KnownChain

    plain = {"role": "user", "content": "hi"}
    nested = {"role": "assistant", "content": None,
              "tool_calls": [{"id": "c1", "type": "function",
                              "function": {"name": "f", "arguments": "{}"}}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "1"}
    numbered = {"role": "user", "content": [{"type": "text", "text": "x", "weight": 1}]}
    chain = KnownChain.of("s", [plain], "t1").extended([nested, result], "t3")
    assert chain.plain == (True, True, True)  # (no number anywhere: ``==`` is exact)
    assert KnownChain.of("s", [numbered, {"role": "user", "content": [{"n": None, 1: "a"}]}],
                         "t").plain == (False, False)
    assert chain.known_prefix([dict(plain), dict(nested), dict(result), plain]) == 3
    # None values and underscore keys are ignored; everything else must match exactly
    assert chain.known_prefix([{**plain, "name": None, "_x": 1}, nested, result]) == 3
    assert chain.known_prefix([plain, nested, {**result, "content": 1}]) is None
    assert chain.known_prefix([{**plain, "content": "hi!"}, nested, result]) is None
    changed = {**nested, "tool_calls": [{**nested["tool_calls"][0], "id": "c2"}]}
    assert chain.known_prefix([plain, changed, result]) is None
    assert chain.known_prefix([plain, nested]) is None  # shorter than the chain
    numbers = KnownChain.of("s", [plain, numbered], "t2")
    assert numbers.known_prefix([plain, numbered]) == 2
    for other in (1.0, True):  # equal to 1 in Python, not in JSON
        spelled = {**numbered, "content": [{**numbered["content"][0], "weight": other}]}
        assert numbers.known_prefix([plain, spelled]) is None


JSON_LEAVES = st.none() | st.booleans() | st.sampled_from([0, 1, 0.0, -0.0, 1.0, float("nan")]) \
    | st.sampled_from(["", "a", "1"])
JSON_VALUES = st.recursive(JSON_LEAVES, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
                           max_leaves=6)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(["role", "content", "x"]), JSON_VALUES, min_size=1),
       st.dictionaries(st.sampled_from(["role", "content", "x"]), JSON_VALUES, min_size=1))
def test_the_fast_comparison_answers_as_the_exact_one(raw: dict[str, Any],
                                                      message: dict[str, Any]) -> None:
    """``_is_known`` with a stored form's ``_plain`` flag (``==`` at C speed when it holds) says
    what the exact comparison says, for any pair of JSON messages (numbers of each type,
    ``-0.0``, NaN, booleans, None, nesting) and for a message and its own copy."""
    from refold.runtime.chain import _frozen, _is_known, _plain

    stored = _frozen(message)
    for sent in (raw, copy.deepcopy(message)):
        assert _is_known(sent, stored, _plain(stored)) == _is_known(sent, stored, False)


CALL = {"id": "call_1", "type": "function",
        "function": {"name": "bash", "arguments": '{"command": "ls", "n": 1}'}}


def resent_call(**changes: Any) -> dict[str, Any]:
    """The stored reply as an AI-SDK client re-sends it, with ``changes`` to its call."""
    function = {"name": "bash", "arguments": '{"n":1,"command":"ls"}', **changes.pop("fn", {})}
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": "call_1", "type": "function", "function": function,
                            **changes}]}


def test_a_reply_resent_in_another_spelling_is_the_stored_reply(
        eng: Engine, counting: CountingStore, store: Store) -> None:
    rt = eng.open_session(new=True)
    history: list[dict[str, Any]] = [user("list files")]
    rt.prepare_history(history)
    rt.record({"role": "assistant", "content": None, "tool_calls": [CALL]})
    history += [resent_call(), {"role": "tool", "tool_call_id": "call_1", "content": "a b"}]
    prepared = rt.prepare_history(history)
    assert counting.syncs == 1  # the fast path took it: nothing diverged
    assert prepared.messages[1]["tool_calls"] == [CALL]  # the reply as the model wrote it
    rows = store.get_messages(rt.session_id)
    assert [(r.role, r.message.get("tool_calls")) for r in rows] == [
        ("user", None), ("assistant", [CALL]), ("tool", None)]


def test_a_resent_reply_is_matched_on_the_full_path_too(
        eng: Engine, counting: CountingStore, store: Store) -> None:
    rt = eng.open_session(new=True)
    rt.prepare_history([user("list files")])
    rt.record({"role": "assistant", "content": None, "tool_calls": [CALL]})
    later = eng.open_session(rt.session_id)  # another runtime (a restart): no known chain
    history = [user("list files"), resent_call(),
               {"role": "tool", "tool_call_id": "call_1", "content": "a b"}]
    later.prepare_history(history)
    rows = store.get_messages(rt.session_id, include_inactive=True)
    assert [(r.role, r.active) for r in rows] == [
        ("user", True), ("assistant", True), ("tool", True)]
    assert rows[1].message["tool_calls"] == [CALL]


@pytest.mark.parametrize("changes", [
    {"fn": {"arguments": '{"n":2,"command":"ls"}'}},  # another value
    {"fn": {"arguments": '{"n":1,"command":"ls","x":0}'}},  # another argument
    {"fn": {"name": "sh"}},  # another tool
    {"id": "call_2"},  # another call
], ids=["value", "argument", "tool", "call-id"])
def test_a_reply_that_says_something_else_is_not_taken_for_the_stored_one(
        eng: Engine, counting: CountingStore, store: Store, changes: dict[str, Any]) -> None:
    rt = eng.open_session(new=True)
    rt.prepare_history([user("list files")])
    rt.record({"role": "assistant", "content": None, "tool_calls": [CALL]})
    other = resent_call(**changes)
    history = [user("list files"), other, {"role": "tool", "tool_call_id": "call_1",
                                           "content": "a b"}]
    rt.prepare_history(history)
    assert counting.syncs == 2  # a divergence: the full path placed it
    assert [r.message.get("tool_calls") for r in store.get_messages(rt.session_id)][1] == \
        other["tool_calls"]


def test_a_reply_resent_stripped_and_without_its_reasoning_is_the_stored_reply(
        eng: Engine, counting: CountingStore, store: Store) -> None:
    """Hermes keeps a reply without its surrounding white space; many clients drop the
    reasoning. Neither is an edit, on the full path too (a new runtime: no known chain)."""
    rt = eng.open_session(new=True)
    rt.prepare_history([user("one")])
    rt.record({"role": "assistant", "content": "Sure.\n", "reasoning_content": "think"})
    rt.prepare_history([user("one"), bot("Sure."), user("two")])
    rt.record({"role": "assistant", "content": None, "tool_calls": [CALL]})
    later = eng.open_session(rt.session_id)
    history = [user("one"), bot("Sure."), user("two"), resent_call(),
               {"role": "tool", "tool_call_id": "call_1", "content": "a b"}]
    prepared = later.prepare_history(history)
    rows = store.get_messages(rt.session_id, include_inactive=True)
    assert [(r.role, r.active) for r in rows] == [
        ("user", True), ("assistant", True), ("user", True), ("assistant", True),
        ("tool", True)]
    assert rows[1].message["content"] == "Sure.\n"
    assert not any("reasoning_content" in m for m in prepared.messages)  # not sent back
    assert resent(bot(" Sure.\n"), bot("Sure."))  # its spelling only
    assert not resent(bot("Sure"), bot("Sure."))  # not what it says
    assert not resent(user("one "), user("one"))  # a user's text is compared as typed


def call(n: int, name: str = "bash") -> dict[str, Any]:
    return {"id": f"call_{n}", "type": "function",
            "function": {"name": name, "arguments": f'{{"n": {n}}}'}}


def result(n: int) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"call_{n}", "content": f"out {n}"}


@pytest.mark.parametrize("fresh_runtime", [False, True], ids=["same-runtime", "restarted"])
def test_parallel_calls_resent_one_message_per_call_are_the_stored_reply(
        eng: Engine, store: Store, fresh_runtime: bool) -> None:
    """OpenAI Codex re-sends a reply of parallel calls as function_call, its output,
    function_call, its output (so do chat clients that keep a message per call): that is the
    stored reply, whose results follow it — one session, each message once. Before, it was a
    divergence: a branch with a copy of the conversation on every parallel turn."""
    rt = eng.open_session(new=True)
    rt.prepare_history([user("run three things")])
    stored = {"role": "assistant", "content": "Running them.",
              "tool_calls": [call(1), call(2), call(3)]}
    rt.record(stored)
    split = [user("run three things"),
             {"role": "assistant", "content": "Running them.", "tool_calls": [call(1)]},
             result(1), {"role": "assistant", "content": None, "tool_calls": [call(2)]},
             result(2), {"role": "assistant", "content": "", "tool_calls": [call(3)]}, result(3)]
    runtime = eng.open_session(rt.session_id) if fresh_runtime else rt
    prepared = runtime.prepare_history(split)
    assert runtime.session_id == rt.session_id
    rows = store.get_messages(rt.session_id, include_inactive=True)
    assert [(r.role, r.active) for r in rows] == [
        ("user", True), ("assistant", True), ("tool", True), ("tool", True), ("tool", True)]
    assert rows[1].message["tool_calls"] == stored["tool_calls"]
    assert [m["role"] for m in prepared.messages] == ["user", "assistant", "tool", "tool", "tool"]
    runtime.record(bot("all done"))
    runtime.prepare_history([*split, bot("all done"), user("thanks")])  # the next turn
    assert [r.role for r in store.get_messages(rt.session_id)] == [
        "user", "assistant", "tool", "tool", "tool", "assistant", "user"]
    assert len(store.list_sessions()) == 1


def test_calls_made_one_after_another_are_not_taken_for_one_reply(
        eng: Engine, store: Store) -> None:
    """Two replies of one call each, stored as such, re-sent as such: nothing regrouped. And a
    split whose later piece says something of its own is not the stored reply."""
    rt = eng.open_session(new=True)
    rt.prepare_history([user("go")])
    rt.record({"role": "assistant", "content": None, "tool_calls": [call(1)]})
    rt.prepare_history([user("go"), {"role": "assistant", "content": None,
                                     "tool_calls": [call(1)]}, result(1)])
    rt.record({"role": "assistant", "content": None, "tool_calls": [call(2)]})
    history = [user("go"), {"role": "assistant", "content": None, "tool_calls": [call(1)]},
               result(1), {"role": "assistant", "content": None, "tool_calls": [call(2)]},
               result(2)]
    rt.prepare_history(history)
    assert [r.role for r in store.get_messages(rt.session_id)] == [
        "user", "assistant", "tool", "assistant", "tool"]
    other = eng.open_session(new=True)
    other.prepare_history([user("both")])
    other.record({"role": "assistant", "content": None, "tool_calls": [call(1), call(2)]})
    talking = [user("both"), {"role": "assistant", "content": None, "tool_calls": [call(1)]},
               result(1), {"role": "assistant", "content": "now the second",
                           "tool_calls": [call(2)]}, result(2)]
    other.prepare_history(talking)
    assert [r.role for r in store.get_messages(other.session_id)] == [
        m["role"] for m in talking]  # a divergence, stored as sent (on its branch)


def test_a_conversation_resending_parallel_calls_split_stays_on_the_fast_path(
        eng: Engine, counting: CountingStore, store: Store) -> None:
    """Each turn of a Codex conversation re-sends every earlier parallel reply split: the
    known chain matches it (no full sync, which re-read and re-hashed the whole history every
    turn once one parallel reply was in it)."""
    rt = eng.open_session(new=True)
    history: list[dict[str, Any]] = [user("fix it")]
    rt.prepare_history(history)
    for turn in range(4):
        a, b = 2 * turn + 1, 2 * turn + 2
        rt.record({"role": "assistant", "content": None, "tool_calls": [call(a), call(b)]})
        history += [{"role": "assistant", "content": None, "tool_calls": [call(a)]}, result(a),
                    {"role": "assistant", "content": None, "tool_calls": [call(b)]}, result(b)]
        prepared = rt.prepare_history(history)
        assert [len(m.get("tool_calls") or []) for m in prepared.messages
                if m["role"] == "assistant"] == [2] * (turn + 1)  # as the model wrote them
    assert counting.syncs == 1  # the first turn only
    rows = store.get_messages(rt.session_id, include_inactive=True)
    assert [r.role for r in rows] == ["user"] + ["assistant", "tool", "tool"] * 4
    assert all(r.active for r in rows)


@pytest.mark.parametrize(("result", "cleared_one"), [
    ({"content": "[Old tool result content cleared]"}, True),
    ({"content": [{"type": "text", "text": "[Old tool result content cleared]"}]}, True),
    ({"content": "[Old tool output cleared to save context space]"}, True),  # Hermes-Agent's
    ({"content": "[Old tool result content cleared] but not all of it"}, False),
    ({"content": "a b c"}, False),  # another result: an edit
    ({"content": "[Old tool result content cleared]", "tool_call_id": "call_2"}, False),
    # a name the stored result lacked (or the reverse: Hermes restores results without it) is
    # the call's name, which the result answers by id: the same result
    ({"content": "[Old tool result content cleared]", "name": "bash"}, True),
    ({"content": "a b", "name": "bash"}, True),
], ids=["cleared", "cleared-as-part", "hermes", "longer", "other-text", "other-call", "named",
        "named-uncleared"])
def test_a_tool_result_resent_cleared_is_the_stored_result_and_nothing_else_is(
        eng: Engine, store: Store, result: dict[str, Any], cleared_one: bool) -> None:
    """OpenCode's ``compaction.prune`` re-sends an old result as its placeholder: the stored
    result (nothing diverges; the request carries the client's form). Any other change to a
    tool's message is a divergence, as before."""
    rt = eng.open_session(new=True)
    rt.prepare_history([user("list files")])
    rt.record({"role": "assistant", "content": None, "tool_calls": [CALL]})
    tool = {"role": "tool", "tool_call_id": "call_1", "content": "a b"}
    rt.prepare_history([user("list files"), resent_call(), tool])
    rt.record(bot("Two files."))
    history = [user("list files"), resent_call(), {**tool, **result}, bot("Two files."),
               user("and now?")]
    if not cleared_one:
        rt.prepare_history(history)
        rows = store.get_messages(rt.session_id, include_inactive=True)
        assert not rows[2].active  # a divergence: rewound (a named session's way)
        return
    later = eng.open_session(rt.session_id)  # another runtime: the full path (no chain)
    for runtime in (rt, later, rt):
        prepared = runtime.prepare_history(history)
        sent = [m for m in prepared.messages if m.get("role") == "tool"]
        assert sent == [{**tool, **result}]  # what the client sent
        rows = store.get_messages(rt.session_id, include_inactive=True)
        assert [(r.role, r.active) for r in rows] == [
            ("user", True), ("assistant", True), ("tool", True), ("assistant", True),
            ("user", True)]
        assert rows[2].message["content"] == "a b"  # the ledger keeps what the tool said


@pytest.mark.parametrize("added", [{"replace_all": False}, {"limit": None}])
def test_a_call_resent_with_an_optional_flag_at_its_default_is_the_stored_reply(
        eng: Engine, counting: CountingStore, store: Store, added: dict[str, Any]) -> None:
    """Claude Code re-sends each Edit call with ``"replace_all": false`` added: every such turn
    forked a branch that stored the whole history again."""
    rt = eng.open_session(new=True)
    rt.prepare_history([user("list files")])
    rt.record({"role": "assistant", "content": None, "tool_calls": [CALL]})
    arguments = {"n": 1, "command": "ls", **added}
    history = [user("list files"), resent_call(fn={"arguments": json.dumps(arguments)}),
               {"role": "tool", "tool_call_id": "call_1", "content": "a b"}]
    rt.prepare_history(history)
    later = eng.open_session(rt.session_id)  # and on the full path (a restart)
    later.prepare_history([*history, {"role": "assistant", "content": "done"},
                           user("thanks")])
    assert [s.id for s in store.list_sessions()] == [rt.session_id]  # no branch
    rows = store.get_messages(rt.session_id, include_inactive=True)
    assert [(r.role, r.active) for r in rows] == [
        ("user", True), ("assistant", True), ("tool", True), ("assistant", True),
        ("user", True)]
    assert rows[1].message["tool_calls"] == [CALL]
