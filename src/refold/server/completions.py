"""``POST /v1/chat/completions``: one proxied turn, JSON or streamed.

The turn, for one session (its lock held from first to last step):

1. the client's whole history goes to ``runtime.prepare_history`` — stored once (re-sent history
   is recognized), compacted if needed, the memory snapshot folded into the system prompt;
2. ``Prepared.messages`` go upstream (the client's other request fields pass through untouched);
   a context overflow triggers ``runtime.handle_error`` and a retry on the smaller context,
   at most ``max_attempts`` times;
3. the reply is recorded — for a stream, assembled from its deltas as they pass through.

When is a message *acknowledged*? The request's messages once the response status line is sent
(they were stored in step 1); the assistant reply once the client received the final
``data: [DONE]`` (streams) or the JSON body — the proxy records the reply *before* sending that
last piece. A stream cut short (client gone, upstream failed, proxy killed) records nothing
partial: the client never got a complete reply, so it will not be in the history it re-sends.
Events that arrive in the same upstream read as its ``[DONE]`` (typically the finish_reason and
usage chunks) are held and leave with the proxy's ``[DONE]`` in one write; memory's after-turn
work runs once that write (or a JSON reply's body) is done
(``InlineTurns.record(hold_after_turn=True)``).

What the runtime noticed reaches the client as response headers (JSON and streams alike), so a
strict OpenAI client sees an unchanged body: ``X-Refold-Warnings`` carries ``Prepared.warnings``
(for example "auto-compaction blocked: …" or a summarizer cooldown), several joined with
``"; "``, each percent-encoded UTF-8 (``%``, ``;``, control and non-ASCII characters escaped:
split on ``"; "`` and ``urllib.parse.unquote`` each part); ``X-Refold-Compacted:
<tokens_before>-><tokens_after>`` says the turn compacted the context. Each warning is also
logged at INFO (runtime notices only, never message content).

Stored means committed. On SQLite, ``refold serve`` commits with ``serve_sqlite_synchronous``:
NORMAL by default (WAL: a commit survives a crash or SIGKILL of the proxy, but the last commits
before a power loss or OS crash may be lost — the client still holds those turns and re-sends
them with its next request, which stores them again; a client that never calls again leaves
them lost), FULL to fsync every commit (power-loss
durable too, one fsync per write, serialized across sessions). The request messages are not
batched with the reply: they are committed before the first byte so that a turn whose stream
then fails still leaves the client's messages in the ledger.

The deferred store (light mode, the known fast path): the request is built from the runtime's
cached view first, sent, and the new messages are committed as soon as the request is handed
to the socket (``on_sent``), while the model works — still before anything of the response
goes back. If the commit shows another writer changed the session meanwhile (its tip moved, or
a checkpoint appeared), the request sent was not what the ledger gives: the proxy closes that
upstream response unread and prepares the turn again (the upstream may bill the dropped
request; only a second writer on the same session causes this). A failed commit closes the
upstream response and answers with the storage error; nothing of the turn is stored.

Where the runtime runs. With NORMAL (commits without fsync) and a request body of at most
1 MiB (``INLINE_JSON_BYTES``), steps 1 and 3 first try the runtime's light mode on the event
loop itself: the known-history fast path, new messages and a reply of at most 64 K characters
each (``runtime.inline.INLINE_NEW_CHARS``), a context below the pre-compaction mark, a store that
is free right now — bounded work, cheaper than a thread hop, which would hold the GIL for it
anyway (``SessionRuntime.inline``, see ``refold.runtime.inline``).
A light-mode call that finds the store busy (another thread's write, the WAL checkpoint's short
pass) is tried again on the event loop after short pauses (``BUSY_PAUSES``, a few ms in all)
before it goes to a thread. Anything else — a session's first or changed history, a compaction,
a store still busy, FULL, PostgreSQL — runs in a worker thread as before. ``Proxy.light_prepares`` and
``worker_prepares`` count which way turns went. The upstream is reached through
``server.h1``'s lean HTTP/1.1 client (httpx where a proxy from the environment applies).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from itertools import repeat
from typing import Any, TypeVar
from urllib.parse import quote

import anyio
import anyio.to_thread
from starlette.background import BackgroundTask
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from refold import fastjson
from refold._records import dataclass
from refold.errors import (
    Conflict,
    InvalidInput,
    MessageValidationError,
    RefoldError,
    UpstreamError,
)
from refold.llm.failures import bad_response
from refold.llm.sse import DONE, EventSplitter, StreamAssembler, parse_chunk
from refold.messages.anthropic import for_chat_upstream
from refold.messages.model import Message
from refold.messages.validate import repair_json_value, validate_message
from refold.runtime.branches import Diverge
from refold.runtime.prepared import Prepared
from refold.runtime.session import SessionRuntime
from refold.server import agents
from refold.server.auth import Tenant
from refold.server.hangup import ClientGone, ClientWatch
from refold.server.sessions import (
    SESSION_HEADER,
    SessionPool,
    WindowOf,
    client_conversation,
    derived_ref,
    session_name,
)
from refold.server.upstream import Upstream, UpstreamStream
from refold.server.wire import error_body, sse_error, status_for, upstream_status

log = logging.getLogger(__name__)
_T = TypeVar("_T")

DONE_EVENT = b"data: [DONE]\n\n"
WARNINGS_HEADER = "X-Refold-Warnings"
COMPACTED_HEADER = "X-Refold-Compacted"
# printable ASCII stays readable; "%" and ";" are escaped so the "; " join splits unambiguously
_HEADER_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in "%;")


class Drain:
    """Counts turns in flight so shutdown can wait for their records before closing engines."""

    def __init__(self) -> None:
        self.active = 0
        self._idle = asyncio.Event()  # (asyncio's: anyio's costs a backend lookup per turn)
        self._idle.set()

    def enter(self) -> None:
        self.active += 1
        if self.active == 1:
            self._idle.clear()

    def leave(self) -> None:
        self.active -= 1
        if self.active == 0:
            self._idle.set()

    async def wait(self, timeout: float) -> bool:
        with anyio.move_on_after(timeout):
            await self._idle.wait()
            return True
        return False


@dataclass
class Proxy:
    pool: SessionPool
    upstream: Upstream
    default_model: str
    drain: Drain
    max_attempts: int = 5  # the runtime compacts further on up to 4 overflows
    light: bool = False  # may runtimes work on the event loop (light mode)? see _Turn
    light_prepares: int = 0  # turns prepared on the event loop, and in a worker thread
    worker_prepares: int = 0
    deferred_stores: int = 0  # deferred stores done on the event loop, in a worker thread,
    deferred_to_worker: int = 0  # and requests voided because another writer moved the session
    voided_requests: int = 0
    worker_records: int = 0  # replies recorded in a worker thread (light mode could not)

    def summary(self) -> str:
        """One line of what the turns did (logged at shutdown)."""
        return (f"turns prepared on the event loop {self.light_prepares}, in worker threads "
                f"{self.worker_prepares}; deferred stores on the event loop "
                f"{self.deferred_stores}, in worker threads {self.deferred_to_worker}; "
                f"requests voided by another writer {self.voided_requests}; replies recorded "
                f"in worker threads {self.worker_records}")


def check_body(body: Any) -> list[Message]:
    """The request's messages, or InvalidInput saying what is wrong."""
    if not isinstance(body, dict):
        raise InvalidInput("the request body must be a JSON object")
    if body.get("model") is not None and not isinstance(body["model"], str):
        raise InvalidInput("'model' must be a string (the model's name)")
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list)
                                  and all(isinstance(t, dict) for t in tools)):
        raise InvalidInput("'tools' must be a list of tool objects")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise InvalidInput("'stream' must be true or false")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidInput("'messages' must be a non-empty list of chat messages")
    if set(map(type, messages)) == {dict} \
            and set(map(type, map(dict.get, messages, repeat("role")))) == {str}:
        return messages  # (the usual request, checked at C speed; the loop says what is wrong)
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidInput(f"messages[{index}] must be an object with a 'role'")
    return messages


