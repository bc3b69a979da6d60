"""Property test of "the request is the truth" with compaction on (issue 11), in process.

``test_history_properties.py`` checks it on a context that never fills; here a 3k-token
context fills every few turns, so the runtime compacts (and, with ``rotate_on_compaction``,
continues in a child session) while clients extend, regenerate, open new conversations, end on
tool calls and slide their windows, named or not. After every request:

- what the upstream would receive is the client's messages in order, except a compacted stretch
  replaced by its summary (with its acknowledgement where roles must alternate) and old tool
  outputs pruned: never a message the client did not send, and always its last message;
- every tool result answers a call before it, every call is answered;
- it fits the context;
- the session that answered stores no message twice.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from refold.compaction.policy import CompactionPolicy
from refold.runtime import SessionRuntime
from refold.runtime.window import find_window
from refold.server.sessions import derived_ref
from refold.testing import assert_sent_as_client_sent

Msg = dict[str, Any]
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
         "lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi",
         "chi", "psi", "omega"]
ACTIONS = st.lists(st.tuples(st.sampled_from(["extend"] * 5 + ["regenerate", "new", "tool",
                                                             "slide"]),
                             st.integers(0, 7)), min_size=5, max_size=45)


def text(tag: str, n: int) -> str:
    return f"{tag} {n} " + " ".join(WORDS[(n * 7 + i) % 24] + str(i) for i in range(150))


def key(m: Msg) -> tuple[Any, ...]:
    return (m["role"], json.dumps(m.get("content"), sort_keys=True),
            json.dumps(m.get("tool_calls"), sort_keys=True), m.get("tool_call_id"))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=ACTIONS, named=st.booleans(), rotate=st.booleans())
@example(actions=[("extend", 0), ("extend", 0), ("extend", 4), ("extend", 4), ("extend", 4),
                  ("tool", 0), ("extend", 0)], named=False, rotate=True)  # a second rotation:
# the first summary's stored user acknowledgement was kept as the user's last request, and the
# new summary's own followed it (the same message twice in the child)
def test_the_upstream_sees_what_the_client_sent_while_compacting(
        make_engine: Any, actions: list[tuple[str, int]], named: bool, rotate: bool) -> None:
    engine, store = make_engine(context_length=3000,
                                policy=CompactionPolicy(rotate_on_compaction=rotate))
    runtimes: dict[str, SessionRuntime] = {}
    clients: list[dict[str, Any]] = []
    for n, (action, pick) in enumerate(actions):
        if action == "new" or not clients:
            clients.append({"name": f"c{len(clients)}", "conv": [
                {"role": "user", "content": text("opens", len(clients))}], "last": None,
                "start": 0})
            client = clients[-1]
        else:
            client = clients[pick % len(clients)]
            conv, last = client["conv"], client["last"]
            if action == "regenerate" and client["start"]:
                continue  # (a windowed client's regenerate: test_proxy_sliding_window.py)
            if action != "regenerate" and last is not None:
                conv.append(last)
                conv.append({"role": "tool", "tool_call_id": last["tool_calls"][0]["id"],
                             "content": text("output", n)} if last.get("tool_calls") else
                            {"role": "user", "content": text(f"{client['name']} says", n)})
            if action == "slide":
                starts = [s for s in range(client["start"] + 1, len(conv) - 3)
                          if conv[s]["role"] == "user"]
                if starts:
                    client["start"] = starts[pick % len(starts)]
        window = client["conv"][client["start"]:]
        ref = client["name"] if named else derived_ref("", window)
        rt = runtimes.get(ref)
        if rt is None:
            try:  # as the proxy opens a name: exact id or title
                rt = engine.open_session(ref, by_prefix=False)
            except Exception:  # a derived name: the session the window continues, if any
                found = None if named else find_window(store, "", window)
                title = None
                if found is not None:
                    session = store.get_session(found.session_id)
                    title = session.title or session.id
                rt = (runtimes.get(title) or engine.open_session(title, by_prefix=False)
                      if title is not None else engine.open_session(new=True, title=ref))
            runtimes[ref] = rt
        prepared = rt.prepare_history([dict(m) for m in window],
                                      diverge="rewind" if named else "branch")
        assert_sent_as_client_sent(prepared.messages, window)
        assert prepared.tokens <= prepared.context_length
        reply: Msg = {"role": "assistant", "content": text("reply", n)}
        if action == "tool" or pick % 5 == 4:
            reply = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{n}", "type": "function",
                "function": {"name": "read", "arguments": f'{{"n": {n}}}'}}]}
        rt.record(reply)
        client["last"] = reply
        rows = [key(r.message) for r in store.get_messages(rt.session_id)]
        assert len(rows) == len(set(rows))  # stored once
