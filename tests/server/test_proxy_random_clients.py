"""Random clients through the real proxy with compaction on: the request is still the truth.

Three clients (the OpenAI SDK, streaming or not, at random) hold conversations through one
``refold serve`` app with an 8k context, so the ledger compacts every few turns (and, with
``rotate_on_compaction``, continues each conversation in a child session). They extend their
conversations (replies that are text or a tool call, answered with its output), regenerate a
reply (the same request again), slide their windows (LangChain's ``trim_messages``: the system
message and the end of the conversation), and meet upstream errors (a 500 the client sends
again). Checked for every request the upstream received:

- its messages are the client's window, in order, except that a compacted stretch is replaced
  by its summary (and the acknowledgement that follows one where roles must alternate) and old
  tool outputs may be pruned — never a message the client did not send, never a stored
  continuation;
- every result answers a call before it and every call is answered (provider-valid);

and at the end: no session stores a message twice, every message a client sent is stored, and
every error the clients saw was one the upstream returned.
"""

from __future__ import annotations

import json
import random
from typing import Any

import openai
import pytest

from refold.store import Store
from refold.testing import ScriptedReply, assert_sent_as_client_sent, serve

Msg = dict[str, Any]
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
         "lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi",
         "chi", "psi", "omega"]


def text(tag: str, n: int, size: int) -> str:
    return f"{tag} {n} " + " ".join(WORDS[(n * 7 + i) % 24] + str(i) for i in range(size))


def key(m: Msg) -> tuple[Any, ...]:
    return (m["role"], json.dumps(m.get("content")), json.dumps(
        [(c["id"], c["function"]["name"], c["function"]["arguments"])
         for c in m.get("tool_calls") or []]), m.get("tool_call_id"))


check = assert_sent_as_client_sent  # (refold.testing.truth)


def ask(api: openai.OpenAI, window: list[Msg], stream: bool) -> Msg:
    if not stream:
        message = api.chat.completions.create(model="m", messages=window  # type: ignore
                                              ).choices[0].message
        reply: Msg = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            reply["tool_calls"] = [{"id": t.id, "type": "function", "function": {
                "name": t.function.name, "arguments": t.function.arguments}}  # type: ignore
                for t in message.tool_calls]
        return reply
    chunks = [c for c in api.chat.completions.create(
        model="m", messages=window, stream=True) if c.choices]  # type: ignore
    calls: dict[int, Msg] = {}
    for chunk in chunks:
        for part in chunk.choices[0].delta.tool_calls or []:
            call = calls.setdefault(part.index, {"id": "", "type": "function",
                                                 "function": {"name": "", "arguments": ""}})
            call["id"] = part.id or call["id"]
            if part.function is not None:
                call["function"]["name"] += part.function.name or ""
                call["function"]["arguments"] += part.function.arguments or ""
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    reply = {"role": "assistant", "content": content or None}
    if calls:
        reply["tool_calls"] = [calls[i] for i in sorted(calls)]
    return reply


class Upstream:
    """The scripted model: now and then a 500, a quarter of its replies a tool call, the
    rest text of varied length."""

    def __init__(self, rng: random.Random, call_prefix: str) -> None:
        self.rng, self.call_prefix = rng, call_prefix
        self.served = self.errors = 0

    def reply(self, request: dict[str, Any]) -> ScriptedReply:
        self.served += 1
        if self.rng.random() < 0.08:
            self.errors += 1
            return ScriptedReply(status=500, error={"error": {"message": "try again"}})
        if self.rng.random() < 0.25:
            return ScriptedReply(content=None, tool_calls=[{
                "id": f"{self.call_prefix}_{self.served}", "type": "function",
                "function": {"name": "read", "arguments": json.dumps({"n": self.served})}}])
        return ScriptedReply(content=text("reply", self.served, self.rng.choice((20, 120, 300))))


@pytest.mark.parametrize(("seed", "rotate", "named"), [(0, False, False), (1, True, False),
                                                      (3, True, True)],
                         ids=["plain", "rotate", "rotate-named"])
def test_random_clients_see_their_own_requests(start_proxy: Any, sqlite_store: Store,
                                               seed: int, rotate: bool, named: bool) -> None:
    rng = random.Random(seed)
    upstream = Upstream(rng, "call")
    with serve(default=upstream.reply) as up:
        proxy = start_proxy(up, context_length=8000, rotate_on_compaction=rotate)
        clients: list[dict[str, Any]] = [{"api": openai.OpenAI(
                        base_url=proxy.base_url, api_key="x", max_retries=0,
                        default_headers={"X-Refold-Session": f"chat-{c}"} if named else None),
                    "conv": [{"role": "system", "content": "Be terse."},
                             {"role": "user", "content": text(f"client {c} opens", c, 100)}],
                    "start": 1, "last": None} for c in range(3)]
        seen_errors = 0
        for turn in range(70):
            client = rng.choice(clients)
            action = rng.choice(["extend"] * 6 + ["regenerate", "slide"])
            last, conv = client["last"], client["conv"]
            if action != "regenerate" and last is not None:
                conv.append(last)
                conv.append({"role": "tool", "tool_call_id": last["tool_calls"][0]["id"],
                             "content": text("output", turn, rng.choice((10, 200)))}
                            if last.get("tool_calls") else
                            {"role": "user", "content": text("asks", turn, rng.choice((10, 100)))})
                client["last"] = None
            if action == "slide":
                users = [i for i in range(client["start"] + 1, len(conv) - 2)
                         if conv[i]["role"] == "user"]
                if users:
                    client["start"] = rng.choice(users)
            window = [conv[0], *conv[client["start"]:]]
            before = len(up.llm.requests)
            try:
                client["last"] = ask(client["api"], window, rng.random() < 0.5)
            except openai.InternalServerError:
                seen_errors += 1  # the client sends it again on its next turn
            assert len(up.llm.requests) == before + 1
            check(up.llm.requests[-1]["messages"], window)
    assert seen_errors == upstream.errors  # every error the clients saw was the upstream's
    stored: set[tuple[Any, ...]] = set()
    sessions = sqlite_store.list_sessions(limit=1000)
    for session in sessions:
        rows = [key(r.message) for r in sqlite_store.get_messages(session.id)]
        assert len(rows) == len(set(rows)), session.title  # nothing stored twice
        stored.update(rows)
    for client in clients:
        assert {key(m) for m in client["conv"][1:]} <= stored  # everything sent is stored
    if rotate:
        assert any(s.parent_session_id and s.link_kind != "branch" for s in sessions)
