"""Copy one store into another and prove the copy is faithful (``refold migrate``).

Backend-neutral: only ``Store`` Protocol calls, so SQLite → PostgreSQL, PostgreSQL → SQLite and
same-backend copies all work. Invariants:

- Sessions are copied parents first, each in one transaction of the target
  (``Store.import_session``) with its ids, titles, lineage, counters, and every message as it
  was (seq, identity, active flag, token count, created_at), then checkpoints, events and
  rewinds.
- Re-running is safe: a session id the target has already is skipped, a memory document the
  target has already is left alone; verification then reports any real difference.
- ``verify_copy`` compares, per session, the row count and a SHA-256 over the session record,
  every message, checkpoint and event (canonical JSON, so storage formats do not matter), and
  every memory document's rows. A non-empty ``mismatches`` list means the copy is not faithful.
- Rewind records are copied with the rows each still holds (by seq), so ``undo_rewind`` works
  on the target as on the source (their ids are the target's own).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from urllib.parse import urlsplit

from refold import _records as records
from refold._records import dataclass, field
from refold.errors import InvalidInput
from refold.messages.model import canonical_json
from refold.store.base import Session, Store, StoredMessage

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``; phases: "sessions", "memory", "verify"."""

ALL = 2**62  # "no limit" for list_sessions


@dataclass
class CopyReport:
    sessions_total: int = 0
    sessions_copied: int = 0
    sessions_skipped: int = 0
    messages_copied: int = 0
    memory_copied: int = 0
    memory_skipped: int = 0
    sessions_verified: int = 0
    mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches


def _quiet(phase: str, done: int, total: int) -> None:
    return None


def parents_first(sessions: Iterable[Session]) -> list[Session]:
    """Sessions ordered so every parent comes before its children (missing parents dropped)."""
    by_id = {s.id: s for s in sessions}
    ordered: list[Session] = []
    placed: set[str] = set()
    for start in sorted(by_id.values(), key=lambda s: (s.started_at, s.id)):
        chain = []
        node: Session | None = start
        while node is not None and node.id not in placed and node not in chain:
            chain.append(node)
            node = by_id.get(node.parent_session_id) if node.parent_session_id else None
        for item in reversed(chain):
            if item.parent_session_id is not None and item.parent_session_id not in by_id:
                item = records.replace(item, parent_session_id=None, link_kind=None)
            ordered.append(item)
            placed.add(item.id)
    return ordered


def store_identity(store: Store) -> tuple[object, ...]:
    """What names a store's data, however its URL was spelled: the real path of a SQLite
    file; server, port, database and schema of a PostgreSQL store."""
    info = store.info()
    if info["backend"] == "sqlite":
        path = str(info["path"])
        return ("sqlite", id(store)) if path == ":memory:" else ("sqlite", os.path.realpath(path))
    parts = urlsplit(str(info["url"]))
    host = parts.hostname or "localhost"
    host = "127.0.0.1" if host in ("localhost", "::1") else host
    return ("postgresql", host, parts.port or 5432, parts.path.lstrip("/"), info["schema"])


def copy_store(source: Store, target: Store, *, progress: Progress = _quiet,
               verify: bool = True) -> CopyReport:
    """Copy every session and memory document of ``source`` into ``target``, then verify.
    ``InvalidInput`` when both name the same data (a copy onto itself proves nothing)."""
    if store_identity(source) == store_identity(target):
        raise InvalidInput("--from and --to name the same store", hint="give two different DBs")
    report = CopyReport()
    sessions = parents_first(source.list_sessions(limit=ALL))
    report.sessions_total = len(sessions)
    total_messages = sum(s.message_count for s in sessions)
    done = 0
    progress("sessions", 0, total_messages)
    for session in sessions:
        counted = _Counting(source.iter_messages(session.id, include_inactive=True))
        copied = target.import_session(session, counted, source.list_checkpoints(session.id),
                                       source.list_events(session.id),
                                       source.list_rewinds(session.id))
        if copied:
            report.sessions_copied += 1
            report.messages_copied += counted.count
        else:
            report.sessions_skipped += 1
        done += session.message_count
        progress("sessions", done, total_messages)
    _copy_memory(source, target, report, progress)
    if verify:
        report.mismatches = verify_copy(source, target, sessions, progress=progress)
        report.sessions_verified = len(sessions)
    return report


class _Counting:
    """Passes messages through while counting them (the target consumes the iterator)."""

    def __init__(self, messages: Iterator[StoredMessage]) -> None:
        self._messages = messages
        self.count = 0

    def __iter__(self) -> Iterator[StoredMessage]:
        for message in self._messages:
            self.count += 1
            yield message


def _copy_memory(source: Store, target: Store, report: CopyReport, progress: Progress) -> None:
    documents = source.memory_documents()
    for index, (profile, name) in enumerate(documents):
        rows, _ = source.memory_load(profile, name)
        _, version = target.memory_load(profile, name)
        if version == 0:
            target.memory_save(profile, name, rows, 0)
            report.memory_copied += 1
        else:
            report.memory_skipped += 1
        progress("memory", index + 1, len(documents))


def session_digest(store: Store, session_id: str) -> tuple[int, str]:
    """(message rows, SHA-256 of the session record and all its rows) — storage independent."""
    digest = hashlib.sha256()

    def feed(value: object) -> None:
        digest.update(canonical_json(value).encode("utf-8", "surrogatepass") + b"\n")

    session = records.asdict(store.get_session(session_id))
    feed(session)
    count = 0
    for m in store.iter_messages(session_id, include_inactive=True):
        feed([m.seq, m.identity, m.active, m.token_count, m.created_at, m.message])
        count += 1
    for c in store.list_checkpoints(session_id):
        feed({k: v for k, v in records.asdict(c).items() if k != "id"})
    for e in store.list_events(session_id):
        feed([e.kind, e.payload, e.created_at])
    for r in store.list_rewinds(session_id):
        feed([r.record.from_seq, r.record.count, r.record.created_at, r.record.undone,
              list(r.seqs)])
    return count, digest.hexdigest()


def verify_copy(source: Store, target: Store, sessions: list[Session] | None = None, *,
                progress: Progress = _quiet) -> list[str]:
    """Differences between ``source`` and ``target`` ([] when the copy is faithful)."""
    from refold.errors import NotFound

    if sessions is None:
        sessions = source.list_sessions(limit=ALL)
    problems: list[str] = []
    for index, session in enumerate(sessions):
        try:
            theirs = session_digest(target, session.id)
        except NotFound:
            problems.append(f"session {session.id}: missing in the target")
            continue
        ours = session_digest(source, session.id)
        if ours[0] != theirs[0]:
            grew = (" (it grew after it was copied: a re-run copies new sessions, not what a "
                    "copied one gained since)") if ours[0] > theirs[0] else ""
            problems.append(f"session {session.id}: {ours[0]} rows in the source, "
                            f"{theirs[0]} in the target{grew}")
        elif ours[1] != theirs[1]:
            problems.append(f"session {session.id}: content differs (hash mismatch)")
        progress("verify", index + 1, len(sessions))
    for profile, name in source.memory_documents():
        if source.memory_load(profile, name)[0] != target.memory_load(profile, name)[0]:
            problems.append(f"memory {profile}/{name}: rows differ")
    return problems
