"""Loading transcripts: a JSON list of messages, ``{"messages": [...]}``, or JSONL.

Accepted inputs (format detected from the content, not the file name):
- a JSON array of messages;
- a JSON object with a ``messages`` array (an OpenAI request body works as is);
- JSONL: one message object per line (blank lines ignored).

``load_export_file`` / ``load_export`` read refold's own JSON export (``refold.export/1``:
each session's active messages and their times; rewound rows left out and counted).
``load_anthropic`` reads the Anthropic Messages form instead (``{"system", "messages"}``, a
list of turns, or JSONL with one turn per line) and converts it with ``from_anthropic``.
``load_agent_log`` reads the transcripts Claude Code and Codex keep (``refold.messages.
agent_logs``); ``sniff_agent_log`` tells whether a file is one. A last line that is not
complete JSON there (the agent was still writing it) is left out and counted, not refused.

Every message is checked with ``validate_message``; the first problem raises
``MessageValidationError`` naming the line (JSONL, 1-based) or the message index (JSON, 0-based),
so a caller can refuse the whole file and store nothing partial.

Bad input is refused or repaired, never crashes and never slips through:
- JSON nested deeper than ``MAX_DEPTH`` levels is refused (``InvalidInput``), however deep;
- ``NaN``, ``Infinity`` and ``-Infinity`` are refused: they are not JSON, and a transcript that
  holds them could not be exported as standard JSON again;
- bytes that are not valid UTF-8 are replaced with U+FFFD (the same documented repair as lone
  surrogates); an ``Utf8Repair`` passed by the caller receives how many sequences were replaced
  and the byte offset of the first, and a warning is logged;
- ``max_bytes`` caps the size of a file (or of stdin read by the CLI) before anything is parsed.
JSONL files are read line by line, so a large export never needs two copies in memory.
"""

from __future__ import annotations

import codecs
import functools
import io
import json
import logging
import re
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from itertools import pairwise
from pathlib import Path
from typing import Any

from refold._records import dataclass, field
from refold.errors import InvalidInput, MessageValidationError
from refold.messages.anthropic import from_anthropic
from refold.messages.model import Message
from refold.messages.validate import validate_message

log = logging.getLogger(__name__)

MAX_DEPTH = 200  # nesting levels of arrays/objects; real transcripts need fewer than 20


@dataclass
class Utf8Repair:
    """What the UTF-8 repair did: sequences replaced with U+FFFD and where the first was."""

    count: int = 0
    first_offset: int | None = None  # byte offset in the input

    def note(self, offset: int) -> None:
        self.count += 1
        if self.first_offset is None:
            self.first_offset = offset

    def describe(self) -> str:
        return (f"replaced {self.count} invalid UTF-8 sequence(s) with U+FFFD, the first at "
                f"byte {self.first_offset}")


_ACTIVE: ContextVar[tuple[Utf8Repair, int] | None] = ContextVar("refold_utf8", default=None)


