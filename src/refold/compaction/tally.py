"""Labels of the builtin summary's generated items, and its running bookkeeping.

Generated items carry a label (``Current request: …``, ``Todo (pending): …``) so a later
compaction can recognise them in the previous summary — in any of the supported languages, since
a conversation may switch — and replace them instead of stacking copies. The bookkeeping (how
many messages were replaced, which tools were used) is one line each, summed over every
compaction: ``Tally.absorb`` parses a previous line (current or legacy wording) into the totals.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from refold._records import dataclass, field
from refold.compaction.summary import is_summary_message
from refold.messages.model import Message

LABELS: dict[str, dict[str, str]] = {
    "en": {"current": "Current request", "latest": "Latest request in this span",
           "instruction": "Latest instruction", "last_step": "Last assistant step",
           "span": "Compacted so far: {n} messages ({u} user, {a} assistant, {t} tool results)",
           "legacy_span": "Replaced {n} messages ({u} user, {a} assistant, {t} tool results)",
           "tools": "Tools used", "todo": "Todo", "resolve": "Fix the still-failing",
           "answer": "Answer the open request",
           "continue": "Continue with the latest message after this summary.",
           "read": "read", "modified": "modified", "mentioned": "mentioned",
           "provider": "From memory provider",
           "midway": "The request just before this summary came in during this work: {n} of "
                     "the {m} messages summarized here came before it, the rest after"},
    "zh": {"current": "当前请求", "latest": "此段中最近的请求", "instruction": "最近的指示",
           "last_step": "助手最后一步",
           "span": "累计已压缩 {n} 条消息（用户 {u}，助手 {a}，工具结果 {t}）",
           "legacy_span": "已替换 {n} 条消息（用户 {u}，助手 {a}，工具结果 {t}）",
           "tools": "使用过的工具", "todo": "待办", "resolve": "修复仍失败的",
           "answer": "回答尚未回复的请求", "continue": "请继续处理摘要之后的最新消息。",
           "read": "已读取", "modified": "已修改", "mentioned": "提及",
           "provider": "来自记忆提供方",
           "midway": "摘要前的那条请求是在这项工作进行中发来的：此处摘要的 {m} 条消息中有 {n} 条在它之前，"
                     "其余在它之后"},
    "ja": {"current": "現在の依頼", "latest": "この範囲の最新の依頼", "instruction": "最新の指示",
           "last_step": "アシスタントの最後の手順",
           "span": "これまでに {n} 件のメッセージを圧縮（ユーザー {u}、アシスタント {a}、ツール結果 {t}）",
           "legacy_span": "{n} 件のメッセージを置換（ユーザー {u}、アシスタント {a}、ツール結果 {t}）",
           "tools": "使用したツール", "todo": "ToDo", "resolve": "まだ失敗している項目を修正",
           "answer": "未回答の依頼に回答", "continue": "要約の後の最新メッセージに従って続けてください。",
           "read": "読み取り", "modified": "変更", "mentioned": "言及",
           "provider": "メモリプロバイダーより",
           "midway": "要約の直前の依頼はこの作業の途中で届きました：ここで要約した {m} 件のうち {n} 件は"
                     "その前、残りはその後です"},
}
_COUNT = re.compile(r"^(.+?) ×(\d+)$")


def label_prefixes(name: str) -> list[str]:
    """The label ``name`` in every language (to recognise items of a previous summary)."""
    return [labels[name] for labels in LABELS.values()]


def _template(text: str) -> re.Pattern[str]:
    pattern = re.escape(text)
    for part in "nuat":
        pattern = pattern.replace(re.escape("{" + part + "}"), rf"(?P<{part}>\d+)")
    return re.compile("^" + pattern + "$")


_SPANS = [_template(lab[k]) for lab in LABELS.values() for k in ("span", "legacy_span")]
_TOOLS = [lab["tools"] for lab in LABELS.values()]


@dataclass
class Tally:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys("nuat", 0))
    tools: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of_span(cls, turns: Sequence[Message], tools: Mapping[str, int]) -> Tally:
        roles = [m.get("role") for m in turns if not is_summary_message(m)]
        return cls({"n": len(roles), "u": roles.count("user"), "a": roles.count("assistant"),
                    "t": roles.count("tool")}, dict(tools))

    def absorb(self, item: str) -> bool:
        """Add a previous summary's bookkeeping line to the totals; False for other items."""
        for pattern in _SPANS:
            match = pattern.match(item)
            if match:
                for part in "nuat":
                    self.counts[part] += int(match.group(part))
                return True
        for label in _TOOLS:
            if item.startswith(label + ": "):
                for entry in item[len(label) + 2:].split(", "):
                    found = _COUNT.match(entry.strip())
                    if found:
                        name = found.group(1)
                        self.tools[name] = self.tools.get(name, 0) + int(found.group(2))
                return True
        return False

    def render(self, labels: Mapping[str, str]) -> list[str]:
        lines = [labels["span"].format(**self.counts)] if self.counts["n"] else []
        if self.tools:
            used = ", ".join(f"{name} ×{n}" for name, n in sorted(self.tools.items()))
            lines.append(f"{labels['tools']}: {used}")
        return lines
