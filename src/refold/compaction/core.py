"""``compact``: the pure compaction function — a message list in, a message list and a report out.

Pipeline (no I/O here; the summarizer is the only seam that may do any):
1. cut: system prefix + protected head (``protect_first_n``, 0 after the first compaction),
   a verbatim tail chosen by tokens, the middle in between — all on unit boundaries;
2. prune outside the tail (dedup, one-line summaries, argument truncation), downgrade bulky tail
   outputs while the tail is over its soft ceiling, strip images older than the latest;
3. summarize the middle (updating the previous summary if one is found) within 20% of the
   replaced tokens, clamped to 2K-10K; a retryable summarizer failure falls back to the builtin
   summarizer, an abort leaves the transcript untouched;
4. frame the summary (reference-only prefix, anchor index, end marker), place it in a role that
   keeps turns alternating, re-check tool pairs;
5. refuse a result that is not smaller; report whether it fits the target, and why not.

Invariants (tests/compaction checks each): tool pairs valid; system never summarized; last user
and last assistant messages verbatim; fits or says why; summary framed in the user's language;
anchors verbatim within budget; summarizer failure never loses data; deterministic.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

from refold._records import asdict, dataclass, field
from refold.compaction.anchors import extract_anchors, select_anchors
from refold.compaction.boundaries import (
    align_to_units,
    required_indices,
    resolve_junction,
    select_tail,
    system_prefix_end,
    unit_containing,
)
from refold.compaction.builtin import BuiltinSummarizer, is_demonstration
from refold.compaction.policy import CompactionPolicy, summary_budget, threshold_for
from refold.compaction.prune import (
    PruneStats,
    cut_oversized,
    downgrade_tail,
    prune_outside_tail,
    strip_old_images,
)
from refold.compaction.secrets import redact, secrets_in_texts, without_secrets
from refold.compaction.structure import SYSTEM_ROLES, repair_tool_pairs, split_units
from refold.compaction.summarizer import Summarizer, SummaryDraft, SummaryRequest
from refold.compaction.summary import (
    ACK,
    END_MARKER,
    PREFIX,
    SUMMARY_KEY,
    detect_language,
    is_summary_message,
    render_anchor_block,
    strip_think,
    unwrap_summary,
    wrap_summary,
)
from refold.errors import InvalidInput, SummarizerError
from refold.messages.model import Message, canonical_json, content_text
from refold.messages.validate import validate_messages
from refold.tokens.counter import REPLY_PRIMING, MessageCounter, TokenCounter
from refold.tokens.models import get_counter

log = logging.getLogger(__name__)

FRAMING_TOKENS = 160  # prefix + end marker + headings overhead of a wrapped summary
MAX_PROVIDER_NOTES = 8  # notes a summarizer is given at most (the most recent kept)
NOTE_MAX_CHARS = 2_000  # one provider note, clipped
TAIL_FACTORS = (1.0, 0.5, 0.25, 0.0)
TIGHT_MIN_TOKENS = 96  # body + anchors at least, when less room is left (the framing aside)


@dataclass(frozen=True)
class CompactionReport:
    status: str  # ok | fallback | pruned | noop | refused | aborted
    reason: str
    summarizer: str
    tokens_before: int
    tokens_after: int
    target_tokens: int
    threshold_tokens: int
    fits: bool
    messages_before: int
    messages_after: int
    head_end: int = 0  # input[:head_end] kept (system + protected head)
    tail_start: int = 0  # input[tail_start:] kept verbatim (up to pruning of old outputs)
    summarized: int = 0  # input messages replaced by the summary
    summary: str | None = None
    summary_role: str | None = None
    summary_acknowledged: bool = False  # an acknowledgement turn follows the summary
    anchors: tuple[str, ...] = ()
    language: str = "en"
    warnings: tuple[str, ...] = ()
    prune: dict[str, int] = field(default_factory=dict)
    error_kind: str | None = None
    compaction_count: int = 0
    usage: dict[str, int] = field(default_factory=dict)  # the summary model's (cost accounting)

    @property
    def changed(self) -> bool:
        return self.status in ("ok", "fallback", "pruned")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CompactionResult:
    messages: list[Message]
    report: CompactionReport


def validate_input(messages: Sequence[Message], context_length: int) -> list[Message]:
    """The chat format (``refold.messages.validate``) and a usable window, or a clear error."""
    if not isinstance(context_length, int) or context_length <= 0:
        raise InvalidInput(f"context_length must be a positive number of tokens, not "
                           f"{context_length!r}")
    return validate_messages(messages)


@dataclass
class _Plan:
    """The mutable working state of one compaction."""

    messages: list[Message]
    head_end: int
    tail_start: int
    role: str | None
    pruned: list[Message]
    stats: PruneStats
    previous_body: str | None
    previous_anchors: list[str]
    compaction_count: int
    midway: int = 0  # summarized messages before a request kept ahead of the summary (_Cut)
    required: tuple[int, ...] = ()  # the last real user and assistant messages (_Cut)
    notes: tuple[str, ...] = ()
    # repeated system turns left out when moved up (``_order_system_first``): the input's
    # index of the tail is ``tail_start`` plus this
    removed: int = 0


def provider_notes_of(notes: Sequence[str] | str | None) -> tuple[str, ...]:
    """Memory provider notes as the summarizer gets them: a string splits on blank lines (how
    the manager joins several providers' returns), the summary framing removed, blanks
    dropped, whitespace-trimmed, clipped to ``NOTE_MAX_CHARS``, first occurrence kept, the
    last ``MAX_PROVIDER_NOTES``."""
    if not notes:
        return ()
    parts = notes.split("\n\n") if isinstance(notes, str) else [
        p for n in notes if isinstance(n, str) for p in n.split("\n\n")]
    seen: dict[str, None] = {}
    for part in parts:
        # the summary's own framing inside a note would cut the summary short when parsed back
        text = part.replace(END_MARKER, " ").replace(PREFIX[:40], " ").strip()
        if text:
            seen.setdefault(text[:NOTE_MAX_CHARS], None)
    return tuple(seen)[-MAX_PROVIDER_NOTES:]


def _previous_summary(messages: Sequence[Message], given: str | None
                      ) -> tuple[int | None, str | None, list[str]]:
    # the summary itself carries the prefix; an acknowledgement turn after it does not
    idx = next((i for i in range(len(messages) - 1, -1, -1)
                if is_summary_message(messages[i])
                and PREFIX[:40] in content_text(messages[i])), None)
    body: str | None = None
    anchors: list[str] = []
    if idx is not None:
        body, anchors = unwrap_summary(content_text(messages[idx]))
    return idx, (given if given is not None else body), anchors


def _order_system_first(messages: Sequence[Message], before: int | None = None,
                        own: int | None = None) -> list[Message]:
    """Mid-conversation system messages move up to the system prefix (never summarized; one of
    each, the newest ``MAX_MOVED_SYSTEM``: the ledger keeps them all); with ``before``, only
    those before that index (the ones after it stay where they are)."""
    lead = system_prefix_end(messages)
    if own is not None:  # (the rest of the prefix: moved up by an earlier compaction)
        lead = min(lead, max(0, own))
    end = len(messages) if before is None else max(lead, before)
    late = [m for m in messages[lead:end] if m.get("role") in SYSTEM_ROLES]
    if not late:
        return list(messages)
    rest = [m for m in messages[lead:end] if m.get("role") not in SYSTEM_ROLES]
    # one of each: an agent repeats a reminder ("the task tools haven't been used recently"),
    # and every copy moved up stayed in the prefix for good (the stored rows keep them all)
    # and only the newest ``MAX_MOVED_SYSTEM``: each compaction moved every one up for good,
    # and reminders that differ each time (a todo list's state) grew the prefix without end
    seen = {canonical_json([m.get("role"), m.get("content")]) for m in messages[:lead]}
    once: list[Message] = []
    for message in reversed(late):
        key = canonical_json([message.get("role"), message.get("content")])
        if key not in seen and len(once) < MAX_MOVED_SYSTEM:
            seen.add(key)
            once.append(message)
    return list(messages[:lead]) + once[::-1] + rest + list(messages[end:])


MAX_MOVED_SYSTEM = 8  # system turns from inside the conversation kept in the prefix


def _tail_keeps_system_turns(messages: Sequence[Message], plan: _Plan, policy: CompactionPolicy,
                             counter: TokenCounter, room: int, count: int,
                             previous: tuple[str | None, list[str]], own: int | None = None
                             ) -> tuple[list[Message], _Plan] | None:
    """The plan again with the system turns of the kept tail left in place, or None (there are
    none, or no tail start was found that keeps them all in place).

    An agent's reminders inside the conversation (Claude Code's, under Anthropic's
    ``mid-conversation-system`` beta) moved up to the prefix from the tail: the tail kept no
    longer lined up with the stored rows and no checkpoint could be stored, so the context
    grew past the window; and the provider's cache of the prompt was rebuilt."""
    def start_of(planned: _Plan) -> int | None:  # where its tail starts in ``messages``
        if planned.tail_start <= planned.head_end or planned.tail_start >= len(planned.messages):
            return None
        first = planned.messages[planned.tail_start]
        return next((i for i, m in enumerate(messages) if m is first), None)

    def system_in(part: Sequence[Message]) -> bool:
        return any(m.get("role") in SYSTEM_ROLES for m in part)

    at = start_of(plan)
    if at is None or not system_in(messages[at:]):
        return None
    # Counted in the tail, they move where it starts: later (those left between are in the
    # summarized stretch: moved up, again from there) or earlier (those moved up from the
    # stretch it now takes belong to it: again from there)
    for _ in range(4):
        ordered = _order_system_first(messages, before=at, own=own)
        again = _plan(ordered, policy, counter, room, count, previous)
        start = start_of(again)
        if start is None:
            return None
        if start == at or (start < at and not system_in(messages[start:at])):
            return ordered, again
        at = start
    return None


