"""``refold import`` and ``refold search``: put transcripts into the ledger and find them again.

Import validates the whole file before it touches the store, then makes one ``sync_messages``
call, so a malformed file stores nothing and importing the same file twice appends nothing.
Without ``--session`` the session id is derived from the transcript's content (the chained
identity of its last message): the same transcript always lands in the same session, and a
different one never lands in somebody else's. To keep adding to one session while a transcript
grows, pass ``--session``.
"""

from __future__ import annotations

import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from refold.cli.app import AppContext, emit, pass_app
from refold.cli.terminal import safe_text
from refold.errors import AmbiguousReference, Conflict, InvalidInput, NotFound
from refold.messages.model import Message, chain_identities
from refold.store import SearchHit, SearchQuery, Session, Store, StoredMessage

if TYPE_CHECKING:  # the loaders load with `refold import`, not on `refold search`'s path
    from refold.messages.load import Utf8Repair

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


# -- import --------------------------------------------------------------------------------------

def _read_transcript(file: str, fmt: str, max_bytes: int | None,
                     repair: Utf8Repair) -> tuple[list[Message], str]:
    from refold.messages.load import check_size, load_anthropic, load_messages, load_messages_file

    if file == "-":
        data = sys.stdin.buffer.read(max_bytes + 1) if max_bytes else sys.stdin.buffer.read()
        check_size(len(data), max_bytes, "<stdin>")
        if fmt == "anthropic":
            return load_anthropic(data, source_name="<stdin>", repair=repair), "stdin"
        return load_messages(data, source_name="<stdin>", repair=repair), "stdin"
    return load_messages_file(file, fmt=fmt, max_bytes=max_bytes, repair=repair), Path(file).stem


def _new_title(store: Store, wanted: str | None) -> str | None:
    if not wanted:
        return None
    try:
        return store.next_lineage_title(wanted)
    except InvalidInput:
        return None


def _target_session(store: Store, ref: str | None, messages: list[Message], *,
                    title: str | None, default_title: str, source: str) -> Session:
    """The session given by ``--session`` (created when missing), or the content-derived one."""
    if ref is not None:
        try:
            return store.resolve_session(ref)
        except AmbiguousReference:
            raise
        except NotFound:
            session_id = ref.strip()
    else:
        session_id = chain_identities(messages)[-1]
        try:
            return store.get_session(session_id)
        except NotFound:
            pass
    return _create(store, session_id, title or _new_title(store, default_title), source,
                   keep_title=bool(title))


def _create(store: Store, session_id: str, title: str | None, source: str, *,
            keep_title: bool) -> Session:
    """Create the session; if a concurrent import created it first, use that one."""
    try:
        return store.create_session(session_id=session_id, title=title, source=source)
    except Conflict as conflict:
        try:
            return store.get_session(session_id)
        except NotFound:
            if keep_title:  # the title the user asked for is taken: say so
                raise conflict from None
    # only the default title was taken meanwhile; an untitled session is fine
    return store.create_session(session_id=session_id, source=source)


@click.command("import")
@click.argument("file")
@click.option("--session", "session_ref", metavar="ID",
              help="Append to this session (id, id prefix or title); created when missing.")
@click.option("--title", help="Title for a newly created session (default: the file name).")
@click.option("--source", default="import", show_default=True,
              help="Source label stored with a new session.")
@click.option("--format", "fmt", type=click.Choice(["openai", "anthropic"]), default="openai",
              show_default=True, help="Message format of FILE (anthropic: Messages API turns).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_app
def import_cmd(app: AppContext, file: str, session_ref: str | None, title: str | None,
               source: str, fmt: str, as_json: bool) -> None:
    """Import a transcript FILE (JSON list, {"messages": [...]} or JSONL; - for stdin).

    Anthropic Messages transcripts ({"system", "messages"}) import with --format anthropic;
    they are stored in the OpenAI form like everything else.

    Messages already stored in the session are skipped, so importing twice is harmless.
    """
    from refold.messages.load import Utf8Repair

    repair = Utf8Repair()
    messages, stem = _read_transcript(file, fmt, app.settings.import_max_bytes or None, repair)
    if repair.count:
        click.echo(f"warning: {file}: {repair.describe()}", err=True)
    if not messages:
        raise InvalidInput(f"{file}: no messages to import")
    store = app.store
    session = _target_session(store, session_ref, messages, title=title, default_title=stem,
                              source=source)
    result = store.sync_messages(session.id, messages)
    report: dict[str, Any] = {"session_id": session.id, "title": store.get_session(session.id).title,
              "appended": len(result.appended), "skipped": result.skipped,
              "rewound": result.rewound}
    if repair.count:
        report["utf8_repaired"] = {"count": repair.count, "first_offset": repair.first_offset}
    emit(report, as_json, _render_import)


def _render_import(report: dict[str, Any]) -> None:
    title = f" ({safe_text(report['title'])})" if report["title"] else ""
    line = (f"imported {report['appended']} message(s) into session "
            f"{report['session_id']}{title}; {report['skipped']} already stored")
    if report["rewound"]:
        line += f"; {report['rewound']} stored message(s) rewound (the history diverged)"
    click.echo(line)


# -- search --------------------------------------------------------------------------------------

def parse_time(value: str | None, *, now: float | None = None) -> float | None:
    """An ISO date/datetime (local time when naive) or a relative age like 30m, 12h, 7d, 2w."""
    if value is None:
        return None
    text = value.strip()
    match = _RELATIVE.match(text)
    if match:
        return (now if now is not None else time.time()) - \
            float(match[1]) * _UNIT_SECONDS[match[2]]
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a date (2026-01-31, 2026-01-31T12:00) or an age (30m, 12h, 7d)"
        ) from None


