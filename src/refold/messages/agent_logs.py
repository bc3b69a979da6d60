"""The transcripts other coding agents keep on disk, read as the turns their model saw.

**Claude Code** (``~/.claude/projects/<project>/<session>.jsonl``): one record per line. Records
of type ``user`` and ``assistant`` carry an Anthropic Messages API message in ``message``; the
rest (``summary``, ``progress``, ``system`` notices, ``file-history-snapshot``,
``queue-operation``…) is the tool's own bookkeeping and is left out. Claude Code writes one API
reply as several records, one per content block under the same ``message.id``, and writes the
result of each tool call in a user record as soon as the call ran, between those blocks. The
records are joined back into the turns the API saw: the reply with all its blocks, then one user
turn with all its results. Records of a subagent (``isSidechain``) inside a main transcript are
another conversation and are left out; a file that holds only them (``subagents/agent-*.jsonl``)
is read as that conversation. A record written twice (the same ``uuid``) is read once. When the
user went back and edited or rewound a turn, the file holds both branches: the records are
linked by ``parentUuid``, and the conversation as it ended (the chain back from its last record,
with the results of the calls made on it) is what is read; the abandoned branch is left out and
counted as ``other branch``.

**Codex** (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``): lines ``{"timestamp", "type",
"payload"}``. The payloads of ``response_item`` lines are Responses API items and become chat
messages as ``/v1/responses`` input does (``message``, ``function_call``,
``function_call_output``, ``reasoning``); Codex's own tools are calls too: ``custom_tool_call``
(its input kept as ``{"input": …}``) and ``local_shell_call`` (its action as the arguments),
with their outputs. ``session_meta``, ``turn_context``, ``event_msg`` and ``compacted`` lines,
and items with no chat form (web searches, ghost snapshots, encrypted compactions), are left
out. Older rollouts hold the items themselves, one per line, after a line of session metadata.

**Gemini CLI** (``~/.gemini/tmp/<project hash>/chats/session-*.json``): one JSON document,
``{"sessionId", "projectHash", "startTime", "messages": [...]}``, or the same as JSONL (the
header line, then one message per line). A ``user`` message is a request; a ``gemini`` message
is a reply, its ``toolCalls`` (``id``, ``name``, ``args``, and the ``result`` parts the tool
answered with) become tool calls followed by their results, its ``tokens`` the call's usage;
a call marked ``"status": "error"`` keeps the mark as an ``is_error`` ``tool_result`` beside its
result (``messages.anthropic.KEPT``: summaries count it a failure, an Anthropic upstream is told).
``info``, ``warning`` and ``error`` messages are the CLI's notices and are left out, and so are
a reply's ``thoughts`` (summaries of its reasoning, never sent back to the model).

The readers return what they left out, by kind, so the caller can say so: nothing is dropped
without a word.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from refold.errors import InvalidInput
from refold.messages.anthropic import KEPT
from refold.messages.model import Message
from refold.pricing import token_count

AGENT_FORMATS = ("claude-code", "codex", "gemini")
AGENT_NAMES = {"claude-code": "Claude Code", "codex": "Codex", "gemini": "Gemini CLI"}

_CODEX_ITEMS = frozenset({"message", "function_call", "function_call_output", "reasoning",
                          "custom_tool_call", "custom_tool_call_output", "local_shell_call",
                          "web_search_call", "ghost_snapshot", "compaction",
                          "compaction_summary"})
_CODEX_LINES = frozenset({"session_meta", "response_item", "turn_context", "event_msg",
                          "compacted"})
_CLAUDE_CODE_MARKS = ("uuid", "sessionId", "parentUuid", "leafUuid")
_CLAUDE_CODE_BOOKKEEPING = frozenset({"file-history-snapshot", "summary", "progress",
                                      "queue-operation"})


def prompt_history(record: Any) -> str | None:
    """The agent whose prompt history a record is a line of (Claude Code's
    ``~/.claude/history.jsonl``: ``display``, ``pastedContents``; Codex's
    ``~/.codex/history.jsonl``: ``session_id``, ``ts``, ``text``): what the user typed, with no
    replies — not a conversation to import. None for anything else."""
    if not isinstance(record, dict) or "role" in record or "type" in record:
        return None
    if "display" in record and "pastedContents" in record:
        return "Claude Code"
    if {"session_id", "ts", "text"} <= record.keys():
        return "Codex"
    return None


def detect(record: Any) -> str | None:
    """``claude-code``, ``codex`` or ``gemini`` when a record (a JSONL line, or a Gemini
    session document) is one of theirs (an OpenAI or Anthropic message never looks like any of
    them: it has a top-level ``role``), else None."""
    if not isinstance(record, dict) or "role" in record or prompt_history(record):
        return None
    kind = _kind(record)
    if kind in _CODEX_LINES and ("payload" in record or kind == "session_meta"):
        return "codex"
    if kind == "gemini" or "projectHash" in record or (
            "sessionId" in record and isinstance(record.get("messages"), list)) or (
            kind in ("user", "info", "warning", "error") and "sessionId" in record
            and "message" not in record and "uuid" not in record):
        # before Claude Code's marks: Gemini's records carry a sessionId too (Claude Code's
        # carry theirs with a uuid and the API message under "message")
        return "gemini"
    if any(mark in record for mark in _CLAUDE_CODE_MARKS) or kind in _CLAUDE_CODE_BOOKKEEPING:
        return "claude-code"
    return None


def _kind(record: dict[str, Any]) -> str | None:
    """A record's ``type`` when it is a string (anything else is no known kind)."""
    kind = record.get("type")
    return kind if isinstance(kind, str) else None


