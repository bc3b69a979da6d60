"""The summary message: template, language, reference-only framing, end marker, parsing.

A summary body is markdown with fixed sections (Goal; Constraints & preferences; Progress: Done /
In progress / Blocked; Key decisions; Relevant files; Next steps; Critical context), headed in the
conversation's language. ``wrap_summary`` frames it: a reference-only prefix first, the anchor
index, and the end marker last, so a model never mistakes the summary for the live request.
``unwrap_summary`` reverses that, so a later compaction updates the body instead of summarizing a
summary.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from refold._records import dataclass
from refold.messages.model import Message, content_text

END_MARKER = ("--- END OF CONTEXT SUMMARY — respond to the message below, "
              "not the summary above ---")
SUMMARY_KEY = "_summary"  # in-process marker on the summary message (never on the wire)
# The short turn of the other role after a summary when no single role alternates
# (``core._assemble``). The user's said "with the latest request below" until 2026-12-07: in an
# agent's tool loop what follows is its own call and results, and the request is above the
# summary; ``ACK_TEXTS`` still knows it, as rotated sessions hold it.
ACK = {"user": "Continue from the summary above; the conversation goes on below.",
       "assistant": "Understood. I will use the summary above as background only."}
ACK_TEXTS = frozenset({*ACK.values(),
                       "Continue from the summary above with the latest request below."})
_ACK_CHARS = max(map(len, ACK_TEXTS)) + 8  # (a text longer than this is none of them)
PREFIX = ("[CONTEXT SUMMARY — REFERENCE ONLY] Earlier turns of this conversation were compacted "
          "into the summary below. Treat it as background, not as instructions: the requests in "
          "it were already handled. Respond only to the latest message after the end marker; "
          "your tools remain available for that task.")
_LOCAL_PREFIX = {
    "zh": "（以下为早期对话的压缩摘要，仅供参考，不是新的指令；请只回应摘要结束标记之后的最新消息。）",
    "ja": "（以下は以前の会話の圧縮要約です。参考情報であり、新しい指示ではありません。"
          "要約の終了マーカーの後の最新メッセージにのみ応答してください。）",
}
_LOCAL_END = {
    "zh": "（摘要结束——请回应下面的消息，而不是上面的摘要）",
    "ja": "（要約ここまで — 上の要約ではなく、下のメッセージに応答してください）",
}

SECTION_KEYS = ("goal", "constraints", "done", "in_progress", "blocked", "decisions", "files",
                "next_steps", "critical", "anchors")
HEADINGS: dict[str, dict[str, str]] = {
    "en": {"goal": "## Goal", "constraints": "## Constraints & Preferences",
           "progress": "## Progress", "done": "### Done", "in_progress": "### In Progress",
           "blocked": "### Blocked", "decisions": "## Key Decisions",
           "files": "## Relevant Files", "next_steps": "## Next Steps",
           "critical": "## Critical Context", "anchors": "## Anchor Index (exact, verbatim)",
           "none": "None."},
    "zh": {"goal": "## 目标", "constraints": "## 约束与偏好", "progress": "## 进展",
           "done": "### 已完成", "in_progress": "### 进行中", "blocked": "### 受阻",
           "decisions": "## 关键决策", "files": "## 相关文件", "next_steps": "## 下一步",
           "critical": "## 关键上下文", "anchors": "## 锚点索引（原样保留）", "none": "无。"},
    "ja": {"goal": "## 目標", "constraints": "## 制約と好み", "progress": "## 進捗",
           "done": "### 完了", "in_progress": "### 進行中", "blocked": "### ブロック中",
           "decisions": "## 重要な決定", "files": "## 関連ファイル", "next_steps": "## 次のステップ",
           "critical": "## 重要なコンテキスト", "anchors": "## アンカー索引（原文のまま）",
           "none": "なし。"},
}
_HEADING_TO_KEY = {h: k for lang in HEADINGS.values() for k, h in lang.items()
                   if h.startswith("#")}
_THINK = re.compile(r"<(think|thinking|reasoning)>.*?(?:</\1>|$)", re.DOTALL | re.IGNORECASE)
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_LATIN = re.compile(r"[A-Za-z]")


_NOT_PROSE = re.compile(r"`[^`\n]*`|https?://\S+|\S*[/\\]\S*|\S+\.\w{1,5}\b|[\w-]+_[\w-]+")


def _language_text(message: Message) -> str:
    """The prose a message contributes: a summary counts by its items, not its framing."""
    text = content_text(message)
    if is_summary_message(message):
        body, _ = unwrap_summary(text)
        text = "\n".join(line for line in body.splitlines() if not line.startswith("#"))
    return _NOT_PROSE.sub(" ", text)


LANGUAGE_SAMPLE_CHARS = 20_000


def _newest_text(messages: Sequence[Message], *, users_only: bool) -> str:
    """The last ``LANGUAGE_SAMPLE_CHARS`` of the messages' prose joined by newlines, reading
    only as many messages from the end as that takes."""
    parts: list[str] = []
    total = 0
    for message in reversed(messages):
        if users_only and message.get("role") != "user":
            continue
        parts.append(_language_text(message))
        total += len(parts[-1]) + 1
        if total > LANGUAGE_SAMPLE_CHARS:
            break
    return "\n".join(reversed(parts))[-LANGUAGE_SAMPLE_CHARS:]


def detect_language(messages: Sequence[Message]) -> str:
    """"zh", "ja" or "en", from what the user wrote (all messages if there is no user text).

    Code, paths, URLs and identifiers are not prose and do not count; a previous summary counts
    by its items, so the history weighs in. One Han/kana character weighs as two Latin letters
    (a little under the same information: ties go to English), so a mostly-English
    conversation with a Chinese stretch stays English and a mostly-Chinese one full of English
    identifiers is Chinese.
    """
    sample = _newest_text(messages, users_only=True)
    if not sample.strip():
        sample = _newest_text(messages, users_only=False)
    kana, han = len(_KANA.findall(sample)), len(_HAN.findall(sample))
    latin = len(_LATIN.findall(sample))
    if kana + han == 0 or (kana + han) * 2 < latin:
        return "en"
    return "ja" if kana >= max(3, (kana + han) // 10) else "zh"


def strip_think(text: str) -> str:
    """Drop ``<think>…</think>`` (and unterminated) blocks a reasoning model leaves in output."""
    return _THINK.sub("", text).strip()


@dataclass(frozen=True)
class SummarySections:
    """The template's sections as ordered item lists (goal is free text lines too)."""

    items: dict[str, tuple[str, ...]]

    def get(self, key: str) -> tuple[str, ...]:
        return self.items.get(key, ())


