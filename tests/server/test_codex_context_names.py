"""OpenAI Codex opens every task with the same ``<environment_context>`` user message (the
folder, the shell, the date): unrelated ``codex exec`` runs in one folder on one day were
derived into one session family, each a branch of the one before with the context row copied.
A conversation is now named by its first user message that is a request; one stored under the
old name (its context message) is still continued there."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai

from refold.server.sessions import _digest, derived_ref
from refold.store import Store
from refold.testing import serve

ProxyFactory = Callable[..., Any]
ENV = ("<environment_context>\n  <cwd>/work/project</cwd>\n  <shell>bash</shell>\n"
       "  <current_date>2026-12-07</current_date>\n</environment_context>")


def task(text: str) -> list[dict[str, Any]]:
    return [{"role": "developer", "content": "You are Codex."},
            {"role": "user", "content": [{"type": "input_text", "text": ENV}]},
            {"role": "user", "content": [{"type": "input_text", "text": text}]}]


def test_two_codex_runs_in_one_folder_are_two_conversations(start_proxy: ProxyFactory,
                                                            sqlite_store: Store) -> None:
    with serve(["Listed.", "Fixed.", "Done."]) as up:
        client = openai.OpenAI(base_url=start_proxy(up).base_url, api_key="none",
                               max_retries=0)
        client.responses.create(model="m", input=task("List the files."), store=False)
        client.responses.create(model="m", input=task("Fix the failing test."), store=False)
        client.responses.create(  # the first run's next turn: its own session again
            model="m", store=False, input=[*task("List the files."),
                                           {"role": "assistant", "content": "Listed."},
                                           {"role": "user", "content": "Thanks, now stop."}])
    sessions = sqlite_store.list_sessions()
    assert len(sessions) == 2
    assert all(s.parent_session_id is None for s in sessions)  # no family, no branch
    texts = sorted(len(sqlite_store.get_messages(s.id)) for s in sessions)
    assert texts == [3, 5]


def test_a_session_named_by_its_context_message_is_continued(start_proxy: ProxyFactory,
                                                             sqlite_store: Store) -> None:
    history = task("List the files.")
    chat = [{"role": "user", "content": ENV}, {"role": "user", "content": "List the files."}]
    old = _digest(["", ENV])  # the name refold gave before: the chat form's first user message
    assert derived_ref("", chat) != old
    stored = sqlite_store.create_session(title=old)
    sqlite_store.append_messages(stored.id, [*chat, {"role": "assistant", "content": "Listed."}])
    with serve(["Stopped."]) as up:
        client = openai.OpenAI(base_url=start_proxy(up).base_url, api_key="none",
                               max_retries=0)
        client.responses.create(model="m", store=False, input=[
            *history, {"role": "assistant", "content": "Listed."},
            {"role": "user", "content": "Thanks, now stop."}])
    assert [s.id for s in sqlite_store.list_sessions()] == [stored.id]
    assert len(sqlite_store.get_messages(stored.id)) == 5
