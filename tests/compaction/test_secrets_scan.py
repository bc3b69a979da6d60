"""``secrets_in`` scans a whole summarized span (megabytes) by looking for each valued
pattern only around its word; it must find exactly what the patterns' plain scan finds."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from refold.compaction import secrets as S

PIECES = ["export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
          "password: hunter22", "db_password =\n\n  s3cr3tValue",
          "curl -H 'Authorization: Bearer abcdefghijklmnop1234' https://x",
          "postgres://user:pa55word@db:5432/x", 'api_key="abc123def456ghi789"',
          "my secret is out", "token count 4096", "auth_token: A1b2C3d4E5f6G7h8",
          " secret=" + "y" * 3000, "SECRET_KEY='abcd' and password=p4ssw0rd! Token zzzzzzzzzzz1",
          "pwd\n=\n\n\n\n\nvalue1234", "PA\u017f\u017fWORD=abcdefgh", "密码 password=中文密码1234",
          "\u0130 apiKey: Zz9Yy8Xx7Ww6Vv5", "TOKEN=ABCDEF123456GHIJ", "\n", " ", "é",
          "tests/test_mod.py::test_case FAILED AssertionError: 1 != 2",
          # provider tokens and the triggers of one kind inside another's word
          "ghp_" + "a1B2" * 9, "github_pat_" + "x_Y9" * 11, "sk-proj-" + "Ab3-" * 6,
          "AKIAIOSFODNN7EXAMPLE", "akiaiosfodnn7example", "xoxb-1234567890-abc", "hf_" + "q" * 31,
          "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlX2hlcmU",
          "Basic dXNlcjpwYXNzd29yZA==", "bearer abcdefghijklmnop1234", "task-list", "sk_live_",
          "MyTokenizer=abc123def456ghi", "passwordtoken=abcd1234efgh5678", "secretoken: x1y2z3w4v5u6t7",
          "pk_test_" + "Z" * 20, "-", "_", ":", "=", "Token", "TOKEN", "Auth",
          # credentials on a command line
          "mysql -u root -pS3cretPassw0rd!", "curl -u deploy:Tr0ub4dor3xyz https://x",
          "sshpass -p 'Winter2024!x' ssh host", "--password", " hunter2x", "| docker login "
          "--password-stdin", "echo dckr_pat_abcdefghijklmnopqrstuv", "mysql -p",
          "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXX",
          # passwords given in words, and prose that is none
          "the admin password is hunter2", "vpn password hunter2x", "Password was 'swordfish'",
          "密码是hunter2", "パスワードは「abc 123」", "口令：Zh4ng!88", "the secret is to cache",
          "password: see Vault", "pwd=", " is ", "password=[REDACTED]", "password pwd=abcd1234"]


def plain_scan(text: str) -> set[str]:
    found: set[str] = set()
    for whole in (S._PRIVATE_KEY, S._TOKENS):
        found.update(m.group(0) for m in whole.finditer(text))
    for valued in (S._URL_PASSWORD, S._BEARER, S._PASSWORD, S._KEYLIKE):
        found.update(m.group(2) for m in valued.finditer(text))
    for _words, form in S._CLI_FORMS:  # credentials on a command line (4+ characters)
        found.update(m.group(2) for m in form.finditer(text) if len(m.group(2).strip("'\"")) >= 4)
    for said in S.PASSWORDS_SAID:  # passwords given in words (4+ characters, not redacted)
        for match in said.finditer(text):
            span = S.said_value(match)
            if span is not None and span[1] - span[0] >= 4 and S.MARK[:-1] not in text[slice(*span)]:
                found.add(text[slice(*span)])
    return found


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(PIECES) | st.text(max_size=12), max_size=14),
       st.sampled_from(["", " ", "\n"]))
@example(["pwd"] + ["\n"] * 12 + ["=", "\n\n", "value1234"], "")  # the value lines on
@example(["PA\u017f\u017fWORD=abcdefgh"], "")  # a long s: IGNORECASE folds it to s
@example(["the secret for", "\n", "my.db", "\n", "is", "\n\n", "Tr0ub4dor&3"], "")  # "is" lines on
@example(["PA\u017f\u017fWORD is hunter2"], "")
def test_secrets_in_finds_what_the_plain_scan_finds(pieces: list[str], joint: str) -> None:
    text = joint.join(pieces)
    assert S.secrets_in(text) == plain_scan(text)


KEY_PIECES = [*PIECES, "-----BEGIN RSA PRIVATE KEY-----\nMIIE", "-----END RSA PRIVATE KEY-----",
              "}"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(KEY_PIECES)
                         | st.text(max_size=10), max_size=6).map("".join), max_size=8))
@example(["password:", "hunter22"])  # a name ending one message: the next is no value of it
@example(["the password is", "hunter22"])
@example(["密码是", "hunter22"])
@example(["-----BEGIN RSA PRIVATE KEY-----\nMIIE", "b", "-----END RSA PRIVATE KEY-----"])
def test_the_texts_of_a_span_together_give_what_each_gives(texts: list[str]) -> None:
    want: set[str] = set()
    for text in texts:
        want |= plain_scan(text)
    assert S.secrets_in_texts(texts) == want
