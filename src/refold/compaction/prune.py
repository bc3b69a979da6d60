"""The cheap prune: shrink old tool traffic without a model call.

Outside the protected tail:
1. a tool output identical to a newer one becomes a reference to the newer copy;
2. a large old output becomes one line keeping the tool, the gist of its arguments, the exit
   status, the first error line (else a test run's failure count) and the size:
   ``[terminal] ran npm test -> exit 0, 47 lines``;
3. long tool-call argument JSON is shortened and stays valid JSON.
Inside the tail, bulky outputs are downgraded the same way only while the tail is over its soft
ceiling. Images older than the latest one become a text placeholder.

Every function returns new lists and new dicts; the input (and the ledger behind it) is untouched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from refold._records import dataclass
from refold.messages.model import Message, content_text

IMAGE_PLACEHOLDER = "[image omitted: an older image, not the latest one]"
_GIST_KEYS = ("command", "cmd", "path", "file_path", "filename", "file", "url", "query",
              "pattern", "name")
# matched against the lowercased text: a case-insensitive pattern is 4x slower
_EXIT = re.compile(r"(?:exit(?:ed)?(?: with)?(?: code| status)?|return ?code|returncode|"
                   r"\"exit_code\")\W{0,3}(-?\d+)")
# an error-shaped line, not the word "error" anywhere (``✓ Closed: added error handling``,
# ``67dc57b Fix endpoint error rendering``): a line that starts with ``error:``/``Error:``/
# ``fatal:``/``panic:`` (also after ``file:line:`` or rustc's ``error[E0308]:``) or with an
# exception's name (also after pytest's ``E`` or Elixir's ``** (``), or a linter's
# ``3:5  error``…
_ERROR_START = re.compile(
    r"[ \t]*(?:E[ \t]+|\*\*[ \t]*\(|[\w./\\-]+:\d+(?::\d+)?:[ \t]*)?"
    r"(?:(?:error|Error|ERROR|fatal|Fatal|FATAL|panic)(?:\[\w+\])?:|"
    r"(?:[\w$]+\.)*[A-Z]\w*(?:Error|Exception)\b|Exception in thread\b|(?:--- )?FAIL\b)|"
    r"[ \t]*\d+:\d+[ \t]+error\b")
# … or that holds one of these anywhere: (the text a line must hold, the pattern it must then
# match; None: the text is enough). Each is tried only on a line holding its text: one regex of
# them all tries every branch at every position, 50x slower on a long output.
_ERROR_ANYWHERE: tuple[tuple[str, re.Pattern[str] | None], ...] = (
    ("Error: ", re.compile(r"\b[A-Z]\w*Error: ")),
    ("Exception: ", re.compile(r"\b[A-Z]\w*Exception: ")),
    ("ERROR", re.compile(r"\bERROR\b")), ("FAILED", re.compile(r"\bFAILED\b")),
    ("FATAL", re.compile(r"\bFATAL\b")), ("npm ERR!", None),
    ("panicked at", re.compile(r"\bpanicked at\b")),
    ("atal error", re.compile(r"\b[Ff]atal error\b")),
    ("Compilation error", re.compile(r"\bCompilation error\b")),
    ("error TS", re.compile(r"\berror TS\d")), ("***", re.compile(r"\*\*\*.*\bError \d")),
    (": command not found", None), (": No such file or directory", None),
    (": Permission denied", None), ("Segmentation fault", re.compile(r"\bSegmentation fault\b")))
# every error-shaped line holds one of these
_ERROR_HINTS = ("Error", "Exception", "error", "ERROR", "FAIL", "atal", "FATAL", "panic", "ERR!",
                "command not found", "No such file", "Permission denied", "Segmentation fault")
_ERROR_HINT = re.compile("|".join(map(re.escape, _ERROR_HINTS)))


def is_error_line(line: str) -> bool:
    """Is ``line`` (one line, no line break) error-shaped (``_ERROR_START``,
    ``_ERROR_ANYWHERE``)? ``✓ Closed T-3: added error handling`` is not."""
    if _ERROR_START.match(line):
        return True
    return any(text in line and (pattern is None or pattern.search(line) is not None)
               for text, pattern in _ERROR_ANYWHERE)


@dataclass
class PruneStats:
    deduplicated: int = 0
    summarized: int = 0
    arguments_truncated: int = 0
    tail_downgraded: int = 0
    images_stripped: int = 0
    messages_cut: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def call_index(messages: Sequence[Message]) -> dict[str, tuple[str, str]]:
    """tool_call_id → (tool name, arguments JSON) over all assistant messages."""
    index: dict[str, tuple[str, str]] = {}
    for msg in messages:
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") or {}
            index[str(call.get("id"))] = (str(fn.get("name") or "tool"),
                                          str(fn.get("arguments") or ""))
    return index


def argument_gist(arguments: str, limit: int = 80) -> str:
    """The most telling argument: a command, a path, a URL… shortened to ``limit`` chars."""
    try:
        args: Any = json.loads(arguments) if arguments else {}
    except ValueError:
        args = arguments
    value: Any = args
    if isinstance(args, dict):
        value = next((args[k] for k in _GIST_KEYS if isinstance(args.get(k), str)),
                     next((v for v in args.values() if isinstance(v, str)), ""))
        path = next((args[k] for k in _GIST_KEYS[2:6] if isinstance(args.get(k), str)), None)
        if path and isinstance(value, str) and value == args.get("command") \
                and value.strip() and len(value.split()) == 1:
            value = f"{value.strip()} {path}"  # an editor's subcommand: ``view /w/app.py``
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


# a shell tool's own header on the first line (Claude Code ``Exit code 2``, Codex ``Exit code:
# 1``): it says how the command ended, whatever the (maybe long) output prints after it
_EXIT_HEADER = re.compile(r"\s*Exit code:? (-?\d+)[ \t]*(?:\n|$)")
# a test run's failure count: ``12 failures``, ``3 failed``, unittest's ``(failures=2)``…
_FAILURES = re.compile(r"\b[1-9]\d* (?:failures?|failed)\b|\bfailures=[1-9]")
# … on its summary line, which counts something else too or says how long the run took
# (``Fixed 3 failed tests`` in a commit message is no test run)
_RUN_SUMMARY = re.compile(r"\b\d+ (?:tests?|doctests?|examples?|passed|runs?|total|"
                          r"assertions?|errors?|skipped|ignored|properties)\b|"
                          r"\bin \d+(?:\.\d+)? ?s(?:ec(?:onds?)?)?\b|^\W*FAILED\b|test result")


def exit_status(output: str) -> str | None:
    """The exit status an output reports, as text: the tool's ``Exit code N`` header on its
    first line, else the last mention in its last 4,000 characters."""
    header = _EXIT_HEADER.match(output)
    if header is not None:
        return header.group(1)
    tail = output[-4000:].lower()
    # every mention starts at "exit" or "return" (a quote before "exit_code"): none before the
    # first of them, so the scan starts there (the same matches; this pattern's first letters
    # are common ones, so skipping the text before is most of its cost)
    starts = [at for at in (tail.find("exit"), tail.find("return")) if at >= 0]
    if not starts:
        return None
    found = _EXIT.findall(tail, max(0, min(starts) - 1))
    return found[-1] if found else None


def failure_line(output: str) -> str | None:
    """The line of a test run's summary that counts failures (``14 doctests, 127 tests, 12
    failures``; ``1 failed, 3 passed``), in the last 4,000 characters; None when it counts none
    or only ``0 failures``."""
    tail = output[-4000:]
    if "fail" not in tail:
        return None
    for found in reversed(list(_FAILURES.finditer(tail))):  # the run's summary comes last
        start = tail.rfind("\n", 0, found.start()) + 1
        end = tail.find("\n", found.end())
        line = tail[start:end if end >= 0 else len(tail)].strip()
        if _RUN_SUMMARY.search(line):
            return line[:160]
    return None


def first_error_line(output: str) -> str | None:
    """The first error-shaped line of an output (``is_error_line``), stripped, at most 160
    characters; None when it has none."""
    pos = 0
    while (hint := _ERROR_HINT.search(output, pos)) is not None:  # only lines with a hint
        start = output.rfind("\n", 0, hint.start()) + 1
        end = output.find("\n", hint.end())
        end = len(output) if end < 0 else end
        line = output[start:end]
        if is_error_line(line):
            return line.strip()[:160]
        pos = end + 1
    return None


_CD = re.compile(r"^\s*(?:cd\s+\S+\s*(?:&&|;)\s*)+")


def _reads_only(name: str, arguments: str) -> bool:
    """Does the call only read: a read or search tool, an editor's ``view``, an inspection
    command (``git log``, ``cat``, ``grep``…, also after ``cd dir &&``)? Its output is the
    text it read (a file, a log), not what the tool says of itself."""
    # imported here: both import this module
    from refold.compaction.activity import INSPECT
    from refold.compaction.tools import TOOLS, call_command, searcher, tool_effect

    try:
        args = json.loads(arguments) if arguments else {}
    except ValueError:
        return False
    if not isinstance(args, dict):
        return False
    command = call_command(name, args)
    if command is not None:
        return INSPECT.match(_CD.sub("", command)) is not None
    if TOOLS.get(name.lower()) is searcher:
        return True
    effect = tool_effect(name, args, "")
    return bool(effect.reads) and not effect.writes


def one_line_summary(name: str, arguments: str, output: str) -> str:
    """``[terminal] ran `npm test` -> exit 0, 47 lines, 1,830 chars; error: …``.

    A call that only read (``_reads_only``) gets no error line and no exit status from the text
    it read (``56→ .receive("error", …`` in a file, ``Fix error rendering`` in a git log): only
    from its first line (``<tool_use_error>…``, ``fatal: …``) and the tool's own header."""
    gist = argument_gist(arguments)
    if _reads_only(name, arguments):
        header = _EXIT_HEADER.match(output)
        status = header.group(1) if header else None
        start = header.end() if header else 0
        end = output.find("\n", start)
        first = output[start:end if end >= 0 else len(output)]
        error = first.strip()[:160] if is_error_line(first) or "<tool_use_error>" in first \
            else None
    else:
        status = exit_status(output)
        error = first_error_line(output) or failure_line(output)
    lines = output.count("\n") + 1 if output else 0
    facts = [f"exit {status}"] if status is not None else []
    facts.append(f"{lines} lines, {len(output):,} chars")
    text = f"[{name}] ran `{gist}` -> " + ", ".join(facts) if gist else \
        f"[{name}] -> " + ", ".join(facts)
    if error:
        text += f"; error: {error}"
    return text + " (full output in the session ledger)"


def _shorten(value: Any, max_str: int) -> Any:
    if isinstance(value, str) and len(value) > max_str:
        return value[:max_str] + f"…[{len(value) - max_str} chars truncated]"
    if isinstance(value, dict):
        return {k: _shorten(v, max_str) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v, max_str) for v in value[:20]] + (
            [f"…[{len(value) - 20} more items]"] if len(value) > 20 else [])
    return value