def _active_branch(records: Sequence[Any], chat: list[dict[str, Any]]) -> set[int] | None:
    """The chat records (by ``id()``) of the conversation as it ended: the chain of
    ``parentUuid`` links from the last chat record back to the first (across the compaction
    boundary's ``logicalParentUuid``), with every block of the replies on it (parallel calls
    are sibling records) and the results of their calls. None when the chain does not lead
    back to the first chat record (no links, or links broken): then every record counts, in
    file order."""
    parent: dict[str, Any] = {}
    for record in records:
        if isinstance(record, dict) and isinstance(record.get("uuid"), str):
            link = record.get("parentUuid") or record.get("logicalParentUuid")
            parent[record["uuid"]] = link if isinstance(link, str) else None
    if not chat or not all(isinstance(r.get("uuid"), str) for r in (chat[0], chat[-1])):
        return None
    path: set[str] = set()
    node: str | None = chat[-1]["uuid"]
    while node is not None and node not in path:
        path.add(node)
        node = parent.get(node)
    if chat[0]["uuid"] not in path:
        return None

    def reply_id(record: dict[str, Any]) -> str | None:
        found = record["message"].get("id") if record.get("type") == "assistant" else None
        return found if isinstance(found, str) else None

    replies = {reply_id(r) for r in chat if r.get("uuid") in path} - {None}
    keep = {id(r) for r in chat if r.get("uuid") in path or reply_id(r) in replies}
    calls = {str(b.get("id")) for r in chat if id(r) in keep and r.get("type") == "assistant"
             for b in (r["message"].get("content") or [])
             if isinstance(b, dict) and b.get("type") == "tool_use"}
    for record in chat:
        content = record["message"].get("content")
        if id(record) not in keep and isinstance(content, list) and content and all(
                isinstance(b, dict) and b.get("type") == "tool_result"
                and str(b.get("tool_use_id")) in calls for b in content):
            keep.add(id(record))
    return keep


