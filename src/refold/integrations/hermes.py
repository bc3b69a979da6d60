"""refold as a Hermes-Agent plugin: its context engine, and a memory provider for recall.

Install ``refold[hermes]``; Hermes finds the plugin through the ``hermes_agent.plugins`` entry
point (``refold = refold.integrations.hermes``) and calls ``register(ctx)``, which registers
``RefoldContextEngine`` (select it with ``context.engine: refold`` in Hermes' config.yaml).
Hermes loads memory providers from directories only (``$HERMES_HOME/plugins/<name>/``), and
only one whose ``__init__.py`` text names ``MemoryProvider`` (a cheap scan before importing); a
one-line ``__init__.py`` there — ``MEMORY_PLUGIN_INIT``,
``from refold.integrations.hermes import RefoldMemoryProvider, register`` — makes
``memory.provider: refold`` load ``RefoldMemoryProvider`` through the same ``register``.

Both sides share one refold ``Engine`` per database (default ``$HERMES_HOME/refold/refold.db``;
the path comes from Hermes' ``hermes_home``, never from the environment) and one refold session
per Hermes session (titled ``hermes:<session id>``, source ``hermes``):

- every history Hermes hands over (``compress``, ``sync_turn``'s ``messages``,
  ``on_session_end``) goes through ``SessionRuntime.prepare_history``, which recognizes what
  is already stored: each message lands in the ledger once, whichever hook saw it first; a
  turn ``sync_turn`` gets without ``messages`` is appended after what is stored (two
  processes creating one Hermes session's refold session at once both store into it);
- ``compress`` returns refold's model view after compacting (the checkpoint's kept head and
  summary, then the tail) behind Hermes' own system message; the full transcript stays in the
  ledger, searchable with the ``session_search`` tool the engine exposes;
- ``should_compress`` compares the last real prompt size with refold's threshold (the policy's
  fraction of ``context_length``); ``threshold_tokens`` reports the same number;
- the memory provider's ``prefetch`` recalls matching messages of *other* sessions from the
  ledger (full-text search), the cross-session memory Hermes injects before a turn: the
  session asking (``prefetch``'s ``session_id``, else the current one) is left out, so the
  current session is not recalled to itself, and a gateway's chats each recall the others;
  after ``on_session_switch`` (``/new``, ``/reset``, a compression) the new id is the current
  session and the one left behind is recalled like any other.

``memory_context`` (text from Hermes' memory providers before a compaction) is not folded into
refold's summary: refold's builtin summarizer takes no extra text. It is kept as a session
event (``hermes.memory_context``) so nothing Hermes handed over is lost.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from agent.context_engine import ContextEngine
from agent.memory_provider import MemoryProvider

from refold.compaction import projection_messages
from refold.compaction.summary import is_summary_message
from refold.errors import NotFound, RefoldError
from refold.messages.model import Message, content_text, wire_form
from refold.pricing import token_count
from refold.runtime.engine import Engine
from refold.runtime.session import SessionRuntime
from refold.store import Checkpoint, SearchQuery, open_store
from refold.tools.session_search import session_search_tool

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_CONTEXT = 128_000
RECALL_HITS = 5
RECALL_CHARS = 300  # of each recalled message (the whole fact, not the match's snippet)
# $HERMES_HOME/plugins/refold/__init__.py: Hermes' memory loader skips a plugin directory whose
# __init__.py does not name MemoryProvider (or register_memory_provider)
MEMORY_PLUGIN_INIT = "from refold.integrations.hermes import RefoldMemoryProvider, register\n"


class Backend:
    """One refold store over one database, an engine per context window its Hermes sessions
    run with (Hermes gives each agent its model's window; a gateway may run several), and the
    runtime of each Hermes session."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine  # the default window's (a session no window was given for)
        self.engines: dict[tuple[str, int], Engine] = {
            (engine.model, engine.ops.context_length): engine}
        self.runtimes: dict[str, SessionRuntime] = {}
        self.windows: dict[str, tuple[str, int]] = {}  # Hermes session: (model, window) given
        self.lock = threading.RLock()

    def engine_for(self, model: str, context_length: int) -> Engine:
        """The engine of one (model, context window), over this backend's store."""
        key = (model, int(context_length))
        with self.lock:
            if key not in self.engines:
                self.engines[key] = Engine(self.engine.store, model=key[0],
                                           context_length=key[1],
                                           background_precompact=False)
            return self.engines[key]

    def set_window(self, hermes_session: str, model: str, context_length: int) -> Engine:
        """Hermes runs ``hermes_session`` with ``model`` and ``context_length`` from now on (a
        session start, a model switch): its runtime is reopened on that window's engine when
        it was open on another (the memory provider may have opened it first, before the
        context engine knew the window); the engine."""
        with self.lock:
            engine = self.engine_for(model, context_length)
            self.windows[hermes_session] = (engine.model, engine.ops.context_length)
            rt = self.runtimes.get(hermes_session)
            if rt is not None and self.engine_of(hermes_session) is not engine:
                del self.runtimes[hermes_session]
                rt.close()
            return engine

    def engine_of(self, hermes_session: str) -> Engine:
        """The engine ``hermes_session`` runs on: its window's, else the default one."""
        window = self.windows.get(hermes_session)
        return self.engine if window is None else self.engine_for(*window)

    def runtime(self, hermes_session: str) -> SessionRuntime:
        """The runtime of the refold session titled ``hermes:<id>``, opened or created on first
        use. Another process (a gateway restarted while the old one drains) may create it
        between this one's lookup and its creation: the title is taken, so this one opens that
        session and stores into it too (never an error that loses the turn)."""
        with self.lock:
            if hermes_session not in self.runtimes:
                self.runtimes[hermes_session] = self.engine_of(hermes_session).open_named(
                    f"hermes:{hermes_session}", source="hermes")
            return self.runtimes[hermes_session]

    def sync(self, hermes_session: str, messages: list[Message]) -> Any:
        """Store what of ``messages`` is new (re-sent history is recognized): the Prepared."""
        history = [m for m in messages if isinstance(m, dict) and m.get("role")]
        with self.lock:
            rt = self.runtime(hermes_session)
            return rt.prepare_history(self._expanded(rt, history))

    def append(self, hermes_session: str, turn: list[Message]) -> Any:
        """Store ``turn`` after what the session holds, whoever wrote it (a turn handed over
        without its history is new, not the whole conversation): the Prepared."""
        with self.lock:
            return self.runtime(hermes_session).prepare(turn)

    @staticmethod
    def _expanded(rt: SessionRuntime, history: list[Message]) -> list[Message]:
        """After a ``compress`` Hermes carries on with refold's view (head, summary, tail):
        the stretch behind the summary is put back from the ledger, and a tail message the
        view showed shortened (a cut copy of an oversized message, a pruned tool output) that
        Hermes hands back as it got it is put back as stored, so the history refold sees is
        the conversation itself and nothing is stored twice (or as an edit). A tail message
        Hermes changed itself is taken as it sends it."""
        last = max((i for i, m in enumerate(history) if is_summary_message(m)), default=None)
        if last is None:
            return history
        checkpoint = _held_checkpoint(rt, history[last])
        if checkpoint is None:
            return history  # not a summary of this session's: the history as Hermes sends it
        system = [m for m in history[:1] if m.get("role") == "system"]
        rows = rt.store.get_messages(rt.session_id)
        before = [r.message for r in rows if r.seq < checkpoint.tail_start_seq]
        tail = [r for r in rows if r.seq >= checkpoint.tail_start_seq]
        shortened = {int(seq): m for seq, m in (checkpoint.details.get("overrides") or {}).items()}
        after = list(history[last + 1:])
        for i, row in enumerate(tail[:len(after)]):
            shown = shortened.get(row.seq)
            if shown is not None and _as_shown(after[i], shown):
                after[i] = row.message
        return system + before + after

    def close(self, hermes_session: str) -> None:
        with self.lock:
            rt = self.runtimes.pop(hermes_session, None)
        if rt is not None:
            rt.close()


def _held_checkpoint(rt: SessionRuntime, summary: Message) -> Checkpoint | None:
    """The checkpoint whose summary ``summary`` is, as Hermes holds it: the one ``compress``
    returned, which need not be the newest (the memory provider's ``sync_turn`` goes through
    ``prepare_history``, which compacts on its own past the threshold, and Hermes never sees
    that view). Rebuilding Hermes' history around the newest instead misplaced the stretch
    behind the summary: the history read as an edit, and the turns since were rewound and
    stored again at every sync (a copy of each, then more). The newest when none matches by
    text (a summary Hermes re-spelled), None when the session has no checkpoint."""
    text = content_text(summary).strip()

    def holds(checkpoint: Checkpoint) -> bool:
        block = checkpoint.details.get("block") or [{"content": checkpoint.summary}]
        return any(content_text(m).strip() == text for m in block if isinstance(m, dict))

    latest = rt.store.latest_checkpoint(rt.session_id)
    if latest is None or holds(latest):  # (usually: every checkpoint is read only otherwise)
        return latest
    return next((c for c in reversed(rt.store.list_checkpoints(rt.session_id)) if holds(c)),
                latest)


def _as_shown(sent: Message, shown: Message) -> bool:
    """Is ``sent`` the view's shortened copy ``shown`` as Hermes hands it back (its role and
    content; Hermes may drop or add other keys)?"""
    wire = wire_form(shown)
    return sent.get("role") == wire.get("role") and sent.get("content") == wire.get("content")


_BACKENDS: dict[str, Backend] = {}
_BACKENDS_LOCK = threading.Lock()


def backend_for(db: str, *, model: str = DEFAULT_MODEL,
                context_length: int = DEFAULT_CONTEXT) -> Backend:
    """The process's backend for database ``db`` (a path or URL), opened on first use (its
    default window ``model`` / ``context_length``; a session's own window is given with
    ``Backend.set_window``)."""
    with _BACKENDS_LOCK:
        if db not in _BACKENDS:
            if "://" not in db:
                Path(db).parent.mkdir(parents=True, exist_ok=True)
            engine = Engine(open_store(db), model=model, context_length=context_length,
                            background_precompact=False)
            _BACKENDS[db] = Backend(engine)
        return _BACKENDS[db]


def default_db(hermes_home: Any) -> str:
    home = Path(str(hermes_home)) if hermes_home else Path.home() / ".hermes"
    return str(home / "refold" / "refold.db")


class RefoldContextEngine(ContextEngine):
    """Hermes' context engine on refold's ledger and compaction (see the module docstring).
    Pass ``backend`` (tests, embedding) or let ``on_session_start`` open the default one."""

    def __init__(self, backend: Backend | None = None, *, db: str | None = None) -> None:
        self._backend = backend
        self._db = db
        self._model: str | None = None  # what update_model said, before a session starts
        self._engine: Engine
        self.session_id: str | None = None
        if backend is not None:
            self._adopt(backend)

    @property
    def name(self) -> str:
        return "refold"

    def _adopt(self, backend: Backend, engine: Engine | None = None) -> None:
        self._backend = backend
        self._engine = engine or backend.engine
        self.context_length = self._engine.ops.context_length
        self.threshold_tokens = int(self._engine.ops.threshold)

    def backend(self) -> Backend:
        if self._backend is None:
            self._adopt(backend_for(self._db or default_db(None)))
        assert self._backend is not None
        return self._backend

    def engine(self) -> Engine:
        """The engine of the current session's window (the backend's default before one)."""
        self.backend()
        return self._engine

    # -- lifecycle ---------------------------------------------------------------------------
    def on_session_start(self, session_id: str, **kwargs: Any) -> None:
        """Hermes passes its model and the window ``update_model`` gave this engine: the
        session runs on that window (the memory provider, often set up first, opens the
        database with refold's defaults)."""
        if self._backend is None:
            self._adopt(backend_for(self._db or default_db(kwargs.get("hermes_home"))))
        model = str(kwargs.get("model") or self._model or self.engine().model)
        window = int(kwargs.get("context_length") or self.context_length
                     or self.engine().ops.context_length)
        self.session_id = session_id
        # the refold session is opened (or created) when Hermes first hands over a message:
        # a session that never says anything (the background memory review's fork of each
        # session) leaves no empty ``hermes:<id>`` session behind
        self._adopt(self.backend(), self.backend().set_window(session_id, model, window))

    def update_model(self, model: str, context_length: int, base_url: str = "",
                     api_key: str = "", provider: str = "", api_mode: str = "") -> None:
        """A model switch (or Hermes' first setup, before the session starts): the session
        goes on with the new window, its threshold refold's policy share of it."""
        super().update_model(model, context_length, base_url, api_key, provider, api_mode)
        self._model = model
        if self.session_id is not None and self._backend is not None and context_length:
            self._adopt(self._backend, self._backend.set_window(self.session_id, model,
                                                                int(context_length)))

    def on_session_end(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        if messages:
            self.backend().sync(session_id, messages)
        self.backend().close(session_id)

    def on_session_reset(self) -> None:
        super().on_session_reset()
        if self.session_id is not None:
            self.backend().close(self.session_id)
        self.session_id = None

    def _session(self) -> str:
        if self.session_id is None:  # a host that compresses before starting a session
            self.on_session_start("default")
        assert self.session_id is not None
        return self.session_id

    # -- tokens and the trigger -------------------------------------------------------------
    def update_from_response(self, usage: dict[str, Any]) -> None:
        self.last_prompt_tokens = token_count(usage.get("prompt_tokens"))
        self.last_completion_tokens = token_count(usage.get("completion_tokens"))
        self.last_total_tokens = token_count(usage.get("total_tokens")) or (
            self.last_prompt_tokens + self.last_completion_tokens)

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        tokens = self.last_prompt_tokens if prompt_tokens is None else prompt_tokens
        return self.threshold_tokens > 0 and tokens >= self.threshold_tokens

    def should_compress_preflight(self, messages: list[dict[str, Any]]) -> bool:
        return self.should_compress(self.engine().ops.count(messages, None))

    # -- compaction --------------------------------------------------------------------------
    def compress(self, messages: list[dict[str, Any]], current_tokens: int | None = None,
                 focus_topic: str | None = None, force: bool = False,
                 memory_context: str = "") -> list[dict[str, Any]]:
        session = self._session()
        backend = self.backend()
        system = [dict(m) for m in messages[:1] if m.get("role") == "system"]
        with backend.lock:
            prepared = backend.sync(session, messages)
            rt = backend.runtime(session)
            if memory_context.strip():
                rt.store.append_event(rt.session_id, "hermes.memory_context",
                                      {"text": memory_context, "focus": focus_topic})
            if prepared.tokens_before is None:
                rt.compact(force=True)
            view = projection_messages(rt.store.projection(rt.session_id), None)
        self.compression_count += 1
        self.last_prompt_tokens = -1  # Hermes' "compressed, awaiting real usage" mark
        view = [wire_form(m) for m in view]
        return system + [m for m in view if not system or m.get("role") != "system"]

    def has_content_to_compress(self, messages: list[dict[str, Any]]) -> bool:
        return sum(1 for m in messages if m.get("role") != "system") > 2

    # -- the session_search tool -------------------------------------------------------------
    def _search_tool(self) -> Any:
        backend = self.backend()
        current = backend.runtimes.get(self.session_id or "")
        return session_search_tool(backend.engine.store, owner=None,
                                   current_session_id=current.session_id if current else None)

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        tool = self._search_tool()
        return [{"name": tool.name, "description": tool.description,
                 "parameters": tool.parameters}]

    def handle_tool_call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        if name != "session_search":
            return json.dumps({"error": f"unknown refold tool: {name}"})
        try:
            return str(self._search_tool().handler(args))
        except RefoldError as exc:
            return json.dumps({"error": str(exc)})


class RefoldMemoryProvider(MemoryProvider):
    """Cross-session recall from refold's ledger; each turn stored once (see the module)."""

    def __init__(self, backend: Backend | None = None, *, db: str | None = None) -> None:
        self._backend = backend
        self._db = db
        self.session_id = ""

    @property
    def name(self) -> str:
        return "refold"

    def is_available(self) -> bool:
        return True  # a local database; no credentials, no network

    def initialize(self, session_id: str, **kwargs: Any) -> None:
        if self._backend is None:
            self._backend = backend_for(self._db or default_db(kwargs.get("hermes_home")))
        self.session_id = session_id

    def on_session_switch(self, new_session_id: str, *, parent_session_id: str = "",
                          reset: bool = False, rewound: bool = False, **kwargs: Any) -> None:
        """Hermes rotated its session id (``/new``, ``/reset``, ``/resume``, ``/branch``, a
        compression): the new id is the current session from here on; the one left
        (``parent_session_id``) is an earlier session, recalled like any other."""
        previous, self.session_id = self.session_id, new_session_id or self.session_id
        if self._backend is not None and previous and previous != self.session_id:
            self._backend.close(previous)  # reopened by title if Hermes writes to it again

    def _refold_session(self, hermes_session: str) -> str | None:
        """The refold session that keeps ``hermes_session`` (open here, or stored by an
        earlier run or another process), None when there is none yet."""
        assert self._backend is not None
        rt = self._backend.runtimes.get(hermes_session)
        if rt is not None:
            return rt.session_id
        engine = self._backend.engine
        try:
            return engine.store.resolve_session(f"hermes:{hermes_session}", owner=engine.owner,
                                                prefix=False).id
        except NotFound:
            return None

    def prefetch(self, query: str, *, session_id: str = "") -> str:
        """Matching messages of the sessions other than the one asking (``session_id``, else
        the current one): a gateway's chats each recall the others, never themselves."""
        if self._backend is None or not query.strip():
            return ""
        asking = session_id or self.session_id
        try:
            hits = self._backend.engine.store.search(SearchQuery(
                text=query, exclude_session_id=self._refold_session(asking) if asking else None,
                limit=RECALL_HITS, window=0))
        except RefoldError:
            return ""  # a query the search syntax rejects: no recall, not a failed turn
        if not hits:
            return ""
        lines = [f"- ({h.session_title or h.session_id[:8]}, {h.role}) "
                 f"{' '.join(h.content.split())[:RECALL_CHARS]}" for h in hits]
        return "From earlier sessions (refold ledger):\n" + "\n".join(lines)

    def sync_turn(self, user_content: str, assistant_content: str, *, session_id: str = "",
                  messages: list[dict[str, Any]] | None = None) -> None:
        if self._backend is None:
            return
        session = session_id or self.session_id
        if messages:
            self._backend.sync(session, messages)
        else:  # the turn alone: appended, never read as a history that rewinds the stored one
            self._backend.append(session, [{"role": "user", "content": user_content},
                                           {"role": "assistant", "content": assistant_content}])

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return []  # the context engine brings session_search; one copy of the tool

    def shutdown(self) -> None:
        if self._backend is not None and self.session_id:
            self._backend.close(self.session_id)


def register(ctx: Any) -> None:
    """Hermes' plugin hook: refold's context engine, and its memory provider where the
    context can take one (Hermes' memory-plugin loader)."""
    if hasattr(ctx, "register_context_engine"):
        ctx.register_context_engine(RefoldContextEngine())
    if hasattr(ctx, "register_memory_provider"):
        ctx.register_memory_provider(RefoldMemoryProvider())


__all__ = ["MEMORY_PLUGIN_INIT", "Backend", "RefoldContextEngine", "RefoldMemoryProvider",
           "backend_for", "register"]
