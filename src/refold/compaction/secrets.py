"""Secrets out of summaries and out of what a summary model is sent.

A summary is stored as a checkpoint and sent with every later request, and an LLM summarizer
may be another provider than the one the session runs on: a token a user pasted once must not
travel on. ``redact`` replaces what looks like a credential with ``[REDACTED]`` and keeps the
rest (a key's name, a URL's host) so the text still reads. Patterns: API keys and tokens of
common providers (GitHub, OpenAI, Anthropic, AWS, Google, Slack, Stripe, Hugging Face, GitLab,
npm, PyPI), JWTs, bearer tokens, private key blocks, passwords in URLs, assignments
``password=…`` / ``"api_key": "…"``, credentials on a command line, and a password given in
words ("the admin password is hunter2", "密码是hunter2": ``PASSWORDS_SAID``, judged by
``literal_password``, the rule the memory scanner refuses an entry by, so "the secret is to
cache" and "password: see Vault" stay). Pure; same text, same result.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

MARK = "[REDACTED]"

_TOKENS = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,}|"
    r"sk-(?:ant-|proj-|svcacct-)?[A-Za-z0-9_-]{20,}|"
    r"(?:AKIA|ASIA)[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}|"
    r"xox[abposr]-[A-Za-z0-9-]{10,}|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}|"
    r"hf_[A-Za-z0-9]{30,}|glpat-[A-Za-z0-9_-]{20,}|npm_[A-Za-z0-9]{36}|"
    r"pypi-[A-Za-z0-9_-]{40,}|dckr_pat_[A-Za-z0-9_-]{20,}|"
    r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})")
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE "
                          r"KEY-----|\Z)", re.DOTALL)
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]+:)([^/\s@]+)(@)", re.IGNORECASE)
_BEARER = re.compile(r"(\b(?:Bearer|Token|Basic)\s+)([A-Za-z0-9._~+/=-]{12,})")
_NAME = r"""(?:["']?)\b[\w.-]*(?:{words})[\w.-]*["']?\s*[:=]\s*["']?"""
# a password is secret whatever it looks like; a "token" or "key" only when the value looks
# like one (max_tokens=4096 and key: value stay)
_PASSWORD = re.compile("(" + _NAME.format(words="password|passwd|pwd|secret") + ")"
                       + r"""([^\s"',;}{]{4,})""", re.IGNORECASE)
_KEYLIKE = re.compile("(" + _NAME.format(words=r"token|api[_-]?key|apikey|access[_-]?key|"
                                         r"private[_-]?key|auth") + ")"
                      + r"""((?=[^\s"',;}{]*\d)(?=[^\s"',;}{]*[A-Za-z])[^\s"',;}{]{12,})""",
                      re.IGNORECASE)

# Credentials on a command line, each pattern (kept, value[, kept]) with the words it cannot
# match without. A value is quoted or a run of non-space; one that starts with "$" is a
# variable's name, and "-" another flag (mysql's "-p" alone, "--password-stdin": no value).
_VALUE = r"""('(?!\$)[^'\n]+'|"(?!\$)[^"\n]+"|[^\s'"$-]\S*)"""
_COMMAND_AT = r"(?:^|(?<=[\s;&|(`'\"]))"  # a program name where a command starts, not in a path
_CLI_FORMS: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = (
    # mysql -pSECRET (attached: "-p secret" is a prompt and a database name)
    (("mysql", "mariadb"), re.compile(
        _COMMAND_AT + r"((?i:mysql|mariadb)(?:-?(?:dump|admin|import|check|show|slap))?"
        r"(?:[ \t][^\n;&|]*?)?[ \t]-p)" + _VALUE)),
    # curl -u user:SECRET, --user user:SECRET
    (("curl",), re.compile(_COMMAND_AT + r"(curl(?:[ \t][^\n;&|]*?)?[ \t](?:-u[ \t]*|--user[= \t][ \t]*)"
                                         r"""['"]?[^\s:'"]+:)([^\s'"]+)""")),
    # sshpass -p SECRET (its own options come before the command it runs)
    (("sshpass",), re.compile(
        _COMMAND_AT + r"(sshpass[ \t]+(?:-[fdP][ \t]*\S+[ \t]+|-[ev][ \t]+)*-p[ \t]*)" + _VALUE)),
    # docker login -p SECRET (and the other registry clients)
    (("login",), re.compile(
        _COMMAND_AT + r"((?:docker|podman|nerdctl|buildah|skopeo|helm[ \t]+registry)[ \t]+login"
        r"[ \t](?:[^\n;&|]*?[ \t])?-p[ \t]*)" + _VALUE)),
    # --password SECRET, --db-password SECRET, -password SECRET (with "=": _PASSWORD's)
    (("password", "passwd"), re.compile(
        r"((?<![\w-])--?(?:[\w-]*-)?(?i:password|passwd)[ \t]+)" + _VALUE)),
    # echo SECRET | docker login --password-stdin
    (("password-stdin",), re.compile(
        r"(\b(?:echo|printf)[ \t]+(?:-[ne]+[ \t]+)?)" + _VALUE
        + r"([ \t]*\|[^\n]*--password-stdin)")),
    # webhook URLs: the path after the fixed part is the credential
    (("hooks.slack.com", "discord"), re.compile(
        r"(https?://(?:hooks\.slack\.com/(?:services|workflows|triggers)/|"
        r"(?:[\w-]+\.)?discord(?:app)?\.com/api/webhooks/\d+/))([\w/+-]{8,})")),
    # an AWS secret access key after the word "secret" on its line: 40 characters of base64,
    # upper and lower case and a digit or "/" "+" (a hex digest has no upper case)
    (("secret",), re.compile(
        r"((?i:secret)[^\n]{0,80}?)(?<![A-Za-z0-9/+=])"
        r"((?=[A-Za-z0-9/+]{0,39}[A-Z])(?=[A-Za-z0-9/+]{0,39}[a-z])"
        r"(?=[A-Za-z0-9/+]{0,39}[0-9/+])[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])")),
)


# A password given in words: "the admin password is hunter2", "password=hunter2", "pwd: s3cr3t!",
# "vpn password hunter2", "密码是hunter2", "パスワードは hunter2". ``sep`` says how it was given
# ("=", ":", a verb, or a space), ``value`` is the candidate, judged by ``literal_password``.
# Each pattern's match starts at its name but the first's (a name's run of [\w.-] before it, on
# its line): ``_said_matches`` tries them only there.
_PW_NAME = r"(?:password|passwd|passphrase|pwd|secret)"
_PW_VALUE = r"""(?P<value>'[^'\n]{3,64}'|"[^"\n]{3,64}"|`[^`\n]{3,64}`|[^\s'"`,;]{4,128})"""
_PW_ASSIGNED = re.compile(
    r"(?<![\w.-])[\w.-]{0,40}?" + _PW_NAME + r"(?:[_-]?key)?[\"']?[ \t]*(?P<sep>[=:：])"
    r"(?![=:])[ \t]*" + _PW_VALUE, re.IGNORECASE)
_PW_IS = re.compile(
    r"\b" + _PW_NAME + r"(?:\s+(?:for|of|on|to)\s+(?:the\s+|my\s+|our\s+)?[\w.@-]+)?"
    r"\s+(?P<sep>is|was)\s+(?:still\s+|now\s+|just\s+)?" + _PW_VALUE, re.IGNORECASE)
_PW_SPACED = re.compile(r"\b(?:password|passwd|pwd)\s+(?P<sep>)" + _PW_VALUE, re.IGNORECASE)
_PW_CJK = re.compile(r"(?:密码|密碼|口令|パスワード)(?P<sep>是|为|為|は|[:：])\s*"
                     r"(?P<value>「[^」\n]{3,64}」|“[^”\n]{3,64}”|[!-~]{4,128})")
PASSWORDS_SAID: tuple[re.Pattern[str], ...] = (_PW_ASSIGNED, _PW_IS, _PW_SPACED, _PW_CJK)
_PW_NAMED = re.compile(_PW_NAME + r"(?:[_-]?key)?[\"']?[ \t]*[=:：](?![=:])", re.IGNORECASE)
# where a name starts (in the ASCII-lowered text; the CJK ones in the text itself)
_PW_STEMS = ("pass", "pwd", "secret")
_PW_CJK_NAMES = ("密码", "密碼", "口令", "パスワード")
# not a literal: a variable, a placeholder, a path, a URL (``credential_in`` has its password),
# an environment variable's name, the password manager
_PW_NOT_VALUE = re.compile(r"[$%{<~*]|\.{0,2}/|.*://|1password\b", re.IGNORECASE)
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
_PW_QUOTES = {"'": "'", '"': '"', "`": "`", "「": "」", "“": "”"}
_PW_TRAILING = ".,;:!?)]}。，、"
_MARKED = MARK[:-1]  # a value already redacted ("password=[REDACTED]" in an earlier summary)


def _lines_with(text: str, lowered: str, words: tuple[str, ...]) -> list[tuple[int, int]]:
    """The lines of ``text`` that hold one of ``words`` (found in ``lowered``), in order."""
    lines: set[tuple[int, int]] = set()
    for word in words:
        at = lowered.find(word)
        while at >= 0:
            end = _line_end(text, at)
            lines.add((text.rfind("\n", 0, at) + 1, end))
            at = lowered.find(word, end)
    return sorted(lines)


def _keep_name(match: re.Match[str]) -> str:
    return match.group(1) + MARK + match.string[match.end(2):match.end()]


def _cli_redact(text: str) -> str:
    """``text`` with the credentials of ``_CLI_FORMS`` replaced, each form tried only on the
    lines that hold one of its words."""
    lowered = text.lower()
    for words, pattern in _CLI_FORMS:
        if not any(w in lowered for w in words):
            continue
        if len(lowered) != len(text):  # a letter that lowers to two: offsets differ
            text = pattern.sub(_keep_name, text)
        else:
            parts, done = [], 0
            for start, end in _lines_with(text, lowered, words):
                parts += [text[done:start], pattern.sub(_keep_name, text[start:end])]
                done = end
            text = "".join(parts) + text[done:]
        lowered = text.lower()
    return text


def _cli_secrets(text: str, lowered: str) -> set[str]:
    """The values ``_CLI_FORMS`` find in ``text`` (at least 4 characters: each is replaced
    wherever it occurs), each form tried only on the lines that hold one of its words
    (``text`` may be a whole transcript)."""
    found: set[str] = set()
    whole = len(lowered) != len(text)  # a letter that lowers to two: offsets differ
    for words, pattern in _CLI_FORMS:
        if not any(w in lowered for w in words):
            continue
        spans = [(0, len(text))] if whole else _lines_with(text, lowered, words)
        for start, end in spans:
            found.update(m.group(2) for m in pattern.finditer(text, start, end)
                         if len(m.group(2).strip("'\"")) >= 4)
    return found


def literal_password(value: str, sep: str) -> bool:
    """Whether ``value`` (given after ``sep``: "=", ":", "is", a space) is a password itself
    rather than where one lives. Quoted: yes. Bare, it must not be a variable, a placeholder,
    a path, a URL or an environment variable's name; after "=" that is enough (a config line);
    after a space it needs letters and a digit and no "/" or "." (a command's argument, a file
    name); otherwise a digit or a symbol ("the secret is to cache" and "password: see Vault"
    are prose, "password is hunter2" is not)."""
    if value[:1] in "'\"`「“":
        inner = value[1:-1].strip()
        return bool(inner) and _PW_NOT_VALUE.match(inner) is None
    value = value.rstrip(_PW_TRAILING)
    if len(value) < 4 or _PW_NOT_VALUE.match(value) or _ENV_NAME.fullmatch(value):
        return False
    if sep == "=":
        return True
    if not sep.strip():
        return (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)
                and not any(c in value for c in "/."))
    return any(c.isdigit() or not (c.isalnum() or c in "-'’") for c in value)


def said_value(match: re.Match[str]) -> tuple[int, int] | None:
    """Where the password a match of ``PASSWORDS_SAID`` gives is in its text (inside the
    quotes; a bare one without the punctuation after it), or None when its value is no literal
    password (``literal_password``)."""
    value, start = match.group("value"), match.start("value")
    if not literal_password(value, match.group("sep")):
        return None
    if value[0] in _PW_QUOTES:
        close = value.find(_PW_QUOTES[value[0]], 1)
        inner = value[1:close if close > 0 else len(value)]
        lead = len(inner) - len(inner.lstrip())
        start += 1 + lead
        return start, start + len(inner.strip())
    return start, start + len(value.rstrip(_PW_TRAILING))


def _places(text: str, words: tuple[str, ...]) -> list[tuple[int, int]]:
    """Where each of ``words`` starts in ``text``, in order (as ``_whole_at`` takes them)."""
    places = []
    for word in words:
        at = text.find(word)
        while at >= 0:
            places.append((at, at + len(word)))
            at = text.find(word, at + 1)
    return sorted(places)


def _said_matches(text: str, lowered: str | None) -> Iterator[re.Match[str]]:
    """Each of ``PASSWORDS_SAID``'s ``finditer`` matches in ``text``, each pattern tried only
    where it can match: the first on the lines where a name is followed by its separator,
    the others at a name's places (a transcript is megabytes; "pass" is on every line of a
    test run). ``lowered`` is ``_ascii_lowered(text)``; where that is None (a
    letter IGNORECASE folds to ASCII is in ``text``: a pasted source file may hold one), those
    letters are made the ASCII ones first, every offset kept."""
    if lowered is None:
        folded = text
        for letter, ascii_letter in zip(_FOLDED_TO_ASCII, _FOLDED_AS, strict=True):
            folded = folded.replace(letter, ascii_letter)
        lowered = folded.lower()
    places = _places(lowered, _PW_STEMS)
    named = _PW_NAMED.match  # the first's name and separator, where its name is
    lines = sorted({(text.rfind("\n", 0, at) + 1, _line_end(text, at))
                    for at, _ in places if named(text, at)})
    for start, end in lines:
        yield from _PW_ASSIGNED.finditer(text, start, end)
    yield from _whole_at(_PW_IS, places, text)
    yield from _whole_at(_PW_SPACED, places, text)
    if not text.isascii():
        yield from _whole_at(_PW_CJK, _places(text, _PW_CJK_NAMES), text)


def _said_spans(text: str, lowered: str | None) -> list[tuple[int, int]]:
    """Where the passwords ``text`` gives in words are, in order, but those already redacted
    (two patterns' may overlap: "password pwd=hunter22")."""
    return sorted(span for span in map(said_value, _said_matches(text, lowered))
                  if span is not None and _MARKED not in text[span[0]:span[1]])


def password_said(text: str) -> bool:
    """Whether ``text`` gives a literal password in words ("the admin password is hunter2",
    "password=hunter2", "密码是hunter2"; not "the secret is to cache")."""
    return any(span is not None for span in map(said_value,
                                                 _said_matches(text, _ascii_lowered(text))))


def _redact_said(text: str) -> str:
    """``text`` with each password it gives in words replaced, the words around kept."""
    parts, done = [], 0
    for start, end in _said_spans(text, _ascii_lowered(text)):
        if start >= done:
            parts += [text[done:start], MARK]
        done = max(done, end)  # one that overlaps the last: its MARK covers it
    return "".join(parts) + text[done:] if parts else text


def credential_in(text: str) -> str | None:
    """What literal credential ``text`` holds, by its unmistakable forms only (a provider's
    token or key, a private key block, a password inside a URL), or None. The name-based
    forms ``redact`` also replaces (``secret: …``) are left out: "Secrets: kept in Vault" is a
    fine note, not a secret."""
    if not text:
        return None
    if _PRIVATE_KEY.search(text):
        return "a private key"
    if _TOKENS.search(text):
        return "an API key or token"
    if _URL_PASSWORD.search(text):
        return "a password in a URL"
    return None


def redact(text: str) -> str:
    """``text`` with credentials replaced by ``[REDACTED]``."""
    if not text:
        return text
    text = _redact_said(text)
    text = _PRIVATE_KEY.sub(MARK, text)
    text = _TOKENS.sub(MARK, text)
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + MARK + m.group(3), text)
    text = _BEARER.sub(lambda m: m.group(1) + MARK, text)
    for pattern in (_PASSWORD, _KEYLIKE):
        text = pattern.sub(lambda m: m.group(1) + MARK, text)
    return _cli_redact(text)


