"""What ``refold import`` reads: a transcript file (or stdin, or a pipe), an agent's own log, or
each session of a refold JSON export, as ``Transcript`` records for ``refold.cli.ledger``; and
what a session's recorded system prompt in refold's own export becomes when imported."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from refold._records import dataclass
from refold.messages.agent_logs import AGENT_FORMATS, AGENT_NAMES
from refold.messages.model import Message

if TYPE_CHECKING:  # the loaders load with `refold import`, not on `refold search`'s path
    from refold.messages.load import AgentLog, ExportedSession, Utf8Repair
    from refold.store import Store


@dataclass(frozen=True)
class Transcript:
    """A file read for import: its messages, the default title, and for an agent's transcript
    the session its own conversation id names (None: the content decides), when each message
    was said, and the usage of the model calls behind each."""

    messages: list[Message]
    stem: str
    key: str | None = None
    times: list[float | None] | None = None
    spend: list[list[tuple[dict[str, Any], str | None]]] | None = None
    rewound: int = 0  # a refold export's rewound (inactive) rows: left out
    # a resumed agent session's file: the sessions it continues (their keys, oldest first),
    # each with how many of the leading messages are that session's (``AgentLog.resumed``)
    resumed: tuple[tuple[str, int], ...] = ()
    # a refold export's session: where it came from, its model and its usage totals there
    source: str | None = None
    model: str | None = None
    totals: dict[str, float] | None = None
    parent: str | None = None  # the session it continues there (a ``--lineage`` export)
    link: str | None = None  # how: "compaction", "fork", "branch"
    system_prompts: tuple[str, ...] = ()  # the prompts recorded for it there, oldest first
    # a ``--lineage`` export's fork parent, which holds no messages of its own there: the id of
    # the session after it holding the copies it stands for (``_stand_in``)
    copied_by: str | None = None
    started_at: float | None = None  # when it started there (else: its first message's time)


def _read_transcript(file: str, fmt: str, max_bytes: int | None, repair: Utf8Repair,
                     piped: bytes | None = None) -> list[Transcript]:
    """``file`` read as ``fmt`` (see ``Transcript``): one transcript, or for a refold JSON
    export each of its sessions with messages. ``piped``: what a pipe FILE held (read once)."""
    from refold.messages.load import (
        check_size,
        load_anthropic,
        load_export,
        load_export_file,
        load_messages,
        load_messages_file,
        message_times,
    )

    if fmt in AGENT_FORMATS:
        if file == "-":
            piped = sys.stdin.buffer.read(max_bytes + 1) if max_bytes else \
                sys.stdin.buffer.read()
        found = _read_agent_log(file, fmt, max_bytes, repair, piped)
        resumed = tuple((key, count) for native, count in found.resumed
                        if (key := _session_key(fmt, native)) is not None)
        return [Transcript(found.messages, Path(file).stem, _session_key(fmt, found.native_id),
                           found.times, found.spend, resumed=resumed)]
    if file == "-" or piped is not None:
        if piped is not None:  # a process substitution's /dev/fd/63 is no title: "pipe"
            fd = Path(file).parent.name == "fd" and Path(file).name.isdigit()
            data, name, stem = piped, file, "pipe" if fd else Path(file).stem
        else:
            data = sys.stdin.buffer.read(max_bytes + 1) if max_bytes else sys.stdin.buffer.read()
            name, stem = "<stdin>", "stdin"
        check_size(len(data), max_bytes, name, whole=False)  # (read up to one byte over)
        if fmt == "anthropic":
            return [Transcript(load_anthropic(data, source_name=name, repair=repair), stem)]
        exported = load_export(data, source_name=name, repair=repair)
        if exported is not None:
            return _exported(file, stem, exported)
        loaded = load_messages(data, source_name=name, repair=repair)
        return [Transcript(loaded, stem, times=message_times(loaded))]
    if fmt == "openai":
        exported = load_export_file(file, max_bytes=max_bytes, repair=repair)
        if exported is not None:
            return _exported(file, Path(file).stem, exported)
    loaded = load_messages_file(file, fmt=fmt, max_bytes=max_bytes, repair=repair)
    # a chat export's own times date its messages (OpenAI form keeps each message's keys)
    return [Transcript(loaded, Path(file).stem,
                       times=message_times(loaded) if fmt == "openai" else None)]


def _exported(file: str, stem: str, sessions: list[ExportedSession]) -> list[Transcript]:
    """The sessions of a refold JSON export with active messages, each named by its id there
    (imported back where it came from, or again after it grew: only what is new is stored)
    and titled as it was; a fork's parent in a ``--lineage`` export, which holds none of its
    own (its fork holds copies of them), as those copies (``_stand_in``: the fork keeps its
    link); the rest said on stderr."""
    found = []
    for s in sessions:
        if s.messages:
            found.append(_transcript(s, stem, s.messages, s.times))
        elif (stood := _stand_in(s, sessions, stem)) is not None:
            found.append(stood)
    empty = len(sessions) - len(found)
    rewound = sum(s.rewound for s in sessions)
    left_out = [f"{rewound} rewound message(s)"] if rewound else []
    left_out += [f"{empty} session(s) with no messages of their own"] if empty else []
    if left_out:
        click.echo(f"{file}: read as a refold export of {len(sessions)} session(s); left out "
                   + ", ".join(left_out), err=True)
    return found


def _transcript(s: ExportedSession, stem: str, messages: list[Message],
                times: list[float | None], copied_by: str | None = None) -> Transcript:
    return Transcript(messages, s.title or stem, s.id, times, rewound=s.rewound,
                      source=s.source, model=s.model, totals=s.totals,
                      parent=s.parent_session_id, link=s.link_kind,
                      system_prompts=tuple(s.system_prompts), copied_by=copied_by,
                      started_at=s.started_at)


def _stand_in(parent: ExportedSession, sessions: list[ExportedSession],
              stem: str) -> Transcript | None:
    """A session of a ``--lineage`` export with no messages of its own because the fork or
    branch after it holds copies of them (through forks of forks: the first of them holding
    messages), as those copies: its messages up to the fork point, so that the fork, imported
    after it, is its fork there too (a parent missing there, the link was lost). None: no
    fork copies any of its messages (a branch sharing nothing, or none after it).

    The copies are the holder's first messages: none after the fork point (``fork_seq``, a
    seq of the parent's: the copies' own seqs are never above it, but the fork's own messages
    may be when the parent held rewound rows; a fork imported has none), and none said after
    the fork was made (its own messages, also when their seqs are not above the fork point).
    """
    from refold.store.rules import FORK_KINDS  # the links whose child holds copies

    children = {s.parent_session_id: s for s in sessions if s.parent_session_id}
    upto: int | None = None  # the copies: the holder's messages up to this seq
    child = children.get(parent.id)
    made = child.started_at if child is not None else None  # the fork of ``parent``
    for _ in sessions:  # (a hand-made file's links may go round in a circle)
        if child is None or child.link_kind not in FORK_KINDS:
            return None
        if child.fork_seq is not None:
            upto = child.fork_seq if upto is None else min(upto, child.fork_seq)
        if child.messages:
            if upto is None and made is None:
                return None  # nothing tells its copies from its own messages
            count = next((i for i, (seq, when) in enumerate(zip(child.seqs, child.times,
                                                                strict=True))
                          if (upto is not None and seq > upto) or _later(when, made)),
                         len(child.seqs))
            return _transcript(parent, stem, child.messages[:count], child.times[:count],
                               copied_by=child.id) if count else None
        child = children.get(child.id)
    return None


def _later(when: float | None, than: float | None) -> bool:
    return when is not None and than is not None and when > than


def _read_agent_log(file: str, fmt: str, max_bytes: int | None, repair: Utf8Repair,
                    data: bytes | None = None) -> AgentLog:
    """An agent's transcript: the file, or ``data`` read from stdin or a pipe."""
    from refold.messages.agent_logs import describe_skipped
    from refold.messages.load import load_agent_log

    name = "<stdin>" if file == "-" else file
    found = load_agent_log(name, fmt, max_bytes=max_bytes, repair=repair, data=data)
    left_out = describe_skipped(Counter(found.skipped))
    if left_out:  # the agent's bookkeeping, not turns its model saw: said, not hidden
        click.echo(f"{name}: read as a {AGENT_NAMES[fmt]} transcript; left out "
                   f"{left_out}", err=True)
    return found


