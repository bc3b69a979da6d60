"""``refold compact FILE``, ``refold context SESSION`` and ``refold sessions compact ID``.

``compact`` runs the pure compaction on a transcript file and prints the compacted list (or,
with ``--json``, ``{"messages": [...], "report": {...}}``). ``context`` shows what fills a
stored session's window. ``sessions compact`` appends a checkpoint to a stored session (or,
with ``--rotate``, starts a child session), under the session's compaction lease.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from refold.cli.app import AppContext, console, emit, pass_app
from refold.compaction.core import CompactionReport
from refold.compaction.session import recorded_system_prompt
from refold.compaction.summarizer import Summarizer
from refold.config import Settings
from refold.errors import InvalidInput
from refold.messages.agent_logs import AGENT_FORMATS, AGENT_NAMES
from refold.messages.model import Message, content_text, wire_form

SUMMARIZERS = ("builtin", "llm")


def make_summarizer(settings: Settings, choice: str | None, model: str) -> Summarizer:
    """The summarizer a command asked for, built as ``serve`` and ``chat`` build theirs
    (``refold.assembly``); its HTTP clients live until the command exits."""
    from refold.assembly import summarizer_setup

    summarizer: Summarizer = summarizer_setup(settings, choice=choice, model=model).summarizer
    return summarizer


def report_json(report: CompactionReport) -> dict[str, Any]:
    data = report.to_dict()
    data["anchors"] = list(report.anchors)
    data["warnings"] = list(report.warnings)
    return data


def exit_code(report: CompactionReport) -> int:
    """1 when the result does not fit its target or the compaction aborted (the report says
    why), else 0: a script or an agent loop must not carry on as if it had worked."""
    return 1 if report.status == "aborted" or not report.fits else 0


def _finish(code: int) -> None:
    # SystemExit, not click's Exit: ``main`` runs click with standalone_mode=False, where
    # click turns Exit into a return value that nothing reads
    if code:
        sys.exit(code)


def _render_compact(value: dict[str, Any]) -> None:
    report = value["report"]
    out = console()
    out.print(f"[bold]{report['status']}[/bold]: {_shown(report['reason'])} — "
              f"{report['tokens_before']:,} → {report['tokens_after']:,} tokens "
              f"(target {report['target_tokens']:,}), {report['messages_before']} → "
              f"{report['messages_after']} messages, summarizer {report['summarizer']}")
    for warning in report["warnings"]:
        out.print(f"[yellow]warning:[/yellow] {_shown(warning)}")
    for msg in value["messages"]:
        text = content_text(msg)
        calls = ", ".join(str(c["function"]["name"]) for c in msg.get("tool_calls") or [])
        line = text if len(text) <= 300 else text[:300] + "…"
        out.print(f"[cyan]{_shown(str(msg['role']))}[/cyan]"
                  + (f" [dim]calls {_shown(calls)}[/dim]" if calls else "") + f": {_shown(line)}")


def _shown(text: str) -> str:
    """Transcript text for the terminal: control sequences made visible (``safe_text``, as
    ``sessions show`` does), then rich markup escaped."""
    from rich.markup import escape

    from refold.cli.terminal import safe_text

    return escape(safe_text(text))


def _piped(path: Path) -> bytes | None:
    """What ``-`` (stdin) or a pipe (``<(jq …)``, a FIFO) holds, read once; None for a file.
    The format sniffing read a pipe before the loader did: it then looked empty ("63: not
    valid JSON at line 1"), and ``-`` was refused as a file that does not exist."""
    import stat

    if str(path) == "-":
        return sys.stdin.buffer.read()
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)):
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc


