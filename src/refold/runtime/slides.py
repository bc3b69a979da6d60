"""``WindowSlides``: a runtime's handling of a client's sliding window (``refold.runtime.window``).

A client that trims what it sends (its system message and its last N messages) sends a history
that starts a little later every turn. The runtime's full path (``SessionRuntime._sync_history``)
places such a window once — ``slide``: the session (or a session of its family) whose tail the
window re-sends, found in the store, the window's rest appended after it. Every later window of
the same client usually *slides on* from the one stored last: that window without its first
messages, then new ones — ``sync_known`` appends only the new ones after the known tip (checked
in the write transaction) and keeps the view with its first rows dropped, without reading the
tail again, also in light mode; ``slides_on`` tells the proxy, in memory, which runtime a request
that names no session slides on. Anything in doubt goes back to the full path.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from refold.messages.model import Message
from refold.runtime.branches import Diverge, branch_at_stretch
from refold.runtime.window import WindowMatch, match_tail, opens_a_member, place_window
from refold.store.base import StoredMessage

if TYPE_CHECKING:
    from refold.runtime.session import SessionRuntime

log = logging.getLogger("refold.runtime.session")


class WindowSlides:
    """The sliding-window part of one ``SessionRuntime`` (called under its lock, except
    ``slides_on``, which takes it without waiting)."""

    def __init__(self, rt: SessionRuntime) -> None:
        self._rt = rt

    # -- the full path's placement -----------------------------------------------------------
    def slide(self, window: list[Message], system: str | None,
              members: list[str], diverge: Diverge = "branch") -> list[StoredMessage] | None:
        """Store ``window`` (a history's messages after its system head) as a sliding window
        of this session, or of another session of its family (``members``: a named session's
        side calls leave the runtime on their branch), when it is one (``place_window``: this
        session first, then the family's first one, then the others, newest first): the rows
        appended — the runtime then follows that session — or None (it is none; nothing
        stored).

        With ``diverge="rewind"`` (a session the client named), a window that re-sends an
        older stretch of one of them, not its tail — the client regenerated an answer or edited
        its last messages — rewinds the rows after that stretch reversibly and appends the
        window's rest, as an edit of a whole history does. (It was taken for another
        conversation under the name, as it shares no start with it, and forked a branch
        holding a copy of the window at each regenerate.) Unnamed ("branch"), it continues in a
        branch ending with that stretch (``branch_at_stretch``); no tail is ever rewound."""
        from refold.compaction.session import recorded_system_prompt  # lazy, as in ContextOps

        rt = self._rt
        store = rt.store
        current = rt.session_id

        def prompt_of(session_id: str) -> str | None:
            return rt._system_prompt if session_id == current else \
                recorded_system_prompt(store, session_id)

        order = list(dict.fromkeys([current, *members[:1], *reversed(members[1:])]))
        # (with no session named, an older stretch is looked for only for a history that does
        # not open as a member does: one that does is an ordinary history's edit, placed as one)
        older = diverge == "rewind" or not opens_a_member(store, window, order)
        found = place_window(store, order, prompt_of, window, system, older=older)
        if found is None:
            return None
        session_id, match, rewind_from = found
        slid: WindowMatch | None = match
        if rewind_from is not None and diverge == "branch":
            # a regenerate, an edit, the same window sent again: never a rewind of that
            # conversation's tail, nor an unlinked copy of the window (found twice by search)
            session_id = branch_at_stretch(store, session_id, match)
            slid = match_tail(store, session_id, window)
        if session_id != current:
            rt._move_to(session_id)
        if rewind_from is not None and diverge == "rewind":
            record = store.rewind(session_id, rewind_from, any_role=True)
            log.info("session %s: the window re-sends messages %d.. and not the %d after "
                     "them (rewind %s; undo restores them)", session_id, match.start_seq,
                     record.count, record.id)
        return self._slide_into(window, slid)

    def _slide_into(self, window: list[Message],
                    match: WindowMatch | None) -> list[StoredMessage] | None:
        """Append what ``window`` adds after the tail ``match`` found (see ``slide``)."""
        rt = self._rt
        for _ in range(3):  # another writer moving the tail in between: read it again
            if match is None:
                return None
            suffix = match.conversation[match.overlap:]
            forms = [match.sent.get(i, m) for i, m in enumerate(match.conversation)]
            result = rt.mirror.slide(match.start_seq, forms, suffix,
                                     rt.ops.message_counts(suffix), match.tip)
            if result is not None:
                self._slid(match.start_seq, match.overlap, len(suffix))
                return result.appended
            match = match_tail(rt.store, rt.session_id, window)
        return None

    # -- a window that slides on -------------------------------------------------------------
    def slides_on(self, history: list[Message]) -> bool:
        """Does ``history`` slide on the window this runtime's client sent last (``sync_known``
        would take it)? For the proxy's routing of a request that names no session; in
        memory, never waiting: a runtime busy in another thread says False."""
        rt = self._rt
        if rt.mirror.window is None or rt.mirror.chain is None:
            return False
        if not rt._lock.acquire(blocking=False):
            return False
        try:
            return self._known(history) is not None
        finally:
            rt._lock.release()

    def _known(self, history: list[Message]
               ) -> tuple[int, str | None, list[Message], list[Message]] | None:
        """``SessionMirror.known_window`` of ``history`` under the session's system prompt or
        none (the full path compares them): (the messages dropped, the system text, the new
        messages, the stretch re-sent), or None."""
        rt = self._rt
        found = rt.mirror.known_window(history, rt.ops.validate)
        if found is None:
            return None
        drop, lead, suffix, stretch = found
        system = rt._system_of(lead)
        if system is not None and system != rt._system_prompt:
            return None
        return drop, system, suffix, stretch

    def sync_known(self, history: list[Message]) -> bool:
        """The fast path of a window that slid on since the full path placed it: only the new
        messages are validated, counted, hashed and appended, after the stored tip (checked in
        the write transaction), and the view starts at the first row the window still holds
        (kept, not read again). What ``slide`` would do with it — the same stretch, the same
        append — without reading and matching the session's tail again. False: use the full
        path (nothing was stored)."""
        rt = self._rt
        found = self._known(history)
        start, chain = rt.mirror.window, rt.mirror.chain
        if found is None or start is None or chain is None:
            return False
        drop, system, suffix, stretch = found
        rt.new_messages_fit(suffix)
        rows = rt.store.get_messages(rt.session_id, start_seq=start, limit=drop + 1)
        if len(rows) != drop + 1 or rows[drop].message.get("role") != stretch[0].get("role"):
            return False  # (the stored rows are not the known window: read everything)
        result = rt.mirror.slide(rows[drop].seq, stretch + suffix, suffix,
                                 rt.ops.message_counts(suffix), chain.tip, keep_view=True)
        if result is None:
            return False  # another writer moved the session: the full path places it
        self._slid(rows[drop].seq, len(stretch), len(suffix))
        rt._count_turns([s.message for s in result.appended])
        rt._note_system_prompt(system)
        rt._system_prompt = system
        return True

    def _slid(self, start: int, resent: int, new: int) -> None:
        self._rt.precompactor.discard()  # planned from the view before the slide
        log.info("session %s: the request is a sliding window from message %d (%d messages "
                 "re-sent, %d new)", self._rt.session_id, start, resent, new)
