"""The builtin summarizer: deterministic, offline, and useful on its own — also when iterated.

It reads the replaced span the way a careful colleague would skim it and writes the template:
- Goal: the original overall request (kept from the previous summary) plus the current one;
  short nudges ("Next: X", "continue", "ok") are instructions, not goals — they go to progress.
- Done: outcomes, not calls (``activity``): changes made, the latest result per command (a
  settled failure noted as "fixed: …"), and the assistant's own statements of completed work
  unless they merely restate a run. Reads and inspections are left out; the 20 most recent.
- Blocked: commands whose latest run failed. A later success of the same command (or an
  unfiltered run of the same program on the same target or on everything) settles it, also
  across compactions: the previous summary's items are parsed back (``activity.item_key``).
- Relevant files: real paths only, one line per path with the union of what was done to it,
  most recently touched first (what the agent was just working on matters most; a bare file
  name that matches no full path comes after the paths), 15 at most.
- Next steps: the open items of the last todo list, plans the assistant stated after its last
  action in the span, the still-failing commands, an unanswered request; the generic line only
  when nothing is known.
- Critical context: what the user asked to remember and the config values they gave (never a
  sentence that mentions a credential), the notes memory providers asked to keep
  (``SummaryRequest.provider_notes``, one line each, "From memory provider: …", clipped to
  ``NOTE_CHARS``; reference text like the rest), plus ONE running bookkeeping line for the
  replaced messages and ONE for the tools used, summed over every compaction.
The body is cut to the token budget by dropping the oldest items of the longest sections.

Same input → same bytes: no clock, no randomness, no dict-order surprises.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate, pairwise

from refold.compaction.activity import (
    Activity,
    as_tool_turns,
    command_shape,
    is_path_like,
    item_key,
    resolves,
    scan_activity,
)
from refold.compaction.anchors import undiff
from refold.compaction.summarizer import SummaryDraft, SummaryRequest
from refold.compaction.summary import (
    ACK_TEXTS,
    SummarySections,
    is_summary_message,
    parse_body,
    render_body,
)
from refold.compaction.tally import LABELS, Tally, label_prefixes
from refold.compaction.textscan import Caseless, Joined, Rule
from refold.messages.model import Message, content_text, is_tool_images

ITEM_CHARS = 300
NOTE_CHARS = 400  # one memory provider note in the summary
_SENTENCE = re.compile(r"(?<=[。！？；])|(?<=[.!?;])\s+|\n+")
# the same splits in a text without 。！？； — led by a character class, so the regex engine
# skips to whitespace instead of trying two lookbehinds at every position
_LATIN_SENTENCE = re.compile(r"\s(?:(?<=[.!?;]\s)\s*|(?<=\n)\n*)")
_CJK_STOPS = ("。", "！", "？", "；")
# case-insensitive word patterns, searched only when the text holds one of their words
# (``textscan.Caseless``: re.IGNORECASE alone scans at a few MB/s)
_CONSTRAINT = Caseless(
    r"must|mustn't|never|always|don't|do not|should(?:n't)?|avoid|prefer|only|without|"
    r"make sure|please use|no more than|at most|at least|keep",
    r"必须|不要|别|务必|总是|只能|只用|请用|不能|不得|尽量|保持|しないで|してください|必ず|だけ|禁止")
_DONE = Caseless(
    r"done|fixed|created|added|updated|implemented|wrote|removed|renamed|refactored|"
    r"passes|passed|installed|deployed|merged|completed|resolved|changed|moved",
    r"已完成|完成了|已经|修复了|已修复|添加了|创建了|更新了|通过了|完了|修正しました|追加しました|作成しました")
# a sentence with a completion word that says it did not happen ("X could not be written, and
# publishing still needs twine installed") is no completion
# … nor one that announces it ("Let's test if our fix resolved it:", "I'll verify it's fixed")
_NOT_DONE = re.compile(r"\b(?:could(?: not|n't)|cannot|can't|unable to|did(?: not|n't)|not yet|"
                       r"still needs?|(?:has|have)(?: not|n't) been|was(?: not|n't)|"
                       r"were(?: not|n't)|let(?:'s| us| me(?! know))|I'll|I will|we'll|"
                       r"I'm going to|I am going to)\b", re.IGNORECASE)
_DECISION = Caseless(
    r"decided|decide|chose|choose|instead of|going with|will use|we'll use|switch(?:ed)? to|"
    r"because|rather than|opted", r"决定|改用|选择|因为|而不是|決定|代わりに|ため")
_NEXT = Caseless(
    r"next|then I'll|then we|todo|remaining|still need|left to|afterwards|follow[- ]up|"
    r"will now|I'll|I will|I'm going to|I am going to|let me|plan to",
    r"下一步|接下来|还需要|然后|待办|我打算|我会|我将|打算|计划|次に|残り|これから|つもり|予定")
_REMEMBER = Caseless(r"remember|note that|keep in mind|important",
                     r"记住|注意|记得|覚えて|注意して")
# a decision a user states ("We decided to pin numpy to 1.26.4"): narrower than an assistant's
# (its "because" is a user's every explanation)
_USER_DECISION = Caseless(
    r"decided|decide to|we chose|going with|go with|we'll use|we will use|let's use|"
    r"switch(?:ed)? to|instead of|rather than|opted|settled on",
    r"决定|改用|而不是|定了|決定|代わりに|にしました")
_PYTEST_E = re.compile(r"^E\s+")
_NUDGE = re.compile(
    r"^(?:please\s+)?(?:(?:next|continue|go on|go ahead|keep going|carry on|proceed|do it|"
    r"try again|ok(?:ay)?|yes|yep|yeah|sure|thanks?|thank you|great|good|nice|cool|perfect|lgtm|"
    r"sounds good|looks good)(?:\b|(?=[:：,，.!！。 ?？]))"
    # words that begin requests too ("fine-tune", "right-align", "y axis"): only alone
    r"|(?:k|y|fine|alright|all right|right)(?=\s*[:：,，.!！。?？]|\s*$)"
    r"|(?:继续|好的?|好吧|行|嗯|对|是的?|可以|没问题|下一个|下一步|次へ?|続けて|お願いします|はい|"
    r"いいよ|了解|네|계속)(?=[:：,，.!！。 ?？吧]|$))"
    r"\s*吧?[:：,，.!！。?？]*\s*", re.IGNORECASE)
# a reply of a few symbols or letters ("k", "👍", "?!"): no request in it
_NO_WORDS = re.compile(r"^\W{0,3}$|^[a-z]{1,2}\W*$", re.IGNORECASE)
# a config value the user gave: the alternatives of one IGNORECASE pattern, each tried only when
# the text has what it needs ("=", ":" and two digits, "port ", 端口)
_CONFIG_ASSIGN = re.compile(r"\b[A-Z][A-Z0-9_]{2,}=\S+", re.IGNORECASE)
_CONFIG_HOST = re.compile(r"\b(?:localhost|[\w-]+(?:\.[\w-]+)+):\d{2,5}\b", re.IGNORECASE)
_COLON_DIGITS = re.compile(r":\d\d")
_CONFIG_PORT = Caseless(r"port \d{2,5}")
_CONFIG_CN_PORT = re.compile(r"端口\s*\d{2,5}")
_SECRET = re.compile(r"password|passwd|secret|token|api[_-]?key|credential|bearer|密码|口令",
                     re.IGNORECASE)
_ERRORISH = re.compile(r"\b\w*(?:Error|Exception)\b|^E\s|\bFAILED\b|\b[Ee]rror:")
_MENTION_EXT = (r"\.(?:py|js|ts|tsx|go|rs|java|rb|php|c|h|cpp|json|ya?ml|toml|md|sql|sh|html|"
                r"css)\b")
# a path mentioned in prose: one with a folder, or a bare file name of a common kind; run as
# its two parts over all messages at once (``textscan``: the same matches, far faster)
_PATH_MENTION = (  # no space in either (``textscan``: ``spaceless``)
    Rule(re.compile(r"(?<![\w/.:-])(?:~|\.{1,2})?/?(?:[\w.@+-]++/)+[\w.@+-]+\.\w{1,10}\b"),
         "/", spaceless=True),  # ``++``: as in ``anchors._PATH_PARTS``
    # (a bare name, not the end of a URL or a dotted name: ``sect_C.7.6.24.html`` is no
    # ``24.html``)
    Rule(re.compile(r"(?<![\w/.:-])[\w-]+" + _MENTION_EXT), re.compile(_MENTION_EXT),
         spaceless=True))
_FILE_ITEM = re.compile(r"^`([^`]+)`")
_ACTIONS = ("modified", "read", "mentioned")
_CAPS = {"goal": 3, "constraints": 12, "done": 20, "in_progress": 3, "blocked": 10,
         "decisions": 12, "files": 15, "next_steps": 8, "critical": 12}
_OPEN_TODO = ("pending", "in_progress", "in-progress", "open", "todo", "blocked")


# a list item's own marker (the user wrote the constraints as a list): the summary's item
# has one already ("- - Never push to main" before)
_LIST_MARK = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+")
_HEADING = re.compile(r"\s*#{1,6}\s")  # a markdown heading ("## Important Rules"): no note
_FENCED_BLOCK = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)


def _short(text: str, limit: int = ITEM_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


# the sentence split with its separators kept (a group), so where each piece starts is counted
_SENTENCE_CUT = re.compile(f"({_SENTENCE.pattern})")
# where ``_LATIN_SENTENCE`` splits, found from the character before: a stop, whose whitespace
# run it is (the match without the stop), or a newline that starts a run of newlines (a stop
# before one is met first). Stops and newlines are fewer than the whitespace it is led by.
_LATIN_CUT = re.compile(r"[.!?;\n](?:(?<=\n)\n*|\s+)")
Pieces = tuple[list[str], list[int]]  # a text's sentence split, and where each piece starts


def _pieces(text: str) -> Pieces:
    """The pieces ``_SENTENCE.split(text)`` returns (``_LATIN_SENTENCE``'s without a Chinese
    or Japanese stop), and where each starts."""
    if any(c in text for c in _CJK_STOPS):
        parts = _SENTENCE_CUT.split(text)  # piece, separator, piece, …, piece
        ends = list(accumulate(map(len, parts)))
        return parts[::2], [0, *ends[1::2]]
    pieces, starts, pos = [], [], 0
    for cut in _LATIN_CUT.finditer(text):
        end = cut.start() if text[cut.start()] == "\n" else cut.start() + 1
        pieces.append(text[pos:end])
        starts.append(pos)
        pos = cut.end()
    pieces.append(text[pos:])
    starts.append(pos)
    return pieces, starts


Placed = tuple[int, str]  # a sentence and where it starts in its text


def _sentences(pieces: Pieces, starts: Sequence[list[int] | None] = (None,)) -> list[Placed]:
    """Sentences of a text (its ``_pieces``), each with where it starts; fragments cut inside
    brackets ("…; the table was removed).") are dropped rather than quoted out of context.
    Only the ones in a piece where one of ``starts`` lies: places in the text where a
    pattern's match can start (``Caseless.starts``, ``hits``; None: anywhere). A sentence is
    a slice of the text, so one holding none of them cannot match: it is not even cut out."""
    texts, at = pieces
    chosen: Iterable[int] = range(len(texts))
    if all(found is not None for found in starts):
        chosen = sorted({bisect_right(at, p) - 1 for found in starts if found for p in found})
    out: list[Placed] = []
    for k in chosen:
        piece = texts[k]
        sentence = piece.strip()
        if len(sentence) > 3 and sentence.count("(") == sentence.count(")") \
                and sentence.count("（") == sentence.count("）"):
            out.append((at[k] + len(piece) - len(piece.lstrip()), sentence))
    return out


def _holds(hits: list[int], place: Placed) -> bool:
    """Whether a sentence holds one of ``hits`` (``Caseless.hits`` in its text)."""
    i = bisect_left(hits, place[0])
    return i < len(hits) and hits[i] < place[0] + len(place[1])


def _finder(words: Caseless, text: str) -> tuple[list[int] | None, Callable[[Placed], bool]]:
    """Where in ``text`` to look, and whether a sentence of it matches ``words``. In an ASCII
    text: its hits, and whether the sentence holds one — a sentence lies between whitespace
    (or ends after 。！？；), which no word crosses and ``\\b`` reads as a string's ends, so it
    matches exactly where its text does. Another text: anywhere, and the sentence's search."""
    hits = words.hits(text)
    if hits is None:
        return None, lambda place: words.search(place[1]) is not None
    return hits, lambda place: _holds(hits, place)