def _load(path: Path, fmt: str | None) -> list[Message]:
    """FILE read as ``refold import`` reads it: ``--format``, else the agent's format when the
    file is one of theirs (what it holds besides the turns left out and said), else openai."""
    from refold.messages.load import load_agent_log, load_messages_file, sniff_agent_log

    piped = _piped(path)
    name = "<stdin>" if str(path) == "-" else str(path)
    if piped is not None and fmt not in AGENT_FORMATS:  # stdin or a pipe: read once
        from refold.messages.load import load_anthropic, load_messages

        if fmt == "anthropic":
            return load_anthropic(piped, source_name=name)
        return load_messages(piped, source_name=name)
    fmt = fmt or sniff_agent_log(path) or "openai"
    if fmt not in AGENT_FORMATS:
        return load_messages_file(path, fmt=fmt)
    from collections import Counter

    from refold.messages.agent_logs import describe_skipped

    found = load_agent_log(name, fmt, data=piped)
    left_out = describe_skipped(Counter(found.skipped))
    if left_out:
        click.echo(f"{name}: read as a {AGENT_NAMES[fmt]} transcript; left out {left_out}",
                   err=True)
    return found.messages


@click.command("compact")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True,
                                        path_type=Path))
@click.option("--context-length", type=click.IntRange(256), required=True,
              help="The model's context window in tokens.")
@click.option("--model", help="Model name (chooses the tokenizer and overrides).")
@click.option("--summarizer", type=click.Choice(SUMMARIZERS), help="Default: settings.")
@click.option("--target", type=click.IntRange(1), help="Target tokens (default: the trigger "
                                                        "threshold).")
@click.option("--format", "fmt", type=click.Choice(["openai", "anthropic", *AGENT_FORMATS]),
              help="Format of FILE, as for `refold import`: openai messages, anthropic "
                   "(Messages API turns), claude-code, codex or gemini (the transcripts those "
                   "agents keep). Default: the agent's format when the file is one of theirs, "
                   "else openai.")
@click.option("--json", "as_json", is_flag=True, help="Print messages and report as JSON.")
@pass_app
def compact_cmd(app: AppContext, file: Path, context_length: int, model: str | None,
                summarizer: str | None, target: int | None, fmt: str | None,
                as_json: bool) -> None:
    """Compact a transcript FILE (JSON list, {"messages": [...]}, or JSONL; - for stdin)."""
    from refold.compaction.core import compact
    from refold.tokens import get_counter

    settings = app.settings
    model = model or settings.model
    result = compact(_load(file, fmt), context_length=context_length, model=model,
                     counter=get_counter(model), target_tokens=target,
                     summarizer=make_summarizer(settings, summarizer, model))
    value = {"messages": [wire_form(m) for m in result.messages],
             "report": report_json(result.report)}
    emit(value, as_json, _render_compact)
    _finish(exit_code(result.report))


MEMORY_SOURCES = {"snapshot": "memory: the session's frozen snapshot (what its prompt holds)",
                  "files": "memory: the current memory files (the session has no frozen "
                           "snapshot yet)"}


def _memory_text(settings: Settings) -> str:
    if not settings.memories_dir.is_dir():
        return ""
    from refold.memory.files import open_file_store
    from refold.memory.snapshot import take_snapshot

    return take_snapshot(open_file_store(settings.memories_dir)).text


def _render_context(value: dict[str, Any]) -> None:
    from rich.table import Table

    out = console()
    # a line of its own: as the table's title it was centred and wrapped to the table's width
    out.print(f"session {value['session_id'][:12]} — {value['total']:,} tokens, "
              f"{value['percent_of_window']}% of {value['context_length']:,} "
              f"(compacts at {value['threshold']:,})", soft_wrap=True)
    if value.get("memory_source") in MEMORY_SOURCES:
        out.print(MEMORY_SOURCES[value["memory_source"]], soft_wrap=True, markup=False)
    table = Table()
    table.add_column("part")
    table.add_column("tokens", justify="right")
    table.add_column("share", justify="right")
    total = max(1, value["total"])
    for name, tokens in value["parts"].items():
        share = "" if name == "tool_outputs" else f"{100 * tokens / total:.1f}%"
        label = "  (of which tool outputs)" if name == "tool_outputs" else name
        table.add_row(label, f"{tokens:,}", share)
    out.print(table)


@click.command("context")
@click.argument("session")
@click.option("--context-length", type=click.IntRange(256),
              help="Default: the window the session was last compacted for, else settings.")