def secrets_in(text: str) -> set[str]:
    """The credentials ``redact`` would replace in ``text`` (the values only, without the name
    or URL around them): what a piece cut out of the text without that context — an anchor,
    a path-like token — must not carry either."""
    found: set[str] = set()
    if not text:
        return found
    found.update(m.group(0) for m in _PRIVATE_KEY.finditer(text))
    return found | _unkeyed_secrets(text)


def secrets_in_texts(texts: Iterable[str]) -> set[str]:
    """``secrets_in`` of each of ``texts`` (every message of a span), together: scanned as one
    text where no pattern but the private key block's can cross from one to the next (they
    are joined by a line holding "}", which no name or separator takes, nor a value: none
    holds a line break, and "}" alone is too short), so its cost is one scan, not one per
    message."""
    texts = [t for t in texts if t]
    found: set[str] = set()
    for text in texts:
        if "-----BEGIN" in text:  # a block runs to its text's end when it has no END line
            found.update(m.group(0) for m in _PRIVATE_KEY.finditer(text))
    return found | _unkeyed_secrets(_SEPARATE.join(texts))


_SEPARATE = "\n}\n"


def _unkeyed_secrets(text: str) -> set[str]:
    """What every pattern but the private key block's finds in ``text``."""
    lowered = _ascii_lowered(text)
    if lowered is None:  # a letter IGNORECASE folds to ASCII: each pattern's own scan
        found: set[str] = {m.group(0) for m in _TOKENS.finditer(text)}
        for valued, trigger in _TRIGGERED:
            found.update(m.group(2) for m in _near(
                valued, [m.span() for m in trigger.finditer(text)], text))
        return found | _cli_secrets(text, text.lower()) | _said_secrets(text, None)
    starts = _trigger_starts(text, lowered)
    found = {m.group(0) for m in _whole_at(_TOKENS, starts["token"], text)}
    for valued, kind in ((_URL_PASSWORD, "url"), (_BEARER, "bearer"), (_PASSWORD, "password"),
                         (_KEYLIKE, "key")):
        found.update(m.group(2) for m in _near(valued, starts[kind], text))
    return found | _cli_secrets(text, lowered) | _said_secrets(text, lowered)


