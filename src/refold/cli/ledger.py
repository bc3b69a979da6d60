"""``refold import`` and ``refold search``: put transcripts into the ledger and find them again.

Import validates the whole file before it touches the store, then makes one ``sync_messages``
call per session, which creates a new session in the transaction that stores its messages
(``create=``): a malformed file stores nothing, an import killed half-way leaves no empty
session, and importing the same file twice appends nothing.
Without ``--session`` the session id is derived from the transcript's content (the chained
identity of its last message): the same transcript always lands in the same session, and a
different one never lands in somebody else's. To keep adding to one session while a transcript
grows, pass ``--session``.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from refold._records import dataclass, replace
from refold.cli.app import AppContext, emit, pass_app
from refold.cli.context import to_json
from refold.cli.import_links import held_stand_in, linked_draft, render_import
from refold.cli.searching import OPTIONS, Option, parse_when, queries_last, run_search
from refold.cli.transcripts import (
    Transcript,
    _read_transcript,
    prompt_text,
    record_prompts,
    without_recorded_prompt,
)
from refold.errors import AmbiguousReference, Conflict, InvalidInput, NotFound
from refold.messages.agent_logs import AGENT_FORMATS
from refold.messages.model import Message, chain_identities, message_identity
from refold.store import Store
from refold.store.base import AppendResult, SessionDraft, Usage, usage_sum

# -- import --------------------------------------------------------------------------------------

def _priced(app: AppContext, spend: list[list[tuple[dict[str, Any], str | None]]] | None
            ) -> list[Usage | None] | None:
    """Each message's model calls as session totals, priced as refold prices replies (the
    shipped table and the ``pricing`` overrides; an unknown model costs nothing); a message
    with none used nothing so far (a call reported later, when the file grew, is added
    then)."""
    if not spend or not any(spend):
        return None
    from refold.assembly import cost_book

    book = cost_book(app.settings, None)
    return [usage_sum([u for u in (book.usage_of(usage, model) for usage, model in calls)
                       if u is not None]) or Usage() for calls in spend]


def _refuse_prompt_history(file: str) -> None:
    """An agent's prompt history (what the user typed, no replies) is not a transcript: said
    plainly instead of a field error on its first line."""
    from refold.messages.load import sniff_prompt_history

    agent = sniff_prompt_history(file)
    if agent is not None:
        where = "~/.claude/projects" if agent == "Claude Code" else "~/.codex/sessions"
        raise InvalidInput(f"{file} is {agent}'s prompt history (what was typed, without the "
                           "replies), not a conversation transcript",
                           hint=f"import the conversations under {where} instead")


def _format_of(file: str, fmt: str | None) -> str:
    """``--format``, or when it is not given the agent format the file shows (``claude-code``,
    ``codex``, ``gemini``), else ``openai``."""
    if fmt is not None:
        return fmt
    if file != "-":
        from refold.messages.load import sniff_agent_log

        return sniff_agent_log(file) or "openai"
    return "openai"


def _new_title(store: Store, wanted: str | None) -> str | None:
    if not wanted:
        return None
    try:
        return store.next_lineage_title(wanted)
    except InvalidInput:
        return None


@dataclass(frozen=True)
class Target:
    """The session an import stores into: its id, and unless it exists already the session to
    create with the messages, in their transaction (a killed import leaves no empty session);
    ``keep_title``: the title was asked for (taken: an error, not an untitled session)."""

    session_id: str
    create: SessionDraft | None = None
    keep_title: bool = False


def _target_session(store: Store, ref: str | None, messages: list[Message], *,
                    title: str | None, default_title: str, source: str,
                    key: str | None = None, started_at: float | None = None) -> Target:
    """The session given by ``--session`` (created when missing), else the one ``key`` names
    (an agent's own conversation id), else the content-derived one."""
    if ref is not None:
        found = _append_target(store, ref)
        if found is not None:
            return Target(found)
        _refuse_an_id_prefix(store, ref)
        session_id = ref.strip()
        default_title = session_id  # "--session NAME" names the session it creates
    else:
        identities = [] if key else chain_identities(messages)
        session_id = key or identities[-1]
        try:
            return Target(store.get_session(session_id).id)
        except NotFound:
            pass
        stored = _stored_as(store, identities) if identities else None
        if stored is None and identities:
            stored = _stored_with_its_prompt(store, messages)
        if stored is not None:
            return Target(stored)
    if title:  # asked for: never one that reads as another session's id prefix
        from refold.store.titles import refuse_title_shadowing_an_id

        refuse_title_shadowing_an_id(store, title)
    draft = SessionDraft(title=title or _new_title(store, default_title), source=source,
                         started_at=started_at)
    return Target(session_id, draft, keep_title=bool(title))


def _exists(store: Store, session_id: str) -> bool:
    try:
        store.get_session(session_id)
    except NotFound:
        return False
    return True


def _stored_as(store: Store, identities: list[str]) -> str | None:
    """The stored session a transcript with no id of its own is already (refold's JSONL
    export imported back; the same file imported before and grown since): of the sessions
    opening as it does whose active messages start with all of it, or are all a start of it
    (it goes on from there), the one holding most of it, the newest of those (a fork made at
    its fifth message is a start of it too, and took the rest again as copies); ``identities``:
    its messages' chain (a row matching at its position matches all before it). None:
    another conversation."""
    best, held, copied = None, 0, True
    for session_id in store.sessions_opening_with(identities[0]):
        rows = store.get_messages(session_id, limit=len(identities))
        if not rows or len(rows) < held or rows[-1].identity != identities[len(rows) - 1]:
            continue
        # on a tie, the session the others were copied from (a fork or branch of it holding
        # as much took the new turns)
        copy = store.get_session(session_id).link_kind in ("fork", "branch")
        if len(rows) > held or (copied and not copy):
            best, held, copied = session_id, len(rows), copy
    return best


def _stored_with_its_prompt(store: Store, messages: list[Message]) -> str | None:
    """The stored session a transcript opening with a system message is, when that message
    is the session's recorded system prompt rather than one of its rows (the JSONL export of
    a session ``refold serve`` recorded starts so): ``_stored_as`` of the rest, if that
    session recorded the prompt. None: another conversation."""
    if len(messages) < 2 or prompt_text(messages[0]) is None:
        return None
    stored = _stored_as(store, chain_identities(messages[1:]))
    if stored is None or without_recorded_prompt(store, stored, messages) is messages:
        return None
    return stored


SYNC_ATTEMPTS = 5  # reads of a session another writer keeps appending to, before giving up
SHOWN_ID = 8  # the id characters ``sessions list`` shows: a shorter prefix names no target


def _append_target(store: Store, ref: str) -> str | None:
    """The session ``--session REF`` appends to: the one with that exact id or exact title
    (never a numbered "#N" one that only shares the name: it may be an unrelated import),
    else the one whose id starts with REF when REF is at least as long as the ids
    ``sessions list`` shows (a short name such as "f" or "2024" must not reach an unrelated
    session by its id); None: no such session (REF names the one to create)."""
    for prefix in (False, True):
        if prefix and len(ref.strip()) < SHOWN_ID:
            return None
        try:
            return store.resolve_session(ref, prefix=prefix, exact=True).id
        except AmbiguousReference:
            raise
        except NotFound:
            continue
    return None


def _refuse_an_id_prefix(store: Store, ref: str) -> None:
    """InvalidInput when ``--session REF``, too short to reach a session by its id, is the
    start of a stored session's id (4+ hex digits, as a title is refused): a new session
    with that id and title would shadow the one meant (``sessions show e1ff`` opened the new
    one). Said with how to reach the one meant, or name another."""
    from refold.store.titles import reads_as_id_prefix

    name = ref.strip()
    if not reads_as_id_prefix(name):
        return
    try:
        ids = [store.resolve_session(name.lower(), prefix=True).id]
    except AmbiguousReference as exc:
        ids = list(exc.candidates)
    except NotFound:
        return
    ids = [i for i in ids if i.lower().startswith(name.lower())]
    if not ids:
        return
    which = f"session {ids[0]}'s id" if len(ids) == 1 else f"{len(ids)} sessions' ids"
    raise InvalidInput(
        f"--session {name!r} is the start of {which}: a new session named so would hide it",
        hint=(f"to add to it give at least {SHOWN_ID} characters of its id (--session "
              f"{ids[0][:SHOWN_ID]})" if len(ids) == 1 else "to add to one of them give at "
              f"least {SHOWN_ID} characters of its id (`refold sessions list`)")
        + "; for a new session choose a name that is not an id prefix")


def _store_messages(store: Store, target: Target, messages: list[Message],
                    **kw: Any) -> AppendResult:
    """``sync_messages`` into ``target``, created with them when missing; if its default title
    was taken meanwhile, untitled (a session a concurrent import created: used as it is)."""
    draft = target.create
    try:
        return store.sync_messages(target.session_id, messages, create=draft, **kw)
    except Conflict:
        if draft is None or draft.title is None or target.keep_title:
            raise
    return store.sync_messages(target.session_id, messages, create=replace(draft, title=None),
                               **kw)


@click.command("import")
@click.argument("file")
@click.option("--session", "session_ref", metavar="ID",
              help="Append to this session (its id, the 8-character id prefix `sessions list` "
                   "shows, or its exact title); created, titled so, when missing. "
                   "The session's own transcript grown adds what is new; another transcript "
                   "is added after its history.")
@click.option("--title", help="Title for a newly created session (default: the file name).")
@click.option("--source", default=None,
              help="Source label stored with a new session (default: import, or claude-code, "
                   "codex, gemini, hermes or opencode for their sessions).")
@click.option("--format", "fmt",
              type=click.Choice(["openai", "anthropic", *AGENT_FORMATS, "hermes", "opencode"]),
              default=None,
              help="Format of FILE: openai messages, anthropic (Messages API turns), "
                   "claude-code, codex or gemini (the transcripts those agents keep), hermes "
                   "or opencode (Hermes-Agent's state.db, OpenCode's opencode.db: every "
                   "session in it). "
                   "Default: the agent's format when the file is one of theirs, else openai.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_app
def import_cmd(app: AppContext, file: str, session_ref: str | None, title: str | None,
               source: str | None, fmt: str | None, as_json: bool) -> None:
    """Import a transcript FILE (JSON list, {"messages": [...]} or JSONL; - for stdin), or
    every transcript under a directory (one session each).

    Anthropic Messages transcripts ({"system", "messages"}) import with --format anthropic;
    they are stored in the OpenAI form like everything else. Claude Code's transcripts
    (~/.claude/projects/*/*.jsonl), Codex's (~/.codex/sessions/**/rollout-*.jsonl) and
    Gemini CLI's (~/.gemini/tmp/*/chats/session-*.json) are recognised and read as the turns
    their model saw, with the tokens each call used; what they hold besides (progress,
    notices, metadata) is left out, and how much is said on stderr. Their own conversation id
    names the session: importing the file again after it grew adds only the new turns.
    Hermes-Agent's session database (~/.hermes/state.db, or ~/.hermes) and OpenCode's
    (~/.local/share/opencode/opencode.db, or that folder) import every session in them,
    turns summarized away by their compactions included, rewound turns and their own
    summaries left out; they are only read.

    A message's own time (created_at, timestamp, time or date: epoch seconds or
    milliseconds, ISO 8601, or as people write it, "1:56 pm on 8 May, 2023"; local time
    without a zone) dates it in the ledger, and a message's name (a group chat's speaker) is
    searchable.

    refold's own JSON export (refold sessions export --format json) imports each of its
    sessions with messages under its id and title there; rewound rows (--archived) are left
    out and counted. --session and --title are refused for an export of several sessions.

    Messages already stored in the session are skipped, so importing twice is harmless.
    """
    if file != "-" and Path(file).expanduser().is_dir():
        if session_ref is not None or title is not None:
            raise InvalidInput("--session and --title name one session; a directory holds many",
                               hint="import its files one by one to name their sessions")
        _import_directory(app, Path(file).expanduser(), source, fmt, as_json)
        return
    piped = _read_pipe(file, app.settings.import_max_bytes or None)
    database = _database_format(file, fmt) if piped is None else None
    if database is not None:
        from refold.cli.databases import AGENT_DATABASES, import_database

        if session_ref is not None or title is not None:
            raise InvalidInput(f"--session and --title name one session; "
                               f"{AGENT_DATABASES[database].agent}'s database holds many "
                               "(each is imported as its own session)")
        reports = import_database(app, Path(file).expanduser(), database, source)
        _emit_reports(reports, as_json, f"{len(reports)} {AGENT_DATABASES[database].agent} "
                      "session(s) imported")
        return
    from refold.messages.validate import repair_text

    # the session --session names (created under that id when new) and the title hold U+FFFD
    # where an argument was not UTF-8: a lone surrogate could not be stored (a traceback)
    session_ref = None if session_ref is None else repair_text(session_ref)
    title = None if title is None else repair_text(title)
    reports = _import_one(app, file, session_ref, title, source, fmt, piped)
    if len(reports) == 1:
        emit(reports[0], as_json, render_import)
    else:
        _emit_reports(reports, as_json, f"{len(reports)} session(s) of a refold export imported")


def _read_pipe(file: str, max_bytes: int | None) -> bytes | None:
    """What FILE holds when it is a pipe (``refold import <(jq …)``, a named FIFO), read once;
    None for a regular file or stdin. Each look at a pipe consumed it: the format sniffing read
    it, so the import found it empty ("63: no messages (the input is empty)") or, for a named
    FIFO, waited for ever for a second writer."""
    import stat

    if file == "-":
        return None
    try:
        mode = Path(file).expanduser().stat().st_mode
    except OSError:
        return None  # the readers say what is wrong with it
    if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)):
        return None
    try:
        with Path(file).expanduser().open("rb") as stream:
            return stream.read(max_bytes + 1) if max_bytes else stream.read()
    except OSError as exc:
        raise InvalidInput(f"cannot read {file}: {exc.strerror or exc}") from exc


