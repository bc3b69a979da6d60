"""``refold memory …``: show, add, replace, remove, stats, snapshot, pending, approve, reject, adopt.

The person at the terminal is the approver, so add/replace/remove write directly (the safety
scan still applies); ``pending`` / ``approve`` / ``reject`` work the queue that the agent's
memory tool and the background review fill when ``memory_approval`` is ``stage``. Memories live
in ``<home>/memories`` (or, with ``memory_backend = "db"``, in the refold database under
``memory_profile``). Errors are raised, never swallowed here (a write refused for the limit
only gets a hint for the terminal): cli.main renders them. An entry is stored as given, control
characters included (as skills are); what is printed for a person shows them as escapes
(``refold.cli.terminal.safe_text``), ``--json`` as stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import click

from refold.cli.app import AppContext, console, emit, pass_app
from refold.cli.terminal import safe_text
from refold.errors import InvalidInput, MemoryError_, RefoldError
from refold.memory import (
    DBMemoryStore,
    MemoryStore,
    MemoryWriter,
    WriteResult,
    open_file_store,
    take_snapshot,
)
from refold.memory.entries import HEADERS, TARGETS

_TARGET = click.option("--target", "-t", type=click.Choice(list(TARGETS)), default="memory",
                       show_default=True, help="memory: the agent's notes; user: the profile.")
_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def open_memory(app: AppContext) -> MemoryStore:
    """The file store under ``<home>/memories``, or the DB store when memory_backend=db, with
    the configured limits: what the CLI reports and refuses must match what a session's prompt
    shows (not ``assembly.memory_store``: it takes an open database, and the file backend must
    not open one)."""
    from refold.assembly import memory_limits

    settings = app.settings
    limits = memory_limits(settings)
    if settings.memory_backend == "file":
        return open_file_store(settings.memories_dir, limits=limits)
    if settings.memory_backend == "db":
        return DBMemoryStore(app.store, settings.memory_profile, limits=limits)
    raise InvalidInput(f"unknown memory_backend {settings.memory_backend!r}",
                       hint="use file or db")


def _writer(app: AppContext) -> MemoryWriter:
    return MemoryWriter(open_memory(app), app.settings.memory_approval)


def _when(timestamp: float) -> str:
    try:
        return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, OSError, ValueError):  # a hand-edited sidecar's time out of range
        return "(unknown time)"


def _echo_result(result: WriteResult) -> None:
    click.echo(f"{safe_text(result.message)} — {result.target}: {result.usage.describe()}")


@contextmanager
def _room_hint(target: str) -> Iterator[None]:
    """A write refused for the limit advises the agent's memory tool, where one call may remove
    and add; here each command makes one change, so the hint names the commands that make room.
    The error is still raised for cli.main to render."""
    try:
        yield
    except MemoryError_ as exc:
        if "would_be" in exc.details:  # the limit refusal (``apply_ops``), not a scan refusal
            flag = "" if target == "memory" else f" --target {target}"
            exc.hint = (f"shorten the new text, or make room first: `refold memory remove{flag} "
                        f"OLD_TEXT` drops an entry and `refold memory replace{flag} OLD_TEXT "
                        "NEW_TEXT` shortens one; `refold memory stats` lists near-duplicates "
                        "and stale entries")
        raise


@click.group("memory")
def memory_group() -> None:
    """Show and edit persistent memory (MEMORY.md, USER.md) and approve staged writes."""


# -- reads ------------------------------------------------------------------------------------

def _view_json(store: MemoryStore, target: str) -> dict[str, Any]:
    view = store.read(target)
    return {"target": target, "location": view.location, "drift": view.drift,
            "usage": {"chars": view.usage.chars, "limit": view.usage.limit,
                      "percent": view.usage.percent, "over_limit": view.usage.over_limit},
            "entries": [{"id": e.id, "text": e.text, "blocked": e.blocked,
                         "created_at": e.created_at, "updated_at": e.updated_at,
                         "last_used_at": e.last_used_at or None}
                        for e in view.entries]}


def _render_views(views: list[dict[str, Any]]) -> None:
    from rich.markup import escape

    out = console()
    for view in views:
        usage = view["usage"]
        over = (" [red]over the limit: new entries are refused until it is under[/red]"
                if usage["over_limit"] else "")
        out.print(f"[bold]{HEADERS[view['target']]}[/bold] — {usage['percent']}% "
                  f"({usage['chars']:,}/{usage['limit']:,} chars){over}", markup=True)
        out.print(f"  {safe_text(view['location'])}", markup=False)
        if view["drift"]:
            out.print("  [yellow]changed outside refold: replace/remove are refused until "
                      f"`refold memory adopt --target {view['target']}`[/yellow]", markup=True)
        if not view["entries"]:
            out.print("  (empty)")
        for entry in view["entries"]:
            flag = (f" [red]{escape(safe_text('[BLOCKED: ' + entry['blocked'] + ']'))}[/red]"
                    if entry["blocked"] else "")
            out.print(f"  #{entry['id']} {_when(entry['updated_at'])}{flag}", markup=True)
            for line in entry["text"].splitlines():  # an entry may hold ESC[2J, ESC]0;…: shown
                out.print(f"    {safe_text(line)}", markup=False)  # as escapes, not obeyed


@memory_group.command("show")
@click.option("--target", "-t", type=click.Choice([*TARGETS, "all"]), default="all",
              show_default=True, help="memory: the agent's notes; user: the profile; all: both.")
@_JSON
@pass_app
def show_cmd(app: AppContext, target: str, as_json: bool) -> None:
    """Show the live entries (blocked ones marked) with usage."""
    store = open_memory(app)
    targets = list(TARGETS) if target == "all" else [target]
    emit([_view_json(store, t) for t in targets], as_json, _render_views)


def _render_stats(stats: dict[str, dict[str, Any]]) -> None:
    for target, row in stats.items():
        extra = "".join([", over the limit" if row["over_limit"] else "",
                         f", {row['blocked']} blocked" if row["blocked"] else "",
                         ", DRIFT" if row["drift"] else ""])
        used = _when(row["last_used_at"]) if row["last_used_at"] else "never"
        click.echo(f"{target}: {row['entries']} entries, {row['chars']:,}/{row['limit']:,} chars "
                   f"({row['percent']}%){extra}; {len(row['duplicates'])} near-duplicate "
                   f"pair(s), {len(row['stale'])} stale, {row['never_used']} never used; "
                   f"last used {used}")
        if row["consolidate"]:
            click.echo("  consolidation would help:")
        for line in row["advice"]:
            click.echo(f"  - {safe_text(line)}")


@memory_group.command(
    "stats", short_help="Usage, near-duplicates, stale entries, consolidation advice.")
@click.option("--stale-days", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="An entry unused (not in a snapshot a turn used) this long is stale.")
@_JSON
@pass_app
def stats_cmd(app: AppContext, stale_days: float, as_json: bool) -> None:
    """Usage per store, near-duplicates, stale entries, and whether consolidation would help."""
    emit(open_memory(app).stats(stale_days=stale_days), as_json, _render_stats)


@memory_group.command("snapshot")
@_JSON
@pass_app
def snapshot_cmd(app: AppContext, as_json: bool) -> None:
    """Print the block a new session would get in its system prompt."""
    snap = take_snapshot(open_memory(app))
    emit({"text": snap.text, "blocked": snap.blocked}, as_json,
         lambda v: click.echo(safe_text(v["text"]) or "(memory is empty)"))


_AGE = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _age(text: str | None, default_minutes: float) -> float:
    """Seconds of an age such as 30m, 2h, 1d or 0 (None: ``default_minutes``)."""
    if text is None:
        return default_minutes * 60.0
    value = text.strip().lower()
    unit = _AGE.get(value[-1:], 0) if value else 0
    try:
        number = float(value[:-1] if unit else value)
    except ValueError:
        number = -1.0
    if number < 0 or (not unit and number != 0):
        raise click.BadParameter(f"{text!r} is not an age (0, 90s, 30m, 2h, 1d)",
                                 param_hint="'--idle'")
    return number * (unit or 1)


def _render_flushed(result: dict[str, Any]) -> None:
    if not result["flushed"]:
        click.echo(result["nothing"])
        return
    click.echo(f"reviewed {len(result['flushed'])} session(s) for memory:")
    for item in result["flushed"]:
        click.echo(f"  {item['id'][:12]}  through seq {item['through_seq']}: "
                   f"{item['saved']} saved, {item['staged']} staged, "
                   f"{item['duplicates']} near-duplicate(s) left out  "
                   f"{safe_text(item['title'] or '')}")


@memory_group.command("flush")
@click.option("--idle", metavar="AGE", help="Sessions with no new message for this long "
              "(0, 90s, 30m, 2h; default: memory.flush_idle_minutes, 30m).")
@click.option("--session", "session_ref", metavar="ID",
              help="Only this session (id or title), idle or not.")
@_JSON
@pass_app
def flush_cmd(app: AppContext, idle: str | None, session_ref: str | None,
              as_json: bool) -> None:
    """Review for memory what idle sessions said and no flush read yet.

    A session's end and each compaction flush it on their own; a process that died before the
    end (a kill, a crash, a closed terminal) leaves its tail unflushed. `refold serve` sweeps
    such sessions every few minutes; this runs the same sweep now (for cron, or one session).
    The approval mode applies to what is written.
    """
    settings = app.settings
    if not settings.memory_enabled:
        raise InvalidInput("memory is off", hint="set memory.enabled = true")
    seconds = _age(idle, settings.memory_flush_idle_minutes)
    from refold.assembly import build_engine, summarizer_setup

    setup = summarizer_setup(settings)
    engine = build_engine(settings, app.store, setup, owner="")
    try:
        if session_ref:
            session = app.store.resolve_session(session_ref, owner="")
            ids = [session.id] if engine.flush_session(session.id) else []
        else:
            ids = engine.flush_idle_sessions(seconds)
    finally:
        engine.close()
        setup.close()
    from refold.runtime.memory_flush import EVENT

    flushed = []
    for sid in ids:
        last = app.store.list_events(sid, EVENT)[-1].payload
        flushed.append({"id": sid, "title": app.store.get_session(sid).title,
                        "through_seq": last.get("through_seq"), "saved": last.get("saved", 0),
                        "staged": last.get("staged", 0),
                        "duplicates": last.get("duplicates", 0)})
    nothing = ("nothing new to review in that session" if session_ref else
               "nothing to review: no session idle that long has messages a flush did not read")
    # "nothing" only when nothing was flushed (JSON said both at once)
    emit({"flushed": flushed, **({} if flushed else {"nothing": nothing})}, as_json,
         _render_flushed)


# -- writes -----------------------------------------------------------------------------------

@memory_group.command("add")
@_TARGET
@click.argument("text")
@pass_app
def add_cmd(app: AppContext, target: str, text: str) -> None:
    """Add an entry."""
    with _room_hint(target):
        _echo_result(open_memory(app).add(target, text))


@memory_group.command(
    "replace", short_help="Replace the one entry containing OLD_TEXT with NEW_TEXT.")
@_TARGET
@click.argument("old_text")
@click.argument("new_text")
@pass_app
def replace_cmd(app: AppContext, target: str, old_text: str, new_text: str) -> None:
    """Replace the one entry containing OLD_TEXT (or #id) with NEW_TEXT."""
    memory = open_memory(app)
    before = _texts(memory, target)
    with _room_hint(target):
        _echo_result(memory.replace(target, old_text, new_text))
    _echo_gone(before, _texts(memory, target), "replaced")


@memory_group.command("remove")
@_TARGET
@click.argument("old_text")
@pass_app
def remove_cmd(app: AppContext, target: str, old_text: str) -> None:
    """Remove the one entry containing OLD_TEXT (or #id)."""
    memory = open_memory(app)
    before = _texts(memory, target)
    _echo_result(memory.remove(target, old_text))
    _echo_gone(before, _texts(memory, target), "removed")


def _texts(memory: MemoryStore, target: str) -> list[str]:
    return [entry.text for entry in memory.read(target).entries]


def _echo_gone(before: list[str], after: list[str], what: str) -> None:
    """Which entry a replace or remove took away: OLD_TEXT matches by a part of it, so the
    whole entry went ("tea" replaced "User likes tea with milk" whole), said with it."""
    gone = [text for text in before if text not in after]
    for text in gone:
        click.echo(f"  {what}: {safe_text(text)}")


@memory_group.command(
    "adopt", short_help="Accept a file edited outside refold as the current state.")
@_TARGET
@pass_app
def adopt_cmd(app: AppContext, target: str) -> None:
    """Accept a file edited outside refold (after drift) as the current state."""
    view = open_memory(app).adopt(target)
    click.echo(f"adopted {view.location}: {view.usage.entries} entries, {view.usage.describe()}")


# -- the approval queue -----------------------------------------------------------------------

def _render_pending(items: list[dict[str, Any]]) -> None:
    if not items:
        click.echo("no pending memory writes")
    for item in items:
        click.echo(f"{item['id']}  {_when(item['created_at'])}  {item['target']}  "
                   f"({item['origin']})  {safe_text(item['summary'])}")


@memory_group.command("pending")
@_JSON
@pass_app
def pending_cmd(app: AppContext, as_json: bool) -> None:
    """List staged writes waiting for approval."""
    items = [{**p.to_dict(), "summary": p.summary} for p in _writer(app).pending()]
    emit(items, as_json, _render_pending)


def _ids(writer: MemoryWriter, ids: tuple[str, ...], every: bool) -> list[str]:
    if every == bool(ids):
        raise InvalidInput("give pending ids or --all (not both)",
                           hint="list them with `refold memory pending`")
    if not every:
        return list(ids)
    found = [p.id for p in writer.pending()]
    if not found:  # said, not silence: `approve --all` printed nothing at all
        click.echo("no pending memory writes")
    return found


@memory_group.command("approve")
@click.argument("ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Approve every pending write.")
@pass_app
def approve_cmd(app: AppContext, ids: tuple[str, ...], every: bool) -> None:
    """Apply staged writes.

    One that is malformed or no longer applies stays pending, the others are still applied,
    and each failure is reported with its pending id."""
    writer = _writer(app)
    pending = writer.pending()
    wanted = _ids(writer, ids, every)
    failed: list[str] = []
    for pending_id in wanted:
        target = next((p.target for p in pending if p.id.startswith(pending_id)), "memory")
        try:
            with _room_hint(target):
                result = writer.approve(pending_id)
        except RefoldError as exc:
            kept = exc.details.get("pending_id")
            if len(wanted) == 1:
                if kept and kept not in exc.message:
                    exc.message = f"{kept} not applied, still pending: {exc.message}"
                raise
            failed.append(pending_id)
            click.echo(f"{pending_id}: not applied{', still pending' if kept else ''}: "
                       f"{safe_text(str(exc))}", err=True)
            continue
        click.echo(f"{pending_id}: ", nl=False)
        _echo_result(result)
    if failed:
        raise MemoryError_(f"{len(failed)} of {len(wanted)} pending memory writes were not "
                           f"applied: {', '.join(failed)}",
                           hint="the reasons are above; `refold memory reject ID` drops one")


@memory_group.command("reject")
@click.argument("ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Reject every pending write.")
@pass_app
def reject_cmd(app: AppContext, ids: tuple[str, ...], every: bool) -> None:
    """Drop staged writes."""
    writer = _writer(app)
    for pending_id in _ids(writer, ids, every):
        item = writer.reject(pending_id)
        click.echo(f"{item.id}: rejected"
                   + (f" ({safe_text(item.summary)})" if item.summary else ""))