def claude_code_turns(records: Sequence[Any]) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Anthropic turns (``{"role", "content"}``) of a Claude Code transcript, and the kinds of
    records left out with their counts (see the module docstring)."""
    skipped: Counter[str] = Counter()
    messages = [r for r in records if isinstance(r, dict) and r.get("type") in ("user",
                "assistant") and isinstance(r.get("message"), dict)]
    chat = {id(r) for r in messages}
    main_line = any(not r.get("isSidechain") for r in messages)
    branch = _active_branch(records, [r for r in messages
                                      if not (main_line and r.get("isSidechain"))])
    turns: list[dict[str, Any]] = []
    reply: dict[str, Any] | None = None  # the assistant turn being joined
    reply_id: Any = None
    results: list[Any] = []  # tool results written while the reply's calls ran
    results_at: list[float | None] = [None]  # when the first of them was written
    seen: set[str] = set()
    spent: dict[Any, Spend] = {}  # reply id -> its usage (the last record's: it grows)
    unplaced: list[tuple[Any, dict[str, Any]]] = []  # (reply id, the reply before it)

    def close_reply() -> None:
        nonlocal reply, reply_id
        if reply is not None:
            turns.append(reply)
        if results:  # in the order of the calls (Claude Code writes them as they finish)
            order = {str(b.get("id")): n for n, b in enumerate(reply["content"] if reply else [])
                     if isinstance(b, dict) and b.get("type") == "tool_use"}
            results.sort(key=lambda b: order.get(str(b.get("tool_use_id")), len(order)))
            turns.append({"role": "user", "content": list(results), "at": results_at[0]})
            results.clear()
        reply, reply_id = None, None

    for record in records:
        kind = _kind(record) if isinstance(record, dict) else None
        if id(record) not in chat:
            skipped[str(kind or "unknown")] += 1
            continue
        if main_line and record.get("isSidechain"):
            skipped["subagent"] += 1
            continue
        if branch is not None and id(record) not in branch:
            skipped["other branch"] += 1  # a turn the user went back on (edit, rewind)
            continue
        uuid = record.get("uuid")
        if isinstance(uuid, str):
            if uuid in seen:
                skipped["repeated"] += 1
                continue
            seen.add(uuid)
        message = record["message"]
        if kind == "assistant" and isinstance(message.get("usage"), dict):
            model = message.get("model")
            spent[message.get("id") or id(record)] = (
                message["usage"], model if isinstance(model, str) else None)
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}] \
            if isinstance(content, str) else []
        # an interrupted turn leaves empty text blocks, which providers refuse
        blocks = [b for b in blocks if not (isinstance(b, dict) and b.get("type") == "text"
                                            and not str(b.get("text") or "").strip())]
        if not blocks:
            skipped["empty"] += 1
            before = reply if reply is not None else next(
                (t for t in reversed(turns) if t["role"] == "assistant"), None)
            if kind == "assistant" and message.get("id") != reply_id and before is not None:
                unplaced.append((message.get("id") or id(record), before))
            continue
        if kind == "assistant":
            message_id = message.get("id")
            if reply is not None and message_id is not None and message_id == reply_id:
                reply["content"].extend(blocks)
                continue
            close_reply()
            reply, reply_id = {"role": "assistant", "content": list(blocks),
                               "at": record_time(record), "spent": [],
                               "reply_id": message_id if message_id is not None
                               else id(record)}, message_id
            continue
        if reply is not None and blocks and all(
                isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks):
            if not results:
                results_at[0] = record_time(record)
            results.extend(blocks)
            continue
        close_reply()
        turns.append({"role": "user", "content": content if isinstance(content, str)
                      else list(blocks), "at": record_time(record)})
    close_reply()
    _place_spend(turns, spent, unplaced)
    return turns, skipped


Spend = tuple[dict[str, Any], str | None]  # one model call's usage (as the API gave it), model


def _place_spend(turns: list[dict[str, Any]], spent: dict[Any, Spend],
                 unplaced: list[tuple[Any, dict[str, Any]]]) -> None:
    """Each reply turn's ``spent``: its call's usage; a call whose reply had nothing left to
    read (an interrupted turn) is charged to the reply before it."""
    for turn in turns:
        if turn["role"] == "assistant" and turn.get("reply_id") in spent:
            turn["spent"].append(spent.pop(turn["reply_id"]))
    for key, before in unplaced:
        if key in spent:
            before["spent"].append(spent.pop(key))


def gemini_messages(records: Sequence[Any]) -> tuple[
        list[Message], list[float | None], Counter[str], list[list[Spend]]]:
    """Chat messages of a Gemini CLI session's records (its header, then its messages), when
    each was said, what was left out, and each reply's usage (see the module docstring)."""
    skipped: Counter[str] = Counter()
    messages: list[Message] = []
    times: list[float | None] = []
    spend: list[list[Spend]] = []

    def add(message: Message, at: float | None, spent: list[Spend] | None = None) -> None:
        messages.append(message)
        times.append(at)
        spend.append(spent or [])

    for record in records:
        if not isinstance(record, dict):
            skipped["unknown"] += 1
            continue
        kind = _kind(record)
        at = record_time(record)
        if kind is None and ("projectHash" in record or "startTime" in record):
            continue  # the session's header: its id and start, no turn
        if kind == "user":
            text = _gemini_text(record.get("content"))
            if text.strip():
                add({"role": "user", "content": text}, at)
            else:
                skipped["empty"] += 1
            continue
        if kind != "gemini":
            skipped[str(kind or "unknown")] += 1  # info, warning, error: the CLI's notices
            continue
        thoughts = record.get("thoughts")
        if isinstance(thoughts, list) and thoughts:
            skipped["thoughts"] += len(thoughts)
        calls = [c for c in record.get("toolCalls") or [] if isinstance(c, dict)] \
            if isinstance(record.get("toolCalls"), list) else []
        text = _gemini_text(record.get("content"))
        if not text.strip() and not calls:
            skipped["empty"] += 1
            continue
        reply: Message = {"role": "assistant", "content": text or None}
        ids = []
        if calls:
            tool_calls = []
            for n, call in enumerate(calls):
                call_id = call.get("id") if isinstance(call.get("id"), str) and call.get(
                    "id") else f"{record.get('id') or 'gemini'}-{n}"
                ids.append(call_id)
                args = call.get("args")
                tool_calls.append({"id": call_id, "type": "function", "function": {
                    "name": str(call.get("name") or "tool"),
                    "arguments": json.dumps(args if isinstance(args, dict) else {},
                                            ensure_ascii=False)}})
            reply["tool_calls"] = tool_calls
        tokens = record.get("tokens")
        model = record.get("model")
        add(reply, at, [(_gemini_usage(tokens), model if isinstance(model, str) else None)]
            if isinstance(tokens, dict) else None)
        for call_id, call in zip(ids, calls, strict=True):
            output = _gemini_result(call.get("result"))
            if output is None:
                continue  # no answer recorded: refold marks the call when it sends it
            result: Message = {"role": "tool", "tool_call_id": call_id, "content": output}
            if call.get("status") == "error":  # marked failed, whatever its output says
                result[KEPT] = [{"type": "tool_result", "tool_use_id": call_id,
                                 "is_error": True}]
            add(result, record_time(call) or at)
    return messages, times, skipped, spend


