"""The search-query sanitizer: nothing a user types may raise, and the plan is right."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from refold.errors import SearchQueryError
from refold.search.query import (
    _CJK,
    _CJK_RANGES,
    SHORT_TEXT,
    cjk_grams,
    cjk_runs,
    cjk_split,
    has_cjk,
    is_cjk_char,
    is_gram_needle,
    make_snippet,
    needle_pattern,
    parse_query,
    text_has_cjk,
    word_matches,
)

NASTY = ["C++", '"unterminated', "(problem", "hello AND", "***", "{test}", "OR hello",
         "a AND OR b", "deploy*", "dotted.names", "hyphen-ated", "NOT", "AND OR NOT",
         '""', '"a" "b', "a:b", "col:value", "^start", "near(a b)", "NEAR", "a NOT", "x*y*",
         "\x00", "\x00¢", "¢\x00€", "\ud800", "'; DROP TABLE messages; --", "[]", "+-", "中", "部署 AND"]


@pytest.fixture(scope="module")
def fts() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61')")
    conn.executemany("INSERT INTO t(x) VALUES (?)", [
        ("hello world",), ("deployment done",), ("redeploying now",), ("we deploy",),
        ("c code",), ("dotted names here",),
        ("hyphen ated",), ("problem solved",), ("a b",)])
    return conn


@pytest.mark.parametrize("text", NASTY)
def test_nasty_input_never_breaks_fts5(text: str, fts: sqlite3.Connection) -> None:
    parsed = parse_query(text)
    if not parsed.is_empty and parsed.mode == "fts":
        fts.execute("SELECT rowid FROM t WHERE t MATCH ?", (parsed.fts5_expression(),))


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_empty_query_is_a_search_query_error(text: str) -> None:
    with pytest.raises(SearchQueryError):
        parse_query(text)


@pytest.mark.parametrize(("text", "expected"), [
    ("C++", '("C")'),
    ('"unterminated', '("unterminated")'),
    ("(problem", '("problem")'),
    ("hello AND", '("hello")'),
    ("{test}", '("test")'),
    ("OR hello", '("hello")'),
    ("a AND OR b", '("a") OR ("b")'),
    ("deploy*", '("deplo"*)'),
    ("config*", '("config"*)'),
    ("dotted.names", '("dotted names")'),
    ("hyphen-ated", '("hyphen ated")'),
    ('"exact phrase" more', '("exact phrase" AND "more")'),
    ("a NOT b", '(("a") NOT "b")'),
    ("NOT b", '("b")'),
    ("x or y", '("x" AND "or" AND "y")'),  # lower-case operators are words, as in FTS5
])
def test_fts5_expressions(text: str, expected: str) -> None:
    assert parse_query(text).fts5_expression() == expected


@pytest.mark.parametrize("text", ["***", "{}", "--", "()", "-+-"])
def test_punctuation_only_is_empty_not_an_error(text: str) -> None:
    assert parse_query(text).is_empty


def test_operators_alone_are_the_words_asked_for() -> None:
    assert parse_query("AND OR").fts5_expression() == '("AND" AND "OR")'
    assert parse_query("NOT").fts5_expression() == '("NOT")'


@pytest.mark.parametrize("text, negated", [
    ("deploy -staging", ["staging"]), ("a -q", []), ("rm -rf build", []),
    ("git log -3 --oneline", []), ("tail -100 log", []), ("x -abc", ["abc"])])
def test_only_a_word_of_three_or_more_letters_is_excluded(text: str,
                                                          negated: list[str]) -> None:
    parsed = parse_query(text)
    assert [w for t in parsed.terms if t.negated for w in t.words] == negated


def test_symbols_alone_are_a_substring_scan_and_beside_words_nothing() -> None:
    parsed = parse_query("🎉 (€)")
    assert parsed.mode == "scan" and parsed.substring_groups() == [(["🎉", "€"], [])]
    assert all(not t.literal for t in parse_query("fine 🎉").terms)


def test_matches_expected_rows(fts: sqlite3.Connection) -> None:
    def hits(text: str) -> list[int]:
        expr = parse_query(text).fts5_expression()
        return [r[0] for r in fts.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY rowid",
                                          (expr,))]

    assert hits("deploy*") == [2, 4]  # deployment, deploy (not redeploying)
    assert hits("dotted.names") == [6]
    assert hits("hyphen-ated") == [7]
    assert hits("(problem") == [8]
    assert hits("hello OR problem") == [1, 8]
    assert hits("C++") == [5]


@pytest.mark.parametrize(("text", "mode"), [
    ("hello", "fts"), ("部署服务", "trigram"), ("部署", "grams"), ("中", "grams"),
    ("deploy 部署服务", "natural"), ("deploy AND 部署服务", "trigram"),
    ("deploy AND 部署", "trigram"), ("AI AND 中", "grams"), ("AI 中", "natural"),
    ("中a", "scan"), ("部署 NOT 失败", "grams"),
    ("部署服务 OR 测试用例", "scan"), ("こんにちは", "trigram"), ("한국어", "trigram"),
])
def test_mode_selection(text: str, mode: str) -> None:
    assert parse_query(text).mode == mode


def test_trigram_plan_splits_long_and_short_needles() -> None:
    plan = parse_query("deploy 部署 NOT 失败").trigram_plan()
    assert plan is not None
    assert plan.match == '"deploy"'
    assert plan.also_contains == ["部署"] and plan.excludes == ["失败"]


def test_gram_plan_and_grams() -> None:
    plan = parse_query("AI 中 NOT 失败").gram_plan()
    assert plan is not None
    assert plan.match == '"中"' and plan.also_contains == ["AI", "中"]
    assert plan.excludes == ["失败"]
    assert cjk_grams("我们 ok 한국, カタ") == "我 我们 们 한 한국 국 カ カタ タ"
    assert cjk_grams("plain text") == ""


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="部署中文服务器。 ab", max_size=30))
def test_every_short_cjk_substring_is_a_gram(text: str) -> None:
    tokens = set(cjk_grams(text).split())
    for size in (1, 2):
        for start in range(len(text) - size + 1):
            needle = text[start:start + size]
            if is_gram_needle(needle):
                assert needle in tokens


def test_cjk_detection() -> None:
    assert is_cjk_char("中") and is_cjk_char("カ") and is_cjk_char("한")
    assert not is_cjk_char("a") and not is_cjk_char("é") and not is_cjk_char("。")
    assert has_cjk("mixed 中文 text") and not has_cjk("plain")


# every range's first and last character, the ones just outside, and a few others
_EDGE_CHARS = "".join(chr(code) for low, high in _CJK_RANGES
                      for code in (low - 1, low, high, high + 1)) + "a é。 \ud800\U0001f600"


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(_EDGE_CHARS), max_size=40)
       | st.text(max_size=SHORT_TEXT + 40))
@example("")
@example("中")
@example("ab中文cd한국")
def test_cjk_runs_in_python_match_the_pattern(text: str) -> None:
    """Short texts are cut in Python (no pattern to compile in a fresh process): the same
    parts, runs and answers as the compiled class gives, at and around every range's edges."""
    assert cjk_split(text) == _CJK.split(text)
    assert cjk_runs(text) == _CJK.findall(text)
    assert has_cjk(text) == text_has_cjk(text) == (_CJK.search(text) is not None)
    for char in set(text):
        assert is_cjk_char(char) == (_CJK.match(char) is not None)


