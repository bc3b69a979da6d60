"""A password given in words ("the admin password is hunter2", "密码是hunter2") is redacted in
what an LLM summarizer is sent, in summaries and in anchors: the memory scanner recognized it
and refused such an entry, but ``redact`` / ``secrets_in`` did not, so the summary model was
sent it and the builtin summary kept it. One recognizer serves both now
(``secrets.password_said``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from agent_transcript import agent_transcript

from refold.compaction import secrets
from refold.compaction.core import compact
from refold.compaction.llm_summarizer import LLMSummarizer, clean_input
from refold.compaction.policy import CompactionPolicy
from refold.compaction.secrets import MARK, redact, secrets_in, secrets_in_texts
from refold.llm import HttpChatClient
from refold.memory.scan import scan_entry
from refold.testing import RunningLLM, serve
from refold.tokens import get_counter

POLICY = CompactionPolicy(output_reserve_tokens=0)
COUNTER = get_counter("gpt-4o")

# (text, what redact makes of it, the value secrets_in reports)
SAID = [
    ("the admin password is hunter2 ok", "the admin password is [REDACTED] ok", "hunter2"),
    ("the db password is Tr0ub4dor&3.", "the db password is [REDACTED].", "Tr0ub4dor&3"),
    ("Forever: the admin password is hunter2.", "Forever: the admin password is [REDACTED].",
     "hunter2"),
    ("the password for the vpn was still s3cr3t!", "the password for the vpn was still "
     "[REDACTED]!", "s3cr3t"),
    ("The wifi password is 'swordfish'.", "The wifi password is '[REDACTED]'.", "swordfish"),
    ("the vpn password hunter2x", "the vpn password [REDACTED]", "hunter2x"),
    ("pwd hunter2x", "pwd [REDACTED]", "hunter2x"),
    ("The secret is abc123.", "The secret is [REDACTED].", "abc123"),
    ("passwd: s3cret!", "passwd: [REDACTED]", "s3cret!"),
    ("vpn 的密码是hunter2", "vpn 的密码是[REDACTED]", "hunter2"),
    ("数据库密码是 Zh4ngSan!88，别告诉别人", "数据库密码是 [REDACTED]，别告诉别人", "Zh4ngSan!88"),
    ("密碼為「abc 123」", "密碼為「[REDACTED]」", "abc 123"),
    ("口令：Winter2024", "口令：[REDACTED]", "Winter2024"),
    ("パスワードは hunter2 です", "パスワードは [REDACTED] です", "hunter2"),
]

# prose about a password, and where one lives: the memory scanner's own fine notes
PROSE = [
    "The secret is to cache aggressively.",
    "the secret is to cache",
    "password: see Vault",
    "password: see the 1Password item 'Deploy Bot'",
    "Password is in 1Password.",
    "the password is $DB_PASSWORD",
    "its HMAC secret is GITHUB_WEBHOOK_SECRET in the env",
    "Password policy: at least 14 characters, rotated every 90 days.",
    "The password is required.",
    "The password was rotated yesterday.",
    "run pwd to see the directory",
    "パスワードは RESTIC_PASSWORD_FILE で指定する。",
    "密码是在保险库里",
    "密码是什么？",
]


@pytest.mark.parametrize(("text", "redacted", "value"), SAID)
def test_a_password_given_in_words_is_redacted_and_reported(text: str, redacted: str,
                                                           value: str) -> None:
    assert redact(text) == redacted
    assert value in secrets_in(text)
    assert value in secrets_in_texts(["ok", text, "next"])
    assert redact(redacted) == redacted  # a redacted text stays as it is
    # the memory scanner refuses it by the same rule
    assert secrets.password_said(text)
    assert (scan_entry(text) or "").startswith("credential: a password")


@pytest.mark.parametrize("text", PROSE)
def test_prose_about_a_password_is_left_alone(text: str) -> None:
    assert redact(text) == text
    assert secrets_in(text) == set()
    assert not secrets.password_said(text)
    assert scan_entry(text) is None


def test_the_memory_review_transcript_is_redacted_too() -> None:
    from refold.memory.review import _transcript

    sent = _transcript([{"role": "user", "content": "the admin password is hunter2, ok?"},
                        {"role": "assistant", "content": "密码是Zh4ngSan!88 noted"}])
    assert "hunter2" not in sent and "Zh4ngSan" not in sent
    assert "the admin password is [REDACTED], ok?" in sent and f"密码是{MARK} noted" in sent
    assert clean_input("my password is hunter2") == "my password is [REDACTED]"


# -- on a real path: a compaction of a conversation where the user gives passwords in words ----

PASSWORD, CHINESE = "Tr0ub4dor&3", "Zh4ngSan!88"


def said_transcript() -> list[dict[str, Any]]:
    msgs = agent_transcript(24)
    msgs[1] = {"role": "user", "content": "Fix the login bug in src/app/login.py. The db "
                                          f"password is {PASSWORD} and 密码是{CHINESE}. The "
                                          "API runs on localhost:8080."}
    return msgs


def _compact(msgs: list[dict[str, Any]], summarizer: Any = None) -> Any:
    kw = {"summarizer": summarizer} if summarizer is not None else {}
    return compact(msgs, context_length=16_000, policy=POLICY, counter=COUNTER, model="gpt-4o",
                   **kw)


def test_the_builtin_summary_does_not_keep_a_password_given_in_words() -> None:
    out = _compact(said_transcript())
    assert out.report.status == "ok"
    summary = out.report.summary or ""
    assert PASSWORD not in summary and CHINESE not in summary
    assert not any(PASSWORD in str(a) or CHINESE in str(a) for a in out.report.anchors)
    assert "The db password is [REDACTED]" in summary  # the words around it still read
    assert "localhost:8080" in summary


@pytest.fixture(scope="module")
def server() -> Iterator[RunningLLM]:
    with serve() as s:
        yield s


def test_the_summary_model_is_not_sent_a_password_given_in_words(server: RunningLLM) -> None:
    with HttpChatClient(server.base_url) as client:
        for cache_friendly in (False, True):
            server.llm.requests.clear()
            server.llm.push("## Goal\n- Fix the login bug\n\n## Next Steps\n- add logging")
            out = _compact(said_transcript(), LLMSummarizer(client, "aux",
                                                            cache_friendly=cache_friendly))
            assert out.report.status == "ok", out.report.reason
            sent = json.dumps(server.llm.requests[0]["messages"], ensure_ascii=False)
            assert PASSWORD not in sent and CHINESE not in sent
            assert "The db password is [REDACTED] and 密码是[REDACTED]." in sent