@click.option("--model", help="Default: the session's model, else settings.")
@click.option("--json", "as_json", is_flag=True, help="Print the breakdown as JSON.")
@pass_app
def context_cmd(app: AppContext, session: str, context_length: int | None, model: str | None,
                as_json: bool) -> None:
    """Show what fills SESSION's context window (system, memory, summary, tail by role)."""
    from refold.compaction.session import context_breakdown

    settings = app.settings
    found = app.store.resolve_session(session)
    model = model or found.model or settings.model
    # the snapshot the session's prompt was frozen with; memory written since shows only in
    # new sessions, so the current files stand in only for a session that has none
    from refold.runtime.engine import frozen_snapshot
    from refold.runtime.recorded import recorded_tools_tokens, recorded_window

    memory = frozen_snapshot(app.store, found.id)
    source = "files" if memory is None else "snapshot"
    # the window the session was compacted for (a proxied one: serve's --context-length)
    window = context_length or recorded_window(app.store, found.id) or settings.context_length
    breakdown = context_breakdown(app.store.projection(found.id), model=model,
                                  context_length=window,
                                  system_prompt=recorded_system_prompt(app.store, found.id),
                                  memory=_memory_text(settings) if memory is None else memory,
                                  tools_tokens=recorded_tools_tokens(app.store, found.id))
    emit({**breakdown.as_dict(), "memory_source": source}, as_json, _render_context)


@click.command("compact")
@click.argument("session")
@click.option("--context-length", type=click.IntRange(256), help="Default: settings.")
@click.option("--model", help="Default: the session's model, else settings.")
@click.option("--summarizer", type=click.Choice(SUMMARIZERS), help="Default: settings.")
@click.option("--rotate/--no-rotate", default=None,
              help="Start a child session instead of appending a checkpoint "
                   "(default: settings.rotate_on_compaction).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_app
def sessions_compact_cmd(app: AppContext, session: str, context_length: int | None,
                         model: str | None, summarizer: str | None, rotate: bool | None,
                         as_json: bool) -> None:
    """Compact a stored SESSION now (the ledger keeps every message)."""
    from refold.compaction.session import compact_session

    settings = app.settings
    found = app.store.resolve_session(session)
    model = model or found.model or settings.model
    done = compact_session(app.store, found.id, model=model,
                           context_length=context_length or settings.context_length,
                           summarizer=make_summarizer(settings, summarizer, model),
                           system_prompt=recorded_system_prompt(app.store, found.id),
                           rotate=False)
    if done.report.usage:  # the summary model's tokens count against this session
        from refold.assembly import cost_book
        from refold.runtime.cost import summarizer_model

        cost_book(settings, app.store).charge(found.id, done.report.usage,
                                              summarizer_model(done.report.summarizer),
                                              what="summary")
    session_id, rotated_from = done.session.id, None
    if done.stored and (settings.rotate_on_compaction if rotate is None else rotate):
        # the one rotation (as the runtime's): the child starts with the checkpoint's view,
        # the rotation is recorded for proxy clients and the task state carried once
        from refold.runtime.rotation import rotate_session

        session_id, rotated_from = rotate_session(app.store, found.id), found.id
    value = {"session_id": session_id, "rotated_from": rotated_from,
             "stored": done.stored, "checkpoint_id": done.checkpoint.id if done.checkpoint
             else None, "note": done.note, "report": report_json(done.report)}
    emit(value, as_json, _render_session_compact)
    # a compaction that could not be stored did not happen: exit 1, as for one that aborted
    _finish(1 if done.report.changed and not done.stored else exit_code(done.report))


def _render_session_compact(value: dict[str, Any]) -> None:
    report = value["report"]
    if not value["stored"]:
        click.echo(f"nothing stored: {value['note'] or report['reason']}")
        return
    where = (f"new session {value['session_id']} (continues {value['rotated_from']})"
             if value["rotated_from"] else f"checkpoint {value['checkpoint_id']}")
    click.echo(f"compacted: {report['tokens_before']:,} → {report['tokens_after']:,} tokens, "
               f"{report['summarized']} messages summarized ({report['summarizer']}); {where}")
    for warning in report["warnings"]:
        click.echo(f"warning: {warning}")


__all__ = ["compact_cmd", "context_cmd", "sessions_compact_cmd"]