def _head_end(messages: list[Message], units: Sequence[Any], sys_end: int, head_n: int,
              budget: int, count: Any) -> int:
    """The protected head: the first ``head_n`` messages after the system prefix, shrunk (on
    unit boundaries) while they exceed ``budget`` tokens — a head that is large on its own
    is summarized rather than left to overflow every later turn (seed 004 §1.4)."""
    head_end = align_to_units(min(len(messages), sys_end + head_n), units)
    while head_end > sys_end and sum(count(m) for m in messages[sys_end:head_end]) > budget:
        head_end = max((u.start for u in units if u.start < head_end), default=sys_end)
        head_end = max(head_end, sys_end)
    return head_end


@dataclass(frozen=True)
class _Cut:
    """Where one compaction cuts: ``messages`` (the input, or the input with a request moved
    ahead of the summary), the head's end, the tail's start, the summary's role, where the
    last real user and assistant messages are in ``messages`` (``required``: a moved request
    is no longer the last user message there), and how many summarized messages came before
    a moved request (``midway``; 0: none moved)."""

    messages: list[Message]
    head_end: int
    tail_start: int
    role: str | None
    required: tuple[int, ...]
    midway: int = 0


def _cut(messages: list[Message], policy: CompactionPolicy, counter: TokenCounter,
         tail_budget: int, compaction_count: int, head_budget: int) -> _Cut:
    units = split_units(messages)
    sys_end = system_prefix_end(messages)
    head_n = policy.protect_first_n if compaction_count == 0 else 0
    count = counter.count_message
    head_end = _head_end(messages, units, sys_end, head_n, head_budget, count)
    # an earlier summary is never part of the protected head: it gets updated instead
    for i in range(sys_end, head_end):
        if is_summary_message(messages[i]):
            head_end = align_to_units(i, units)
            break
    # the last real user message stays verbatim; when it is before the summary (an agent
    # working on alone since its one request) it is kept as the head. The tail reached back to
    # it instead, took everything, and left nothing to summarize: an autonomous run was never
    # compacted again after its first compaction and overflowed its window.
    summary_at = next((i for i in range(sys_end, len(messages))
                       if is_summary_message(messages[i])), None)
    if summary_at is not None:
        asked = [i for i in required_indices(messages)
                 if i < summary_at and messages[i].get("role") == "user"]
        if asked:
            head_end = max(head_end, min(summary_at, align_to_units(asked[0] + 1, units)))
    tail = functools.partial(select_tail, messages, units, budget=tail_budget,
                             soft_ceiling=policy.tail_soft_ceiling,
                             min_messages=policy.tail_min_messages,
                             floor_messages=policy.tail_floor_messages, count=count)
    if summary_at is None:
        # The same at the first compaction: one request (too large for the protected head)
        # and the agent's work since. The tail reached back to the request and took it all,
        # so nothing was summarized and the window overflowed; the request joins the head
        # when what lies between the head and it is small and it leaves room for a summary
        # (at most half the target), and the work after it is summarized. (A task that does
        # not join it is summarized with its substance as the goal: ``builtin.task_text``.)
        first = next((i for i in required_indices(messages) if i >= head_end
                      and messages[i].get("role") == "user"), None)
        if first is not None and first < tail(head_end, stretch=False) \
                and sum(count(m) for m in messages[head_end:first]) <= head_budget \
                and count(messages[first]) <= 2 * head_budget:
            head_end = align_to_units(first + 1, units)
    # A last request the tail reaches only by stretching past its budget (a person's "also
    # check X" mid-run, an error notice of the harness) pinned the tail there: every later
    # plan kept the same tail, no checkpoint could move the view forward, and the context grew
    # past the window. It is kept verbatim ahead of the summary instead, which then covers
    # the work before and after it (``SummaryRequest.request_midway`` says so). Whatever its
    # size: it alone costs less than the tail that stretched to it and everything after it.
    natural = tail(head_end, stretch=False)
    last = next((i for i in required_indices(messages)
                 if messages[i].get("role") == "user"), None)
    if last is None or not head_end <= last < natural:
        return _junction(messages, units, head_end, tail(head_end))
    unit = unit_containing(last, units)
    keep = unit.start == last and unit.end == last + 1
    # two user messages in a row are refused by strict providers: a head that ends with one
    # (the task) keeps the step after it too (its output is pruned to a line)
    starts, ahead = {u.start: u.end for u in units}, head_end
    while keep and ahead < last and messages[ahead - 1].get("role") == "user":
        ahead = starts.get(ahead, last + 1)
        keep = ahead <= last
    head_end = ahead if keep else head_end
    if keep and last == head_end:
        head_end = last + 1
        return _junction(messages, units, head_end, tail(head_end))
    tail_start = tail(head_end, spare=(last,) if keep else ())
    if not keep or tail_start <= last:
        return _junction(messages, units, head_end, tail_start)
    if tail_start == last + 1:  # nothing summarized comes after it: it stays where it was,
        # after the summary, as the tail's first message (moved ahead, the summary said the
        # work came "before and after" it and the request read as handled)
        return _junction(messages, units, head_end, last)
    moved = [*messages[:head_end], messages[last], *messages[head_end:last],
             *messages[last + 1:]]
    required = tuple(head_end if i == last else i + 1 if head_end <= i < last else i
                     for i in required_indices(messages))
    cut = _junction(moved, split_units(moved), head_end + 1, tail_start, required)
    return _Cut(moved, cut.head_end, cut.tail_start, cut.role, required, last - head_end)


