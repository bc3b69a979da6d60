"""``textscan`` finds what the plain regex calls would (issue 13, deliverable 8: its speed
shortcuts must not change a single anchor): every rule refold runs through ``Joined`` against
one ``finditer`` per text, the alternatives of a kind against the merge they replaced, every
``Caseless`` against its pattern's own ``search``, and the Latin sentence split against the
general one."""

from __future__ import annotations

import re
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.compaction import anchors, builtin
from refold.compaction.textscan import Caseless, Joined, Rule, trigger_lines

# pieces that make the patterns match, nearly match and fail at a boundary
PIECES = ("/", "./", "../", "~/", "a/b", "src/app.py", "x.py", ".py", "README.md", "tests/", "::",
          "http://", "https://h.io/a?b=1", "://", "Error:", "KeyError: 'x'", "error:",
          "error[E0308]:", "ERROR", "FAILED", "fatal:", "Fatal:", "panic:", "Exception:",
          "SystemExit:", "Failure:", "v1.2.3", "1.2", "3.10.4-rc1", "v2.0", "12", "4447", "0.5",
          "1,024", "$5", "$12.50", "ms", " ms", "MB", "%", "req/s", "°C", "x", "s", "sec",
          "PAY-1234", "AB-12", "#123", "#9", "deadbeef1", "0a1b2c3d4e", "a1", "f00d",
          "123e4567-e89b-12d3-a456-426614174000", "sk_live_ABCDEFGH1234", "tok_abcdefgh",
          "API_URL=http://x", "HOST=a", "localhost:8080", "db.local:5432", ":80", "=", "-", "_",
          "$ ", "$ make test", "```\n", "`", "'", '"', "(", ")", "[", "]", "<", ">", ",", ";",
          ".", ":", "@", "+", " ", "  ", "\t", "\n", "\n\n", "\r\n", "word", "Word", "the",
          "é", "中文", "µs", "İ", "ı", "ſ", "K", "٣", "５", "\u00a0", "\x1c", "ab12", "9f")
texts = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)


def _plain(text: str, rule: Rule) -> list[str]:
    return [m.group(rule.group) for m in rule.pattern.finditer(text)
            if rule.check is None or rule.check(m.group(0))]


def _merged(text: str, rules: Sequence[Rule]) -> list[str]:
    """What ``anchors.alternation`` did per text before ``Joined``: the alternatives' finditer
    results merged leftmost first, the earlier winning a tie, overlaps dropped."""
    found = sorted((m.start(), order, m.end(), m.group(0)) for order, rule in enumerate(rules)
                   for m in rule.pattern.finditer(text)
                   if rule.check is None or rule.check(m.group(0)))
    out, end = [], -1
    for start, _, stop, raw in found:
        if start >= end:
            out.append(raw)
            end = stop
    return out


RULES = [rule for kind in anchors._RULES.values() for rule in kind] + [
    anchors._PROMPT_LINE, *builtin._PATH_MENTION]
KINDS = [*anchors._RULES.values(), builtin._PATH_MENTION]


@settings(max_examples=300, deadline=None)
@given(st.lists(texts, min_size=1, max_size=6))
def test_joined_rules_find_what_finditer_finds_in_each_text(batch: list[str]) -> None:
    joined = Joined(batch)
    for rule in RULES:
        assert joined.find((rule,)) == [_plain(t, rule) for t in batch], rule.pattern.pattern


@settings(max_examples=200, deadline=None)
@given(st.lists(texts, min_size=1, max_size=6))
def test_a_dense_regex_trigger_reads_the_rest_whole_and_finds_the_same(batch: list[str]) -> None:
    from refold.compaction import textscan

    saved = textscan.DENSE_LINES, textscan.DENSE_GAP
    textscan.DENSE_LINES, textscan.DENSE_GAP = 2, 40  # small texts get dense
    try:
        assert trigger_lines("a1\nxx\nb2\nc3\nd4", re.compile(r"\d")) == [(0, 2), (6, 14)]
        joined = Joined(batch)
        for rule in RULES:
            assert joined.find((rule,)) == [_plain(t, rule) for t in batch], rule.pattern.pattern
    finally:
        textscan.DENSE_LINES, textscan.DENSE_GAP = saved


@settings(max_examples=200, deadline=None)
@given(st.lists(texts, min_size=1, max_size=6))
def test_joined_alternatives_merge_as_the_per_text_merge_did(batch: list[str]) -> None:
    joined = Joined(batch)
    for rules in KINDS:
        assert joined.find(rules) == [_merged(t, rules) for t in batch]


