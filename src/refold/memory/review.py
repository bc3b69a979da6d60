"""Background memory review: every N user turns or M tool iterations, decide what to save.

``MemoryReviewer.note_turn(messages, session_id=…)`` counts that session's turns (each session
of an engine on its own, as the skill reviewer counts); when one reaches a threshold it starts a
review of its recent messages on a daemon thread and returns at once — the turn never waits.
- With a ``ChatClient`` it asks the model, offering only the ``memory`` tool, for a few rounds;
  a call to any other tool is answered with an error. If the model endpoint fails, the review
  falls back to the deterministic extractor.
- Without one, ``extract_candidates`` proposes entries from what the user said: explicit
  "remember …" / "记住…", stated preferences ("I prefer …", "我喜欢…", "always …", "以后要…"),
  identity ("my name is …", "我是…工程师") and corrections ("no, use X not Y", "不对，应该用X").
  Questions and remarks about "this"/"it" are skipped.
Every write goes through the ``MemoryWriter`` (origin "review"), so the approval policy and the
safety scan apply. The review has no handle on the session ledger: it never writes to it.

- The model reads the transcript redacted as a summary model does
  (``refold.compaction.llm_summarizer.clean_input``): the review goes to the same endpoint.
- A candidate that nearly repeats a stored or staged entry is left out by a check made under
  the write's own lock (``MemoryWriter.submit(guard=…)``): checked before it, two processes
  writing the same fact at once each found no twin and both wrote it.
- The model's calls are judged one by one: the tool's three-failures stop is for an agent
  retrying within a live turn; a review's calls are independent proposals, and the rows it
  read are not reviewed again, so a stop there lost the valid facts after three bad ones.
- A refused write is logged with its reason (never its text: it may hold the secret that was
  refused) and kept in the report's ``reasons``, the first time only: a review reads the
  session's last 40 messages, so the next one meets the same sentence and is refused again.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import re
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from refold._records import dataclass, field
from refold.errors import MemoryError_, RefoldError
from refold.memory.approval import MemoryWriter
from refold.memory.ops import MemoryOp, make_op
from refold.memory.similarity import near_duplicate
from refold.memory.tool import TOOL_NAME, MemoryTool
from refold.messages.model import Message, content_text, message_identity

if TYPE_CHECKING:  # the client module pulls in httpx; the reviewer only calls .complete()
    from refold.llm.client import ChatClient

log = logging.getLogger(__name__)

DEFAULT_TURNS = 10
DEFAULT_TOOL_ITERATIONS = 15
MAX_ROUNDS = 4
WINDOW_MESSAGES = 40
KEPT_REPORTS = 64  # the latest review reports a reviewer keeps
KEPT_REVIEWED = 4096  # messages a finished LLM review read, remembered so a flush skips them
MAX_COUNTED = 4096  # sessions whose turns are counted at once (the least recent drop out)
MAX_ENTRY_CHARS = 240

REVIEW_PROMPT = (
    "You are reviewing a finished stretch of conversation to decide what belongs in long-term "
    "memory. Use only the `memory` tool. Save durable facts: the user's stated preferences, "
    "corrections, and explicit requests to remember (target 'user' for who the user is, "
    "'memory' for environment facts, conventions and lessons). Skip task progress, one-off "
    "details and secrets. Prefer replacing an outdated entry over adding a near-duplicate. If "
    "nothing is worth saving, reply 'nothing to save'."
)


@dataclass(frozen=True)
class Candidate:
    target: str
    content: str
    kind: str  # "explicit" | "preference" | "identity" | "correction"


@dataclass
class ReviewReport:
    mode: str  # "llm" | "extractor" | "reviewed" (a flush of rows a review already read)
    saved: list[str] = field(default_factory=list)
    staged: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)  # near-duplicates left out, flagged
    # why each write refused for the first time was refused, without its text ("memory: would
    # exceed the limit…"); a write refused by an earlier review is in ``refused`` only
    reasons: list[str] = field(default_factory=list)

    def refuse(self, text: str, target: str, exc: RefoldError | None, *,
               first: bool = True) -> None:
        """Note a refused write (``text``: what it was, with the error) and log why — at
        WARNING the first time (``first``), at DEBUG when an earlier review already said so."""
        reason = f"{target}: {refusal_reason(exc)}"
        self.refused.append(text)
        if first:
            self.reasons.append(reason)
        log.log(logging.WARNING if first else logging.DEBUG,
                "memory review (%s): a write was refused, not saved: %s", self.mode, reason)


def refusal_reason(exc: RefoldError | None) -> str:
    """Why a write was refused, safe to log: a ``MemoryError_``'s message (the scan's reason,
    the limit, the approval mode: none quotes the content); for the others, which may quote
    an entry or the model's text, their kind."""
    if isinstance(exc, MemoryError_):
        return exc.message
    if exc is None:
        return "refused"
    return {"NotFound": "no entry matched", "AmbiguousReference": "several entries matched",
            "InvalidInput": "malformed call", "Conflict": "memory changed underneath or "
            "was edited outside refold"}.get(exc.__class__.__name__, exc.__class__.__name__)


