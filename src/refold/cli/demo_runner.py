"""The engine behind ``refold demo``: replay the scripted session through the real runtime.

An agent loop like any user's: ``prepare`` → model call (the scripted OpenAI-compatible server on
a local socket) → ``record`` → run the tool calls → ``prepare`` with their results. refold's own
tools (memory, todo, session_search) run for real; the project tools (terminal, read_file,
apply_patch) return the script's outputs. Everything refold does is reported as ``DemoEvent``s
for the renderer; this module prints nothing (the CLI layer owns the terminal).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

from refold._records import dataclass, field
from refold.cli.demo_script import (
    EARLIER_TITLE,
    FAKE_TOOLS,
    Turn,
    call_payload,
    earlier_session,
)
from refold.errors import UpstreamError
from refold.messages.model import Message
from refold.runtime import Engine, Prepared, SessionRuntime
from refold.store.base import Store
from refold.testing import ScriptedReply
from refold.tools import ToolRegistry, agent_tools, load_todos

MODEL = "gpt-4o-mini"  # counted exactly (o200k) offline
SESSION_TITLE = "acme-billing: fix the 3.12 test suite, add CSV export"
SYSTEM_PROMPT = ("You are a careful coding agent working in the acme-billing repository. "
                 "Use the tools to inspect, change and test the code. Keep diffs minimal.")


@dataclass
class DemoEvent:
    kind: str  # turn | call | compaction | memory | todo | warning
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class DemoStats:
    messages: int = 0
    model_calls: int = 0
    compactions: int = 0
    tokens_sent: int = 0
    tokens_without_refold: int = 0
    peak_tokens: int = 0
    memory_writes: int = 0
    review_writes: int = 0
    review_duplicates: int = 0  # near-duplicates the background review left out
    retries: int = 0
    precomputed: int = 0
    started: float = field(default_factory=time.perf_counter)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started


def scripted_replies(turns: list[Turn]) -> tuple[list[ScriptedReply], dict[str, str | None]]:
    """The model's replies in order, and each tool call's scripted output by call id."""
    replies: list[ScriptedReply] = []
    outputs: dict[str, str | None] = {}
    n = 0
    for turn in turns:
        for step in turn.steps:
            calls = []
            for call in step.calls:
                n += 1
                call_id = f"call_{n:04d}"
                calls.append(call_payload(call, call_id))
                outputs[call_id] = call.output
            replies.append(ScriptedReply(content=step.content, tool_calls=calls or None))
    return replies, outputs


class DemoRunner:
    """Runs the script against ``base_url`` with a runtime over ``store``."""

    def __init__(self, store: Store, home: Path, base_url: str, *, context_length: int,
                 outputs: dict[str, str | None], pace: Callable[[], None] = lambda: None) -> None:
        from refold.llm import HttpChatClient

        self.store = store
        self.home = home
        self.client = HttpChatClient(base_url)
        self.engine = Engine(store, model=MODEL, context_length=context_length,
                             memory_dir=home / "memories")
        self.outputs = outputs
        self.pace = pace
        self.stats = DemoStats()
        self.runtime: SessionRuntime | None = None
        self.registry: ToolRegistry | None = None
        self._history_tokens = 0

    # -- the replay ----------------------------------------------------------------------------
    def seed(self) -> None:
        """Store an earlier session, the history ``session_search`` will find later."""
        earlier = self.store.create_session(title=EARLIER_TITLE, source="demo",
                                            model=MODEL)
        self.store.append_messages(earlier.id, earlier_session())
        self.store.end_session(earlier.id, "done")

    def replay(self, turns: list[Turn]) -> Iterator[DemoEvent]:
        rt = self.engine.open_session(new=True, title=SESSION_TITLE, source="demo")
        self.runtime = rt
        self.registry = agent_tools(self.store, session_id=rt.session_id,
                                    memory=self.engine.memory)
        schemas = self.registry.schemas() + FAKE_TOOLS
        counter = self.engine.ops.counter
        for index, turn in enumerate(turns, 1):
            yield DemoEvent("start", {"index": index, "phase": turn.phase, "label": turn.label})
            pending: list[Message] = [{"role": "user", "content": turn.user}]
            for step_no, _step in enumerate(turn.steps, 1):
                self._history_tokens += sum(counter.count_message(m) for m in pending)
                prepared = yield from self._prepare(rt, pending, schemas)
                reply = yield from self._call(rt, prepared, schemas)
                self._history_tokens += counter.count_message(reply)
                pending = yield from self._run_tools(reply)
                yield DemoEvent("call", {"turn": index, "step": step_no,
                                         "steps": len(turn.steps), "label": turn.label,
                                         "tokens": prepared.tokens,
                                         "threshold": prepared.threshold,
                                         "window": prepared.context_length})
                self.pace()
            yield DemoEvent("turn", {"index": index, "phase": turn.phase, "label": turn.label,
                                     **self._gauge(rt)})
        self.stats.messages = self.store.get_session(rt.session_id).message_count

    def _prepare(self, rt: SessionRuntime, pending: list[Message],
                 schemas: list[dict[str, Any]]) -> Generator[DemoEvent, None, Prepared]:
        used = rt.precompactor.used
        prepared = rt.prepare(pending, system_prompt=SYSTEM_PROMPT, tools=schemas)
        if prepared.compaction is not None:
            self.stats.compactions += 1
            view = compaction_view(prepared.compaction, self.stats.compactions)
            view["before"] = prepared.tokens_before or view["before"]
            view["after"] = prepared.tokens
            view["background"] = rt.precompactor.used > used
            self.stats.precomputed += view["background"]
            yield DemoEvent("compaction", view)
        for warning in prepared.warnings:
            yield DemoEvent("warning", {"text": warning})
        return prepared

    def _call(self, rt: SessionRuntime, prepared: Prepared,
              schemas: list[dict[str, Any]]) -> Generator[DemoEvent, None, Message]:
        for attempt in range(4):
            try:
                result = self.client.complete(prepared.messages, model=MODEL, tools=schemas)
                break
            except UpstreamError as exc:
                if not rt.handle_error(exc, attempt):
                    raise
                self.stats.retries += 1
                yield DemoEvent("warning", {"text": f"provider said: {exc.kind}; compacted "
                                                    "and retried"})
                prepared = rt.prepare([])
        else:  # pragma: no cover - handle_error bounds the attempts
            raise RuntimeError("retry loop exhausted")
        self.stats.model_calls += 1
        self.stats.tokens_sent += prepared.tokens
        self.stats.peak_tokens = max(self.stats.peak_tokens, prepared.tokens)
        self.stats.tokens_without_refold += self._history_tokens + (
            prepared.tokens - self._tail_tokens(prepared))
        rt.record(result.message, usage=result.usage, model=MODEL)
        return result.message

    def _tail_tokens(self, prepared: Prepared) -> int:
        """Tokens of the conversation part of ``prepared`` (what compaction can shrink)."""
        counter = self.engine.ops.counter
        return sum(counter.count_message(m) for m in prepared.messages
                   if m.get("role") not in ("system", "developer"))

    def _run_tools(self, reply: Message) -> Generator[DemoEvent, None, list[Message]]:
        assert self.registry is not None and self.runtime is not None
        results: list[Message] = []
        for call in reply.get("tool_calls") or []:
            name = call["function"]["name"]
            scripted = self.outputs.get(call["id"])
            if scripted is not None:
                results.append({"role": "tool", "tool_call_id": call["id"], "content": scripted})
                continue
            message = self.registry.dispatch(call)
            results.append(message)
            args = json.loads(call["function"]["arguments"] or "{}")
            if name == "memory":
                self.stats.memory_writes += 1
                ok = '"error"' not in str(message["content"])[:40]
                yield DemoEvent("memory", {"target": args.get("target"), "ok": ok,
                                           "content": args.get("content"),
                                           "result": message["content"]})
            elif name == "session_search":
                found = json.loads(message["content"])
                yield DemoEvent("search", {"query": args.get("query"),
                                           "sessions": [g.get("title") for g in
                                                        found.get("sessions", [])],
                                           "hits": found.get("hits", 0)})
            elif name == "todo":
                todos = load_todos(self.store, self.runtime.session_id)
                yield DemoEvent("todo", {"todos": todos})
        return results

    def _gauge(self, rt: SessionRuntime) -> dict[str, Any]:
        breakdown = rt.context_breakdown()
        return {"tokens": breakdown["total"], "threshold": breakdown["threshold"],
                "window": breakdown["context_length"],
                "messages": self.store.get_session(rt.session_id).message_count}

    def close(self) -> None:
        self.engine.close()
        self.client.close()


def compaction_view(report: Any, number: int) -> dict[str, Any]:
    """The fields of a compaction report the demo shows."""
    anchors = list(getattr(report, "anchors", []) or [])
    return {"number": number, "before": int(getattr(report, "tokens_before", 0)),
            "after": int(getattr(report, "tokens_after", 0)),
            "summarized": int(getattr(report, "summarized", 0) or 0),
            "anchors": anchors, "summarizer": getattr(report, "summarizer", "builtin")}

