"""The ``Store`` Protocol and the records it returns: the contract every backend keeps.

The ledger is append-only. Compaction adds a checkpoint and never rewrites or deletes a message;
rewind flips ``active`` off (recorded, reversible); only an explicit user action (``delete_session``,
``prune_sessions``) removes rows.

Invariants every backend keeps (the conformance suite in tests/store checks each one):
- ``seq`` is strictly increasing per session, with no gaps among rows a single call appends.
- ``sync_messages(full_history)`` appends only the suffix that is not already stored, even when
  several processes send the same history at once: no duplicate rows, ever. A history that
  diverges from the stored active chain at position k rewinds the stored rows from k on
  (recorded) before appending; a history that is a strict prefix of the stored chain is a no-op.
- ``add_checkpoint`` moves the view forward only: a checkpoint whose ``tail_start_seq`` is not
  past the latest one's is refused (Conflict). With ``expect`` it is a compare-and-set inside the
  insert's transaction: it lands only if the latest checkpoint is still ``expect.checkpoint_id``
  and the row ``expect.tip_seq`` (the last one the plan saw) is still active, so two compactors
  planning from the same view never both commit (one compaction per window).
- A lease dies with its holder: besides its ttl, it lapses as soon as the process (SQLite) or
  the database connection (PostgreSQL) that took it is gone, so a killed compactor blocks nobody.
- ``projection`` returns the latest checkpoint and the active messages from its ``tail_start_seq``
  on; its cost does not grow with the number of archived rows before it.
- Search never raises on user input; rewound (inactive) rows are excluded unless asked for;
  archived rows (before a checkpoint) stay searchable; a 1–2 character CJK query finds every
  message that contains it.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from refold._records import dataclass, field
from refold.errors import InvalidInput
from refold.messages.model import Message

LinkKind = Literal["compaction", "branch", "fork", "side", "subagent", "continuation"]
# the events noting an agent's own conversation id on a session (``sessions_of_agent``): on
# its conversation, on a side call of it, on a subagent's conversation
AGENT_EVENT, AGENT_SIDE_EVENT, AGENT_SUBAGENT_EVENT = "agent", "agent-side", "agent-subagent"
AGENT_EVENTS = (AGENT_EVENT, AGENT_SIDE_EVENT, AGENT_SUBAGENT_EVENT)
SortOrder = Literal["relevance", "recency"]


@dataclass(frozen=True)
class Session:
    id: str
    title: str | None
    parent_session_id: str | None
    link_kind: str | None  # "compaction" | "branch" | "fork" | None
    source: str | None
    model: str | None
    owner: str  # namespace for isolation (an API key's tenant); "" is the local user
    started_at: float
    ended_at: float | None
    end_reason: str | None
    message_count: int  # active + inactive rows stored for this session
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cost_usd: float = 0.0
    fork_seq: int | None = None  # for branch/fork: the parent's seq the copy stops at


@dataclass(frozen=True)
class SessionDraft:
    """A session for ``sync_messages(create=…)`` to create when its id is not stored yet, in
    the transaction that stores its messages (an import killed half-way leaves no empty
    session); the fields mean what ``create_session``'s arguments mean."""

    title: str | None = None
    source: str | None = None
    model: str | None = None
    parent_session_id: str | None = None
    link_kind: str | None = None
    owner: str = ""
    started_at: float | None = None


@dataclass(frozen=True)
class StoredMessage:
    session_id: str
    seq: int
    message: Message  # wire form, as appended
    identity: str
    token_count: int | None
    created_at: float
    active: bool

    @property
    def role(self) -> str:
        return str(self.message.get("role", ""))


@dataclass(frozen=True)
class AppendResult:
    appended: list[StoredMessage]
    skipped: int  # messages recognized as already stored
    rewound: int = 0  # rows deactivated because the sent history diverged from the stored one
    # append_messages with expect_last: the session's view tip as the write transaction ended
    # (a caller extending its own projection knows it is current without reading ``view_tip``)
    tip: ViewTip | None = None