def _junction(messages: list[Message], units: Sequence[Any], head_end: int, tail_start: int,
              required: Sequence[int] | None = None) -> _Cut:
    kept = tuple(required_indices(messages) if required is None else required)
    if tail_start <= head_end:
        return _Cut(messages, head_end, head_end, None, kept)
    tail_start, role = resolve_junction(messages, units, head_end, tail_start)
    return _Cut(messages, head_end, tail_start, role, kept)


def _prune(messages: list[Message], head_end: int, tail_start: int, policy: CompactionPolicy,
           counter: TokenCounter, tail_budget: int, required: set[int]
           ) -> tuple[list[Message], PruneStats]:
    stats = PruneStats()
    units = split_units(messages)
    last_unit_start = units[-1].start if units else len(messages)
    # the newest unit stays verbatim even when the protected head reaches it (tiny windows)
    out = prune_outside_tail(messages, min(tail_start, last_unit_start),
                             min_chars=policy.prune_min_chars,
                             args_max_chars=policy.tool_args_max_chars, stats=stats)
    out = downgrade_tail(out, tail_start, ceiling_tokens=int(tail_budget * policy.tail_soft_ceiling),
                         count=counter.count_message, keep_from=last_unit_start,
                         min_chars=policy.prune_min_chars, stats=stats)
    out = strip_old_images(out, required, stats)
    return out, stats