def test_a_number_may_continue_on_the_next_line_after_a_digit() -> None:
    rule = anchors._RULES["number"][0]
    text = "took 12\nms and then 4\n\nms; line\n7 s"
    assert Joined([text, "5\nMB"]).find((rule,)) == [_plain(text, rule), ["5\nMB"]]
    assert trigger_lines("a\nb 1\nc\nd", re.compile(r"\d"), digit_lines=True) == [(2, 7)]
    assert trigger_lines("a\nb/c\nd/\ne", "/") == [(2, 8)]  # adjacent lines merged
    assert trigger_lines("no trigger here", ("x", "/")) == []


def test_a_spaceless_rule_reads_a_line_between_the_spaces_around_its_triggers() -> None:
    text = "ab cd/e f/g h\nx\ny/z\n  q/"
    assert trigger_lines(text, "/", spaceless=True) == [(3, 11), (16, 19), (22, 24)]
    assert trigger_lines(text, re.compile("/[a-z]"), spaceless=True) == [(3, 11), (16, 19)]
    assert trigger_lines(text, ("/", "x"), spaceless=True) == [(3, 11), (14, 15), (16, 19),
                                                               (22, 24)]
    assert all(rule.spaceless != (kind in ("error", "number"))
               for kind, rules in anchors._RULES.items() for rule in rules)


WORD_PIECES = ("must", "MUST", "Must", "mustn't", "don't", "do not", "DO  NOT", "should",
               "shouldn't", "only", "commonly", "keep", "Keep", "kept", "at most", "at least",
               "remember", "note that", "important", "unimportant", "next", "I'll", "i'll",
               "I will", "follow-up", "follow up", "switch to", "switched to", "decided",
               "done", "passed", "fixed", "port 5432", "PORT 80", "port", "必须", "不要", "记住",
               "下一步", "决定", "完了", "muſt", "ſhould", "İmportant", "ımportant", "K", "eep",
               " ", "\n", ".", ",", "'", "_", "a", "x1")
word_texts = st.lists(st.sampled_from(WORD_PIECES), max_size=12).map("".join)
CASELESS = [builtin._CONSTRAINT, builtin._DONE, builtin._DECISION, builtin._NEXT,
            builtin._REMEMBER, builtin._CONFIG_PORT]


@settings(max_examples=400, deadline=None)
@given(word_texts)
def test_caseless_searches_as_its_pattern(text: str) -> None:
    for caseless in CASELESS:
        fast, slow = caseless.search(text), caseless.pattern.search(text)
        assert (fast and fast.span()) == (slow and slow.span()), (caseless.pattern, text)
        assert fast is None or (fast.string is text and fast.group() == slow.group())


def test_caseless_is_the_ignorecase_alternation_it_replaced() -> None:
    words = Caseless(r"must|should(?:n't)?|follow[- ]up", r"必须|不要")
    assert words.pattern.pattern == r"\b(?:must|should(?:n't)?|follow[- ]up)\b|必须|不要"
    assert words.pattern.flags & re.IGNORECASE
    assert words.words == ("must", "should", "follow")
    assert words.search("You MUST not") and words.search("muſt")  # ſ folds to s
    assert not words.search("mustard") and not words.may_match("nothing here")


CONFIG = re.compile(r"\b[A-Z][A-Z0-9_]{2,}=\S+|\b(?:localhost|[\w-]+(?:\.[\w-]+)+):\d{2,5}\b|"
                    r"\bport \d{2,5}\b|端口\s*\d{2,5}", re.IGNORECASE)  # the one it replaced


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES + WORD_PIECES + ("端口 80", "端口")), max_size=20)
       .map("".join))
def test_config_check_answers_as_the_single_pattern(text: str) -> None:
    assert builtin._has_config(text) == (CONFIG.search(text) is not None)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(("a", "bc", " ", ".", "!", "?", ";", "\n", "\t", "\r", "\x0b",
                                 "\u2028", "\x85", "\u3000", "x. ", "ok.\n\n")), max_size=30)
       .map("".join))
def test_latin_sentence_split_is_the_general_split(text: str) -> None:
    assert builtin._LATIN_SENTENCE.split(text) == builtin._SENTENCE.split(text)
    assert builtin._pieces(text)[0] == builtin._LATIN_SENTENCE.split(text)  # no CJK stops