@dataclass(frozen=True)
class Usage:
    """Token use and cost to add to a session's totals (``append_messages(usage=)``)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cost_usd: float = 0.0
    model: str | None = None


@dataclass(frozen=True)
class CheckpointDraft:
    """What compaction hands the store; the store assigns id and created_at."""

    summary: str
    first_seq: int  # first seq the summary replaces
    last_seq: int  # last seq the summary replaces
    tail_start_seq: int  # first seq kept verbatim after the summary
    anchors: list[str] = field(default_factory=list)
    tokens_before: int = 0
    tokens_after: int = 0
    summarizer: str = "builtin"
    status: str = "ok"  # "ok" | "fallback"
    summary_role: str = "user"
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Checkpoint(CheckpointDraft):
    id: int = 0
    session_id: str = ""
    created_at: float = 0.0


@dataclass(frozen=True)
class CheckpointBase:
    """What a checkpoint was planned from, for ``add_checkpoint(expect=…)``: the latest
    checkpoint then and the last active row then. Rows appended after that tip only extend the
    kept tail; a checkpoint added since, or a rewind of the tip, makes the plan stale."""

    checkpoint_id: int | None  # None: the session had no checkpoint
    tip_seq: int | None  # None: the view had no active rows

    @classmethod
    def of(cls, projection: Projection) -> CheckpointBase:
        return cls(projection.base_checkpoint_id,
                   projection.messages[-1].seq if projection.messages else None)


@dataclass(frozen=True)
class Projection:
    """The model view: ``checkpoint`` (summary) if any, then ``messages`` (active, from tail)."""

    session_id: str
    checkpoint: Checkpoint | None
    messages: list[StoredMessage]
    # a client's sliding window (``refold.runtime.window``): the seq its first message is at
    # (None: the whole conversation); ``messages`` then start there
    window: int | None = None
    # the session's latest checkpoint when it is not applied (it stands for rows the view
    # does not hold, or for rows rewound since): what a checkpoint planned from this view follows
    set_aside: int | None = None

    @property
    def base_checkpoint_id(self) -> int | None:
        """The session's latest checkpoint as this view was read (applied or set aside)."""
        return self.checkpoint.id if self.checkpoint is not None else self.set_aside


#: How many characters of an assistant row's search text its window-candidate index holds.
REPLY_KEY_CHARS = 128


@dataclass(frozen=True)
class ViewTip:
    """What the projection of a session currently ends on, read in one small query: a caller
    holding a projection it built itself (the runtime) checks it is still current with this."""

    last_seq: int | None  # the last ACTIVE row's seq (None: no active rows)
    last_identity: str | None
    checkpoint_id: int | None  # the latest checkpoint's id (None: no checkpoint)


@dataclass(frozen=True)
class RewindRecord:
    id: int
    session_id: str
    from_seq: int
    count: int
    created_at: float
    undone: bool
    # undo_rewind: the rewind that now holds the messages that had followed the restored ones
    # (an edit's new tail), itself reversible; None when nothing followed them
    replaced_by: int | None = None


@dataclass(frozen=True)
class RewindRows:
    """A rewind and the rows (by seq) it deactivated and still holds (``refold migrate``)."""

    record: RewindRecord
    seqs: tuple[int, ...]


@dataclass(frozen=True)
class Event:
    id: int
    session_id: str
    kind: str
    payload: dict[str, Any]
    created_at: float


@dataclass(frozen=True)
class SearchQuery:
    text: str
    session_id: str | None = None
    role: str | None = None
    source: str | None = None
    owner: str | None = None  # None: every owner (local CLI); a value: only that namespace
    since: float | None = None
    until: float | None = None
    include_inactive: bool = False
    exclude_session_id: str | None = None  # e.g. the current session in session_search
    sort: SortOrder = "relevance"
    limit: int = 20
    window: int = 1  # surrounding messages on each side of a hit


@dataclass(frozen=True)
class SearchHit:
    session_id: str
    session_title: str | None
    seq: int
    role: str
    snippet: str  # matched text with the match in [brackets]
    content: str
    created_at: float
    score: float
    # the hit and its neighbours (SearchQuery.window each side), in seq order; [] when window=0
    window: list[StoredMessage] = field(default_factory=list)
    # every session of this lineage holding the same message (forks and compaction children
    # copy rows), this hit's session first; one hit stands for all of them
    lineage: tuple[str, ...] = ()
    # found by the vector side of a hybrid or vector search only: near the question in meaning,
    # holding none of its words (the nearest messages come back even when none answers)
    by_meaning: bool = False
    message_id: int = 0  # the ledger row (0: not known), e.g. whether it has a vector yet