def refuse_near_duplicates(ops: Sequence[MemoryOp], known: Sequence[str]) -> None:
    """A ``MemoryWriter`` guard: an ``add`` that nearly repeats one of ``known`` (the entries
    read under the write's lock, and the staged ones) is refused, with the pair in the error's
    ``duplicate``. Replace and remove pass (they are how entries get merged)."""
    for op in ops:
        if op.action != "add" or not op.content.strip():
            continue
        twin = near_duplicate(op.content, known)
        if twin is not None:
            pair = f"{op.content} (near-duplicate of: {twin})"
            raise MemoryError_(f"near-duplicate of an existing entry ({pair}); not added. To "
                               f"merge, use action 'replace' with old_text from that entry "
                               f"and the combined content.", duplicate=pair)


# -- the deterministic extractor -------------------------------------------------------------

# a Latin ".", "!" or "?" ends a sentence only before a space or the end, so host names,
# versions and file names ("demo.internal:8443", "v1.2", "settings.toml") stay whole
_SENTENCE = re.compile(r"(?:[^.!?。！？\n]|[.!?](?=[^\s.!?]))+[.!?。！？]?")
_LEAD = r"^\s*(?:(?:ok|okay|also|and|btw|fyi|oh),?\s+)*"
_EXPLICIT = [
    # "remember forever: X" asks to remember X, so the adverb goes with the cue
    re.compile(_LEAD + r"(?:(?:could|can|would)\s+you\s+)?(?:please\s+)?(?:remember|don'?t\s+"
               r"forget|keep\s+in\s+mind|note\s+that|for\s+future\s+reference)(?:\s+(?:forever|"
               r"permanently|for\s+good|for\s+(?:the\s+)?future|for\s+later|for\s+next\s+time|"
               r"going\s+forward)\b)?(?:\s+that)?[:,]?\s+(?P<body>.{3,})", re.IGNORECASE),
    re.compile(r"^\s*(?:请|請)?(?:记住|記住|记一下|記一下|以后记得|以後記得|别忘了|別忘了)[:：,，]?\s*"
               r"(?P<body>.{2,})"),
]
_PREFERENCE_EN = re.compile(
    _LEAD + r"i\s+(?P<verb>really\s+prefer|prefer|like|love|hate|dislike|always\s+use|never\s+use|"
    r"usually\s+use|want\s+you\s+to|don'?t\s+like)\s+(?!(?:it|this|that|these|those|them|you|"
    r"your)\b)(?P<rest>.{2,})", re.IGNORECASE)
_VERB_EN = {"really prefer": "Strongly prefers", "prefer": "Prefers", "like": "Likes",
            "love": "Loves", "hate": "Hates", "dislike": "Dislikes", "don't like": "Dislikes",
            "dont like": "Dislikes", "always use": "Always uses", "never use": "Never uses",
            "usually use": "Usually uses", "want you to": "Wants the assistant to"}
