"""The anchor index: exact identifiers from the replaced span, kept verbatim and bounded.

A summary paraphrases; an agent needs the exact path, command, URL, error string, id or version
to keep working. Anchors are extracted from the original (unpruned) messages, deduplicated,
ranked (kind weight + how often it occurs + how recently), and cut to a token budget. The result
is deterministic: same messages, same budget → same list in the same order.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from refold._records import dataclass
from refold.compaction.activity import INSPECT, json_output
from refold.compaction.summary import is_summary_message
from refold.compaction.textscan import Joined, Rule
from refold.compaction.tools import call_command
from refold.messages.model import Message, content_text

MAX_ANCHOR_CHARS = 200
SCAN_CHARS = 8_000  # per message; what the llm summarizer sees of a long output, too
SCAN_BUDGET_CHARS = 200_000  # newest text scanned for every kind (about 50K tokens)
OLD_HEAD, OLD_TAIL = 160, 240  # what of an older output is scanned for every kind

_EXT = (r"py|pyi|js|mjs|cjs|ts|tsx|jsx|json|jsonl|yaml|yml|toml|md|rst|txt|rs|go|java|kt|c|h|cc|"
        r"cpp|hpp|cs|sh|bash|zsh|sql|html|css|scss|cfg|ini|conf|lock|log|csv|env|rb|php|swift|"
        r"vue|svelte|proto|graphql|tf|xml|ipynb|gradle|mk|dockerfile")
# a folder name is taken whole (``++``): giving a character back cannot make a "/" follow it,
# and the regex engine no longer tries every shorter one (the same matches, faster)
_PATH_PARTS = (r"(?<![\w/.:-])(?:~|\.{1,2})?/?(?:[\w.@+-]++/)+[\w.@+-]+",
               rf"\b[\w.-]+\.(?:{_EXT})\b")
# each part starts with a character class (a leading lookbehind moved after it), so the regex
# engine skips to candidate characters instead of trying every position: several times faster
_ID_PARTS = (r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
             r"\b[A-Z][A-Z0-9]{1,9}-\d{1,6}\b", r"(?<![\w#])#\d{2,7}\b",
             r"[0-9a-f](?<!\w.)[0-9a-f]{6,39}\b",  # a hex run with a digit and a letter
             r"[a-z](?<![\w.-].)[a-z]{1,11}_[A-Za-z0-9]{8,40}\b(?!\.\w)")
_HEX_DIGIT, _HEX_LETTER = re.compile(r"\d"), re.compile(r"[a-f]")
_UNITS = (r"ms|µs|ns|s|sec|secs|seconds|min|mins|minutes|h|hrs|hours|days|KB|MB|GB|TB|KiB|MiB|"
          r"GiB|TiB|kB|B|bytes|%|px|tokens|rps|qps|req/s|USD|EUR|GHz|MHz|°C|x")


def _hex_id(text: str) -> bool:
    return _HEX_DIGIT.search(text) is not None and _HEX_LETTER.search(text) is not None


_PATTERNS: tuple[tuple[str, int, re.Pattern[str]], ...] = (
    ("error", 6, re.compile(
        r"(?m)\b[A-Z]\w*(?:Error|Exception|Exit|Failure):[^\n`]{1,160}|"
        r"^[^\n`]{0,40}?\b(?:error(?:\[\w+\])?:|ERROR\b|FAILED\b|[Ff]atal:|panic:)[^\n`]{0,160}")),
    ("url", 5, re.compile(r"\bhttps?://[^\s'\"<>)\]`]+[^\s'\"<>)\]`.,;:]")),
    ("path", 5, re.compile("|".join(_PATH_PARTS))),
    ("id", 4, re.compile("|".join(_ID_PARTS))),  # run as _PARTS["id"] (with _hex_id)
    ("version", 3, re.compile(r"(?<![\w.])v?\d+\.\d+(?:\.\d+)+(?:[-+][\w.]+)?\b|"
                              r"\bv\d+\.\d+\b")),
    ("number", 3, re.compile(
        rf"[$\d](?<![\w.].)(?:(?<=\$)\d+|(?<=\d)\d*)(?:[.,]\d+)*\s?(?:{_UNITS})(?![\w])|"
        r"\$(?<![\w.]\$)\d+(?:\.\d+)?\b")),
    ("config", 3, re.compile(r"\b[A-Z][A-Z0-9_]{2,}=[^\s'\"]+|\b(?:localhost|[\w-]+(?:\.[\w-]+)+):"
                             r"\d{2,5}\b")),
)
# each kind's pattern as ``textscan`` rules: the path and id alternations split into their
# alternatives, each with a trigger found inside every match of it (a literal where one
# exists), so the regex engine runs only over the lines that can hold a match
_TOKEN_TAIL = re.compile(r"_[A-Za-z0-9]{8}")
_EXT_END = re.compile(rf"\.(?:{_EXT})\b")  # what the second path part needs
# The two kinds with no literal to look for run over the lines of a pattern led by [0-9]: the
# regex engine tries a pattern at each character its first class holds, and digits are rare
# next to [0-9a-f] or \d (a Unicode category, slow to test at every character). A hex run
# with a digit and a letter (what ``_hex_id`` keeps) has a digit next to a letter; a number
# ends in a digit followed by its unit's first character, or is "$" and a digit.
# [\x80-\U0010ffff] stands in for the digits \d finds beyond ASCII (٣, ５).
_HEX_PAIR = re.compile(r"[0-9](?:[a-f]|(?<=[a-f].))")
_DIGIT = r"0-9\x80-\U0010ffff"
_NUMBER_END = re.compile(
    rf"[{_DIGIT}](?:\s?[{re.escape(''.join(sorted({u[0] for u in _UNITS.split('|')})))}]|"
    r"(?<=\$.))")
# "error:" and "error[" (error[E0308]:), not "error": a word prose and logs use far more often
_ERROR_HINTS = ("Error:", "Exception:", "Exit:", "Failure:", "error:", "error[", "ERROR",
                "FAILED", "atal:", "panic:")
# all but errors and numbers hold no space (``spaceless``: a line is read between the spaces
# around its triggers), and none of their triggers a newline
_RULES: dict[str, tuple[Rule, ...]] = {
    "error": (Rule(_PATTERNS[0][2], _ERROR_HINTS),),
    "url": (Rule(_PATTERNS[1][2], "://", spaceless=True),),
    "path": (Rule(re.compile(_PATH_PARTS[0]), "/", spaceless=True),
             Rule(re.compile(_PATH_PARTS[1]), _EXT_END, spaceless=True)),
    "id": tuple(Rule(re.compile(part), trigger, check, spaceless=True)
                for part, trigger, check in zip(
        _ID_PARTS, (re.compile(r"-[0-9a-f]{4}-"), re.compile(r"-\d"), re.compile(r"#\d\d"),
                    _HEX_PAIR, _TOKEN_TAIL),
        (None, None, None, _hex_id, None), strict=True)),
    # three dotted numbers (1.2.3), or "v" and a number (v2.0)
    "version": (Rule(_PATTERNS[4][2], re.compile(r"\.\d+\.\d|v\d"), spaceless=True),),
    "number": (Rule(_PATTERNS[5][2], _NUMBER_END, digit_lines=True),),
    "config": (Rule(_PATTERNS[6][2], re.compile(r"=(?<=[A-Z0-9_]=)|:\d\d"), spaceless=True),),
}
_DIGITS = re.compile(r"\d+")
# unified-diff headers name a file as a/PATH and b/PATH (also inside JSON-escaped patches)
_DIFF_HEADER = re.compile(r"""((?:^|\n|\\n|")(?:---|\+\+\+) )[ab]/|"""
                          r"""((?:^|\n|\\n|")diff --git )a/(\S+) b/""", re.MULTILINE)
_PRUNE_NOTE = re.compile(r" \(full output in the session ledger\)")  # see prune.py
_CREDENTIAL = re.compile(r"(?i)\b\w*(?:password|passwd|secret|token|api[_-]?key)\w*\s*[=:]|"
                         r"://[^/\s:@]+:[^/\s@]+@")
_LETTER = re.compile(r"[^\W\d_]")
_LIST_DEBRIS = re.compile(r"^(?:[-*]\s+)+")
PROSE_KINDS = ("error",)  # kinds taken only from tool outputs and user text, not assistant prose
# commands written in prose: the first line of a fenced block, or an inline `…` that starts
# with a common program (``pytest tests/test_x.py -k edge``)
_FENCED = re.compile(r"```[\w-]*[ \t]*\n[ \t]*([^\n`]{2,200})")
_INLINE = re.compile(
    r"`((?:pytest|python3?|pip3?|uv|npm|npx|pnpm|yarn|node|git|make|cargo|go|rustc|gcc|clang|"
    r"cmake|mvn|gradle|dotnet|docker|kubectl|helm|terraform|curl|ruff|mypy|tox|bash|sh|"
    r"\./)[ /][^`\n]{1,150})`")
_PROMPT_LINE = Rule(re.compile(r"(?m)^\$ (.*)$"), "$ ", group=1)  # "$ command" lines
UNREFERENCED_PENALTY = 2.0  # found in tool output only, never named by anyone
PROSE_PATH_PENALTY = 4.0  # "inputting/reading": words a slash joins, no call or output shows it
_NOISE = re.compile(r"^(?:call_|toolu_|chatcmpl-|Traceback \(most recent call last\))")
# words that look like a path but name none: "n/a", "w/o", MIME types, "and/or"
_MIME = re.compile(r"^(?:text|application|image|audio|video|multipart|font|message|model)/"
                   r"[\w.+-]+$")
# a line of source code quoted by a viewer or a grep ("1487:   except OverflowError as error:",
# "    raise ConnectTimeoutError(") is no error the run printed
_SOURCE_LINE = re.compile(r"^\s*\d+[:|]\s|^\s*(?:except|raise|catch|throw|if|elif|"
                          r"else|return|assert|def|class|print|log\w*|console\.\w+|self\.\w+)\b")
_PLACEHOLDER = re.compile(r"<[a-z]+(?:[_ -][a-z]+)+>|<(?:file|path|name|dir|cmd|command|args?|url|"
                          r"n|num|number|line|pattern|query|package)>")
COMMAND_WEIGHT, INSPECT_WEIGHT = 5.5, 4.0  # a command the agent ran; a look around (grep, ls)


@dataclass(frozen=True)
class Anchor:
    text: str
    kind: str
    score: float
    first_seen: int


def _command_texts(message: Message) -> Iterable[str]:
    """Shell command lines the message ran (by the tool table: ``str_replace_editor``'s
    ``command: view`` is no command), and the queries of search calls."""
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        raw = fn.get("arguments") or ""
        try:
            args = json.loads(raw)
        except (ValueError, TypeError):
            continue
        if not isinstance(args, dict):
            continue
        command = call_command(str(fn.get("name") or ""), args)
        if command:
            yield _as_typed(command, args.get("command"))[:MAX_ANCHOR_CHARS]
        query = args.get("query")
        if isinstance(query, str) and query.strip():
            yield query.strip().splitlines()[0][:MAX_ANCHOR_CHARS]


def _as_typed(command: str, raw: object) -> str:
    """The command line as the agent typed it (a tab, two spaces), when the tool table's
    whitespace-normalised key is that line: an anchor is verbatim or useless."""
    if isinstance(raw, str) and raw.strip():
        first = raw.strip().splitlines()[0].strip()
        if " ".join(first.split()) == command:
            return first
    return command


def _message_text(message: Message) -> str:
    text = content_text(message)
    if message.get("role") == "tool":  # a Codex shell call's output: the text, not its JSON
        text = json_output(text)[0]
    if len(text) > SCAN_CHARS:  # bounded per message: identifiers sit at the ends of outputs
        text = text[:SCAN_CHARS // 2] + "\n\n" + text[-SCAN_CHARS // 2:]  # no match spans it
    parts = [text]
    for call in message.get("tool_calls") or []:
        parts += _argument_values(str((call.get("function") or {}).get("arguments") or ""))
    text = "\n\n".join(parts)  # a blank line: no anchor spans two parts
    if "--- " in text or "+++ " in text or "diff --git" in text:
        text = undiff(text)
    return _PRUNE_NOTE.sub("", text) if "(full output" in text else text


def _argument_values(arguments: str) -> list[str]:
    """The values of a call's arguments as they were given, not as JSON escapes them
    (``"src/\\u89e3\\u6790\\u5668.py"`` is ``src/解析器.py``, not ``u5668.py``; a ``\\n`` in
    a file's content is a line break, not an ``n`` before its next word); the raw text when
    it is not JSON."""
    if not arguments.lstrip().startswith(("{", "[", '"')):
        return [arguments] if arguments else []
    try:
        value = json.loads(arguments)
    except ValueError:
        return [arguments]
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, str):
            out.append(item)
        elif isinstance(item, int | float) and not isinstance(item, bool):
            out.append(str(item))
    return out


def carried_anchor(item: str) -> str:
    """The verbatim anchor in a previous index line, without list markers or code quotes.

    Also repairs indexes written before this was fixed ("- - - `x`", a stray trailing "`").
    """
    text = _LIST_DEBRIS.sub("", item.strip())
    if len(text) >= 2 and text[0] == text[-1] == "`" and text.count("`") == 2:
        text = text[1:-1].strip()
    if text.count("`") % 2:  # an unpaired quote is debris; a quoted `part` inside is not
        text = text.strip("`").strip()
    return text[:MAX_ANCHOR_CHARS]


def undiff(text: str) -> str:
    """``text`` with the ``a/``/``b/`` of its diff headers (``--- a/x``, ``+++ b/x``,
    ``diff --git a/x b/x``) left out: they are no part of the paths."""
    return _DIFF_HEADER.sub(lambda m: m.group(1) or f"{m.group(2)}{m.group(3)} ", text)


def _clean(text: str) -> str:
    text = text.strip().rstrip(",;")
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "`'\"":
        text = text[1:-1].strip()
    return text[:MAX_ANCHOR_CHARS]


def _shape(text: str) -> str:
    return _DIGITS.sub("#", text)


# what one text holds: (kind, weight, raw matches) per kind that matched, in scan order
_Found = tuple[tuple[str, float, list[str]], ...]
_LITE_KINDS = ("error", "url")
_ScanKey = tuple[str, str, bool]  # (text, role, scanned in full)


def _ends(text: str, full: bool) -> str:
    """What of a text the heavier kinds read: all of it when ``full``, else its first and last
    lines (an old output's identifiers sit at its ends: the command echo, the result, the
    error)."""
    if full or len(text) <= OLD_HEAD + OLD_TAIL:
        return text
    return text[:OLD_HEAD].rsplit("\n", 1)[0] + "\n\n" + text[-OLD_TAIL:].split("\n", 1)[-1]


def _scan_all(keys: Sequence[_ScanKey]) -> list[_Found]:
    """Candidates in each (text, role, full) text: every pattern over all of it when ``full``;
    else errors and URLs over all of it and the other kinds over its ends (``_ends``). All
    texts at once (``textscan.Joined``: the matches of one finditer per text and pattern)."""
    texts = [text for text, _, _ in keys]
    scoped = [_ends(text, full) for text, _, full in keys]
    spoken = [i for i, (_, role, _) in enumerate(keys) if role != "assistant"]
    joined = {(True, False): Joined(texts)}  # by (every line, not in assistant text)
    found: list[tuple[str, float, list[list[str]]]] = []
    for kind, weight, _ in _PATTERNS:
        lite, prose = kind in _LITE_KINDS, kind in PROSE_KINDS  # prose: not in assistant text
        scope = texts if lite else scoped
        if (lite, prose) not in joined:
            joined[(lite, prose)] = Joined([scope[i] for i in spoken] if prose else scope)
        raws = joined[(lite, prose)].find(_RULES[kind])
        if prose:  # prose quotes errors mid-sentence; the tool output has them whole
            every: list[list[str]] = [[] for _ in keys]
            for i, raw in zip(spoken, raws, strict=True):
                every[i] = raw
            raws = every
        found.append((kind, weight, raws))
    prompts = joined[(True, False)].find((_PROMPT_LINE,))
    out: list[_Found] = []
    for i, (_, role, _) in enumerate(keys):
        bonus = 1.0 if role == "user" else 0.0
        items = [("command", 5 + bonus, prompts[i])] if prompts[i] else []
        items += [(kind, base + bonus, raws[i]) for kind, base, raws in found if raws[i]]
        out.append(tuple(items))
    return out


def _bare_words(path: str) -> bool:
    """A relative path without a file extension ("src/refold", "n/a", "inputting/reading"):
    real only when something other than prose shows it (a call, a tool output)."""
    return not path.startswith(("/", "~", ".")) and "." not in path.rsplit("/", 1)[-1]


def _clean_candidate(raw: str, kind: str) -> str | None:
    text = _clean(raw)
    if kind == "path":  # a sentence's full stop is not part of the path; 116/1 is no path
        text = text.rstrip(".")
        if not _LETTER.search(text.rsplit("/", 1)[-1]) or _MIME.match(text):
            return None
        if _bare_words(text) and min(len(p) for p in text.split("/")) < 2:
            return None  # n/a, w/o, I/O
    elif kind == "error" and _SOURCE_LINE.match(text):
        return None
    elif kind == "command" and _PLACEHOLDER.search(text):
        return None  # "python <script_name>.py" is an instruction's template, not a command
    if len(text) < 3 or _NOISE.match(text) or _CREDENTIAL.search(text):
        return None  # a credential is never worth carrying into the summary
    return text


def _is_observation(messages: Sequence[Message], pos: int) -> bool:
    """A user message that answers a text-action agent's command (SWE-agent, mini-swe-agent
    send a command in a fenced block and get its output back as the next *user* message): it
    is tool output, not the person's words, and earns no "named by the user" credit."""
    if pos == 0 or messages[pos].get("role") != "user":
        return False
    before = messages[pos - 1]
    return (before.get("role") == "assistant" and not before.get("tool_calls")
            and _FENCED.search(content_text(before)) is not None)


def _full_scan_from(messages: Sequence[Message], budget_chars: int) -> int:
    """The first position whose output is scanned for every kind: the newest messages up to
    ``budget_chars`` of text. The index holds at most a few hundred anchors, so past a few
    hundred thousand characters older outputs only contribute what outranks the rest."""
    used = 0
    for pos in range(len(messages) - 1, -1, -1):
        used += len(content_text(messages[pos]))
        if used > budget_chars:
            return pos + 1
    return 0


def extract_anchors(messages: Sequence[Message], *, scan_budget_chars: int = SCAN_BUDGET_CHARS
                    ) -> list[Anchor]:
    """Every candidate anchor in ``messages``, scored; not yet deduplicated by containment.

    Score = kind weight + recency (0..1) + frequency (up to 1.5) + 1 if the user wrote it,
    minus a penalty growing with how many candidates share its *shape* (digits masked): a
    hundred ``pytest -k case17``-like commands are worth less, each, than one unique path;
    minus ``UNREFERENCED_PENALTY`` for what only tool outputs printed and nobody named
    (the file names of an ``ls``, build-log paths). Commands count also when written in
    prose: a fenced block's first line, an inline `` `pytest tests/x.py -k edge` ``.

    Speed: tool calls, user messages and the newest ``scan_budget_chars`` of text are scanned
    for every kind; older tool outputs and assistant text for errors and URLs, and for the
    other kinds only in their first and last lines (``OLD_HEAD``/``OLD_TAIL``). Identical
    texts are scanned once, all texts in one pass per pattern over the lines that can hold a
    match (``textscan``), and raw matches cleaned once.
    """
    best: dict[str, list[Any]] = {}  # text → [kind, score, first seen] of its best mention
    counts: dict[str, int] = {}
    named: set[str] = set()  # named outside tool outputs (a call, the user, the assistant)
    shown: set[str] = set()  # in a tool call or a tool output: no figure of speech
    total = max(1, len(messages))
    cleaned: dict[str, dict[str, str | None]] = {}  # kind → raw match → cleaned (or None)

    def add(raws: Sequence[str], kind: str, weight: float, position: int,
            role: str = "tool") -> None:
        memo = cleaned.setdefault(kind, {})
        score = weight + position / total  # later mentions matter more
        is_named, is_shown = role != "tool", role in ("tool", "call")
        for raw in raws:
            text = memo[raw] if raw in memo else memo.setdefault(raw, _clean_candidate(raw, kind))
            if text is None:
                continue
            counts[text] = counts.get(text, 0) + 1
            if is_named:
                named.add(text)
            if is_shown:
                shown.add(text)
            record = best.get(text)
            if record is None:
                best[text] = [kind, score, position]
            elif record[1] < score:
                record[0], record[1] = kind, score

    full_from = _full_scan_from(messages, scan_budget_chars)
    keys: dict[_ScanKey, int] = {}  # each distinct scan, in order
    steps: list[tuple[int, list[tuple[str, float, str]], str, int]] = []
    scanned: set[int] = set()
    for pos, msg in enumerate(messages):
        if is_summary_message(msg):
            continue  # a previous summary's anchors are carried, not re-extracted from markdown
        speaker = str(msg.get("role"))
        # (command, weight, who): a look around (grep, git diff) is worth less
        commands = [(command, INSPECT_WEIGHT if INSPECT.match(command) else COMMAND_WEIGHT,
                     "call") for command in _command_texts(msg)]
        text = _message_text(msg)
        if speaker in ("user", "assistant"):
            for pattern in (_FENCED, _INLINE):
                for found_command in pattern.findall(content_text(msg)[:SCAN_CHARS]):
                    command = found_command.strip()
                    commands.append((command, INSPECT_WEIGHT if INSPECT.match(command)
                                     else COMMAND_WEIGHT, speaker))
        role = "tool" if _is_observation(messages, pos) else speaker  # who vouches for it
        key = hash(text)
        scan = -1
        if text and not (key in scanned and role == "tool"):  # identical outputs: read once
            scanned.add(key)
            scan = keys.setdefault((text, role, pos >= full_from or role == "user"), len(keys))
        steps.append((pos, commands, role, scan))
    scans = _scan_all(list(keys))
    for pos, commands, role, scan in steps:
        for command, weight, who in commands:
            add((command,), "command", weight, pos, who)
        for kind, weight, raws in scans[scan] if scan >= 0 else ():
            add(raws, kind, weight, pos, role)
    found = {text: Anchor(text, kind, score, first) for text, (kind, score, first) in best.items()}
    return _scored(found, counts, named, shown)


def _scored(found: dict[str, Anchor], counts: dict[str, int], named: set[str],
            shown: set[str]) -> list[Anchor]:
    shapes: dict[str, int] = {}
    for text in found:
        shape = _shape(text)
        shapes[shape] = shapes.get(shape, 0) + 1
    return [Anchor(a.text, a.kind, a.score + min(counts[a.text], 5) * 0.3
                   - 1.5 * math.log2(shapes[_shape(a.text)])
                   - _unreferenced(a, named, shown), a.first_seen)
            for a in found.values()]


def _unreferenced(anchor: Anchor, named: set[str], shown: set[str]) -> float:
    """The penalty for a name only tool outputs printed: nobody ran, wrote or asked for it.
    Printed again by later outputs (pip's cache and site-packages paths, a DTD URL in every
    page) it is still noise: repetition only earns back part of it. Errors are exempt. Words
    only prose joined with a slash ("inputting/reading", "start/end") cost more: no call and
    no output shows such a path, so it is most likely none."""
    if anchor.kind == "error":
        return 0.0
    if anchor.text not in named:
        return UNREFERENCED_PENALTY
    if anchor.kind == "path" and anchor.text not in shown and _bare_words(anchor.text):
        return PROSE_PATH_PENALTY
    return 0.0


ENTRY_TOKENS = 2  # an entry's quotes and separator in the packed index (summary.py)
LENGTH_COST = 0.015  # score per character past 40: four short anchors outweigh one echo blob


def _value(anchor: Anchor) -> float:
    return anchor.score - LENGTH_COST * max(0, len(anchor.text) - 40)


CONTAINER_MARGIN = 2.0  # a container this much below the anchor it holds still stands in


def _containers(pool: Sequence[Anchor]) -> dict[str, Anchor]:
    """For an anchor held verbatim in a longer one ranked close to it (``fields.py`` in
    ``open src/pkg/fields.py 1474``), the longer one: it keeps both for one entry."""
    joined = "\n".join(a.text for a in pool)
    out: dict[str, Anchor] = {}
    for anchor in pool:
        if joined.count(anchor.text) < 2:
            continue  # the common case, at C speed
        held_by = [c for c in pool if c is not anchor and anchor.text in c.text
                   and _value(c) >= _value(anchor) - CONTAINER_MARGIN]
        if held_by:
            out[anchor.text] = max(held_by, key=lambda c: (_value(c), -len(c.text)))
    return out


def select_anchors(candidates: Iterable[Anchor], *, budget_tokens: int,
                   count_text: Callable[[str], int], carried: Sequence[str] = (),
                   covered: str = "") -> list[str]:
    """Rank, drop ones contained in a better anchor, and keep what fits ``budget_tokens``.

    ``carried`` anchors (from a previous summary's index) compete too, ranked just below fresh
    ones of equal kind, so iterative compaction keeps old identifiers while budget allows.
    Anchors already verbatim in ``covered`` (the summary body) are kept there for free and
    left out of the index, so the budget goes to identifiers that would otherwise be lost.
    """
    fresh = list(candidates)
    known = {a.text for a in fresh}
    olds = dict.fromkeys(c for c in (carried_anchor(a) for a in carried) if len(c) >= 3)
    pool = fresh + [Anchor(a, "carried", 4.0, -1) for a in olds if a not in known]
    pool.sort(key=lambda a: (-_value(a), len(a.text), a.text))
    containers = _containers(pool[:budget_tokens // 3 + 64])
    chosen: list[Anchor] = []
    costs: dict[str, int] = {}
    used = 0
    for anchor in pool:
        if used + 4 > budget_tokens:
            break
        for pick in (containers.get(anchor.text), anchor):
            if pick is None or pick.text in covered or any(pick.text in c.text for c in chosen):
                continue
            cost = costs[pick.text] = count_text(pick.text) + ENTRY_TOKENS
            if used + cost > budget_tokens:
                continue
            # what the new pick contains is carried by it: its cost comes back
            inside = [c for c in chosen if c.text in pick.text]
            chosen = [c for c in chosen if c.text not in pick.text] + [pick]
            used += cost - sum(costs[c.text] for c in inside)
            break
    # present in a stable, readable order: by kind group, then first appearance
    order = {"error": 0, "command": 1, "path": 2, "url": 3, "id": 4, "version": 5, "number": 6,
             "config": 7, "carried": 8}
    chosen.sort(key=lambda a: (order.get(a.kind, 9), a.first_seen, a.text))
    return [a.text for a in chosen]
