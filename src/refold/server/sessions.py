"""Which session a request belongs to, and the bounded cache of live session runtimes.

A request names its session with ``X-Refold-Session`` (an id or title, never an id prefix; a
name that does not exist yet creates a session with that title, owned by the tenant: titles are
unique per owner, so each key has its own names and finds its sessions by them; a name longer
than a title may be is refused rather than cut). The header's bytes are UTF-8 (``session_name``),
and a session is created only for a request whose messages are valid, so a refused request
leaves no empty session behind. Without the header the session is derived
from the conversation itself: ``conv-`` + a hash of the tenant and the first user message that
is a request (not the context an agent sends ahead of every task: Codex's
``<environment_context>``), so a
client that re-sends its whole history every call lands in the same session each time (and
after a restart), whatever its system prompt does: agents put the date, the time or the working
tree's state there, and a changed system prompt is the same conversation (the runtime records
the new prompt as an event). Sessions derived before this also hashed the first system message
(``legacy_ref``): such a session is still found under that name. Two unrelated conversations
that open with the very same user message share a derived session's family, each in its own
branch (``refold.runtime.branches``): nothing of one is rewound by the other; clients that want
them apart send the header. A client that sends a sliding window of its history (the system
message and the last N messages) names a new derived session each time its window slides; a
request whose derived session does not exist is first looked up as such a window
(``refold.runtime.window``): when it continues one of the tenant's stored sessions, the request
goes to that session (``WindowOf`` names it; its own lock and runtime), else the new session is
created as before.

Invariants:
- one engine per tenant (owner namespace + its own memory directory); a runtime is only ever
  reached through its tenant's engine, so one key never opens another key's session;
- runtimes live in an LRU of bounded size keyed by (tenant, reference); requests for the same
  key are serialized by an ``asyncio.Lock`` held from prepare to record, so a client that sends
  its next turn the moment a stream ends never races the previous turn's record;
- every call that may block (store, runtime) runs in a worker thread, never on the event loop;
  the one exception is a runtime's inline fast path (``SessionRuntime.inline``,
  ``refold.runtime.inline``), which never waits and hands anything unbounded back to a worker
  thread.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import itertools
import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import anyio.to_thread

from refold.errors import Conflict, InvalidInput, NotFound
from refold.messages.model import Message, canonical_json
from refold.messages.validate import validate_messages
from refold.server import agents
from refold.store.base import Session
from refold.store.titles import MAX_TITLE_LENGTH, sanitize_title

if TYPE_CHECKING:
    from refold.runtime.session import SessionRuntime

log = logging.getLogger(__name__)

SESSION_HEADER = "x-refold-session"
DEFAULT_CAPACITY = 256
SLID_SCAN = 128  # cached runtimes a request that names no session is tried on as a window


class EngineLike(Protocol):
    def open_session(self, ref: str | None, *, new: bool = False, title: str | None = None,
                     source: str | None = None, by_prefix: bool = True) -> SessionRuntime: ...
    def flush_idle_sessions(self, idle_seconds: float, *, limit: int = 200) -> list[str]: ...
    def close(self) -> None: ...


EngineFactory = Callable[[str], EngineLike]


DERIVED_PREFIX = "conv-"


def derived_ref(owner: str, history: Sequence[Message], client: str | None = None) -> str:
    """The session name a conversation without a header maps to (stable across restarts and
    across changes of its system prompt): its first user message that is a request, not the
    context an agent sends ahead of every task (``_context_only``) — and the agent's own id of
    the conversation when it sends one (``client_conversation``): two of its conversations
    that open alike are two families then, not branches of one (a conversation that goes on
    under another id, or began before its agent sent one, is found by its opening and first
    reply: ``_continued``)."""
    first = _first_request(history)
    if type(first) is str and len(first) <= _REMEMBERED_CHARS:
        return _text_ref(owner, first, client)  # (every turn of a conversation asks again)
    return _digest(_ref_parts(owner, first, client))


def _ref_parts(owner: str, first: object, client: str | None) -> list[object]:
    return [owner, first, {"client conversation": client}] if client else [owner, first]


# The headers agents send with every request of one conversation, its id in the agent: Claude
# Code's, OpenCode's (``ses_…``) and OpenAI Codex's (its thread). OpenCode's conversations
# restart from "What did we do so far?" after its own compaction: keyed on that opening alone,
# every project's continuation became a branch of the first one's.
CLIENT_CONVERSATION_HEADERS = ("x-claude-code-session-id", "x-session-id", "session-id")
_CLIENT_ID_CHARS = 200


def client_conversation(headers: Mapping[str, str]) -> str | None:
    """The conversation id an agent sent (``CLIENT_CONVERSATION_HEADERS``), or None."""
    for name in CLIENT_CONVERSATION_HEADERS:
        value = headers.get(name)
        if value and value.strip():
            return value.strip()[:_CLIENT_ID_CHARS]
    return None


def older_refs(owner: str, history: Sequence[Message]) -> list[str]:
    """The names ``derived_ref`` gave this conversation before, newest first: by its very
    first user message (before context messages were passed over) and ``legacy_ref``."""
    out = []
    first = _first(history, ("user",))
    if first is not _first_request(history):
        out.append(_digest([owner, first]))
    return [*out, legacy_ref(owner, history)]


# A user message an agent sends ahead of every task, the same for every task in one folder on
# one day: OpenAI Codex's ``<environment_context>`` (the folder, the shell, the date) and its
# AGENTS.md text. Keyed on it, every Codex run in a folder joined one family as branches.
_CONTEXT_ONLY = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions for ")


def _context_only(content: object) -> bool:
    """Does ``content`` open as a context-only message (its first text, leading white space
    aside: read every turn, so only its start is looked at)?"""
    if isinstance(content, list):
        if not all(isinstance(p, dict) and p.get("type") in ("text", "input_text")
                   for p in content):
            return False
        head = ""
        for part in content:  # the parts' text joined, as far as the start the test reads
            head += str(part.get("text") or "")
            if len(head) >= _CONTEXT_HEAD:
                break
        content = head
    return isinstance(content, str) and content[:_CONTEXT_HEAD].lstrip().startswith(
        _CONTEXT_ONLY)


_CONTEXT_HEAD = 256  # the characters of a message's start the context test reads


def _first_request(history: Sequence[Message]) -> object:
    """The content of the first user message that is no context-only message (the first user
    message when every one is)."""
    first: object = None
    for message in history:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if not _context_only(content):
            return content
        if first is None:
            first = content
    return first


# the names of the conversations seen last whose first user message is at most this long are
# remembered (at most 256 of them: ~0.5 MiB of ASCII text)
_REMEMBERED_CHARS = 2048


@functools.lru_cache(maxsize=256)
def _text_ref(owner: str, first: str, client: str | None = None) -> str:
    return _digest(_ref_parts(owner, first, client))


def legacy_ref(owner: str, history: Sequence[Message]) -> str:
    """The name ``derived_ref`` gave before it left the system prompt out (the tenant, the
    first system message and the first user message): sessions named so are still found."""
    return _digest([owner, _first(history, ("system", "developer")), _first(history, ("user",))])


def _first(history: Sequence[Message], roles: tuple[str, ...]) -> object:
    """The content of the first message with one of ``roles`` (None: there is none)."""
    return next((m.get("content") for m in history if m.get("role") in roles), None)


def _digest(parts: list[object]) -> str:
    payload = canonical_json(parts).encode("utf-8", "surrogatepass")
    return DERIVED_PREFIX + hashlib.sha256(payload).hexdigest()[:16]


class SessionPool:
    """Engines per tenant, runtimes per (tenant, session reference), and their locks."""

    def __init__(self, engine_factory: EngineFactory, capacity: int = DEFAULT_CAPACITY) -> None:
        self._engine_factory = engine_factory
        self._engines: dict[str, EngineLike] = {}
        self._engine_lock = asyncio.Lock()
        self._runtimes: OrderedDict[tuple[str, str], SessionRuntime] = OrderedDict()
        self._locks: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = \
            weakref.WeakValueDictionary()
        # the locks of the sessions used last, kept: a lock nobody held died after each turn
        # and the next turn made it again (a lock and a weak reference a turn)
        self._recent: OrderedDict[tuple[str, str], asyncio.Lock] = OrderedDict()
        self.capacity = capacity

    def lock(self, owner: str, ref: str) -> asyncio.Lock:
        """The lock serializing turns of one session (kept alive while anyone holds it, and
        for the ``capacity`` sessions used last)."""
        key = (owner, ref)
        lock = self._recent.get(key)
        if lock is not None:
            self._recent.move_to_end(key)
            return lock
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        self._recent[key] = lock
        if len(self._recent) > max(self.capacity, 1):
            self._recent.popitem(last=False)
        return lock

    async def engine(self, owner: str) -> EngineLike:
        engine = self._engines.get(owner)
        if engine is None:
            async with self._engine_lock:
                engine = self._engines.get(owner)
                if engine is None:
                    engine = await anyio.to_thread.run_sync(self._engine_factory, owner)
                    self._engines[owner] = engine
        return engine

    async def runtime(self, owner: str, ref: str,
                      history: Sequence[Message] | None = None, *,
                      window: bool = False, agent: str | None = None,
                      link: str = "continuation") -> SessionRuntime:
        """The runtime for (owner, ref): cached, or resumed / created in a worker thread.

        Call with ``lock(owner, ref)`` held, so two first requests do not both create it.
        ``history``: the request's messages; a session is only created for messages that
        validate (``MessageValidationError`` otherwise), checked on that path alone, so a turn
        of an existing session is not validated twice. ``window`` (a derived name): before a
        session is created, ``history`` is looked up as a sliding window of a stored session
        of the tenant; ``WindowOf`` names it when it is one (nothing opened or created).
        ``agent``: the agent's conversation id ``ref`` holds (``derived_ref``): a history
        that goes on from a stored session's first reply is that session's (``WindowOf``); a
        new session is linked to the id's others as ``link`` says (``refold.server.agents``).
        """
        key = (owner, ref)
        rt = self._runtimes.get(key)
        if rt is not None:
            self._runtimes.move_to_end(key)
            return rt
        if window and history is not None:
            slid = self._slid_on(owner, history)
            if slid is not None:
                raise WindowOf(slid)
        engine = await self.engine(owner)
        rt = await anyio.to_thread.run_sync(_open_or_create, engine, owner, ref, history,
                                            window, agent, link)
        self._runtimes[key] = rt
        await self._evict()
        return rt

    def _slid_on(self, owner: str, history: Sequence[Message]) -> str | None:
        """The reference of the one cached runtime of ``owner`` whose client's sliding window
        ``history`` slides on (``WindowSlides.slides_on``: the window it stored last without
        its first messages, then new ones), or None — also when several do (two conversations
        alike: ``refold.runtime.window.find_window`` picks among them). A window that slides
        on is found in memory, without the store lookup that places a window anew: each turn
        of an agent trimming its history opens under a new derived name."""
        found: str | None = None
        messages = list(history)
        # the runtimes used last, newest first: the conversation a window slides on had its
        # turn a moment ago (a few µs each; the rest are left to the lookup)
        for (holder, ref), rt in itertools.islice(reversed(self._runtimes.items()), SLID_SCAN):
            if holder != owner or not rt.slides.slides_on(messages):
                continue
            if found is not None:
                return None
            found = ref
        return found

    async def _evict(self) -> None:
        while len(self._runtimes) > self.capacity:
            key, rt = self._runtimes.popitem(last=False)
            lock = self._locks.get(key)
            if lock is not None and lock.locked():
                continue  # in use: the holder keeps it alive; it is simply not cached any more
            await anyio.to_thread.run_sync(rt.close)

    def cached(self) -> int:
        return len(self._runtimes)

    def forget(self, owner: str, ref: str) -> None:
        self._runtimes.pop((owner, ref), None)

    def close(self) -> None:
        """Close every runtime and engine (blocking: call after the last request finished)."""
        for rt in self._runtimes.values():
            rt.close()
        self._runtimes.clear()
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()


def session_name(headers: Mapping[str, str]) -> str | None:
    """The session name a request sent in ``X-Refold-Session``, or None (absent or empty).

    ``headers`` as Starlette gives them: each value the Latin-1 decoding of its bytes (ASGI
    headers are bytes). Its bytes are decoded as UTF-8 instead: as Latin-1, "party 🎉" is
    "party ð" and three C1 control characters, which the title rules drop, so "party 🎊" would
    name the same session. Bytes that are not UTF-8 are ``InvalidInput``; a value that is
    already text beyond Latin-1 (an in-process caller's own mapping) is taken as it is.
    """
    value = headers.get(SESSION_HEADER)
    if not value or value.isascii():
        return value or None
    try:
        raw = value.encode("latin-1")
    except UnicodeEncodeError:
        return value
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("the X-Refold-Session header is not valid UTF-8",
                           hint="send the session name as UTF-8") from None


def check_name(ref: str) -> str:
    """A session name from ``X-Refold-Session`` as its title, or ``InvalidInput``: a name
    longer than a title may be would be cut, and two long names would share one session."""
    title = sanitize_title(ref)
    if title is None:
        raise InvalidInput("the X-Refold-Session header is empty")
    if len(" ".join(ref.split())) > MAX_TITLE_LENGTH:
        raise InvalidInput(f"the X-Refold-Session name is longer than {MAX_TITLE_LENGTH} "
                           "characters", hint="use a shorter name (or the session id)")
    return title


class WindowOf(Exception):  # (a redirection, not an error)
    """The request's history is a sliding window of the tenant's session named ``ref``."""

    def __init__(self, ref: str) -> None:
        super().__init__(ref)
        self.ref = ref


def _window_ref(engine: EngineLike, owner: str, history: Sequence[Message]) -> str | None:
    """The name (title, else id) of the tenant's stored session ``history`` continues as a
    sliding window (``refold.runtime.window.find_window``), or None."""
    from refold.runtime.window import find_window

    store = getattr(engine, "store", None)
    if store is None:
        return None
    match = find_window(store, owner, history)
    if match is None:
        return None
    session = store.get_session(match.session_id)
    log.info("a sliding window of session %s", session.id)
    return session.title or session.id


def _continued(engine: EngineLike, owner: str, history: Sequence[Message]) -> Session | None:
    """The stored session of ``owner`` that ``history`` goes on from — its first two messages
    after the system head are that session's first two rows (the opening and its reply), the
    newest such session — or None: a conversation begun before its agent sent an id,
    or continued under another one (a resumed run, an agent whose id is not stable), rather
    than a new one that opens alike (the same first request, then no reply or another).
    System turns inside the conversation are passed over on both sides: Claude Code sends its
    list of agent types as one right after the opening."""
    from refold.compaction.structure import SYSTEM_ROLES
    from refold.messages.model import message_identity
    from refold.runtime.chain import comparable, resent
    from refold.runtime.mirror import leading_system

    store = getattr(engine, "store", None)
    conversation = [m for m in history[leading_system(list(history)):][:_OPENING_SPAN]
                    if m.get("role") not in SYSTEM_ROLES][:2]
    if store is None or len(conversation) < 2 or conversation[1].get("role") != "assistant":
        return None
    opening, reply = conversation
    identity = message_identity(opening, None)
    for session_id in store.sessions_opening_with(identity, owner=owner, limit=8):
        rows = store.get_messages(session_id, limit=_OPENING_SPAN)
        at = next((i for i, r in enumerate(rows)
                   if i and r.message.get("role") not in SYSTEM_ROLES), None)
        if at is None or rows[0].identity != identity:
            continue
        # the reply as the agent re-sends it: OpenCode spells a call's reply with content ""
        # and its arguments compact (``chain.resent``, as the turn path reads it)
        if message_identity(reply, rows[at - 1].identity) == rows[at].identity \
                or resent(dict(reply), comparable(dict(rows[at].message))):
            return store.get_session(session_id)
    return None


_OPENING_SPAN = 6  # the messages read for an opening and its reply (system turns between)


def _open_or_create(engine: EngineLike, owner: str, ref: str,
                    history: Sequence[Message] | None = None,
                    window: bool = False, agent: str | None = None,
                    link: str = "continuation") -> SessionRuntime:
    """The tenant's session named ``ref`` (its engine resolves within its owner only),
    created with the title ``ref`` when the tenant has none: titles are unique per owner.
    A name matches an exact id or title, never an id prefix: ``X-Refold-Session: c3`` must not
    land in (and rewind) another conversation whose id happens to start with ``c3``.
    A ``history`` that does not validate creates nothing (the runtime would refuse it)."""
    title = check_name(ref)
    try:
        return engine.open_session(ref, source="serve", by_prefix=False)
    except NotFound:
        pass  # AmbiguousReference propagates: creating another would hide the matches
    if history is not None and ref == derived_ref(owner, history):
        for older in older_refs(owner, history):  # a conversation named so before
            try:
                return engine.open_session(older, source="serve", by_prefix=False)
            except NotFound:
                pass
    if history is not None:
        validate_messages(history)
        goes_on = _continued(engine, owner, history) if agent else None
        if agent and goes_on is not None and (goes_on.title or goes_on.id) != ref:
            # begun before its agent sent an id, or under another one
            agents.note_found(engine.store, owner, agent, goes_on.id)  # type: ignore[attr-defined]
            raise WindowOf(goes_on.title or goes_on.id)
        if window:  # (messages that validate only: the lookup reads them)
            found = _window_ref(engine, owner, history)
            if found is not None and found != ref:
                raise WindowOf(found)
    log.info("creating session %s", title)
    try:
        rt = engine.open_session(None, new=True, title=title, source="serve")
    except Conflict:  # another process created it a moment ago
        return engine.open_session(title, source="serve", by_prefix=False)
    if agent and getattr(engine, "store", None) is not None:
        agents.note_new(engine.store, owner, agent, rt.session_id,  # type: ignore[attr-defined]
                        link)
    return rt