async def chat_completions(proxy: Proxy, tenant: Tenant, headers: Mapping[str, str],
                           body: dict[str, Any], raw_size: int = 0,
                           lineage: str | None = None,
                           receive: Receive | None = None) -> Response:
    """Serve one turn; errors leave as RefoldError for the app's one error renderer.

    The session: the one ``X-Refold-Session`` names (a diverging history rewinds it), else
    ``lineage`` (a Responses continuation's, placed as a derived session is), else the one
    derived from the conversation's opening (a diverging history branches) — or, when that
    one does not exist yet, the stored session the history continues as a sliding window
    (``refold.runtime.window``), under that session's own lock."""
    history = check_body(body)
    name = session_name(headers)
    derived = not (name or lineage)
    agent_id = client_conversation(headers) if derived else None
    ref = name or lineage or derived_ref(tenant.owner, history, agent_id)
    lock = proxy.pool.lock(tenant.owner, ref)
    client = ClientWatch(receive) if receive is not None else None
    try:
        await lock.acquire()
    except BaseException:
        if client is not None:
            client.close()
        raise
    proxy.drain.enter()
    handed_off = False
    try:
        try:
            rt = await proxy.pool.runtime(tenant.owner, ref, history, window=derived,
                                          agent=agent_id, link=agents.link_of(headers, body))
        except WindowOf as found:  # the turn is that session's: take its lock instead
            other = proxy.pool.lock(tenant.owner, found.ref)
            lock.release()
            lock = other
            try:
                await lock.acquire()
            except BaseException:
                proxy.drain.leave()
                handed_off = True  # nothing held any more
                raise
            rt = await proxy.pool.runtime(tenant.owner, found.ref, history)
        # a conversation the client named rewinds (reversibly) what it no longer sends; a
        # derived one branches instead, so it never rewinds another conversation's tail
        turn = _Turn(proxy, tenant, rt, body, history, raw_size,
                     diverge="rewind" if name else "branch", client=client)
        try:
            if body.get("stream"):
                upstream = await turn.open_stream()
                handed_off = True  # the stream releases the lock and the drain when it ends
                return ProxyStream(turn, upstream, lambda: _release(proxy, lock), client)
            return await turn.complete()
        except UpstreamError:
            await turn.unanswered()
            raise
        except ClientGone:  # nobody reads an answer now: the turn stays unanswered
            log.info("session %s: the client left before its reply; not recorded",
                     turn.session_id)
            await turn.unanswered()
            return Response(status_code=499)
    finally:
        if not handed_off:
            if client is not None:
                client.close()
            _release(proxy, lock)


