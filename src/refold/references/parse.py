"""Finding ``@`` references in a user message: pure, no I/O.

Kinds: ``@session:REF``, ``@file:PATH`` (optionally ``:L1`` or ``:L1-L2``; a path with spaces in
backticks or quotes), ``@folder:DIR``, ``@diff``, ``@staged``, ``@git:REV`` and ``@url:URL``.

Rules that keep ordinary text ordinary:
- a reference starts at a word boundary: ``me@file:x`` (an e-mail-like word) and ``a/@diff``
  are not references;
- trailing sentence punctuation (``,.;!?``) and an unbalanced closing bracket are not part of
  the value, so "see @file:app.py." names ``app.py``;
- an unknown kind (``@user:bob``) is left alone — it is text, not an error.
"""

from __future__ import annotations

import re

from refold._records import dataclass

KINDS = ("session", "file", "folder", "diff", "staged", "git", "url")
LOCAL_KINDS = frozenset({"file", "folder", "diff", "staged", "git", "url"})

_QUOTED = r"(?:`[^`\n]+`|\"[^\"\n]+\"|'[^'\n]+')"
_PATTERN = re.compile(
    r"(?<![\w/@])@(?:(?P<bare>diff|staged)(?![\w:-])"
    rf"|(?P<kind>session|file|folder|git|url):(?P<value>{_QUOTED}(?::\d+(?:-\d+)?)?|\S+))")
_RANGE = re.compile(r"^(?P<path>.+?)(?::(?P<start>\d+)(?:-(?P<end>\d+))?)?$")
_TRAILING = ",.;!?"
_CLOSERS = {")": "(", "]": "[", "}": "{"}


@dataclass(frozen=True)
class Reference:
    """One reference as typed: ``raw`` is the exact text, ``start``/``end`` its span."""

    kind: str
    target: str
    raw: str
    start: int
    end: int
    line_start: int | None = None
    line_end: int | None = None

    @property
    def is_local(self) -> bool:
        """Reads the machine refold runs on (files, git, the network), not the archive."""
        return self.kind in LOCAL_KINDS


def parse_references(text: str) -> list[Reference]:
    """Every reference in ``text``, in order of appearance."""
    if "@" not in text:
        return []
    found: list[Reference] = []
    for match in _PATTERN.finditer(text):
        if match.group("bare"):
            kind = match.group("bare")
            found.append(Reference(kind, "", match.group(0), match.start(), match.end()))
            continue
        kind = match.group("kind")
        value = _trim(match.group("value"))
        if not value:
            continue
        end = match.start("value") + len(value)
        found.append(_reference(kind, value, text[match.start():end], match.start(), end))
    return found


def _reference(kind: str, value: str, raw: str, start: int, end: int) -> Reference:
    line_start = line_end = None
    if kind == "file":
        value, line_start, line_end = _line_range(value)
    return Reference(kind, _unquote(value), raw, start, end, line_start, line_end)


def _line_range(value: str) -> tuple[str, int | None, int | None]:
    """``path:10-20`` → (path, 10, 20); ``path:7`` → (path, 7, 7)."""
    if value[:1] in "`\"'":
        quote = value[0]
        close = value.find(quote, 1)
        path, rest = value[:close + 1], value[close + 1:]
        match = re.fullmatch(r":(\d+)(?:-(\d+))?", rest)
        if not match:
            return path, None, None
        first = int(match.group(1))
        return path, first, int(match.group(2) or first)
    match = _RANGE.match(value)
    if match is None or match.group("start") is None:
        return value, None, None
    first = int(match.group("start"))
    return match.group("path"), first, int(match.group("end") or first)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "`\"'":
        return value[1:-1]
    return value


def _trim(value: str) -> str:
    """Drop sentence punctuation and unbalanced closing brackets from the end."""
    if value[:1] in "`\"'":
        return value  # a quoted value is exact
    while value:
        if value in (".", "..") or value.endswith(("/.", "/..")):
            break  # a directory name ("@folder:.", "@file:../x" stays whole), not a full stop
        last = value[-1]
        if last in _TRAILING or (last in _CLOSERS and value.count(last) > value.count(_CLOSERS[last])):
            value = value[:-1]
        else:
            break
    return value


__all__ = ["KINDS", "LOCAL_KINDS", "Reference", "parse_references"]
