"""``POST /v1/responses`` and ``GET /v1/responses/{id}``: OpenAI Responses on refold.

A Responses request becomes a chat-completions turn (``server.responses_wire``) through the
same pipeline as ``/v1/chat/completions``, so sessions, storing history once, compaction,
memory and tenancy are the same. Errors keep OpenAI's shape (the app's one renderer).

refold is the state store. A stored response (``store`` is true unless the client says
false) is an event of the session its turn ran in (kind ``refold.response``): its new input
items, its output items and the response object; its id names that session
(``resp_<session id>_<random>``), so ``GET`` and ``previous_response_id`` find it with one
read and only for the tenant that owns the session. A continuation sends only its new input:
the conversation is rebuilt from the chain of stored responses (their input and output items,
not their ``instructions``, as the Responses API does) and goes through the pipeline as a
client re-sending its whole history would, so the ledger recognizes the stored part and
stores nothing twice. ``store: false`` keeps no response object (the turn's messages still
go to the ledger as any proxied turn's do); a later ``previous_response_id`` naming it is 404.

A continuation runs in the lineage of the response it continues, whatever its
``instructions``: a request without ``X-Refold-Session`` is otherwise placed by its opening
(its system message and first user message, ``sessions.derived_ref``), and ``instructions``
are per request, so a chain whose instructions changed or were left out landed in a new root
session that stored the whole chain again. It is named by the first session of that lineage
(the previous response's session, up its ``branch`` and ``compaction`` links: the name the
chain's first turn ran under), with the same ``branch`` placement as a derived session, so two
continuations of one response still fork a branch. The request's ``instructions`` go upstream
as its system prompt, and a changed one is recorded as the runtime records any changed
system prompt (a ``system_prompt`` event of the session).
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from refold.errors import InvalidInput, NotFound, RefoldError
from refold.messages.model import Message
from refold.messages.responses import input_messages
from refold.server.auth import Tenant
from refold.server.completions import Proxy
from refold.server.responses_tools import request_tools, tool_kinds
from refold.server.responses_wire import (
    ResponseEvents,
    Shell,
    chat_body,
    output_items,
    reply_of,
    usage_of,
)
from refold.server.rewrite import (
    RewrittenStream,
    chat_turn,
    reply_json,
    rewritten_json,
    session_of,
)
from refold.server.wire import check_sampling, check_sendable, status_for
from refold.store import Store

log = logging.getLogger(__name__)

RESPONSE_EVENT = "refold.response"
LINEAGE_LINKS = ("branch", "compaction")  # a session's parent by these is the same lineage
MAX_LINEAGE = 64  # parents followed (a lineage is shallow; a corrupt one must not loop)
Handler = Callable[[Request, Tenant], Awaitable[Response]]


class Host(Protocol):
    settings: Any
    store: Store | None

    def endpoint(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]: ...
    def running_proxy(self) -> Proxy: ...
    async def body_of(self, request: Request) -> tuple[Any, int]: ...


def response_id(session_id: str) -> str:
    return f"resp_{session_id}_{secrets.token_hex(8)}"


def session_of_id(value: str) -> str:
    if not value.startswith("resp_") or "_" not in value[5:]:
        raise NotFound(f"no response {value!r}")
    return value[5:].rsplit("_", 1)[0]


Links = dict[str, tuple[str | None, str]]  # response id: (previous id, items as JSON)


class _Chains:
    """Per process and store: each session's stored responses as chain links (the previous
    id, the input and output items as JSON), with the id of the last event read, so a link
    is read and decoded once. The store's events are never changed, only added (a session
    deleted is caught by the caller's owner check), and are read again whole when an id is
    not among them (another process's event committed after a later one was read). Bounded:
    ``sessions`` per store and ``chars`` of JSON in all, the least recently used dropped."""

    def __init__(self, sessions: int = 64, chars: int = 16_000_000) -> None:
        self.sessions, self.chars = sessions, chars
        self._lock = threading.Lock()
        self._by_store: weakref.WeakKeyDictionary[Any, OrderedDict[
            str, tuple[int, Links, int]]] = weakref.WeakKeyDictionary()

    def links(self, store: Store, session_id: str, value: str) -> Links:
        """The session's links, read up to date when ``value`` is not among them. The
        caller only reads the dict (the store is read outside the lock)."""
        with self._lock:
            cache = self._by_store.setdefault(store, OrderedDict())
            last, links, size = cache.get(session_id, (0, {}, 0))
        if value not in links:
            links = dict(links)  # (a reader of the cached dict never sees it change)
            last, size = self._read(store, session_id, last, links, size)
            if value not in links and last:  # perhaps an event committed out of order
                links = {}
                last, size = self._read(store, session_id, 0, links, 0)
        with self._lock:
            cache[session_id] = (last, links, size)
            cache.move_to_end(session_id)
            total = sum(entry[2] for entry in cache.values())
            while len(cache) > 1 and (len(cache) > self.sessions or total > self.chars):
                total -= cache.popitem(last=False)[1][2]
        return links

    @staticmethod
    def _read(store: Store, session_id: str, after: int, links: Links, size: int
              ) -> tuple[int, int]:
        for event in store.list_events(session_id, RESPONSE_EVENT, after_id=after):
            payload = event.payload
            response = payload.get("response")
            output = response.get("output") if isinstance(response, dict) else None
            items = json.dumps(list(payload.get("input") or []) + list(output or []),
                               ensure_ascii=False)
            previous = payload.get("previous_response_id")
            links[str(payload.get("id"))] = (previous if isinstance(previous, str) else None,
                                             items)
            after, size = max(after, event.id), size + len(items)
        return after, size


_CHAINS = _Chains()


class ResponseLog:
    """Stored responses, read and written through the ledger's session events."""

    def __init__(self, store: Store, owner: str) -> None:
        self.store = store
        self.owner = owner
        self._events: dict[str, dict[str, dict[str, Any]]] = {}
        self._owned: dict[str, bool] = {}

    def _owns(self, session_id: str) -> bool:
        """Is ``session_id`` a session of this tenant's (that exists)?"""
        if session_id not in self._owned:
            try:
                self._owned[session_id] = self.store.get_session(session_id).owner == self.owner
            except NotFound:
                self._owned[session_id] = False
        return self._owned[session_id]

    def _session_records(self, session_id: str) -> dict[str, dict[str, Any]]:
        if session_id not in self._events:
            self._events[session_id] = {
                str(e.payload.get("id")): e.payload
                for e in self.store.list_events(session_id, RESPONSE_EVENT)
            } if self._owns(session_id) else {}
        return self._events[session_id]

    def find(self, value: str) -> dict[str, Any]:
        record = self._session_records(session_of_id(value)).get(value)
        if record is None:
            raise NotFound(f"no response {value!r} (never stored, stored with store=false, "
                           "or not yours)")
        return record

    def chain_items(self, value: str) -> list[Any]:
        """The input and output items of ``value`` and the responses before it, in order.

        Read through ``_CHAINS``: a session's responses are read once per process, then only
        the ones stored since, so a turn of a long chain does not read and decode every
        response before it again (each turn's cost grew with the chain)."""
        chain: list[str] = []
        seen: set[str] = set()
        links: Links = {}
        current: str | None = value
        while current:
            if current in seen:
                raise InvalidInput(f"the chain of responses before {value!r} loops")
            seen.add(current)
            if current not in links:  # (a session's links, read once for the whole walk)
                links = self._links(current)
            previous, items = links[current]
            chain.append(items)
            current = previous
        parts = [items for items in reversed(chain) if items != "[]"]
        return list(json.loads("[" + ",".join(p[1:-1] for p in parts) + "]"))

    def _links(self, value: str) -> Links:
        """The links of response ``value``'s session (``_CHAINS``), holding ``value``."""
        session_id = session_of_id(value)
        links = _CHAINS.links(self.store, session_id, value) if self._owns(session_id) else {}
        if value not in links:
            raise NotFound(f"no response {value!r} (never stored, stored with store=false, "
                           "or not yours)")
        return links

    def lineage(self, value: str) -> str:
        """The name of the lineage of response ``value``'s session: its first session's title
        (the name a derived turn gives it, so the same runtime and lock), else that id."""
        session = self.store.get_session(session_of_id(value))
        for _ in range(MAX_LINEAGE):
            parent_id = session.parent_session_id
            if session.link_kind not in LINEAGE_LINKS or parent_id is None:
                break
            try:
                parent = self.store.get_session(parent_id)
            except NotFound:
                break
            if parent.owner != self.owner:
                break
            session = parent
        return session.title or session.id

    def continued(self, value: str) -> tuple[list[Any], str]:
        """The items of the chain ending at ``value`` and the name of its lineage."""
        return self.chain_items(value), self.lineage(value)

    def save(self, session_id: str, input_items: list[Any], response: dict[str, Any]) -> None:
        self.store.append_event(session_id, RESPONSE_EVENT, {
            "id": response["id"], "previous_response_id": response.get("previous_response_id"),
            "input": input_items, "response": response})


def _items(value: Any) -> list[Any]:
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list):
        raise InvalidInput("'input' must be a string or a list of items")
    return list(value)


