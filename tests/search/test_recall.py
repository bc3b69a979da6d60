"""Recall from past sessions: bounded, fenced, reference-only, never the current session."""

from __future__ import annotations

from typing import Any

import numpy as np

from refold.runtime.recall import recall_block, with_recall
from refold.search.recall import RECALL_HEADER, estimate_tokens, recall_text
from refold.search.vectors import VectorIndex, hybrid_search
from refold.store import Store


def test_recall_finds_past_sessions_and_bounds_itself(store: Store) -> None:
    old = store.create_session(title="db work")
    store.append_messages(old.id, [
        {"role": "user", "content": "the staging database listens on port 6543"},
        {"role": "assistant", "content": "noted: staging db port 6543 " + "x" * 3000},
        {"role": "user", "content": "unrelated tea chat"}])
    now = store.create_session()
    store.append_messages(now.id, [{"role": "user",
                                    "content": "what port does the staging database use?"}])
    text = recall_text(store, "what port does the staging database use?",
                       current_session_id=now.id, max_tokens=200)
    assert text.startswith(RECALL_HEADER)
    assert "port 6543" in text and "```" in text
    assert "tea" not in text
    assert "what port does" not in text  # the current session is never recalled
    assert estimate_tokens(text) <= 200
    block = recall_block(text)
    sent = with_recall([{"role": "system", "content": "frozen"},
                        {"role": "user", "content": "what port?"}], block)
    assert sent[0] == {"role": "system", "content": "frozen"}  # the system prompt untouched
    assert sent[1]["content"].endswith(block.strip())


def test_recall_gives_nothing_when_nothing_matches(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [{"role": "user", "content": "hello there"}])
    assert recall_text(store, "quantum chromodynamics lecture", current_session_id=None) == ""
    assert recall_text(store, "   ", current_session_id=None) == ""
    assert recall_text(store, "\ud800 *** AND", current_session_id=None) == ""


def test_recall_skips_the_same_question_asked_before_by_a_named_speaker(store: Store) -> None:
    past = store.create_session(title="group chat")
    store.append_messages(past.id, [
        {"role": "user", "name": "Caroline", "content": "which port does staging use?"},
        {"role": "assistant", "name": "bot", "content": "staging uses port 6543"}])
    text = recall_text(store, "which port does staging use?", current_session_id=None)
    assert "bot: staging uses port 6543" in text  # who said it comes along
    assert "Caroline" not in text  # the question itself, asked again, is not an answer


class _FlatEmbedder:
    """Every text at the same point: the vector side finds every message 'near'."""

    model = "test-flat"
    dim = 4

    def passages(self, texts: list[str]) -> Any:
        return np.ones((len(texts), self.dim), dtype=np.float32) / 2

    def query(self, text: str) -> Any:
        return np.ones(self.dim, dtype=np.float32) / 2


def test_hybrid_recall_adds_nothing_to_small_talk(store: Store) -> None:
    """The vector side finds something for any message; small talk must still get no block
    (it used to: a message of stop words, or of one word, passed every hit)."""
    past = store.create_session(title="zoo trip")
    store.append_messages(past.id, [
        {"role": "user", "content": "the staging database listens on port 6543"},
        {"role": "assistant", "content": "the giraffe enclosure opens at nine"},
        {"role": "user", "content": "deploy the web app to staging"}])
    index = VectorIndex(store, _FlatEmbedder())
    index.backfill()
    now = store.create_session()

    def recall(text: str) -> str:
        return recall_text(store, text, current_session_id=now.id,
                           search=lambda q: hybrid_search(store, q, index=index))

    for small_talk in ("hello", "thanks!", "yes please", "try again", "go ahead", "ok"):
        assert recall(small_talk) == "", small_talk
    assert "giraffe enclosure" in recall("giraffe")  # one content word: held, recalled
    assert "port 6543" not in recall("giraffe")
    assert "port 6543" in recall('"port 6543"')  # explicit syntax: what it matched
    assert "giraffe" not in recall("staging -deploy")


def test_recall_matches_identifiers_and_whole_words(store: Store) -> None:
    """A question naming an identifier recalls the message holding it (its words were looked
    for joined by spaces, never found in get_user_settings_cache), and a word inside another
    one is no match ("fix" in "fixture")."""
    past = store.create_session(title="cache work")
    store.append_messages(past.id, [
        {"role": "assistant", "content": "we keep get_user_settings_cache with a 60 s TTL"},
        {"role": "assistant", "content": "the fixture stripe_mock returns a stale webhook"},
        {"role": "assistant", "content": "the fix for the login redirect is merged"}])
    now = store.create_session()
    text = recall_text(store, "what did we decide about get_user_settings_cache?",
                       current_session_id=now.id)
    assert "60 s TTL" in text
    index = VectorIndex(store, _FlatEmbedder())  # every message comes back from the search
    index.backfill()
    text = recall_text(store, "can you fix the login?", current_session_id=now.id,
                       search=lambda q: hybrid_search(store, q, index=index))
    assert "login redirect" in text and "stripe_mock" not in text