def _release(proxy: Proxy, lock: asyncio.Lock) -> None:
    lock.release()
    proxy.drain.leave()


class _Turn:
    """One request's state across attempts: the runtime, the body, what went upstream."""

    def __init__(self, proxy: Proxy, tenant: Tenant, rt: SessionRuntime, body: dict[str, Any],
                 history: list[Message], raw_size: int = 0,
                 diverge: Diverge = "branch", client: ClientWatch | None = None) -> None:
        self.proxy = proxy
        self.client = client
        self.tenant = tenant
        self.rt = rt
        self.body = body
        self.history = history
        self.diverge: Diverge = diverge
        self.inject_usage = False
        # requests up to INLINE_JSON_BYTES may run the runtime on the event loop (light mode);
        # a larger body always goes to a worker thread, and so do heavy new messages (a big
        # new tool output, say: ``SessionRuntime.new_messages_fit``)
        self.light = bool(getattr(proxy, "light", False)) and raw_size <= INLINE_JSON_BYTES
        self.warnings: list[str] = []  # across attempts, in order, each once
        self.compacted: tuple[int, int] | None = None  # (before, after) of the last compaction
        self._stored: bool | None = None  # this attempt's deferred store (see _send)
        self._store_error: Exception | None = None
        self._unanswered = False  # marked as a turn that got no reply (``unanswered``)

    @property
    def session_id(self) -> str:
        return self.rt.session_id

    async def _upstream_body(self) -> bytes:
        """Prepare the turn and encode the upstream body: on the event loop when the runtime
        can do it in light mode (a small request on the fast path, see
        ``refold.runtime.inline``), else in a worker thread (a long history is megabytes of
        JSON; a compaction may call a summarizer)."""
        self.rt.output_reserve = requested_output(self.body)
        if self.light:
            prepared = await self._inline(lambda: self.rt.inline.prepare(
                self.history, tools=self.body.get("tools"), defer_store=True))
            if prepared is not None:
                self.proxy.light_prepares += 1
                return self._encode(prepared)
        self.proxy.worker_prepares += 1
        return await anyio.to_thread.run_sync(self._prepare_and_encode)

    def _prepare_and_encode(self) -> bytes:
        self.rt.output_reserve = requested_output(self.body)
        return self._encode(self.rt.prepare_history(self.history, tools=self.body.get("tools"),
                                                    diverge=self.diverge))

    def _encode(self, prepared: Prepared) -> bytes:
        self._note(prepared)
        messages = prepared.messages  # fresh wire-form dicts already
        if not getattr(self.proxy.upstream, "anthropic", False):
            messages = for_chat_upstream(messages)  # (no Anthropic blocks beside the chat form)
        out = dict(self.body, messages=messages)
        if not prepared.messages and self.body.get("messages"):
            # only empty system messages, which refold leaves out: not a request of nothing
            out["messages"] = self.body["messages"]
        out.setdefault("model", self.proxy.default_model)
        if out.get("stream"):
            options = dict(out.get("stream_options") or {})
            # usage is needed for the record; ask for it, and hide it if the client did not
            self.inject_usage = not options.get("include_usage")
            options["include_usage"] = True
            out["stream_options"] = options
        data = fastjson.dumps(out)
        if data is not None:
            return data
        try:
            return _encode_json(out).encode()
        except UnicodeEncodeError:  # a lone surrogate from the client: escape it
            return json.dumps(out).encode()

    def _note(self, prepared: Prepared) -> None:
        for warning in prepared.warnings:
            if warning not in self.warnings:
                self.warnings.append(warning)
                log.info("session %s: %s", self.session_id, warning)
        if prepared.tokens_before is not None:
            self.compacted = (prepared.tokens_before, prepared.tokens)

    def headers(self) -> dict[str, str]:
        """The response headers of this turn: the session, and what the runtime noticed."""
        noticed = self.rt.take_compaction()  # after an overflow, or after a reply
        if noticed is not None:
            self.compacted = noticed
        out = {SESSION_HEADER: self.session_id}
        if self.warnings:
            out[WARNINGS_HEADER] = "; ".join(
                quote(" ".join(w.split()), safe=_HEADER_SAFE) for w in self.warnings)
        if self.compacted is not None:
            out[COMPACTED_HEADER] = f"{self.compacted[0]}->{self.compacted[1]}"
        return out

    async def unanswered(self) -> None:
        """The upstream failed this turn, or its client left before the reply: its stored
        messages got no reply. Marked (once) so that a client going on without them rewinds
        them instead of forking a branch (``SessionRuntime.note_unanswered``); a failure here
        only logs (the client gets the upstream's error either way)."""
        if self._unanswered:
            return
        self._unanswered = True
        try:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.rt.note_unanswered)
        except Exception as exc:
            log.warning("session %s: marking its unanswered turn failed: %s", self.session_id,
                        exc)

    async def _retry(self, err: UpstreamError, attempt: int) -> bool:
        if attempt + 1 >= self.proxy.max_attempts:
            return False
        return await anyio.to_thread.run_sync(self.rt.handle_error, err, attempt)

    async def _inline(self, attempt: Callable[[], _T | None]) -> _T | None:
        """``attempt()`` (an ``InlineTurns`` call) on the event loop. While it answers None
        because another thread holds the session or the store (``InlineTurns.busy``: a worker
        thread's write, the WAL checkpoint's short pass), it is tried again after short pauses
        (``BUSY_PAUSES``, the loop serving other requests meanwhile) before the caller hands
        the work to a worker thread. Such a writer usually finishes within a millisecond or
        two, and each hand-off made another worker thread contend for the store and the GIL:
        at 10 streams one turn in six went to a thread."""
        result = attempt()
        for pause in BUSY_PAUSES:
            if result is not None or not self.rt.inline.busy:
                break
            with anyio.CancelScope(shield=True):  # a record or store under way is finished
                await asyncio.sleep(pause)
            result = attempt()
        return result

    # -- the deferred store: the request's messages are written while the upstream works ----
    def _on_sent(self) -> None:
        """The request is on its way upstream: store the messages ``prepare_history`` deferred
        (light mode), overlapping the model's work. A busy store or runtime leaves them to
        ``_settle``; an error is raised there too (this runs inside the upstream client)."""
        if not self.rt.inline.has_pending:
            return
        try:
            self._stored = self.rt.inline.store_pending()
        except Exception as exc:
            self._store_error = exc
        else:
            self.proxy.deferred_stores += self._stored is not None

    async def _settle(self) -> bool:
        """The deferred store, finished (in a worker thread when the event loop could not):
        True when what went upstream is exactly what the ledger gives (or nothing was
        deferred), False when another writer changed the session under the turn."""
        error, self._store_error = self._store_error, None
        if error is not None:
            raise error
        stored, self._stored = self._stored, None
        if self.rt.inline.has_pending:
            # busy when the request went out; by now (the upstream answered) the writer that
            # held the store is usually done: try again here before a thread hop
            stored = await self._inline(self.rt.inline.store_pending)
            if stored is not None:
                self.proxy.deferred_stores += 1
        if self.rt.inline.has_pending:
            self.proxy.deferred_to_worker += 1
            with anyio.CancelScope(shield=True):
                stored = await anyio.to_thread.run_sync(self.rt.inline.settle)
        self.proxy.voided_requests += stored is False
        return stored is not False

    async def _send(self, call: Any, body: bytes, close: Any = None) -> tuple[Any, bool]:
        """``call(body, bearer, on_sent)`` upstream, the deferred store settled before anything
        goes back to the client: (the result, whether the request was exact). The messages are
        stored whatever the upstream answered (as they were before the request went out)."""
        self._stored = None
        self._store_error = None
        try:
            if self.client is None:
                result = await call(body, self.tenant.bearer, self._on_sent)
            else:
                result = await self.client.call(call(body, self.tenant.bearer, self._on_sent))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._settle()
            raise
        try:
            exact = await self._settle()
        except BaseException:
            if close is not None:
                await close(result)
            raise
        if not exact:
            log.info("session %s changed under the turn: its request is prepared again",
                     self.session_id)
            if close is not None:
                await close(result)
        return result, exact

    async def complete(self) -> Response:
        for attempt in range(self.proxy.max_attempts):
            body = await self._upstream_body()
            try:
                data, exact = await self._send(self.proxy.upstream.complete, body)
            except UpstreamError as err:
                if not await self._retry(err, attempt):
                    raise
                continue
            if exact:
                break
        else:
            raise _kept_changing(self.session_id)
        message, usage = _reply_of(data)
        if self.client is not None and self.client.gone:
            raise ClientGone  # it left as the reply came: not recorded, nor sent
        if self.light and await self._inline(lambda: self.rt.inline.record(
                message, usage=usage, model=data.get("model"), hold_after_turn=True) or None):
            # memory's after-turn work once the body is sent (a send that fails leaves it to
            # the session's next call)
            return JSONResponse(data, headers=self.headers(),
                                background=BackgroundTask(self._finish_here))
        self.proxy.worker_records += 1
        await anyio.to_thread.run_sync(
            lambda: self.rt.record(message, usage=usage, model=data.get("model")))
        return JSONResponse(data, headers=self.headers())

    def finish(self) -> None:
        """After the reply went out: the runtime's deferred after-turn work (never waits;
        failures are logged by the engine)."""
        self.rt.finish_turn()

    async def _finish_here(self) -> None:
        """``finish()`` on the event loop, as a streamed reply's ends (it never waits): a sync
        background task would cost each reply a hand-off to Starlette's thread pool."""
        self.finish()

    async def open_stream(self) -> UpstreamStream:
        for attempt in range(self.proxy.max_attempts):
            body = await self._upstream_body()
            try:
                stream, exact = await self._send(self.proxy.upstream.open_stream, body,
                                                 UpstreamStream.aclose)
            except UpstreamError as err:
                if not await self._retry(err, attempt):
                    raise
                continue
            if exact:
                return stream
        raise _kept_changing(self.session_id)

    async def record(self, assembler: StreamAssembler) -> None:
        """Store the streamed reply; memory's after-turn work waits for ``finish()``."""
        message = assembler.message()
        try:
            check_reply(message)
        except UpstreamError:
            await self.unanswered()  # as any failed upstream reply
            raise
        if self.light and await self._inline(lambda: self.rt.inline.record(
                message, usage=assembler.usage, model=assembler.model,
                hold_after_turn=True) or None):
            return
        self.proxy.worker_records += 1
        await anyio.to_thread.run_sync(
            lambda: self.rt.record(message, usage=assembler.usage, model=assembler.model))