def _gemini_text(content: Any) -> str:
    """A Gemini message's text: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if isinstance(content, list):
        return "\n".join(str(p["text"]) for p in content
                         if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _gemini_result(result: Any) -> str | None:
    """What a tool answered (the ``response`` of its ``functionResponse`` parts: its output,
    else its error, else the response as JSON), or None when nothing was recorded."""
    parts = result if isinstance(result, list) else [result] if isinstance(result, dict) \
        else []
    out = []
    for part in parts:
        response = part.get("functionResponse") if isinstance(part, dict) else None
        body = response.get("response") if isinstance(response, dict) else None
        if isinstance(body, dict):
            found = body.get("output", body.get("error"))
            out.append(found if isinstance(found, str) else json.dumps(
                body if found is None else found, ensure_ascii=False))
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            out.append(part["text"])
    return "\n".join(out) if out else None


def _gemini_usage(tokens: dict[str, Any]) -> dict[str, Any]:
    """Gemini's per-reply counts as chat usage: the prompt with the tool-use prompt, the
    output with the thinking (billed as output), the cached part of the prompt."""
    def num(key: str) -> int:
        return token_count(tokens.get(key))

    return {"prompt_tokens": num("input") + num("tool"),
            "completion_tokens": num("output") + num("thoughts"),
            "prompt_tokens_details": {"cached_tokens": num("cached")}}


def codex_items(records: Sequence[Any]
                ) -> tuple[list[dict[str, Any]], list[float | None], Counter[str],
                           dict[int, list[Spend]]]:
    """Responses API items of a Codex rollout, Codex's own tool calls made function calls,
    each item's time (its line's timestamp), the kinds of lines and items left out with
    their counts, and the model calls' usage by the item before which it was reported."""
    skipped: Counter[str] = Counter()
    items: list[dict[str, Any]] = []
    times: list[float | None] = []
    spent: dict[int, list[Spend]] = {}
    model: str | None = None
    total: Any = None  # the running total the last usage report gave
    for number, record in enumerate(records):
        if not isinstance(record, dict):
            skipped["unknown"] += 1
            continue
        kind = _kind(record)
        if kind in _CODEX_LINES:
            if kind == "turn_context":
                payload = record.get("payload")
                found = payload.get("model") if isinstance(payload, dict) else None
                model = found if isinstance(found, str) and found else model
            elif kind == "event_msg":
                usage, total = _codex_usage(record.get("payload"), total)
                if usage is not None and items:
                    spent.setdefault(len(items) - 1, []).append((usage, model))
            if kind != "response_item":
                skipped[str(kind)] += 1
                continue
            item = record.get("payload")
        elif kind in _CODEX_ITEMS:
            item = record  # an older rollout: the item itself
        elif number == 0 and kind is None:
            skipped["session_meta"] += 1  # an older rollout's first line
            continue
        else:
            skipped[str(kind or "unknown")] += 1
            continue
        converted = _codex_item(item)
        if converted is None:
            skipped[(_kind(item) if isinstance(item, dict) else None) or "unknown"] += 1
        else:
            items.append(converted)
            times.append(record_time(record))
    return items, times, skipped, spent