@dataclass(frozen=True)
class MemoryRow:
    text: str
    created_at: float
    updated_at: float
    last_used_at: float = 0.0  # last time in a snapshot a turn used (0: never; refold.memory)


@runtime_checkable
class Store(Protocol):
    """A ledger backend. SQLite (embedded default) and PostgreSQL implement it."""

    url: str

    # -- sessions -------------------------------------------------------------------------
    # ``started_at``: when the conversation began (an import of a past one; ``started``
    # checks it), else now
    def create_session(self, *, title: str | None = None, source: str | None = None,
                       model: str | None = None, parent_session_id: str | None = None,
                       link_kind: str | None = None, owner: str = "",
                       session_id: str | None = None,
                       started_at: float | None = None) -> Session: ...
    def get_session(self, session_id: str) -> Session: ...
    def resolve_session(self, ref: str, *, owner: str | None = None,
                        prefix: bool = True, exact: bool = False) -> Session: ...
    # prefix=False: an exact id or title only (a name must never reach another session by a
    # prefix of its id); exact=True: a title names only the session titled exactly so, never
    # its lineage's newest "#N" (what deletes or appends to a session)
    def list_sessions(self, *, limit: int = 50, owner: str | None = None,
                      source: str | None = None) -> list[Session]: ...
    def rename_session(self, session_id: str, title: str) -> Session: ...
    def delete_session(self, session_id: str) -> int: ...
    # returns the number of message rows deleted; children move to the deleted session's parent
    # (keeping their link kind) or become roots (link kind and fork seq cleared)
    def end_session(self, session_id: str, reason: str) -> None: ...
    def add_usage(self, session_id: str, *, input_tokens: int = 0, output_tokens: int = 0,
                  cache_read_tokens: int = 0, cost_usd: float = 0.0,
                  model: str | None = None) -> None: ...

    # -- messages (the ledger) ------------------------------------------------------------
    # ``expect_last``: append only if the session's last active row has this identity (``""``:
    # only if it has no active row), else raise Conflict and store nothing (checked inside the
    # write transaction) — the fast path of a caller that already knows the stored chain (the
    # proxy's re-sent history). None: no check.
    # ``usage``: added to the session's totals in the same transaction (as ``add_usage``).
    def append_messages(self, session_id: str, messages: Sequence[Message], *,
                        token_counts: Sequence[int | None] | None = None,
                        expect_last: str | None = None,
                        usage: Usage | None = None) -> AppendResult: ...
    # ``created_at``: when each message was said (seconds since the epoch; None: now), for an
    # import of a past conversation (``message_times`` checks them). ``usage``: per message,
    # what the model calls that wrote it used; the appended messages' usage is added to the
    # session's totals in the same transaction (``appended_usage``), so a re-import adds none;
    # each such row keeps what it added (``encode_spent``; None: nothing, and never any): a
    # sync that rewinds it takes that out, one that keeps it adds the growth its entry shows.
    # ``create``: a session missing under ``session_id`` is created so, in the same
    # transaction as the messages (as ``create_session`` would: its Conflicts included); an
    # existing one is used as it is
    def sync_messages(self, session_id: str, history: Sequence[Message], *,
                      token_counts: Sequence[int | None] | None = None,
                      created_at: Sequence[float | None] | None = None,
                      usage: Sequence[Usage | None] | None = None,
                      create: SessionDraft | None = None,
                      expect_last: str | None = None) -> AppendResult: ...
    # ``expect_last``: the identity the session's last active message had when ``history`` was
    # made from it (``""``: it had none); another one there now (a concurrent writer) is a
    # Conflict and nothing is written (the caller reads again), never a rewind of what the
    # other writer stored
    def get_messages(self, session_id: str, *, include_inactive: bool = False,
                     start_seq: int | None = None, end_seq: int | None = None,
                     limit: int | None = None) -> list[StoredMessage]: ...
    # The sessions of ``owner`` that hold one of ``replies`` (assistant messages) as an active
    # row, the one most recently stored first: the candidates a client's sliding window may
    # continue (``refold.runtime.window`` checks each). Matched on the start of the reply's
    # search text (an index of assistant rows), so a candidate is only a candidate.
    def window_candidates(self, owner: str, replies: Sequence[Message], *,
                          limit: int = 16) -> list[str]: ...
    # The sessions of ``owner`` whose first message (seq 1) has ``identity`` (a conversation's
    # opening: ``chain_identities(messages)[0]``), the newest first: where a transcript with no
    # id of its own may already be stored (an export imported back). An index of first rows.
    def sessions_opening_with(self, identity: str, *, owner: str = "",
                              limit: int = 32) -> list[str]: ...
    # The sessions of ``owner`` an agent's conversation id was noted on (events of a kind in
    # ``AGENT_EVENTS``, payload ``{"id": agent}``), the newest note first: (session id, True
    # when beside the conversation: a side call or a subagent's); ``refold.server.agents``
    def sessions_of_agent(self, agent: str, *, owner: str = "",
                          limit: int = 16) -> list[tuple[str, bool]]: ...
    # Link an unlinked session under ``parent_session_id`` (``link_kind``); False when it has
    # a parent already or either session is missing (nothing changed)
    def link_session(self, session_id: str, parent_session_id: str, link_kind: str) -> bool: ...
    def iter_messages(self, session_id: str, *,
                      include_inactive: bool = False) -> Iterator[StoredMessage]: ...
    def last_message(self, session_id: str) -> StoredMessage | None: ...  # last ACTIVE one
    def messages_around(self, session_id: str, seq: int, *, before: int = 2, after: int = 2,
                        include_inactive: bool = False) -> list[StoredMessage]: ...
    def set_token_counts(self, session_id: str, counts: dict[int, int]) -> None: ...

    # -- rewind, fork, lineage -------------------------------------------------------------
    def rewind(self, session_id: str, from_seq: int, *,
               any_role: bool = False) -> RewindRecord: ...
    # from_seq must be a user message unless ``any_role`` (the proxy rewinding a re-sent
    # history's stored continuation, which starts with the reply the client did not keep)
    def undo_rewind(self, rewind_id: int) -> RewindRecord: ...
    # Conflict when already undone, or when the session changed after the rewind (rows
    # appended or rewound since), i.e. the restored rows would no longer chain
    def fork_session(self, session_id: str, at_seq: int | None = None, *,
                     kind: str = "fork", title: str | None = None) -> Session: ...
    def ancestors(self, session_id: str) -> list[Session]: ...  # nearest parent first
    def lineage_roots(self, session_ids: Iterable[str]) -> dict[str, str]: ...
    # each session's root ancestor (itself when it has no parent), in one query
    def children(self, session_id: str) -> list[Session]: ...
    def resolve_resume(self, session_id: str) -> Session: ...
    # follows "compaction" children only (newest at each step) to the deepest one with messages
    def next_lineage_title(self, title: str) -> str: ...

    # -- checkpoints and the model view -----------------------------------------------------
    # ``expect``: commit only if the view is still the one planned from (else Conflict, nothing
    # written); a draft that does not move the tail start past the latest checkpoint's: Conflict
    def add_checkpoint(self, session_id: str, draft: CheckpointDraft, *,
                       expect: CheckpointBase | None = None) -> Checkpoint: ...
    def latest_checkpoint(self, session_id: str) -> Checkpoint | None: ...
    def list_checkpoints(self, session_id: str) -> list[Checkpoint]: ...
    def projection(self, session_id: str) -> Projection: ...
    def view_tip(self, session_id: str) -> ViewTip: ...  # O(1): the projection's "version"

    # -- events (task state: goal, plan, todo) ----------------------------------------------
    def append_event(self, session_id: str, kind: str, payload: dict[str, Any]) -> Event: ...
    # a session's events in order (of ``kind``; with ``after_id``, only those stored after it)
    def list_events(self, session_id: str, kind: str | None = None, *,
                    after_id: int = 0) -> list[Event]: ...

    # -- search ----------------------------------------------------------------------------
    def search(self, query: SearchQuery) -> list[SearchHit]: ...
    # message vectors (refold.search.vectors scores them; appends never write them)
    def unembedded_messages(self, model: str, *, after_id: int = 0,
                            limit: int = 256) -> list[tuple[int, str]]: ...
    def put_vectors(self, model: str, rows: list[tuple[int, bytes]]) -> None: ...
    def vectors_after(self, model: str, after_id: int = 0,
                      limit: int = 50_000) -> list[tuple[int, bytes]]: ...
    # the scored (message id, score) rows passing the query's filters, in order (window=[])
    def hits_for_ids(self, scored: list[tuple[int, float]],
                     query: SearchQuery) -> list[SearchHit]: ...

    # -- leases (one compactor per session window, across processes and hosts) ------------
    # held until released, ``ttl_seconds`` passed, or the taking process / connection is gone
    def acquire_lease(self, name: str, holder: str, ttl_seconds: float) -> bool: ...
    def release_lease(self, name: str, holder: str) -> None: ...

    # -- DB-backed memory (layer 2 on several hosts) ----------------------------------------
    def memory_load(self, profile: str, target: str) -> tuple[list[MemoryRow], int]: ...
    def memory_save(self, profile: str, target: str, rows: Sequence[MemoryRow],
                    expected_version: int) -> int: ...

    # -- bulk copy between stores (``refold migrate``; see refold.store.copy) ---------------
    def import_session(self, session: Session, messages: Iterable[StoredMessage],
                       checkpoints: Sequence[Checkpoint], events: Sequence[Event],
                       rewinds: Sequence[RewindRows] = ()) -> bool:
        """Insert a session exactly as given (id, counters, seq, identity, active, created_at)
        in one transaction; False (and nothing written) if the id exists already. The parent,
        if any, must exist; checkpoints, events and rewinds keep their order, not their ids
        (a rewind's rows are named by seq, so ``undo_rewind`` works on the copy)."""
        ...
    def list_rewinds(self, session_id: str) -> list[RewindRows]:
        """The session's rewinds, oldest first, each with the seqs of the rows it holds
        inactive (none once undone). NotFound for an unknown session."""
        ...
    def memory_documents(self) -> list[tuple[str, str]]:
        """Every stored (profile, target) memory document."""
        ...

    # -- maintenance -----------------------------------------------------------------------
    def prune_sessions(self, older_than_days: float) -> int: ...  # whole idle lineages; count
    def integrity_check(self) -> list[str]: ...
    def rebuild_search_indexes(self) -> None:
        """Rebuild the search indexes (and other derived data) from the stored messages."""
        ...
    def backup(self, destination: str) -> None:
        """A consistent copy of the database file at ``destination`` (InvalidInput where the
        backend has no file: PostgreSQL, in-memory SQLite)."""
        ...
    def info(self) -> dict[str, Any]: ...
    def close(self) -> None: ...