def _said_secrets(text: str, lowered: str | None) -> set[str]:
    """The passwords ``text`` gives in words, of 4 characters or more (each is replaced
    wherever it occurs, as ``_cli_secrets``'s)."""
    return {text[start:end] for start, end in _said_spans(text, lowered) if end - start >= 4}


# What each pattern cannot match without: a provider token's prefix, a name's word, "://" for
# a URL. A whole transcript is scanned (secrets_in gets every message of a summarized span:
# megabytes), and the named patterns' names may start anywhere in a word ([\w.-]* before the
# word), which made their scans of all of it cost seconds per million tokens; a pattern is
# tried only where its trigger is. The triggers are found in one pass over a copy lowered in
# ASCII (every offset kept; a case-insensitive search is itself slow) unless the text holds
# one of the letters that re's IGNORECASE also folds to an ASCII one (long s, Kelvin sign,
# dotted and dotless i): then each pattern's trigger is searched as the pattern itself does.
_PASSWORD_WORDS = "password|passwd|pwd|secret"
_KEY_WORDS = r"token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|auth"
_TRIGGERED: tuple[tuple[re.Pattern[str], re.Pattern[str]], ...] = (
    (_URL_PASSWORD, re.compile("://")),
    (_BEARER, re.compile("Bearer|Token|Basic")),
    (_PASSWORD, re.compile(_PASSWORD_WORDS, re.IGNORECASE)),
    (_KEYLIKE, re.compile(_KEY_WORDS, re.IGNORECASE)),
)
# every trigger, in lower case; no two kinds' words begin alike, so the kind of a place is the
# group that matched there ("token" is also _BEARER's "Token" where the text has that case)
_ANY_TRIGGER = re.compile(
    r"(?P<token>gh[pousr]_|github_pat_|sk-|[srp]k_(?:live|test)_|akia|asia|aiza|"
    r"xox[abposr]-|hf_|glpat-|npm_|pypi-|dckr_pat_|eyj)"
    f"|(?P<password>{_PASSWORD_WORDS})|(?P<key>{_KEY_WORDS})|(?P<bearer>bearer|basic)")