def requested_output(body: dict[str, Any]) -> int | None:
    """The output tokens a chat body asks for (``max_completion_tokens`` or ``max_tokens``; the
    Messages and Responses endpoints translate theirs to these), the turn's output reserve."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _kept_changing(session_id: str) -> Conflict:
    return Conflict(f"session {session_id} kept changing while its turn was prepared",
                    hint="another process is writing to this session; retry")


def _reply_of(data: dict[str, Any]) -> tuple[Message, dict[str, Any] | None]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise bad_response("no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise bad_response("choice has no message")
    clean = {k: v for k, v in message.items() if v is not None or k == "content"}
    clean.setdefault("role", "assistant")
    check_reply(clean)
    usage = data.get("usage")
    return clean, usage if isinstance(usage, dict) else None


def check_reply(message: Message) -> None:
    """An upstream's assistant message that the ledger could not store (content a number,
    a tool call without an id, …) is the upstream's fault, not the request's: raised as
    ``bad_response`` (a 502), before anything of it is stored. Checked as the record will
    check it (``SessionRuntime.record``: an empty reply is kept as empty text)."""
    role = message.get("role", "assistant")
    if role != "assistant":
        raise bad_response(f"the reply's role is {role!r}, not 'assistant'")
    probe = {k: v for k, v in message.items() if not str(k).startswith("_")}
    if not probe.get("tool_calls"):
        probe.pop("tool_calls", None)
        if probe.get("content") is None and not probe.get("reasoning_content"):
            probe["content"] = ""
    try:
        validate_message(probe)
    except MessageValidationError as exc:
        raise bad_response(f"the assistant message: {exc}") from exc


class ProxyStream(Response):
    """Forwards an upstream SSE stream event by event and records the reply before [DONE]."""

    def __init__(self, turn: _Turn, upstream: UpstreamStream, release: Any,
                 client: ClientWatch | None = None) -> None:
        # no super().__init__: it would declare a Content-Length for an empty body
        self.status_code = 200
        self.background = None
        self.raw_headers = [(b"content-type", b"text/event-stream; charset=utf-8"),
                            (b"cache-control", b"no-cache"),
                            *((k.lower().encode(), v.encode("ascii"))
                              for k, v in turn.headers().items())]
        self.turn = turn
        self.upstream = upstream
        self.release = release
        self.client = client
        self.disconnected = False
        self.recording = False
        self.upstream_done = False  # the upstream's own [DONE] was seen
        self.upstream_error = False  # the upstream sent an error event (passed on)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        watcher: asyncio.Future[None] | None = None
        if self.client is None:
            watcher = asyncio.ensure_future(self._watch(receive, task))
        else:  # watched since the request was read: a client gone already gets nothing
            self.client.on_gone(lambda: self._gone(task))
        started = False
        try:
            if self.disconnected:
                return
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
            started = True
            await self._pump(send)
        except asyncio.CancelledError as exc:
            if task is None:
                raise
            if self.disconnected:
                task.uncancel()  # ours: the client left; nothing partial is recorded
            elif started and _shutting_down(exc):
                # the server's graceful shutdown ran out while this reply streamed: the client
                # is told so in an error event (it was cut off mid-body, and uvicorn logged a
                # traceback), and nothing partial is recorded
                task.uncancel()
                log.warning("stream for session %s cut off by the server's shutdown; its reply "
                            "is not recorded", self.turn.session_id)
                await send({"type": "http.response.body", "more_body": False,
                            "body": sse_error(503, error_body(
                                "refold serve is shutting down: this reply was cut off and "
                                "not recorded; send the request again", "server_error",
                                "shutting_down"))})
            else:
                raise  # not ours: let it go on
        finally:
            if watcher is not None:
                watcher.cancel()
            if self.client is not None:
                self.client.close()
            if self.disconnected and not self.recording:
                await self.turn.unanswered()  # the client left before its reply: none recorded
            try:
                await self.upstream.aclose()
            except Exception as exc:  # closing a broken stream: nothing left to do with it
                log.debug("closing the upstream stream: %s", exc)
            self.release()

    async def _watch(self, receive: Receive, pump: asyncio.Task[Any] | None) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self._gone(pump)
                return

    def _gone(self, pump: asyncio.Task[Any] | None) -> None:
        """The client left: stop reading upstream (a record that started finishes)."""
        was = self.disconnected
        self.disconnected = True
        if not was and pump is not None and not self.recording and pump is not \
                asyncio.current_task():
            pump.cancel()

    async def _pump(self, send: Send) -> None:
        splitter = EventSplitter()
        assembler = StreamAssembler()
        # events that came with or after the upstream's [DONE] (usually the finish_reason and
        # usage chunks share its read): held, then sent in one write with our [DONE]
        tail: list[bytes] = []
        try:
            async for data in self.upstream.chunks():
                out = self._forwardable(splitter, assembler, data)
                if out and (tail or self.upstream_done):
                    tail.append(out)
                elif out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
        except UpstreamError as err:
            await self._fail(send, err, b"".join(tail))
            return
        if not assembler.complete:
            if self.upstream_error:  # the upstream said why in its own error event, passed on
                log.warning("stream for session %s failed: the upstream sent an error event",
                            self.turn.session_id)
                await self.turn.unanswered()
                await send({"type": "http.response.body", "body": b"".join(tail),
                            "more_body": False})
                return
            await self._fail(send, bad_response("the stream ended before a finish_reason"),
                             b"".join(tail))
            return
        if self.disconnected:
            return  # the client is gone: it never gets [DONE], so the reply is not recorded
        self.recording = True  # from here the watcher no longer cancels: the record finishes
        try:
            await self.turn.record(assembler)
        except Exception as err:  # not stored, so not acknowledged: no [DONE], an error event
            if isinstance(err, RefoldError):
                log.error("recording the reply of session %s failed: %s",
                          self.turn.session_id, err)
                status, body = status_for(err)
            else:  # a bug: said in the stream as a 500 would say it, not a cut connection
                log.exception("recording the reply of session %s failed", self.turn.session_id)
                status, body = 500, error_body(
                    f"internal error in refold: {type(err).__name__}", "server_error",
                    "internal_error")
            await send({"type": "http.response.body",
                        "body": b"".join(tail) + sse_error(status, body), "more_body": False})
            return
        try:
            await send({"type": "http.response.body", "body": b"".join(tail) + DONE_EVENT,
                        "more_body": False})
        finally:  # acknowledged: now the after-turn work the record held back
            self.turn.finish()

    def _forwardable(self, splitter: EventSplitter, assembler: StreamAssembler,
                     data: bytes) -> bytes:
        out: list[bytes] = []
        for event in splitter.feed(data):
            if event.data == DONE:
                self.upstream_done = True
                continue  # held back: [DONE] goes out after the record
            chunk = parse_chunk(event.data) if event.data is not None else None
            if chunk is None and event.data is not None:
                # not a JSON object: a client's SDK would fail on it before any error event
                # of ours, so it is not passed on; the stream fails here, saying why
                raise bad_response("the upstream sent an event that is not a JSON object")
            if chunk is not None and "error" in chunk and not chunk.get("choices"):
                self.upstream_error = True  # passed on as it is: the client's SDK reads it
            if chunk is not None:
                assembler.add(chunk)
                if self.turn.inject_usage and chunk.get("choices") == [] and "usage" in chunk:
                    continue  # the client did not ask for the usage chunk
            out.append(event.raw)
        return b"".join(out)

    async def _fail(self, send: Send, err: UpstreamError, held: bytes = b"") -> None:
        log.warning("stream for session %s failed: %s", self.turn.session_id, err)
        await self.turn.unanswered()
        status, body = upstream_status(err)
        await send({"type": "http.response.body", "body": held + sse_error(status, body),
                    "more_body": False})


def _shutting_down(exc: asyncio.CancelledError) -> bool:
    """Is this the cancellation uvicorn sends once its graceful shutdown timed out?"""
    return any("graceful shutdown" in str(arg) for arg in exc.args)


# Bodies up to this size are parsed, and their turns run in light mode, on the event loop. The
# work on a re-sent history (decoding it, comparing it with the known chain, copying the view,
# encoding the upstream body) holds the GIL in a worker thread too, so a thread only adds its
# hops (three a turn: an agent's 350 KB turn cost ~20% more CPU so); ~1 ms of orjson a MiB. New
# messages too heavy for the loop still go to a worker (runtime.inline.INLINE_NEW_CHARS).
INLINE_JSON_BYTES = 1024 * 1024
# seconds between tries of a light-mode call that found the store busy (``_Turn._inline``)
BUSY_PAUSES = (0.0005, 0.001, 0.002, 0.004)


def _no_constant(name: str) -> Any:
    """NaN and ±Infinity, which Python's json module accepts, are not JSON: the upstream would
    get them back as invalid JSON."""
    raise ValueError(f"{name} is not a JSON value")


# made once: ``json.loads`` / ``json.dumps`` with options build a new decoder / encoder per call
_DECODER = json.JSONDecoder(parse_constant=_no_constant)
_encode_json = json.JSONEncoder(ensure_ascii=False).encode


def _loads(raw: bytes) -> Any:
    """``json.loads(raw, parse_constant=_no_constant)``: orjson's reading where it agrees
    (``refold.fastjson``), else json's, with the decoder made once."""
    value = fastjson.loads(raw)
    if value is not None:
        return value  # (orjson refuses a lone surrogate: such a body is read below)
    try:
        value = _DECODER.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except ValueError as exc:
        raise InvalidInput(f"the request body is not valid JSON: {exc}") from exc
    return repair_json_value(value, raw)  # a model name or a tool with one: stored, counted


async def parse_json(raw: bytes) -> Any:
    """The request body as JSON; a large body is parsed in a worker thread."""
    if len(raw) <= INLINE_JSON_BYTES:
        return _loads(raw)
    return await anyio.to_thread.run_sync(_loads, raw)