_PREFERENCE_ZH = re.compile(r"我(?P<verb>更喜欢|更喜歡|喜欢|喜歡|偏好|习惯|習慣|不喜欢|不喜歡|讨厌|討厭|"
                            r"希望你|总是用|總是用|一般用)(?!这|這|那|它|你)(?P<rest>.{2,})")
_IDENTITY = [
    (re.compile(_LEAD + r"my\s+name\s+is\s+(?P<rest>[\w .'-]{2,40})", re.IGNORECASE), "Name: {}"),
    (re.compile(_LEAD + r"(?:please\s+)?call\s+me\s+(?P<rest>[\w .'-]{2,40})", re.IGNORECASE),
     "Wants to be called {}"),
    (re.compile(_LEAD + r"i\s+work\s+(?P<rest>(?:at|for|on|as|in)\s+.{2,})", re.IGNORECASE),
     "Works {}"),
    (re.compile(_LEAD + r"i(?:'m|\s+am)\s+(?P<rest>an?\s+(?:\w+\s+){0,3}(?:engineer|developer|dev|"
                r"designer|student|manager|scientist|researcher|admin|sre|analyst|lead|architect|"
                r"founder|writer|teacher)\b.*)", re.IGNORECASE), "Is {}"),
    # a lasting condition the assistant should keep in mind (an allergy, a diet)
    (re.compile(_LEAD + r"i(?:'m|\s+am)\s+(?P<rest>(?:severely\s+|very\s+)?(?:allergic\s+to\s+"
                r"(?!(?:it|this|that|these|those|them)\b).{2,}|(?:vegetarian|vegan|lactose[- ]"
                r"intolerant|gluten[- ]intolerant|colou?r[- ]?blind|diabetic|left[- ]handed|"
                r"dyslexic)\b.*))", re.IGNORECASE), "Is {}"),
    (re.compile(_LEAD + r"i\s+have\s+(?P<rest>an?\s+(?:\w+\s+){0,2}allergy\b.*)", re.IGNORECASE),
     "Has {}"),
    (re.compile(r"^\s*我对(?P<rest>[^，,。]{1,12})过敏"), "用户对{}过敏"),
    (re.compile(r"^\s*我叫(?P<rest>[^，,。]{1,20})"), "用户叫{}"),
    (re.compile(r"^\s*(?:请|請)?叫我(?P<rest>[^，,。]{1,20})"), "希望被称呼为{}"),
    (re.compile(r"^\s*我是(?:一名|一个|一個)?(?P<rest>[^，,。]{0,12}(?:工程师|工程師|开发|開發|设计师|"
                r"設計師|学生|學生|经理|經理|研究员|研究員|运维|運維|架构师|架構師))"), "用户是{}"),
]
_RULE = [
    (re.compile(_LEAD + r"(?:please\s+)?(?P<rest>(?:always|never)\s+.{3,})", re.IGNORECASE),
     "Wants the assistant to {}"),
    (re.compile(r"^\s*(?:请|請)?以后(?:都)?(?P<rest>(?:要|别|別|不要|请|請|先).{2,})"), "用户要求：以后{}"),
]
_CORRECTION = [
    re.compile(_LEAD + r"(?:no|nope|actually|wrong)[,!.]?\s+(?:we\s+|you\s+should\s+)?use\s+"
               r"(?P<good>.+?)[,]?\s+(?:not|instead\s+of|rather\s+than)\s+(?P<bad>.+)",
               re.IGNORECASE),
    re.compile(_LEAD + r"(?:no|actually)[,!.]?\s+it'?s\s+(?P<good>.+?)[,]?\s+not\s+(?P<bad>.+)",
               re.IGNORECASE),
    re.compile(r"(?:不对|不對|错了|錯了)[，,。!！]?\s*(?:应该|應該)(?:用|是)(?P<good>.+?)"
               r"[，,]?\s*(?:而不是|不是|别用|別用)(?P<bad>.+)"),
    re.compile(r"(?:别用|別用|不要用)(?P<bad>.+?)[，,]\s*(?:要用|用|改用)(?P<good>.+)"),
]
# what "remember that." asks to remember is the sentence before, not the word "that"
_BARE = re.compile(r"\s*(?:that|this|it|these|those|that one|this one|so|yes|no|ok|okay)"
                   r"\s*[.!?？。！]*\s*", re.IGNORECASE)