MAX_FUTURE_SECONDS = 86_400.0  # a stated time later than this past now is taken for a mistake


def appended_usage(usage: Sequence[Usage | None] | None, count: int,
                   first_new: int) -> Usage | None:
    """The sum of ``usage`` (one entry per message of a history of ``count``) over the messages
    from ``first_new`` on, the last model named among them kept; None when there is none.
    InvalidInput when the lengths differ."""
    if usage is None:
        return None
    if isinstance(usage, str | bytes) or len(usage) != count:
        raise InvalidInput(f"{len(usage)} usage entries for {count} messages")
    new = [u for u in usage[first_new:] if u is not None]
    if any(not isinstance(u, Usage) for u in new):
        raise InvalidInput("usage entries must be Usage records or None")
    return usage_sum(new)


# What a session's totals hold for one row ``sync_messages(usage=…)`` stored (its ``spent``
# column: input, output, cache-read tokens and cost as JSON; NULL: the row holds none of the
# totals — stored without usage, or copied from the session it was forked from). A later sync
# keeps the totals equal to the sum over those rows: a rewound row's is taken out (and its
# record zeroed: restored by an undo, it holds none), a kept row's growth added (Codex reports
# a call's tokens after its message; a transcript read while the agent wrote is cut there).
def encode_spent(usage: Usage | None) -> str | None:
    """``usage`` as a row's ``spent`` record (None: the row holds none of the totals)."""
    if usage is None:
        return None
    return json.dumps([int(usage.input_tokens), int(usage.output_tokens),
                       int(usage.cache_read_tokens), float(usage.cost_usd)])