def test_a_cjk_question_compiles_no_cjk_class() -> None:
    """A fresh process's first CJK search (``refold search``) plans its question without
    compiling the CJK character class (~1 ms): a new interpreter, patterns watched."""
    import subprocess
    import sys

    code = (
        "import re\n"
        "from refold.search import query\n"
        "seen = []\n"
        "real = re._compile\n"
        "re._compile = lambda p, f: (seen.append(p), real(p, f))[1]\n"
        "query.parse_query('我们什么时候讨论了部署的问题吗？')\n"
        "query.parse_query('カタカナの設定はどこ？')\n"
        "print(sum(query.CJK_CLASS in str(p) for p in seen), len(seen))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "0", out


def test_snippet_brackets_matches() -> None:
    text = "x" * 300 + " the Deploy step failed; deploy again " + "y" * 300
    snippet = make_snippet(text, ["deploy"])
    assert "[Deploy]" in snippet and "[deploy]" in snippet
    assert snippet.startswith("…") and snippet.endswith("…")
    assert make_snippet("no match here", ["zzz"]) == "no match here"
    assert make_snippet("部署服务器", ["部署"]) == "[部署]服务器"
    # touching matches (CJK bigrams) read as one
    assert make_snippet("デプロイが失敗した", ["デプ", "ロイ", "失敗"]) == "[デプロイ]が[失敗]した"
    assert make_snippet("部署部署", ["部署"]) == "[部署][部署]"  # repeats stay apart


def test_snippet_highlights_do_not_depend_on_the_hash_seed() -> None:
    """The bigram pieces of a word overlap; which of them won a character depended on a set's
    order, so PYTHONHASHSEED changed "[タイムアウト]" into "タ[イムアウ]ト" (the CLI and the MCP
    server, two processes, disagreed). Every seed now gives the whole word."""
    import os
    import subprocess
    import sys

    code = ("from refold.search.query import make_snippet, parse_query\n"
            "q = parse_query('データベースがタイムアウトした理由')\n"
            "print(make_snippet('移行スクリプトのタイムアウト値', q.highlight_needles()))")
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": str(seed)}
                           ).stdout.strip() for seed in range(8)}
    assert seen == {"移行スクリプトの[タイムアウト]値"}
    assert make_snippet("タイムアウト", ["イム", "タイ", "アウ", "ムア", "ウト"]) == "[タイムアウト]"


