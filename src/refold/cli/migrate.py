"""``refold migrate``: copy a store into another (SQLite ⇄ PostgreSQL) and verify the copy.

Parses, makes one ``copy_store`` call, renders. Progress goes to stderr (so ``--json`` stdout
stays machine-readable); a copy that fails verification exits 1 after the summary is shown.
Re-running is safe: what the target has already is skipped and verified again.
"""

from __future__ import annotations

from typing import Any

import click

from refold import _records as records
from refold.cli.app import AppContext, console, emit, err_console, pass_app
from refold.errors import InvalidInput, StorageError
from refold.memory.db import DBBackend
from refold.memory.files import FileBackend
from refold.memory.transfer import MemoryTransfer, copy_memory
from refold.store import Store, open_store
from refold.store.copy import CopyReport, copy_store
from refold.store.urls import redact_url

_PHASES = {"sessions": "copying messages", "memory": "copying memory", "verify": "verifying"}


def _progress_bar(enabled: bool) -> Any:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    return Progress(TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=err_console(), disable=not enabled)


def _render(report: CopyReport, source: str, target: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    # the stores on a line of their own: as the table's title they were wrapped to the table's
    # ~40 columns, mid-path ("…/share/refol" / "d/refold.db →")
    out = console()
    out.print(escape(f"{source} → {target}"), soft_wrap=True)
    table = Table(show_header=False)
    table.add_row("sessions copied", str(report.sessions_copied))
    table.add_row("sessions skipped (already there)", str(report.sessions_skipped))
    table.add_row("messages copied", str(report.messages_copied))
    table.add_row("memory documents copied", str(report.memory_copied))
    table.add_row("memory documents skipped", str(report.memory_skipped))
    table.add_row("sessions verified", str(report.sessions_verified))
    table.add_row("verification", "[green]ok[/]" if report.ok
                  else f"[red]{len(report.mismatches)} difference(s)[/]")
    out.print(table)
    for problem in report.mismatches[:20]:
        out.print(f"  [red]✗[/] {problem}")


def _render_files(transfer: MemoryTransfer, where: str) -> None:
    copied = ", ".join(f"{name} ({n})" for name, n in transfer.copied.items()) or "none"
    click.echo(f"memory files → {where}: copied {copied}"
               + (f"; already there: {', '.join(transfer.same)}" if transfer.same else ""))
    for name in transfer.conflicts:
        click.echo(f"  kept {name}: the destination already holds other entries "
                   "(nothing was overwritten)")


def _transfer_json(transfer: MemoryTransfer) -> dict[str, Any]:
    return records.asdict(transfer)


@click.command("migrate")
@click.option("--from", "source_url", metavar="DB",
              help="Store to copy from: a SQLite path, sqlite:///path or postgresql://… "
                   "(default: the configured --db).")
@click.option("--to", "target_url", metavar="DB",
              help="Store to copy into (created and migrated when new).")
@click.option("--memory-to-files", is_flag=True,
              help="Instead: copy the DB memory of --from (profile memory_profile) into the "
                   "memory files under the data home.")
@click.option("--no-verify", is_flag=True, help="Skip the verification pass.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@pass_app
def migrate_cmd(app: AppContext, source_url: str | None, target_url: str | None,
                memory_to_files: bool, no_verify: bool, as_json: bool) -> None:
    """Copy every session, message, checkpoint, event and memory document into another store.

    File memory (MEMORY.md / USER.md under the data home) is copied into the target's DB memory
    too; --memory-to-files copies DB memory back into files. A destination that already holds
    other entries is never overwritten.

    Example: refold migrate --from sqlite:///~/refold.db --to postgresql://host/refold
    """
    source_url = source_url or app.settings.db_url
    if memory_to_files:
        _memory_to_files(app, source_url, as_json)
        return
    if target_url is None:
        raise InvalidInput("migrate needs --to DB", hint="or --memory-to-files")
    if source_url.strip() == target_url.strip():
        raise InvalidInput("--from and --to name the same store", hint="give two different DBs")
    source = open_store(source_url)
    try:
        target = open_store(target_url)
        try:
            report = _copy(source, target, not as_json, not no_verify)
            files = copy_memory(FileBackend(app.settings.memories_dir),
                                DBBackend(target, app.settings.memory_profile))
        finally:
            target.close()
    finally:
        source.close()
    emit({**records.asdict(report), "ok": report.ok, "memory_files": _transfer_json(files)},
         as_json, lambda _: _render_all(report, files, source_url, target_url))
    if not report.ok:
        raise StorageError(f"the copy differs from the source in {len(report.mismatches)} "
                           "place(s)", hint="see the list above; the source is unchanged. "
                           "Sessions that changed after an earlier migrate are copied whole "
                           "into a new target: an empty database, or another ?schema=")


def _render_all(report: CopyReport, files: MemoryTransfer, source_url: str,
                target_url: str) -> None:
    _render(report, redact_url(source_url), redact_url(target_url))
    _render_files(files, "DB memory")


def _copy(source: Store, target: Store, show_progress: bool, verify: bool) -> CopyReport:
    with _progress_bar(show_progress) as bar:
        tasks: dict[str, Any] = {}

        def progress(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(_PHASES.get(phase, phase), total=total)
            bar.update(tasks[phase], completed=done, total=total)

        return copy_store(source, target, progress=progress, verify=verify)


def _memory_to_files(app: AppContext, source_url: str, as_json: bool) -> None:
    source = open_store(source_url)
    try:
        files = copy_memory(DBBackend(source, app.settings.memory_profile),
                            FileBackend(app.settings.memories_dir))
    finally:
        source.close()
    emit({"memory_files": _transfer_json(files)}, as_json,
         lambda _: _render_files(files, str(app.settings.memories_dir)))