_CUE_AT_BREAK = re.compile(r"(\b(?:remember|don'?t\s+forget|keep\s+in\s+mind|note|for\s+future"
                           r"\s+reference)(?:\s+that)?[:,]?)[ \t]*\n\s*", re.IGNORECASE)
_FIRST_PERSON = re.compile(r"^(?:i|i'm|i am|my|me)\b|^我", re.IGNORECASE)
_REQUEST = re.compile(r"\b(?:could|can|would)\s+you\s+(?:please\s+)?(?:remember|note|keep\s+in"
                      r"\s+mind)\b", re.IGNORECASE)


def _clip(text: str) -> str:
    text = " ".join(text.split()).strip(" ,;:")
    return text if len(text) <= MAX_ENTRY_CHARS else text[: MAX_ENTRY_CHARS - 1] + "…"


def _sentences(text: str) -> Iterator[str]:
    if "\n" in text:  # "Keep in mind that\nthe port is 8443": the cue and its fact are one
        text = _CUE_AT_BREAK.sub(lambda m: m.group(1) + " ", text)
    for match in _SENTENCE.finditer(text):
        sentence = match.group(0).strip()
        if sentence:
            yield sentence


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _candidate(sentence: str) -> Candidate | None:
    """One sentence's candidate entry; questions are skipped unless they ask to remember."""
    if sentence.endswith(("?", "？")) and not _REQUEST.search(sentence):
        return None
    for pattern in _EXPLICIT:
        found = pattern.search(sentence)
        if found and _BARE.fullmatch(found.group("body")) is None:
            body = _clip(found.group("body")).rstrip("?？")
            if _FIRST_PERSON.search(body):
                return Candidate("user", f"User: {body}", "explicit")
            return Candidate("memory", _capital(body), "explicit")
    for pattern in _CORRECTION:
        found = pattern.search(sentence)
        if found:
            good, bad = _clip(found.group("good")), _clip(found.group("bad")).rstrip(".。")
            return Candidate("memory", f"Use {good}, not {bad} (user correction)", "correction")
    return _preference(sentence)


def _preference(sentence: str) -> Candidate | None:
    found = _PREFERENCE_EN.search(sentence)
    if found:
        verb = " ".join(found.group("verb").lower().split())
        return Candidate("user", f"{_VERB_EN.get(verb, 'Prefers')} {_clip(found.group('rest'))}",
                         "preference")
    found = _PREFERENCE_ZH.search(sentence)
    if found:
        return Candidate("user", f"用户{found.group('verb')}{_clip(found.group('rest'))}",
                         "preference")
    for pattern, template in [*_IDENTITY, *_RULE]:
        found = pattern.search(sentence)
        if found:
            kind = "identity" if (pattern, template) in _IDENTITY else "preference"
            rest = _clip(found.group("rest"))
            if kind == "preference":
                rest = rest[:1].lower() + rest[1:]
            return Candidate("user", template.format(rest), kind)
    return None


# a review reads the session's last rows, so most of its sentences were read by the review
# before (each sentence goes through some twenty patterns): ``_candidate`` is a pure function of
# the sentence, its result frozen, so short sentences' results are kept (bounded, thread-safe)
_REMEMBERED_CHARS = 2000  # longer sentences are read again (the cache's memory stays small)


@functools.lru_cache(maxsize=2048)
def _remembered(sentence: str) -> Candidate | None:
    return _candidate(sentence)