def test_snippet_marks_only_what_the_search_matched() -> None:
    """Needles were raw substrings: "time" marked statement_[time]out, "log" change[log], a
    number the middle of #1234, and an identifier in the question was never marked (its words
    were looked for joined by spaces)."""
    def snippet(query: str, text: str) -> str:
        return make_snippet(text, parse_query(query).highlight_needles())

    assert snippet("why did the migration time out?",
                   "SET statement_timeout = 30000 for the migration") == \
        "SET statement_timeout = 30000 for the [migration]"
    assert snippet("why did it time out?", "it timed out at 3") == "it [timed] out at 3"
    assert snippet("git log -3 --oneline", "see the changelog") == "see the changelog"
    assert snippet("issue 12 status", "closed issue #1234 and #12") == \
        "closed [issue] #1234 and #[12]"
    assert snippet("what did we decide about get_user_settings_cache?",
                   "get_user_settings_cache is not thread safe") == \
        "[get_user_settings_cache] is not thread safe"
    assert snippet("migrat*", "run_migration failed") == "run_[migration] failed"  # a prefix
    assert snippet("how do I fix it", "fixes the prefix fixture") == \
        "[fixes] the prefix fixture"
    assert snippet("pytest output", "用pytest跑一下") == "用[pytest]跑一下"  # glued to CJK


def test_snippet_shows_where_most_of_the_question_is() -> None:
    # a test log: the first "fail" is a banner; the line naming the error holds every word
    text = ("." * 200 + "\n===== FAILURES =====\n" + "def test_load(): pass\n" * 20
            + "E   ModuleNotFoundError: No module named 'imp'\n" + "z" * 400)
    snippet = make_snippet(text, ["fail", "module", "named", "imp"])
    assert "No [module] [named] '[imp]'" in snippet
    assert "[FAIL]URES" not in snippet
    # a tie keeps the earliest window
    assert make_snippet("deploy " + "x" * 300 + " deploy", ["deploy"]).startswith("[deploy]")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400), st.lists(st.text(min_size=0, max_size=6), max_size=5),
       st.integers(min_value=1, max_value=200))
def test_snippet_of_any_text_is_an_excerpt_of_it(text: str, needles: list[str],
                                                 width: int) -> None:
    snippet = make_snippet(text, needles, width=width)
    plain = snippet.replace("[", "").replace("]", "").strip("…")
    source = text.replace("\n", " ").replace("[", "").replace("]", "")
    assert plain in source  # the excerpt is the text's own, brackets and ellipses aside
    assert len(plain) <= width


def test_snippet_of_a_long_output_with_many_matches() -> None:
    text = "the cache missed again; " * 20_000 + "cache hit rate fell after the deploy"
    snippet = make_snippet(text, ["cache", "deploy", "rate"])
    assert "[rate]" in snippet or "[deploy]" in snippet  # the window holding more needles


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
@example(text="\x00¢")  # symbols only with a NUL: its FTS5 string ended at the NUL
def test_any_text_parses_and_is_valid_fts5(text: str) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61')")
    try:
        parsed = parse_query(text)
    except SearchQueryError:
        assert not text.strip()
        return
    if not parsed.is_empty:
        conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (parsed.fts5_expression(),))
        plan = parsed.trigram_plan()
        if plan is not None:
            conn.execute("CREATE VIRTUAL TABLE g USING fts5(x, tokenize='trigram')")
            conn.execute("SELECT rowid FROM g WHERE g MATCH ?", (plan.match,))