def _codex_usage(payload: Any, total: Any) -> tuple[dict[str, Any] | None, Any]:
    """A ``token_count`` event's last call as OpenAI chat usage (Codex's input counts its
    cached part, its output the reasoning), and the running total it reports. Codex repeats
    the event (a rate-limit update carries the same totals): a total seen last time adds
    nothing."""
    info = payload.get("info") if isinstance(payload, dict) and \
        payload.get("type") == "token_count" else None
    if not isinstance(info, dict):
        return None, total
    last, running = info.get("last_token_usage"), info.get("total_token_usage")
    if not isinstance(last, dict) or (running is not None and running == total):
        return None, total

    def num(key: str) -> int:
        return token_count(last.get(key))

    return ({"prompt_tokens": num("input_tokens"), "completion_tokens": num("output_tokens"),
             "prompt_tokens_details": {"cached_tokens": num("cached_input_tokens")}},
            running if running is not None else total)


def _codex_item(item: Any) -> dict[str, Any] | None:
    if not isinstance(item, dict):
        return None
    kind = _kind(item)
    if kind in ("message", "function_call", "function_call_output", "reasoning"):
        return item
    if kind == "custom_tool_call":
        return {"type": "function_call", "call_id": item.get("call_id"),
                "name": item.get("name"),
                "arguments": json.dumps({"input": item.get("input", "")}, ensure_ascii=False)}
    if kind == "custom_tool_call_output":
        return {"type": "function_call_output", "call_id": item.get("call_id"),
                "output": item.get("output", "")}
    if kind == "local_shell_call":
        return {"type": "function_call", "call_id": item.get("call_id") or item.get("id"),
                "name": "local_shell",
                "arguments": json.dumps(item.get("action") or {}, ensure_ascii=False)}
    return None


TITLE_CHARS = 60


def agent_title(messages: Sequence[Message]) -> str | None:
    """A readable title for an imported agent session: its first user request, cut at a word
    near ``TITLE_CHARS`` — not the text the agent wraps around it (``<command-name>``,
    ``<environment_context>``, a "Caveat:" notice). None when there is none (the file's name
    is used)."""
    from refold.messages.model import content_text

    for message in messages:
        if message.get("role") != "user":
            continue
        text = " ".join(content_text(message).split())
        if not text or text.startswith("<") or text.startswith("Caveat:") or \
                text.startswith("[Request interrupted"):
            continue
        if len(text) <= TITLE_CHARS:
            return text
        cut = text[:TITLE_CHARS].rsplit(" ", 1)[0] or text[:TITLE_CHARS]
        return cut.rstrip(" ,.;:") + "…"
    return None


def describe_skipped(skipped: Counter[str]) -> str:
    """"12 progress, 3 system" (most first), or "" when nothing was left out."""
    return ", ".join(f"{count} {kind}" for kind, count in skipped.most_common())


def _native_id_of(fmt: str, record: Any, first: bool) -> str | None:
    """The conversation id one record names (None: it names none)."""
    if not isinstance(record, dict):
        return None
    if fmt == "claude-code" and _kind(record) in ("user", "assistant"):
        found = record.get("sessionId")
        if record.get("isSidechain"):  # a subagent's file holds its parent's sessionId
            agent = record.get("agentId")
            found = f"{found}/agent-{agent}" if isinstance(found, str) and isinstance(
                agent, str) and agent.strip() else None
    elif fmt == "codex" and _kind(record) == "session_meta":
        payload = record.get("payload")
        found = payload.get("id") if isinstance(payload, dict) else None
    elif fmt == "codex" and first and _kind(record) is None:
        found = record.get("id")  # an older rollout's first line
    elif fmt == "gemini":
        found = record.get("sessionId")
    else:
        return None
    return found.strip() if isinstance(found, str) and found.strip() else None


