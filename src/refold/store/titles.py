"""Session titles: sanitizing and lineage numbering ("name", "name #2", "name #3").

Pure functions shared by every backend; the backend only supplies the titles that exist.

Invariants:
- ``sanitize_title`` output has no control, format (zero-width, bidi) or surrogate characters
  (except the joiner inside an emoji sequence),
  no leading/trailing or repeated whitespace, and at most ``MAX_TITLE_LENGTH`` characters; CJK,
  emoji and other printable text are kept as they are.
- ``split_lineage_title("name #3") == ("name", 3)``; a title without a suffix is number 1.
- ``next_lineage_title`` never returns a title that is in ``existing``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Any

from refold.errors import InvalidInput

MAX_TITLE_LENGTH = 100

# Zero-width and invisible characters unicodedata does not all put in category Cf.
_INVISIBLE = frozenset("\u200b\u200c\u200d\u2060\ufeff\u180e\u00ad")
_SUFFIX = re.compile(r"^(?P<base>.*?) #(?P<n>[1-9][0-9]{0,8})$")


def _keep(char: str) -> bool:
    if char in _INVISIBLE:
        return False
    # Control chars became separators before this; format, surrogate, private and unassigned
    # characters are dropped.
    return unicodedata.category(char) not in ("Cc", "Cf", "Cs", "Co", "Cn")


def _emoji_joiner(text: str, index: int) -> bool:
    """A zero-width joiner inside an emoji sequence (👩‍💻) is part of the emoji: keep it."""
    if text[index] != "\u200d" or index == 0 or index + 1 >= len(text):
        return False
    before = unicodedata.category(text[index - 1])
    return before in ("So", "Sk", "Mn") and unicodedata.category(text[index + 1]) == "So"


def sanitize_title(raw: str | None) -> str | None:
    """Clean a user-supplied title; None or an all-blank title gives None.

    Control characters (tabs, newlines) count as whitespace; zero-width and other format
    characters are dropped; runs of whitespace collapse to one space; the result is cut to
    ``MAX_TITLE_LENGTH`` characters (without leaving a trailing space).
    """
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise InvalidInput(f"a session title must be text, not {type(raw).__name__}")
    # the usual title, printable ASCII, has no control or format character and a space is its
    # only whitespace: ``_kept`` would keep it as it is
    plain = raw.isascii() and raw.isprintable()
    text = (" ".join(raw.split()) if plain else _kept(raw))[:MAX_TITLE_LENGTH].rstrip()
    return text or None


def _kept(raw: str) -> str:
    """``raw`` with control characters as spaces, format characters dropped, and whitespace
    runs collapsed to one space."""
    chars: list[str] = []
    for index, char in enumerate(raw):
        if char.isspace() or unicodedata.category(char) == "Cc":
            chars.append(" ")
        elif _keep(char) or _emoji_joiner(raw, index):
            chars.append(char)
    return " ".join("".join(chars).split())


def split_lineage_title(title: str) -> tuple[str, int]:
    """``"name #3"`` → ``("name", 3)``; ``"name"`` → ``("name", 1)``."""
    match = _SUFFIX.match(title)
    if match and match.group("base"):
        return match.group("base"), int(match.group("n"))
    return title, 1


def lineage_number(title: str, base: str) -> int | None:
    """The number of ``title`` within ``base``'s lineage, or None if it is not part of it."""
    if title == base:
        return 1
    found_base, number = split_lineage_title(title)
    if found_base == base and number > 1:
        return number
    return None


def next_lineage_title(title: str, existing: Iterable[str]) -> str:
    """The next free title along ``title``'s lineage: ``"name #N"`` with N one past the highest.

    ``existing`` should hold at least every title equal to the base or starting with
    ``base + " #"`` (backends fetch just those). A base that is not taken yet is returned as is.
    """
    base, _ = split_lineage_title(title)
    numbers = [n for n in (lineage_number(t, base) for t in existing) if n is not None]
    if not numbers:
        return base
    candidate = f"{base} #{max(numbers) + 1}"
    if len(candidate) > MAX_TITLE_LENGTH:
        suffix = candidate[len(base):]
        candidate = base[: MAX_TITLE_LENGTH - len(suffix)].rstrip() + suffix
    return candidate


def latest_lineage_title(base: str, existing: Iterable[str]) -> str | None:
    """Among ``existing``, the title with the highest number in ``base``'s lineage."""
    best: tuple[int, str] | None = None
    for title in existing:
        number = lineage_number(title, base)
        if number is not None and (best is None or number > best[0]):
            best = (number, title)
    return best[1] if best else None


def like_escape(text: str, escape: str = "\\") -> str:
    """Escape LIKE wildcards (``%``, ``_``) and the escape char itself, for ``ESCAPE '\\'``."""
    return (text.replace(escape, escape * 2).replace("%", escape + "%")
            .replace("_", escape + "_"))


def untagged_title(title: str, owner: str) -> str | None:
    """The title without the tenant tag older versions added (``"name @8a197f6f"``, and its
    lineage ``"name @8a197f6f #2"``), or None when ``title`` carries no tag of ``owner``.

    Ownership is a column now (titles are unique per owner); this undoes the old suffix.
    """
    if not owner.startswith("key-"):
        return None
    tag = " @" + owner.removeprefix("key-")[:8]
    base, number = split_lineage_title(title)
    if not base.endswith(tag) or len(base) == len(tag):
        return None
    name = base[: -len(tag)]
    return name if number == 1 and not title.endswith(" #1") else f"{name} #{number}"