def _found(words: Caseless, text: str, hits: list[int] | None) -> bool:
    """Whether ``words`` matches ``text`` (``_finder``'s hits, or None)."""
    return bool(hits) if hits is not None else words.search(text) is not None


def _config_starts(text: str) -> list[int] | None:
    """Where ``_has_config`` finds what it needs in an ASCII text ("=", ":" and two digits,
    "port "), as ``Caseless.starts``; None for any other text (端口)."""
    if not text.isascii():
        return None
    out = [found.start() for found in _COLON_DIGITS.finditer(text)]
    out += _CONFIG_PORT.starts(text) or []
    at = text.find("=")
    while at >= 0:
        out.append(at)
        at = text.find("=", at + 1)
    return out


def _has_config(text: str) -> bool:
    """A config value (``API_URL=…``, ``host:8080``, ``port 5432``): what one IGNORECASE
    alternation of the four finds, each alternative tried only when it can match."""
    return (("=" in text and _CONFIG_ASSIGN.search(text) is not None)
            or (_COLON_DIGITS.search(text) is not None and _CONFIG_HOST.search(text) is not None)
            or _CONFIG_PORT.search(text) is not None
            or ("端口" in text and _CONFIG_CN_PORT.search(text) is not None))


def is_nudge(text: str) -> bool:
    """A short steer ("Next: tests/a.py.", "继续：测试。", "ok") — progress, not a goal."""
    text = " ".join(text.split())
    if _NO_WORDS.match(text):
        return True  # a short request ("Fix flaky tests", "修复登录页面的bug") is a goal
    match = _NUDGE.match(text)
    return match is not None and len(text) - match.end() <= 40