def _sentences(text: str) -> list[str]:
    """The sentence split ``builtin._sentences`` of ``builtin._pieces`` replaced."""
    split = (builtin._SENTENCE.split if any(c in text for c in builtin._CJK_STOPS)
             else builtin._LATIN_SENTENCE.split)
    out = [s.strip() for s in split(text) if len(s.strip()) > 3]
    return [s for s in out if s.count("(") == s.count(")") and s.count("（") == s.count("）")]


sentence_texts = st.lists(st.sampled_from(
    (*WORD_PIECES, "port 5432", "A=b", "x:80", "端口 80", "(", ")", "（", "）", "!", "?", ";",
     "。", "！", "\n\n", "  ", ". ", "\t", "\u3000", "\x85", "；", "-", "don", "t")),
    max_size=30).map("".join)


@settings(max_examples=400, deadline=None)
@given(sentence_texts)
def test_sentences_are_placed_and_match_where_their_text_does(text: str) -> None:
    pieces = builtin._pieces(text)
    assert all(text[at:at + len(piece)] == piece for piece, at in zip(*pieces, strict=True))
    every = [s for _, s in builtin._sentences(pieces)]
    assert every == _sentences(text)
    assert all(text[at:at + len(s)] == s for at, s in builtin._sentences(pieces))
    for caseless in CASELESS:
        at, matches = builtin._finder(caseless, text)
        assert builtin._found(caseless, text, at) == (caseless.search(text) is not None)
        assert [place[1] for place in builtin._sentences(pieces, (at,)) if matches(place)] \
            == [s for s in every if caseless.search(s)]
    assert [s for _, s in builtin._sentences(pieces, (builtin._config_starts(text),))
            if builtin._has_config(s)] == [s for s in every if builtin._has_config(s)]


PATH_BEFORE = (r"(?<![\w/.:-])(?:~|\.{1,2})?/?(?:[\w.@+-]+/)+[\w.@+-]+",  # before ``++``
               r"(?<![\w/.:-])(?:~|\.{1,2})?/?(?:[\w.@+-]+/)+[\w.@+-]+\.\w{1,10}\b")


@settings(max_examples=300, deadline=None)
@given(texts)
def test_possessive_folder_names_match_as_before(text: str) -> None:
    for before, now in zip(PATH_BEFORE, (anchors._PATH_PARTS[0], builtin._PATH_MENTION[0]),
                           strict=True):
        after = now if isinstance(now, str) else now.pattern.pattern
        assert "++" in after
        assert [m.span() for m in re.finditer(before, text)] == \
            [m.span() for m in re.finditer(after, text)]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(("a", "b ", "\n", "\r", "\r\n", "\x0b", "\u2028", "  ", "exit 0",
                                 "exit code 3\n", "[The command completed with exit code 1.]")),
                max_size=12).map("".join))
def test_last_line_from_the_tail_is_the_last_line_of_the_whole(output: str) -> None:
    from refold.compaction import activity

    whole = next((ln.strip() for ln in reversed(output.splitlines())
                  if ln.strip() and not activity._EXIT_ONLY.match(ln.strip())), "")
    saved = activity.RESULT_TAIL_CHARS
    activity.RESULT_TAIL_CHARS = 7  # tails cut inside lines and inside \r\n
    try:
        assert activity._last_line(output) == whole
    finally:
        activity.RESULT_TAIL_CHARS = saved


FAILED = re.compile(  # the single IGNORECASE search ``tools._failure_at`` replaced
    r"^\s*(?:ERROR\b|Error\b|error:)|<tool_use_error>|No replacement was performed|"
    r"String to replace not found|did not appear verbatim|No such file or directory|"
    r"Permission denied|File has not been read yet|Invalid `path`", re.IGNORECASE)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(("error", "ERROR", "Error:", "errors", " ", "\n", "\t", "x",
                                 "Permission DENIED", "<TOOL_USE_ERROR>", "invalid `PATH`",
                                 "no such file", "No such file or directory", "İ", "ſ", "K",
                                 "did not appear verbatım", "File has not been read yet")),
                max_size=10).map("".join))
def test_failure_is_found_where_the_ignorecase_search_finds_it(head: str) -> None:
    from refold.compaction import tools

    found = FAILED.search(head)
    assert tools._failure_at(head) == (found and found.start())
