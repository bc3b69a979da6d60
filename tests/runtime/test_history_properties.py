"""Property test of "the request is the truth" (issue 11), in process over a real SQLite ledger.

Clients hold conversations and act at random — extend (the normal next turn), retry (the same
request again), edit (the last user message changed), new (a conversation opening like the
others), side (a one-off request of another conversation under the client's own name, as an
agent's title or sub-agent calls share its header) — in any interleaving, with or without naming
their session (``X-Refold-Session``, emulated as the proxy routes: a named runtime per name,
else one per derived reference).
Checked after every request:

- what the upstream would receive (``Prepared.messages``, system aside) is what the client sent;
- the session that answered holds exactly that conversation then the reply, each message once;
- nothing is rewound that its owner did not change: without names never anything; with a name
  only that client's session, and only on its retries and edits (never on a side call).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.runtime import Engine, SessionRuntime
from refold.server.sessions import derived_ref
from refold.store.sqlite import SQLiteStore

Msg = dict[str, Any]
OPENING: Msg = {"role": "user", "content": "What is 2+2?"}
ACTIONS = st.lists(st.tuples(st.sampled_from(["extend", "retry", "edit", "new", "side"]),
                             st.integers(0, 3)), min_size=1, max_size=14)


class Client:
    def __init__(self, name: str, named: bool) -> None:
        self.name = name
        self.named = named
        self.conv: list[Msg] = [dict(OPENING)]
        self.last_reply: Msg | None = None
        self.changes = 0  # retries and edits: the only reasons to rewind its session


class Harness:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.runtimes: dict[str, SessionRuntime] = {}
        self.counter = 0

    def runtime(self, ref: str) -> SessionRuntime:
        if ref not in self.runtimes:
            try:
                # as the proxy opens a name: exact id or title, never an id prefix
                self.runtimes[ref] = self.engine.open_session(ref, by_prefix=False)
            except Exception:
                self.runtimes[ref] = self.engine.open_session(new=True, title=ref)
        return self.runtimes[ref]

    def turn(self, client: Client, conv: list[Msg] | None = None) -> tuple[SessionRuntime, Msg]:
        conv = client.conv if conv is None else conv
        ref = client.name if client.named else derived_ref("", conv)
        rt = self.runtime(ref)
        prepared = rt.prepare_history([dict(m) for m in conv],
                                      diverge="rewind" if client.named else "branch")
        sent = [m for m in prepared.messages if m["role"] != "system"]
        assert sent == conv  # the upstream sees what the client sent, nothing else
        self.counter += 1
        reply = {"role": "assistant", "content": f"reply {self.counter}"}
        rt.record(reply)
        return rt, reply


def active(store: SQLiteStore, session_id: str) -> list[Msg]:
    return [{"role": r.role, "content": r.message.get("content")}
            for r in store.get_messages(session_id)]


@pytest.fixture
def make_engine(tmp_path: Path) -> Iterator[Any]:
    made: list[tuple[Engine, SQLiteStore]] = []

    def make() -> tuple[Engine, SQLiteStore]:
        store = SQLiteStore(str(tmp_path / f"p{len(made)}.db"))
        engine = Engine(store, model="gpt-4o-mini", context_length=100_000,
                        background_precompact=False)
        made.append((engine, store))
        return engine, store

    yield make
    for engine, store in made:
        engine.close()
        store.close()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=ACTIONS, named=st.booleans())
def test_the_upstream_sees_what_the_client_sent(make_engine: Any, actions: list[tuple[str, int]],
                                                named: bool) -> None:
    engine, store = make_engine()
    harness = Harness(engine)
    clients = [Client("c0", named)]
    rewinds_allowed: dict[str, int] = {}
    for action, pick in actions:
        if action == "new" or not clients:
            clients.append(Client(f"c{len(clients)}", named))
            client = clients[-1]
        else:
            client = clients[pick % len(clients)]
            if action == "extend" and client.last_reply is not None:
                client.conv += [client.last_reply,
                                {"role": "user", "content": f"{client.name} goes on {len(client.conv)}"}]
            elif action == "edit":
                client.conv[-1] = {"role": "user", "content": f"{client.name} edits {len(client.conv)}"}
                client.changes += 1
            elif action == "retry":
                client.changes += 1
        if action == "side":  # another conversation under this client's name: one request
            side = [{"role": "user", "content": f"{client.name} side call {harness.counter}"}]
            rt, reply = harness.turn(client, side)
            assert active(store, rt.session_id) == [*side, reply]
            continue
        rt, reply = harness.turn(client)
        client.last_reply = reply
        assert active(store, rt.session_id) == [*client.conv, reply]  # each message once
        if client.named:
            rewinds_allowed[rt.session_id] = client.changes
    for session in store.list_sessions(limit=1000):
        rewound = [r for r in store.list_rewinds(session.id) if r.seqs]
        assert len(rewound) <= rewinds_allowed.get(session.id, 0), session.title
