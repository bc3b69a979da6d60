"""Calendar days named in a question: "on May 2nd", "5月2号", "2023年5月4日", "5월 2일",
"2024-01-21", "21.01.2024", "01/21/2024".

People ask a memory about a day ("在5月2号我为什么烦恼？", "What did I watch on May 2nd?").
The messages of that day rarely repeat its date, so its words find nothing or only noise; the
ledger knows when each message was written. ``query_days`` reads the days a query names;
``day_ranges`` turns one into the [start, end) timestamps of that local calendar day in each
year the archive spans (every year between ``first`` and ``last`` when the year is not given).
A backend treats a day as one more term of a natural-language query: its postings are the
messages created that day, weighed by IDF like any term, so it ranks and never filters.

Pure functions; local time is the process's, the same clock ``created_at`` was stamped with.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import time

from refold._records import dataclass

_MONTHS = {name: n for n, names in enumerate((
    "jan january", "feb february", "mar march", "apr april", "may", "jun june", "jul july",
    "aug august", "sep sept september", "oct october", "nov november", "dec december"),
    start=1) for name in names.split()}
_MONTH = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\b\.?"
_ORDINAL = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?:,?\s+(\d{4}))?"


@functools.cache
def _patterns() -> tuple[tuple[re.Pattern[str], tuple[int, int, int]], ...]:
    """(regex, group of year, month, day); a month group may be a name. Compiled on the first
    query holding a digit: a search without one (and ``refold search``'s start-up) never pays
    for them."""
    return (
        (re.compile(r"(?:(\d{4})\s*年\s*)?(\d{1,2})\s*月\s*(\d{1,2})\s*[日号號]"), (1, 2, 3)),
        (re.compile(r"(?:(\d{4})\s*년\s*)?(\d{1,2})\s*월\s*(\d{1,2})\s*일"), (1, 2, 3)),
        (re.compile(r"\b(\d{4})([-/.])(\d{1,2})\2(\d{1,2})\b"), (1, 3, 4)),
        # 21.01.2024: day.month.year, as dotted dates are written (Europe, Russia)
        (re.compile(r"(?<![\d.])(\d{1,2})\.(\d{1,2})\.(\d{4})(?![\d]|\.\d)"), (3, 2, 1)),
        # 01/21/2024 or 21/01/2024: month/day/year, or day/month/year where that is the only
        # valid reading; both days when both are (03/04/2024)
        (re.compile(r"(?<![\d/])(\d{1,2})/(\d{1,2})/(\d{4})(?![\d]|/\d)"), (3, 1, 2)),
        (re.compile(rf"\b{_MONTH}\s+(?:the\s+)?{_ORDINAL}\b{_YEAR}", re.IGNORECASE),
         (3, 1, 2)),
        (re.compile(rf"\b{_ORDINAL}\s+(?:of\s+)?{_MONTH}{_YEAR}", re.IGNORECASE), (3, 2, 1)),
    )


MAX_DAYS = 4


@dataclass(frozen=True)
class Day:
    """A calendar day; ``year`` None when the query left it out."""

    month: int
    day: int
    year: int | None = None


def _number(text: str | None) -> int | None:
    if text is None:
        return None
    return _MONTHS[text.lower()] if text.lower() in _MONTHS else int(text)


def query_days(text: str) -> tuple[Day, ...]:
    """The valid calendar days ``text`` names, in order, each once (at most ``MAX_DAYS``)."""
    if not any(ch.isdigit() for ch in text):  # every form holds the day's number
        return ()
    found: list[tuple[int, Day]] = []
    taken: list[tuple[int, int]] = []
    for pattern, (y, m, d) in _patterns():
        for match in pattern.finditer(text):
            if any(lo < match.end() and match.start() < hi for lo, hi in taken):
                continue
            year, month, day = (_number(match.group(y)), _number(match.group(m)),
                                _number(match.group(d)))
            if month is None or day is None or match.group(m) == "may":  # "I may 2 go"
                continue
            readings = [(month, day)]
            if "/" in match.group(0) and year is not None and (y, m, d) == (3, 1, 2):
                readings.append((day, month))  # day/month/year, the other slashed reading
            readings = [(mo, da) for mo, da in readings
                        if _valid(2000 if year is None else year, mo, da)]
            if not readings:
                continue
            taken.append(match.span())
            found.extend((match.start(), Day(mo, da, year)) for mo, da in readings)
    days = dict.fromkeys(day for _, day in sorted(found, key=lambda f: f[0]))
    return tuple(days)[:MAX_DAYS]


YEARS = (1900, 2999)  # a year outside is not read as a date (nor overflows a timestamp)


def _valid(year: int, month: int, day: int) -> bool:
    if not YEARS[0] <= year <= YEARS[1]:
        return False
    try:
        dt.date(year, month, day)
    except ValueError:
        return False
    return True


def _year(timestamp: float) -> int:
    try:
        return dt.datetime.fromtimestamp(max(timestamp, 0.0)).year
    except (OverflowError, OSError, ValueError):  # a stored time beyond what the OS converts
        return YEARS[1]


def day_ranges(day: Day, first: float, last: float) -> list[tuple[float, float]]:
    """[start, end) timestamps of ``day`` in local time: its year, or each year from the one
    of ``first`` to the one of ``last`` (at most 50, newest first)."""
    if day.year is not None:
        years = [day.year]
    else:
        low = max(_year(first), YEARS[0])
        high = min(_year(max(last, first)), YEARS[1])
        years = list(range(high, max(low, high - 49) - 1, -1))
    out = []
    for year in years:
        if _valid(year, day.month, day.day):
            start = dt.datetime(year, day.month, day.day)
            out.append((start.timestamp(), (start + dt.timedelta(days=1)).timestamp()))
    return out


_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_when(value: str | None, *, now: float | None = None) -> float | None:
    """An ISO date/datetime (local time when naive) or a relative age like 30m, 12h, 7d, 2w.
    Raises ValueError with the message the user sees."""
    if value is None:
        return None
    text = value.strip()
    match = _RELATIVE.match(text)
    if match:
        return (now if now is not None else time.time()) - \
            float(match[1]) * _UNIT_SECONDS[match[2]]
    from datetime import datetime

    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ValueError(
            f"{value!r} is not a date (2026-01-31, 2026-01-31T12:00) or an age (30m, 12h, 7d)"
        ) from None
