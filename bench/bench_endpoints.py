"""What the Messages and Responses translations cost: the same conversations through
``/v1/chat/completions``, ``/v1/messages`` and ``/v1/responses`` of one ``refold serve``.

Same run, same ``refold serve`` subprocess (SQLite ledger in a temp home), same scripted
chat-completions upstream (``refold.testing.serve``, loopback): one client holds conversations
of ``--turns`` turns and re-sends its whole history each turn (chat completions, Messages,
Responses with the full input), or sends only the new input with ``previous_response_id``
(Responses, refold as the state store). Per request: wall time (non-streamed) and the proxy
process's CPU time (from /proc, Linux). Endpoints alternate in ``--rounds`` rounds so drift
lands on all of them; the figures are ratios against chat completions in the same run.

    python bench/bench_endpoints.py [--requests 120] [--turns 10] [--rounds 3] [--tool-output 2000]

``--tool-output CHARS`` adds an agent conversation through ``/v1/messages`` in Claude Code's
shape, and the same agent through ``/v1/chat/completions``: every reply a tool call, every next
request its result of CHARS characters.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from bench_proxy import cpu_seconds, start_proxy

from refold.testing import ScriptedReply, serve

REPLY = "Sure. Here is a short answer of about the length agents get back from a model."
Turn = Callable[[httpx.Client, str, int, int, dict[str, Any]], None]


def chat_turn(client: httpx.Client, url: str, conv: int, turn: int, state: dict[str, Any]) -> None:
    history = state.setdefault("history", [
        {"role": "system", "content": "You are a benchmark assistant."}])
    history.append({"role": "user", "content": f"chat conversation {conv}, turn {turn}"})
    client.post(url + "/chat/completions", json={
        "model": "scripted-model", "messages": history}).raise_for_status()
    history.append({"role": "assistant", "content": REPLY})


def messages_turn(client: httpx.Client, url: str, conv: int, turn: int,
                  state: dict[str, Any]) -> None:
    history = state.setdefault("history", [])
    history.append({"role": "user", "content": [
        {"type": "text", "text": f"messages conversation {conv}, turn {turn}"}]})
    response = client.post(url.removesuffix("/v1") + "/v1/messages", json={
        "model": "scripted-model", "max_tokens": 512, "system": "You are a benchmark assistant.",
        "messages": history})
    response.raise_for_status()
    history.append({"role": "assistant", "content": response.json()["content"]})


def responses_full_turn(client: httpx.Client, url: str, conv: int, turn: int,
                        state: dict[str, Any]) -> None:
    items = state.setdefault("items", [])
    items.append({"role": "user", "content": f"responses conversation {conv}, turn {turn}"})
    response = client.post(url + "/responses", json={
        "model": "scripted-model", "instructions": "You are a benchmark assistant.",
        "input": items, "store": False})
    response.raise_for_status()
    items.extend(response.json()["output"])


def responses_chained_turn(client: httpx.Client, url: str, conv: int, turn: int,
                           state: dict[str, Any]) -> None:
    body: dict[str, Any] = {"model": "scripted-model", "instructions": "You are a benchmark.",
                            "input": f"chained conversation {conv}, turn {turn}"}
    if state.get("previous"):
        body["previous_response_id"] = state["previous"]
    response = client.post(url + "/responses", json=body)
    response.raise_for_status()
    state["previous"] = response.json()["id"]


AGENT = "agent conversation"  # the upstream answers these with a tool call (``upstream_reply``)
TOOL_OUTPUT = 0  # --tool-output: characters of each tool result in the agent conversations


def agent_turn(client: httpx.Client, url: str, conv: int, turn: int,
               state: dict[str, Any]) -> None:
    """Claude Code's shape through ``/v1/messages``: each reply is a tool call, each next
    request answers it with ``TOOL_OUTPUT`` characters of output, the whole history re-sent
    with the cache marker on its last block."""
    history = state.setdefault("history", [
        {"role": "user", "content": [{"type": "text", "text": f"{AGENT} {conv}: find the bug"}]}])
    for message in history:
        if isinstance(message["content"], list):
            for block in message["content"]:
                block.pop("cache_control", None)
    history[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    response = client.post(url.removesuffix("/v1") + "/v1/messages", json={
        "model": "scripted-model", "max_tokens": 512, "messages": history,
        "system": [{"type": "text", "text": "You are a coding agent."}]})
    response.raise_for_status()
    content = response.json()["content"]
    history.append({"role": "assistant", "content": content})
    use = next(b for b in content if b["type"] == "tool_use")
    line = f"src/module_{turn}.py:{turn}: a line of the tool's output\n"
    history.append({"role": "user", "content": [{
        "type": "tool_result", "tool_use_id": use["id"],
        "content": (line * (TOOL_OUTPUT // len(line) + 1))[:TOOL_OUTPUT]}]})


def chat_agent_turn(client: httpx.Client, url: str, conv: int, turn: int,
                    state: dict[str, Any]) -> None:
    """The same agent through ``/v1/chat/completions`` (OpenCode's, Hermes' shape): each reply
    a tool call, each next request its ``TOOL_OUTPUT``-character result and the whole
    history."""
    history = state.setdefault("history", [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"{AGENT} {conv}: find the bug"}])
    response = client.post(url + "/chat/completions", json={
        "model": "scripted-model", "messages": history})
    response.raise_for_status()
    message = response.json()["choices"][0]["message"]
    history.append({k: v for k, v in message.items() if v is not None})
    call = message["tool_calls"][0]
    line = f"src/module_{turn}.py:{turn}: a line of the tool's output\n"
    history.append({"role": "tool", "tool_call_id": call["id"],
                    "content": (line * (TOOL_OUTPUT // len(line) + 1))[:TOOL_OUTPUT]})


def upstream_reply(body: dict[str, Any]) -> Any:
    """``REPLY``, or a tool call for the agent conversations."""
    first = next((m for m in body.get("messages") or [] if m.get("role") == "user"), {})
    if AGENT not in str(first.get("content")):
        return REPLY
    calls = sum(1 for m in body["messages"] if m.get("role") == "assistant")
    return ScriptedReply(content="Let me look.", tool_calls=[{
        "id": f"toolu_{calls}", "type": "function", "function": {
            "name": "Bash", "arguments": json.dumps({"command": f"grep -rn bug src/{calls}"})}}])


ENDPOINTS: dict[str, Turn] = {"chat.completions": chat_turn, "messages": messages_turn,
                              "responses (full input)": responses_full_turn,
                              "responses (previous_response_id)": responses_chained_turn}


def run(turn: Turn, url: str, requests: int, turns: int, pid: int, tag: int
        ) -> tuple[list[float], float]:
    times: list[float] = []
    with httpx.Client(timeout=60) as client:
        turn(client, url, -1 - tag, 0, {})  # warm: connection, first session
        cpu = cpu_seconds(pid)
        state: dict[str, Any] = {}
        for n in range(requests):
            if n % turns == 0:
                state = {}
            start = time.perf_counter()
            turn(client, url, tag * 100_000 + n // turns, n % turns, state)
            times.append(time.perf_counter() - start)
        return times, cpu_seconds(pid) - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tool-output", type=int, default=0, metavar="CHARS",
                        help="also an agent through /v1/messages and through "
                             "/v1/chat/completions: each reply a tool call, each result CHARS "
                             "characters (Claude Code's shape)")
    args = parser.parse_args()
    global TOOL_OUTPUT
    TOOL_OUTPUT = args.tool_output
    if TOOL_OUTPUT > 0:
        ENDPOINTS[f"messages (agent, {TOOL_OUTPUT}-char tool results)"] = agent_turn
        ENDPOINTS[f"chat.completions (agent, {TOOL_OUTPUT}-char results)"] = chat_agent_turn
    results: dict[str, tuple[list[float], float]] = {name: ([], 0.0) for name in ENDPOINTS}
    with serve(default=upstream_reply) as up, tempfile.TemporaryDirectory() as home:
        proc, url = start_proxy(Path(home), up.base_url)
        try:
            for round_ in range(args.rounds):
                for index, (name, turn) in enumerate(ENDPOINTS.items()):
                    times, cpu = run(turn, url, args.requests, args.turns, proc.pid,
                                     round_ * 10 + index)
                    results[name] = (results[name][0] + times, results[name][1] + cpu)
        finally:
            proc.terminate()
            proc.wait(10)
    base_p50 = statistics.median(results["chat.completions"][0])
    base_cpu = results["chat.completions"][1] / len(results["chat.completions"][0])
    print(f"{args.rounds} rounds x {args.requests} requests per endpoint, conversations of "
          f"{args.turns} turns, one client, non-streamed")
    for name, (times, cpu) in results.items():
        per = cpu / len(times)
        print(f"{name:34} p50 {statistics.median(times) * 1000:6.2f} ms "
              f"({statistics.median(times) / base_p50:4.2f}x)  proxy CPU {per * 1000:5.2f} ms/req "
              f"({per / base_cpu:4.2f}x)")


if __name__ == "__main__":
    main()
