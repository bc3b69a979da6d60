"""The llm summarizer and its failure ladder, against the scripted server over a real socket."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from agent_transcript import agent_transcript

from refold.compaction.core import compact
from refold.compaction.llm_summarizer import LLMSummarizer
from refold.compaction.policy import CompactionPolicy
from refold.compaction.structure import provider_problems
from refold.compaction.summary import END_MARKER
from refold.llm import HttpChatClient
from refold.testing import RunningLLM, ScriptedReply, serve
from refold.tokens import get_counter

BODY = ("<think>let me think about it</think>## Goal\n- Fix the login bug\n\n"
        "## Next Steps\n- add logging")
POLICY = CompactionPolicy(output_reserve_tokens=0)
COUNTER = get_counter("gpt-4o")


@pytest.fixture(scope="module")
def server() -> Iterator[RunningLLM]:
    with serve() as s:
        yield s


@pytest.fixture
def client(server: RunningLLM) -> Iterator[HttpChatClient]:
    server.llm.replies.clear()
    server.llm.requests.clear()
    with HttpChatClient(server.base_url) as c:
        yield c


def _compact(summarizer: LLMSummarizer, msgs: list[dict[str, Any]] | None = None,
             **kw: Any) -> Any:
    return compact(msgs or agent_transcript(), context_length=16_000, policy=POLICY,
                   counter=COUNTER, summarizer=summarizer, model="gpt-4o", **kw)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_llm_summary_is_framed_and_think_stripped(server: RunningLLM,
                                                  client: HttpChatClient) -> None:
    server.llm.push(BODY)
    result = _compact(LLMSummarizer(client, "aux-model"))
    report = result.report
    assert report.status == "ok" and report.summarizer == "llm:aux-model"
    assert report.summary and "Fix the login bug" in report.summary
    assert "<think>" not in report.summary and report.summary.endswith(END_MARKER)
    assert report.anchors and all(a in report.summary for a in report.anchors)
    sent = server.llm.requests[0]
    assert sent["model"] == "aux-model" and "<turns>" in sent["messages"][-1]["content"]
    assert "max_tokens" not in sent
    assert provider_problems(result.messages, "openai") == []


def test_cache_friendly_mode_replays_the_prefix(server: RunningLLM,
                                                client: HttpChatClient) -> None:
    server.llm.push(BODY)
    msgs = agent_transcript()
    tools = [{"type": "function", "function": {"name": "terminal", "parameters": {}}}]
    _compact(LLMSummarizer(client, "aux", cache_friendly=True), msgs, tools=tools)
    sent = server.llm.requests[0]["messages"]
    assert sent[:3] == msgs[:3]  # a true prefix of what the main model saw
    assert sent[-1]["role"] == "user" and "Summarize the conversation above" in sent[-1]["content"]
    assert server.llm.requests[0]["tools"] == tools


def test_cache_friendly_replay_leaves_out_kept_responses_items(server: RunningLLM,
                                                              client: HttpChatClient) -> None:
    """A message stored with Responses items kept beside it (openai-agents' hosted tool
    calls, key ``refold_responses``) replays without that key: no chat API knows it."""
    server.llm.push(BODY)
    msgs = agent_transcript()
    msgs[2] = {**msgs[2], "refold_responses": [{"type": "web_search_call", "id": "ws_1"}]}
    _compact(LLMSummarizer(client, "aux", cache_friendly=True), msgs)
    sent = server.llm.requests[0]["messages"]
    assert not any("refold_responses" in m for m in sent)
    assert sent[2] == {k: v for k, v in msgs[2].items() if k != "refold_responses"}


def test_recompaction_sends_the_previous_summary_for_update(server: RunningLLM,
                                                            client: HttpChatClient) -> None:
    server.llm.push(BODY, "## Goal\n- Fix the login bug, then logging\n## Progress\n### Done\n"
                          "- the login bug is fixed")
    first = _compact(LLMSummarizer(client, "aux"))
    grown = first.messages + agent_transcript(20)[2:]
    second = _compact(LLMSummarizer(client, "aux"), grown)
    assert second.report.status == "ok"
    prompt = server.llm.requests[1]["messages"][-1]["content"]
    assert "<previous-summary>" in prompt and "Fix the login bug" in prompt
    assert sum(END_MARKER in str(m.get("content")) for m in second.messages) == 1


def test_aux_failure_falls_to_main_model_once(server: RunningLLM,
                                              client: HttpChatClient) -> None:
    server.llm.push(ScriptedReply(status=404, error={"error": {"message": "no such model"}}),
                    BODY)
    result = _compact(LLMSummarizer(client, "aux", main_model="main"))
    assert result.report.status == "ok" and result.report.summarizer == "llm:main"
    assert [r["model"] for r in server.llm.requests] == ["aux", "main"]
    assert any("aux failed" in w for w in result.report.warnings)


@pytest.mark.parametrize(("replies", "kind"), [
    ([ScriptedReply(status=500), ScriptedReply(status=502)], "server"),
    ([ScriptedReply(status=429), ScriptedReply(status=429)], "rate_limit"),
    ([ScriptedReply(raw_body=b"not json"), ScriptedReply(raw_body=b"{}")], "bad_response"),
    ([ScriptedReply(content=""), ScriptedReply(content="<think>only thoughts</think>")],
     "bad_response"),
])
def test_retryable_failures_fall_back_to_builtin(server: RunningLLM, client: HttpChatClient,
                                                 replies: list[ScriptedReply], kind: str) -> None:
    server.llm.push(*replies)
    msgs = agent_transcript()
    result = _compact(LLMSummarizer(client, "aux", main_model="main"), msgs)
    report = result.report
    assert report.status == "fallback" and report.summarizer == "builtin"
    assert report.error_kind == kind and report.fits
    assert len(server.llm.requests) == 2  # aux, then main once — no more
    assert "## Goal" in (report.summary or "")
    assert provider_problems(result.messages, "openai") == []


def test_timeout_falls_back(server: RunningLLM, client: HttpChatClient) -> None:
    server.llm.push(ScriptedReply(delay=1.0), ScriptedReply(delay=1.0))
    summarizer = LLMSummarizer(client, "aux", main_model="main", timeout=0.2)
    result = _compact(summarizer)
    assert result.report.status == "fallback" and result.report.error_kind == "timeout"


@pytest.mark.parametrize(("reply", "kind"), [
    (ScriptedReply(status=401), "auth"),
    (ScriptedReply(status=403), "auth"),
    (ScriptedReply(status=402), "quota"),
    (ScriptedReply(status=429, error={"error": {"code": "insufficient_quota",
                                                "message": "quota"}}), "quota"),
    (ScriptedReply(content="## Goal\n- half a summ", finish_reason="length"), "truncated"),
])
def test_hard_failures_abort_and_keep_the_transcript(server: RunningLLM, client: HttpChatClient,
                                                     reply: ScriptedReply, kind: str) -> None:
    server.llm.push(reply, reply)
    msgs = agent_transcript()
    result = _compact(LLMSummarizer(client, "aux", main_model="main"), msgs)
    assert result.report.status == "aborted" and result.report.error_kind == kind
    assert result.messages == msgs
    assert result.report.reason.startswith("summarizer failed")


def test_lost_network_aborts() -> None:
    with HttpChatClient(f"http://127.0.0.1:{_free_port()}/v1") as dead:
        msgs = agent_transcript()
        result = _compact(LLMSummarizer(dead, "aux"), msgs)
    assert result.report.status == "aborted" and result.report.error_kind == "network"
    assert result.messages == msgs


def test_chinese_conversation_gets_chinese_headings(server: RunningLLM,
                                                    client: HttpChatClient) -> None:
    server.llm.push("## 目标\n- 修复登录错误")
    result = _compact(LLMSummarizer(client, "aux"), agent_transcript(chinese=True))
    prompt = server.llm.requests[0]["messages"][-1]["content"]
    assert "Simplified Chinese" in prompt and "## 目标" in prompt
    assert result.report.language == "zh" and "摘要结束" in (result.report.summary or "")


def test_overflow_from_a_real_server_is_recovered_by_compaction() -> None:
    from refold.compaction import complete_with_overflow_recovery
    from refold.errors import CompactionError

    msgs = agent_transcript(40)
    with serve(max_context_tokens=6_000) as s, HttpChatClient(s.base_url) as c:
        result, sent = complete_with_overflow_recovery(
            lambda m: c.complete(m, model="m"), msgs, context_length=8_000, policy=POLICY,
            counter=COUNTER)
        assert result.message["content"] == "ok"
        assert len(sent) < len(msgs) and provider_problems(sent, "openai") == []
        assert len(s.llm.requests) >= 2  # the first attempt overflowed
    with serve(max_context_tokens=10) as s, HttpChatClient(s.base_url) as c, \
            pytest.raises(CompactionError, match=r"still too long|cannot be made smaller"):
        # a clear error either way, never a loop: the builtin summary of an already compacted
        # transcript is a fixed point, so the last attempt may find nothing left to shrink
        complete_with_overflow_recovery(lambda m: c.complete(m, model="m"), msgs,
                                        context_length=8_000, policy=POLICY, counter=COUNTER)


def test_standard_prompt_carries_original_outputs_when_they_fit(
        server: RunningLLM, client: HttpChatClient) -> None:
    server.llm.push(BODY, BODY)
    _compact(LLMSummarizer(client, "aux"))
    prompt = server.llm.requests[0]["messages"][-1]["content"]
    assert "KeyError: 'user3'" in prompt and "log line" in prompt  # not just one-liners
    _compact(LLMSummarizer(client, "aux", max_input_chars=3_000))
    small = server.llm.requests[1]["messages"][-1]["content"]
    assert len(small) < 3_000 + 2_500 and "chars of the middle omitted" in small


def test_provider_notes_reach_the_instruction(server: RunningLLM,
                                              client: HttpChatClient) -> None:
    server.llm.push(BODY, BODY)
    _compact(LLMSummarizer(client, "aux-model"),
             provider_notes=["user's staging db is db-staging-7"])
    prompt = server.llm.requests[0]["messages"][-1]["content"]
    assert "<provider-notes>\n- user's staging db is db-staging-7\n</provider-notes>" in prompt
    assert "carry each one that still applies into '## Critical Context'" in prompt
    _compact(LLMSummarizer(client, "aux-model"))
    assert "<provider-notes>" not in server.llm.requests[1]["messages"][-1]["content"]


def test_the_summary_model_sees_the_request_the_turns_work_on(server: RunningLLM,
                                                               client: HttpChatClient) -> None:
    """An agent working alone on one request: the request is kept in the head, before the
    summarized turns, and the summary model was asked for the Goal without ever seeing it."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Port the billing module to the new invoice API."}]
    for k in range(40):
        msgs += [{"role": "assistant", "content": f"Step {k}.", "tool_calls": [
            {"id": f"c{k}", "type": "function",
             "function": {"name": "bash", "arguments": f'{{"command": "make step{k}"}}'}}]},
                 {"role": "tool", "tool_call_id": f"c{k}", "content": "ok\n" * 200}]
    server.llm.push(BODY)
    result = _compact(LLMSummarizer(client, "aux"), msgs)
    assert result.report.status == "ok" and result.report.head_end >= 2
    prompt = server.llm.requests[0]["messages"][-1]["content"]
    assert "<user-request>\nPort the billing module to the new invoice API.\n</user-request>" \
        in prompt
    chat = msgs[:2]  # the user speaking within the span: the turns show it, nothing added
    for k in range(40):
        chat += msgs[2 + 2 * k:4 + 2 * k]
        if k % 5 == 4:
            chat.append({"role": "user", "content": f"Good, go on with part {k // 5 + 2}."})
    server.llm.push(BODY)
    _compact(LLMSummarizer(client, "aux"), chat)
    assert "<user-request>" not in server.llm.requests[1]["messages"][-1]["content"]