def _session_key(fmt: str, native_id: str | None) -> str | None:
    """The session an agent's conversation id names (the same conversation, however much it
    grew: the same session)."""
    if not native_id:
        return None
    import hashlib

    return hashlib.sha256(f"{fmt}:{native_id}".encode("utf-8", "surrogatepass")
                          ).hexdigest()[:32]


# -- a session's recorded system prompt in an export -------------------------------------------

def prompt_text(message: Message) -> str | None:
    """A system message's text (what a recorded system prompt exports as); None for another."""
    content = message.get("content")
    return content if message.get("role") == "system" and isinstance(content, str) else None


def without_recorded_prompt(store: Store, session_id: str,
                            messages: list[Message]) -> list[Message]:
    """``messages`` without its first, a system message, when that is the prompt recorded for
    the session (an event) and none of its rows (they do not open with a system message):
    its export imported back, which stored the prompt again as a row, or, with ``--session``,
    as another transcript after the whole history. ``messages`` itself otherwise."""
    text = prompt_text(messages[0]) if messages else None
    if text is None:
        return messages
    first = store.get_messages(session_id, limit=1)
    if first and first[0].role == "system":
        return messages
    recorded = {e.payload.get("text") for e in store.list_events(session_id, "system_prompt")}
    return messages[1:] if text in recorded else messages


def record_prompts(store: Store, session_id: str, prompts: tuple[str, ...]) -> None:
    """A JSON export's recorded system prompts, recorded for the session it imported into as
    they were there, once: nothing when its own prompts end with them (imported back), the
    newer ones when they start with its own, else the export's latest when it is not the
    session's latest."""
    recorded = [str(e.payload.get("text")) for e in store.list_events(session_id, "system_prompt")]
    wanted = list(prompts)
    if not wanted or recorded[-len(wanted):] == wanted:
        return
    new = wanted[len(recorded):] if wanted[:len(recorded)] == recorded else \
        [wanted[-1]] if wanted[-1] != recorded[-1] else []
    for text in new:
        store.append_event(session_id, "system_prompt", {"text": text})
