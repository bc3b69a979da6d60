"""``/v1/responses`` with the tools OpenAI Codex (0.171) sends besides functions: a ``custom``
tool (``apply_patch``, ``exec``: free text in a grammar), its tools as an ``additional_tools``
input item (its default model), and the ``tool_search`` it runs itself. Each was a 400 on
Codex's first request. The shapes are Codex's own requests as a tap logged them, trimmed.

Each test drives the official openai SDK against refold serve against a scripted upstream the
way Codex does (``store: false``, the whole history each turn) and checks what the upstream
received, what the client got back, and the ledger: one session (no branch), each message
stored once."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest

from refold.store import Store
from refold.testing import ScriptedReply, serve

ProxyFactory = Callable[..., Any]
MODEL = "gpt-5.5"
PATCH = ('*** Begin Patch\n*** Add File: hello.txt\n+hi "there" \\ tab\there 😀\n'
         '*** End Patch\n')
GRAMMAR = ('start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF\n'
           'end_patch: "*** End Patch" LF?\n')
EXEC_COMMAND = {"type": "function", "name": "exec_command",
                "description": "Runs a command in a PTY.", "strict": False,
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                               "required": ["cmd"], "additionalProperties": False}}
APPLY_PATCH = {"type": "custom", "name": "apply_patch",
               "description": "Use the `apply_patch` tool to edit files. This is a FREEFORM "
                              "tool, so do not wrap the patch in JSON.",
               "format": {"type": "grammar", "syntax": "lark", "definition": GRAMMAR}}
TOOL_SEARCH = {"type": "tool_search", "execution": "client",
               "description": "# Tool discovery\n\nSearches over deferred tool metadata.",
               "parameters": {"type": "object", "properties": {
                   "limit": {"type": "number"}, "query": {"type": "string"}},
                   "required": ["query"], "additionalProperties": False}}
WEB_SEARCH = {"type": "web_search", "external_web_access": True,
              "search_content_types": ["text", "image"]}
GPT55_TOOLS = [EXEC_COMMAND, APPLY_PATCH, TOOL_SEARCH, WEB_SEARCH]
OPENING: list[dict[str, Any]] = [
    {"type": "message", "id": "msg_dev", "role": "developer",
     "content": [{"type": "input_text", "text": "You are Codex, a coding agent."}]},
    {"type": "message", "id": "msg_env", "role": "user",
     "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>/w</cwd>\n"
                                                "</environment_context>"}]},
    {"type": "message", "id": "msg_ask", "role": "user",
     "content": [{"type": "input_text", "text": "create hello.txt"}]}]


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=30)


def ledger(store: Store) -> list[dict[str, Any]]:
    sessions = store.list_sessions()
    assert len(sessions) == 1, [s.title for s in sessions]  # no branch, no second root
    return [r.message for r in store.get_messages(sessions[0].id)]


def turn(client: openai.OpenAI, items: list[Any], stream: bool, tools: Any = None
         ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One Codex turn: the response (as JSON) and, streamed, its events."""
    extra: dict[str, Any] = {"tools": tools} if tools is not None else {}
    if not stream:
        response = client.responses.create(model=MODEL, input=items, store=False,
                                           parallel_tool_calls=True, **extra)
        return response.model_dump(mode="json", warnings=False), []
    events = [e.model_dump(mode="json", warnings=False) for e in client.responses.create(
        model=MODEL, input=items, store=False, stream=True, parallel_tool_calls=True, **extra)]
    assert events[-1]["type"] == "response.completed", events[-1]
    return events[-1]["response"], events


def call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {
        "name": name, "arguments": arguments if isinstance(arguments, str)
        else json.dumps(arguments, separators=(",", ":"), ensure_ascii=True)}}


