"""The turn loop and slash commands behind ``refold chat`` (no terminal I/O in here).

``ChatSession`` wraps one ``SessionRuntime`` and a ``ChatClient``: a user line becomes a turn —
prepare (compaction, memory snapshot), call the model, record, run the tools the model asked for
(session_search, memory, todo) and call again, at most ``MAX_TOOL_ROUNDS`` times. A context
overflow from the model compacts further and retries (``runtime.handle_error``). Slash commands
switch, branch, rewind and inspect sessions through the same engine, so everything the chat does
is in the ledger exactly as a library caller's turn would be. A session the chat leaves (``/quit``,
the end of input, ``/new``, ``/resume``, ``/branch``) is ended in the store; a turn that fails
before its reply is recorded takes its user message back (``turn``).

The session yields ``Output`` values (what happened); ``refold.cli.chat`` decides how they look.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable, Iterator
from typing import Any

from refold._records import dataclass, field
from refold.errors import InvalidInput, RefoldError, UpstreamError
from refold.llm import ChatClient, ChatResult, HttpChatClient
from refold.llm.stream import stream_completion
from refold.messages.model import Message, content_text
from refold.store.base import SearchQuery

MAX_TOOL_ROUNDS = 8
END_EXIT = "chat exit"  # the end reasons of a session the chat leaves: /quit, Ctrl-D, EOF
END_SWITCH = "chat switch"  # /new, /resume or /branch into another session
MAX_OVERFLOW_RETRIES = 3
DEFAULT_SYSTEM = (
    "You are a helpful assistant in a terminal chat. You can search earlier sessions "
    "(session_search), keep durable notes about the user and the work (memory), and track "
    "multi-step work (todo). Be concise.")


@dataclass
class _Turn:
    """How far a turn got: what a failure leaves to undo or complete."""

    stored: bool = False  # the pending messages (user message, tool results) are stored
    answered: bool = False  # a reply of this turn is recorded
    calls: list[dict[str, Any]] = field(default_factory=list)  # the last reply's tool calls
    results: list[Message] = field(default_factory=list)  # their results so far


@dataclass(frozen=True)
class Output:
    kind: str  # reply | tool | info | warning | gauge | hits | memory | error | help
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)


HELP = [
    ("/compact", "compact the context now"),
    ("/resume [REF]", "switch to a session (id, prefix or title; the latest other if none)"),
    ("/search QUERY", "search every session"),
    ("/memory", "show memory (MEMORY.md and USER.md entries)"),
    ("/undo", "take back the last user turn and everything after it"),
    ("/branch [TITLE]", "continue in a new branch of this session"),
    ("/new [TITLE]", "start a new session"),
    ("/context", "tokens by part of the context"),
    ("/paste", "send the next lines as one message (end with a line holding only '.', "
               "or Ctrl-D)"),
    ("/help", "this list"),
    ("/quit", "leave (also Ctrl-D)"),
]


class ChatSession:
    """One terminal conversation over an ``Engine`` (current runtime can change: /new, /resume)."""

    def __init__(self, engine: Any, client: ChatClient, *, model: str,
                 system_prompt: str | None = DEFAULT_SYSTEM, use_tools: bool = True,
                 ref: str | None = None, title: str | None = None,
                 on_text: Callable[[str], None] | None = None) -> None:
        self.engine = engine
        self.client = client
        # streaming: each content delta goes to on_text as it arrives (HttpChatClient only)
        self.on_text = on_text
        self.model = model
        self.system_prompt = system_prompt
        self.use_tools = use_tools
        self.finished = False
        self.last_prepared: Any = None
        self.warnings: list[str] = []  # Prepared.warnings of the turn, shown after it
        self.notes: list[Output] = []  # what a failed turn left in the conversation
        if ref:
            self._switch(engine.open_session(ref, source="chat"))
        else:
            self._switch(engine.open_session(None, new=True, title=title, source="chat"))

    # -- session switching ---------------------------------------------------------------------
    def _switch(self, rt: Any) -> None:
        previous = getattr(self, "rt", None)
        if previous is not None and previous.session_id != rt.session_id:
            self._end(END_SWITCH)  # left for another: ended, as at /quit
        if previous is not None and previous is not rt:
            previous.close()  # memory providers hear that the session they saw ended
        self.rt = rt
        self.tools = None
        if self.use_tools:
            from refold.tools import agent_tools

            # a getter: the tools follow the runtime into a compaction child (rotation)
            refs = self.engine.references
            self.tools = agent_tools(self.engine.store, session_id=lambda: rt.session_id,
                                     owner=self.engine.owner, memory=self.engine.memory,
                                     spill=refs.spill if refs is not None else None,
                                     skills=self.engine.skills)
            rt.use_tools(self.tools.schemas())  # /context before the first turn counts them
        self.last_prepared = None

    def describe(self) -> str:
        store = self.engine.store
        session = store.get_session(self.rt.session_id)
        title = f" “{session.title}”" if session.title else ""
        active = len(store.get_messages(session.id))  # rewound rows do not count
        return f"session {session.id[:12]}{title} · {active} messages"

    # -- a turn ---------------------------------------------------------------------------------
    def handle(self, line: str) -> Iterator[Output]:
        """Everything one input line produces, in order."""
        text = line.strip()
        if not text:
            return
        if text.startswith("/"):
            yield from self.command(text)
            return
        yield from self.turn(text)

    def turn(self, text: str) -> Iterator[Output]:
        """One user turn. A turn that fails or is interrupted (Ctrl-C) before a reply is
        recorded takes its user message back out of the conversation (a reversible rewind), so
        typing it again asks once; one that fails after a tool-call reply keeps what was
        recorded, completed with results for its calls. ``notes`` then says which."""
        turn = _Turn()
        try:
            yield from self._turn(text, turn)
        except (Exception, KeyboardInterrupt):
            self.notes.append(self._after_failure(text, turn))
            raise

    def _turn(self, text: str, turn: _Turn) -> Iterator[Output]:
        pending: list[Message] = [{"role": "user", "content": text}]
        for _ in range(MAX_TOOL_ROUNDS):
            result = self._call(pending, turn)
            self.rt.record(result.message, usage=result.usage, model=result.model)
            turn.answered, turn.results = True, []
            reply = content_text(result.message)
            if reply:
                yield Output("reply", reply, {"streamed": self._streams()})
            calls = result.message.get("tool_calls") or []
            if not calls or self.tools is None:
                break
            turn.calls, turn.stored = list(calls), False
            pending = turn.results
            for call in calls:
                tool_message = self.tools.dispatch(call)
                fn = call.get("function") or {}
                pending.append(tool_message)
                yield Output("tool", str(fn.get("name", "")),
                             {"arguments": fn.get("arguments", ""),
                              "result": tool_message.get("content", "")})
        else:
            self._store_results(turn)  # the last round's: no call is left unanswered
            yield Output("info", f"stopped after {MAX_TOOL_ROUNDS} tool rounds")
        for warning in dict.fromkeys(self.warnings):  # e.g. the summary model cooling down
            yield Output("warning", warning)
        self.warnings.clear()
        yield self.gauge()

    def _after_failure(self, text: str, turn: _Turn) -> Output:
        """Leave the conversation as if the failed part of the turn had not been asked."""
        self.last_prepared = None
        if not turn.answered:
            if not turn.stored:  # prepare raised before storing it
                return Output("warning", "your message was not answered and is not in the "
                                         "conversation: type it again to retry")
            taken = self._take_back(text)
            if taken is None:
                return Output("warning", "your message was not answered; it stays in the "
                                         "conversation")
            return Output("warning", "your message was not answered and is not in the "
                                     f"conversation (rewind #{taken}, reversible): type it "
                                     "again to retry")
        if turn.calls and not turn.stored:
            self._store_results(turn)
        return Output("warning", "the model's answer after its tool calls did not arrive: "
                                 "your message and the tool results stay in the conversation")

    def _take_back(self, text: str) -> int | None:
        """Rewind this turn's user message (the session's last row when nothing answered it);
        the rewind's id, or None when the last row is not that message."""
        store = self.engine.store
        try:
            last = store.last_message(self.rt.session_id)
            if last is None or last.role != "user" or last.message.get("content") != text:
                return None
            return store.rewind(self.rt.session_id, last.seq).id
        except RefoldError:  # the store failing too: the message stays
            return None

    def _store_results(self, turn: _Turn) -> None:
        """A recorded tool-call reply whose results were never stored (interrupted while its
        tools ran, or the last of ``MAX_TOOL_ROUNDS``): store what ran and an "interrupted"
        result for the rest, so the ledger stays a history a provider accepts (without it
        every later request is repaired, with a warning)."""
        done = {str(m.get("tool_call_id")) for m in turn.results}
        results = list(turn.results) + [
            {"role": "tool", "tool_call_id": str(call.get("id") or ""),
             "content": "[interrupted: no result was recorded]"}
            for call in turn.calls if str(call.get("id") or "") not in done]
        schemas = self.tools.schemas() if self.tools is not None else None
        with contextlib.suppress(RefoldError):  # else each request repairs them (a warning)
            self.rt.prepare(results, system_prompt=self.system_prompt, tools=schemas)

    def _call(self, pending: list[Message], turn: _Turn) -> ChatResult:
        schemas = self.tools.schemas() if self.tools is not None else None
        prepared = self.rt.prepare(pending, system_prompt=self.system_prompt, tools=schemas)
        turn.stored = True  # prepare stores and returns, or raises before storing
        for attempt in range(MAX_OVERFLOW_RETRIES + 1):
            self.last_prepared = prepared
            self.warnings.extend(prepared.warnings)
            try:
                if self._streams():
                    assert self.on_text is not None and isinstance(self.client, HttpChatClient)
                    return stream_completion(self.client, prepared.messages, model=self.model,
                                             tools=schemas, on_text=self.on_text)
                return self.client.complete(prepared.messages, model=self.model, tools=schemas)
            except UpstreamError as err:
                if attempt >= MAX_OVERFLOW_RETRIES or not self.rt.handle_error(err, attempt):
                    raise
            prepared = self.rt.prepare([], system_prompt=self.system_prompt, tools=schemas)
        raise AssertionError("unreachable: the last attempt raises")

    def _streams(self) -> bool:
        return self.on_text is not None and isinstance(self.client, HttpChatClient)

    def gauge(self) -> Output:
        prepared = self.last_prepared
        if prepared is None:
            prepared = self.rt.prepare([], system_prompt=self.system_prompt,
                                       tools=self.tools.schemas() if self.tools else None)
            self.last_prepared = prepared
        return Output("gauge", data={"tokens": prepared.tokens, "threshold": prepared.threshold,
                                     "window": prepared.context_length,
                                     "compacted": prepared.compaction is not None})

    # -- slash commands --------------------------------------------------------------------------
    def command(self, text: str) -> Iterator[Output]:
        try:
            name, *args = shlex.split(text)
        except ValueError as exc:
            raise InvalidInput(f"cannot parse command: {exc}") from exc
        handler = self._commands().get(name.lower())
        if handler is None:
            raise InvalidInput(f"unknown command {name}", hint="type /help for the list")
        yield from handler(args)

    def _commands(self) -> dict[str, Callable[[list[str]], Iterator[Output]]]:
        return {"/compact": self.cmd_compact, "/resume": self.cmd_resume,
                "/search": self.cmd_search, "/memory": self.cmd_memory, "/undo": self.cmd_undo,
                "/branch": self.cmd_branch, "/new": self.cmd_new, "/help": self.cmd_help,
                "/context": self.cmd_context, "/quit": self.cmd_quit, "/exit": self.cmd_quit}

    def cmd_help(self, args: list[str]) -> Iterator[Output]:
        yield Output("help", data={"commands": HELP})

    def cmd_quit(self, args: list[str]) -> Iterator[Output]:
        self.finished = True
        self._end(END_EXIT)
        yield Output("info", f"bye — {self.describe()}")

    def _end(self, reason: str) -> None:
        """End the current session in the store (``sessions prune`` takes ended lineages); a
        later ``--session`` or ``/resume`` continues it all the same."""
        with contextlib.suppress(RefoldError):  # deleted meanwhile, say: leaving still works
            self.engine.store.end_session(self.rt.session_id, reason)

    def cmd_compact(self, args: list[str]) -> Iterator[Output]:
        report = self.rt.compact(force=True)
        if report is None:
            yield Output("info", "nothing to compact: the context is all recent messages, "
                                 "which compaction keeps verbatim")
        else:
            before = getattr(report, "tokens_before", None)
            after = getattr(report, "tokens_after", None)
            detail = f": {before} → {after} tokens" if before is not None else ""
            yield Output("info", f"compacted{detail}")
        self.last_prepared = None
        yield self.gauge()

    def cmd_resume(self, args: list[str]) -> Iterator[Output]:
        ref = " ".join(args) or self._latest_other()
        self._switch(self.engine.open_session(ref, source="chat"))
        yield Output("info", f"resumed {self.describe()}")
        yield self.gauge()

    def _latest_other(self) -> str:
        """The newest session other than this one and its own parent or continuation: with
        no name, ``/resume`` reopened the session it was typed in."""
        store = self.engine.store
        here = store.get_session(self.rt.session_id)
        for session in store.list_sessions(limit=50, owner=self.engine.owner):
            if here.id not in (session.id, session.parent_session_id) \
                    and session.id != here.parent_session_id:
                return session.id
        raise InvalidInput("no other session to resume", hint="/new starts one")

    def cmd_new(self, args: list[str]) -> Iterator[Output]:
        title = " ".join(args) or None
        self._switch(self.engine.open_session(None, new=True, title=title, source="chat"))
        yield Output("info", f"new {self.describe()}")

    def cmd_branch(self, args: list[str]) -> Iterator[Output]:
        last = self.engine.store.last_message(self.rt.session_id)
        if last is None:
            raise InvalidInput("nothing to branch from yet", hint="say something first")
        title = " ".join(args) or None
        self._switch(self.engine.open_session(self.rt.session_id, branch_at=last.seq,
                                              title=title, source="chat"))
        yield Output("info", f"branched into {self.describe()}")

    def cmd_undo(self, args: list[str]) -> Iterator[Output]:
        store = self.engine.store
        rows = store.get_messages(self.rt.session_id)
        users = [r for r in rows if r.role == "user"]
        if not users:
            raise InvalidInput("nothing to undo")
        record = store.rewind(self.rt.session_id, users[-1].seq)
        self.last_prepared = None
        yield Output("info", f"took back {record.count} message(s) from the last user turn "
                             f"(rewind #{record.id}, reversible)")

    def cmd_search(self, args: list[str]) -> Iterator[Output]:
        text = " ".join(args)
        if not text:
            raise InvalidInput("/search needs a query", hint="e.g. /search deploy script")
        hits = self.engine.store.search(SearchQuery(text=text, owner=self.engine.owner, limit=10))
        yield Output("hits", text, {"hits": hits})

    def cmd_memory(self, args: list[str]) -> Iterator[Output]:
        yield Output("memory", data={"targets": memory_entries(self.engine.memory)})

    def cmd_context(self, args: list[str]) -> Iterator[Output]:
        yield Output("info", data={"breakdown": self.rt.context_breakdown()},
                     text="context breakdown")


def memory_entries(memory: Any) -> dict[str, list[str]]:
    """Live memory entries per target ("memory", "user"), or {} when memory is off."""
    store = getattr(memory, "store", None)
    if store is None:
        return {}
    from refold.memory import TARGETS

    return {target: [e.display() for e in store.read(target).entries] for target in TARGETS}
