"""Credentials on a command line (``mysql -pX``, ``curl -u user:X``, ``sshpass -p X``,
``--password X``, ``echo X | docker login --password-stdin``), webhook URLs and a bare AWS
secret key stay out of summaries and anchors; ordinary flags (``-p 8080``, ``pip install -e``)
are left alone."""

from __future__ import annotations

import json
from typing import Any

import pytest

from refold.compaction import compact
from refold.compaction.secrets import MARK, redact, secrets_in, secrets_in_texts

LEAKS = [
    ("mysql -u root -pS3cretPassw0rd! -h db.internal prod", "S3cretPassw0rd!"),
    ("mysqldump -uroot -p'my pass 42' shop > dump.sql", "my pass 42"),
    ("mariadb -pMar1aPass db", "Mar1aPass"),
    ("curl -u deploy:Tr0ub4dor3xyz https://api.internal.example.com/v1/deploy", "Tr0ub4dor3xyz"),
    ("curl -sS --user 'ci:b0bpassword' https://x.example.com", "b0bpassword"),
    ("sshpass -p 'Winter2024!x' ssh admin@10.0.0.5 uptime", "Winter2024!x"),
    ("docker login -u bot --password dckr_pat_2b3e36beeb386dfdaacb9b46004ccb7c registry.io",
     "dckr_pat_2b3e36beeb386dfdaacb9b46004ccb7c"),
    ("docker login -u bot -p hunter2hunter registry.example.com", "hunter2hunter"),
    ("echo hunter3hunter | docker login -u bot --password-stdin", "hunter3hunter"),
    ("myapp --db-password hunter22 --port 5", "hunter22"),
    ("PGPASSWORD=pgS3cret psql -h db -U app", "pgS3cret"),
    ("docker run -e POSTGRES_PASSWORD=pgS3cret2 postgres", "pgS3cret2"),
    ("curl -X POST https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
     "XXXXXXXXXXXXXXXXXXXXXXXX"),
    ("https://discord.com/api/webhooks/123456789/abcdefghijklmnopqrstuvwxyz_-12",
     "abcdefghijklmnopqrstuvwxyz_-12"),
    ("the AWS secret key is wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY, region us-east-1",
     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
]

KEPT = [
    "docker run -p 8080:80 nginx",
    "docker run --name mysql -p 3306:3306 mysql:8",
    "mysql -u root -p shop",  # "-p" alone: mysql asks for the password
    "python -m http.server -p 8080",
    "pip install -e .[dev]",
    "pytest -p no:cacheprovider -q",
    "sshpass -f pw.txt ssh -p 2222 host",
    "curl -u deploy https://x.example.com",  # no password given: curl asks
    "find . -name '*mysql*' -print",
    "echo \"$PAT\" | docker login -u bot --password-stdin",
    "myapp --password-file /etc/app/pw",
    "git commit -m 'secret rotation' && git log -1",
    "secret commit 3f786850e387550fdab836ed7e6dc881de23001b",
]


@pytest.mark.parametrize(("text", "secret"), LEAKS)
def test_a_command_line_credential_is_redacted(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out and MARK in out
    assert any(secret in found for found in secrets_in(text))


@pytest.mark.parametrize("text", KEPT)
def test_ordinary_flags_are_left_alone(text: str) -> None:
    assert redact(text) == text
    assert secrets_in(text) == set()


def test_values_are_found_in_a_whole_transcript_on_their_own_lines() -> None:
    found = secrets_in_texts(["ran it\nmysql -pXyzzy1234 shop", "curl -u ci:Pw1234567 https://h"])
    assert {"Xyzzy1234", "Pw1234567"} <= found


def _call(i: int, command: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": "", "tool_calls": [{
        "id": f"c{i}", "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": "ok\n" + "x\n" * 400}]


def test_no_command_line_credential_reaches_the_builtin_summary() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "agent"},
        {"role": "user", "content": "Deploy the service to production and verify it."}]
    for i, (command, _) in enumerate(LEAKS):
        msgs += _call(i, command)
    for j in range(6):
        msgs += _call(100 + j, f"echo {j}")
    report = compact(msgs, context_length=6000).report
    assert report.status == "ok" and report.summary
    leaked = [secret for _, secret in LEAKS if secret in report.summary]
    assert leaked == []