def _check(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise InvalidInput("the request body must be a JSON object")
    if "input" not in raw:
        raise InvalidInput("'input' is required: a string or a list of items")
    if raw.get("model") is not None and not isinstance(raw["model"], str):
        raise InvalidInput("'model' must be a string (the model's name)")
    previous = raw.get("previous_response_id")
    if previous is not None and not isinstance(previous, str):
        raise InvalidInput("previous_response_id must be a string")
    instructions = raw.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidInput(
            f"'instructions' must be a string (this request's system prompt) or null, got "
            f"{_json_type(instructions)}; system or developer messages as items go in 'input'")
    check_sampling(raw)
    _check_fields(raw)
    tokens = raw.get("max_output_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)
                               or tokens < 1):
        raise InvalidInput("'max_output_tokens' must be a positive integer")
    _check_tools(request_tools(raw.get("tools"), raw["input"] if isinstance(raw["input"], list)
                               else []))
    _check_parts(raw["input"])
    return raw


def _check_fields(raw: dict[str, Any]) -> None:
    """The Responses fields refold cannot honour, whose loss would change what the request
    asks, are a 400 (they were dropped: ``conversation`` lost the agent its memory, ``prompt``
    ran the model without its instructions); the others are checked as the Responses API
    checks them (README: "OpenAI Responses" lists what is translated, accepted and refused)."""
    if raw.get("conversation") is not None:
        raise InvalidInput(
            "'conversation' is not supported: refold has no Conversations API, so the "
            "conversation's earlier items would not reach the model; send the whole history "
            "in 'input', or continue a stored response with 'previous_response_id' (refold "
            "stores responses)")
    if raw.get("prompt") is not None:
        raise InvalidInput(
            "'prompt' (a stored prompt template) is not supported: refold has no prompt "
            "templates, and the model would run without it; send the prompt's text as "
            "'instructions' (and its variables filled in)")
    if raw.get("background") not in (None, False):
        raise InvalidInput(
            "'background' must be false: refold runs a response while its request waits (a "
            "background response could not be polled or cancelled); send the request without "
            "it, with 'stream': true to follow it as it runs")
    if raw.get("truncation") not in (None, "auto", "disabled"):
        raise InvalidInput("'truncation' must be 'auto' or 'disabled'")
    for key, top in (("max_tool_calls", None), ("top_logprobs", 20)):
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0 or (top is not None and value > top)):
            raise InvalidInput(f"'{key}' must be an integer from 0" +
                               (f" to {top}" if top is not None else ""))
    include = raw.get("include")
    if include is not None and not (isinstance(include, list)
                                    and all(isinstance(one, str) for one in include)):
        raise InvalidInput("'include' must be a list of strings")
    text = raw.get("text")
    if text is not None and not isinstance(text, dict):
        raise InvalidInput("'text' must be an object ('format', 'verbosity')")
    verbosity = (text or {}).get("verbosity")
    if verbosity not in (None, "low", "medium", "high"):
        raise InvalidInput("'text.verbosity' must be 'low', 'medium' or 'high'")