SPENT_NOTHING = encode_spent(Usage())


def decode_spent(text: str | None) -> Usage:
    """A row's ``spent`` record (anything unreadable: nothing)."""
    try:
        values = json.loads(text) if text else None
        tokens_in, tokens_out, cached, cost = values  # type: ignore[misc]
        return Usage(int(tokens_in), int(tokens_out), int(cached), float(cost))
    except (TypeError, ValueError):
        return Usage()


def usage_change(new: Usage, old: Usage) -> Usage | None:
    """What to add to totals holding ``old`` so that they hold ``new`` instead (None: the
    same); the model is ``new``'s."""
    if (new.input_tokens, new.output_tokens, new.cache_read_tokens, new.cost_usd) == (
            old.input_tokens, old.output_tokens, old.cache_read_tokens, old.cost_usd):
        return None
    return Usage(new.input_tokens - old.input_tokens, new.output_tokens - old.output_tokens,
                 new.cache_read_tokens - old.cache_read_tokens, new.cost_usd - old.cost_usd,
                 new.model)


def usage_regrowth(rows: Iterable[tuple[int, str | None]], kept: Sequence[Usage | None]
                   ) -> tuple[Usage | None, list[tuple[str | None, int]]]:
    """What the kept rows' usage grew by since they were stored (a call's tokens reported after
    its message), from ``rows`` (seq, ``spent`` as stored) and ``kept`` (their usage as the
    history gives it now): the total to add to the session's totals (None: nothing) and, per
    changed row, (its new ``spent``, seq)."""
    changes, updates = [], []
    for (seq, spent), now in zip(rows, kept, strict=False):
        if spent is None or now is None:
            continue  # the row holds none of the totals, or the history says nothing
        change = usage_change(now, decode_spent(spent))
        if change is not None:
            changes.append(change)
            updates.append((encode_spent(now), seq))
    return usage_sum(changes), updates