def _import_one(app: AppContext, file: str, session_ref: str | None, title: str | None,
                source: str | None, fmt: str | None, piped: bytes | None = None
                ) -> list[dict[str, Any]]:
    """Import one transcript file (or stdin, or a pipe's ``piped`` bytes), or each session of
    a refold JSON export; their reports."""
    from refold.messages.load import Utf8Repair

    repair = Utf8Repair()
    if fmt is None and file != "-" and piped is None:
        _refuse_prompt_history(file)
    fmt = _format_of(file, fmt) if piped is None else (fmt or "openai")
    given = source  # --source names every session; else an export's own, else the format
    if source is None:
        source = fmt if fmt in AGENT_FORMATS else "import"
    try:
        found = _read_transcript(file, fmt, app.settings.import_max_bytes or None, repair,
                                 piped)
    finally:  # also before the error a file that is refused gives (binary data, UTF-16)
        if repair.count:
            click.echo(f"warning: {file}: {repair.describe()}", err=True)
    if session_ref is not None or title is not None:  # they name the session holding them:
        found = [read for read in found if read.copied_by is None]  # not a fork's parent
    if not found or not found[0].messages:
        raise InvalidInput(f"{file}: no messages to import")
    if len(found) > 1 and (session_ref is not None or title is not None):
        raise InvalidInput(f"--session and --title name one session; {file} is a refold "
                           f"export of {len(found)} sessions with messages",
                           hint="import it without them: each session is imported as its own")
    reports = []
    for read in found:
        if read.copied_by is not None and read.key and _exists(app.store, read.key):
            reports.append(held_stand_in(app.store, read, read.key))  # left as it is
            continue
        if read.copied_by is not None and _exists(app.store, read.copied_by):
            continue  # its fork is stored (without a link to it): nothing would link to it
        report = _import_transcript(app, read, session_ref, title,
                                    given or read.source or source, fmt)
        if repair.count:
            report["utf8_repaired"] = {"count": repair.count,
                                       "first_offset": repair.first_offset}
        reports.append(report)
    return reports