def said(store: Store) -> list[str]:
    """The ledger's roles, its system and developer messages left out."""
    return [m["role"] for m in ledger(store) if m["role"] not in ("system", "developer")]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_gpt55_apply_patch_is_a_custom_tool_call_and_its_history_is_stored_once(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    """``codex -m gpt-5.5``: ``apply_patch`` is a custom tool (and ``tool_search`` one Codex
    runs itself): a 400 before ("refold takes function tools ..., not 'custom'")."""
    script: list[ScriptedReply | str] = [ScriptedReply(content=None, tool_calls=[call("call_p", "apply_patch",
                                                           {"input": PATCH})]),
              "Created hello.txt.", "You are welcome."]
    with serve(script) as up:
        client = sdk(start_proxy(up).base_url)
        first, events = turn(client, OPENING, stream, GPT55_TOOLS)
        [item] = first["output"]
        assert item["type"] == "custom_tool_call"
        assert (item["name"], item["call_id"], item["input"]) == ("apply_patch", "call_p", PATCH)
        assert "arguments" not in item and "namespace" not in item
        if stream:
            kinds = [e["type"] for e in events]
            deltas = [e["delta"] for e in events
                      if e["type"] == "response.custom_tool_call_input.delta"]
            assert "".join(deltas) == PATCH and len(deltas) >= 1
            [done] = [e for e in events if e["type"] == "response.custom_tool_call_input.done"]
            assert done["input"] == PATCH and done["item_id"] == item["id"]
            assert "response.function_call_arguments.delta" not in kinds
            [added] = [e["item"] for e in events if e["type"] == "response.output_item.added"]
            assert added["type"] == "custom_tool_call" and added["name"] == "apply_patch"
            [finished] = [e["item"] for e in events if e["type"] == "response.output_item.done"]
            assert finished == item
        # Codex re-sends the call as it got it, then its output
        history = [*OPENING, {"type": "custom_tool_call", "id": item["id"],
                              "status": "completed", "call_id": "call_p",
                              "name": "apply_patch", "input": PATCH},
                   {"type": "custom_tool_call_output", "call_id": "call_p",
                    "output": "Success. Updated the following files:\nA hello.txt\n"}]
        second, _ = turn(client, history, stream, GPT55_TOOLS)
        assert second["output"][0]["content"][0]["text"] == "Created hello.txt."
        third, _ = turn(client, [*history, {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Created hello.txt."}]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "thanks"}]}], stream, GPT55_TOOLS)
        assert third["output"][0]["content"][0]["text"] == "You are welcome."
    # the upstream: the custom tool as a function of one string, its grammar in its description
    tools = {t["function"]["name"]: t["function"] for t in up.llm.requests[0]["tools"]}
    assert list(tools) == ["exec_command", "apply_patch", "tool_search"]  # web_search: hosted
    assert tools["apply_patch"]["parameters"]["properties"] == {
        "input": {"type": "string", "description": "The tool's whole input, as raw text."}}
    assert tools["apply_patch"]["parameters"]["required"] == ["input"]
    assert GRAMMAR in tools["apply_patch"]["description"]
    assert "FREEFORM" in tools["apply_patch"]["description"]
    assert tools["tool_search"]["parameters"] == TOOL_SEARCH["parameters"]
    sent = [m for m in up.llm.requests[1]["messages"] if m["role"] != "system"]
    assert sent[-2]["tool_calls"][0]["id"] == "call_p"
    assert json.loads(sent[-2]["tool_calls"][0]["function"]["arguments"]) == {"input": PATCH}
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_p",
                        "content": "Success. Updated the following files:\nA hello.txt\n"}
    # the ledger: each message once, one session, the call as the model made it
    assert said(sqlite_store) == ["user", "user", "assistant", "tool", "assistant", "user",
                                  "assistant"]
    stored = [m for m in ledger(sqlite_store) if m.get("tool_calls")]
    assert len(stored) == 1
    assert json.loads(stored[0]["tool_calls"][0]["function"]["arguments"]) == {"input": PATCH}


ADDITIONAL: dict[str, Any] = {"type": "additional_tools", "id": "at_1", "role": "developer", "tools": [
    {"type": "namespace", "name": "functions", "description": "", "tools": [
        {"type": "custom", "name": "exec",
         "description": "Run JavaScript code to orchestrate/compose tool calls",
         "format": {"type": "grammar", "syntax": "lark",
                    "definition": "\nstart: plain_source\nplain_source: SOURCE\n"
                                  "SOURCE: /[\\s\\S]+/\n"}},
        {"type": "function", "name": "wait", "description": "Waits on a yielded exec cell.",
         "strict": False, "parameters": {"type": "object", "properties": {
             "cell_id": {"type": "string"}}, "required": ["cell_id"],
             "additionalProperties": False}}]},
    {"type": "namespace", "name": "clock", "description": "Tools for reading time.", "tools": [
        {"type": "function", "name": "sleep", "description": "Pause execution.",
         "strict": False, "parameters": {"type": "object", "properties": {
             "duration_ms": {"type": "number"}}, "required": ["duration_ms"]}}]}]}
SCRIPT_JS = 'const r = await tools.exec_command({cmd: "ls"});\ntext(r);'


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_default_model_additional_tools_are_the_requests_tools(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    """Codex's default model sends no ``tools``: they come in an ``additional_tools`` input
    item (namespaces holding the custom ``exec``). It was a 400 ("items of type
    'additional_tools' are not supported"); now its tools are the request's, the item no
    message."""
    script: list[ScriptedReply | str] = [ScriptedReply(content=None, tool_calls=[call("call_x", "exec",
                                                           {"input": SCRIPT_JS})]),
              ScriptedReply(content=None, tool_calls=[call("call_w", "wait",
                                                           {"cell_id": "1"})]),
              "Two files."]
    with serve(script) as up:
        client = sdk(start_proxy(up).base_url)
        items: list[Any] = [ADDITIONAL, *OPENING]
        first, _ = turn(client, items, stream)
        [item] = first["output"]
        assert (item["type"], item["name"], item["input"]) == ("custom_tool_call", "exec",
                                                               SCRIPT_JS)
        assert item["namespace"] == "functions"  # as a namespaced function's call says it
        items += [{"type": "custom_tool_call", "id": item["id"], "status": "completed",
                   "call_id": item["call_id"], "name": "exec", "input": SCRIPT_JS},
                  {"type": "custom_tool_call_output", "call_id": item["call_id"],
                   "output": [{"type": "input_text", "text": "Script running with cell ID 1"}]}]
        second, _ = turn(client, items, stream)
        [waiting] = second["output"]
        assert (waiting["type"], waiting["name"], waiting.get("namespace")) == (
            "function_call", "wait", "functions")
        items += [{"type": "function_call", "call_id": "call_w", "name": "wait",
                   "namespace": "functions", "arguments": waiting["arguments"]},
                  {"type": "function_call_output", "call_id": "call_w", "output": "a b"}]
        third, _ = turn(client, items, stream)
        assert third["output"][0]["content"][0]["text"] == "Two files."
    for request in up.llm.requests:
        assert [t["function"]["name"] for t in request["tools"]] == ["exec", "wait", "sleep"]
        assert "additional_tools" not in json.dumps(request["messages"])
    exec_fn = up.llm.requests[0]["tools"][0]["function"]
    assert exec_fn["parameters"]["required"] == ["input"]
    assert "SOURCE: /[\\s\\S]+/" in exec_fn["description"]
    sent = [m for m in up.llm.requests[2]["messages"] if m["role"] != "system"]
    assert [m["role"] for m in sent] == ["user", "user", "assistant", "tool", "assistant",
                                         "tool"]
    assert sent[3]["content"] == "Script running with cell ID 1"
    assert said(sqlite_store) == ["user", "user", "assistant", "tool", "assistant", "tool",
                                  "assistant"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_client_tool_search_is_a_function_and_the_tools_it_loads_are_callable(
        start_proxy: ProxyFactory, sqlite_store: Store, stream: bool) -> None:
    """Codex's ``tool_search`` (``execution: client``) is a search Codex runs over its deferred
    tools; refold dropped it as a hosted tool, so the model could never load them. It is the
    function ``tool_search``; its call goes back as a ``tool_search_call``, and the tools the
    ``tool_search_output`` loads are the request's tools from then on."""
    loaded = [{"type": "namespace", "name": "mcp__cal", "description": "Calendar",
               "tools": [{"type": "function", "name": "create_event", "defer_loading": True,
                          "parameters": {"type": "object", "properties": {
                              "title": {"type": "string"}}}}]}]
    script: list[ScriptedReply | str] = [ScriptedReply(content=None, tool_calls=[call("call_s", "tool_search",
                                                           {"query": "calendar", "limit": 3})]),
              ScriptedReply(content=None, tool_calls=[call("call_e", "create_event",
                                                           {"title": "standup"})]),
              "Booked."]
    with serve(script) as up:
        client = sdk(start_proxy(up).base_url)
        items: list[Any] = list(OPENING)
        first, _ = turn(client, items, stream, GPT55_TOOLS)
        [search] = first["output"]
        assert search["type"] == "tool_search_call" and search["execution"] == "client"
        assert search["call_id"] == "call_s"
        assert search["arguments"] == {"query": "calendar", "limit": 3}
        items += [{"type": "tool_search_call", "call_id": "call_s", "status": "completed",
                   "execution": "client", "arguments": search["arguments"]},
                  {"type": "tool_search_output", "call_id": "call_s", "status": "completed",
                   "execution": "client", "tools": loaded}]
        second, _ = turn(client, items, stream, GPT55_TOOLS)
        [event] = second["output"]
        assert (event["type"], event["name"], event.get("namespace")) == (
            "function_call", "create_event", "mcp__cal")
        items += [{"type": "function_call", "call_id": "call_e", "name": "create_event",
                   "namespace": "mcp__cal", "arguments": event["arguments"]},
                  {"type": "function_call_output", "call_id": "call_e", "output": "ok"}]
        third, _ = turn(client, items, stream, GPT55_TOOLS)
        assert third["output"][0]["content"][0]["text"] == "Booked."
    assert [t["function"]["name"] for t in up.llm.requests[1]["tools"]] == [
        "exec_command", "apply_patch", "tool_search", "create_event"]
    sent = [m for m in up.llm.requests[1]["messages"] if m["role"] != "system"]
    assert sent[-2]["tool_calls"][0]["function"]["name"] == "tool_search"
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_s",
                        "content": "tools loaded: mcp__cal.create_event"}
    assert said(sqlite_store) == ["user", "user", "assistant", "tool", "assistant", "tool",
                                  "assistant"]


def test_a_continuation_by_previous_response_id_keeps_the_custom_call(
        start_proxy: ProxyFactory, sqlite_store: Store) -> None:
    """Stored (``store`` true): the chain rebuilt from the stored items holds the custom call
    and its output, and the tools of the first request's ``additional_tools`` item."""
    script: list[ScriptedReply | str] = [ScriptedReply(content=None, tool_calls=[call("call_x", "exec",
                                                           {"input": SCRIPT_JS})]), "Done."]
    with serve(script) as up:
        client = sdk(start_proxy(up).base_url)
        first = client.responses.create(model=MODEL, input=[ADDITIONAL, *OPENING])  # type: ignore[list-item]
        assert first.output[0].type == "custom_tool_call"
        second = client.responses.create(model=MODEL, previous_response_id=first.id, input=[
            {"type": "custom_tool_call_output", "call_id": "call_x", "output": "a b"}])
        assert second.output_text == "Done."
    assert [t["function"]["name"] for t in up.llm.requests[1]["tools"]] == [
        "exec", "wait", "sleep"]
    assert said(sqlite_store) == ["user", "user", "assistant", "tool", "assistant"]


def test_streamed_input_deltas_decode_the_argument_string_at_any_cut() -> None:
    from refold.server.responses_tools import InputDeltas

    raw = json.dumps({"input": PATCH})
    for size in (1, 2, 3, 5, 7):
        deltas = InputDeltas()
        got = "".join(deltas.feed(raw[i:i + size]) for i in range(0, len(raw), size))
        assert got == PATCH, size
    assert InputDeltas().feed('{"cmd": "ls"}') == ""  # not the one-string form: at the end


def test_a_call_streamed_in_fragments_gives_input_deltas_then_the_whole_input() -> None:
    """A real upstream streams a call's arguments in pieces (cut anywhere, inside an escape
    too): the client gets the input's text as it grows, then all of it."""
    from refold.server.responses_tools import tool_kinds
    from refold.server.responses_wire import ResponseEvents, Shell

    raw = json.dumps({"input": PATCH})
    pieces = [raw[i:i + 4] for i in range(0, len(raw), 4)]
    events = ResponseEvents(Shell("resp_1", MODEL, {}, kinds=tool_kinds(GPT55_TOOLS)))
    out = events.chunk({"choices": [{"index": 0, "delta": {"tool_calls": [{
        "index": 0, "id": "call_p", "type": "function",
        "function": {"name": "apply_patch", "arguments": ""}}]}}]})
    for piece in pieces:
        out += events.chunk({"choices": [{"index": 0, "delta": {"tool_calls": [{
            "index": 0, "function": {"arguments": piece}}]}}]})
    out += events.close_items()
    final = events.completed()
    out += events.done()
    parsed = [json.loads(line[6:]) for line in out.decode().splitlines()
              if line.startswith("data: ")]
    deltas = [e["delta"] for e in parsed if e["type"] == "response.custom_tool_call_input.delta"]
    assert len(deltas) > 10 and "".join(deltas) == PATCH
    [done] = [e for e in parsed if e["type"] == "response.custom_tool_call_input.done"]
    assert done["input"] == PATCH
    assert final["output"] == [{"type": "custom_tool_call", "id": done["item_id"],
                                "call_id": "call_p", "name": "apply_patch", "input": PATCH,
                                "status": "completed"}]
    assert [e["type"] for e in parsed][-3:] == [
        "response.custom_tool_call_input.done", "response.output_item.done",
        "response.completed"]