def test_a_rejected_reply_asks_the_main_model_and_every_failure_is_said(
        server: RunningLLM, client: HttpChatClient) -> None:
    """The summary endpoint failing (a 500) and the main model then answering chat text: the
    warning named only the second ("it ignored the template"), hiding the endpoint's failure;
    and a first reply of plain "OK" was rejected without the main model being asked."""
    server.llm.push(ScriptedReply(status=500), "Sure, here is what happened.")
    result = _compact(LLMSummarizer(client, "aux", main_model="main"))
    report = result.report
    assert report.status == "fallback" and report.summarizer == "builtin"
    said = " ".join([report.reason or "", *report.warnings])
    assert "aux failed (server)" in said and "from main was rejected" in said, said
    server.llm.replies.clear()
    server.llm.requests.clear()
    server.llm.push("OK", BODY)
    result = _compact(LLMSummarizer(client, "aux", main_model="main"))
    assert result.report.status == "ok" and result.report.summarizer == "llm:main"
    assert [r["model"] for r in server.llm.requests] == ["aux", "main"]


def test_the_span_sent_fits_the_summary_models_window(server: RunningLLM,
                                                       client: HttpChatClient) -> None:
    """A large first request with an 8K summary model: ~35K tokens were sent, refused as an
    overflow by the summary endpoint and again by the main one, so the LLM summary could never
    work for it. The span is now bounded by the window (its middle elided)."""
    from refold.compaction.summarizer import SummaryRequest

    turns = [{"role": "user", "content": "Port the billing module to the new API."}]
    for i in range(120):
        turns += [{"role": "assistant", "content": f"Reading part {i}."},
                  {"role": "user", "content": f"part {i}: " + "données 計算 value " * 120}]
    request = SummaryRequest(turns=turns, pruned_turns=turns, prefix=turns, budget_tokens=1_500,
                             counter=COUNTER, previous_summary=None, language="en")
    sent = LLMSummarizer(client, "aux", context_length=8_192).build_messages(request)
    used = sum(COUNTER.count_text(str(m["content"])) for m in sent)
    assert used <= 8_192 - 1_500, used
    unbounded = LLMSummarizer(client, "aux").build_messages(request)
    assert sum(COUNTER.count_text(str(m["content"])) for m in unbounded) > 8_192


def test_only_what_is_kept_of_a_reply_far_over_budget_is_scanned(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A reply ten times too long (190 KB) was scanned whole for injections, seconds of the
    turn; only the part cut to the budget reaches the model, and only it is scanned now."""
    from refold.compaction import llm_summarizer
    from refold.compaction.summarizer import SummaryRequest

    scanned: list[int] = []
    real = llm_summarizer.check_output

    def counting(body: str, language: str) -> str | None:
        scanned.append(len(body))
        return real(body, language)

    monkeypatch.setattr(llm_summarizer, "check_output", counting)
    body = BODY.split("<think>let me think about it</think>")[1] + "\n" + \
        "\n".join(f"- step {i} of the investigation went fine" for i in range(6_000))
    request = SummaryRequest(turns=[], pruned_turns=[], prefix=[], budget_tokens=500,
                             counter=COUNTER, previous_summary=None, language="en")
    assert llm_summarizer.check_fitted(body, request) is None
    assert len(body) > 200_000 and scanned and max(scanned) < 10_000, scanned