def _import_transcript(app: AppContext, read: Transcript, session_ref: str | None,
                       title: str | None, source: str, fmt: str) -> dict[str, Any]:
    """Store one transcript's messages; its report."""
    messages, stem = read.messages, read.stem
    if fmt in AGENT_FORMATS:  # an agent's file is named by a uuid: its first request reads better
        from refold.messages.agent_logs import agent_title

        stem = agent_title(messages) or stem
    store = app.store
    said = [t for t in read.times or () if t is not None]
    # an exported session started when it did there (a fork: when it was made, after the
    # messages it copied were said; ``_stand_in`` tells its copies so when exported again)
    started = read.started_at or (min(said) if said else None)
    target = _target_session(store, session_ref, messages, title=title, default_title=stem,
                             source=source, key=read.key, started_at=started)
    if target.create is not None and read.model:
        target = replace(target, create=replace(target.create, model=read.model))
    draft, unlinked = linked_draft(store, target.create, read, target.session_id)
    target = replace(target, create=draft)  # an export's session continues its parent here
    times, usage = read.times, _priced(app, read.spend)
    if target.create is not None and session_ref is None and read.resumed:
        # a resumed session's own file, imported the first time: a branch of the session it
        # resumed, sharing that one's turns (stored from this file when missing)
        parent, stored = _resumed_sessions(store, read, times, usage, source)
        if stored and not target.keep_title:  # the title it was to take may be theirs now
            target = replace(target, create=replace(target.create,
                                                    title=_new_title(store, stem)))
        result, shared = _create_session(store, target, messages, times, usage, parent)
        report: dict[str, Any] = {"session_id": target.session_id,
                                  "title": store.get_session(target.session_id).title,
                                  "appended": stored + len(result.appended) - shared,
                                  "skipped": shared, "rewound": result.rewound}
        if parent is not None and shared:
            report["resumes"] = parent
        if stored:
            report["stored_in_resumed"] = stored
        return report
    if target.create is None:  # its recorded system prompt, exported first: not a row
        kept = without_recorded_prompt(store, target.session_id, messages)
        if kept is not messages:
            messages, times, usage = kept, times and times[1:], usage and usage[1:]
    restored = restore_rewinds = 0
    for attempt in range(SYNC_ATTEMPTS):
        # a session to create is expected empty (""): one another import created since it was
        # looked up (the same --session NAME at the same moment) is a Conflict, not this
        # transcript synced as its whole history (that rewound the other import's messages)
        history, kept_times, kept_usage, already, last = \
            (messages, times, usage, None, "") if target.create else \
            _after_its_history(store, target.session_id, messages, times, usage)
        if target.create is None and already is None:  # rows a rewind holds come back
            from refold.runtime.branches import restore_rewound  # (not on search's path)

            back, gone = restore_rewound(store, target.session_id, history)
            restored, restore_rewinds = restored + back, restore_rewinds + gone
        try:
            result = _store_messages(store, target, history, created_at=kept_times,
                                     usage=kept_usage, expect_last=last)
            break
        except Conflict:
            if target.create is not None:
                if not _exists(store, target.session_id):
                    raise  # its --title is another session's
                target = Target(target.session_id)  # there now: as an existing session
            elif last is None or attempt == SYNC_ATTEMPTS - 1:
                raise  # (another import appended each time: said, not retried for ever)
    if read.totals:
        _top_up_totals(store, target.session_id, read.totals)
    if read.system_prompts:
        record_prompts(store, target.session_id, read.system_prompts)
    report = {"session_id": target.session_id,
              "title": store.get_session(target.session_id).title,
              "appended": len(result.appended),
              # the rows brought back were stored already, but not as this history's
              "skipped": max(0, (result.skipped if already is None else already) - restored),
              "rewound": result.rewound + restore_rewinds}
    if unlinked:
        report["not_linked"] = unlinked
    if read.copied_by:  # a fork's parent: the export holds only what its fork copied
        report["copied_by"] = read.copied_by
    if restored:  # rows a rewind of the session held, the transcript has again
        report["restored"] = restored
    if already is not None:
        report["added_after"] = len(history) - len(messages)
    if read.rewound:
        report["rewound_left_out"] = read.rewound
    if title and target.create is None and report["title"] != title:
        # the transcript went to the session holding it: its --title names nothing new
        report["title_not_used"] = title
    return report