def owner_of_title(ref: str, owners: Iterable[str]) -> str | None:
    """Whose session a title names when no owner was given (the operator's CLI): the only
    owner that has it, or the local owner ``""`` when it is one of them; several tenants and
    no local session is ``AmbiguousReference`` (the operator passes ``--owner``)."""
    found = sorted(set(owners))
    if not found:
        return None
    if len(found) == 1:
        return found[0]
    if "" in found:
        return ""
    from refold.errors import AmbiguousReference

    raise AmbiguousReference(f"the title {ref!r} is used by {len(found)} tenants: "
                             + ", ".join(found), candidates=found,
                             hint="pass --owner OWNER (or use the session id)")


def titled_session(title: str, rows: Iterable[tuple[str, str]], *,
                   newest: bool = True) -> tuple[str, str] | None:
    """Which (owner, title) a title reference opens, given the ``(owner, title)`` rows of its
    lineage: the session titled exactly so first (never a ``#N`` branch that took its
    lineage's next number); a bare name without one means the lineage's newest, unless not
    ``newest`` (a command that deletes or appends: a ``#N`` title is only its lineage's by
    its name, and may be an unrelated import's). None: no match. Both stores'
    ``resolve_session`` use it."""
    rows = list(rows)
    exact = owner_of_title(title, (o for o, t in rows if t == title))
    if exact is not None:
        return exact, title
    if not newest:
        return None
    whose = owner_of_title(title, (o for o, t in rows if lineage_number(t, title)))
    if whose is None:
        return None
    latest = latest_lineage_title(title, (t for o, t in rows if o == whose))
    return (whose, latest) if latest is not None else None


def untag_titles(conn: Any, mark: str) -> None:
    """Migration 5 on either store (``mark``: its parameter placeholder, ``?`` or ``%s``):
    titles older versions tagged with their tenant ("name @8a197f6f") lose the tag, unless
    the owner already has a session with the plain title (then the tagged one stays)."""
    rows = conn.execute("SELECT id, owner, title FROM sessions "
                        "WHERE owner <> '' AND title LIKE '% @%'").fetchall()
    for session_id, owner, title in rows:
        plain = untagged_title(title, owner)
        if plain is None:
            continue
        taken = conn.execute(f"SELECT 1 FROM sessions WHERE owner = {mark} AND title = {mark}",
                             (owner, plain)).fetchone()
        if taken is None:
            conn.execute(f"UPDATE sessions SET title = {mark} WHERE id = {mark}",
                         (plain, session_id))


def title_shadows_id(ref: str, titled: Any, prefixed_ids: list[str]) -> None:
    """AmbiguousReference when ``ref``, the title of session ``titled``, is also the start of
    another session's id: a user typing an id as ``sessions list`` shows it got the session
    titled so instead (an import of ``<id>.jsonl`` is titled by its file's name), and
    ``sessions rm`` deleted that one."""
    from refold.errors import AmbiguousReference

    others = [i for i in prefixed_ids if i != titled.id]
    if others:
        # the advice names whole ids: the title itself still resolves to this same error, so
        # "rename the session with that title" could not be done by its title
        other = (f"`refold sessions show {others[0]}` opens the session whose id starts so"
                 if len(others) == 1 else
                 "several sessions' ids start so (`refold sessions list --json` shows "
                 "them)")
        raise AmbiguousReference(
            f"{ref!r} is the title of session {titled.id[:12]} and the start of session "
            f"{others[0][:12]}'s id", candidates=[titled.id, *others[:19]],
            hint=f"give the whole id: {other}; `refold sessions rename {titled.id} NEW_TITLE` "
                 f"gives the session titled {ref!r} a title that is no id's start")


ID_PREFIX_CHARS = 4  # a title this long or longer, all hex digits, reads as an id prefix
_HEX = re.compile(r"[0-9a-fA-F]+")


def reads_as_id_prefix(title: str) -> bool:
    """Whether ``title`` could be taken for the start of a session id (4+ hex digits)."""
    return len(title) >= ID_PREFIX_CHARS and _HEX.fullmatch(title) is not None


def refuse_id_prefix_title(title: str, session_id: str, prefixed_ids: Iterable[str]) -> None:
    """InvalidInput when ``title`` (sanitized), given to session ``session_id``, is the start
    of another session's id (``prefixed_ids``: the ids starting with ``title``, as the
    backends' ``_prefixed_ids`` read them): that title would shadow the id prefix — ``show``,
    ``rm`` and ``rename`` by it are refused as ambiguous (``title_shadows_id``). For renames
    (an import titled by its file's name, ``<id>.jsonl``, keeps that name)."""
    if not reads_as_id_prefix(title):
        return
    lowered = title.lower()
    others = [i for i in prefixed_ids if i != session_id and i.lower().startswith(lowered)]
    if others:
        raise InvalidInput(f"the title {title!r} is the start of session {others[0][:12]}'s id",
                           hint="choose a title that is not an id prefix (add a word or a "
                                "non-hex character)")


def refuse_title_shadowing_an_id(store: Any, title: str | None) -> None:
    """InvalidInput when ``title``, asked for a new session (``fork --title``, ``import
    --title``), is the start of a stored session's id: ``show``/``rm``/``rename`` by it would
    be refused as ambiguous (a rename refuses it in the store). Titles refold picks itself, and
    a proxy's ``X-Refold-Session`` names (never resolved by id prefix), are not checked."""
    clean = sanitize_title(title)
    if clean is None or not reads_as_id_prefix(clean):
        return
    from refold.errors import AmbiguousReference, NotFound

    try:
        found = store.resolve_session(clean.lower(), prefix=True)
    except AmbiguousReference:
        found = None  # several sessions' ids start so
    except NotFound:
        return
    if found is None or found.id.lower().startswith(clean.lower()):
        raise InvalidInput(f"the title {clean!r} is the start of a session's id",
                           hint="choose a title that is not an id prefix (add a word or a "
                                "non-hex character)")