_FENCE_OPEN = re.compile(r"```[\w-]*[ \t]*\n")


def observations(messages: Sequence[Message]) -> set[int]:
    """``id()`` of the user messages that are a text-action agent's observations.

    SWE-agent and mini-swe-agent send each command in a fenced block of a plain assistant
    message and get its output back as the next *user* message: that is tool output, not a
    request. Decided for the whole transcript (at least 3 such turns and 80% of the plain
    assistant turns), so a chat where the assistant once shows a code block keeps its asks.
    """
    found: list[int] = []
    plain = 0
    for before, after in pairwise(messages):
        if before.get("role") != "assistant" or before.get("tool_calls"):
            continue
        text = content_text(before)
        if not text.strip():
            continue
        plain += 1
        if after.get("role") == "user" and "```" in text and _FENCE_OPEN.search(text):
            found.append(id(after))
    return set(found) if len(found) >= 3 and len(found) >= 0.8 * plain else set()


# what an agent harness (Claude Code, Codex) writes into the user's turn: a block of it says
# nothing the user said. A background task's notice, Claude Code's own compaction summary and
# Codex's AGENTS.md preamble are its words as a whole; a slash command is the user's words only
# through its arguments. Codex opens every session with ``<environment_context>`` (the cwd, the
# shell) and ``<user_instructions>`` as user messages, and notes ``<turn_aborted>`` the same way.
_HARNESS_BLOCK = re.compile(r"<(system-reminder|local-command-caveat|local-command-stdout|"
                            r"local-command-stderr|command-message|command-name|command-args|"
                            r"environment_context|user_instructions|turn_aborted)>"
                            r".*?</\1>\s*", re.DOTALL)