def _top_up_totals(store: Store, session_id: str, totals: dict[str, float]) -> None:
    """An exported session's usage totals there, added as far as this session's fall short of
    them: imported the first time, its totals come with it; imported again, or where it came
    from, nothing is counted twice; grown, only the growth is added."""
    have = store.get_session(session_id)

    def short(name: str) -> float:
        return max(0.0, totals.get(name, 0.0) - float(getattr(have, name, 0) or 0))

    tokens = {name: int(short(name)) for name in ("input_tokens", "output_tokens",
                                                  "cache_read_tokens")}
    cost = short("cost_usd")
    if any(tokens.values()) or cost > 1e-12:
        store.add_usage(session_id, input_tokens=tokens["input_tokens"],
                        output_tokens=tokens["output_tokens"],
                        cache_read_tokens=tokens["cache_read_tokens"], cost_usd=cost)


def _resumed_sessions(store: Store, read: Transcript, times: list[float | None] | None,
                      usage: list[Usage | None] | None, source: str) -> tuple[str | None, int]:
    """The sessions a resumed agent session's file continues (``Transcript.resumed``), each
    stored from the file's leading messages when it is not stored yet (as a branch of the one
    before it), and left as it is when it is: the last one's id (None when there is none),
    and how many messages were stored."""
    from refold.messages.agent_logs import agent_title

    parent: str | None = None
    stored = 0
    for key, count in read.resumed:
        try:
            parent = store.get_session(key).id
            continue
        except NotFound:
            pass
        messages = read.messages[:count]
        said = [t for t in (times or [])[:count] if t is not None]
        draft = SessionDraft(title=_new_title(store, agent_title(messages) or read.stem),
                             source=source, started_at=min(said) if said else None)
        result, shared = _create_session(store, Target(key, draft), messages,
                                         None if times is None else times[:count],
                                         None if usage is None else usage[:count], parent)
        stored += len(result.appended) - shared
        parent = key
    return parent, stored