def extract_candidates(messages: Sequence[Message]) -> list[Candidate]:
    """Entries the user's own words ask for, in order, without duplicates."""
    out: dict[str, Candidate] = {}
    for message in messages:
        if message.get("role") != "user":
            continue
        for sentence in _sentences(content_text(message)):
            candidate = (_remembered(sentence) if len(sentence) <= _REMEMBERED_CHARS
                         else _candidate(sentence))
            if candidate is not None:
                out.setdefault(candidate.content, candidate)
    return list(out.values())


# -- the reviewer ----------------------------------------------------------------------------

TRANSCRIPT_CHARS = 24_000  # what a review sends the model at most (a flushed span can be long)
_PER_MESSAGE = {"user": 2_000, "assistant": 600}


def _transcript(messages: Sequence[Message]) -> str:
    """The user and assistant text of ``messages``, redacted as a summary model's input is
    (secrets, ``<think>`` blocks: the review goes to the same endpoint), each message cut to
    its share and the whole kept to ``TRANSCRIPT_CHARS`` from the end (the latest words matter
    most). Redacted before the cut, so a cut never leaves the head of a key the pattern no
    longer knows."""
    # imported here: the summarizer module pulls in the HTTP client, which only a review
    # with a model (the one caller) has loaded anyway
    from refold.compaction.llm_summarizer import clean_input

    lines: list[str] = []
    total = 0
    for message in reversed(messages):
        role = str(message.get("role", ""))
        if role not in _PER_MESSAGE:
            continue
        text = clean_input(content_text(message)).strip()
        if not text:
            continue
        if len(text) > _PER_MESSAGE[role]:
            text = text[: _PER_MESSAGE[role]] + " […]"
        line = f"{role.upper()}: {text}"
        if total + len(line) > TRANSCRIPT_CHARS:
            break
        lines.append(line)
        total += len(line) + 2
    return "\n\n".join(reversed(lines))


