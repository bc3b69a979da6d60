"""refold as an openai-agents ``Session``: the agent's history in refold's ledger, compacted.

    from agents import Agent, Runner
    from refold.integrations.openai_agents import RefoldSession
    from refold.runtime.engine import Engine

    engine = Engine(store, model="gpt-4o-mini", context_length=128_000)
    session = RefoldSession("support-chat-42", engine)
    await Runner.run(agent, "Where is my order?", session=session)

``add_items`` stores the run's items in the ledger as chat messages (``refold.messages.
responses``): a user or tool group through ``SessionRuntime.prepare`` — which compacts when the
window is over the policy's threshold — and an assistant reply through ``record``, exactly as a
library caller's turn. ``get_items`` returns refold's model view (the checkpoint's summary and
kept head, then the tail) as input items, so a long session stays inside the window while the
ledger keeps every message (searchable, exportable). The session's system prompt (the memory
snapshot) is left out: the agent brings its own instructions.

The name is a refold session's exact id or title, never an id prefix (a short name that
began another session's id opened that session); a new name creates a session with it as the
title, and a RefoldSession that finds the name taken as it creates (another one, in another
thread, created it a moment ago) opens that one. ``get_items()`` without a limit applies
``session_settings.limit``, as the SDK's own sessions do.

Items are stored in the ``round_trip`` form of ``refold.messages.responses``: what the chat form
holds is stored as chat (searchable, compacted like any message), and what it has no place for
is kept verbatim beside it under the message key ``"refold_responses"``, never as content or a
call — so a run with a hosted tool (``web_search_call``, ``file_search_call``,
``computer_call``, ``mcp_list_tools``, ...) or an ``item_reference`` is stored and its items
come back as they were added, as does a ``function_call_output`` whose output is a list of
parts (text and images). A refusal is stored as a chat ``refusal`` part and comes back as one;
an ``input_file`` as a chat ``file`` part (a ``file_url`` alone has no chat form: InvalidInput);
content lists and an image's ``detail`` come back as given. Normalized on the way back, as the
chat form has no place for them and valid input needs none: item ids and statuses (and the
SDK's ``provider_data``), the ``"type": "message"`` of a user, system or developer message (they
come back as ``{"role", "content"}``), an assistant's short form (it comes back as a ``message``
item of ``output_text``), ``output_text`` annotations (they come back empty), and reasoning
items (only valid input with the provider's own ids; a summary's text is kept as the next
reply's ``reasoning_content``). A
``function_call_output`` whose call is not in the history is not returned: refold's view
repair drops it, as providers reject it. The other way round, a ``function_call`` stored
without its output yet (read while a run waits for a tool or an approval) comes back followed
by a ``function_call_output`` of ``[no result recorded]``, which is stored nowhere: the SDK
sends what ``get_items`` returns to the model, and a call without its output is a 400 there
(the SDK's own ``SQLiteSession`` returns the bare call). The real output, once added, takes
its place.

``pop_item`` and ``clear_session`` are reversible rewinds of the ledger (``refold sessions
rewinds`` lists them, ``refold sessions undo-rewind`` undoes one), never deletions. An assistant message stored with text and calls is
one ledger row but two items (more with kept items); ``pop_item`` removes the row and returns
its last item.

The runtime is blocking; every call runs in a worker thread. Requires ``openai-agents``
(``pip install 'refold[agents]'``) only for the ``SessionABC`` base it subclasses.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents.memory.session import SessionABC
from agents.memory.session_settings import SessionSettings

from refold.messages.model import Message
from refold.messages.responses import input_messages, to_items
from refold.runtime.engine import Engine
from refold.runtime.session import SessionRuntime


class RefoldSession(SessionABC):
    """An openai-agents session named ``session_id`` (a refold session's exact title or id)."""

    def __init__(self, session_id: str, engine: Engine, *,
                 session_settings: SessionSettings | None = None) -> None:
        self.session_id = session_id
        self.engine = engine
        self.session_settings = session_settings
        self._runtime: SessionRuntime | None = None
        self._lock = asyncio.Lock()

    def runtime(self) -> SessionRuntime:
        """The refold runtime behind this session (opened, or created, on first use)."""
        if self._runtime is None:  # the exact id or title; created once however many race
            self._runtime = self.engine.open_named(self.session_id, source="openai-agents")
        return self._runtime

    # -- the Session protocol ------------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[Any]:
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit  # the session's own default, as SQLiteSession
        async with self._lock:
            items = await asyncio.to_thread(self._view_items)
        return items if limit is None else items[-limit:] if limit > 0 else []

    async def add_items(self, items: list[Any]) -> None:
        if not items:
            return
        messages = input_messages([_plain(i) for i in items], round_trip=True)
        async with self._lock:
            await asyncio.to_thread(self._store, messages)

    async def pop_item(self) -> Any | None:
        async with self._lock:
            return await asyncio.to_thread(self._pop)

    async def clear_session(self) -> None:
        async with self._lock:
            await asyncio.to_thread(self._clear)

    # -- blocking halves ---------------------------------------------------------------------
    def _view_items(self) -> list[Any]:
        runtime = self.runtime()
        prepared = runtime.prepare([])  # stores nothing; compacts if the view is over the mark
        messages = prepared.messages
        system = runtime.system_text()
        if messages and messages[0].get("role") == "system" and \
                messages[0].get("content") == system:
            messages = messages[1:]
        return to_items(messages)

    def _store(self, messages: list[Message]) -> None:
        runtime = self.runtime()
        pending: list[Message] = []
        for message in messages:
            if message.get("role") != "assistant":
                pending.append(message)
                continue
            if pending:
                runtime.prepare(pending)
                pending = []
            runtime.record(message)
        if pending:
            runtime.prepare(pending)

    def _pop(self) -> Any | None:
        runtime = self.runtime()
        last = runtime.store.last_message(runtime.session_id)
        if last is None:
            return None
        # the last item of a run is the model's reply: any role pops (reversibly)
        runtime.store.rewind(runtime.session_id, last.seq, any_role=True)
        items = to_items([last.message])
        return items[-1] if items else None

    def _clear(self) -> None:
        runtime = self.runtime()
        rows = runtime.store.get_messages(runtime.session_id)
        if rows:
            runtime.store.rewind(runtime.session_id, rows[0].seq, any_role=True)


def _plain(item: Any) -> Any:
    """An item as a plain dict (the SDK may hand pydantic models or TypedDicts)."""
    dump = getattr(item, "model_dump", None)
    return dump(exclude_unset=True) if callable(dump) else item


__all__ = ["RefoldSession"]