def _check_tools(tools: Any) -> None:
    """A function tool (alone or in a namespace) needs a name: without one it went upstream as
    a function with none, which the upstream refuses."""
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        inner = tool.get("tools") if tool.get("type") == "namespace" else [tool]
        for one in inner if isinstance(inner, list) else ():
            if isinstance(one, dict) and one.get("type") == "function" \
                    and not (isinstance(one.get("name"), str) and one["name"]):
                raise InvalidInput("tools: a function tool needs a 'name' (a non-empty string)")


def _check_parts(items: Any) -> None:
    """An ``input_text`` or ``output_text`` part needs its ``text`` string (one without it went
    upstream as an empty text)."""
    for index, item in enumerate(items if isinstance(items, list) else ()):
        content = item.get("content") if isinstance(item, dict) else None
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type") in ("input_text", "output_text") \
                    and not isinstance(part.get("text"), str):
                raise InvalidInput(f"input[{index}]: an {part['type']} part needs a 'text' "
                                   "string")


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "an array" if isinstance(value, list) else "an object"


def _store(host: Host) -> Store:
    if host.store is None:
        raise RefoldError("the server is not started (lifespan did not run)")
    return host.store


async def create_response(host: Host, tenant: Tenant, request: Request, raw: Any,
                          size: int) -> Response:
    body = _check(raw)
    log_ = ResponseLog(_store(host), tenant.owner)
    new_items = _items(body["input"])
    input_messages(new_items)  # a malformed input is a 400 before anything is read or sent
    prior: list[Any] = []
    lineage: str | None = None
    if body.get("previous_response_id"):
        prior, lineage = await anyio.to_thread.run_sync(log_.continued,
                                                        body["previous_response_id"])
    messages: list[Message] = input_messages(prior + new_items)
    check_sendable(messages)
    if body.get("instructions"):
        messages.insert(0, {"role": "system", "content": body["instructions"]})
    # its tools, with those its input adds (Codex's additional_tools, tool_search_output)
    tools = request_tools(body.get("tools"), prior + new_items)
    chat = chat_body(body, messages, host.settings.model, tools)
    response = await chat_turn(host.running_proxy(), tenant, request.headers, chat, size,
                               lineage, request.receive)
    session_id = session_of(response) or ""
    shell = Shell(response_id(session_id), str(chat["model"]), body, kinds=tool_kinds(tools))
    keep = body.get("store", True) is not False

    async def save(obj: dict[str, Any]) -> None:
        if keep:
            await anyio.to_thread.run_sync(log_.save, session_id, new_items, obj)

    if chat["stream"]:
        return RewrittenStream(response, _Streamed(ResponseEvents(shell), save))
    data = reply_json(response)
    message, finish, logprobs = reply_of(data)
    obj = shell.response("completed", output_items(message, shell.kinds, logprobs),
                         usage_of(data.get("usage")), finish)
    await save(obj)
    return rewritten_json(response, obj)