DEMONSTRATION = "Here is a demonstration of how to correctly accomplish this task."


def is_demonstration(message: Message) -> bool:
    """SWE-agent's in-context demonstration: another task's worked example, sent as a user
    message (no goal of this session, and none of its identifiers this session's)."""
    return message.get("role") == "user" and content_text(message).lstrip().startswith(
        DEMONSTRATION)


_HARNESS_WHOLE = ("<task-notification>", "This session is being continued from a previous "
                  "conversation", "Base directory for this skill:",  # a skill's text, loaded
                  "# AGENTS.md instructions for ",
                  # SWE-agent's in-context demonstration: another task's worked example
                  DEMONSTRATION)
DEMONSTRATION_END = "--- END OF DEMONSTRATION ---"


def after_demonstration(text: str) -> str:
    """What follows SWE-agent's demonstration in its message: its templates send the worked
    example of another task and then this session's own task ("We're currently solving the
    following issue… ISSUE: …") in one user message, so skipping the message whole lost the
    task; "" when nothing follows it."""
    end = text.find(DEMONSTRATION_END)
    return text[end + len(DEMONSTRATION_END):].strip() if end >= 0 else ""
_COMMAND_NAME = re.compile(r"<command-name>\s*(.*?)\s*</command-name>", re.DOTALL)
_COMMAND_ARGS = re.compile(r"<command-args>\s*(.*?)\s*</command-args>", re.DOTALL)


def _user_text(message: Message) -> str:
    """What the user said in a user message: without the blocks an agent harness adds
    (``<system-reminder>``, ``<local-command-stdout>``…); a slash command with arguments as
    ``/name arguments``; "" for a message that is all harness (a command without arguments,
    ``<task-notification>``, Claude Code's compaction summary, tool results' images)."""
    if is_tool_images(message):
        return ""
    text = content_text(message)
    head = text.lstrip()
    if head.startswith(_HARNESS_WHOLE):
        return after_demonstration(text) if head.startswith(DEMONSTRATION) else ""
    if "</" not in text:
        return text
    args = _COMMAND_ARGS.search(text)
    name = _COMMAND_NAME.search(text)
    rest = _HARNESS_BLOCK.sub("", text).strip()
    if args is not None and args.group(1):
        said = f"{name.group(1)} {args.group(1)}" if name is not None else args.group(1)
        return f"{said}\n\n{rest}" if rest else said
    return rest


def _real_users(messages: Sequence[Message], skip: set[int] | None = None) -> list[Message]:
    return [m for m in messages if m.get("role") == "user" and not is_summary_message(m)
            and (not skip or id(m) not in skip) and _user_text(m).strip()]


def _dedup(items: Sequence[str], cap: int) -> list[str]:
    """Unique items, a repeat moving to its latest position; the ``cap`` most recent."""
    seen: dict[str, None] = {}
    for item in items:
        if item:
            seen.pop(item, None)
            seen[item] = None
    return list(seen)[-cap:]


def _strip_label(item: str, prefixes: Sequence[str]) -> str | None:
    for prefix in prefixes:
        if item.startswith(prefix + ":") or item.startswith(prefix + "："):
            return item[len(prefix) + 1:].strip()
    return None


def _labelled(item: str, prefixes: Sequence[str]) -> bool:
    return any(item.startswith((p + " (", p + ":", p + "：", p + " `")) for p in prefixes)


