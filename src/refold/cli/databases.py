"""``refold import`` of the databases other agents keep their sessions in.

Hermes-Agent's ``~/.hermes/state.db`` (``refold.messages.hermes_state``) and OpenCode's
``~/.local/share/opencode/opencode.db`` (``refold.messages.opencode_db``) each hold many
sessions. Each is imported into the refold session its own id names (``hermes:<id>`` /
``opencode:<id>`` hashed, as transcripts' conversation ids are), so importing the database
again after the agent went on stores only what is new. A conversation that ``refold serve``
stored whole already (the agent ran through the proxy) is not copied. The files are only read. Any other
SQLite file is refused as it is: a database is no transcript, and refold's own must never be
read back into itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from refold._records import dataclass
from refold.cli.app import AppContext
from refold.cli.ledger import Target, _new_title, _priced, _store_messages
from refold.cli.transcripts import _session_key
from refold.errors import AmbiguousReference, InvalidInput, NotFound
from refold.messages.agent_db import AgentSession, is_sqlite
from refold.messages.model import Message, chain_identities
from refold.store import Session, Store
from refold.store.base import SessionDraft, Usage


@dataclass(frozen=True)
class AgentDatabase:
    agent: str  # the agent's name, for people
    where: str  # where it keeps the file
    read: Callable[[Path], list[AgentSession]]
    holds: Callable[[Path], bool]  # is this file that agent's database?


def _hermes() -> AgentDatabase:
    from refold.messages.hermes_state import is_state_db, read_state

    return AgentDatabase("Hermes-Agent", "~/.hermes/state.db", read_state, is_state_db)


def _opencode() -> AgentDatabase:
    from refold.messages.opencode_db import is_opencode_db, read_opencode

    return AgentDatabase("OpenCode", "~/.local/share/opencode/opencode.db", read_opencode,
                         is_opencode_db)


AGENT_DATABASES = {"hermes": _hermes(), "opencode": _opencode()}


def database_kind(path: Path) -> str | None:
    """``hermes`` or ``opencode`` when ``path`` is that agent's database, else None."""
    for kind, database in AGENT_DATABASES.items():
        if database.holds(path):
            return kind
    return None


def sniff_database(path: Path) -> str | None:
    """What ``database_kind`` says of a SQLite file; None for a file that is no database;
    InvalidInput for a database refold does not read."""
    if not path.is_file() or not is_sqlite(path):
        return None
    kind = database_kind(path)
    if kind is None:
        raise InvalidInput(f"{path} is a SQLite database, not a transcript (the databases "
                           "refold reads are Hermes-Agent's ~/.hermes/state.db and OpenCode's "
                           "~/.local/share/opencode/opencode.db)",
                           hint="export the conversation as JSON or JSONL to import it")
    return kind


def import_database(app: AppContext, path: Path, kind: str, source: str | None
                    ) -> list[dict[str, Any]]:
    """Every session of the agent database at ``path`` with a message in it, parents first;
    one report each."""
    database = AGENT_DATABASES[kind]
    store = app.store
    reports: list[dict[str, Any]] = []
    left_out: Counter[str] = Counter()
    placed: dict[str, str] = {}  # the agent's session id -> the refold session holding it
    for found in database.read(path):
        left_out += found.skipped
        if not found.messages:
            continue
        plugin = _plugin_session(store, found.native_id) if kind == "hermes" else None
        if plugin is not None:  # refold's Hermes plugin keeps it already: never a second copy
            left_out["session refold's Hermes plugin keeps"] += 1
            placed[found.native_id] = plugin.id
            reports.append(_report(kind, found, plugin, None) | {"kept_by_plugin": True})
            continue
        target, session = _session_for(store, kind, found, placed.get(found.parent_id or ""),
                                       source)
        served = _served_session(store, found.messages) if session is None else None
        if served is not None:  # `refold serve` stored this conversation: never a second copy
            left_out["session refold serve keeps"] += 1
            placed[found.native_id] = served.id
            reports.append(_report(kind, found, served, None) | {
                "skipped": len(found.messages), "kept_by_serve": True})
            continue
        placed[found.native_id] = target.session_id
        usage = _priced(app, found.spend) if found.spend is not None else \
            _grown(session, found.totals, found.model, len(found.messages))
        if found.spend is None and usage is not None and session is not None and \
                _holds_last(store, session.id, found.messages):
            usage = None  # the growth goes with a new last message (see _grown)
        # a new session is created with its messages, in their transaction (killed half-way,
        # an import leaves no empty session)
        result = _store_messages(store, target, found.messages, created_at=found.times,
                                 usage=usage)
        reports.append(_report(kind, found, store.get_session(target.session_id), result))
    if not reports:
        raise InvalidInput(f"{path}: {database.agent}'s database holds no session with a "
                           "message")
    if left_out:
        from refold.messages.agent_logs import describe_skipped

        click.echo(f"{path}: read as {database.agent}'s session database; left out "
                   f"{describe_skipped(left_out)}", err=True)
    return reports