class _CountedOnce:
    """``counter``, counting each message object once per compaction: the plan, the budget and
    the report ask again for the same messages, and past the counter's own cache (16,384
    messages) every ask would tokenize anew. ``count_messages`` sums the memo only where the
    counter's is that sum (``MessageCounter``'s invariant); compaction never mutates a message
    it has counted (it copies)."""

    def __init__(self, counter: TokenCounter) -> None:
        self.inner = counter
        self.name, self.exact = counter.name, counter.exact
        self._counts: dict[int, tuple[Message, int]] = {}  # id → (the message, its count)
        self._sums = isinstance(counter, MessageCounter) and \
            type(counter).count_messages is MessageCounter.count_messages

    def count_text(self, text: str) -> int:
        return self.inner.count_text(text)

    def count_tools(self, tools: Sequence[dict[str, Any]] | None) -> int:
        return self.inner.count_tools(tools)

    def count_message(self, message: Message) -> int:
        known = self._counts.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
        count = self.inner.count_message(message)
        self._counts[id(message)] = (message, count)
        return count

    def count_messages(self, messages: Sequence[Message]) -> int:
        if not self._sums:
            return self.inner.count_messages(messages)
        return sum(self.count_message(m) for m in messages) + REPLY_PRIMING


def _tokens(messages: Sequence[Message], counter: TokenCounter,
            tools: Sequence[dict[str, Any]] | None) -> int:
    return counter.count_messages(messages) + counter.count_tools(tools)