def _time_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    return parse_time(value)


def _hit_json(hit: SearchHit) -> dict[str, Any]:
    return {"session_id": hit.session_id, "title": hit.session_title, "seq": hit.seq,
            "role": hit.role, "snippet": hit.snippet, "content": hit.content,
            "created_at": hit.created_at, "score": hit.score, "lineage": list(hit.lineage),
            "window": [_window_json(m) for m in hit.window]}


def _window_json(stored: StoredMessage) -> dict[str, Any]:
    return {"seq": stored.seq, "role": stored.role, "active": stored.active,
            "message": stored.message}


def _highlight(snippet: str, query: str) -> str:
    """The snippet with the store's ``[match]`` markers shown in bold (on a terminal).

    Content can hold brackets of its own (``order["id"]``), so a bracketed piece counts as a
    marker only when it shares a word with the query; other brackets are printed as they are.
    """
    words = {w.casefold() for w in re.findall(r"[^\W_]+", query)}
    out = []
    for i, piece in enumerate(re.split(r"\[([^\[\]]*)\]", snippet)):
        folded = piece.casefold()
        if i % 2 and any(w in folded or folded in w for w in words if folded):
            out.append(click.style(piece, fg="yellow", bold=True))
        else:
            out.append(f"[{piece}]" if i % 2 else piece)
    return "".join(out)


def _render_hits(hits: list[dict[str, Any]], query: str) -> None:
    """One line per hit: session, seq, role, time, the matching text. Plain click output (no
    table library: a search is on the start-up path, and its lines grep well)."""
    if not hits:
        click.echo("no matches")
        return
    rows = []
    for hit in hits:
        label = safe_text(hit["title"] or hit["session_id"][:12])
        label = label if len(label) <= 24 else label[:23] + "…"
        when = datetime.fromtimestamp(hit["created_at"]).strftime("%y-%m-%d %H:%M")
        rows.append((label, str(hit["seq"]), hit["role"], when,
                     _highlight(safe_text(hit["snippet"].replace("\n", " ")), query)))
    header = ("session", "seq", "role", "when", "match")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for label, seq, role, when, match in [header, *rows]:
        click.echo(f"{label:<{widths[0]}}  {seq:>{widths[1]}}  {role:<{widths[2]}}  "
                   f"{when:<{widths[3]}}  {match}")


def _by_words_only(store: Store, mode: str | None) -> bool:
    """``--mode fts``, or no mode and nothing indexed for the default embedder (what
    ``resolve_mode`` would then choose) — known without importing the vector module."""
    if mode is not None:
        return mode == "fts"
    from refold.search.modes import EMBED_MODEL, embed_installed

    return not (embed_installed() and store.vectors_after(EMBED_MODEL, 0, limit=1))


@click.command("search")
@click.argument("query")
@click.option("--session", "session_ref", metavar="ID", help="Only this session (id/prefix/title).")
@click.option("--role", type=click.Choice(["system", "developer", "user", "assistant", "tool"]))
@click.option("--source", help="Only sessions with this source label.")
@click.option("--since", callback=_time_option,
              help="Only messages after this time (2026-01-31, 7d, 12h).")
@click.option("--until", callback=_time_option, help="Only messages before this time.")
@click.option("--sort", type=click.Choice(["relevance", "recency"]), default="relevance",
              show_default=True)
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--window", type=click.IntRange(0, 20), default=1, show_default=True,
              help="Surrounding messages returned on each side of a hit.")
@click.option("--all", "include_inactive", is_flag=True, help="Include rewound messages.")
@click.option("--mode", type=click.Choice(["fts", "vector", "hybrid"]), default=None,
              help="Words, meaning (needs refold[embed] and `refold index`) or both fused "
                   "[default: hybrid when refold[embed] is installed and messages are "
                   "indexed, else fts].")
@click.option("--json", "as_json", is_flag=True, help="Print hits as JSON.")
@pass_app
def search_cmd(app: AppContext, query: str, session_ref: str | None, role: str | None,
               source: str | None, since: float | None, until: float | None, sort: str, limit: int,
               window: int, include_inactive: bool, mode: str | None, as_json: bool) -> None:
    """Search every stored message: a question as you would ask it, in any language."""
    store = app.store
    session_id = store.resolve_session(session_ref).id if session_ref else None
    request = SearchQuery(
        text=query, session_id=session_id, role=role, source=source,
        since=since, until=until, include_inactive=include_inactive,
        sort="recency" if sort == "recency" else "relevance", limit=limit, window=window)
    if _by_words_only(store, mode):  # no NumPy, no vectors: the start-up path stays short
        hits = store.search(request)
    else:
        from refold.search.vectors import hybrid_search, resolve_mode

        hits = hybrid_search(store, request, mode=resolve_mode(store, mode))
    emit([_hit_json(h) for h in hits], as_json, lambda rows: _render_hits(rows, query))
