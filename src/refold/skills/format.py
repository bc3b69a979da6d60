"""The SKILL.md format Claude Code and Hermes load: YAML front matter, then Markdown.

    ---
    name: deploy-checklist
    description: How to ship a release of this project safely.
    ---
    # Deploy checklist
    …

Parsing is strict and small (no YAML library): the front matter is ``key: value`` lines
between two ``---`` lines; a value may be quoted (``"…"`` with JSON escapes, or ``'…'``).
``name`` must equal the skill's directory name (lowercase letters, digits and hyphens, at most
64 characters); ``description`` is required, one line, at most 1024 characters. Anything else
raises ``InvalidInput`` naming the line and what to fix.
"""

from __future__ import annotations

import json
import re

from refold._records import dataclass, field
from refold.errors import InvalidInput

NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?\Z")  # (\Z: "$" lets "name\n" pass)
_KEY = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*):(?:\s+(.*))?$")
MAX_DESCRIPTION = 1024
MAX_BODY = 64_000


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    body: str
    extra: dict[str, str] = field(default_factory=dict)  # other front-matter keys, kept

    def render(self) -> str:
        lines = ["---", f"name: {_quote(self.name)}", f"description: {_quote(self.description)}"]
        lines += [f"{k}: {_quote(v)}" for k, v in self.extra.items()]
        return "\n".join([*lines, "---", self.body.strip("\n"), ""])


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME.match(name) or "--" in name:
        raise InvalidInput(f"bad skill name {name!r}",
                           hint="use lowercase letters, digits and single hyphens, e.g. "
                                "'deploy-checklist' (at most 64 characters)")
    return name


def check_description(description: object) -> str:
    if not isinstance(description, str) or not description.strip():
        raise InvalidInput("a skill needs a description: one line saying when to use it")
    text = " ".join(description.split())
    if len(text) > MAX_DESCRIPTION:
        raise InvalidInput(f"the description is {len(text)} characters; at most "
                           f"{MAX_DESCRIPTION}")
    return text


def make_skill(name: object, description: object, body: object) -> Skill:
    from refold.messages.validate import repair_text

    # lone surrogates (bytes that were not UTF-8) become U+FFFD: unwritable, they ended the
    # write in a UnicodeEncodeError
    if isinstance(description, str):
        description = repair_text(description)
    if isinstance(body, str):
        body = repair_text(body)
    if not isinstance(body, str) or not body.strip():
        raise InvalidInput("a skill needs a body: the steps, in Markdown")
    if len(body) > MAX_BODY:
        raise InvalidInput(f"the body is {len(body)} characters; at most {MAX_BODY}",
                           hint="move long material to references/ files")
    return Skill(check_name(name), check_description(description), body.strip("\n") + "\n")


def parse_skill(text: str, *, expected_name: str | None = None) -> Skill:
    """A SKILL.md text → ``Skill`` (``InvalidInput`` saying what is wrong)."""
    lines = text.replace("\r\n", "\n").split("\n")
    if not lines or lines[0].strip() != "---":
        raise InvalidInput("SKILL.md must start with a '---' front matter line")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise InvalidInput("the front matter has no closing '---' line") from None
    values: dict[str, str] = {}
    for number, line in enumerate(lines[1:end], start=2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _KEY.match(line)
        if match is None:
            raise InvalidInput(f"front matter line {number}: expected 'key: value', got "
                               f"{line.strip()[:60]!r}")
        key, raw = match.group(1), (match.group(2) or "").strip()
        if key in values:
            raise InvalidInput(f"front matter line {number}: {key!r} appears twice")
        values[key] = _unquote(raw, number)
    name = values.pop("name", None)
    if name is None:
        raise InvalidInput("the front matter has no 'name'")
    if expected_name is not None and name != expected_name:
        raise InvalidInput(f"the front matter names {name!r} but the skill is {expected_name!r}")
    skill = make_skill(name, values.pop("description", None), "\n".join(lines[end + 1:]))
    return Skill(skill.name, skill.description, skill.body, values)


def _unquote(raw: str, number: int) -> str:
    if raw[:1] == '"':
        try:
            value = json.loads(raw)
        except ValueError:
            raise InvalidInput(f"front matter line {number}: unterminated quoted value") from None
        if not isinstance(value, str):
            raise InvalidInput(f"front matter line {number}: expected a string")
        return value
    if raw[:1] == "'":
        if len(raw) < 2 or not raw.endswith("'"):
            raise InvalidInput(f"front matter line {number}: unterminated quoted value")
        return raw[1:-1].replace("''", "'")
    if raw[:1] in ("[", "{", "|", ">", "&", "*", "!"):
        raise InvalidInput(f"front matter line {number}: only plain one-line values are "
                           "supported", hint="quote the value")
    return raw


# a plain value: a letter or digit, then printable characters that start nothing in YAML (and
# no line break: \x85, \u2028 and \u2029 are line breaks there too)
_PLAIN = re.compile(r"[A-Za-z0-9][^:#\"'`{}\[\]&*!|>%@\x00-\x1f\x7f-\x9f\u2028\u2029"
                    r"\ud800-\udfff\ufeff\ufffe\uffff]*")
# YAML 1.1 (PyYAML) or 1.2 reads these as booleans or null, in one spelling or another
_NOT_TEXT = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})
# what a YAML double-quoted string may not hold as it is: characters outside YAML's printable
# set, and line breaks, which it folds into a space
_ESCAPE = re.compile(r"[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]")


def _quote(value: str) -> str:
    """Plain when YAML reads it back as this same string, else a JSON (= YAML double-quoted)
    string. Quoted: a value that begins with a digit and has no space (``123``, ``1.5``,
    ``0x1f``, ``1_000``, ``2024-01-01``: numbers and dates), a boolean or null word, or one
    that starts, ends or holds what a plain YAML value cannot."""
    if (_PLAIN.fullmatch(value) and value == value.strip() and value.lower() not in _NOT_TEXT
            and not (value[0].isdigit() and " " not in value)):
        return value
    return _ESCAPE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(value, ensure_ascii=False))


__all__ = ["MAX_BODY", "MAX_DESCRIPTION", "NAME", "Skill", "check_description", "check_name",
           "make_skill", "parse_skill"]
