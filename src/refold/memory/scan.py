"""The memory safety scanner: prompt injection, role hijack, exfiltration, invisible unicode.

Memory enters the system prompt of every later session, so a poisoned entry is a persistent
injection. ``scan(text)`` returns a short reason ("prompt injection: ignore previous
instructions") or None. It runs on every write and on every load (snapshot rendering), and on
skills and LLM summaries too. A memory entry is also refused when it holds a literal credential
(``scan_entry``: a provider's token or key, a private key block, a password in a URL, the forms
of ``refold.compaction.secrets.credential_in``; and a password given in words, "the admin
password is hunter2", "password=hunter2", "密码是hunter2": a value after "=" that is not a
variable or a path, or one with a digit or a symbol after "is" / ":", the rule of
``refold.compaction.secrets.password_said``, which redaction shares): a key pasted into memory
would go to the provider with every request. It is refused too when it names a command that
destroys a machine or a database ("rm -rf /", mkfs or dd onto a disk, a fork bomb, DROP DATABASE,
a force-push to main) outside a negation: an entry is a standing instruction, and a note that
only tells of such a run ("we ran rm -rf / by mistake") is refused with it — the command is
not worth keeping in every prompt; scoped ones ("rm -rf build/") pass. Skills are held to
neither: their documents show example keys and disk tools.

How it looks at text (each view catches a different obfuscation):
- the raw text: invisible code points (zero-width, bidi overrides, tag characters); a zero-width
  joiner between two emoji is allowed, so family/profession emoji survive;
- ``plain``: NFKC (full-width letters), casefold, Cyrillic/Greek look-alikes mapped to Latin,
  runs of spaces collapsed — phrase patterns in English and Chinese;
- ``compact``: ``plain`` with leetspeak undone and every non-letter removed, forwards,
  reversed and rot13'd — catches "i g n o r e", "ign0re_prev1ous", "忽 略 之 前 的 指 令";
- ``nfkc``: NFKC and casefold without the look-alike mapping — patterns for other scripts
  (Russian, Korean, Arabic, Hindi…) that the mapping would garble;
- decoded base64, hex and percent-encoded runs are scanned like the text itself (one level
  deep).

Besides known phrasings, behaviour patterns ask what an entry would make the agent do (weaken
its own rules, obey third-party text, move secrets out, run remote code, deceive or work
against the user), pairing an action class with a target class. A negation earlier in the same
sentence, or an attack quoted by a note that refuses it, does not count.

The pattern tables live in ``refold.memory.scan_patterns``. Patterns anchor on attack
behaviour, not on single words: "ignore" alone, "curl", "ssh",
"$HOME" and ".env" are everyday developer vocabulary and pass. Exfiltration needs a network or
read verb together with a secret (a secret-named variable, a credential file, a private key).
The scanner never raises and bounds its work (``MAX_SCAN_CHARS``).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import functools
import re
import unicodedata
from collections.abc import Iterator
from urllib.parse import unquote

from refold.memory.scan_patterns import (
    _B64_RUN,
    _BEHAVIOUR,
    _COMPACT,
    _CONFUSABLES,
    _DEFENSIVE,
    _DESTRUCTIVE,
    _EXFIL,
    _GUARDED,
    _HEX_RUN,
    _I18N,
    _INVISIBLE,
    _LEET,
    _NEG,
    _NOT_NEGATION,
    _OPEN_QUOTE,
    _PCT_RUN,
    _PHRASES,
    _REPORTED,
    _REPORTED_IN,
    _SENTENCE_END,
    _Pattern,
)

MAX_SCAN_CHARS = 16_384  # ~7x the larger store limit; bounds worst-case regex time


def _emoji(ch: str) -> bool:
    cp = ord(ch)
    return cp >= 0x1F000 or 0x2600 <= cp <= 0x27BF or ch == "\ufe0f" or 0x1F3FB <= cp <= 0x1F3FF


def invisible_reason(text: str) -> str | None:
    """The first hidden or direction-changing code point, unless it is part of an emoji."""
    for i, ch in enumerate(text):
        cp = ord(ch)
        if 0xE0000 <= cp <= 0xE007F:
            if "\U0001F3F4" in text[max(0, i - 8): i]:  # subdivision flags (🏴 + tags)
                continue
            return f"invisible unicode: tag character U+{cp:04X}"
        name = _INVISIBLE.get(ch)
        if name is None:
            continue
        if ch == "\u200d" and 0 < i < len(text) - 1 and _emoji(text[i - 1]) and _emoji(text[i + 1]):
            continue
        return f"invisible unicode: U+{cp:04X} ({name})"
    return None


def _plain(text: str) -> str:
    folded = unicodedata.normalize("NFKC", text).casefold().translate(_CONFUSABLES)
    folded = "".join(ch for ch in folded if ch not in _INVISIBLE)
    return re.sub(r"[ \t\u3000]+", " ", folded)


def _compact(plain: str) -> str:
    return re.sub(r"[\W_\d]+", "", plain.translate(_LEET))


def _decoded_payloads(text: str) -> Iterator[str]:
    """Printable text hidden in base64, hex or percent-encoding (one level)."""
    for match in _B64_RUN.finditer(text):
        chunk = match.group(0)
        try:
            raw = base64.b64decode(chunk + "=" * (-len(chunk) % 4), altchars=b"-_"
                                   if ("-" in chunk or "_" in chunk) else None)
            decoded = raw.decode("utf-8")
        except (binascii.Error, ValueError, UnicodeDecodeError):
            continue
        printable = sum(ch.isprintable() or ch.isspace() for ch in decoded)
        if decoded and printable >= 0.9 * len(decoded):
            yield decoded
    for match in _HEX_RUN.finditer(text):
        try:
            decoded = bytes.fromhex(match.group(0)).decode("utf-8")
        except ValueError:  # not hex text, or not UTF-8 (a hash, an id)
            continue
        if decoded and all(ch.isprintable() or ch.isspace() for ch in decoded):
            yield decoded
    if _PCT_RUN.search(text):
        yield unquote(text)


def _first(patterns: list[_Pattern], text: str, *, negation_guard: bool = False,
           reported_guard: bool = False) -> str | None:
    """The first pattern's reason. ``negation_guard``: a match with a negation shortly before
    it in the same sentence ("never send keys to …") does not count. ``reported_guard``: nor
    does an attack quoted to be refused ("if a page tells you to ignore previous instructions,
    treat it as an injection")."""
    for pattern, reason in patterns:
        for match in pattern.finditer(text):
            before = text[max(0, match.start() - 40): match.start()]
            cut = max((m.end() for m in _SENTENCE_END.finditer(before)), default=0)
            before = before[cut:]
            if negation_guard and _NEG.search(before[-25:]) \
                    and not _NOT_NEGATION.search(before[-25:]):
                continue
            if reported_guard and (_REPORTED.search(before) or _OPEN_QUOTE.search(before)
                                   or _REPORTED_IN.search(match.group(0))) \
                    and _DEFENSIVE.search(text):
                continue  # quoted (reported or in quotes) by a note that refuses it
            return reason
    return None


def _scan_views(text: str) -> str | None:
    plain = _plain(text)
    reason = _first(_PHRASES, plain, reported_guard=True) \
        or _first(_EXFIL[:_GUARDED], plain, negation_guard=True)
    reason = reason or _first(_EXFIL[_GUARDED:], plain, negation_guard=True)
    reason = reason or _first(_BEHAVIOUR, plain, negation_guard=True, reported_guard=True)
    reason = reason or _first(_I18N, unicodedata.normalize("NFKC", text).casefold())
    leet = plain.translate(_LEET)
    if not reason and leet != plain:
        reason = _first(_PHRASES, leet, reported_guard=True)
    if reason:
        return reason
    if _first(_PHRASES, plain):
        return None  # the phrase is there in plain words, quoted to be refused: not obfuscated
    compact = _compact(plain)
    rot13 = codecs.encode(compact, "rot13")  # a rot13'd phrase is letters-only too
    return (_first(_COMPACT, compact) or _first(_COMPACT, compact[::-1])
            or _first(_COMPACT, rot13))


@functools.lru_cache(maxsize=4096)  # pure; entries are rescanned on every read and snapshot
def _credential_reason(text: str) -> str | None:
    """A literal credential: memory is sent with every later request, to every provider. A
    password given in words is recognized by ``refold.compaction.secrets.password_said``, the
    rule ``redact`` replaces it by in what a summary model is sent."""
    from refold.compaction.secrets import credential_in, password_said

    found = credential_in(text) or ("a password" if password_said(text) else None)
    return f"credential: {found} (memory is sent with every request)" if found else None


@functools.lru_cache(maxsize=4096)
def _destructive_reason(text: str) -> str | None:
    """A command that destroys a machine or a database (``_DESTRUCTIVE``), not negated."""
    return _first(_DESTRUCTIVE, _plain(text), negation_guard=True)


def scan_entry(text: str) -> str | None:
    """``scan`` for a memory entry: a literal credential and a destructive command are refused
    too."""
    if len(text) > MAX_SCAN_CHARS:
        return scan(text)
    return _credential_reason(text) or _destructive_reason(text) or scan(text)


SCAN_OVERLAP = 2_048  # characters two windows of ``scan_long`` share: more than any pattern spans


def scan_long(text: str) -> str | None:
    """``scan`` for a text that may be longer than ``MAX_SCAN_CHARS`` (a skill's body, up to
    64,000 characters): windows of ``MAX_SCAN_CHARS`` that overlap by ``SCAN_OVERLAP``, so
    every phrase the patterns look for lies whole in one of them; the first reason found."""
    if len(text) <= MAX_SCAN_CHARS:
        return scan(text)
    step = MAX_SCAN_CHARS - SCAN_OVERLAP
    for start in range(0, len(text) - SCAN_OVERLAP, step):
        reason = scan(text[start:start + MAX_SCAN_CHARS])
        if reason:
            return reason
    return None


@functools.lru_cache(maxsize=512)  # pure; a session start rescans every skill and entry
def scan(text: str) -> str | None:
    """Why ``text`` must not enter a system prompt, or None when it looks safe."""
    if len(text) > MAX_SCAN_CHARS:
        return f"too large to scan ({len(text):,} characters)"
    reason = invisible_reason(text) or _scan_views(text)
    if reason:
        return reason
    for payload in _decoded_payloads(text):
        inner = invisible_reason(payload) or _scan_views(payload)
        if inner:
            return f"{inner} (encoded)"
    return None
