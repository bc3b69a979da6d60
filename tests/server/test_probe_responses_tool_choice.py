"""``/v1/responses``: a ``tool_choice`` is passed on in its chat form or refused, never dropped
(the official openai SDK over a socket, against a scripted chat-completions upstream).

An ``allowed_tools`` choice (restrict the model to some of its tools) went upstream as nothing:
the model got every tool, ``delete_everything`` among them, with no restriction, while the
response echoed the restriction as honoured. It is now chat completions' ``allowed_tools``;
a choice refold cannot pass on (a hosted tool, an unknown type, a tool not in the request) is a
400 and nothing reaches the upstream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from refold.testing import serve

ProxyFactory = Callable[..., Any]
MODEL = "scripted-model"
EMPTY = {"type": "object", "properties": {}}
TOOLS: Any = [{"type": "function", "name": name, "parameters": EMPTY}
              for name in ("read_file", "delete_everything")]
PATCH: Any = {"type": "custom", "name": "apply_patch", "description": "Apply a patch."}


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=30)


def _allowed(mode: str, *names: str) -> dict[str, Any]:
    return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": [
        {"type": "function", "function": {"name": name}} for name in names]}}


@pytest.mark.parametrize(("choice", "tools", "sent"), [
    ({"type": "allowed_tools", "mode": "required",
      "tools": [{"type": "function", "name": "read_file"}]}, TOOLS,
     _allowed("required", "read_file")),
    ({"type": "allowed_tools", "mode": "auto",
      "tools": [{"type": "function", "name": "read_file"}, {"type": "custom",
                                                           "name": "apply_patch"},
                {"type": "web_search_preview"}]}, [*TOOLS, PATCH, {"type": "web_search"}],
     _allowed("auto", "read_file", "apply_patch")),
    ({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "image_generation"}]},
     [*TOOLS, {"type": "image_generation"}], "none"),
    ({"type": "function", "name": "read_file"}, TOOLS,
     {"type": "function", "function": {"name": "read_file"}}),
    ({"type": "custom", "name": "apply_patch"}, [*TOOLS, PATCH],
     {"type": "function", "function": {"name": "apply_patch"}}),
    ("required", TOOLS, "required"),
], ids=["allowed-required", "allowed-auto-mixed", "allowed-only-hosted", "function", "custom",
        "required"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_tool_choice_goes_upstream_in_its_chat_form(
        start_one_proxy: ProxyFactory, choice: Any, tools: Any, sent: Any,
        stream: bool) -> None:
    with serve(["ok"]) as up:
        proxy = start_one_proxy(up)
        client = sdk(proxy.base_url)
        if stream:
            with client.responses.stream(model=MODEL, input="clean up", tools=tools,
                                         tool_choice=choice) as events:
                for _ in events:
                    pass
                reply = events.get_final_response()
        else:
            reply = client.responses.create(model=MODEL, input="clean up", tools=tools,
                                            tool_choice=choice)
        assert reply.status == "completed"
        echoed = reply.tool_choice
        assert (echoed if isinstance(echoed, str) else echoed.model_dump(exclude_none=True)) \
            == choice  # echoed as given, now that it was honoured
    body = up.llm.requests[0]
    assert body["tool_choice"] == sent
    assert {t["function"]["name"] for t in body["tools"]} >= {"read_file", "delete_everything"}


@pytest.mark.parametrize(("choice", "tools", "said"), [
    ({"type": "allowed_tools", "mode": "required",
      "tools": [{"type": "function", "name": "drop_tables"}]}, TOOLS,
     "'drop_tables', which is not among the request's"),
    ({"type": "allowed_tools", "mode": "any",
      "tools": [{"type": "function", "name": "read_file"}]}, TOOLS, "'mode' must be"),
    ({"type": "allowed_tools", "mode": "auto", "tools": []}, TOOLS, "non-empty list"),
    ({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function"}]}, TOOLS,
     "needs a 'name'"),
    ({"type": "allowed_tools", "mode": "required", "tools": [{"type": "web_search_preview"}]},
     [*TOOLS, {"type": "web_search_preview"}], "runs itself"),
    ({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "shell"}]}, TOOLS,
     "not 'shell'"),
    ({"type": "function", "name": "drop_tables"}, TOOLS, "not among the request's"),
    ({"type": "file_search"}, TOOLS, "runs itself"),
    ({"type": "mcp", "server_label": "deepwiki"}, TOOLS, "runs itself"),
    ({"type": "apply_patch"}, TOOLS, "runs itself"),
    ({"type": "tool", "name": "read_file"}, TOOLS, "tool_choice must be"),
    ("any", TOOLS, "tool_choice must be"),
], ids=["allowed-unknown-name", "allowed-mode", "allowed-empty", "allowed-no-name",
        "allowed-only-hosted-required", "allowed-unknown-type", "function-unknown-name",
        "hosted", "mcp", "apply-patch", "unknown-type", "unknown-string"])
def test_a_tool_choice_refold_cannot_pass_on_is_a_400(
        start_one_proxy: ProxyFactory, choice: Any, tools: Any, said: str) -> None:
    with serve(["never sent"]) as up:
        proxy = start_one_proxy(up)
        client = sdk(proxy.base_url)
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as bad:
                client.responses.create(model=MODEL, input="clean up", tools=tools,
                                        tool_choice=choice, stream=stream)
            assert "tool_choice" in bad.value.message and said in bad.value.message
            assert bad.value.code == "invalid_input"
        assert up.llm.requests == []
