"""The builtin summarizer: deterministic, offline, and useful on its own.

It reads the replaced span the way a careful colleague would skim it: what the user asked for
(goal, constraints), what the assistant did (tool calls with their exit status, statements of
completed work and decisions), what failed and was not fixed since (blocked), which files were
touched, and what was announced as next. Items are quoted from the messages themselves, in
their language. On re-compaction the previous summary's sections are merged with the new ones.
The body is cut to the token budget by dropping the oldest items of the longest sections.

Same input → same bytes: no clock, no randomness, no dict-order surprises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from refold.compaction.prune import argument_gist, exit_status, first_error_line
from refold.compaction.summarizer import SummaryDraft, SummaryRequest
from refold.compaction.summary import (
    SummarySections,
    is_summary_message,
    parse_body,
    render_body,
)
from refold.messages.model import Message, content_text

ITEM_CHARS = 300
_SENTENCE = re.compile(r"(?<=[。！？；])|(?<=[.!?;])\s+|\n+")
_CONSTRAINT = re.compile(
    r"\b(?:must|mustn't|never|always|don't|do not|should(?:n't)?|avoid|prefer|only|without|"
    r"make sure|please use|no more than|at most|at least|keep)\b|"
    r"必须|不要|别|务必|总是|只能|只用|请用|不能|不得|尽量|保持|しないで|してください|必ず|だけ|禁止",
    re.IGNORECASE)
_DONE = re.compile(
    r"\b(?:done|fixed|created|added|updated|implemented|wrote|removed|renamed|refactored|"
    r"passes|passed|installed|deployed|merged|completed|resolved|changed|moved)\b|"
    r"已完成|完成了|已经|修复了|已修复|添加了|创建了|更新了|通过了|完了|修正しました|追加しました|作成しました",
    re.IGNORECASE)
_DECISION = re.compile(
    r"\b(?:decided|decide|chose|choose|instead of|going with|will use|we'll use|switch(?:ed)? to|"
    r"because|rather than|opted)\b|决定|改用|选择|因为|而不是|決定|代わりに|ため",
    re.IGNORECASE)
_NEXT = re.compile(
    r"\b(?:next|then I'll|then we|todo|remaining|still need|left to|afterwards|follow[- ]up|"
    r"will now|I'll now)\b|下一步|接下来|还需要|然后|待办|次に|残り|これから", re.IGNORECASE)
_WRITE_TOOLS = re.compile(r"write|edit|patch|apply|replace|create|insert|update|save|mkdir|mv|"
                          r"rename|delete|remove|rm", re.IGNORECASE)
_READ_TOOLS = re.compile(r"read|cat|view|open|show|get|search|grep|find|ls|list", re.IGNORECASE)
_EXIT_ONLY = re.compile(r"^(?:exit(?:ed)?|return ?code|process exited)\W.{0,20}$", re.IGNORECASE)
_PATH_MENTION = re.compile(r"(?<![\w/.:-])(?:~|\.{1,2})?/?(?:[\w.@+-]+/)+[\w.@+-]+\.\w{1,10}\b|"
                           r"\b[\w-]+\.(?:py|js|ts|tsx|go|rs|java|rb|php|c|h|cpp|json|ya?ml|"
                           r"toml|md|sql|sh|html|css)\b")
_PATH_KEYS = ("path", "file_path", "filename", "file", "target", "destination", "source")
_LABELS = {
    "en": {"latest": "Latest request in this span", "last_step": "Last assistant step",
           "span": "Replaced {n} messages ({u} user, {a} assistant, {t} tool results)",
           "tools": "Tools used", "continue": "Continue with the latest message after this "
           "summary.", "read": "read", "modified": "modified", "mentioned": "mentioned"},
    "zh": {"latest": "此段中最近的请求", "last_step": "助手最后一步",
           "span": "已替换 {n} 条消息（用户 {u}，助手 {a}，工具结果 {t}）",
           "tools": "使用过的工具", "continue": "请继续处理摘要之后的最新消息。",
           "read": "已读取", "modified": "已修改", "mentioned": "提及"},
    "ja": {"latest": "この範囲の最新の依頼", "last_step": "アシスタントの最後の手順",
           "span": "{n} 件のメッセージを置換（ユーザー {u}、アシスタント {a}、ツール結果 {t}）",
           "tools": "使用したツール", "continue": "要約の後の最新メッセージに従って続けてください。",
           "read": "読み取り", "modified": "変更", "mentioned": "言及"},
}
_CAPS = {"goal": 4, "constraints": 12, "done": 25, "in_progress": 6, "blocked": 10,
         "decisions": 12, "files": 30, "next_steps": 8, "critical": 12}


def _short(text: str, limit: int = ITEM_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if len(s.strip()) > 3]


@dataclass
class _Notes:
    """What the scan collects, in order of appearance."""

    sections: dict[str, dict[str, None]] = field(default_factory=dict)  # ordered sets
    files: dict[str, set[str]] = field(default_factory=dict)
    tools: dict[str, int] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # gist -> error item

    def add(self, key: str, item: str) -> None:
        item = _short(item)
        if item:
            self.sections.setdefault(key, {})[item] = None

    def touch(self, path: str, action: str) -> None:
        self.files.setdefault(path, set()).add(action)


def _real_users(messages: Sequence[Message]) -> list[Message]:
    return [m for m in messages if m.get("role") == "user" and not is_summary_message(m)
            and content_text(m).strip()]


def _scan_tool_group(call: dict[str, object], result: Message | None, notes: _Notes,
                     labels: dict[str, str]) -> None:
    fn = call.get("function") if isinstance(call.get("function"), dict) else {}
    assert isinstance(fn, dict)
    name, args = str(fn.get("name") or "tool"), str(fn.get("arguments") or "")
    notes.tools[name] = notes.tools.get(name, 0) + 1
    gist = argument_gist(args, 120)
    try:
        parsed = json.loads(args) if args else {}
    except ValueError:
        parsed = {}
    if isinstance(parsed, dict):
        for key in _PATH_KEYS:
            if isinstance(parsed.get(key), str) and parsed[key].strip():
                action = labels["modified"] if _WRITE_TOOLS.search(name) else labels["read"]
                notes.touch(parsed[key].strip(), f"{action} ({name})")
    if result is None:
        return
    output = content_text(result)
    status = exit_status(output)
    error = first_error_line(output)
    failed = (status not in (None, "0")) or (status is None and error is not None
                                             and len(output) < 4000)
    label = f"{name} `{gist}`" if gist else name
    if failed:
        notes.failures[gist or name] = f"{label} -> " + (f"exit {status}" if status else "error") \
            + (f": {error}" if error else "")
    else:
        notes.failures.pop(gist or name, None)
        last = next((ln.strip() for ln in reversed(output.splitlines())
                     if ln.strip() and not _EXIT_ONLY.match(ln.strip())), "")
        tail = f" — {_short(last, 120)}" if last else ""
        notes.add("done", f"{label} -> " + (f"exit {status}" if status else "ok") + tail)


def _scan_users(prefix: Sequence[Message], notes: _Notes, labels: dict[str, str]) -> None:
    """Constraints, user decisions and mentioned files come from every user message so far."""
    for msg in _real_users(prefix):
        text = content_text(msg)
        for sentence in _sentences(text):
            if _CONSTRAINT.search(sentence):
                notes.add("constraints", sentence)
            elif _DECISION.search(sentence):
                notes.add("decisions", sentence)
        for match in _PATH_MENTION.finditer(text):
            notes.touch(match.group(0).strip("`'\".,;:"), labels["mentioned"])


def _scan(turns: Sequence[Message], notes: _Notes, labels: dict[str, str]) -> None:
    results = {str(m.get("tool_call_id")): m for m in turns if m.get("role") == "tool"}
    for msg in turns:
        role = msg.get("role")
        if is_summary_message(msg):
            continue
        text = content_text(msg)
        if role == "assistant":
            for match in _PATH_MENTION.finditer(text):
                notes.touch(match.group(0).strip("`'\".,;:"), labels["mentioned"])
            for sentence in _sentences(text):
                if _DECISION.search(sentence):
                    notes.add("decisions", sentence)
                elif _NEXT.search(sentence):
                    notes.add("next_steps", sentence)
                elif _DONE.search(sentence):
                    notes.add("done", sentence)
            for call in msg.get("tool_calls") or []:
                _scan_tool_group(call, results.get(str(call.get("id"))), notes, labels)


def _merge(previous: SummarySections | None, fresh: dict[str, dict[str, None]]
           ) -> dict[str, list[str]]:
    merged: dict[str, list[str]] = {}
    for key, cap in _CAPS.items():
        old = list(previous.get(key)) if previous else []
        seen = set(old)
        new = [i for i in fresh.get(key, {}) if i not in seen]
        items = old + new
        if key == "goal":
            items = items[:cap]  # the original goal leads; later requests follow
        elif key == "in_progress":
            items = (new or old)[-cap:]  # the newest state replaces the old one
        else:
            items = items[-cap:]  # keep the most recent
        merged[key] = items
    return merged


def _fit(sections: dict[str, list[str]], language: str, budget: int,
         count_text: Callable[[str], int]) -> SummarySections:
    body = render_body(SummarySections({k: tuple(v) for k, v in sections.items()}), language)
    total = count_text(body)
    droppable = ("done", "files", "critical", "decisions", "constraints", "next_steps",
                 "blocked", "in_progress")
    while total > budget:
        key = max(droppable, key=lambda k: (len(sections.get(k, [])), -droppable.index(k)))
        if not sections.get(key):
            break
        total -= count_text(sections[key].pop(0)) + 2
    return SummarySections({k: tuple(v) for k, v in sections.items()})


class BuiltinSummarizer:
    """Deterministic structured summary from the messages themselves (no network)."""

    name = "builtin"

    def summarize(self, request: SummaryRequest) -> SummaryDraft:
        labels = _LABELS.get(request.language, _LABELS["en"])
        notes = _Notes()
        users = _real_users(request.prefix)
        span_users = _real_users(request.turns)
        if users:
            notes.add("goal", content_text(users[0]))
        if span_users and span_users[-1] is not (users[0] if users else None):
            notes.add("goal", f"{labels['latest']}: {content_text(span_users[-1])}")
        _scan_users(request.prefix, notes, labels)
        _scan(request.turns, notes, labels)
        for item in notes.failures.values():
            notes.add("blocked", item)
        last_assistant = next((m for m in reversed(request.turns) if m.get("role") == "assistant"
                               and content_text(m).strip()), None)
        if last_assistant is not None:
            notes.add("in_progress",
                      f"{labels['last_step']}: {_short(content_text(last_assistant), 240)}")
        for path, actions in notes.files.items():
            notes.add("files", f"`{path}` — {', '.join(sorted(actions))}")
        notes.add("next_steps", labels["continue"])
        self._critical(request, notes, labels)
        previous = parse_body(request.previous_summary) if request.previous_summary else None
        merged = _merge(previous, notes.sections)
        fitted = _fit(merged, request.language, request.budget_tokens,
                      request.counter.count_text)
        return SummaryDraft(body=render_body(fitted, request.language), summarizer=self.name)

    @staticmethod
    def _critical(request: SummaryRequest, notes: _Notes, labels: dict[str, str]) -> None:
        turns = request.turns
        roles = [m.get("role") for m in turns]
        notes.add("critical", labels["span"].format(
            n=len(turns), u=roles.count("user"), a=roles.count("assistant"),
            t=roles.count("tool")))
        if notes.tools:
            used = ", ".join(f"{name} ×{n}" for name, n in sorted(notes.tools.items()))
            notes.add("critical", f"{labels['tools']}: {used}")
        for msg in turns:
            if msg.get("role") == "tool":
                error = first_error_line(content_text(msg))
                if error:
                    notes.add("critical", error)