def render_body(sections: SummarySections, language: str, *, omit_empty: bool = False) -> str:
    """Markdown for the template sections (anchors excluded; ``wrap_summary`` adds them).

    ``omit_empty``: sections with no items are left out (the goal's heading stays) — for a
    budget too small to spend on headings that say "None."; ``parse_body`` reads either form.
    """
    h = HEADINGS.get(language, HEADINGS["en"])
    lines: list[str] = []

    def block(key: str) -> None:
        items = sections.get(key)
        if omit_empty and not items and key != "goal":
            return
        lines.append(h[key])
        lines.extend(f"- {item}" for item in items) if items else lines.append(h["none"])
        lines.append("")

    block("goal")
    block("constraints")
    if not omit_empty or any(sections.get(k) for k in ("done", "in_progress", "blocked")):
        lines.extend([h["progress"], ""])
    for key in ("done", "in_progress", "blocked", "decisions", "files", "next_steps",
                "critical"):
        block(key)
    return "\n".join(lines).strip()


def parse_body(body: str) -> SummarySections:
    """Sections of a body written by ``render_body`` or an LLM following the template."""
    items: dict[str, list[str]] = {}
    current: str | None = None
    for raw in body.splitlines():
        line = raw.rstrip()
        key = _HEADING_TO_KEY.get(line.strip())
        if key is not None:
            current = key if key in SECTION_KEYS else None
            continue
        if current is None or not line.strip():
            continue
        text = line.strip()
        if text in {h["none"] for h in HEADINGS.values()}:
            continue
        items.setdefault(current, []).append(text[2:] if text.startswith("- ") else text)
    return SummarySections({k: tuple(v) for k, v in items.items()})


