"""``ReferenceExpander``: a user message's ``@`` references → the message with its context.

The expanded message is the text as typed (the references stay where the user put them), then
a "Referenced sessions" block (``@session``, 20% of the window shared by all of them), then an
"Attached context" block (the local kinds). Local references are off unless the expander has a
root (``local_root``): the proxy never reads its own disk for a remote client unless
``serve --allow-local-refs DIR`` says so.

Budget of the attached context (Hermes' limits): a hard limit of 50% of the window — a block
that would pass it is cut to what is left (with a warning), and once it is spent later blocks
are dropped (with a warning) — and a soft limit of 25%, past which a warning says so. Every
refusal and every cut is a warning in ``Expansion.warnings``; nothing is dropped silently.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from refold._records import dataclass, field
from refold.errors import InvalidInput, RefoldError
from refold.messages.model import Message
from refold.messages.validate import repair_text
from refold.references.budget import (
    ATTACH_HARD_SHARE,
    ATTACH_SOFT_SHARE,
    SESSION_SHARE,
    CountFn,
    cut_to,
    default_count,
)
from refold.references.local import LocalReferences
from refold.references.parse import Reference, parse_references
from refold.references.paths import PathGuard
from refold.references.sessions import SessionReferences
from refold.references.sources import FileReader, GitRunner, LocalFiles, LocalGit, UrlFetcher
from refold.references.spill import SpillStore

ATTACHED_HEADER = "--- Attached context ---"
CUT_MARKER = "[… cut to fit the attachment limit]"
MIN_BLOCK = 100  # tokens: less room than this drops a block instead of attaching a stub
SLACK = 8  # tokens kept free per block: a join can count a little more than its parts


@dataclass(frozen=True)
class Attached:
    """One reference and what became of it (``status``: attached, cut, refused)."""

    raw: str
    kind: str
    status: str
    tokens: int = 0
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"reference": self.raw, "kind": self.kind, "status": self.status,
                "tokens": self.tokens, **({"reason": self.reason} if self.reason else {})}


@dataclass(frozen=True)
class Expansion:
    message: str
    original: str
    references: list[Attached] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    tokens: int = 0  # what the blocks added

    @property
    def changed(self) -> bool:
        return self.message != self.original

    def to_dict(self) -> dict[str, Any]:
        return {"message": self.message, "original": self.original, "tokens": self.tokens,
                "references": [a.to_dict() for a in self.references],
                "warnings": list(self.warnings)}


class ReferenceExpander:
    """Expands references for one owner; ``local_root=None`` turns the local kinds off."""

    def __init__(self, *, sessions: SessionReferences | None = None,
                 local_root: str | os.PathLike[str] | None = None,
                 deny_roots: Iterable[str | os.PathLike[str]] = (),
                 home: str | os.PathLike[str] | None = None,
                 files: FileReader | None = None, git: GitRunner | None = None,
                 url_fetcher: UrlFetcher | None = None,
                 count: CountFn = default_count) -> None:
        self.sessions = sessions
        self.count = count
        self.local: LocalReferences | None = None
        if local_root is not None:
            guard = PathGuard(local_root, home=home, deny_roots=deny_roots)
            self.local = LocalReferences(guard, files or LocalFiles(), git or LocalGit(),
                                         url_fetcher)

    @property
    def spill(self) -> SpillStore | None:
        """Where ``@session`` keeps full texts (for ``session_search`` mode=spill)."""
        return self.sessions.spill if self.sessions is not None else None

    def expand(self, text: str, *, context_length: int,
               current_session_id: str | None = None) -> Expansion:
        """``text`` with its references resolved (unchanged when it has none)."""
        if context_length <= 0:
            raise InvalidInput("context_length must be positive")
        # a lone surrogate (JSON allows "\ud800") names no file or session, and could not be
        # encoded where paths and counts need UTF-8: references are read from a repaired copy;
        # the message itself goes on as sent
        refs = parse_references(repair_text(text))
        if not refs:
            return Expansion(text, text)
        report: list[Attached] = []
        warnings: list[str] = []
        blocks: list[str] = []
        added = 0
        session_refs = [r for r in refs if r.kind == "session"]
        if session_refs:
            block = self._sessions(session_refs, context_length, current_session_id,
                                   report, warnings)
            if block:
                blocks.append(block)
                added += self.count(block)
        local = [r for r in refs if r.is_local]
        if local:
            block, tokens = self._attach(local, context_length, report, warnings)
            if block:
                blocks.append(block)
                added += tokens
        message = "\n\n".join([text, *blocks]) if blocks else text
        return Expansion(message, text, report, warnings, added)

    # -- @session ------------------------------------------------------------------------------
    def _sessions(self, refs: list[Reference], context_length: int, current: str | None,
                  report: list[Attached], warnings: list[str]) -> str:
        if self.sessions is None:
            for ref in refs:
                _refuse(ref, "session references are not available here", report, warnings)
            return ""
        budget = int(context_length * SESSION_SHARE)
        block = self.sessions.render(refs, budget, current_session_id=current)
        warnings.extend(block.warnings)
        for ref in refs:
            mine = [w for w in block.warnings if w.startswith(ref.raw + ":")]
            status = "refused" if any("unknown" in w or "current" in w for w in mine) else \
                "cut" if mine else "attached"
            report.append(Attached(ref.raw, ref.kind, status,
                                   reason=mine[0].split(": ", 1)[1] if mine else ""))
        return block.text

    # -- local kinds ---------------------------------------------------------------------------
    def _attach(self, refs: list[Reference], context_length: int, report: list[Attached],
                warnings: list[str]) -> tuple[str, int]:
        """The block and its size; each body is counted once or twice (a cut), never more:
        counting is the expensive part of a big file."""
        hard = max(1, int(context_length * ATTACH_HARD_SHARE))
        soft = max(1, int(context_length * ATTACH_SOFT_SHARE))
        used = self.count(ATTACHED_HEADER)
        parts: list[str] = []
        for ref in refs:
            resolved = self._resolve(ref, report, warnings)
            if resolved is None:
                continue
            label, body = resolved
            head = f"{ref.raw} ({label})"
            # counts are not additive across joins: keep a little slack, and room for the marker
            room = hard - used - self.count(head) - self.count(CUT_MARKER) - SLACK
            if room < MIN_BLOCK:
                _refuse(ref, f"dropped: the {hard}-token attachment limit (50% of the window) "
                             "is spent", report, warnings, status="cut")
                continue
            total = self.count(body)
            kept, was_cut = cut_to(body, room, self.count, total=total)
            size = total
            if was_cut:
                kept = _close_fence(kept) + "\n" + CUT_MARKER
                size = self.count(kept)
                warnings.append(f"{ref.raw}: cut from {total} to about {size} tokens "
                                f"(attachments may use {hard} tokens, 50% of the window)")
            part = f"{head}\n{kept}"
            tokens = self.count(head) + size + SLACK // 2
            used += tokens
            parts.append(part)
            report.append(Attached(ref.raw, ref.kind, "cut" if was_cut else "attached", tokens))
        if not parts:
            return "", 0
        if used > soft:
            warnings.append(f"attached context is {used} tokens, over the soft limit of {soft} "
                            "(25% of the window)")
        return ATTACHED_HEADER + "\n\n" + "\n\n".join(parts), used

    def _resolve(self, ref: Reference, report: list[Attached],
                 warnings: list[str]) -> tuple[str, str] | None:
        if self.local is None:
            _refuse(ref, "refused: local references are off here (the proxy needs "
                         "serve --allow-local-refs DIR)", report, warnings)
            return None
        try:
            return self.local.resolve(ref)
        except RefoldError as exc:
            _refuse(ref, exc.message, report, warnings)
        except OSError as exc:
            _refuse(ref, f"cannot read: {exc.strerror or exc}", report, warnings)
        return None


def _refuse(ref: Reference, reason: str, report: list[Attached], warnings: list[str], *,
            status: str = "refused") -> None:
    report.append(Attached(ref.raw, ref.kind, status, reason=reason))
    warnings.append(f"{ref.raw}: {reason}")


def _close_fence(text: str) -> str:
    """A cut inside a fenced block gets its closing fence back."""
    return text + "\n```" if text.count("```") % 2 else text


def expand_message(expander: ReferenceExpander, message: Message, *, context_length: int,
                   current_session_id: str | None = None) -> tuple[Message, Expansion | None]:
    """A user message with its references expanded (text content or text parts); other roles
    and messages without references come back as they are, with None."""
    if message.get("role") != "user":
        return message, None
    content = message.get("content")
    if isinstance(content, str):
        expansion = expander.expand(content, context_length=context_length,
                                    current_session_id=current_session_id)
        if not expansion.references:
            return message, None
        return {**message, "content": expansion.message}, expansion
    if isinstance(content, list):
        text = "\n".join(p.get("text", "") for p in content
                         if isinstance(p, dict) and p.get("type") == "text")
        expansion = expander.expand(text, context_length=context_length,
                                    current_session_id=current_session_id)
        if not expansion.references or not expansion.changed:
            return message, expansion if expansion.references else None
        extra = expansion.message[len(text):].lstrip("\n")
        return {**message, "content": [*content, {"type": "text", "text": extra}]}, expansion
    return message, None


def local_expander(*, store: Any = None, owner: str = "", cwd: str | os.PathLike[str] | None,
                   spill_dir: Path | None = None, deny_roots: Iterable[Path] = (),
                   url_fetcher: UrlFetcher | None = None,
                   count: Callable[[str], int] = default_count,
                   aliases: Callable[[str], str] | None = None) -> ReferenceExpander:
    """The usual wiring: ``@session`` over ``store`` (spilling under ``spill_dir``) for
    ``owner``, local kinds under ``cwd`` (None: off), refold's data directory denied."""
    sessions = None
    if store is not None:
        spill = SpillStore(spill_dir, owner=owner) if spill_dir is not None else None
        sessions = SessionReferences(store, owner=owner, spill=spill, count=count,
                                     aliases=aliases)
    return ReferenceExpander(sessions=sessions, local_root=cwd, deny_roots=deny_roots,
                             url_fetcher=url_fetcher, count=count)


__all__ = ["ATTACHED_HEADER", "Attached", "Expansion", "ReferenceExpander", "expand_message",
           "local_expander"]