GOAL_CHARS = 600  # a goal item: the task's substance (an issue's title and statement)
# a task block an agent harness wraps the person's ask in, among its own instructions
# (OpenHands' <issue_description>, SWE-agent's <pr_description>, <problem_statement>, <task>)
_TASK_BLOCK = re.compile(r"<((?:issue|pr|problem|task)[\w-]*)>\s*(.+?)\s*</\1>",
                         re.DOTALL | re.IGNORECASE)


def task_text(text: str) -> str:
    """The substance of a request: the task block a harness put it in (the issue's title and
    statement, not "<uploaded_files> … I've uploaded a C code repository…"), else the text."""
    if "</" not in text:
        return text
    found = _TASK_BLOCK.search(text)
    return found.group(2) if found and len(found.group(2)) >= 40 else text


def _ask(message: Message) -> str:
    return _short(task_text(_user_text(message)), GOAL_CHARS)


def _goal(previous: SummarySections, users: Sequence[Message], labels: dict[str, str]
          ) -> list[str]:
    current_labels = label_prefixes("current") + label_prefixes("latest")
    originals = [g for g in previous.get("goal")
                 if _strip_label(g, current_labels) is None and not is_nudge(g)][:1]
    previous_current = [c for g in previous.get("goal")
                        if (c := _strip_label(g, current_labels)) and not is_nudge(c)]
    asks = [_short(task_text(_user_text(m)), GOAL_CHARS if k == 0 else ITEM_CHARS)
            for k, m in enumerate(users)]
    asks = [a for a in asks if not is_nudge(a)]
    if not originals and asks:
        originals = asks[:1]
    latest = asks[-1] if asks else (previous_current[-1] if previous_current else "")
    if latest and latest not in originals:
        return [*originals, f"{labels['current']}: {latest}"]
    return originals


STATEMENT_SCAN_CHARS = 100_000  # newest assistant text read for statements (about 25K tokens)


Split = Callable[[str], Pieces]  # ``_pieces``, maybe memoized


def _statements(turns: Sequence[Message], skip: set[int], split: Split = _pieces
                ) -> dict[str, list[tuple[int, str]]]:
    """Sentences of the assistant (decisions, plans, completions) and user notes, by position
    (not of a text-action agent's observations, ``skip``).

    Speed: a message none of the patterns matches as a whole is not split into sentences
    (the same result), and in one that is, only the sentences where a pattern can match are
    tried (``_sentences``); only the newest ``STATEMENT_SCAN_CHARS`` of assistant text are read —
    the sections keep the most recent items only (``_CAPS``), and every user message is read.
    """
    found: dict[str, list[tuple[int, str]]] = {"decisions": [], "next_steps": [], "done": [],
                                               "critical": []}
    said = (("decisions", _DECISION), ("next_steps", _NEXT), ("done", _DONE))
    budget = STATEMENT_SCAN_CHARS
    picked: list[tuple[int, str, str, list[tuple[list[int] | None, Callable[[Placed], bool]]]]] \
        = []
    for pos in range(len(turns) - 1, -1, -1):
        msg = turns[pos]
        role = msg.get("role")
        if role not in ("user", "assistant") or id(msg) in skip or is_summary_message(msg):
            continue
        text = content_text(msg) if role == "assistant" else _user_text(msg)
        if role == "assistant":
            if budget <= 0:
                continue
            budget -= len(text)
            finders = [_finder(p, text) for _, p in said]
            if not any(_found(p, text, at) for (_, p), (at, _) in zip(said, finders,
                                                                       strict=True)):
                continue
        else:
            finders = [_finder(_REMEMBER, text), _finder(_USER_DECISION, text)]
            if not (_found(_REMEMBER, text, finders[0][0])
                    or _found(_USER_DECISION, text, finders[1][0]) or _has_config(text)):
                continue
        picked.append((pos, str(role), text, finders))
    for pos, role, text, finders in reversed(picked):
        if role == "user":
            (at, remembers), (decided_at, decides) = finders
            for place in _sentences(split(text), (at, decided_at, _config_starts(text))):
                sentence = place[1]
                if _SECRET.search(sentence) or _HEADING.match(sentence):
                    continue  # never carry a credential along
                if decides(place):  # the user's own decision: a key decision
                    found["decisions"].append((pos, _short(sentence)))
                elif remembers(place) or _has_config(sentence):
                    found["critical"].append((pos, _short(sentence)))
            continue
        for place in _sentences(split(text), [at for at, _ in finders]):
            for (key, _), (_, matches) in zip(said, finders, strict=True):
                if matches(place):
                    if key != "done" or not _NOT_DONE.search(place[1]):
                        found[key].append((pos, _short(place[1])))
                    break
    return found


