"""``refold sessions …``: list, show, export, rename, remove, fork, resume, rewind and prune.

Each command resolves its session reference with ``store.resolve_session`` (exact id, unique id
prefix, or title), makes one store call and renders the result: JSON with ``--json``, a table
or plain lines for people. ``compact`` is mounted lazily from ``refold.cli.compact``.
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys
from datetime import datetime
from typing import Any

import click

from refold import _records as records
from refold.cli.app import AppContext, LazyGroup, console, emit, pass_app, stdin_is_tty
from refold.cli.terminal import safe_text
from refold.errors import InvalidInput, NotFound
from refold.messages.model import content_text
from refold.pricing import Price, cost_usd, parse_overrides, price_for
from refold.store import Session, StoredMessage
from refold.store.export import write_export
from refold.store.lifecycle import KEPT_IN_USE, Lineage, PrunePlan, plan_prune, prune_lineages
from refold.store.output import atomic_output


def session_json(session: Session) -> dict[str, Any]:
    return records.asdict(session)


def message_json(stored: StoredMessage) -> dict[str, Any]:
    return {"seq": stored.seq, "role": stored.role, "active": stored.active,
            "created_at": stored.created_at, "token_count": stored.token_count,
            "message": stored.message}


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return ""
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M")


def _session_line(session: Session) -> str:
    title = f" ({safe_text(session.title)})" if session.title else ""
    return f"{session.id}{title} — {session.message_count} message(s)"


@click.group("sessions", cls=LazyGroup,
             lazy={"compact": "refold.cli.compact:sessions_compact_cmd"})
def sessions_group() -> None:
    """List, inspect, export and manage stored sessions."""


# -- read commands -------------------------------------------------------------------------------

def _render_list(rows: list[dict[str, Any]], filters: str = "") -> None:
    from rich.table import Table

    if not rows:
        click.echo(f"no sessions {filters}" if filters
                   else "no sessions yet (try: refold import FILE)")
        return
    # no borders: a boxed table of seven or eight columns needed ~95 columns, and on an
    # 80-column terminal rich cut its last columns off (source, parent) and split the header
    # "started" over two lines; without them every column fits, long cells wrap
    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold")
    # tokens and cost only when some session has them (imports of plain transcripts have none)
    has_usage = any(row["input_tokens"] or row["output_tokens"] or row["cost_usd"]
                    for row in rows)
    # "stored": every row, rewound ones included (the count each session keeps; its active
    # rows would be a count over all of them per session, as `sessions show` does for one)
    columns = ["id", "title", "stored", *(["tokens", "cost"] if has_usage else []),
               "started", "source"]
    numeric = ("stored", "tokens", "cost")
    for column in columns:
        # ids, counts and times never wrap; the title keeps some room to stay readable when narrow
        table.add_column(column, overflow="fold", no_wrap=column in ("id", "started", *numeric),
                         min_width=8 if column == "title" else None,
                         justify="right" if column in numeric else "left")
    for row in rows:
        parent = row["parent_session_id"]
        tokens = row["input_tokens"] + row["output_tokens"]
        cost = row["cost_usd"] or row["estimated_cost_usd"]
        title = safe_text(row["title"] or "")
        if row.get("opening"):  # a derived name: what the conversation began with, under it
            title += f"\n“{safe_text(row['opening'])}”"
        if parent:  # a line of its own under the title, not a column that pushed others out
            link = _LINKS.get(row["link_kind"], f"{row['link_kind']} of")
            title += f"\n↳ {link} {parent[:12]}"
        cells = [row["id"][:12], title, str(row["message_count"])]
        if has_usage:
            cells += [f"{tokens:,}" if tokens else "",
                      "?" if cost is None and tokens else f"${cost:.4f}" if cost else ""]
        cells += [_when(row["started_at"]), safe_text(row["source"] or "")]
        table.add_row(*cells)
    console().print(table)


# how a link reads under the title ("↳ continues 3f2a…"): a compaction child and the
# conversation an agent goes on with after its own compaction continue their parent; an agent's
# side call (a title for the conversation) and a subagent's conversation are its parent's
_LINKS = {"compaction": "continues", "continuation": "continues", "side": "side call of",
          "subagent": "subagent of"}


def parse_owner(value: str | None) -> str | None:
    """``--owner``: ``local`` (sessions made without client keys), an owner id as the JSON
    output shows it (``key-…``), or ``env:VAR`` for the tenant of the client key in $VAR."""
    if value is None:
        return None
    if value == "local":
        return ""
    if value.startswith("env:"):
        from refold.server.auth import owner_for_key

        key = os.environ.get(value[4:], "").strip()
        if not key:
            raise InvalidInput(f"--owner {value}: the variable is not set or empty")
        return owner_for_key(key)
    if not value.startswith("key-"):
        raise InvalidInput(f"--owner {value!r}: expected local, key-… or env:VAR")
    return value


OWNER_HELP = ("Only this tenant's sessions: local, an owner id (key-…, as --json shows) or "
              "env:VAR (the tenant of the client key in $VAR).")


@sessions_group.command(
    "list", short_help="List sessions, newest first, with tokens and cost.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=50, show_default=True,
              help="At most this many sessions.")
@click.option("--source", help="Only sessions with this source label.")
@click.option("--owner", help=OWNER_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print sessions as JSON.")
@pass_app
def list_cmd(app: AppContext, limit: int, source: str | None, owner: str | None,
             as_json: bool) -> None:
    """List sessions, newest first, with tokens and cost (the stored cost_usd, else the usage
    priced by refold.pricing and the pricing overrides in refold.toml)."""
    sessions = app.store.list_sessions(limit=limit, source=source, owner=parse_owner(owner))
    overrides = parse_overrides(app.settings.pricing)
    filters = " and ".join(f"{name} {safe_text(value)!r}" for name, value in (
        ("with source", source), ("of owner", owner)) if value is not None)
    emit([{**session_json(s), "estimated_cost_usd": _estimate(s, overrides),
           **_opening(app.store, s)} for s in sessions],
         as_json, lambda rows: _render_list(rows, filters))


# the name ``refold serve`` gives a conversation that came without X-Refold-Session (a branch
# of it: `` #2``, …)
_DERIVED_TITLE = re.compile(r"conv-[0-9a-f]{16}(?: #\d+)?")
# a block an agent wraps around what it adds to a user's message (Claude Code's
# <system-reminder>, Codex's <environment_context>, <command-name>…): not what was asked
_WRAPPED = re.compile(r"\s*<([A-Za-z][\w.-]*)(?:\s[^>]*)?>.*?</\1>\s*", re.DOTALL)


def _opening(store: Any, session: Session) -> dict[str, str]:
    """``{"opening": …}``, the start of its first user request, for a session whose title is
    the name the proxy derived (``conv-`` and a hash, which tells a reader nothing), else {}:
    the first text of its first user messages that is not a block an agent wrapped around
    them (``_WRAPPED``: every Claude Code session opened "<system-reminder> As you answer…",
    every Codex one "<environment_context> <cwd>…")."""
    if not _DERIVED_TITLE.fullmatch(session.title or ""):
        return {}
    text = next((t for m in store.get_messages(session.id, limit=8) if m.role == "user"
                 for t in _texts(m.message) if t), "")
    return {"opening": text[:60] + ("…" if len(text) > 60 else "")} if text else {}


def _texts(message: dict[str, Any]) -> list[str]:
    """Each text part of ``message`` (its content when a string), with the wrapped blocks that
    open it taken off and its whitespace runs made single spaces."""
    content = message.get("content")
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
    else:
        parts = [content if isinstance(content, str) else content_text(message)]
    out = []
    for part in parts:
        if not isinstance(part, str):
            continue
        while (wrapped := _WRAPPED.match(part)) is not None:
            part = part[wrapped.end():]
        out.append(" ".join(part.split()))
    return out


def _estimate(session: Session, overrides: dict[str, Price]) -> float | None:
    """The session's usage at the model's price (None: no usage stored or no price known)."""
    price = price_for(session.model, overrides)
    if price is None or not (session.input_tokens or session.output_tokens):
        return None
    return round(cost_usd(price, input_tokens=session.input_tokens,
                          output_tokens=session.output_tokens,
                          cache_read_tokens=session.cache_read_tokens), 6)


def _describe(message: dict[str, Any]) -> str:
    text = content_text(message)
    calls = [f"→ {(c.get('function') or {}).get('name')}"
             f"({(c.get('function') or {}).get('arguments', '')})"
             for c in message.get("tool_calls") or []]
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    thought = f"(reasoning) {reasoning}" if isinstance(reasoning, str) and reasoning else ""
    return "\n".join(p for p in [thought, text, *calls] if p) or "(empty)"


def _render_show(value: dict[str, Any]) -> None:
    from rich.markup import escape

    out = console()
    session = value["session"]
    counts = value["counts"]
    shown = len(value["messages"])
    out.print(f"[bold]{escape(safe_text(session['title'] or session['id']))}[/bold]  "
              f"{session['id']}  {counts['active']} active of {counts['stored']} stored "
              f"message(s), started {_when(session['started_at'])}"
              + (f"; showing {shown}" if shown < counts["listed"] else ""))
    for row in value["messages"]:
        flag = "" if row["active"] else " [dim](rewound)[/dim]"
        call_id = row["message"].get("tool_call_id")
        answers = f" ← {escape(safe_text(str(call_id)))}" if call_id else ""
        name = row["message"].get("name")
        speaker = f" ({escape(safe_text(name.strip()))})" if isinstance(name, str) \
            and name.strip() else ""
        out.print(f"[cyan]#{row['seq']} {row['role']}{speaker}{answers}[/cyan]{flag}")
        out.print(escape(safe_text(_describe(row["message"]))), soft_wrap=True)


@sessions_group.command("show")
@click.argument("ref", metavar="ID")
@click.option("--all", "include_inactive", is_flag=True, help="Include rewound messages.")
@click.option("--limit", type=click.IntRange(min=1), help="At most N messages from the start.")
@click.option("--tail", type=click.IntRange(min=1), help="Only the last N messages.")
@click.option("--owner", help=OWNER_HELP.replace("Only this tenant's sessions", "Look in this "
                                                 "tenant's sessions"))
@click.option("--json", "as_json", is_flag=True, help="Print the session and messages as JSON.")
@pass_app
def show_cmd(app: AppContext, ref: str, include_inactive: bool, limit: int | None,
             tail: int | None, owner: str | None, as_json: bool) -> None:
    """Show a session's messages (--limit N from the start, --tail N from the end).

    Text printed to a terminal has control and escape sequences made visible; --json output
    is the stored text exactly."""
    if limit is not None and tail is not None:
        raise InvalidInput("--limit and --tail cannot be combined", hint="pick one")
    store = app.store
    session = store.resolve_session(ref, owner=parse_owner(owner))
    messages = _window(store, session.id, include_inactive, limit, tail)
    active = sum(1 for m in store.iter_messages(session.id) if m.active)
    counts = {"active": active, "stored": session.message_count,
              "listed": session.message_count if include_inactive else active}
    emit({"session": session_json(session), "counts": counts,
          "messages": [message_json(m) for m in messages]}, as_json, _render_show)


def _window(store: Any, session_id: str, include_inactive: bool, limit: int | None,
            tail: int | None) -> list[StoredMessage]:
    """The messages to print, without loading a long session whole for a short look."""
    if tail is None:
        return store.get_messages(session_id, include_inactive=include_inactive, limit=limit)
    last: collections.deque[StoredMessage] = collections.deque(maxlen=tail)
    last.extend(store.iter_messages(session_id, include_inactive=include_inactive))
    return list(last)


@sessions_group.command("export")
@click.argument("ref", metavar="ID")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "json", "md", "markdown"]),
              default="jsonl", show_default=True,
              help="jsonl: one OpenAI message per line; json: sessions with metadata; md "
                   "(or markdown): a readable transcript.")
@click.option("--lineage", is_flag=True, help="Export the whole lineage, oldest first.")
@click.option("--archived", is_flag=True, help="Include rewound (inactive) messages.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write to this file (-: standard output).")
@click.option("--force", is_flag=True, help="Replace an existing --output file.")
@pass_app
def export_cmd(app: AppContext, ref: str, fmt: str, lineage: bool, archived: bool,
               output: str | None, force: bool) -> None:
    """Export a session as JSONL (one OpenAI message per line), JSON or Markdown.

    With -o the export goes to a temporary file renamed over FILE only when complete (through a
    symlink, the file it points to; a terminal or pipe is written directly); refold's own files
    (database, memory, skills, settings) are refused, an existing FILE needs --force."""
    store = app.store
    session = store.resolve_session(ref)
    kind = "markdown" if fmt == "md" else fmt
    if output is None or output == "-":  # "-": standard output, as `refold import -` reads stdin
        write_export(store, session.id, sys.stdout, kind,
                     lineage=lineage, include_inactive=archived)
        return
    try:
        with atomic_output(output, protected=app.protected_paths(), force=force) as fh:
            count = write_export(store, session.id, fh, kind, lineage=lineage,
                                 include_inactive=archived)
    except OSError as exc:
        raise InvalidInput(f"cannot write {output}: {exc.strerror or exc}") from exc
    click.echo(f"wrote {count} message(s) to {output}", err=True)


@sessions_group.command("resume")
@click.argument("ref", metavar="[ID]", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the session as JSON.")
@pass_app
def resume_cmd(app: AppContext, ref: str | None, as_json: bool) -> None:
    """Print the session a resume of ID (default: the newest session) continues in."""
    store = app.store
    if ref is None:
        newest = store.list_sessions(limit=1)
        if not newest:
            raise NotFound("there are no sessions to resume", hint="import one first")
        start = newest[0]
    else:
        start = store.resolve_session(ref)
    target = store.resolve_resume(start.id)
    emit(session_json(target), as_json,
         lambda _: click.echo(_session_line(target)))


# -- write commands ------------------------------------------------------------------------------

@sessions_group.command("rename")
@click.argument("ref", metavar="ID")
@click.argument("title")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_app
def rename_cmd(app: AppContext, ref: str, title: str, as_json: bool) -> None:
    """Give a session a new (unique) title (at most 100 characters)."""
    from refold.store.titles import MAX_TITLE_LENGTH

    given = len(" ".join(title.split()))  # as stored: runs of white space count as one
    if given > MAX_TITLE_LENGTH:  # it was cut to the first 100 without a word (exit 0)
        raise InvalidInput(f"the title is {given} characters long; a session title holds at "
                           f"most {MAX_TITLE_LENGTH}", hint="give a shorter title")
    store = app.store
    session = store.rename_session(store.resolve_session(ref, exact=True).id, title)
    emit(session_json(session), as_json, lambda _: click.echo(f"renamed: {_session_line(session)}"))


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    if not stdin_is_tty():
        raise InvalidInput(f"{question} needs confirmation", hint="pass --yes")
    click.confirm(question, abort=True)


@sessions_group.command("rm")
@click.argument("ref", metavar="ID")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_app
def rm_cmd(app: AppContext, ref: str, yes: bool) -> None:
    """Delete a session and its messages (this cannot be undone)."""
    store = app.store
    session = store.resolve_session(ref, exact=True)  # never a "#N" that only shares the name
    _confirm(f"delete session {_session_line(session)}?", yes)
    removed = store.delete_session(session.id)
    click.echo(f"deleted session {session.id} ({removed} message(s))")


@sessions_group.command("fork")
@click.argument("ref", metavar="ID")
@click.option("--at", "at_seq", type=int, help="Copy messages up to and including this seq.")
@click.option("--branch", is_flag=True, help="Record it as a branch (another take on the same conversation, titled "
              "'TITLE #N' as an edited request's branch is) rather than a fork (a new "
              "conversation started from the copy).")
@click.option("--title", help="Title of the new session.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_app
def fork_cmd(app: AppContext, ref: str, at_seq: int | None, branch: bool, title: str | None,
             as_json: bool) -> None:
    """Start a new session from a copy of ID (up to --at SEQ)."""
    store = app.store
    source = store.resolve_session(ref)
    from refold.compaction.session import fork_with_state
    from refold.store.titles import refuse_title_shadowing_an_id

    refuse_title_shadowing_an_id(store, title)
    child = fork_with_state(store, source.id, at_seq, kind="branch" if branch else "fork",
                            title=title)
    emit(session_json(child), as_json, lambda _: click.echo(f"created {_session_line(child)}"))


@sessions_group.command("rewind")
@click.argument("ref", metavar="ID")
@click.option("--at", "at_seq", type=int, required=True,
              help="The seq of the user message to rewind from (it and all after go inactive).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_app
def rewind_cmd(app: AppContext, ref: str, at_seq: int, as_json: bool) -> None:
    """Mark messages from --at SEQ on inactive (reversible with undo-rewind)."""
    store = app.store
    record = store.rewind(store.resolve_session(ref, exact=True).id, at_seq)
    emit(records.asdict(record), as_json, lambda r: click.echo(
        f"rewound {r['count']} message(s) from seq {r['from_seq']} "
        f"(undo: refold sessions undo-rewind {r['id']})"))


@sessions_group.command("rewinds")
@click.argument("ref", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_app
def rewinds_cmd(app: AppContext, ref: str, as_json: bool) -> None:
    """List a session's rewinds (their ids are what undo-rewind takes), oldest first."""
    store = app.store
    rewinds = store.list_rewinds(store.resolve_session(ref).id)
    rows = [{**records.asdict(r.record), "inactive_seqs": list(r.seqs)} for r in rewinds]
    emit(rows, as_json, _render_rewinds)


