"""Property test of "the request is the truth" (issue 11), in process over a real SQLite ledger.

Clients hold conversations and act at random — extend (the normal next turn), retry (the same
request again), edit (the last user message changed), new (a conversation opening like the
others), side (a one-off request of another conversation under the client's own name, as an
agent's title or sub-agent calls share its header) — in any interleaving, with or without naming
their session (``X-Refold-Session``, emulated as the proxy routes: a named runtime per name,
else one per derived reference), tool (the next reply is a tool call, which the client answers
with its result when it goes on), clear (an old tool result re-sent cleared, as OpenCode,
Claude Code and Hermes-Agent prune them: a string or one text block) and slide (from then on
the client sends only the end of its conversation, a sliding window that starts later than
before and still re-sends at least two stored messages, one of them a reply, and a user's
message: LangChain's ``trim_messages``; a derived one is routed as the proxy routes it, to the
session it continues, ``refold.runtime.window``; a windowed client's retries and edits are
not modeled here: ``tests/server/test_proxy_sliding_window.py`` has them).
Checked after every request:

- what the upstream would receive (``Prepared.messages``, system aside) is what the client sent
  (a windowed client: its window);
- the session that answered holds exactly that conversation then the reply, each message once
  (a result the client cleared as the tool said it);
- nothing is rewound that its owner did not change: without names never anything; with a name
  only that client's session, and only on its retries and edits (never on a side call).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from refold.runtime import Engine, SessionRuntime
from refold.runtime.chain import CLEARED_RESULTS
from refold.runtime.window import find_window
from refold.server.sessions import derived_ref
from refold.store.sqlite import SQLiteStore

Msg = dict[str, Any]
OPENING: Msg = {"role": "user", "content": "What is 2+2?"}
ACTIONS = st.lists(st.tuples(st.sampled_from(["extend", "retry", "edit", "new", "side", "tool",
                                              "clear", "slide", "undo"]),
                             st.integers(0, 7)), min_size=1, max_size=14)
CLEARED = sorted(CLEARED_RESULTS)


class Client:
    def __init__(self, name: str, named: bool) -> None:
        self.name = name
        self.named = named
        self.conv: list[Msg] = [dict(OPENING)]
        self.said: dict[int, Any] = {}  # index in conv: the tool's output, where it was cleared
        self.last_reply: Msg | None = None
        self.wants_tool = False  # the next reply is a tool call
        self.start = 0  # where the window it sends starts in ``conv`` (0: all of it)
        self.session: str | None = None  # the session its last turn went to
        self.changes = 0  # retries and edits: the only reasons to rewind its session
        self.before_edit: tuple[list[Msg], Msg | None] | None = None  # what "undo" goes back to


class Harness:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.runtimes: dict[str, SessionRuntime] = {}
        self.counter = 0

    def runtime(self, ref: str, window: list[Msg] | None = None) -> SessionRuntime:
        if ref not in self.runtimes:
            try:
                # as the proxy opens a name: exact id or title, never an id prefix
                self.runtimes[ref] = self.engine.open_session(ref, by_prefix=False)
            except Exception:
                # a derived name that does not exist: the session it is a window of, if any
                found = find_window(self.engine.store, "", window) if window else None
                if found is not None:
                    session = self.engine.store.get_session(found.session_id)
                    return self.runtime(session.title or session.id)
                self.runtimes[ref] = self.engine.open_session(new=True, title=ref)
        return self.runtimes[ref]

    def turn(self, client: Client, conv: list[Msg] | None = None,
             tool: bool = False) -> tuple[SessionRuntime, Msg]:
        conv = client.conv[client.start:] if conv is None else conv
        ref = client.name if client.named else derived_ref("", conv)
        rt = self.runtime(ref, None if client.named else conv)
        prepared = rt.prepare_history([dict(m) for m in conv],
                                      diverge="rewind" if client.named else "branch")
        sent = [m for m in prepared.messages if m["role"] != "system"]
        assert sent == answered(conv)  # the upstream sees what the client sent, nothing else
        self.counter += 1
        reply: Msg = {"role": "assistant", "content": f"reply {self.counter}"}
        if tool:
            reply = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{self.counter}", "type": "function",
                "function": {"name": "read", "arguments": f'{{"n": {self.counter}}}'}}]}
        rt.record(reply)
        return rt, reply


def answered(conv: list[Msg]) -> list[Msg]:
    """``conv`` as a provider takes it: a tool result whose call is not in it (a window that
    starts after the call) is left out, as ``refold.runtime.valid`` leaves any orphan out."""
    calls = {c["id"] for m in conv for c in m.get("tool_calls") or []}
    return [m for m in conv if m["role"] != "tool" or m["tool_call_id"] in calls]


def active(store: SQLiteStore, session_id: str) -> list[Msg]:
    return [{k: r.message[k] for k in ("role", "content", "tool_calls", "tool_call_id")
             if r.message.get(k) is not None or k == "content"}
            for r in store.get_messages(session_id)]


def as_stored(client: Client, conv: list[Msg]) -> list[Msg]:
    """``conv`` as the ledger holds it: each result the client cleared as the tool said it."""
    return [{**m, "content": client.said[i]} if i in client.said else m
            for i, m in enumerate(conv)]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=ACTIONS, named=st.booleans())
@example(actions=[("tool", 0), ("extend", 0), ("tool", 1), ("clear", 1), ("clear", 0)],
         named=False)  # each kind of cleared result, while the conversation goes on
@example(actions=[("tool", 0), ("extend", 0), ("new", 0), ("tool", 0), ("clear", 1),
                  ("clear", 0), ("clear", 1)], named=True)
@example(actions=[("extend", 0), ("extend", 0), ("slide", 0), ("tool", 0), ("slide", 1),
                  ("new", 0), ("extend", 1), ("slide", 0), ("clear", 0), ("extend", 0)],
         named=False)  # windows that slide, by odd counts too, and a tool turn at the edge
@example(actions=[("extend", 0), ("extend", 0), ("slide", 0), ("side", 0), ("extend", 0),
                  ("slide", 1), ("extend", 0)], named=True)  # a side call between windows
@example(actions=[("extend", 0), ("extend", 0), ("edit", 0), ("extend", 0), ("undo", 0),
                  ("extend", 0)], named=True)  # after an undo, a new message said alike
@example(actions=[("tool", 0), ("extend", 0), ("tool", 0), ("edit", 0), ("new", 0),
                  ("clear", 0)], named=False)  # a cleared result, an edit, while the runtime
# is on another conversation's branch: adopted as the session it branches from stored it
def test_the_upstream_sees_what_the_client_sent(make_engine: Any, actions: list[tuple[str, int]],
                                                named: bool) -> None:
    engine, store = make_engine(context_length=100_000)
    harness = Harness(engine)
    clients = [Client("c0", named)]
    rewinds_allowed: dict[str, int] = {}
    for action, pick in actions:
        if action == "new" or not clients:
            clients.append(Client(f"c{len(clients)}", named))
            client = clients[-1]
        else:
            client = clients[pick % len(clients)]
            last = client.last_reply
            if action == "tool":  # a normal next turn whose reply is a tool call
                action, client.wants_tool = "extend", True
            if action in ("retry", "edit", "undo") and client.start:
                continue  # (not modeled for a windowed client: see the module doc)
            slid = action == "slide"
            if slid:  # the window slides as the client sends its next turn
                action = "extend"
            if action == "clear":  # clients clear old results as they send their next turn
                results = [i for i, m in enumerate(client.conv)
                           if m["role"] == "tool" and i not in client.said]
                if results:
                    i = results[pick % len(results)]
                    client.said[i] = client.conv[i]["content"]
                    text = CLEARED[pick % len(CLEARED)]
                    client.conv[i] = {**client.conv[i], "content": (
                        text if pick % 2 else [{"type": "text", "text": text}])}
                action = "extend"
            if action == "extend" and last is None:
                client.changes += 1  # the opening again: a retry
            elif action == "extend" and last.get("tool_calls"):
                client.conv += [last, {"role": "tool", "content": f"output of {len(client.conv)}",
                                       "tool_call_id": last["tool_calls"][0]["id"]}]
            elif action == "extend" and last is not None:
                # (the turn count too: after an undo the client says new things at the same
                # length as in the branch it left, and "each message once" counts by text)
                client.conv += [last, {"role": "user", "content": f"{client.name} goes on "
                                       f"{len(client.conv)} (turn {harness.counter})"}]

            elif action == "edit" and client.conv[-1]["role"] == "user":
                client.before_edit = (list(client.conv), last)
                client.conv[-1] = {"role": "user", "content": f"{client.name} edits "
                                   f"{len(client.conv)} (turn {harness.counter})"}
                client.changes += 1
            elif action in ("retry", "edit"):  # (an edit of a tool's result: a retry)
                client.changes += 1
            elif action == "undo":  # back to the conversation as it was before the last edit
                if client.before_edit is None:
                    continue
                client.conv, client.last_reply = client.before_edit
                client.conv = list(client.conv)
                client.before_edit = None
                client.changes += 2  # (the edit's rows rewound, the original's last reply too)
            stored = len(client.conv) - 1  # all but the message just added
            if slid and last is not None and client.session is not None and active(
                    store, client.session) == as_stored(client, client.conv[:stored]):
                # (an edit not sent yet would make the window another conversation)
                starts = [s for s in range(client.start + 1, stored - 1)
                          if any(m["role"] == "assistant" for m in client.conv[s:stored])
                          and any(m["role"] == "user" for m in client.conv[s:])]
                if starts:
                    client.start = starts[pick % len(starts)]
        if action == "side":  # another conversation under this client's name: one request
            side = [{"role": "user", "content": f"{client.name} side call {harness.counter}"}]
            rt, reply = harness.turn(client, side)
            assert active(store, rt.session_id) == [*side, reply]
            continue
        if client.last_reply is not None and client.last_reply.get("tool_calls") and \
                client.conv[-1]["role"] != "tool":
            continue  # a call stands unanswered: this client goes on only with its result
        rt, reply = harness.turn(client, tool=client.wants_tool)
        client.wants_tool = False
        client.last_reply = reply
        client.session = rt.session_id
        # each message once; a result the client cleared kept as the tool said it
        assert active(store, rt.session_id) == [*as_stored(client, client.conv), reply]
        if client.named:
            rewinds_allowed[rt.session_id] = client.changes
    for session in store.list_sessions(limit=1000):
        rewound = [r for r in store.list_rewinds(session.id) if r.seqs]
        assert len(rewound) <= rewinds_allowed.get(session.id, 0), session.title
        if named:  # a message the client sent again after an edit is brought back, not copied
            said = Counter(str(r.message.get("content")) for r in store.get_messages(
                session.id, include_inactive=True) if r.role == "user")
            assert max(said.values(), default=1) == 1, (session.title, said)