def _session_for(store: Store, kind: str, found: AgentSession, parent: str | None,
                 source: str | None) -> tuple[Target, Session | None]:
    """The refold session the agent's session id names (and it, when it exists), else the one
    to create with its messages: titled as the agent titled it (a compaction child: its
    parent's, numbered along the lineage), else by its first request; begun when it began;
    linked to the session it continues."""
    from refold.messages.agent_logs import agent_title

    key = _session_key(kind, found.native_id)
    assert key is not None  # every session in these databases has an id
    try:
        session = store.get_session(key)
        return Target(session.id), session
    except NotFound:
        pass
    title = found.title or _lineage_title(store, parent, found.link_kind) or \
        agent_title(found.messages) or f"{kind} {found.native_id}"
    said = [t for t in found.times if t is not None]
    linked = parent is not None and found.link_kind is not None
    return Target(key, SessionDraft(
        title=_new_title(store, title), source=source or kind, model=found.model,
        parent_session_id=parent if linked else None,
        link_kind=found.link_kind if linked else None,
        started_at=found.started_at or (min(said) if said else None))), None


def _report(kind: str, found: AgentSession, session: Session, result: Any) -> dict[str, Any]:
    return {"session_id": session.id, "title": session.title,
            f"{kind}_session": found.native_id,
            "appended": len(result.appended) if result is not None else 0,
            "skipped": result.skipped if result is not None else 0,
            "rewound": result.rewound if result is not None else 0}


def _plugin_session(store: Store, hermes_id: str) -> Session | None:
    """The session refold's Hermes plugin (``refold.integrations.hermes``) stored this Hermes
    session in, titled ``hermes:<id>``, if any: the local user's, as the import's own are (a
    tenant of ``refold serve`` with that title is someone else's)."""
    try:
        return store.resolve_session(f"hermes:{hermes_id}", owner="", prefix=False)
    except (NotFound, AmbiguousReference):
        return None


def _served_session(store: Store, messages: list[Message]) -> Session | None:
    """The session ``refold serve`` stored this whole conversation in, if any: the agent ran
    through the proxy (without client keys: the local user's sessions, as the import's own),
    which placed it by its first user message (``derived_ref``) in that family, one member
    of which starts with every message of it, by identity. None when no session holds all of
    it (the agent went on without the proxy, or spelled a message otherwise): it is imported."""
    from refold.runtime.branches import family
    from refold.server.sessions import derived_ref, older_refs

    root = None
    for ref in (derived_ref("", messages), *older_refs("", messages)):
        try:
            root = store.resolve_session(ref, owner="", prefix=False)
            break
        except (NotFound, AmbiguousReference):
            continue
    if root is None:
        return None
    identities = chain_identities(messages)
    for session_id in family(store, root.id):
        rows = store.get_messages(session_id, limit=len(identities))
        if [row.identity for row in rows] == identities:
            return store.get_session(session_id)
    return None


def _lineage_title(store: Store, parent: str | None, link_kind: str | None) -> str | None:
    """A compaction child continues its parent's conversation: its title is the parent's (the
    store numbers it along the lineage, "… #2")."""
    if parent is None or link_kind != "compaction":
        return None
    try:
        return store.get_session(parent).title
    except NotFound:
        return None


def _holds_last(store: Store, session_id: str, messages: list[Message]) -> bool:
    """Whether the session holds the last of ``messages`` already (as the end of the same
    conversation)."""
    last = chain_identities(messages)[-1]
    return any(row.identity == last for row in store.get_messages(session_id))


def _grown(session: Session | None, totals: dict[str, Any], model: str | None, count: int
           ) -> list[Usage | None] | None:
    """What the agent counted for a session beyond what its refold session holds already (None:
    a session not created yet holds nothing), on the session's last message: added only if
    that message is stored now, so it is counted once however often the database is
    imported."""
    held = (session.input_tokens, session.output_tokens, session.cache_read_tokens,
            session.cost_usd) if session is not None else (0, 0, 0, 0.0)
    grown = Usage(max(0, totals.get("input_tokens", 0) - held[0]),
                  max(0, totals.get("output_tokens", 0) - held[1]),
                  max(0, totals.get("cache_read_tokens", 0) - held[2]),
                  max(0.0, totals.get("cost_usd", 0.0) - held[3]), model)
    if not (grown.input_tokens or grown.output_tokens or grown.cache_read_tokens
            or grown.cost_usd):
        return None
    return [None] * (count - 1) + [grown]
