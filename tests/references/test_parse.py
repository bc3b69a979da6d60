"""Parsing ``@`` references: what counts as one, and what stays ordinary text."""

from __future__ import annotations

from refold.references import parse_references


def kinds(text: str) -> list[tuple[str, str]]:
    return [(r.kind, r.target) for r in parse_references(text)]


def test_each_kind_is_found_in_order() -> None:
    text = ("see @session:lin, @file:src/app.py, @folder:docs; @diff @staged "
            "@git:HEAD~2 and @url:https://example.com/a?b=1.")
    assert kinds(text) == [("session", "lin"), ("file", "src/app.py"), ("folder", "docs"),
                           ("diff", ""), ("staged", ""), ("git", "HEAD~2"),
                           ("url", "https://example.com/a?b=1")]


def test_line_ranges_and_quoted_paths() -> None:
    refs = parse_references('@file:a.py:10-20 @file:b.py:7 @file:"my notes.md":3-4.')
    assert [(r.target, r.line_start, r.line_end) for r in refs] == [
        ("a.py", 10, 20), ("b.py", 7, 7), ("my notes.md", 3, 4)]
    assert refs[2].raw == '@file:"my notes.md":3-4'


def test_ordinary_text_is_not_a_reference() -> None:
    assert kinds("mail me@file:x or bob@diff.org, a/@diff, @user:bob, @differ, @") == []
    assert kinds("no at sign here") == []


def test_unbalanced_brackets_and_punctuation_are_trimmed() -> None:
    assert kinds("(see @file:app.py)") == [("file", "app.py")]
    assert kinds("@file:f(x).py!") == [("file", "f(x).py")]
    assert kinds("@folder:. and @folder:..") == [("folder", "."), ("folder", "..")]
