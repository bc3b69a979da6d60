"""A Claude Code session replayed against ``/v1/messages``, with either upstream.

The requests follow the shape Claude Code sends (public captures in the anthropics/claude-code
and proxy projects' issue trackers): ``POST /v1/messages?beta=true``, an ``anthropic-beta``
header, ``system`` as blocks whose first is a billing header that changes every request, the
cache breakpoint on the newest user block (moving each turn), tools with a cache marker,
``metadata.user_id``, ``thinking``, streamed replies, and the assistant's blocks re-sent as
the SDK accumulated them (signed thinking included).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from refold.store import Store
from refold.testing import AnthropicReply, ScriptedReply, serve, serve_anthropic

ProxyFactory = Callable[..., Any]
MODEL = "claude-scripted"
EPHEMERAL = {"type": "ephemeral"}
BASH = {"name": "Bash", "description": "Run a shell command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                         "required": ["command"]}, "cache_control": EPHEMERAL}
REMINDER = ("<system-reminder>\nAs you answer the user's questions, you can use the "
            "following context: the working directory is /repo.\n</system-reminder>")


def system(cch: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.0; "
                                     f"cc_entrypoint=cli; cch={cch};"},
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
            {"type": "text", "text": "You help with software tasks. Be concise.",
             "cache_control": EPHEMERAL}]


def user(*texts: str) -> dict[str, Any]:
    blocks = [{"type": "text", "text": t} for t in texts]
    blocks[-1]["cache_control"] = EPHEMERAL
    return {"role": "user", "content": blocks}


def drop_marks(turn: dict[str, Any]) -> dict[str, Any]:
    content = [{k: v for k, v in b.items() if k != "cache_control"} for b in turn["content"]]
    return dict(turn, content=content)


def replay(root: str, thinking: bool) -> list[anthropic.types.Message]:
    sdk = anthropic.Anthropic(base_url=root, api_key="sk-client", max_retries=0, timeout=30)
    extra: dict[str, Any] = {"extra_query": {"beta": "true"}, "extra_headers": {
        "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14"}}
    if thinking:
        extra["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    history: list[dict[str, Any]] = [user(REMINDER, "list the files")]
    finals = []
    for cch, follow_up in (("aaa1", None), ("bbb2", "tool"), ("ccc3", "thanks")):
        if follow_up == "tool":
            use = finals[-1].content[-1]
            history.append({"role": "user", "content": [{
                "type": "tool_result", "tool_use_id": use.id, "content": "README.md\nsrc",
                "cache_control": EPHEMERAL}]})
        elif follow_up == "thanks":
            history.append(user("thanks"))
        with sdk.messages.stream(model=MODEL, max_tokens=32000, system=system(cch),  # type: ignore[arg-type]
                                 tools=[BASH], messages=history,  # type: ignore[list-item,arg-type]
                                 metadata={"user_id": "user_abc_account_def_session_1"},
                                 **extra) as stream:
            for _ in stream:
                pass
            final = stream.get_final_message()
        finals.append(final)
        # Claude Code re-sends what it accumulated, and moves the breakpoint to the newest turn
        history = [drop_marks(t) for t in history]
        history.append({"role": "assistant", "content": [
            b.model_dump(exclude_none=True) for b in final.content]})
    return finals


def ledger_rows(store: Store) -> list[dict[str, Any]]:
    sessions = store.list_sessions()
    assert len(sessions) == 1, [s.title for s in sessions]  # one conversation, one session
    return [r.message for r in store.get_messages(sessions[0].id)]


def check_ledger(store: Store) -> None:
    rows = ledger_rows(store)
    assert [m["role"] for m in rows] == ["user", "assistant", "tool", "assistant", "user",
                                         "assistant"]
    assert rows[1]["tool_calls"][0]["function"]["name"] == "Bash"
    assert rows[2]["content"] == "README.md\nsrc"
    assert "x-anthropic-billing-header" not in str(rows)


def test_claude_code_session_against_an_anthropic_upstream(start_proxy: ProxyFactory,
                                                           sqlite_store: Store) -> None:
    signed = {"type": "thinking", "thinking": "The user wants a listing.", "signature": "sig-1"}
    bash = {"type": "tool_use", "id": "toolu_9", "name": "Bash", "input": {"command": "ls"}}
    replies = [AnthropicReply(content=[signed, {"type": "text", "text": "Listing."}, bash]),
               "There are two entries.", "You're welcome."]
    with serve_anthropic(replies) as up:
        proxy = start_proxy(up.base_url, upstream_format="anthropic",
                            upstream_api_key="sk-upstream")
        finals = replay(proxy.root, thinking=True)
    assert finals[0].stop_reason == "tool_use"
    assert finals[0].content[0].type == "thinking"
    assert finals[0].content[0].signature == "sig-1"  # type: ignore[union-attr]
    assert finals[0].usage.cache_read_input_tokens == 40  # the upstream's usage, verbatim
    assert finals[2].content[0].text == "You're welcome."  # type: ignore[union-attr]

    first, second, third = up.llm.requests
    headers = up.llm.headers
    assert all(h["x-api-key"] == "sk-upstream" for h in headers)  # never the client's key
    assert all("claude-code-20250219" in h["anthropic-beta"] for h in headers)
    # passed through: thinking, metadata, tools with their marker, the billing block first
    assert second["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert second["metadata"] == {"user_id": "user_abc_account_def_session_1"}
    assert second["tools"] == [BASH] and second["stream"] is True
    assert [b["text"].split("cch=")[-1] for b in (r["system"][0] for r in up.llm.requests)] \
        == ["aaa1;", "bbb2;", "ccc3;"]
    assert second["system"][-1]["cache_control"] == EPHEMERAL
    # the signed thinking block goes back verbatim; the breakpoint is where the client put it
    assert second["messages"][1]["content"][0] == signed
    assert second["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL
    assert "cache_control" not in str(second["messages"][:-1])
    assert third["messages"][-1]["content"][-1] == {"type": "text", "text": "thanks",
                                                    "cache_control": EPHEMERAL}
    assert first["messages"][0]["content"][0]["text"] == REMINDER
    check_ledger(sqlite_store)


def test_claude_code_session_against_an_openai_upstream(start_proxy: ProxyFactory,
                                                        sqlite_store: Store) -> None:
    call = {"id": "call_1", "type": "function",
            "function": {"name": "Bash", "arguments": '{"command": "ls"}'}}
    with serve([ScriptedReply(content="Listing.", tool_calls=[call]),
                "There are two entries.", "You're welcome."]) as up:
        proxy = start_proxy(up)
        finals = replay(proxy.root, thinking=False)
    assert [f.stop_reason for f in finals] == ["tool_use", "end_turn", "end_turn"]
    for request in up.llm.requests:
        assert request["messages"][0]["role"] == "system"
        assert "billing-header" not in request["messages"][0]["content"]
        assert "cache_control" not in str(request) and "metadata" not in request
    assert up.llm.requests[1]["messages"][-1]["role"] == "tool"
    check_ledger(sqlite_store)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_anthropic_upstream_errors_reach_the_client_in_anthropic_shape(
        start_proxy: ProxyFactory, stream: bool) -> None:
    overloaded = AnthropicReply(status=529, error={"type": "error", "error": {
        "type": "overloaded_error", "message": "Overloaded"}})
    with serve_anthropic([overloaded, AnthropicReply(error_event_after=3)]) as up:
        proxy = start_proxy(up.base_url, upstream_format="anthropic")
        sdk = anthropic.Anthropic(base_url=proxy.root, api_key="k", max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as failed:
            sdk.messages.create(model=MODEL, max_tokens=10,
                                messages=[{"role": "user", "content": "hi"}])
        # the upstream's 529 is Claude Code's overload (it was a 502 api_error)
        assert failed.value.status_code == 529
        assert failed.value.body == {"type": "error", "error": {  # type: ignore[comparison-overlap]
            "type": "overloaded_error", "message": "upstream returned HTTP 529: Overloaded"}}
        if stream:  # an error event mid-stream: the SDK raises it
            with pytest.raises(anthropic.APIStatusError) as broke, sdk.messages.stream(
                    model=MODEL, max_tokens=10,
                    messages=[{"role": "user", "content": "hi"}]) as s:
                s.get_final_message()
            assert broke.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


def test_refold_serve_with_upstream_format_anthropic_as_a_process(tmp_path: Path) -> None:
    """The command a user runs: ``refold serve --upstream-format anthropic``, a retry of the
    same request, and the ledger holding each message once."""
    import os
    import re
    import subprocess
    import sys
    import time

    import httpx

    from refold.store.sqlite import SQLiteStore

    with serve_anthropic(["Hello from upstream.", "Hello from upstream."]) as up:
        log = tmp_path / "serve.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("REFOLD_")}
        env["UP_KEY"] = "sk-upstream-9"
        proc = subprocess.Popen(
            [sys.executable, "-m", "refold.cli.main", "--home", str(tmp_path / "home"),
             "serve", "--upstream", up.base_url, "--upstream-format", "anthropic",
             "--upstream-api-key-env", "UP_KEY", "--port", "0"],
            stdout=subprocess.DEVNULL, stderr=log.open("wb"), env=env)
        try:
            root = None
            deadline = time.monotonic() + 30
            while root is None and time.monotonic() < deadline and proc.poll() is None:
                match = re.search(r"http://127\.0\.0\.1:(\d+)/v1", log.read_text())
                try:  # the port is bound before uvicorn accepts: retry until it answers
                    if match and httpx.get(f"http://127.0.0.1:{match.group(1)}/v1/models",
                                           timeout=2).status_code == 200:
                        root = f"http://127.0.0.1:{match.group(1)}"
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
            assert root is not None, log.read_text()
            sdk = anthropic.Anthropic(base_url=root, api_key="sk-client", max_retries=0)
            ask = [{"role": "user", "content": "hello"}]
            for _ in range(2):  # the same request twice: a client's retry
                reply = sdk.messages.create(model=MODEL, max_tokens=20,
                                            messages=ask)  # type: ignore[arg-type]
                assert reply.content[0].text == "Hello from upstream."  # type: ignore[union-attr]
            models = httpx.get(root + "/v1/models").json()["data"]
            assert any(m["id"] == "claude-scripted" for m in models)
        finally:
            proc.terminate()
            proc.wait(15)
    assert all(h["x-api-key"] == "sk-upstream-9" for h in up.llm.headers)
    store = SQLiteStore(str(tmp_path / "home" / "refold.db"))
    try:
        chains = [[r.message["role"] for r in store.get_messages(s.id)]
                  for s in store.list_sessions()]
    finally:
        store.close()
    # the retried message once per branch: a retry without a session header is recorded as a
    # branch sharing the common prefix (issue 11, "the request is the truth")
    assert chains and all(chain == ["user", "assistant"] for chain in chains)


@pytest.mark.parametrize("stream", [False, True])
def test_cache_writes_from_an_anthropic_upstream_are_priced_as_writes(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    """Claude Code's prompt is mostly cache writes and reads. Cache writes were priced as
    plain input (the usage the runtime priced had lost them); now a 5-minute write is priced
    at the model's write rate and a 1-hour one (what Claude Code writes) at twice its input
    price, as Anthropic bills them."""
    usage = {"input_tokens": 10, "output_tokens": 100, "cache_read_input_tokens": 1_000,
             "cache_creation_input_tokens": 3_000,
             "cache_creation": {"ephemeral_5m_input_tokens": 1_000,
                                "ephemeral_1h_input_tokens": 2_000}}
    with serve_anthropic([AnthropicReply(usage=usage)]) as up:
        proxy = start_proxy(up.base_url, upstream_format="anthropic",
                            upstream_api_key="sk-upstream",
                            pricing={MODEL: {"input": 10.0, "output": 50.0, "cache_read": 1.0,
                                             "cache_write": 12.5}})
        sdk = anthropic.Anthropic(base_url=proxy.root, api_key="k", max_retries=0, timeout=30)
        if stream:
            with sdk.messages.stream(model=MODEL, max_tokens=64,
                                     messages=[{"role": "user", "content": "hi"}]) as events:
                events.get_final_message()
        else:
            sdk.messages.create(model=MODEL, max_tokens=64,
                                messages=[{"role": "user", "content": "hi"}])
    (session,) = sqlite_store.list_sessions()
    assert (session.input_tokens, session.cache_read_tokens) == (4_010, 1_000)
    expected = (10 * 10.0 + 100 * 50.0 + 1_000 * 1.0 + 1_000 * 12.5 + 2_000 * 20.0) / 1e6
    assert session.cost_usd == pytest.approx(expected)


def test_a_system_turn_inside_the_conversation_as_claude_code_2_1_sends_it(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """Claude Code 2.1.332 puts its environment block in ``messages`` as a ``system`` turn
    after the first user turn; refold refused every such request with a 400 ("Anthropic role
    must be user or assistant"), so Claude Code could not work through it at all."""
    environment = {"role": "system", "content": [
        {"type": "text", "text": "# Environment\n - Primary working directory: /repo"}]}
    with serve(["Listing.", "You're welcome."]) as up:
        proxy = start_proxy(up)
        history: list[dict[str, Any]] = [user(REMINDER, "list the files"), environment]
        # the SDK's types have no system turn: the requests go as Claude Code sends them
        for follow_up in ("thanks", None):
            response = httpx.post(proxy.root + "/v1/messages", timeout=30, json={
                "model": MODEL, "max_tokens": 1024, "system": system("aaa1"),
                "tools": [BASH], "messages": history})
            assert response.status_code == 200, response.text
            history += [{"role": "assistant", "content": response.json()["content"]}]
            if follow_up:
                history.append(user(follow_up))
        sent = up.llm.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "system", "assistant", "user"]
    assert sent[2]["content"] == "# Environment\n - Primary working directory: /repo"
    sessions = sqlite_store.list_sessions()
    assert len(sessions) == 1
    assert [r.role for r in sqlite_store.get_messages(sessions[0].id)] == [
        "user", "system", "assistant", "user", "assistant"]


