"""Secrets out of summaries and out of what a summary model is sent.

A summary is stored as a checkpoint and sent with every later request, and an LLM summarizer
may be another provider than the one the session runs on: a token a user pasted once must not
travel on. ``redact`` replaces what looks like a credential with ``[REDACTED]`` and keeps the
rest (a key's name, a URL's host) so the text still reads. Patterns: API keys and tokens of
common providers (GitHub, OpenAI, Anthropic, AWS, Google, Slack, Stripe, Hugging Face, GitLab,
npm, PyPI), JWTs, bearer tokens, private key blocks, passwords in URLs, and assignments
``password=…`` / ``"api_key": "…"``. Pure; same text, same result.
"""

from __future__ import annotations

import re

MARK = "[REDACTED]"

_TOKENS = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,}|"
    r"sk-(?:ant-|proj-|svcacct-)?[A-Za-z0-9_-]{20,}|"
    r"(?:AKIA|ASIA)[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}|"
    r"xox[abposr]-[A-Za-z0-9-]{10,}|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}|"
    r"hf_[A-Za-z0-9]{30,}|glpat-[A-Za-z0-9_-]{20,}|npm_[A-Za-z0-9]{36}|"
    r"pypi-[A-Za-z0-9_-]{40,}|"
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
    text = _PRIVATE_KEY.sub(MARK, text)
    text = _TOKENS.sub(MARK, text)
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + MARK + m.group(3), text)
    text = _BEARER.sub(lambda m: m.group(1) + MARK, text)
    for pattern in (_PASSWORD, _KEYLIKE):
        text = pattern.sub(lambda m: m.group(1) + MARK, text)
    return text


def secrets_in(text: str) -> set[str]:
    """The credentials ``redact`` would replace in ``text`` (the values only, without the name
    or URL around them): what a piece cut out of the text without that context — an anchor,
    a path-like token — must not carry either."""
    found: set[str] = set()
    if not text:
        return found
    for whole in (_PRIVATE_KEY, _TOKENS):
        found.update(m.group(0) for m in whole.finditer(text))
    for valued in (_URL_PASSWORD, _BEARER, _PASSWORD, _KEYLIKE):
        found.update(m.group(2) for m in valued.finditer(text))
    return found


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


__all__ = ["MARK", "credential_in", "redact", "secrets_in", "without_secrets"]