_BEARER_WORDS = ("Bearer", "Token", "Basic")
# where each of _ANY_TRIGGER's words can start: one of these is there (no two at one place)
_TRIGGER_STEMS = ("gh", "github_pat_", "sk", "rk_", "pk_", "akia", "asia", "aiza", "xox", "hf_", "glpat-",
                  "npm_", "pypi-", "dckr_pat_", "eyj", "passw", "pwd", "secret", "token", "api", "access",
                  "private", "auth", "bearer", "basic")
_FOLDED_TO_ASCII = "\u017f\u212a\u0130\u0131"
_FOLDED_AS = "skii"  # the ASCII letter each of them matches
# what may follow a name's word before its value starts (the rest of the name, a quote, white
# space of any lines, ":" or "=")
_BEFORE_VALUE = re.compile(r"""[\w.-]*["']?\s*(?:[:=]\s*["']?)?""")


def _trigger_starts(text: str, lowered: str) -> dict[str, list[tuple[int, int]]]:
    """Each kind's trigger places, as its own trigger's ``finditer`` gives them: every place
    where a trigger starts is found (each stem's every place, so one kind's word never hides
    another's inside it), then each kind's are kept where they do not overlap the one before."""
    by_kind: dict[str, list[tuple[int, int]]] = {
        "url": [], "token": [], "password": [], "key": [], "bearer": []}
    at = text.find("://")
    while at >= 0:
        by_kind["url"].append((at, at + 3))
        at = text.find("://", at + 3)
    places: list[int] = []
    for stem in _TRIGGER_STEMS:  # str.find: the alternation's search is far slower
        at = lowered.find(stem)
        while at >= 0:
            places.append(at)
            at = lowered.find(stem, at + 1)
    places.sort()
    ends = dict.fromkeys(by_kind, 0)
    trigger_at = _ANY_TRIGGER.match
    for start in places:
        match = trigger_at(lowered, start)
        if match is None:
            continue
        kind = match.lastgroup or ""
        end = match.end()
        if kind != "bearer" and start >= ends[kind]:
            by_kind[kind].append((start, end))
            ends[kind] = end
        if kind in ("key", "bearer") and start >= ends["bearer"] \
                and text.startswith(_BEARER_WORDS, start):  # "Token", not "token" or "TOKEN"
            by_kind["bearer"].append((start, end))
            ends["bearer"] = end
    return by_kind