def _create_session(store: Store, target: Target, messages: list[Message],
                    times: list[float | None] | None, usage: list[Usage | None] | None,
                    parent: str | None) -> tuple[AppendResult, int]:
    """Store ``messages`` into ``target``, a session not stored yet; with ``parent`` (the
    session it resumed) sharing a start with them, as that one's branch holding copies of
    the shared messages, which were said and used tokens there (the branch's totals count
    only its own): the result, and how many messages were shared."""
    shared = 0
    if parent is not None:
        rows = store.get_messages(parent)
        identities = chain_identities(messages)
        while shared < min(len(rows), len(identities)) and \
                rows[shared].identity == identities[shared]:
            shared += 1
    if shared and target.create is not None:
        own = [t for t in (times or [])[shared:] if t is not None]
        target = replace(target, create=replace(
            target.create, parent_session_id=parent, link_kind="branch",
            started_at=min(own) if own else target.create.started_at))
        if usage is not None:
            usage = [*([None] * shared), *usage[shared:]]
    return _store_messages(store, target, messages, created_at=times, usage=usage), shared


def _after_its_history(store: Store, session_id: str, messages: list[Message],
                       times: list[float | None] | None, usage: list[Usage | None] | None
                       ) -> tuple[list[Message], list[float | None] | None,
                                  list[Usage | None] | None, int | None, str | None]:
    """What to sync into an existing session for ``--session``. A transcript that starts as
    the session does is the session's own (it grew, or was edited): synced as it is, None
    fourth. Another transcript is added after the session's history, never in place of it (it
    rewound every stored message): the stored history plus what of ``messages`` is not stored
    already — nothing when the whole transcript is there anywhere (a re-import of one that
    other transcripts followed), else what follows the longest part of it at the history's
    end (a re-import of it grown); fourth, how many of ``messages`` were there already. Last:
    the identity of the stored history's last message (``sync_messages(expect_last=…)``: a
    concurrent writer's rows are read again, never rewound)."""
    rows = store.get_messages(session_id)
    last = rows[-1].identity if rows else None
    if not rows or not messages or message_identity(messages[0], None) == rows[0].identity:
        return messages, times, usage, None, None
    held = 0
    stored_ids = [r.identity for r in rows]
    for j in range(len(rows)):  # where a stored run of the transcript may start
        before = stored_ids[j - 1] if j else None
        if message_identity(messages[0], before) != stored_ids[j]:
            continue
        chain = chain_identities(messages[:len(rows) - j], before)
        run = next((k for k, (a, b) in enumerate(zip(chain, stored_ids[j:], strict=False))
                    if a != b), len(chain))
        if run == len(messages) or j + run == len(rows):  # all of it, or up to the end
            held = max(held, run)
        if held == len(messages):
            break
    stored = [r.message for r in rows]
    return ([*stored, *messages[held:]],
            None if times is None else [*(r.created_at for r in rows), *times[held:]],
            None if usage is None else [*([None] * len(rows)), *usage[held:]], held, last)