@pytest.mark.parametrize(("sent", "expected"), [
    ({"authorization": "Bearer sk-ant-oat01-token"},
     {"authorization": "Bearer sk-ant-oat01-token"}),
    ({"x-api-key": "sk-ant-api03-key"}, {"x-api-key": "sk-ant-api03-key"})],
    ids=["oauth-bearer", "api-key"])
def test_the_callers_key_reaches_an_anthropic_upstream_in_the_header_it_came_in(
        start_proxy: ProxyFactory, sent: dict[str, str], expected: dict[str, str]) -> None:
    """Claude Code logged in with a subscription sends ``Authorization: Bearer
    sk-ant-oat…``; with no key of its own, refold passed it on as ``x-api-key``, which
    Anthropic rejects for an OAuth token. Now a bearer goes on as a bearer, an API key as
    ``x-api-key``; a key refold holds still replaces either."""
    with serve_anthropic(["ok", "ok"]) as up:
        proxy = start_proxy(up.base_url, upstream_format="anthropic")
        held = start_proxy(up.base_url, upstream_format="anthropic",
                           upstream_api_key="sk-upstream")
        for running in (proxy, held):
            response = httpx.post(running.root + "/v1/messages?beta=true", timeout=30, headers={
                **sent, "anthropic-beta": "oauth-2025-04-20,claude-code-20250219"}, json={
                "model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]})
            assert response.status_code == 200, response.text
    passed, configured = ({k: h.get(k) for k in ("authorization", "x-api-key")}
                          for h in up.llm.headers)
    assert passed == {"authorization": None, "x-api-key": None, **expected}
    assert configured == {"authorization": None, "x-api-key": "sk-upstream"}
    assert "oauth-2025-04-20" in up.llm.headers[0]["anthropic-beta"]


def test_system_blocks_reach_an_anthropic_upstream_as_the_client_sent_them(
        start_proxy: ProxyFactory, sqlite_store: Store, tmp_path: Path) -> None:
    """Claude Code sends its system prompt as blocks, two of them with a ``cache_control``
    (one a 1-hour one); they reached the upstream merged into one block with the last marker,
    so the first breakpoint was lost. Now the blocks go as they came, and refold's memory
    follows them in a block of its own."""
    from refold.assembly import tenant_memory_dir
    from refold.config import Settings
    from refold.memory import open_file_store

    blocks = [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.0; cch=a1;"},
              {"type": "text", "text": "You are Claude Code.", "cache_control": EPHEMERAL},
              {"type": "text", "text": "Main instructions.",
               "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    with serve_anthropic(["ok", "ok"]) as up:
        proxy = start_proxy(up.base_url, upstream_format="anthropic")
        for text in ("hi", "and then"):
            response = httpx.post(proxy.root + "/v1/messages", timeout=30, json={
                "model": MODEL, "max_tokens": 50, "system": blocks,
                "messages": [{"role": "user", "content": text}]})
            assert response.status_code == 200, response.text
        settings = Settings(home=tmp_path / "home")
        open_file_store(tenant_memory_dir(settings, "")).add("user", "Prefers tabs.")
        remembering = start_proxy(up.base_url, upstream_format="anthropic")
        response = httpx.post(remembering.root + "/v1/messages", timeout=30, json={
            "model": MODEL, "max_tokens": 50, "system": blocks,
            "messages": [{"role": "user", "content": "a new one"}]})
        assert response.status_code == 200, response.text
    assert [r["system"] for r in up.llm.requests[:2]] == [blocks, blocks]
    remembered = up.llm.requests[2]["system"]
    assert remembered[:3] == blocks and len(remembered) == 4
    assert "Prefers tabs." in remembered[3]["text"] and "cache_control" not in remembered[3]


def test_a_marker_before_claude_codes_system_turn_stays_on_its_block(
        start_proxy: ProxyFactory) -> None:
    """Claude Code appends ``role: system`` turns to the conversation (its reminders), which
    go into ``system`` for an Anthropic upstream. Counted among the turns, each moved the
    markers before it one turn back: the first request's marker on the user's prompt was
    dropped, and a later one landed on the previous reply's thinking block (a 400)."""
    signed = {"type": "thinking", "thinking": "Run it.", "signature": "sig-1"}
    bash = {"type": "tool_use", "id": "toolu_x1", "name": "Bash", "input": {"command": "ls"}}
    with serve_anthropic(["Hello.", "Done."]) as up:
        proxy = start_proxy(up.base_url, upstream_format="anthropic")
        client = anthropic.Anthropic(base_url=proxy.root, api_key="k", max_retries=0)
        client.messages.create(model=MODEL, max_tokens=100, messages=[
            {"role": "user", "content": [{"type": "text", "text": "hello",
                                          "cache_control": EPHEMERAL}]},
            {"role": "system", "content": "Available agent types: general."}])
        client.messages.create(model=MODEL, max_tokens=100, tools=[BASH], messages=[
            {"role": "user", "content": [{"type": "text", "text": "run it"}]},
            {"role": "assistant", "content": [signed, bash]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x1",
                                          "content": "a.txt", "cache_control": EPHEMERAL}]},
            {"role": "system", "content": "The task tools haven't been used recently."}])
    first, second = up.llm.requests
    assert first["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL
    assert second["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL
    assert second["messages"][-2]["content"][0] == signed  # no marker on the thinking block
    assert "cache_control" not in str(second["messages"][:-1])