def _constraints(previous: SummarySections, users: Sequence[Message],
                 split: Split = _pieces) -> list[str]:
    """From every user message seen so far (the head's first request too)."""
    fresh: list[str] = []
    for msg in users:  # (a code block's comments are no constraints: "# replace only the first")
        text = _FENCED_BLOCK.sub("\n", _user_text(msg)) if "```" in str(msg.get("content")) \
            else _user_text(msg)
        at, matches = _finder(_CONSTRAINT, text)
        if _found(_CONSTRAINT, text, at):  # none in the whole message: none in a sentence
            fresh += [_short(_LIST_MARK.sub("", place[1])) for place in
                      _sentences(split(text), (at,)) if matches(place)]
    return _dedup(list(previous.get("constraints")) + fresh, _CAPS["constraints"])


def _progress(previous: SummarySections, activity: Activity,
              statements: list[tuple[int, str]]) -> tuple[list[str], list[str]]:
    """Done and Blocked, reconciled with the previous summary's lists."""
    outcomes = list(activity.outcomes.values())
    keys = {o.key for o in outcomes}
    successes = [o.key for o in outcomes if o.ok and o.tool == "command"]
    blocked_old: list[str] = []
    for item in previous.get("blocked"):
        key = item_key(item)
        if key is None:
            blocked_old.append(item)
            continue
        match = next((o for o in outcomes if o.key == key), None)
        if match is not None and match.ok and not match.earlier_error:
            match.earlier_error = _short(item.split("→" if "→" in item else "->", 1)[-1], 120)
        if key not in keys and not any(resolves(s, key) for s in successes):
            blocked_old.append(item)
    done_old = [i for i in previous.get("done") if item_key(i) not in keys]
    covered = sorted({t for o in outcomes if o.ok and o.tool == "command"
                      for t in command_shape(o.key)[1]})  # unique: the check is per statement
    said = [(p, t) for p, t in statements if not any(c in t for c in covered)]  # restatements
    fresh: list[tuple[int, str]] = [(o.position, o.render()) for o in outcomes if o.ok] + said
    done = _dedup(done_old + [t for _, t in sorted(fresh)], _CAPS["done"])
    blocked = _dedup(blocked_old + [o.render() for o in outcomes if not o.ok], _CAPS["blocked"])
    return done, blocked


def _in_progress(previous: SummarySections, turns: Sequence[Message], labels: dict[str, str],
                 users: Sequence[Message], midway: int = 0) -> list[str]:
    """The latest nudge and the last step; with ``midway`` (``SummaryRequest.request_midway``)
    first a line saying the request just before the summary came during this work, so it
    does not read as a request nobody has started on."""
    items: list[str] = []
    if midway:
        items.append(labels["midway"].format(n=midway, m=len(turns)))  # (turns as given)
    if users and is_nudge(_user_text(users[-1])):
        items.append(f"{labels['instruction']}: {_short(_user_text(users[-1]), 160)}")
    # (not an earlier summary, an assistant message when it was re-compacted, nor the
    # acknowledgement after one: in a tool loop of calls without text, those were the last
    # text an assistant message held, and "Last assistant step" quoted the summary)
    last = next((m for m in reversed(turns) if m.get("role") == "assistant"
                 and content_text(m).strip() and not is_summary_message(m)
                 and content_text(m).strip() not in ACK_TEXTS), None)
    if last is not None:
        items.append(f"{labels['last_step']}: {_short(content_text(last), 240)}")
    return items or list(previous.get("in_progress"))[-_CAPS["in_progress"]:]


def _files(previous: SummarySections, activity: Activity, turns: Sequence[Message],
           prefix_users: Sequence[Message], labels: dict[str, str]) -> list[str]:
    """One line per real path (a relative one joined to its full path), union of actions,
    most recently touched first, bounded (modified files kept first)."""
    in_span = {id(m) for m in turns}
    earlier = [(-1, m) for m in prefix_users if id(m) not in in_span]
    spoken = [(pos, content_text(msg) if msg.get("role") == "assistant" else _user_text(msg))
              for pos, msg in [*earlier, *enumerate(turns)]
              if msg.get("role") in ("user", "assistant") and not is_summary_message(msg)]
    # a diff's headers name its files without their ``a/``/``b/`` (as the anchors read them)
    spoken = [(pos, undiff(text) if "--- " in text or "+++ " in text or "diff --git" in text
               else text) for pos, text in spoken]
    mentioned = Joined([text for _, text in spoken]).find(_PATH_MENTION)
    for (pos, _), mentions in zip(spoken, mentioned, strict=True):
        for mention in mentions:
            activity.touch(mention, "mentioned", pos)
    words = {labels_[a]: a for labels_ in LABELS.values() for a in _ACTIONS}
    merged: dict[str, tuple[int, set[str]]] = {  # path → (last touched, actions)
        path: (pos, set(actions)) for path, (pos, actions) in activity.files.items()}
    for item in previous.get("files"):
        found = _FILE_ITEM.match(item)
        path = found.group(1) if found else ""
        if not is_path_like(path):
            continue
        acts = re.sub(r"\([^)]*\)", "", item.split("—", 1)[-1]).split(",")
        pos, actions = merged.get(path, (-2, set()))  # before the span
        merged[path] = (pos, actions | {words[a.strip()] for a in acts if a.strip() in words})
    # a relative path (``lib/x.ex``, ``./lib/x.ex``, a bare ``x.ex``) is the one path that ends
    # with it at a "/": the longest first, so ``x.ex`` finds ``/p/lib/x.ex``, not also
    # ``lib/x.ex``
    for path in sorted((p for p in merged if not p.startswith(("/", "~", "../"))),
                       key=len, reverse=True):
        tail = "/" + path.removeprefix("./")
        full = [p for p in merged if p.endswith(tail) and p != path]
        if len(full) == 1:
            pos, actions = merged.pop(path)
            at, held = merged[full[0]]
            merged[full[0]] = (max(pos, at), held | actions)
    # the most recently touched first, bare names (no full path found) last; over the cap
    # what was only read or named goes before what the work changed, the oldest first (as in
    # ``_fit``)
    ranked = sorted(merged.items(), key=lambda kv: ("/" not in kv[0], -kv[1][0]))
    kept = {path for path, _ in sorted(ranked, key=lambda kv: (
        "/" not in kv[0], "modified" not in kv[1][1], -kv[1][0]))[:_CAPS["files"]]}
    return [f"`{path}` — " + ", ".join(labels[a] for a in _ACTIONS if a in acts)
            for path, (_, acts) in ranked if path in kept]


