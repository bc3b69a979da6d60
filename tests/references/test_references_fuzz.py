"""Any text with references in it: an expansion or a RefoldError, never another exception.

Fuzzing found two: a lone surrogate in a reference ("@file:\\ud800", which JSON allows) raised
UnicodeEncodeError where paths and counts need UTF-8, and "@file:~someone/x" for a user the
machine does not know raised RuntimeError from ``expanduser``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.errors import RefoldError
from refold.references.expand import expand_message, local_expander
from refold.store.sqlite import SQLiteStore

PIECES = ["@file:", "@folder:", "@session:", "@diff", "@staged", "@git:", "@url:", "a.txt",
          "sub/", "../", "/etc/passwd", "~", "~root/", "~nobody-here-xyz/x", "alpha", '"a b"',
          ":1-3", ":99999999999", ":-1", "\x00", "\ud800", "\udfff", "`", "@", "@@", " ", "\n",
          "💥", "中文", "a.txt:2-1", "sub/b.py:0", "http://x", "*", "..", "%2e%2e/"]


@pytest.fixture
def expander(tmp_path: Path):  # type: ignore[no-untyped-def]
    (tmp_path / "a.txt").write_text("hello\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("x = 1\n", encoding="utf-8")
    store = SQLiteStore(str(tmp_path / "refold.db"))
    session = store.create_session(title="alpha")
    store.append_messages(session.id, [{"role": "user", "content": "hi"}])
    yield local_expander(store=store, cwd=tmp_path)
    store.close()


def test_the_two_found_cases_are_refused_cleanly(expander) -> None:  # type: ignore[no-untyped-def]
    for text in ("read @file:\ud800", "see @file:~nobody-here-xyz/x", "@folder:\ud800"):
        message, expansion = expand_message(expander, {"role": "user", "content": text},
                                            context_length=8000)
        assert message["content"].startswith(text)  # the message goes on as sent
        assert expansion is not None and expansion.warnings


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(st.sampled_from(PIECES), min_size=1, max_size=6),
       window=st.sampled_from([1, 50, 8000]), as_parts=st.booleans())
def test_any_text_expands_or_is_refused(expander, pieces: list[str], window: int,  # type: ignore[no-untyped-def]
                                        as_parts: bool) -> None:
    text = "".join(pieces)
    content = [{"type": "text", "text": text}] if as_parts else text
    with contextlib.suppress(RefoldError):
        expand_message(expander, {"role": "user", "content": content}, context_length=window)
