"""orjson where it reads and writes what the json module does; None where it might not.

The proxy decodes every request body and streamed chunk and encodes every upstream body; the
json module's C scanner and encoder were a fifth of a streamed turn's instructions. orjson
(optional: the ``server`` extra installs it) does the same work several times faster, but it
does not always agree with json, so each call here answers None where it might differ and the
caller takes its json path, unchanged (same values, same errors):

- ``loads``: orjson refuses lone surrogate escapes, NaN / Infinity, numbers that overflow to
  infinity, a UTF-8 BOM, other encodings and nesting past 1,024 levels (all: None), and reads
  an integer outside [-2**63, 2**64) as a float, which json keeps exact: any run of 19 digits
  or more gives None before orjson reads it (a long number inside a string too: json then does
  the work, as before; the run is looked for in C where ``refold._jsonscan`` is built).
  Elsewhere both read valid JSON to equal values (duplicate keys: the last wins, in the first
  one's place) and refuse the same invalid JSON.
- ``dumps`` (of what JSON decoding builds: dicts, lists, strings, numbers, booleans, None;
  orjson would also write an enum or a UUID, which json refuses): orjson writes no spaces after ``:`` and ``,`` and writes floats in their shortest
  form (``1e-7`` for json's ``1e-07``): the same JSON values. It refuses what json would escape
  or convert (lone surrogates, integers past 64 bits, non-string keys) and writes NaN and
  ±Infinity as ``null``, where json writes ``NaN`` / ``Infinity``: None for a value holding a
  non-finite float, a non-str key or a value of a type JSON decoding does not build (found by
  a walk in C, ``refold._jsonscan``); without the C module, None for any output with a
  ``null`` in it (a None value too: then json writes it).

(``bytes.find``, not ``in``: before Python 3.12 ``bytes in bytes`` first tries the operand as an
integer and formats, raises and clears a TypeError, several times the cost of the search.)

Nothing persisted or hashed goes through here: stored messages and identities keep
``canonical_json`` (refold.messages.model), byte for byte.
"""

from __future__ import annotations

from typing import Any

from refold.jsonscan import digit_run, unusual

try:
    import orjson
except ImportError:  # pragma: no cover - orjson ships with refold[server]
    orjson = None  # type: ignore[assignment]

# every digit becomes a 0, every other byte a space: a 19-digit run is then one ``in`` away
_DIGITS = bytes(0x30 if 0x30 <= c <= 0x39 else 0x20 for c in range(256))
_LONG_NUMBER = b"0" * 19
_PASSTHROUGH = (orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
                | orjson.OPT_PASSTHROUGH_SUBCLASS) if orjson is not None else 0

AVAILABLE = orjson is not None
_CONTAINERS = (dict, list)  # (``dict | list`` would build a union type on every call)


def loads(raw: bytes) -> Any | None:
    """The JSON value of the UTF-8 ``raw`` (a container: ``{…}`` or ``[…]``) as ``json.loads``
    reads it, or None when orjson is missing or might read it otherwise (the caller then
    decodes with json). Only containers: None is also the answer for a bare ``null``."""
    if orjson is None:
        return None
    run = digit_run(raw, len(_LONG_NUMBER))  # (in C where it is built)
    if run if run is not None else raw.translate(_DIGITS).find(_LONG_NUMBER) >= 0:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, _CONTAINERS) else None


def loads_text(text: str) -> Any | None:
    """``loads`` of a str."""
    if orjson is None:
        return None
    try:
        raw = text.encode()
    except UnicodeEncodeError:  # a lone surrogate: json reads it
        return None
    return loads(raw)


def dumps(value: Any) -> bytes | None:
    """``json.dumps(value, ensure_ascii=False).encode()`` up to whitespace and float spelling
    (the same JSON values), or None when orjson is missing or might write it otherwise."""
    if orjson is None:
        return None
    odd = unusual(value)  # a walk of the value in C, where it is built
    if odd:
        return None
    try:
        data = orjson.dumps(value, option=_PASSTHROUGH)
    except orjson.JSONEncodeError:
        return None
    if odd is None and data.find(b"null") >= 0:
        return None
    return data