def _drop_at(key: str, items: list[str], language: str) -> int:
    """Which item of a section a tight budget drops first: the oldest, the first (files: the
    oldest that the work did not change, the last of them; else the last)."""
    if key != "files":
        return 0
    modified = LABELS.get(language, LABELS["en"])["modified"]
    return next((i for i in range(len(items) - 1, -1, -1)
                 if modified not in items[i].split(" — ", 1)[-1].split(", ")), len(items) - 1)


def _next_steps(previous: SummarySections, activity: Activity, plans: list[tuple[int, str]],
                blocked: list[str], turns: Sequence[Message], labels: dict[str, str],
                users: Sequence[Message]) -> list[str]:
    generated = label_prefixes("todo") + label_prefixes("resolve") + label_prefixes("answer")
    continues = {lab["continue"] for lab in LABELS.values()}
    old = [i for i in previous.get("next_steps") if i not in continues]
    if activity.todos is not None:
        todos = [f"{labels['todo']} ({status}): {_short(text, 200)}"
                 for status, text in activity.todos if status.lower() in _OPEN_TODO]
    else:
        todos = [i for i in old if _labelled(i, label_prefixes("todo"))]
    # a plan stated before the span's last tool call is being (or was) carried out already
    last_action = max((i for i, m in enumerate(turns) if m.get("tool_calls")), default=-1)
    stated = [t for p, t in plans if p > last_action][-3:]
    if last_action < 0 and not stated:
        stated = [i for i in old if not _labelled(i, generated)]
    fixes = [f"{labels['resolve']} `{key}`" for i in blocked if (key := item_key(i))][-4:]
    items = todos + stated[-3:] + fixes
    if users:  # nothing at all after it in the span: the request is still open
        after = turns[max(i for i, m in enumerate(turns) if m is users[-1]) + 1:]
        if not any(m.get("role") == "assistant" for m in after):
            items.append(f"{labels['answer']}: {_short(_user_text(users[-1]), 200)}")
    return _dedup(items, _CAPS["next_steps"]) or [labels["continue"]]


def _critical(previous: SummarySections, notes: list[tuple[int, str]], blocked: list[str],
              tally: Tally, labels: dict[str, str], provider_notes: Sequence[str] = ()
              ) -> list[str]:
    """User notes, memory provider notes and still-relevant old items, deduplicated (the
    newest last, so the cap keeps them); bookkeeping summed into 2 lines."""
    blocked_text = "\n".join(blocked)
    kept = [i for i in previous.get("critical") if not tally.absorb(i)
            and (not _ERRORISH.search(i) or _PYTEST_E.sub("", i) in blocked_text)]
    from_providers = [f"{labels['provider']}: {_short(n, NOTE_CHARS)}" for n in provider_notes
                      if n.strip()]
    items = _dedup(kept + [t for _, t in notes] + from_providers, _CAPS["critical"])
    return items + tally.render(labels)


GOAL_TIGHT_CHARS = 120  # a goal item when nothing else is left to drop, the task kept verbatim
# ... and when the task is not kept verbatim ahead of the summary: the goal is then all the
# next model call knows of it (cut to 120 characters, an OpenHands task read "<uploaded_files>
# /workspace/ponylang__ponyc__0.1 </uploaded_files> I've uploaded a C code repository in the
# directory p…", the issue nowhere)
GOAL_FLOOR_CHARS = 300