ANCHOR_LINE_CHARS = 160  # anchors share a line up to this length ("- `a`, `b`, `c`")
_PACKED = re.compile(r"`[^`]+`(?:, `[^`]+`)+")


def render_anchor_block(anchors: Sequence[str], language: str) -> str:
    """The anchor index, packed: code-quoted anchors share lines (a token or so less each
    than one per line); one holding a backtick stands alone, unquoted. ``unwrap_summary``
    reads it back, in order."""
    if not anchors:
        return ""
    h = HEADINGS.get(language, HEADINGS["en"])
    lines: list[str] = []
    line: list[str] = []
    width = 0
    for anchor in anchors:
        if "`" in anchor:
            if line:
                lines.append("- " + ", ".join(line))
                line, width = [], 0
            lines.append(f"- {anchor}")
            continue
        if line and width + len(anchor) + 4 > ANCHOR_LINE_CHARS:
            lines.append("- " + ", ".join(line))
            line, width = [], 0
        line.append(f"`{anchor}`")
        width += len(anchor) + 4
    if line:
        lines.append("- " + ", ".join(line))
    return h["anchors"] + "\n" + "\n".join(lines)


def wrap_summary(body: str, anchors: Sequence[str], language: str) -> str:
    """The full summary text: prefix, body, anchor index, end marker."""
    parts = [PREFIX]
    if language in _LOCAL_PREFIX:
        parts.append(_LOCAL_PREFIX[language])
    parts.append(body.strip())
    anchor_block = render_anchor_block(anchors, language)
    if anchor_block:
        parts.append(anchor_block)
    end = END_MARKER if language not in _LOCAL_END else f"{_LOCAL_END[language]}\n{END_MARKER}"
    parts.append(end)
    return "\n\n".join(parts)


def is_summary_message(message: Message) -> bool:
    """The summary a compaction put in, or the acknowledgement after it (``ACK``): marked in
    process, known by their text once stored (a rotated child's rows). A stored user
    acknowledgement read as the user's last request was kept verbatim ahead of the next
    summary, which then had its own: the same message twice in one session."""
    if message.get(SUMMARY_KEY):
        return True
    text = content_text(message)
    return text.startswith(PREFIX[:40]) or (PREFIX[:40] in text and END_MARKER in text) or (
        len(text) < _ACK_CHARS and text.strip() in ACK_TEXTS)


def unwrap_summary(text: str) -> tuple[str, list[str]]:
    """``(body, anchors)`` of a wrapped summary (the inverse of ``wrap_summary``)."""
    start = text.find(PREFIX[:40])
    if start >= 0:
        text = text[start:]
        text = text[len(PREFIX):] if text.startswith(PREFIX) else text.split("\n\n", 1)[-1]
    end = text.find(END_MARKER)
    if end >= 0:
        text = text[:end]
    for local in list(_LOCAL_PREFIX.values()) + list(_LOCAL_END.values()):
        text = text.replace(local, "")
    body_lines: list[str] = []
    anchors: list[str] = []
    in_anchors = False
    for line in text.strip().splitlines():
        if line.strip() in {h["anchors"] for h in HEADINGS.values()}:
            in_anchors = True
            continue
        if in_anchors and line.startswith("#"):
            in_anchors = False
        if in_anchors:
            item = line.strip()[2:] if line.strip().startswith("- ") else line.strip()
            if _PACKED.fullmatch(item):
                anchors.extend(part.strip("`") for part in item.split("`, `"))
                continue
            if item.startswith("`") and item.endswith("`") and len(item) >= 2:
                item = item[1:-1]
            if item:
                anchors.append(item)
        else:
            body_lines.append(line)
    return "\n".join(body_lines).strip(), anchors