def _import_directory(app: AppContext, directory: Path, source: str | None, fmt: str | None,
                      as_json: bool) -> None:
    """Every ``*.jsonl`` under ``directory`` (Claude Code's projects folder, Codex's sessions),
    every Gemini CLI session ``.json``, one session each, and every Hermes-Agent ``state.db``
    and OpenCode ``opencode.db`` (each of their sessions); a file that fails is reported and
    the rest go on. Exit status 1 when any failed."""
    from refold.cli.databases import database_kind, import_database
    from refold.errors import RefoldError
    from refold.messages.load import sniff_agent_log, sniff_prompt_history

    candidates = sorted(p for p in directory.rglob("*.json*") if p.suffix in (".jsonl", ".json")
                        and p.is_file() and p.stat().st_size)
    # a .json file only when it is a Gemini CLI session (not a settings file): the others
    # are named, not silently passed over (import one with `refold import FILE`)
    found = [p for p in candidates if p.suffix == ".jsonl" or sniff_agent_log(p) == "gemini"]
    other = len(candidates) - len(found)
    if other:
        click.echo(f"{directory}: {other} .json file(s) left out (a directory's .json files "
                   "are read only as Gemini CLI sessions; import one with `refold import "
                   "FILE`)", err=True)
    databases = {p: kind for p in sorted(directory.rglob("*.db"))
                 if p.is_file() and (kind := database_kind(p)) is not None}
    histories = [p for p in found if p.suffix == ".jsonl" and sniff_prompt_history(p)]
    for path in histories:  # ~/.codex/history.jsonl under ~/.codex: not a conversation
        click.echo(f"{path}: skipped, {sniff_prompt_history(path)}'s prompt history (no "
                   "replies), not a transcript", err=True)
    files = [p for p in found if p not in histories]
    if fmt in ("hermes", "opencode"):  # --format names one agent's databases: only those
        files = []
        databases = {p: kind for p, kind in databases.items() if kind == fmt}
    if not files and not databases:
        raise InvalidInput(f"{directory}: no non-empty .jsonl transcripts (or Gemini CLI "
                           "session .json files, or Hermes-Agent's or OpenCode's database) "
                           "in it")
    reports: list[dict[str, Any]] = []
    for path in [*files, *databases]:
        try:
            if path in databases:
                got = [{"file": str(path), **r}
                       for r in import_database(app, path, databases[path], source)]
            else:
                got = [{"file": str(path), **r}
                       for r in _import_one(app, str(path), None, None, source, fmt)]
        except RefoldError as exc:
            click.echo(f"error: {exc}", err=True)
            got = [{"file": str(path), "error": str(exc)}]
        reports += got
        if not as_json:
            for report in got:
                if "error" not in report:
                    render_import(report)
    failed = sum("error" in r for r in reports)
    _emit_reports(reports, as_json, f"{len(files) + len(databases) - failed} of "
                  f"{len(files) + len(databases)} file(s) imported", rendered=True)
    if failed:
        sys.exit(1)


