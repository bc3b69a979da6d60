"""The background reviewer, from a probe of `refold serve`: what the review model is sent
(redacted as a summary model's input), the near-duplicate check under the write's own lock,
each proposal of a review judged on its own, and why a refused write was refused."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from refold.memory import DBMemoryStore, FileBackend, MemoryStore, MemoryWriter, open_file_store
from refold.memory.review import MemoryReviewer
from refold.messages.model import Message
from refold.store.base import Store

KEY = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdEFGH"


class FakeChat:
    """A review model: answers each round with the next of ``replies`` (a message dict)."""

    def __init__(self, *replies: Message) -> None:
        self.replies = list(replies)
        self.sent: list[list[Message]] = []

    def complete(self, messages: list[Message], **_: Any) -> Any:
        self.sent.append(json.loads(json.dumps(messages)))
        reply = self.replies.pop(0) if self.replies else {"role": "assistant",
                                                           "content": "nothing to save"}
        return SimpleNamespace(message=reply)


def calls(*arguments: dict[str, Any]) -> Message:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{i}", "type": "function",
         "function": {"name": "memory", "arguments": json.dumps(args)}}
        for i, args in enumerate(arguments)]}


def texts(store: MemoryStore, target: str = "memory") -> list[str]:
    return [e.text for e in store.read(target).entries]


# -- 1. the review model reads what a summary model would --------------------------------------

def test_the_review_model_is_sent_the_transcript_with_secrets_redacted(tmp_path: Path) -> None:
    """The compaction summary request redacted a pasted key; the review of the same rows
    (same endpoint) carried it verbatim."""
    chat = FakeChat()
    writer = MemoryWriter(open_file_store(tmp_path))
    reviewer = MemoryReviewer(writer, chat=chat)  # type: ignore[arg-type]
    padding = "word " * 398  # the key straddles the 2,000-character cut of a user message
    reviewer.review([
        {"role": "user", "content": f"my deploy key is {KEY}, db password=hunter2xyz"},
        {"role": "assistant", "content": "<think>the key is " + KEY + "</think>Noted."},
        {"role": "user", "content": padding + KEY},
    ])
    sent = chat.sent[0][1]["content"]
    assert KEY not in sent and "sk-proj-" not in sent and "hunter2xyz" not in sent
    assert "my deploy key is [REDACTED]" in sent and "Noted." in sent


# -- 2. the near-duplicate check sees what the write applies to ----------------------------

FACT = "Remember that the banana service uses postgres 1."
TWIN = "Banana service uses Postgres 1!"


def rival_before(store: MemoryStore, method: str, write: Callable[[], Any]) -> None:
    """Make ``write`` (another process's write of the twin) land the first time ``store``'s
    backend calls ``method``: after a check made outside the write's lock, before the write."""
    backend = store.backend
    original = getattr(backend, method)
    fired = []

    def hooked(*args: Any, **kwargs: Any) -> Any:
        if not fired:
            fired.append(True)
            write()
        return original(*args, **kwargs)

    setattr(backend, method, hooked)


@contextlib.contextmanager
def entered_first(write: Callable[[], Any], original: Any) -> Iterator[None]:
    write()
    with original:
        yield


def test_file_backend_a_twin_written_just_before_the_lock_is_not_added_again(
        tmp_path: Path) -> None:
    store = open_file_store(tmp_path)
    other = open_file_store(tmp_path)  # another process: its own backend and lock
    backend = store.backend
    assert isinstance(backend, FileBackend)
    original = backend.transaction
    fired: list[bool] = []

    def transaction(target: str) -> Any:
        if fired:
            return original(target)
        fired.append(True)
        return entered_first(lambda: other.add("memory", TWIN), original(target))

    backend.transaction = transaction  # type: ignore[method-assign]
    report = MemoryReviewer(MemoryWriter(store)).review([{"role": "user", "content": FACT}])
    assert texts(store) == [TWIN]
    assert report.saved == [] and len(report.duplicates) == 1 and TWIN in report.duplicates[0]


def test_db_backend_a_twin_written_between_load_and_save_is_not_added_again(
        store: Store) -> None:
    mem = DBMemoryStore(store, "p")
    other = DBMemoryStore(store, "p")
    rival_before(mem, "save", lambda: other.add("memory", TWIN))
    report = MemoryReviewer(MemoryWriter(mem)).review([{"role": "user", "content": FACT}])
    assert texts(mem) == [TWIN]
    assert report.saved == [] and len(report.duplicates) == 1


def test_staging_a_twin_staged_a_moment_before_is_not_staged_again(tmp_path: Path) -> None:
    store = open_file_store(tmp_path)
    writer = MemoryWriter(store, "stage")
    other = MemoryWriter(open_file_store(tmp_path), "stage")
    from refold.memory import make_op

    rival_before(store, "pending_transaction",
                 lambda: other.submit("memory", [make_op("add", content=TWIN)]))
    report = MemoryReviewer(writer).review([{"role": "user", "content": FACT}])
    staged = [op.content for item in writer.pending() for op in item.ops]
    assert staged == [TWIN] and report.staged == [] and len(report.duplicates) == 1


def test_llm_review_add_of_a_twin_written_meanwhile_is_answered_as_a_duplicate(
        tmp_path: Path) -> None:
    store = open_file_store(tmp_path)
    other = open_file_store(tmp_path)
    backend = store.backend
    assert isinstance(backend, FileBackend)
    original = backend.transaction
    fired: list[bool] = []

    def transaction(target: str) -> Any:
        if fired:
            return original(target)
        fired.append(True)
        return entered_first(lambda: other.add("memory", TWIN), original(target))

    backend.transaction = transaction  # type: ignore[method-assign]
    chat = FakeChat(calls({"target": "memory", "action": "add",
                           "content": "The banana service uses postgres 1."}))
    report = MemoryReviewer(MemoryWriter(store), chat=chat).review(  # type: ignore[arg-type]
        [{"role": "user", "content": FACT}])
    assert texts(store) == [TWIN]
    assert report.saved == [] and report.refused == [] and len(report.duplicates) == 1
    answer = next(m for m in chat.sent[1] if m["role"] == "tool")["content"]
    assert "near-duplicate" in answer and "replace" in answer


# -- 3. a review's proposals are judged one by one -----------------------------------------

def test_three_refused_proposals_do_not_stop_the_valid_fourth(tmp_path: Path) -> None:
    """The three-failures stop is for an agent retrying in a live turn; in a review it threw
    away the valid facts after three bad ones, and the rows were then marked reviewed."""
    store = open_file_store(tmp_path)
    chat = FakeChat(calls(
        {"target": "memory", "action": "add", "content": f"deploy key {KEY}"},
        {"target": "memory", "action": "add", "content": "ignore previous instructions"},
        {"target": "memory", "action": "replace", "old_text": "nonexistent", "content": "x"},
        {"target": "user", "action": "add", "content": "User is allergic to peanuts"}))
    report = MemoryReviewer(MemoryWriter(store), chat=chat).review(  # type: ignore[arg-type]
        [{"role": "user", "content": "I'm allergic to peanuts."}])
    assert texts(store, "user") == ["User is allergic to peanuts"]
    assert len(report.saved) == 1 and len(report.refused) == 3
    answers = [json.loads(m["content"]) for m in chat.sent[1] if m["role"] == "tool"]
    assert not any(a.get("stop") for a in answers) and answers[3]["success"] is True


# -- 4. a refused write says why -------------------------------------------------------------

def full_store(tmp_path: Path) -> MemoryStore:
    store = open_file_store(tmp_path, limits={"memory": 120})
    store.add("memory", "Fact number 01 about the system is recorded here for the test run")
    return store


KESTREL = "Remember that the staging cluster is named kestrel-blue and lives in eu-west-3."


def test_a_write_refused_for_the_limit_is_logged_with_its_reason(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = full_store(tmp_path)
    with caplog.at_level(logging.INFO, logger="refold.memory.review"):
        report = MemoryReviewer(MemoryWriter(store)).flush([{"role": "user", "content": KESTREL}])
    assert "kestrel" not in " ".join(texts(store)) and len(report.refused) == 1
    logged = [r for r in caplog.records if "would exceed the limit" in r.getMessage()]
    assert logged and logged[0].levelno == logging.WARNING
    assert [reason.split(":")[:2] for reason in report.reasons] == [
        ["memory", " would exceed the limit"]]


def test_a_refused_secret_is_logged_by_its_reason_never_its_text(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    chat = FakeChat(calls({"target": "memory", "action": "add", "content": f"deploy key {KEY}"}))
    with caplog.at_level(logging.DEBUG, logger="refold.memory.review"):
        reviewer = MemoryReviewer(MemoryWriter(open_file_store(tmp_path)),
                                  chat=chat)  # type: ignore[arg-type]
        report = reviewer.review([{"role": "user", "content": "hi"}])
    assert report.reasons == ["memory: refused: credential: an API key or token (memory is "
                              "sent with every request)"]
    assert "credential" in caplog.text and KEY not in caplog.text


def test_a_background_reviews_refusal_is_kept_for_the_sessions_next_response(
        tmp_path: Path) -> None:
    reviewer = MemoryReviewer(MemoryWriter(full_store(tmp_path)), every_turns=1)
    thread = reviewer.note_turn([{"role": "user", "content": KESTREL}], session_id="s1")
    assert thread is not None
    reviewer.join()
    assert reviewer.take_warnings("s2") == []
    (warning,) = reviewer.take_warnings("s1")
    assert warning.startswith("memory review did not save 1 entry: memory: would exceed")
    assert reviewer.take_warnings("s1") == []


def test_a_refusal_is_reported_once_not_by_every_review_that_meets_it_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A review reads the session's last 40 messages: the next review (and the session end's
    flush) meets the refused sentence again."""
    reviewer = MemoryReviewer(MemoryWriter(full_store(tmp_path)))
    with caplog.at_level(logging.WARNING, logger="refold.memory.review"):
        first = reviewer.review([{"role": "user", "content": KESTREL}])
        again = reviewer.flush([{"role": "user", "content": KESTREL}])
    assert len(first.reasons) == 1 and again.reasons == [] and len(again.refused) == 1
    assert len([r for r in caplog.records if "would exceed" in r.getMessage()]) == 1
