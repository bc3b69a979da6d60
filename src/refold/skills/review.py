"""Skill review: after enough tool work, propose a skill from what the user corrected.

A counter per session adds each finished turn's tool iterations; when it reaches
``interval`` (``skills_creation_nudge_interval``, default 15; 0 turns review off) it resets and
a review runs on the engine's worker thread, after the reply — a turn never waits for it.

The reviewer here is deterministic: it extracts the user's corrections ("no, use …",
"don't …", "actually …", "instead of …") from the recent messages; two or more make a skill
"lessons-<session title>" (created, or patched with the new corrections), written with
``origin="review"`` through a library whose approval mode is ``stage`` unless writes are
blocked, so a person approves it first (``refold skills pending`` / ``approve``). It writes
only skills: it never touches the session ledger or memory.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence

from refold.errors import RefoldError
from refold.messages.model import Message, content_text
from refold.skills.library import SkillLibrary, SkillWrite

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 15
MIN_CORRECTIONS = 2
HEADING = "## Corrections\n"
_CORRECTION = re.compile(
    r"^\s*(?:no\b[,.!]?|nope\b|wrong\b|that'?s (?:not|wrong)|don'?t\b|do not\b|stop\b|"
    r"never\b|actually\b|instead\b|please don'?t\b|you should(?:n'?t)?\b|i (?:said|told you)\b)"
    r"|\binstead of\b|\bnot like that\b", re.IGNORECASE)


def extract_corrections(messages: Sequence[Message]) -> list[str]:
    """The user messages that correct the agent, each as one trimmed line, in order, once."""
    found: dict[str, None] = {}
    for message in messages:
        if message.get("role") != "user":
            continue
        text = " ".join(content_text(message).split())
        if text and len(text) <= 400 and _CORRECTION.search(text):
            found.setdefault(text, None)
    return list(found)


def _slug(title: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:48].strip("-")
    return f"lessons-{slug}" if slug else "lessons"


MAX_COUNTED = 4096  # sessions whose tool iterations are counted at once (the oldest drop out)


class SkillReviewer:
    """Counts tool iterations per session and proposes skills when the interval is reached."""

    def __init__(self, library: SkillLibrary, *, interval: int = DEFAULT_INTERVAL) -> None:
        self.library = library
        self.interval = interval
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def due(self, session_id: str, tool_iterations: int) -> bool:
        """Count a finished turn; True when a review should run now (the counter resets)."""
        if self.interval <= 0:
            return False
        with self._lock:
            count = self._counts.pop(session_id, 0) + tool_iterations
            if count < self.interval:
                if count:  # a session with nothing counted keeps no entry (a proxy sees many)
                    self._counts[session_id] = count  # (re-inserted: the newest last)
                    while len(self._counts) > MAX_COUNTED:
                        del self._counts[next(iter(self._counts))]
                return False
            return True

    def review(self, title: str, messages: Sequence[Message]) -> SkillWrite | None:
        """Propose a skill (or a patch) from ``messages``; None when there is nothing to learn."""
        corrections = extract_corrections(messages)
        if len(corrections) < MIN_CORRECTIONS:
            return None
        name = _slug(title)
        try:
            existing = self.library.view(name)
        except RefoldError:
            existing = None
        if existing is None:
            body = (f"# Lessons from {title or 'a past session'}\n\nThe user corrected how "
                    "the work was done; follow these in similar tasks.\n\n" + HEADING
                    + "".join(f"- {c}\n" for c in corrections))
            return self.library.create(
                name, f"Corrections the user made while working on {title or 'a task'}; "
                      "read before similar work.", body, origin="review")
        new = [c for c in corrections if c not in existing.body]
        if not new or HEADING not in existing.body:
            return None
        return self.library.patch(name, HEADING, HEADING + "".join(f"- {c}\n" for c in new),
                                  origin="review")

    def run(self, load: Callable[[], tuple[str, Sequence[Message]]]) -> None:
        """The worker-thread job: never raises (review is best effort)."""
        try:
            result = self.review(*load())
            if result is not None:
                log.info("skill review: %s", result.message)
        except RefoldError as exc:
            log.info("skill review proposed nothing: %s", exc)
        except Exception:
            log.exception("skill review failed")


__all__ = ["DEFAULT_INTERVAL", "SkillReviewer", "extract_corrections"]
