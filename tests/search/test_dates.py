"""Days named in a question ("on May 2nd", "5月2号") rank the messages written on that day."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from refold.search.dates import Day, day_ranges, query_days
from refold.store import SearchQuery, Store


def test_query_days_reads_chinese_japanese_korean_english_and_iso_dates() -> None:
    assert query_days("在5月2号我为什么烦恼？") == (Day(5, 2),)
    assert query_days("我在2023年5月4日向你借了书") == (Day(5, 4, 2023),)
    assert query_days("5월 2일에 뭐 했어?") == (Day(5, 2),)
    assert query_days("On May 2nd, which movie did I watch?") == (Day(5, 2),)
    assert query_days("the 3rd of Sept. 2021 and April 30th") == (Day(9, 3, 2021), Day(4, 30))
    assert query_days("backup of 2024-01-31") == (Day(1, 31, 2024),)
    # not dates: the verb "may", impossible days, bare numbers
    assert query_days("I may 2 go") == () and query_days("May I ask?") == ()
    assert query_days("February 30th, 2月30日") == () and query_days("port 8080 on 5") == ()
    assert query_days("0000年5月2日") == () and query_days("9999-12-31") == ()


def test_query_days_reads_dotted_and_slashed_numeric_dates() -> None:
    # day.month.year as dotted dates are written; year first with any one separator
    assert query_days("What class did Kevin have on 21.01.2024?") == (Day(1, 21, 2024),)
    assert query_days("the 5.1.2024 meeting") == (Day(1, 5, 2024),)
    assert query_days("on 2024/01/21 and 2024.1.5") == (Day(1, 21, 2024), Day(1, 5, 2024))
    # slashed: month/day/year, day/month/year when only that is a day, both when both are
    assert query_days("due 01/21/2024") == query_days("due 21/01/2024") == (Day(1, 21, 2024),)
    assert query_days("on 03/04/2024") == (Day(3, 4, 2024), Day(4, 3, 2024))
    # not dates: a two-digit year ("11/22/63" is a novel), mixed separators, parts of longer
    # numbers, impossible days
    assert query_days('reading "11/22/63" by Stephen King') == ()
    assert query_days("2024-01/21") == () and query_days("version 1.2.2000.1") == ()
    assert query_days("1/2/2024/5") == () and query_days("31.02.2024, 13/13/2024") == ()


@given(st.lists(st.sampled_from(["0", "1", "2", "9", "99", "0000", "9999", "2024", "年", "月",
                                  "日", "号", "월", "일", "-", " ", "May", "Sept.", "31st", "of",
                                  ",", ".", "/"]), max_size=12),
       st.floats(min_value=-1e12, max_value=1e12))
def test_any_date_like_text_reads_without_error(parts: list[str], when: float) -> None:
    for day in query_days("".join(parts)):
        for start, end in day_ranges(day, when, when):
            assert start < end


def test_day_ranges_cover_the_local_day_in_each_year_of_the_span() -> None:
    first = dt.datetime(2022, 6, 1).timestamp()
    last = dt.datetime(2024, 1, 1).timestamp()
    ranges = day_ranges(Day(5, 2), first, last)
    assert [dt.datetime.fromtimestamp(a).date() for a, _ in ranges] == [
        dt.date(2024, 5, 2), dt.date(2023, 5, 2), dt.date(2022, 5, 2)]
    assert all(b - a in (82_800, 86_400, 90_000) for a, b in ranges)  # a day (DST: ±1 h)
    assert len(day_ranges(Day(5, 2, 1999), first, last)) == 1  # a given year is that year
    assert day_ranges(Day(2, 29), first, dt.datetime(2023, 12, 31).timestamp()) == []


def _dated(store: Store, day: dt.date, texts: list[str], source: str) -> None:
    """A session written at noon of ``day`` (imported as stored, since appends stamp now)."""
    draft = store.create_session(source=source)
    store.append_messages(draft.id, [{"role": "user", "content": t} for t in texts])
    noon = dt.datetime(day.year, day.month, day.day, 12).timestamp()
    session = dataclasses.replace(store.get_session(draft.id), id=f"{source}-{day}",
                                  started_at=noon)
    messages = [dataclasses.replace(m, session_id=session.id, created_at=noon + m.seq)
                for m in store.get_messages(draft.id)]
    assert store.import_session(session, iter(messages), [], [])
    store.delete_session(draft.id)


def _top(store: Store, text: str, **filters: Any) -> list[str]:
    return [h.content for h in store.search(SearchQuery(text, window=0, **filters))]


def test_a_question_naming_a_day_finds_what_was_said_that_day(store: Store) -> None:
    # The messages of a day never repeat its date, nor here the question's words; the ledger
    # knows when they were written.
    _dated(store, dt.date(2023, 5, 1), ["今天和朋友去爬山了", "I went hiking with friends"], "me")
    _dated(store, dt.date(2023, 5, 2), ["我的朋友要搬到另一个城市，我很失落",
                                       "My best friend is moving away, I feel lost"], "me")
    _dated(store, dt.date(2023, 5, 3), ["听音乐会好一点", "music helps"], "me")
    _dated(store, dt.date(2023, 5, 2), ["别人的五月二日"], "other")
    assert _top(store, "在5月2号我很烦恼，我因为什么事而烦恼？", source="me") == [
        "我的朋友要搬到另一个城市，我很失落", "My best friend is moving away, I feel lost"]
    assert set(_top(store, "On May 2nd, I was very upset. What caused my distress?",
                    source="me")) == {"我的朋友要搬到另一个城市，我很失落",
                                      "My best friend is moving away, I feel lost"}
    # a day ranks, it never filters: a word of the question still finds its message
    assert _top(store, "5月3号以后我去爬山了吗？", source="me")[:2] == [
        "今天和朋友去爬山了", "听音乐会好一点"]
    assert _top(store, "在6月9号我很烦恼，为什么烦恼？", source="me") == []  # no such day


def test_a_chinese_or_japanese_date_typed_alone_is_a_day_too(store: Store) -> None:
    """``4月1日`` alone was read as one CJK word, searched as a substring only: the message
    written that day was not found, though ``April 1st`` and ``4월 1일`` find it; with more
    around it (``2025年4月1日的消息``) the words around the date were lost too."""
    _dated(store, dt.date(2025, 4, 1), ["我们部署了服务器。"], "me")
    _dated(store, dt.date(2025, 4, 9), ["另一天的消息。"], "me")
    for query in ("4月1日", "2025年4月1日", "4月1日に", "April 1st", "4월 1일"):
        assert _top(store, query) == ["我们部署了服务器。"], query
    assert set(_top(store, "2025年4月1日的消息")) == {"我们部署了服务器。", "另一天的消息。"}
    assert _top(store, "目的地") == []  # a plain CJK word is still searched exactly


def test_the_messages_of_a_day_are_found_through_an_index_not_a_scan(sqlite_store: Any) -> None:
    from refold.search.query import parse_query
    from refold.store.sqlite.natural import _day_condition

    plan = parse_query("what did I say on May 2nd?").natural
    assert plan is not None and plan.days
    with sqlite_store.db.read() as conn:
        condition, bounds = _day_condition(conn, plan)
        steps = " ".join(str(r[-1]) for r in conn.execute(
            f"EXPLAIN QUERY PLAN SELECT m.id FROM messages m WHERE {condition}", bounds))
    assert "messages_created" in steps, steps


def test_a_days_messages_and_their_lengths_come_from_the_index_alone(
        sqlite_store: Any) -> None:
    """``day_scores`` weighs every active message of the day by its length: with the index on
    (created_at, length(text), active) its statements never read the messages table, whose
    rows carry their whole text (a crowded day read thousands of pages)."""
    from refold.search.query import parse_query
    from refold.store.sqlite import natural

    statements: list[str] = []
    session = sqlite_store.create_session()  # an archive begun three years ago
    with sqlite_store.db.write() as conn:
        conn.execute("UPDATE sessions SET started_at = started_at - 3 * 365 * 86400 "
                     "WHERE id = ?", (session.id,))
    plan = parse_query("what did I say on May 2nd?").natural
    assert plan is not None and plan.days
    with sqlite_store.db.read() as conn:
        table = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = 'messages'"
                             ).fetchone()[0]
        # a day without its year is a range a year: each read on its own (an OR of ranges
        # read every row from the table)
        conn.set_trace_callback(statements.append)
        natural._day_rows(conn, plan, SearchQuery("what did I say on May 2nd?"))
        conn.set_trace_callback(None)
        day_sql = [s for s in statements if "created_at >=" in s]
        assert len(day_sql) >= 3 and all(" OR " not in s for s in day_sql), statements
        program = [r[1:4] for r in conn.execute(  # (rewound messages left out, as searched)
            "EXPLAIN " + natural.DAY_ROWS.format(join="", where=" AND m.active = 1"), (0., 1.))]
    cursors = {p1 for op, p1, p2 in program if op == "OpenRead" and p2 == table}
    read = [(op, p1, p2) for op, p1, p2 in program if op == "Column"]
    assert read and not any(p1 in cursors for _, p1, _ in read), program  # (a deferred seek
    # of the table's cursor is never carried out: no column of it is read)


def test_a_question_naming_a_day_on_an_empty_archive_finds_nothing(store: Store) -> None:
    assert _top(store, "在5月2号我很烦恼，为什么？") == []
    assert _top(store, "What did I say on May 2nd?") == []