def truncate_arguments(arguments: str, max_chars: int) -> str:
    """Shorten tool-call arguments to about ``max_chars`` while keeping them valid JSON."""
    if len(arguments) <= max_chars:
        return arguments
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return json.dumps({"_truncated": arguments[:max_chars // 2]}, ensure_ascii=False)
    limit = max(40, max_chars // 2)
    while True:
        text = json.dumps(_shorten(parsed, limit), ensure_ascii=False)
        if len(text) <= max_chars or limit <= 40:
            return text
        limit //= 2


def _is_result(msg: Message) -> bool:
    return msg.get("role") == "tool"


def prune_outside_tail(messages: Sequence[Message], tail_start: int, *, min_chars: int,
                       args_max_chars: int, stats: PruneStats) -> list[Message]:
    """Passes 1-3 over ``messages[:tail_start]`` (system messages are never touched)."""
    out = list(messages)
    calls = call_index(messages)
    newest_by_content: dict[str, str] = {}
    for i in range(len(out) - 1, -1, -1):  # walk newest first so older copies are found
        msg = out[i]
        if not _is_result(msg):
            continue
        text = content_text(msg)
        if len(text) < min_chars:
            continue
        if i < tail_start and text in newest_by_content:
            out[i] = {**msg, "content": "[Duplicate tool output — same content as the newer "
                                         f"result of call {newest_by_content[text]}]"}
            stats.deduplicated += 1
            continue
        newest_by_content.setdefault(text, str(msg.get("tool_call_id")))
        if i < tail_start:
            name, args = calls.get(str(msg.get("tool_call_id")), ("tool", ""))
            out[i] = {**msg, "content": one_line_summary(name, args, text)}
            stats.summarized += 1
    for i in range(min(tail_start, len(out))):
        out[i] = _truncate_calls(out[i], args_max_chars, stats)
    return out


def _truncate_calls(msg: Message, max_chars: int, stats: PruneStats) -> Message:
    calls = msg.get("tool_calls")
    if not calls or all(len(str((c.get("function") or {}).get("arguments") or "")) <= max_chars
                        for c in calls):
        return msg
    new_calls = []
    for call in calls:
        fn = dict(call.get("function") or {})
        args = str(fn.get("arguments") or "")
        if len(args) > max_chars:
            fn["arguments"] = truncate_arguments(args, max_chars)
            stats.arguments_truncated += 1
        new_calls.append({**call, "function": fn})
    return {**msg, "tool_calls": new_calls}


def downgrade_tail(messages: list[Message], tail_start: int, *, ceiling_tokens: int,
                   count: Callable[[Message], int], keep_from: int, min_chars: int,
                   stats: PruneStats) -> list[Message]:
    """While the tail is over ``ceiling_tokens``, shrink its bulkiest tool outputs.

    Outputs at or after ``keep_from`` (the latest unit) stay verbatim.
    """
    out = list(messages)
    total = sum(count(m) for m in out[tail_start:])
    if total <= ceiling_tokens:
        return out
    calls = call_index(out)
    candidates = sorted((i for i in range(tail_start, keep_from) if _is_result(out[i])
                         and len(content_text(out[i])) >= min_chars),
                        key=lambda i: (-count(out[i]), i))
    for i in candidates:
        if total <= ceiling_tokens:
            break
        before = count(out[i])
        name, args = calls.get(str(out[i].get("tool_call_id")), ("tool", ""))
        out[i] = {**out[i], "content": one_line_summary(name, args, content_text(out[i]))}
        total -= before - count(out[i])
        stats.tail_downgraded += 1
    return out


CUT_NOTE = "\n[… {cut} of {total} characters cut here to fit the window; the full message " \
           "is in the session ledger …]\n"
_CUT_WHERE = "is in the session ledger …]"


def point_cut_note(message: Message, where: str) -> Message:
    """``message`` with its cut note naming where the whole message is (``where``: "seq 41",
    "seq 41 of session …"); unchanged when it was not cut."""
    content = message.get("content")
    if not isinstance(content, str) or _CUT_WHERE not in content:
        return message
    pointed = f"is in the session ledger at {where} …]"
    return {**message, "content": content.replace(_CUT_WHERE, pointed, 1)}
CUT_MIN_TOKENS = 200  # a cut message keeps at least this much of its head and tail


def cut_oversized(messages: list[Message], start: int, *, excess_tokens: int,
                  count: Callable[[Message], int], protected: set[int], stats: PruneStats
                  ) -> list[Message]:
    """Cut the largest text messages from ``start`` on (not ``protected``) to their head and
    tail with a note in between, until ``excess_tokens`` are gone or nothing is left to cut.

    The last resort before a result that overflows: a 19K-token final tool output kept
    verbatim in a 16K window is a 400 on every turn. The ledger keeps the whole message.
    """
    out = list(messages)
    sizes = {i: count(out[i]) for i in range(start, len(out))
             if i not in protected and isinstance(out[i].get("content"), str)}
    for i in sorted(sizes, key=lambda j: (-sizes[j], j)):
        if excess_tokens <= 0 or sizes[i] <= 2 * CUT_MIN_TOKENS:
            break
        text = out[i]["content"]
        keep_tokens = max(2 * CUT_MIN_TOKENS, sizes[i] - excess_tokens - 40)
        keep_chars = int(len(text) * keep_tokens / sizes[i])
        head, tail = keep_chars * 2 // 3, keep_chars // 3
        note = CUT_NOTE.format(cut=f"{len(text) - head - tail:,}", total=f"{len(text):,}")
        out[i] = {**out[i], "content": text[:head] + note + text[len(text) - tail:]}
        excess_tokens -= sizes[i] - count(out[i])
        stats.messages_cut += 1
    return out


def _has_image(msg: Message) -> bool:
    content = msg.get("content")
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") in ("image_url", "input_image", "image")
        for p in content)


def strip_old_images(messages: Sequence[Message], keep: set[int], stats: PruneStats
                     ) -> list[Message]:
    """Replace image parts in every message before the latest image-bearing one (and not in
    ``keep``) with a text placeholder."""
    out = list(messages)
    latest = max((i for i, m in enumerate(out) if _has_image(m)), default=-1)
    for i in range(latest):
        if i in keep or not _has_image(out[i]):
            continue
        parts = []
        for part in out[i]["content"]:
            if isinstance(part, dict) and part.get("type") in ("image_url", "input_image",
                                                                "image"):
                parts.append({"type": "text", "text": IMAGE_PLACEHOLDER})
                stats.images_stripped += 1
            else:
                parts.append(part)
        out[i] = {**out[i], "content": parts}
    return out