class MemoryReviewer:
    """Counts turns and runs reviews in the background through a ``MemoryWriter``."""

    def __init__(self, writer: MemoryWriter, *, chat: ChatClient | None = None,
                 model: str | None = None, every_turns: int = DEFAULT_TURNS,
                 every_tool_iterations: int = DEFAULT_TOOL_ITERATIONS) -> None:
        self.writer = writer
        self.chat = chat
        self.model = model or "default"
        self.every_turns = every_turns
        self.every_tool_iterations = every_tool_iterations
        # (user turns, tool iterations) since each session's last review: an engine serves
        # many sessions (``refold serve``), and each one's turns count toward its own review
        self._counts: dict[str, tuple[int, int]] = {}
        self._counts_lock = threading.Lock()
        # the latest reports only, and only live threads: a reviewer lives as long as its
        # engine (for ``refold serve``, the process), so neither may grow with every review
        self.reports: deque[ReviewReport] = deque(maxlen=KEPT_REPORTS)
        self._threads: list[threading.Thread] = []
        # what finished LLM reviews read (message identities, bounded): a flush of the same
        # rows would pay the review model again to find what was already written
        self._reviewed: dict[str, None] = {}
        self._reviewed_lock = threading.Lock()
        # per session, why a background review of its turns refused writes, until taken
        # (``take_warnings``): the turn that started the review had already been answered
        self._warnings: dict[str, list[str]] = {}
        # the refused writes (target, text, reason) already reported (bounded, as _reviewed)
        self._refusals: dict[tuple[str, str, str], None] = {}

    @property
    def turns(self) -> int:
        """User turns counted since the last review (of the session ``""``)."""
        return self.counts()[0]

    def counts(self, session_id: str = "") -> tuple[int, int]:
        """(user turns, tool iterations) counted for ``session_id`` since its last review."""
        with self._counts_lock:
            return self._counts.get(session_id, (0, 0))

    def note_turn(self, messages: Sequence[Message], *, tool_iterations: int | None = None,
                  session_id: str = "") -> threading.Thread | None:
        """Count one user turn of ``session_id`` (``messages``: that session's recent rows);
        start a background review of them when that session reached a threshold."""
        iterations = (tool_iterations if tool_iterations is not None
                      else _tool_iterations_of_last_turn(messages))
        with self._counts_lock:
            turns, tools = self._counts.pop(session_id, (0, 0))
            turns, tools = turns + 1, tools + iterations
            due_turns = self.every_turns > 0 and turns >= self.every_turns
            due_tools = self.every_tool_iterations > 0 and tools >= self.every_tool_iterations
            if not (due_turns or due_tools):
                self._counts[session_id] = (turns, tools)  # re-inserted: the newest last
                while len(self._counts) > MAX_COUNTED:  # a proxy sees many sessions
                    del self._counts[next(iter(self._counts))]
                return None
        window = list(messages)[-WINDOW_MESSAGES:]
        self._threads = [t for t in self._threads if t.is_alive()]
        # the caller's context goes along (refold.runtime.cost charges the review's model
        # calls to the session whose turn started it)
        context = contextvars.copy_context()
        thread = threading.Thread(target=context.run, args=(self._run, window, session_id),
                                  name="refold-memory-review", daemon=True)
        self._threads.append(thread)
        thread.start()
        return thread

    def join(self, timeout: float | None = 60.0) -> None:
        for thread in list(self._threads):
            thread.join(timeout)
        self._threads = [t for t in self._threads if t.is_alive()]

    def _run(self, messages: list[Message], session_id: str = "") -> None:
        try:
            report = self.review(messages)
            self._keep(report)
            if report.mode == "llm":
                self._note_reviewed(messages)
            if report.reasons:
                self._warn(session_id, report)
        except Exception:  # a background review must never take the process down
            log.exception("background memory review failed")

    def _warn(self, session_id: str, report: ReviewReport) -> None:
        count = len(report.reasons)
        sentence = (f"memory review did not save {count} "
                    f"{'entry' if count == 1 else 'entries'}: {'; '.join(report.reasons)}")
        with self._counts_lock:
            self._warnings.setdefault(session_id, []).append(sentence)
            while len(self._warnings) > MAX_COUNTED:  # bounded as the turn counts are
                del self._warnings[next(iter(self._warnings))]

    def _first_refusal(self, target: str, text: str, exc: RefoldError | None) -> bool:
        """Whether no earlier review reported this write's refusal (and remember it)."""
        key = (target, text, refusal_reason(exc))
        with self._reviewed_lock:
            if key in self._refusals:
                return False
            self._refusals[key] = None
            while len(self._refusals) > KEPT_REVIEWED:
                del self._refusals[next(iter(self._refusals))]
            return True

    def take_warnings(self, session_id: str = "") -> list[str]:
        """Why background reviews of ``session_id``'s turns refused writes (a full memory, a
        scan), once: for that session's next response (a review starts after its turn was
        answered)."""
        with self._counts_lock:
            return self._warnings.pop(session_id, [])

    def _note_reviewed(self, messages: Sequence[Message]) -> None:
        with self._reviewed_lock:
            for message in messages:
                self._reviewed[message_identity(message, None)] = None
            while len(self._reviewed) > KEPT_REVIEWED:
                del self._reviewed[next(iter(self._reviewed))]

    def _not_yet_reviewed(self, messages: Sequence[Message]) -> list[Message]:
        with self._reviewed_lock:
            return [m for m in messages if message_identity(m, None) not in self._reviewed]

    def review(self, messages: Sequence[Message]) -> ReviewReport:
        """Run one review now (the background thread calls this)."""
        if self.chat is not None:
            try:
                return self._review_with_llm(messages)
            except RefoldError as exc:
                log.warning("memory review model failed (%s); using the extractor",
                            getattr(exc, "kind", exc.__class__.__name__))
        return self._review_with_extractor(messages)

    def flush(self, messages: Sequence[Message]) -> ReviewReport:
        """Review ``messages`` now and wait: before a compaction replaces them, and at session
        end, so what should be remembered is written (or staged, by the approval mode) before
        the span leaves the context (seeds 000 §3.2, 002). With the review model, messages a
        finished background review already read are left out, and a span holding nothing new
        costs no call (report mode ``"reviewed"``)."""
        if self.chat is not None:
            fresh = self._not_yet_reviewed(messages)
            if not any(m.get("role") in ("user", "assistant") for m in fresh):
                report = ReviewReport(mode="reviewed")
                self._keep(report)
                return report
            messages = fresh
        report = self.review(messages)
        self._keep(report)
        if report.mode == "llm":
            self._note_reviewed(messages)
        return report

    def _keep(self, report: ReviewReport) -> None:
        self.reports.append(report)  # bounded (KEPT_REPORTS): a long-running proxy keeps the latest

    def _review_with_extractor(self, messages: Sequence[Message]) -> ReviewReport:
        report = ReviewReport(mode="extractor")
        for candidate in extract_candidates(messages):
            try:
                result = self.writer.submit(candidate.target,
                                            [make_op("add", content=candidate.content)],
                                            origin="review", guard=refuse_near_duplicates)
            except RefoldError as exc:
                if "duplicate" in exc.details:
                    report.duplicates.append(str(exc.details["duplicate"]))
                else:
                    report.refuse(f"{candidate.content} ({exc.message})", candidate.target, exc,
                                  first=self._first_refusal(candidate.target,
                                                            candidate.content, exc))
                continue
            (report.staged if result.staged else report.saved).append(candidate.content)
        return report

    def _review_with_llm(self, messages: Sequence[Message]) -> ReviewReport:
        assert self.chat is not None
        tool = MemoryTool(self.writer, origin="review", guard=refuse_near_duplicates,
                          stop_after=None)
        live = {t: [e.display() for e in self.writer.store.read(t).entries]
                for t in ("memory", "user")}
        convo: list[Message] = [
            {"role": "system", "content": REVIEW_PROMPT},
            {"role": "user", "content": f"Current memory (live):\n{json.dumps(live, ensure_ascii=False)}"
                                        f"\n\nConversation to review:\n\n{_transcript(messages)}"},
        ]
        report = ReviewReport(mode="llm")
        for _round in range(MAX_ROUNDS):
            reply = self.chat.complete(convo, model=self.model, tools=[tool.schema()]).message
            calls = reply.get("tool_calls") or []
            if not calls:
                break
            convo.append(reply)
            for call in calls:
                convo.append(self._answer(tool, call, report))
        return report

    def _answer(self, tool: MemoryTool, call: dict[str, Any], report: ReviewReport) -> Message:
        function = call.get("function") or {}
        arguments = function.get("arguments") or "{}"
        if function.get("name") != TOOL_NAME:
            text = json.dumps({"success": False,
                               "error": f"only the memory tool is available in a review, "
                                        f"not {function.get('name')!r}"})
        else:
            text = tool.handle(arguments)
            result = json.loads(text)
            said = str(result.get("message") or result.get("error") or "")
            if result.get("duplicate"):
                report.duplicates.append(str(result["duplicate"]))
            elif result.get("staged") or result.get("success"):
                (report.staged if result.get("staged") else report.saved).append(said)
            else:
                target = _target_of(arguments)
                report.refuse(said, target, tool.last_error,
                              first=self._first_refusal(target, str(arguments), tool.last_error))
        return {"role": "tool", "tool_call_id": str(call.get("id", "")), "content": text}


def _target_of(arguments: Any) -> str:
    """The target a model's call named (for the log line of a refusal)."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        return str(args.get("target") or "memory")
    except (ValueError, TypeError, AttributeError):
        return "memory"


def _tool_iterations_of_last_turn(messages: Sequence[Message]) -> int:
    count = 0
    for message in reversed(messages):
        if message.get("role") == "user":
            break
        if message.get("role") == "assistant" and message.get("tool_calls"):
            count += 1
    return count