def _plan(messages: list[Message], policy: CompactionPolicy, counter: TokenCounter,
          target: int, compaction_count: int, previous: tuple[str | None, list[str]]) -> _Plan:
    """Pick the largest tail (by budget factor) that leaves room for a summary in ``target``."""
    plan: _Plan | None = None
    base_budget = max(1, int(target * policy.tail_ratio))
    head_budget = max(1, int(target * policy.protect_first_share))
    for factor in TAIL_FACTORS:
        budget = max(1, int(base_budget * factor))
        cut = _cut(messages, policy, counter, budget, compaction_count, head_budget)
        head_end, tail_start = cut.head_end, cut.tail_start
        pruned, stats = _prune(cut.messages, head_end, tail_start, policy, counter, budget,
                               set(cut.required))
        plan = _Plan(cut.messages, head_end, tail_start, cut.role, pruned, stats, previous[0],
                     previous[1], compaction_count, midway=cut.midway, required=cut.required)
        kept = sum(counter.count_message(m) for m in pruned[:head_end] + pruned[tail_start:])
        if kept + policy.summary_min_tokens // 2 + FRAMING_TOKENS <= target:
            return plan
    assert plan is not None
    return _cut_tail(plan, counter, policy, target)


def _cut_tail(plan: _Plan, counter: TokenCounter, policy: CompactionPolicy, target: int
              ) -> _Plan:
    """When even the smallest tail leaves no room, cut its oversized messages (head and tail
    kept, a note in between) rather than overflow; the last user and assistant stay whole."""
    start = plan.tail_start if plan.tail_start > plan.head_end else plan.head_end
    kept = sum(counter.count_message(m) for m in plan.pruned[:plan.head_end]
               + plan.pruned[start:])
    reserve = (max(256, min(policy.summary_min_tokens // 2, target // 4)) + FRAMING_TOKENS
               if plan.tail_start > plan.head_end else 0)
    excess = kept + reserve - target
    if excess > 0:
        plan.pruned = cut_oversized(plan.pruned, start, excess_tokens=excess,
                                    count=counter.count_message,
                                    protected=set(plan.required),
                                    stats=plan.stats)
    return plan


def _summarize(plan: _Plan, summarizer: Summarizer, fallback: Summarizer, counter: TokenCounter,
               policy: CompactionPolicy, budget: int, language: str,
               tools: Sequence[dict[str, Any]] | None
               ) -> tuple[SummaryDraft, str, list[str], str | None]:
    middle = plan.messages[plan.head_end:plan.tail_start]
    request = SummaryRequest(
        turns=middle, pruned_turns=plan.pruned[plan.head_end:plan.tail_start],
        prefix=plan.messages[:plan.tail_start], previous_summary=plan.previous_body,
        language=language, budget_tokens=budget, counter=counter, tools=tools,
        provider_notes=plan.notes, request_midway=plan.midway)
    warnings: list[str] = []
    try:
        return summarizer.summarize(request), "ok", warnings, None
    except SummarizerError as exc:
        if not exc.retryable:
            raise
        warnings.append(f"{summarizer.name} summarizer failed ({exc.kind}): {exc.message}; "
                        "used the builtin summarizer")
        log.warning("summarizer %s failed (%s); falling back to builtin", summarizer.name,
                    exc.kind)
        return fallback.summarize(request), "fallback", warnings, exc.kind


def _text_and_arguments(message: Message) -> str:
    calls = message.get("tool_calls") or []
    return "\n\n".join([content_text(message), *(
        str((c.get("function") or {}).get("arguments") or "") for c in calls
        if isinstance(c, dict))])


def _fit_body(body: str, budget: int, counter: TokenCounter, warnings: list[str]) -> str:
    if counter.count_text(body) <= int(budget * 1.25):
        return body
    # the goal's heading and first item stay: the task, when nothing else keeps it (a tight
    # budget cut the summary to its bare "## Goal" heading)
    lines = body.splitlines()
    while len(lines) > 2 and counter.count_text("\n".join(lines)) > budget:
        lines = lines[: max(2, int(len(lines) * 0.9))] if len(lines) > 10 else lines[:-1]
    warnings.append("summary exceeded its budget and was cut")
    return "\n".join(lines)


def _repaired(messages: list[Message], transcript: Sequence[Message]
              ) -> tuple[list[Message], int, int]:
    """``repair_tool_pairs`` for a compacted view of ``transcript``: a stub says a result was
    left out only where the transcript has one, and calls still running at the end stay."""
    answered = {m.get("tool_call_id") for m in transcript if m.get("role") == "tool"}
    return repair_tool_pairs(messages, answered={a for a in answered if isinstance(a, str)},
                             keep_pending=True)


def _room_for_anchors(plan: _Plan, body: str, language: str, counter: TokenCounter,
                      tools: Sequence[dict[str, Any]] | None, target: int) -> int | None:
    """Tokens an anchor index may take without making a result that fits overflow (measured
    on the result without one, not estimated); None when it does not fit even so."""
    bare, _, _ = _assemble(plan, wrap_summary(body, [], language))
    after = _tokens(_repaired(bare, plan.messages)[0], counter, tools)
    heading = counter.count_text(render_anchor_block(["x"], language)) + 2
    return target - after - heading if after + heading <= target else None


def _assemble(plan: _Plan, summary_text: str) -> tuple[list[Message], str, bool]:
    """head + summary + tail; when no single role alternates, a short acknowledgement of the
    other role follows the summary (marked as summary too) so every provider accepts it."""
    head = plan.pruned[:plan.head_end]
    tail = plan.pruned[plan.tail_start:]
    if plan.role is not None:
        summary = {"role": plan.role, "content": summary_text, SUMMARY_KEY: True}
        return [*head, summary, *tail], plan.role, False
    last = head[-1].get("role") if head else "system"
    role = "assistant" if last == "user" else "user"
    other = "user" if role == "assistant" else "assistant"
    summary = {"role": role, "content": summary_text, SUMMARY_KEY: True}
    ack = {"role": other, "content": ACK[other], SUMMARY_KEY: True}
    return [*head, summary, ack, *tail], role, True


def _unchanged(messages: list[Message], status: str, reason: str, **kw: Any
               ) -> CompactionResult:
    report = CompactionReport(status=status, reason=reason, messages_before=len(messages),
                              messages_after=len(messages), **kw)
    return CompactionResult(list(messages), report)


def compact(messages: Sequence[Message], *, context_length: int,
            policy: CompactionPolicy | None = None, counter: TokenCounter | None = None,
            summarizer: Summarizer | None = None, model: str | None = None,
            target_tokens: int | None = None, previous_summary: str | None = None,
            compaction_count: int | None = None,
            tools: Sequence[dict[str, Any]] | None = None,
            fallback: Summarizer | None = None,
            provider_notes: Sequence[str] | str = (),
            own_system: int | None = None) -> CompactionResult:
    """Compact ``messages`` to fit ``target_tokens`` (default: the policy's trigger threshold).

    ``own_system``: how many of the leading system messages are the conversation's own (a
    runtime's view: its system prompt; the others are turns an earlier compaction moved up,
    which are weighed again: ``_order_system_first``); default all of them.

    Pure apart from ``summarizer``; never mutates the input. See the module docstring.
    ``provider_notes`` (what memory providers returned from ``on_pre_compress``) reach the
    summarizer as ``SummaryRequest.provider_notes`` (see ``provider_notes_of``); none → the
    same output as without the argument.
    """
    messages = validate_input(messages, context_length)
    policy = policy or CompactionPolicy()
    counter = _CountedOnce(counter or get_counter(model))
    summarizer = summarizer or BuiltinSummarizer()
    fallback = fallback or BuiltinSummarizer()
    threshold = threshold_for(policy, context_length, model)
    target = max(1, target_tokens if target_tokens is not None else threshold.tokens)
    ordered = _order_system_first(messages, own=own_system)
    before = _tokens(messages, counter, tools)
    prev_idx, prev_body, prev_anchors = _previous_summary(ordered, previous_summary)
    count = compaction_count if compaction_count is not None else (1 if prev_idx is not None
                                                                    else 0)
    common: dict[str, Any] = dict(
        summarizer=summarizer.name, tokens_before=before, tokens_after=before,
        target_tokens=target, threshold_tokens=threshold.tokens, fits=before <= target,
        compaction_count=count, warnings=threshold.notes)
    if len(ordered) < policy.min_messages_to_compact:
        if before > target:
            common["warnings"] = (*threshold.notes, f"does not fit: {before} tokens for a "
                                  f"target of {target}, and {len(ordered)} messages are too few "
                                  "to compact. Use a model with a larger window or shorten "
                                  "them.")
        return _unchanged(list(messages), "noop", "too few messages to compact", **common)
    # the messages' room: the tool definitions go with every request, so the head, tail and
    # summary share what they leave (planned against the whole target, a window with large
    # definitions got a tail that could never fit, and overflowed on every retry)
    room = max(1, target - counter.count_tools(tools))
    plan = _plan(ordered, policy, counter, room, count, (prev_body, prev_anchors))
    if ordered != list(messages):  # (the system turns were moved: those of the tail go back)
        kept = _tail_keeps_system_turns(messages, plan, policy, counter, room, count,
                                        (prev_body, prev_anchors), own_system)
        if kept is not None:
            ordered, plan = kept
    plan.removed = len(messages) - len(ordered)
    plan.notes = provider_notes_of(provider_notes)
    return _finish(plan, messages, summarizer, fallback, counter, policy, target, before,
                   tools, common)


def _finish(plan: _Plan, original: Sequence[Message], summarizer: Summarizer,
            fallback: Summarizer, counter: TokenCounter, policy: CompactionPolicy, target: int,
            before: int, tools: Sequence[dict[str, Any]] | None, common: dict[str, Any]
            ) -> CompactionResult:
    language = detect_language(plan.messages)
    warnings = list(common.pop("warnings"))
    middle = plan.messages[plan.head_end:plan.tail_start]
    # (a stretch of the previous summary and its acknowledgement alone has nothing new: planned
    # in the background right after a compaction, each such plan paid for a summary of the
    # summary that could not be stored — 4 of 22 turns of a real Claude Code run)
    if plan.tail_start <= plan.head_end or all(map(is_summary_message, middle)):
        return _pruned_only(plan, original, counter, tools, before, target, warnings, common)
    kept = sum(counter.count_message(m) for m in plan.pruned[:plan.head_end]
               + plan.pruned[plan.tail_start:])
    budget = summary_budget(policy, sum(counter.count_message(m) for m in middle))
    budget = max(256, min(budget, target - counter.count_tools(tools) - kept - FRAMING_TOKENS))
    # the room measured around an empty summary: under the 256-token floor, body and anchors
    # share what is really there, so a result that can fit does (and keeps its identifiers)
    room = _room_for_anchors(plan, "", language, counter, tools, target)
    if room is not None and room < budget:
        budget = max(TIGHT_MIN_TOKENS, room)
    share = (policy.anchor_share if budget >= policy.tight_summary_tokens
             else max(policy.anchor_share, policy.anchor_share_tight))
    anchor_budget = min(policy.anchor_max_tokens, int(budget * share))
    body_budget = max(TIGHT_MIN_TOKENS // 2, budget - anchor_budget)
    try:
        draft, status, more, error_kind = _summarize(plan, summarizer, fallback, counter, policy,
                                         body_budget, language, tools)
    except SummarizerError as exc:
        common["summarizer"] = summarizer.name
        return _unchanged(list(original), "aborted", f"summarizer failed: {exc.message}",
                          error_kind=exc.kind, language=language,
                          warnings=(*warnings, str(exc)), **common)
    warnings += more + list(draft.warnings)
    body = redact(_fit_body(strip_think(draft.body), body_budget, counter, warnings))
    # what the body left unused goes to the anchors, within the summary's budget; never so
    # far that a result that fits stops fitting (when the kept floor alone overflows, the
    # summary has its minimum budget, which it may then use in full)
    spare = (min(budget, room) if room is not None else budget) - counter.count_text(body)
    anchor_budget = max(anchor_budget, min(policy.anchor_max_tokens, spare))
    free = _room_for_anchors(plan, body, language, counter, tools, target)
    if free is not None:  # it fits without anchors: they must not push it over
        anchor_budget = min(anchor_budget, free)
    # an anchor is a piece cut out of its text: a credential in it lost the name that told
    # redact what it is (the value of AWS_SECRET_ACCESS_KEY=… went into the index verbatim)
    secrets = secrets_in_texts(_text_and_arguments(m) for m in middle)
    anchors = without_secrets(select_anchors(
        extract_anchors([m for m in middle if not is_demonstration(m)]),
        budget_tokens=anchor_budget, count_text=counter.count_text,
        carried=plan.previous_anchors, covered=body), secrets)
    text = wrap_summary(body, anchors, language)
    assembled, role, acked = _assemble(plan, text)
    result, stubs, orphans = _repaired(assembled, plan.messages)
    if stubs or orphans:
        warnings.append(f"tool pairs repaired: {stubs} stub results added, "
                        f"{orphans} orphan results dropped")
    after = _tokens(result, counter, tools)
    common.update(summarizer=draft.summarizer, error_kind=error_kind, usage=dict(draft.usage))
    if after >= before:
        if before > target:
            warnings.append(fit_warning(plan, counter, before, target, tools))
        return _unchanged(list(original), "refused",
                          f"compaction would not shrink the context ({before} -> {after} tokens)",
                          language=language, warnings=tuple(warnings), **common)
    fits = after <= target
    reason = "compacted" if fits else _irreducible(plan, counter, after, target, tools)
    if not fits:
        warnings.append(fit_warning(plan, counter, after, target, tools))
    common.update(tokens_after=after, fits=fits)
    report = CompactionReport(
        status=status, reason=reason, messages_before=len(original), messages_after=len(result),
        head_end=plan.head_end, tail_start=plan.tail_start + plan.removed,
        summarized=plan.tail_start - plan.head_end, summary=text, summary_role=role,
        summary_acknowledged=acked, anchors=tuple(anchors), language=language,
        warnings=tuple(warnings), prune=plan.stats.as_dict(), **common)
    return CompactionResult(result, report)


def _pruned_only(plan: _Plan, original: Sequence[Message], counter: TokenCounter,
                 tools: Sequence[dict[str, Any]] | None, before: int, target: int,
                 warnings: list[str], common: dict[str, Any]) -> CompactionResult:
    result, _, _ = _repaired(plan.pruned, plan.messages)
    after = _tokens(result, counter, tools)
    if after >= before:
        if before > target:
            warnings.append(fit_warning(plan, counter, before, target, tools))
        return _unchanged(list(original), "noop",
                          "nothing to summarize between the protected head and tail",
                          warnings=tuple(warnings), **common)
    fits = after <= target
    if not fits:
        warnings.append(fit_warning(plan, counter, after, target, tools))
    common.update(tokens_after=after, fits=fits)
    reason = ("old tool outputs pruned; nothing left to summarize" if fits
              else _irreducible(plan, counter, after, target, tools))
    report = CompactionReport(
        status="pruned", reason=reason,
        messages_before=len(original), messages_after=len(result), head_end=plan.head_end,
        tail_start=plan.tail_start + plan.removed, warnings=tuple(warnings),
        prune=plan.stats.as_dict(), **common)
    return CompactionResult(result, report)


def _irreducible(plan: _Plan, counter: TokenCounter, after: int, target: int,
                 tools: Sequence[dict[str, Any]] | None) -> str:
    head = sum(counter.count_message(m) for m in plan.pruned[:plan.head_end])
    tail = sum(counter.count_message(m) for m in plan.pruned[plan.tail_start:])
    schemas = counter.count_tools(tools)
    return (f"irreducible floor: {after} tokens > target {target} (system+head {head}, "
            f"verbatim tail {tail}" + (f", tool definitions {schemas}" if schemas else "")
            + "); auto-compaction should stop, not loop")


def fit_warning(plan: _Plan, counter: TokenCounter, after: int, target: int,
                tools: Sequence[dict[str, Any]] | None = None) -> str:
    """Why the result does not fit, in plain words (``warnings``; the CLI exits 1 on it)."""
    system = sum(counter.count_message(m)
                 for m in plan.pruned[:system_prefix_end(plan.pruned)])
    head = sum(counter.count_message(m) for m in plan.pruned[:plan.head_end]) - system
    tail = sum(counter.count_message(m) for m in plan.pruned[plan.tail_start:])
    schemas = counter.count_tools(tools)
    listed = f", the tool definitions sent with every request {schemas}" if schemas else ""
    return (f"does not fit: {after} tokens for a target of {target}. What must stay takes "
            f"{system + head + tail + schemas}: the system prompt {system}, the protected first "
            f"messages {head}, the recent messages kept verbatim {tail} (the last user and "
            f"assistant messages are never cut){listed}. Use a model with a larger window or "
            "start a new session.")