def _emit_reports(reports: list[dict[str, Any]], as_json: bool, lead: str, *,
                  rendered: bool = False) -> None:
    """Import reports: as one JSON list, or (each one's line unless ``rendered``) a total."""
    if as_json:
        click.echo(to_json(reports))
        return
    done = [r for r in reports if "error" not in r]
    if not rendered:
        for report in done:
            render_import(report)
    failed = len(reports) - len(done)
    click.echo(f"{lead}: {sum(r['appended'] for r in done)} message(s) stored, "
               f"{sum(r['skipped'] for r in done)} already stored"
               + (f"; {failed} failed (above)" if failed else ""))


def _database_format(file: str, fmt: str | None) -> str | None:
    """``hermes`` or ``opencode`` when FILE is read as that agent's database (by ``--format``,
    or by what the file is); None for a transcript."""
    from refold.cli.databases import AGENT_DATABASES, sniff_database

    if fmt in AGENT_DATABASES:
        if file == "-":
            raise InvalidInput(f"--format {fmt} reads {AGENT_DATABASES[fmt].agent}'s "
                               "database, not stdin",
                               hint=f"give its path: refold import {AGENT_DATABASES[fmt].where}")
        return fmt
    if fmt is None and file != "-":
        return sniff_database(Path(file).expanduser())
    return None