def _render_rewinds(rows: list[dict[str, Any]]) -> None:
    if not rows:
        click.echo("no rewinds")
    for row in rows:
        state = "undone" if row["undone"] else f"{len(row['inactive_seqs'])} row(s) inactive"
        click.echo(f"rewind {row['id']}: from seq {row['from_seq']}, {row['count']} message(s), "
                   f"{_when(row['created_at'])}, {state}"
                   + ("" if row["undone"] else
                      f" (undo: refold sessions undo-rewind {row['id']})"))


@sessions_group.command(
    "undo-rewind", short_help="Reactivate what a rewind (by its id) marked inactive.")
@click.argument("rewind_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_app
def undo_rewind_cmd(app: AppContext, rewind_id: int, as_json: bool) -> None:
    """Reactivate the messages a rewind (by its id) marked inactive; messages that came after
    them (an edit's new tail) are rewound in turn, as a rewind of their own (undo it to swap
    back)."""
    record = app.store.undo_rewind(rewind_id)
    emit(records.asdict(record), as_json, lambda r: click.echo(
        f"restored {r['count']} message(s) from seq {r['from_seq']}" + (
            "" if r["replaced_by"] is None else
            f"; the messages that had followed them are rewind {r['replaced_by']} (undo: "
            f"refold sessions undo-rewind {r['replaced_by']})")))


def _lineage_json(lineage: Lineage) -> dict[str, Any]:
    return {"sessions": [{"id": s.id, "title": s.title, "messages": s.message_count,
                          "end_reason": s.end_reason} for s in lineage.sessions],
            "messages": lineage.message_count, "last_activity": lineage.last_activity}


def _names(lineage: Lineage) -> str:
    return ", ".join(f"{s.id[:12]}{f' ({safe_text(s.title)})' if s.title else ''}"
                     for s in lineage.sessions)


def _days(days: float) -> str:
    return "1 day" if days == 1 else f"{days:g} days"


def _why_kept(reason: str, days: float) -> str:
    if reason == KEPT_IN_USE:
        return "a session in it has not ended and was active within the last hour (in use)"
    return (f"a session in it was active within the last {_days(days)} (a lineage goes "
            "whole, so a continuation, fork or branch in use keeps the sessions it grew from)")


def _render_plan(plan: PrunePlan, days: float) -> None:
    for lineage in plan.delete:
        click.echo(f"would delete: {_names(lineage)} — {lineage.message_count} message(s), "
                   f"last active {_when(lineage.last_activity)}", err=True)
    for lineage, reason in plan.kept:
        click.echo(f"keeping: {_names(lineage)} — last active {_when(lineage.last_activity)}: "
                   f"{_why_kept(reason, days)}", err=True)


def _summary(plan: PrunePlan, deleted: list[Lineage] | None, days: float) -> str:
    """``deleted N session(s)`` and, when fewer lineages went than prune looked at, why."""
    if deleted is None:  # a dry run
        line = f"would delete {sum(len(lin.sessions) for lin in plan.delete)} session(s)"
    else:
        line = f"deleted {sum(len(lin.sessions) for lin in deleted)} session(s)"
    if not plan.delete and not plan.kept:
        return f"{line}: no session has been idle for more than {_days(days)}"
    notes = []
    if plan.kept:
        reasons = collections.Counter(reason for _, reason in plan.kept)
        notes.append(f"{'would keep' if deleted is None else 'kept'} {len(plan.kept)} lineage(s) "
                     f"with sessions idle for more than {_days(days)} as live — "
                     + "; ".join(f"{n}: {_why_kept(reason, days)}"
                                 for reason, n in sorted(reasons.items())))
    if deleted is not None and len(deleted) < len(plan.delete):
        notes.append(f"kept {len(plan.delete) - len(deleted)} lineage(s) written to (or gone) "
                     "after the list was shown")
    return "\n".join([line, *notes])


@sessions_group.command(
    "prune", short_help="Delete whole lineages idle for more than --older-than DAYS.")
@click.option("--older-than", "days", type=click.FloatRange(min=0), required=True,
              help="Delete lineages whose newest activity (a start, an end or a message) is "
                   "more than DAYS days old and none of whose sessions is in use.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Only show what would be deleted.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_app
def prune_cmd(app: AppContext, days: float, yes: bool, dry_run: bool, as_json: bool) -> None:
    """Delete whole lineages (a session with its continuations, forks and branches) idle for
    more than --older-than DAYS: a session idle that long counts as ended, ended or not. A
    lineage with a session active within DAYS (or open and active within the last hour) is
    kept whole, and the output says so."""
    plan = plan_prune(app.store, days)
    if not as_json:
        _render_plan(plan, days)
    deleted: list[Lineage] = []
    if plan.delete and not dry_run:
        count = sum(len(lin.sessions) for lin in plan.delete)
        _confirm(f"delete these {count} session(s) in {len(plan.delete)} lineage(s)?", yes)
        deleted = prune_lineages(app.store, plan.delete)
    if as_json:
        click.echo(json.dumps({
            "deleted_sessions": sum(len(lin.sessions) for lin in deleted), "dry_run": dry_run,
            "lineages": [_lineage_json(lin) for lin in plan.delete],
            "kept_live": [{**_lineage_json(lin), "reason": reason} for lin, reason in plan.kept],
            "kept_changed": 0 if dry_run else len(plan.delete) - len(deleted)}))
    else:
        click.echo(_summary(plan, None if dry_run else deleted, days))