def usage_sum(usages: Sequence[Usage]) -> Usage | None:
    """The totals of ``usages``, the last model named among them kept; None when empty."""
    if not usages:
        return None
    models = [u.model for u in usages if u.model]
    return Usage(sum(u.input_tokens for u in usages), sum(u.output_tokens for u in usages),
                 sum(u.cache_read_tokens for u in usages), sum(u.cost_usd for u in usages),
                 models[-1] if models else None)


def started(started_at: float | None) -> float:
    """A session's start: ``started_at`` when it is a plausible time (as ``message_times``
    checks one), else now."""
    now = time.time()
    return message_times([started_at], 1, now)[0]


def message_times(created_at: Sequence[float | None] | None, count: int,
                  now: float) -> list[float]:
    """One ``created_at`` per message for ``sync_messages``: each stated time that is a finite
    number from 1970 to a day from now, else ``now`` (an import's bad timestamp costs its
    time, never the message). InvalidInput when the lengths differ."""
    if created_at is None:
        return [now] * count
    if isinstance(created_at, str | bytes) or len(created_at) != count:
        raise InvalidInput(f"{len(created_at)} times for {count} messages")
    out = []
    for value in created_at:
        ok = isinstance(value, int | float) and not isinstance(value, bool) \
            and math.isfinite(value) and 0 <= value <= now + MAX_FUTURE_SECONDS
        out.append(float(value) if ok else now)  # type: ignore[arg-type]
    return out


def distinct_reply_keys(replies: Sequence[Message], key: Callable[[Message], str]) -> list[str]:
    """The distinct non-empty ``key`` of the assistant messages among ``replies``, in order:
    what ``Store.window_candidates`` looks up (each backend's ``key`` is the start of the
    search text as it stores it)."""
    return list(dict.fromkeys(
        k for k in (key(m) for m in replies
                    if isinstance(m, dict) and m.get("role") == "assistant") if k))