def _record(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    active = _ACTIVE.get()
    if active is not None:
        active[0].note(active[1] + exc.start)
    return "\ufffd", exc.end


codecs.register_error("refold-utf8-repair", _record)


def decode_utf8(raw: bytes, repair: Utf8Repair, *, offset: int = 0) -> str:
    """``raw`` as text, invalid sequences replaced and noted in ``repair`` (offsets from
    ``offset``); a leading BOM is dropped at offset 0."""
    token = _ACTIVE.set((repair, offset))
    try:
        text = raw.decode("utf-8", "refold-utf8-repair")
    finally:
        _ACTIVE.reset(token)
    return text.removeprefix("\ufeff") if offset == 0 else text


def _decode(data: str | bytes, source_name: str, repair: Utf8Repair | None) -> str:
    if isinstance(data, str):
        return data.removeprefix("\ufeff")
    found = repair if repair is not None else Utf8Repair()
    text = decode_utf8(data, found)
    _warn_repair(found, repair, source_name)
    return text


def _warn_repair(found: Utf8Repair, given: Utf8Repair | None, source_name: str) -> None:
    """Log what the repair did, once: only when the reader owns ``found`` (the caller passed
    no ``repair``). A caller that passes one reports it itself (``refold import`` prints it as
    a warning and in ``--json``); logged here as well, the CLI printed the note two or three
    times (an Anthropic file: by ``load_anthropic``, ``load_messages_file`` and the CLI)."""
    if given is None and found.count:
        log.warning("%s: %s", source_name, found.describe())


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (numbers must be finite)")


def _too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def parse_json(text: str, where: str) -> Any:
    """``json.loads`` that refuses NaN/Infinity and nesting deeper than ``MAX_DEPTH`` with an
    ``InvalidInput`` naming ``where``; other syntax errors stay ``ValueError`` for the caller."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise _depth_error(where) from None
    except ValueError as exc:
        if "not valid JSON (numbers must be finite)" in str(exc):
            raise InvalidInput(f"{where}: {exc}", hint="replace NaN/Infinity with null or a "
                               "number") from None
        raise
    if _too_deep(value):
        raise _depth_error(where)
    return value


def _depth_error(where: str) -> InvalidInput:
    return InvalidInput(f"{where}: JSON nested deeper than {MAX_DEPTH} levels",
                        hint="a chat transcript never nests this deep; check the file")


def _messages_from_document(doc: Any, source_name: str) -> list[Message]:
    if isinstance(doc, dict) and "messages" in doc:
        doc = doc["messages"]
        if not isinstance(doc, list):
            raise InvalidInput(f"{source_name}: 'messages' must be a list")
    elif isinstance(doc, dict) and "role" in doc:
        doc = [doc]
    if not isinstance(doc, list):
        raise InvalidInput(f"{source_name}: expected a list of messages, an object with "
                           "'messages', or JSONL (one message per line)")
    out: list[Message] = []
    for i, item in enumerate(doc):
        try:
            out.append(validate_message(item, i))
        except MessageValidationError as exc:
            located = _located(exc, f"{source_name}: ", line=None)
            if _looks_anthropic(doc):
                located.hint = "it looks like the Anthropic format: load it with " \
                               "load_anthropic / --format anthropic"
            raise located from exc
    return out


_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking",
                               "image", "document"})


def _looks_anthropic(items: list[Any]) -> bool:
    for item in items:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") in _ANTHROPIC_BLOCKS for b in content):
            return True
    return False


def _located(exc: MessageValidationError, prefix: str,
             line: int | None) -> MessageValidationError:
    """The same error with the source (and line) in front; index and field are kept."""
    out = MessageValidationError(prefix + exc.message, hint=exc.hint)
    out.index, out.field = exc.index, exc.field
    out.details.update(index=exc.index, field=exc.field, line=line)
    return out


def _parse_line(line: str, lineno: int, source_name: str) -> Message:
    try:
        item = parse_json(line, f"{source_name} line {lineno}")
    except ValueError as exc:
        raise InvalidInput(f"{source_name} line {lineno}: not valid JSON ({exc})",
                           hint="each line must be one JSON message object") from exc
    try:
        return validate_message(item, None)
    except MessageValidationError as exc:
        located = _located(exc, f"{source_name} line {lineno}: ", line=lineno)
        from refold.messages.agent_logs import detect

        agent = detect(item)
        if agent is not None:  # e.g. a Claude Code transcript piped in, or --format openai
            located.hint = (f"it looks like a {agent} transcript: read the file with "
                            f"--format {agent}")
        raise located from exc


def _iter_jsonl(lines: Iterable[str], source_name: str) -> Iterator[Message]:
    for lineno, line in enumerate(lines, start=1):
        if line.strip():
            yield _parse_line(line, lineno, source_name)


def _first_line_is_message(text: str) -> bool:
    first = text.lstrip().split("\n", 1)[0]
    try:
        item = parse_json(first, "line 1")
    except ValueError:
        return False
    return isinstance(item, dict) and "messages" not in item


def load_messages(data: str | bytes, *, source_name: str = "<input>",
                  repair: Utf8Repair | None = None) -> list[Message]:
    """Parse and validate a transcript given as text or bytes (see the module docstring)."""
    text = _decode(data, source_name, repair)
    return _load_text(text, source_name)


def _load_text(text: str, source_name: str) -> list[Message]:
    stripped = text.lstrip()
    if not stripped:
        raise InvalidInput(f"{source_name}: no messages (the input is empty)")
    if stripped[0] == "{" and _first_line_is_message(stripped) and "\n" in stripped.strip():
        return list(_iter_jsonl(text.splitlines(), source_name))
    try:
        doc = parse_json(text, source_name)
    except ValueError as exc:
        if stripped[0] == "{" and _first_line_is_message(stripped):
            return list(_iter_jsonl(text.splitlines(), source_name))
        where = f" at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise InvalidInput(f"{source_name}: not valid JSON{where} ({exc})",
                           hint="give a JSON list of messages, {\"messages\": [...]}, "
                                "or JSONL") from exc
    return _messages_from_document(doc, source_name)


def _json_or_jsonl(text: str, source_name: str) -> Any:
    """A whole JSON document, or the list of objects of a JSONL text (no validation)."""
    if not text.strip():
        raise InvalidInput(f"{source_name}: no messages (the input is empty)")
    try:
        return parse_json(text, source_name)
    except ValueError:
        pass
    items = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                items.append(parse_json(line, f"{source_name} line {lineno}"))
            except ValueError as exc:
                raise InvalidInput(f"{source_name} line {lineno}: not valid JSON ({exc})") from exc
    return items


def load_anthropic(data: str | bytes, *, source_name: str = "<input>",
                   repair: Utf8Repair | None = None) -> list[Message]:
    """Parse an Anthropic Messages transcript and return it in the OpenAI form, validated."""
    doc = _json_or_jsonl(_decode(data, source_name, repair), source_name)
    system = None
    if isinstance(doc, dict) and "messages" in doc:
        doc, system = doc["messages"], doc.get("system")
    elif isinstance(doc, dict):
        doc = [doc]
    if not isinstance(doc, list):
        raise InvalidInput(f"{source_name}: expected Anthropic messages (a list of turns or "
                           '{"system": ..., "messages": [...]})')
    try:
        converted = from_anthropic(doc, system=system)
    except MessageValidationError as exc:
        raise _located(exc, f"{source_name}: Anthropic ", line=None) from exc
    try:
        return [validate_message(m, i) for i, m in enumerate(converted)]
    except MessageValidationError as exc:
        raise _located(exc, f"{source_name} (after conversion): ", line=None) from exc


SNIFF_DOCUMENT_BYTES = 64 << 20  # a .json document read whole to see whether it is a session


def sniff_prompt_history(path: str | Path) -> str | None:
    """The agent (``Claude Code``, ``Codex``) whose prompt history file this is, else None
    (``agent_logs.prompt_history``)."""
    from refold.messages.agent_logs import prompt_history

    try:
        with open(Path(path).expanduser(), "rb") as fh:
            return prompt_history(json.loads(fh.readline(1 << 20).decode("utf-8", "replace")))
    except (OSError, ValueError, RecursionError):
        return None


def sniff_agent_log(path: str | Path) -> str | None:
    """``claude-code``, ``codex`` or ``gemini`` when the file's first line is a record of
    theirs, or (a ``.json`` file) the whole document is a Gemini CLI session."""
    from refold.messages.agent_logs import detect

    path = Path(path).expanduser()
    try:
        with open(path, "rb") as fh:
            first = fh.readline(1 << 20).decode("utf-8", "replace")
    except OSError:
        return None
    try:
        return detect(json.loads(first)) if first.strip().startswith("{") else None
    except ValueError:
        pass
    if path.suffix.lower() != ".json" or not first.strip().startswith("{"):
        return None
    try:  # a pretty-printed document (Gemini CLI writes its sessions so)
        if path.stat().st_size > SNIFF_DOCUMENT_BYTES:
            return None
        return detect(json.loads(path.read_bytes().decode("utf-8", "replace")))
    except (OSError, ValueError, RecursionError):
        return None


@dataclass
class AgentLog:
    """An agent's transcript read as chat messages, and what was left out (kind -> count)."""

    messages: list[Message]
    skipped: dict[str, int]
    native_id: str | None = None  # the agent's own id of the conversation (see native_session_id)
    times: list[float | None] | None = None  # when each message was said (its record's time)
    # per message, the usage of the model calls that wrote it ((usage as the API gave it,
    # model) each; see agent_logs.agent_messages)
    spend: list[list[tuple[dict[str, Any], str | None]]] | None = None
    # a resumed Claude Code session's file: the sessions it continues (their own ids, oldest
    # first), each with how many of the leading ``messages`` are that session's
    resumed: tuple[tuple[str, int], ...] = ()


def load_agent_log(path: str | Path, fmt: str, *, max_bytes: int | None = None,
                   repair: Utf8Repair | None = None, data: bytes | None = None) -> AgentLog:
    """Read a Claude Code, Codex or Gemini CLI transcript file (``fmt``) as validated chat
    messages; ``data``: the transcript's bytes, read already from stdin or a pipe (``path``
    then only names it)."""
    from refold.messages.agent_logs import agent_messages, native_session_ids

    path = Path(path).expanduser()
    found = repair if repair is not None else Utf8Repair()
    records: list[Any] = []
    unfinished = 0
    offset = 0
    if data is not None:
        check_size(len(data), max_bytes, str(path), whole=False)  # (read up to one byte over)
        parts = data.split(b"\n")  # lines as readlines() gives them, the last one unended
        lines = [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    else:
        if path.is_dir():
            raise InvalidInput(f"{path} is a directory, not a transcript file")
        with _open_binary(path) as fh:
            try:
                check_size(path.stat().st_size, max_bytes, str(path))
                lines = fh.readlines()
            except OSError as exc:
                raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc
    document = _session_document(lines, found, path.name) if fmt == "gemini" else None
    if document is not None:  # one JSON document: its header, then its messages
        records = [{k: v for k, v in document.items() if k != "messages"},
                   *document["messages"]]
        lines = []
    try:
        for lineno, raw in enumerate(lines, start=1):
            line = decode_utf8(raw, found, offset=offset)
            offset += len(raw)
            if not line.strip():
                continue
            try:
                records.append(parse_json(line, f"{path.name} line {lineno}"))
            except ValueError as exc:
                if lineno == len(lines) and not raw.endswith(b"\n"):
                    unfinished += 1  # the agent was writing it: a documented repair
                    continue
                raise InvalidInput(f"{path.name} line {lineno}: not valid JSON ({exc})",
                                   hint=f"is it a {fmt} transcript?") from exc
    finally:
        _warn_repair(found, repair, path.name)
    try:
        converted, times, skipped, spend = agent_messages(fmt, records)
    except MessageValidationError as exc:
        raise _located(exc, f"{path.name} ({fmt}): ", line=None) from exc
    except InvalidInput as exc:  # a Responses item of a Codex rollout refold cannot read
        raise InvalidInput(f"{path.name} ({fmt}): {exc.message}", hint=exc.hint) from exc
    if unfinished:
        skipped["unfinished last line"] += unfinished
    try:
        messages = [validate_message(m, i) for i, m in enumerate(converted)]
    except MessageValidationError as exc:
        raise _located(exc, f"{path.name} (after reading it as {fmt}): ", line=None) from exc
    natives = native_session_ids(fmt, records)
    return AgentLog(messages, dict(skipped), natives[-1][0] if natives else None, times, spend,
                    _resumed(fmt, records, natives, messages))


def _resumed(fmt: str, records: list[Any], natives: list[tuple[str, int]],
             messages: list[Message]) -> tuple[tuple[str, int], ...]:
    """For each session a resumed transcript continues (all of ``natives`` but the last): its
    id and how many of ``messages`` its records, the ones before the next id's first, make
    (the messages read from them alone, as far as they are where the whole file's begin)."""
    from refold.messages.agent_logs import agent_messages

    out: list[tuple[str, int]] = []
    for (native, _), (_, end) in pairwise(natives):
        try:
            before = [validate_message(m, i)
                      for i, m in enumerate(agent_messages(fmt, records[:end])[0])]
        except (MessageValidationError, InvalidInput):
            break
        count = 0
        while count < min(len(before), len(messages)) and before[count] == messages[count]:
            count += 1
        if count == 0 or (out and count <= out[-1][1]):
            break
        out.append((native, count))
    return tuple(out)


def _session_document(lines: list[bytes], repair: Utf8Repair, name: str
                      ) -> dict[str, Any] | None:
    """The file as one JSON object holding a ``messages`` list (a Gemini CLI session), or None
    (then it is read as JSONL)."""
    data = b"".join(lines)
    if not data.lstrip().startswith(b"{"):
        return None
    trial = Utf8Repair()  # merged into ``repair`` only if it is read so (else lines note it)
    try:
        doc = parse_json(decode_utf8(data, trial), name)
    except ValueError:
        return None  # not one document: lines
    if not (isinstance(doc, dict) and isinstance(doc.get("messages"), list)):
        return None
    if trial.count:
        repair.count += trial.count - 1
        repair.note(trial.first_offset or 0)
    return doc


# a byte-order mark of UTF-32 or UTF-16 (PowerShell's ``>`` writes UTF-16): the file is read in
# that encoding and handed on as UTF-8 (UTF-32 first: its little-endian mark begins as UTF-16's)
WIDE_BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"),
             (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))


def _open_binary(path: Path) -> Any:
    try:
        fh = path.open("rb")
        head = fh.peek(4)[:4]
    except FileNotFoundError as exc:
        raise InvalidInput(f"no such file: {path}", hint="check the path") from exc
    except IsADirectoryError as exc:
        raise InvalidInput(f"{path} is a directory, not a transcript file") from exc
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc
    codec = next((name for bom, name in WIDE_BOMS if head.startswith(bom)), None)
    if codec is None:
        return fh
    with fh:
        try:
            data = fh.read()
        except OSError as exc:
            raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc
    # the codec takes the mark off; a broken sequence becomes U+FFFD as in UTF-8 input
    return io.BytesIO(data.decode(codec, "replace").encode("utf-8", "replace"))


TIME_KEYS = ("created_at", "timestamp", "time", "date", "datetime", "created")
EARLIEST, LATEST = 1e8, 32503680000.0  # 1973 to 3000: outside, a "time" is not a date (a
# tool result's "time": 0.53 is how long it took)


def message_time(message: Message) -> float | None:
    """When a message of a chat export says it was written: its first of ``TIME_KEYS`` that
    holds seconds since the epoch (milliseconds when the number is that large), as a number or
    a numeric string, an ISO 8601 date or time ("2023-05-08T13:56:00Z"; one without a zone
    is local time, the clock search reads days in), or a date as people write it
    (``_written_time``: "1:56 pm on 8 May, 2023"). None for anything else."""
    for key in TIME_KEYS:
        value = message.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            text = value.strip()
            try:
                value = float(text)
            except ValueError:
                import datetime as dt

                try:
                    when = dt.datetime.fromisoformat(text)  # "Z" too, since Python 3.11
                except ValueError:
                    return _written_time(text)
                try:
                    return _plausible(when.timestamp())
                except (OverflowError, OSError):
                    return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        seconds = float(value)
        if seconds > LATEST:
            seconds /= 1000.0  # JavaScript's Date.now(): milliseconds
        return _plausible(seconds)
    return None


@functools.cache
def _clock() -> re.Pattern[str]:
    """A time of day ("1:56 pm", "14:30:05"), compiled on first use."""
    return re.compile(r"(?<![\d.:/])(\d{1,2}):(\d{2})(?::(\d{2}))?\s*([ap]\.?m\b\.?)?",
                      re.IGNORECASE)


def _written_time(text: str) -> float | None:
    """A date as people and chat apps write it ("8 May, 2023", "1:56 pm on 8 May, 2023",
    "08.05.2023, 14:30", "2023年5月8日"), local time: the one calendar day it names, with
    the year (``refold.search.dates`` reads it), at its time of day if it gives one. None when
    it names no day, a day without its year, or two readings (03/04/2024)."""
    import datetime as dt

    from refold.search.dates import query_days

    days = query_days(text)
    if len(days) != 1 or days[0].year is None:
        return None
    hour = minute = second = 0
    clock = _clock().search(text)
    if clock:
        hour, minute, second = int(clock[1]), int(clock[2]), int(clock[3] or 0)
        half = (clock[4] or "").lower().replace(".", "")
        if half and not 1 <= hour <= 12:
            return None
        if half:
            hour = hour % 12 + (12 if half == "pm" else 0)
        if hour > 23 or minute > 59 or second > 59:
            return None
    day = days[0]
    try:
        return _plausible(dt.datetime(day.year or 0, day.month, day.day, hour, minute,
                                      second).timestamp())
    except (ValueError, OverflowError, OSError):
        return None


def _plausible(seconds: float) -> float | None:
    return seconds if EARLIEST < seconds < LATEST else None  # NaN and infinities fail too


def message_times(messages: list[Message]) -> list[float | None] | None:
    """When each message was written, for an import: its ``message_time``; one without a time
    of its own was written with the one before it (the first ones, with the first that says).
    None when no message says."""
    times = [message_time(m) for m in messages]
    known = [t for t in times if t is not None]
    if not known:
        return None
    last = known[0]
    out: list[float | None] = []
    for when in times:
        last = when if when is not None else last
        out.append(last)
    return out


def check_size(size: int, max_bytes: int | None, where: str, *, whole: bool = True) -> None:
    """``InvalidInput`` when an input of ``size`` bytes is over the cap. ``whole``: ``size`` is
    the input's own (a file's); a stream read only up to one byte over the cap says "more
    than" (it was cut there, its size is not known)."""
    if max_bytes is not None and size > max_bytes:
        said = f"{size:,} bytes, over" if whole else "more than"
        raise InvalidInput(f"{where} is {said} the import limit of {max_bytes:,} bytes",
                           hint="raise import_max_bytes (refold.toml or REFOLD_IMPORT_MAX_BYTES)"
                                " or split the file")


def load_messages_file(path: str | Path, *, fmt: str = "openai", max_bytes: int | None = None,
                       repair: Utf8Repair | None = None) -> list[Message]:
    """Load a transcript file; JSONL is streamed line by line, JSON documents read whole.

    ``fmt`` is ``"openai"`` (the default) or ``"anthropic"`` (see ``load_anthropic``);
    ``max_bytes`` refuses a larger file before reading it.
    """
    if fmt not in ("openai", "anthropic"):
        raise InvalidInput(f"unknown transcript format {fmt!r}", hint="use openai or anthropic")
    path = Path(path).expanduser()
    if path.is_dir():
        raise InvalidInput(f"{path} is a directory, not a transcript file")
    found = repair if repair is not None else Utf8Repair()
    with _open_binary(path) as fh:
        try:
            check_size(path.stat().st_size, max_bytes, str(path))
            if fmt == "anthropic":
                return load_anthropic(fh.read(), source_name=path.name, repair=found)
            return _load_open_file(fh, path.name, found)
        except OSError as exc:
            raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc
        finally:
            _warn_repair(found, repair, path.name)


def _load_open_file(fh: Any, source_name: str, repair: Utf8Repair) -> list[Message]:
    offset = 0

    def text_of(raw: bytes) -> str:
        nonlocal offset
        text = decode_utf8(raw, repair, offset=offset)
        offset += len(raw)
        return text

    skipped = 0
    head = text_of(fh.readline())
    while head and not head.strip():
        skipped += 1
        head = text_of(fh.readline())
    if not (head.lstrip().startswith("{") and _first_line_is_message(head)):
        return _load_text(head + text_of(fh.read()), source_name)
    out = [_parse_line(head, skipped + 1, source_name)]
    for lineno, raw in enumerate(fh, start=skipped + 2):
        line = text_of(raw)
        if line.strip():
            out.append(_parse_line(line, lineno, source_name))
    return out


EXPORT_FORMAT = "refold.export/1"  # refold.store.export's JSON form
_EXPORT_HEAD = 64 << 10  # bytes read to tell whether a file is a refold JSON export


@dataclass
class ExportedSession:
    """One session of a refold JSON export: its id and title there, its active messages with
    when each was said, and how many rewound (inactive) rows it held (``--archived``: left
    out, they are not the conversation's history)."""

    id: str
    title: str | None
    messages: list[Message]
    times: list[float | None]
    rewound: int = 0
    source: str | None = None  # what the session said it came from there ("serve", "demo")
    model: str | None = None
    # its usage totals there (input_tokens, output_tokens, cache_read_tokens, cost_usd)
    totals: dict[str, float] = field(default_factory=dict)
    # the session it continues there (a ``--lineage`` export) and how ("compaction", "fork"…)
    parent_session_id: str | None = None
    link_kind: str | None = None
    fork_seq: int | None = None  # a fork's or branch's: the parent's seq its copies end at
    started_at: float | None = None  # when it started there (a fork: when it was made)
    seqs: list[int] = field(default_factory=list)  # each active message's seq there
    # the system prompts recorded for it there (``system_prompt`` events), oldest first
    system_prompts: list[str] = field(default_factory=list)


EXPORTED_TOTALS = ("input_tokens", "output_tokens", "cache_read_tokens", "cost_usd")


def _looks_exported(head: bytes) -> bool:
    """Does a document start as ``refold sessions export --format json`` writes one?"""
    text = head.decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
    return text.startswith("{") and re.search(
        r'(?<!\\)"format"\s*:\s*"refold\.export/', text) is not None


def exported_sessions(doc: Any, source_name: str) -> list[ExportedSession] | None:
    """The sessions of a refold JSON export (``{"format": "refold.export/1", "sessions":
    [...]}``), each message checked with ``validate_message``; None when ``doc`` is not one."""
    tag = doc.get("format") if isinstance(doc, dict) else None
    if not (isinstance(tag, str) and tag.startswith("refold.export/")):
        return None
    if tag != EXPORT_FORMAT:
        raise InvalidInput(f"{source_name}: a {tag} export; this refold reads {EXPORT_FORMAT}",
                           hint="import it with the refold version that wrote it, or newer")
    sessions = doc.get("sessions")
    if not isinstance(sessions, list):
        raise InvalidInput(f"{source_name}: a refold export without a 'sessions' list")
    return [_exported_session(s, f"{source_name} session {i}") for i, s in enumerate(sessions)]


def _prompts(value: Any, where: str) -> list[str]:
    """An exported session's ``system_prompts`` (objects with a ``text``), or InvalidInput."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInput(f"{where} 'system_prompts': expected a list of objects with a "
                           "'text', as refold's JSON export writes it")
    return [p["text"] for p in value
            if isinstance(p, dict) and isinstance(p.get("text"), str) and p["text"]]


def _count(value: Any) -> int | None:
    """A whole number of an export (a seq), or None for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def _exported_session(item: Any, where: str) -> ExportedSession:
    if not (isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"].strip()
            and isinstance(item.get("messages"), list)):
        raise InvalidInput(f"{where}: expected an object with an 'id' and a 'messages' list")
    title = item.get("title")
    text = {k: v for k in ("source", "model", "parent_session_id", "link_kind")
            if isinstance(v := item.get(k), str) and v}
    totals = {k: float(v) for k in EXPORTED_TOTALS if isinstance(v := item.get(k), int | float)
              and not isinstance(v, bool) and v > 0}
    out = ExportedSession(item["id"], title if isinstance(title, str) else None, [], [],
                          source=text.get("source"), model=text.get("model"), totals=totals,
                          parent_session_id=text.get("parent_session_id"),
                          link_kind=text.get("link_kind"), fork_seq=_count(item.get("fork_seq")),
                          system_prompts=_prompts(item.get("system_prompts"), where),
                          started_at=_time(item.get("started_at")))
    for index, record in enumerate(item["messages"]):
        if not (isinstance(record, dict) and "message" in record):
            raise InvalidInput(f"{where} message {index}: expected an object with a 'message'")
        if record.get("active") is False:
            out.rewound += 1
            continue
        try:
            out.messages.append(validate_message(record["message"], index))
        except MessageValidationError as exc:
            raise _located(exc, f"{where}: ", line=None) from exc
        out.seqs.append(_count(record.get("seq")) or index + 1)
        out.times.append(_time(record.get("created_at")))
    return out


def _time(when: Any) -> float | None:
    try:
        return float(when) if isinstance(when, int | float) and not isinstance(when, bool) \
            else None
    except OverflowError:  # an int past a float's range
        return None


def load_export(data: str | bytes, *, source_name: str = "<input>",
                repair: Utf8Repair | None = None) -> list[ExportedSession] | None:
    """``exported_sessions`` of a document given as text or bytes; None (nothing parsed) when
    it does not start as a refold export does."""
    head = data[:_EXPORT_HEAD]
    if not _looks_exported(head.encode("utf-8", "surrogatepass") if isinstance(head, str)
                           else head):
        return None
    text = _decode(data, source_name, repair)
    try:
        doc = parse_json(text, source_name)
    except ValueError:
        return None  # not one document after all: a transcript's loader says what is wrong
    return exported_sessions(doc, source_name)


def load_export_file(path: str | Path, *, max_bytes: int | None = None,
                     repair: Utf8Repair | None = None) -> list[ExportedSession] | None:
    """``load_export`` of a file; None, after reading only its head, when it is no export."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise InvalidInput(f"{path} is a directory, not a transcript file")
    with _open_binary(path) as fh:
        try:
            if not _looks_exported(fh.read(_EXPORT_HEAD)):
                return None
            check_size(path.stat().st_size, max_bytes, str(path))
            fh.seek(0)
            data = fh.read()
        except OSError as exc:
            raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc
    return load_export(data, source_name=path.name, repair=repair)
