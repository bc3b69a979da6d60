"""The steady turn's C-speed shortcuts take the same decisions as the general code they skip.

Each shortcut (a list ``==``, ``map`` over C functions, a text-only message or chunk handled
without the general checks' calls) is compared with the general path on generated inputs: the
general path is reached with the same values in a ``dict`` subclass (the shortcuts take exact
dicts only) or with the per-message flags the shortcut reads left out.
"""

from __future__ import annotations

import gc
import sqlite3
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.errors import InvalidInput, MessageValidationError, StorageError
from refold.llm.sse import EventSplitter, StreamAssembler, _data_of
from refold.messages.model import wire_form
from refold.messages.validate import validate_message
from refold.runtime.chain import KnownChain, _frozen, _plain, comparable
from refold.runtime.cost import CostBook
from refold.runtime.valid import _unpaired, needs_repair
from refold.runtime.view import ViewCache
from refold.server.completions import check_body
from refold.store.base import StoredMessage
from refold.store.sqlite.database import Database


class Sub(dict):  # type: ignore[type-arg]
    """A dict the shortcuts do not take: the general path, with the same values."""


ROLES = st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "x"])
TEXT = st.text(max_size=8) | st.sampled_from(["caf\u00e9", "\ud800", "", "  hi  "])
SCALAR = st.none() | st.booleans() | st.integers(-2, 2) | st.floats(allow_nan=False) | TEXT
CALL = st.fixed_dictionaries({"id": TEXT, "type": st.just("function"),
                              "function": st.fixed_dictionaries({"name": TEXT,
                                                                 "arguments": TEXT})})
VALUE = SCALAR | st.lists(CALL, max_size=2) | st.lists(SCALAR, max_size=2)
MESSAGE = st.dictionaries(st.sampled_from(["role", "content", "name", "tool_calls",
                                           "tool_call_id", "_x", "reasoning_content"]),
                          VALUE, max_size=5) | st.fixed_dictionaries({"role": ROLES, "content": TEXT | st.none()})


@settings(max_examples=300, deadline=None)
@given(MESSAGE)
def test_wire_and_comparable_forms_match_their_comprehensions(message: dict[str, Any]) -> None:
    assert wire_form(message) == {k: v for k, v in message.items() if not k.startswith("_")}
    assert comparable(message) == {k: v for k, v in message.items()
                                   if v is not None and not k.startswith("_")}
    assert wire_form(message) is not message and comparable(message) is not message
    assert _plain(message) == all(type(leaf) in (str, type(None)) for leaf in leaves(message))


def leaves(value: Any) -> list[Any]:
    """Every leaf of a JSON value, and its dict keys (a non-str key counts as a leaf)."""
    if type(value) is list:
        return [leaf for inner in value for leaf in leaves(inner)]
    if type(value) is dict:
        return [leaf for key, inner in value.items()
                for leaf in ([] if type(key) is str else [key]) + leaves(inner)]
    return [value]


@settings(max_examples=300, deadline=None)
@given(st.lists(MESSAGE, max_size=5))
def test_provider_pairing_shortcut_matches_the_loop(messages: list[dict[str, Any]]) -> None:
    assume_calls = [m for m in messages if isinstance(m.get("tool_calls"), list | type(None))]
    for batch in (messages, assume_calls):
        try:
            expected: Any = _unpaired(batch)
        except (AttributeError, TypeError) as exc:
            expected = type(exc)
        try:
            got: Any = needs_repair(batch)
        except (AttributeError, TypeError) as exc:
            got = type(exc)
        assert got == expected


def _outcome(call: Any) -> Any:
    try:
        return ("ok", call())
    except (InvalidInput, MessageValidationError) as exc:
        return ("error", str(exc))


@settings(max_examples=400, deadline=None)
@given(MESSAGE)
def test_text_message_validation_shortcut_matches_the_checks(message: dict[str, Any]) -> None:
    fast = _outcome(lambda: validate_message(message, 0))
    slow = _outcome(lambda: validate_message(Sub(message), 0))
    assert fast == slow


@settings(max_examples=300, deadline=None)
@given(st.lists(MESSAGE | st.integers() | st.fixed_dictionaries({"role": st.integers()}),
                min_size=1, max_size=5))
def test_request_body_check_shortcut_matches_the_loop(messages: list[Any]) -> None:
    fast = _outcome(lambda: check_body({"messages": messages}))
    slow = _outcome(lambda: check_body({"messages": [Sub(m) if type(m) is dict else m
                                                     for m in messages]}))
    assert fast[0] == slow[0] and (fast[0] == "ok" or fast[1] == slow[1])