class _Streamed:
    """``ResponseEvents`` plus the save of the response before ``response.completed``."""

    def __init__(self, events: ResponseEvents,
                 save: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        self.events = events
        self._save = save

    def chunk(self, chunk: dict[str, Any]) -> bytes:
        return self.events.chunk(chunk)

    def error(self, status: int, body: dict[str, Any]) -> bytes:
        return self.events.close_items() + self.events.error(status, body)

    def done(self) -> bytes:
        return self.events.close_items()

    async def finish(self) -> bytes:
        """After [DONE] (the reply is stored): store the response, then complete it."""
        try:
            await self._save(self.events.completed())
        except RefoldError as err:
            log.error("storing response %s failed: %s", self.events.shell.id, err)
            status, body = status_for(err)
            return self.events.error(status, dict(body))
        return self.events.done()


async def get_response(host: Host, tenant: Tenant, value: str) -> dict[str, Any]:
    log_ = ResponseLog(_store(host), tenant.owner)
    record = await anyio.to_thread.run_sync(log_.find, value)
    return dict(record["response"])


def routes(host: Host) -> list[Route]:
    async def create(request: Request, tenant: Tenant) -> Response:
        raw, size = await host.body_of(request)
        return await create_response(host, tenant, request, raw, size)

    async def read(request: Request, tenant: Tenant) -> Response:
        return JSONResponse(await get_response(host, tenant, request.path_params["id"]))

    return [Route("/v1/responses", host.endpoint(create), methods=["POST"]),
            Route("/v1/responses/{id}", host.endpoint(read), methods=["GET"])]