def _fit(sections: dict[str, list[str]], language: str, budget: int,
         count_text: Callable[[str], int], goal_floor: int = GOAL_TIGHT_CHARS
         ) -> tuple[SummarySections, bool]:
    """The sections cut to ``budget``, and whether empty ones are left out: over budget, the
    "None." headings go first, then the oldest items of the longest sections down to one
    each, then the goal items are shortened (never dropped), and last the sections' last
    items, what matters least first (``_LAST_TO_GO``: a blocked command and the newest
    outcome and change stay longest); of the files, the oldest one only read or named, then
    the oldest one changed (``_drop_at``). A tight budget kept the goal whole and dropped
    every outcome and file before it (the request is most often kept verbatim anyway); the
    goal is shortened to ``goal_floor`` characters, never less (the task's substance, when it
    is not kept verbatim, is worth more than a result that does not fit anyway)."""
    def render(omit: bool) -> str:
        return render_body(SummarySections({k: tuple(v) for k, v in sections.items()}),
                           language, omit_empty=omit)

    total = count_text(render(False))
    omit = total > budget
    if omit:
        total = count_text(render(True))
    droppable = ("done", "files", "critical", "decisions", "constraints", "next_steps",
                 "blocked", "in_progress")
    while total > budget:
        key = max(droppable, key=lambda k: (len(sections.get(k, [])), -droppable.index(k)))
        if len(sections.get(key, [])) <= 1:
            break
        total -= count_text(sections[key].pop(_drop_at(key, sections[key], language))) + 2
    if total > budget:
        sections["goal"] = [_short(g, goal_floor) for g in sections.get("goal", [])]
        total = count_text(render(True))
    for key in _LAST_TO_GO:
        if total <= budget:
            break
        if sections.get(key):
            sections[key] = []
            total = count_text(render(True))  # its heading went with its last item
    return SummarySections({k: tuple(v) for k, v in sections.items()}), omit


# the order the sections' last items go in, under a budget too small for one of each: the
# file the work changed stays as long as the blocked command (the most important fact of a
# coding run; dropped before Done, a run's three edits of match.c left a summary whose
# Done/Blocked read as if the edit never went through)
_LAST_TO_GO = ("constraints", "decisions", "critical", "next_steps", "in_progress", "done",
               "files", "blocked")


class BuiltinSummarizer:
    """Deterministic structured summary from the messages themselves (no network)."""

    name = "builtin"

    def summarize(self, request: SummaryRequest) -> SummaryDraft:
        labels = LABELS.get(request.language, LABELS["en"])
        previous = (parse_body(request.previous_summary) if request.previous_summary
                    else SummarySections({}))
        skip = observations(request.prefix)
        # a text-action agent's fenced commands and their observations read as tool calls
        turns = as_tool_turns(request.turns, skip)
        activity = scan_activity(turns, request.tools)
        users, span_users = _real_users(request.prefix, skip), _real_users(turns, skip)
        ahead = request.prefix[:len(request.prefix) - len(request.turns)]
        if request.request_midway and ahead and any(m is ahead[-1] for m in users):
            # the request kept ahead of the turns came after them: the latest one
            users = [*(m for m in users if m is not ahead[-1]), ahead[-1]]
        pieces: dict[str, Pieces] = {}  # user messages are split twice

        def split(text: str) -> Pieces:
            if text not in pieces:
                pieces[text] = _pieces(text)
            return pieces[text]

        said = _statements(turns, skip, split)
        done, blocked = _progress(previous, activity, said["done"])
        tally = Tally.of_span(turns, activity.tools)
        sections = {
            "goal": _goal(previous, users, labels),
            "constraints": _constraints(previous, users, split),
            "done": done,
            "in_progress": _in_progress(previous, turns, labels, span_users,
                                        request.request_midway),
            "blocked": blocked,
            "decisions": _dedup(list(previous.get("decisions"))
                                + [t for _, t in said["decisions"]], _CAPS["decisions"]),
            "files": _files(previous, activity, turns, users, labels),
            "next_steps": _next_steps(previous, activity, said["next_steps"], blocked, turns,
                                      labels, span_users),
            "critical": _critical(previous, said["critical"], blocked, tally, labels,
                                  request.provider_notes),
        }
        # the task kept verbatim ahead of the summary: its goal item may be short
        ids = {id(m) for m in users}
        kept = next((m for m in ahead if id(m) in ids), None)
        floor = GOAL_FLOOR_CHARS
        if kept is not None and sections["goal"] and sections["goal"][0] == _ask(kept):
            # (the substance of a task the next call does not see is worth its length)
            sections["goal"][0], floor = _short(sections["goal"][0]), GOAL_TIGHT_CHARS
        fitted, omit = _fit(sections, request.language, request.budget_tokens,
                            request.counter.count_text, floor)
        return SummaryDraft(body=render_body(fitted, request.language, omit_empty=omit),
                            summarizer=self.name)


__all__ = ["BuiltinSummarizer", "after_demonstration", "is_demonstration", "is_nudge"]