@settings(max_examples=300, deadline=None)
@given(st.lists(MESSAGE, max_size=4), st.lists(MESSAGE, max_size=3), st.booleans())
def test_known_prefix_shortcut_matches_the_loop(stored: list[dict[str, Any]],
                                                 extra: list[dict[str, Any]],
                                                 respell: bool) -> None:
    chain = KnownChain.of("s", stored, "tip")
    loop = KnownChain("s", chain.messages, "tip")  # no per-message flags: the general loop
    sent = [dict(m) for m in stored] + extra
    if respell and sent:
        sent[0] = Sub(sent[0])
    assert chain.known_prefix(sent) == loop.known_prefix(sent)
    assert chain.known_prefix(sent[:-1]) == loop.known_prefix(sent[:-1])


@settings(max_examples=400, deadline=None)
@given(MESSAGE, MESSAGE, st.sampled_from(["", " ", "\n"]))
def test_the_last_message_test_rejects_early_only_what_the_full_test_rejects(
        stored: dict[str, Any], raw: dict[str, Any], pad: str) -> None:
    """``KnownChain.ends_at`` tells a message apart by its role and stripped text before the
    full test (the proxy asks every runtime it holds): never a message that test accepts."""
    from refold.runtime.chain import _is_known

    chain = KnownChain.of("s", [stored], "tip")
    for candidate in (raw, dict(stored), {**stored, "content": pad + str(stored.get("content"))
                                          + pad} if isinstance(stored.get("content"), str)
                      else dict(stored)):
        assert chain.ends_at(candidate) == _is_known(candidate, chain.messages[0],
                                                     chain.plain[0])


def test_known_prefix_shortcut_tells_types_apart() -> None:
    chain = KnownChain.of("s", [{"role": "user", "content": "1"}], "tip")
    assert chain.all_plain
    assert chain.known_prefix([{"role": "user", "content": "1"}, {"role": "user"}]) == 1
    assert chain.known_prefix([{"role": "user", "content": 1}]) is None
    nested = KnownChain.of("s", [{"role": "user", "content": [{"type": "text", "text": "1"}]}],
                           "tip")
    assert nested.all_plain  # (no number anywhere: ``==`` is exact)
    assert nested.known_prefix([{"role": "user", "content": [{"type": "text", "text": 1.0}]}]) \
        is None
    numbered = KnownChain.of("s", [{"role": "user", "content": [{"type": "text", "n": 1}]}],
                             "tip")
    assert not numbered.all_plain
    assert numbered.known_prefix([{"role": "user", "content": [{"type": "text", "n": 1.0}]}]) \
        is None  # (1.0 == 1 in Python; not in JSON: the loop's exact compare decides)


@settings(max_examples=200, deadline=None)
@given(st.lists(MESSAGE, min_size=1, max_size=4))
def test_view_copies_are_fresh_deep_copies(messages: list[dict[str, Any]]) -> None:
    rows = [StoredMessage("s", i + 1, m, f"i{i}", 1, 0.0, True) for i, m in enumerate(messages)]
    view = ViewCache("s", None, rows, [dict(m) for m in messages], len(messages),
                     len(messages), f"i{len(messages) - 1}")
    copies = view.copies()
    assert copies == [wire_form(m) for m in messages]
    for copy, (form, _) in zip(copies, view.wire, strict=True):
        assert copy is not form
        for key, value in copy.items():
            if isinstance(value, dict | list):
                assert value is not form[key]  # nesting copied too
    assert view.nested == sum(n for _, n in view.wire)
    view.extend([StoredMessage("s", len(messages) + 1, {"role": "user", "content": [{"a": 1}]},
                               "x", 1, 0.0, True)], lambda m: 1)
    assert view.nested == sum(n for _, n in view.wire) and view.copies()[-1]["content"] == [
        {"a": 1}]


def test_frozen_forms_are_snapshots() -> None:
    message = {"role": "assistant", "tool_calls": [{"id": "1"}], "content": None}
    form = _frozen(message)
    message["tool_calls"][0]["id"] = "2"
    assert form == {"role": "assistant", "tool_calls": [{"id": "1"}]}


CHUNK_TEXT = st.text(max_size=5)
DELTA = st.fixed_dictionaries({}, optional={"content": CHUNK_TEXT | st.none() | st.integers(),
                                            "role": st.just("assistant"),
                                            "reasoning_content": CHUNK_TEXT,
                                            "tool_calls": st.lists(st.fixed_dictionaries(
                                                {"index": st.integers(0, 1)},
                                                optional={"id": CHUNK_TEXT, "function":
                                                          st.fixed_dictionaries(
                                                              {}, optional={
                                                                  "name": CHUNK_TEXT,
                                                                  "arguments": CHUNK_TEXT})}),
                                                max_size=2)})