# -- search --------------------------------------------------------------------------------------

def parse_time(value: str | None, *, now: float | None = None) -> float | None:
    """An ISO date/datetime (local time when naive) or a relative age like 30m, 12h, 7d, 2w."""
    try:
        return parse_when(value, now=now)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _time_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    return parse_time(value)


def _click_option(option: Option) -> Callable[[Any], Any]:
    """The click option for one of ``refold.cli.searching.OPTIONS``."""
    extra: dict[str, Any] = {}
    if option.kind == "choice":
        extra["type"] = click.Choice(list(option.choices))
    elif option.kind == "int":
        extra["type"] = click.IntRange(option.low, option.high)
    elif option.kind == "flag":
        extra["is_flag"] = True
    elif option.kind == "time":
        extra["callback"] = _time_option
    if option.default is not None and option.kind != "flag":
        extra["default"] = option.default
    if option.show_default:
        extra["show_default"] = True
    return click.option(option.flag, option.dest, metavar=option.metavar, help=option.help,
                        **extra)


class _SearchCommand(click.Command):
    """``refold search``: a query that starts with "-" is still a query where it cannot be an
    option ("-W error", "-staging deploy": it holds white space), and an unknown option's error
    says how to search for one that does not ("--", as any command line)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = queries_last(list(args))
        typed_args = list(args)  # the parser consumes ``args``
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            if exc.possibilities:  # a misspelt option ("Did you mean '--limit'?")
                raise
            typed = next((a for a in typed_args if a.startswith(exc.option_name)),
                         exc.option_name)
            raise click.UsageError(
                f"{exc.format_message()} (a query that starts with '-' goes after '--': "
                f"refold search -- {shlex.quote(typed)})", ctx) from None


def _search_command(fn: Callable[..., None]) -> click.Command:
    for option in reversed(OPTIONS):  # decorators apply bottom-up; help lists them in order
        fn = _click_option(option)(fn)
    return click.command("search", cls=_SearchCommand)(click.argument("query")(fn))


@_search_command
@pass_app
def search_cmd(app: AppContext, query: str, **values: Any) -> None:
    """Search every stored message: a question as you would ask it, in any language.

    Its words rank the messages holding any of them (BM25; stop words left out, words
    stemmed, Chinese, Japanese and Korean matched as exact substrings, full-width ＡＰＩ or
    ５４３３ also as API and 5433, pytest also where CJK text holds it glued: 用pytest跑), a
    day it names ("May 2nd", "21.01.2024", "5月2号") ranks that day's messages, and a
    session whose title
    matches comes first. Explicit syntax means exactly what it says: "a phrase", a AND b,
    a OR b, -b or NOT b, deplo* (prefix). A query of one word that starts with "-" goes
    after "--": refold search -- -staging.
    """
    run_search(app, query, values, click.echo,
               lambda text: click.style(text, fg="yellow", bold=True))