def _whole_at(pattern: re.Pattern[str], starts: list[tuple[int, int]],
              text: str) -> Iterator[re.Match[str]]:
    """``pattern.finditer(text)``'s matches where each must start at one of ``starts``."""
    done = 0
    for start, _ in starts:
        if start >= done:
            match = pattern.match(text, start)
            if match is not None:
                yield match
                done = match.end()


def _line_end(text: str, at: int) -> int:
    end = text.find("\n", at)
    return len(text) if end < 0 else end


def _ascii_lowered(text: str) -> str | None:
    """``text`` in lower case with every offset kept, where only ASCII letters lower to ASCII
    ones; None where a letter IGNORECASE folds to ASCII is in it. (``str.lower`` keeps the
    length of every character but U+0130, and lowers none to ASCII but U+212A: both are
    among those letters. It is ~10x faster than ``translate`` with a table.)"""
    if not text.isascii() and any(c in text for c in _FOLDED_TO_ASCII):
        return None
    return text.lower()


def _near(pattern: re.Pattern[str], hits: list[tuple[int, int]],
          text: str) -> list[re.Match[str]]:
    """``pattern.finditer(text)``'s matches, looked for only around ``hits`` (where its word
    is): a match starts on the line of its word (nothing before the word crosses a line) and
    ends on the line where its value starts (a value holds no white space), which may be lines
    on; one cut short there is matched again to its end."""
    out: list[re.Match[str]] = []
    done = 0  # where the last match ended: matches do not overlap, as finditer's
    for hit_start, hit_end in hits:
        if hit_start < done:
            continue
        start = max(text.rfind("\n", 0, hit_start) + 1, done)
        end = _line_end(text, hit_end)
        while end < len(text) and _BEFORE_VALUE.fullmatch(text, hit_end, end):
            end = _line_end(text, end + 1)  # no value yet: it may come lines on
        match = pattern.search(text, start, end)
        while match is not None and match.end() <= hit_start:
            match = pattern.search(text, match.end(), end)  # one before this trigger's
        if match is None:
            continue
        if match.end() == end and end < len(text):
            match = pattern.match(text, match.start()) or match  # cut at the reach: whole
        out.append(match)
        done = match.end()
    return out


def without_secrets(pieces: list[str], secrets: set[str]) -> list[str]:
    """``pieces`` (short texts cut out of a transcript) redacted, with the credentials the
    whole text held (``secrets_in``) replaced in them, and a piece that is part of one left
    out."""
    out = []
    for piece in pieces:
        piece = redact(piece)
        for secret in secrets:
            if len(piece) >= 4 and piece in secret:
                piece = ""
            elif secret in piece:
                piece = piece.replace(secret, MARK)
        if piece:
            out.append(piece)
    return out


__all__ = ["MARK", "PASSWORDS_SAID", "credential_in", "literal_password", "password_said",
           "redact", "said_value", "secrets_in", "secrets_in_texts", "without_secrets"]