CHUNK = st.fixed_dictionaries({"choices": st.lists(st.fixed_dictionaries(
    {"delta": DELTA}, optional={"index": st.integers(0, 1),
                                "finish_reason": st.none() | st.just("stop")}), max_size=2)},
    optional={"model": CHUNK_TEXT, "usage": st.just({"prompt_tokens": 1})})


@settings(max_examples=300, deadline=None)
@given(st.lists(CHUNK, max_size=6))
def test_text_chunk_shortcut_folds_as_the_general_path(chunks: list[dict[str, Any]]) -> None:
    fast, slow = StreamAssembler(), StreamAssembler()
    for chunk in chunks:
        fast.add(chunk)
        slow.add({**chunk, "choices": [{**c, "delta": Sub(c["delta"])} for c in chunk["choices"]]})
    assert fast.message() == slow.message()
    assert (fast.finish_reason, fast.usage, fast.model, fast.chunks) == (
        slow.finish_reason, slow.usage, slow.model, slow.chunks)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"data: {\"a\":1}\n\n", b"data: x\n", b"data:y\n\n",
                                 b"event: e\ndata: z\n\n", b"data: [DONE]\n\n", b": c\n\n",
                                 b"data: \xff\n\n", b"\r\n", b"data: q\r\n\r\n"]),
                max_size=8), st.integers(1, 7))
def test_event_split_shortcut_matches_the_data_reader(pieces: list[bytes], cut: int) -> None:
    stream = b"".join(pieces)
    splitter = EventSplitter()
    events = []
    for start in range(0, len(stream), cut):
        events += splitter.feed(stream[start:start + cut])
    assert [e.data for e in events] == [_data_of(e.raw) for e in events]


def test_write_rolls_back_and_translates_sqlite_errors(tmp_path: Any) -> None:
    db = Database(str(tmp_path / "x.db"), synchronous="NORMAL")
    try:
        with db.write() as conn:
            conn.execute("CREATE TABLE t (a INTEGER PRIMARY KEY)")
        with pytest.raises(StorageError), db.write() as conn:
            conn.execute("INSERT INTO t VALUES (1)")
            conn.execute("INSERT INTO t VALUES (1)")  # IntegrityError: translated
        with pytest.raises(KeyError), db.write() as conn:
            conn.execute("INSERT INTO t VALUES (2)")
            raise KeyError("not storage")  # passed on as it is
        with db.write() as conn, db.write() as inner:  # nested: joins the outer transaction
            assert inner is conn
            conn.execute("INSERT INTO t VALUES (3)")
        assert db.conn.execute("SELECT a FROM t").fetchall() == [(3,)]  # 1 and 2 rolled back
        assert not db.conn.in_transaction
        assert db.last_commit_mark() is not None and db.unchanged_since(db.last_commit_mark())
        with pytest.raises(sqlite3.Error):  # (what translated() leaves to the caller outside)
            db.conn.execute("SELECT * FROM missing")
    finally:
        db.close()


def test_prices_are_looked_up_once_per_model() -> None:
    book = CostBook()
    assert book.price("gpt-4o") == book.price("gpt-4o") is not None
    assert book.price(None) is None and book.price("no-such-model-xyz") is None
    for index in range(300):
        book.price(f"model-{index}")
    assert len(book._prices) <= 257  # bounded


def test_tune_gc_freezes_the_startup_heap_and_keeps_the_thresholds() -> None:
    from refold.server.runner import tune_gc

    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == before  # (raised, serve's memory kept growing)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_new_messages_are_too_heavy_for_the_event_loop_by_the_characters_of_their_strings(
        ) -> None:
    from refold.runtime.inline import INLINE_NEW_CHARS, too_heavy_inline

    half = "a" * (INLINE_NEW_CHARS // 2)
    assert not too_heavy_inline([{"role": "user", "content": half}])
    # every string counts, the role's too: 4 + (INLINE_NEW_CHARS - 4) is just within
    assert not too_heavy_inline([{"role": "user", "content": "a" * (INLINE_NEW_CHARS - 4)}])
    assert too_heavy_inline([{"role": "user", "content": "a" * (INLINE_NEW_CHARS - 3)}])
    assert too_heavy_inline([{"role": "user", "content": half},
                             {"role": "tool", "tool_call_id": "t", "content": half + "b"}])
    # nested: a content list's parts, a call's arguments
    assert too_heavy_inline([{"role": "user", "content": [
        {"type": "text", "text": half}, {"type": "image_url", "image_url": {"url": half}}]}])
    assert too_heavy_inline([{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "w", "arguments": half * 3}}]}])
    assert not too_heavy_inline([])
