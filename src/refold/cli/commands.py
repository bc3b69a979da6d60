"""The ``refold`` click group: global options and the command table (commands load on use).

``refold.cli.main`` is the entry point; it renders every error and only imports this module
for a command line its click-free paths (``--version``, a plain ``search``) do not take.
"""

from __future__ import annotations

import click

from refold import __version__
from refold.cli.app import AppContext, LazyGroup

COMMANDS = {
    "demo": "refold.cli.demo:demo_cmd",
    "import": "refold.cli.ledger:import_cmd",
    "sessions": "refold.cli.sessions:sessions_group",
    "search": "refold.cli.ledger:search_cmd",
    "index": "refold.cli.index:index_cmd",
    "doctor": "refold.cli.doctor:doctor_cmd",
    "compact": "refold.cli.compact:compact_cmd",
    "context": "refold.cli.compact:context_cmd",
    "memory": "refold.cli.memory:memory_group",
    "serve": "refold.cli.serve:serve_cmd",
    "chat": "refold.cli.chat:chat_cmd",
    "mcp": "refold.cli.mcp:mcp_cmd",
    "migrate": "refold.cli.migrate:migrate_cmd",
    "config": "refold.cli.config:config_group",
    "expand": "refold.cli.expand:expand_cmd",
    "skills": "refold.cli.skills:skills_group",
}


# what `refold --help` lists, without importing every command (tests/cli/test_cli_lazy.py keeps
# these equal to the commands' docstrings); a command missing here is imported to describe it
SUMMARIES = {
    "chat": "Chat with a model; history, compaction and memory handled by refold.",
    "compact": 'Compact a transcript FILE (JSON list, {"messages": [...]}, or JSONL; - for '
               'stdin).',
    "context": "Show what fills SESSION's context window (system, memory, summary, tail by role).",
    "demo": "Replay a scripted agent session and show compaction, memory, search and resume.",
    "doctor": "Check the installation: versions, SQLite features, paths and database integrity.",
    "import": 'Import a transcript FILE (JSON list, {"messages": [...]} or JSONL; - for stdin), '
              'or every transcript under a directory (one session each).',
    "mcp": "Run an MCP server on stdio: memory, session_search, skill_manage, "
           "expand_references.",
    "memory": "Show and edit persistent memory (MEMORY.md, USER.md) and approve staged writes.",
    "migrate": "Copy every session, message, checkpoint, event and memory document into another "
               "store.",
    "search": "Search every stored message: a question as you would ask it, in any language.",
    "serve": "Serve the chat completions, Messages and Responses APIs with sessions, compaction "
             "and memory.",
    "index": "Seal the word index, then embed messages with no vector yet (resumable).",
    "config": "Inspect refold's settings (refold.toml, REFOLD_* variables, --set).",
    "expand": "Expand the @session/@file/@folder/@diff/@staged/@git references in TEXT "
              "('-': stdin).",
    "skills": "The skills library: one SKILL.md per kind of task (Claude Code / Hermes format).",
    "sessions": "List, inspect, export and manage stored sessions.",
}


@click.group(cls=LazyGroup, lazy=COMMANDS, summaries=SUMMARIES, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--home", type=click.Path(file_okay=False), envvar=None,
              help="Data directory (default: $REFOLD_HOME or the per-user data dir).")
@click.option("--db", help="Database: a SQLite path, sqlite:///path or postgresql://… "
                           "(default: $REFOLD_DB or <home>/refold.db).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Set any setting for this run, e.g. --set threshold_percent=0.6 or "
                   "--set summarizer.timeout=30 (repeatable; `refold config show` lists them).")
@click.option("-v", "--verbose", count=True, help="Log more (-vv for debug).")
@click.version_option(__version__, prog_name="refold")
@click.pass_context
def cli(ctx: click.Context, home: str | None, db: str | None, sets: tuple[str, ...],
        verbose: int) -> None:
    """refold — context and memory for LLM agents.

    Keeps an agent's context window fit (compaction), its memory across sessions
    (MEMORY.md / USER.md) and every message searchable (SQLite or PostgreSQL).
    """
    if verbose:
        import logging  # only here: every command starts without it

        logging.basicConfig(level=logging.DEBUG if verbose > 1 else logging.INFO,
                            format="%(levelname)s %(name)s: %(message)s")
    app = AppContext(flags={"home": home, "db": db}, sets=sets, command=ctx.invoked_subcommand)
    ctx.obj = app
    ctx.call_on_close(app.close)
