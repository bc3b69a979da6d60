"""The lineage links of a refold JSON export imported (``refold import``, ``refold.cli.ledger``),
and the line an import's report prints.

A session of the export that continues another there (``parent_session_id``, ``link_kind``)
continues it here too when that session is here (imported before it: an export lists the
root first); when it is not, the session is imported without the link and the report says
so. A fork's parent in a ``--lineage`` export holds no messages of its own there (its fork
holds copies of them): it is imported as those copies (``refold.cli.transcripts._stand_in``),
so the fork keeps its link; one stored already is left as it is.
"""

from __future__ import annotations

from typing import Any

import click

from refold._records import replace
from refold.cli.terminal import safe_text
from refold.cli.transcripts import Transcript
from refold.errors import NotFound
from refold.messages.model import chain_identities
from refold.store import Store
from refold.store.base import SessionDraft


def linked_draft(store: Store, draft: SessionDraft | None, read: Transcript, session_id: str
                 ) -> tuple[SessionDraft | None, dict[str, Any] | None]:
    """The session to create (``draft``; None: ``session_id`` is stored) linked to the one
    ``read`` continues in its export (a rotation, a fork or branch of it) when that one is
    here; second, when the link is not kept, what the report says of it (None: kept, or
    there is none)."""
    if not read.parent:
        return draft, None
    link = read.link or "compaction"
    if draft is None:  # stored: its link is what it is (said when it is the export's)
        if session_id != read.key:
            return None, None  # --session: another session, the transcript added to it
        stored = store.get_session(session_id).parent_session_id
        return None, None if stored == read.parent else \
            {"parent": read.parent, "link": link, "why": "stored", "stored_parent": stored}
    try:
        store.get_session(read.parent)
    except NotFound:
        return draft, {"parent": read.parent, "link": link, "why": "missing"}
    # kept: resume follows it, search shows a message its rotation carried forward once
    return replace(draft, parent_session_id=read.parent, link_kind=link), None


def held_stand_in(store: Store, read: Transcript, session_id: str) -> dict[str, Any]:
    """The report of a fork's parent stood in for by its fork's copies (``read``) that is
    stored here already: left as it is (the export holds only the copies; synced as its
    whole history, they would rewind what it holds after them); ``skipped``: how many of
    them it holds, from its start."""
    identities = chain_identities(read.messages)
    rows = store.get_messages(session_id, limit=len(identities))
    held = next((i for i, (row, identity) in enumerate(zip(rows, identities, strict=False))
                 if row.identity != identity), min(len(rows), len(identities)))
    report: dict[str, Any] = {"session_id": session_id,
                              "title": store.get_session(session_id).title,
                              "appended": 0, "skipped": held, "rewound": 0,
                              "copied_by": read.copied_by}
    if held < len(identities):
        report["left_as_is"] = len(identities) - held
    return report


def _link_note(report: dict[str, Any]) -> str:
    """What the report says of an export's link not kept (``linked_draft``)."""
    note = report["not_linked"]
    parent, link = note["parent"], note["link"]
    if note["why"] == "missing":
        return (f"; not linked to its parent {parent} ({link}): that session is not here, "
                "nor imported from this file (import it first)")
    now = note.get("stored_parent")
    return (f"; the export links it to {parent} ({link}), but it was stored before "
            + (f"as a child of {now}" if now else "without a parent") + " and is left so "
            "(to link it: `refold sessions rm` it, then import its parent and it again)")


def render_import(report: dict[str, Any]) -> None:
    title = f" ({safe_text(report['title'])})" if report["title"] else ""
    line = (f"imported {report['appended']} message(s) into session "
            f"{report['session_id']}{title}; {report['skipped']} already stored")
    if report.get("kept_by_serve"):
        line = (f"imported nothing: session {report['session_id']}{title} holds all "
                f"{report['skipped']} message(s) already (refold serve stored them)")
    if report.get("copied_by"):
        line += (f"; the export holds of it only the messages its fork or branch "
                 f"{report['copied_by']} copied")
        if report.get("left_as_is"):
            line += f" ({report['left_as_is']} of them not its own here: it is left as it is)"
    if report.get("not_linked"):
        line += _link_note(report)
    if report.get("added_after"):
        line += (f"; added after the session's {report['added_after']} message(s) (another "
                 "transcript)")
    if report.get("resumes"):
        line += f"; it resumes session {report['resumes']} (a branch of it)"
    if report.get("stored_in_resumed"):
        line += (f"; {report['stored_in_resumed']} of them stored as the session(s) it "
                 "resumes (not stored yet)")
    if report.get("title_not_used"):
        line += (f"; --title {safe_text(report['title_not_used'])!r} not used: the transcript "
                 "is that session's (rename it with refold sessions rename)")
    if report["rewound"]:
        line += f"; {report['rewound']} stored message(s) rewound (the history diverged)"
    if report.get("restored"):
        line += (f"; {report['restored']} message(s) a rewind held brought back (the "
                 "transcript has them)")
    click.echo(line)