def native_session_ids(fmt: str, records: Sequence[Any]) -> list[tuple[str, int]]:
    """The agent's own ids of the conversations a transcript holds, each with the index of
    its first record, in order. Claude Code's resumed session is a new file under a new
    ``sessionId`` that starts with the records of the session it resumed (under that one's
    ``sessionId``): the ids of the sessions it continues, then its own. Codex and Gemini: the
    one id of the file."""
    found: list[tuple[str, int]] = []
    # a subagent's records inside the main transcript name the subagent: not the file's
    main_line = fmt == "claude-code" and any(
        isinstance(r, dict) and _kind(r) in ("user", "assistant") and not r.get("isSidechain")
        for r in records)
    for index, record in enumerate(records):
        if main_line and isinstance(record, dict) and record.get("isSidechain"):
            continue
        native = _native_id_of(fmt, record, index == 0)
        if native is None or any(native == seen for seen, _ in found):
            continue
        found.append((native, index))
        if fmt != "claude-code":
            break
    return found


def native_session_id(fmt: str, records: Sequence[Any]) -> str | None:
    """The agent's own id of the conversation: Claude Code's ``sessionId`` the file goes on
    in (its last one: a resumed session's file starts with the records it continues, under
    the resumed session's id), Codex's ``session_meta`` id. A transcript that grew keeps it,
    so a re-import finds its session. A Claude Code subagent's records carry their parent's
    ``sessionId``: theirs is that with the ``agentId`` (None without one: the content
    decides)."""
    found = native_session_ids(fmt, records)
    return found[-1][0] if found else None


def record_time(record: Any) -> float | None:
    """A record's ``timestamp`` (ISO 8601, as both agents write it) in seconds since the
    epoch, or None."""
    stamp = record.get("timestamp") if isinstance(record, dict) else None
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def agent_messages(fmt: str, records: Sequence[Any]
                   ) -> tuple[list[Message], list[float | None], Counter[str], list[list[Spend]]]:
    """Chat messages (OpenAI form, not yet validated) of an agent's transcript records, when
    each was said (the record's timestamp; None where it has none), what was left out, and
    the usage of the model calls that wrote each (a reply's call on the reply's first
    message; empty for the rest)."""
    if fmt == "claude-code":
        from refold.messages.anthropic import from_anthropic

        turns, skipped = claude_code_turns(records)
        messages: list[Message] = []
        times: list[float | None] = []
        spend: list[list[Spend]] = []
        carried: list[Spend] = []  # a reply that became no message: charged to the next one
        for turn in turns:  # turn by turn: from_anthropic keeps no state between turns
            converted = from_anthropic([{"role": turn["role"], "content": turn["content"]}])
            carried += turn.get("spent") or []
            messages += converted
            times += [turn.get("at")] * len(converted)
            spend += [[] for _ in converted]
            if converted and carried:
                spend[len(messages) - len(converted)] += carried
                carried = []
        if carried and spend:
            spend[-1] += carried
        return messages, times, skipped, spend
    if fmt == "codex":
        from bisect import bisect_right

        from refold.messages.responses import input_messages

        items, item_times, skipped, by_item = codex_items(records)
        origins: list[int] = []
        messages = input_messages(items, origins) if items else []
        spend = [[] for _ in messages]
        for item, calls in sorted(by_item.items()):  # on the message the item is part of
            at = bisect_right(origins, item) - 1
            if spend:
                spend[max(at, 0)] += calls
        return messages, [item_times[i] for i in origins], skipped, spend
    if fmt == "gemini":
        return gemini_messages(records)
    raise InvalidInput(f"unknown agent transcript format {fmt!r}",
                       hint=f"use one of {', '.join(AGENT_FORMATS)}")


__all__ = ["AGENT_FORMATS", "AGENT_NAMES", "Spend", "agent_messages", "agent_title",
           "claude_code_turns", "codex_items", "describe_skipped", "detect", "gemini_messages",
           "native_session_id", "native_session_ids", "prompt_history", "record_time"]