def test_snippet_edges_fall_between_words() -> None:
    text = ("I am doing zumba toning and the other is a body sculpting class. I am taking the "
            "zumba class just for fun, I know it really wont do anything for my body")
    for needle in ("class", "sculpting", "fun"):
        snippet = make_snippet(text, [needle], width=60)
        inner = snippet.strip("…").replace("[", "").replace("]", "")
        assert inner in text and f"[{needle}]" in snippet
        words = text.split()
        assert inner.split()[0] in words and inner.split()[-1].rstrip(".,") in \
            [w.rstrip(".,") for w in words], snippet  # no cut word at either edge
        assert not snippet.startswith("… ") and not snippet.endswith(" …")
    # a line break is a word's edge too, and a long code token is passed whole
    log = ("E   ModuleNotFoundError: No module named 'imp'\n\n" + "=" * 28
           + " short test summary info " + "=" * 28 + "\nFAILED tests/test_config.py::test_x")
    snippet = make_snippet(log, ["test", "fail"])
    assert "…mp'" not in snippet and not snippet.startswith("… "), snippet
    code = "from distutils.version import LooseVersion — ModuleNotFoundError: No module named"
    snippet = make_snippet("x " * 40 + code, ["modulenotfounderror"], width=60)
    assert snippet.startswith("…LooseVersion"), snippet  # not "…port LooseVersion"
    # text without spaces near the edge keeps the plain window
    chinese = "我今天去了图书馆看书然后去公园散步最后回家做饭吃饭睡觉" * 5
    assert "[公园]" in make_snippet(chinese, ["公园"], width=30)


@pytest.mark.parametrize("text", ["*data*", "**data**", "(*data*)", "*data*."])
def test_markdown_emphasis_is_the_plain_word(text: str) -> None:
    parsed = parse_query(text)
    assert [(t.words, t.prefix) for g in parsed.groups for t in g] == [(("data",), False)]
    assert parse_query(f"what is {text} in the pyc file?").natural is not None  # a sentence
    assert parse_query("data*").groups[0][0].prefix  # a trailing star alone is a prefix


# -- word_matches: a plain word needle's spans without a compiled pattern ------------------------
_MATCH_ALPHABET = "delt" + "esingormt" + "DE1 _-.é日" + "\n"


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=_MATCH_ALPHABET, max_size=80),
       st.sampled_from(["del", "delete", "de", "d", "t1", "e", "dele1", "et", "tele"]))
def test_word_matches_equal_the_needle_patterns_spans(text: str, word: str) -> None:
    lowered = text.lower() if len(text.lower()) == len(text) else text
    want = [(m.start(), m.end()) for m in needle_pattern(word).finditer(lowered)]
    assert list(word_matches(lowered, word)) == want


def test_word_matches_take_inflections_and_word_edges() -> None:
    text = "fixes fix prefix fixture fixing fix2 fixed_it fix-up FIX fixments"
    assert [text[a:b] for a, b in word_matches(text, "fix")] == [
        "fixes", "fix", "fixing", "fixed", "fix", "fixments"]
    versions = "v12 v123 v12s v12"
    assert [versions[a:b] for a, b in word_matches(versions, "v12")] == ["v12", "v12"]


@pytest.mark.parametrize(("text", "explicit"), [
    ("hello AND", False), ("AND hello", False), ("NOT hello", False), ("hello OR", False),
    ("cabin password AND", False), ("hello AND world", True), ("hello NOT world", True),
    ("hello OR world", True), ("a AND OR b", True), ('"a phrase"', True), ("-staging x", True),
    ("deplo*", True)])
def test_a_dangling_or_leading_operator_is_no_syntax(text: str, explicit: bool) -> None:
    """``hello AND`` is ``hello`` (README: searched as text): it was read as explicit syntax,
    strict, and vector search returned nothing for it."""
    assert parse_query(text).explicit is explicit
