"""Dates as people say them ("yesterday", "last week", "in March", "two days ago", "since Monday", ISO dates),
read against an injected "now" in the configured time zone.

`parse_time_window` reads a whole expression (a `--after`/`--before` value); `find_time_window` finds one inside a
query ("what did we decide last week about the retry queue") and returns the query without it, so the date
boosts results instead of being searched as words. Calendar arithmetic is done on local dates and converted to
instants last, so a day across a daylight-saving change is 23 or 25 hours long, as it was lived.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from sessionmem_pipeline.core.context import zone

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "couple of": 2, "few": 3}
UNITS = ("day", "week", "month", "year")

_MONTH = "|".join(MONTHS) + "|" + "|".join(m[:3] for m in MONTHS) + "|sept"
_WEEKDAY = "|".join(WEEKDAYS)
_NUMBER = r"\d{1,3}|" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True))
_UNIT = r"(?P<unit>day|week|month|year)s?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_ISO = r"(?P<iso>\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?)"

_POINT = "|".join(
    f"(?:{p})"
    for p in (
        _ISO,
        r"(?P<today>today)",
        r"(?P<yesterday>(?:the\s+)?day\s+before\s+yesterday|yesterday)",
        rf"(?:the\s+)?(?P<span_kind>last|past|previous)\s+(?P<span_n>{_NUMBER})\s+{_UNIT}",
        r"(?P<rel>this|last|previous|past)\s+(?P<rel_unit>week|month|year)",
        rf"(?P<ago_n>{_NUMBER})\s+(?P<ago_unit>day|week|month|year)s?\s+ago",
        rf"(?:(?P<wd_last>last|this|on)\s+)?(?P<weekday>{_WEEKDAY})",
        rf"(?:on\s+|in\s+)?(?:(?P<md_month>{_MONTH})\.?\s+{_DAY.replace('day>', 'md_day>')}"
        rf"|{_DAY.replace('day>', 'dm_day>')}\s+(?:of\s+)?(?P<dm_month>{_MONTH})\.?)"
        rf"(?:,?\s+{_YEAR.replace('year>', 'dy_year>')})?",
        rf"(?:in\s+)?(?P<month>{_MONTH})\.?(?:\s+(?:of\s+)?{_YEAR.replace('year>', 'my_year>')})?",
        rf"in\s+{_YEAR}",
    )
)
EXPRESSION = re.compile(
    rf"\b(?:(?P<direction>since|after|before|until)\s+)?(?:{_POINT})(?![\w-])", re.IGNORECASE
)
"""A date expression; `since/after/before/until` turn its window into an open-ended one."""


@dataclass(frozen=True)
class TimeWindow:
    """[after, before) as aware instants; either end may be open. `phrase` is the text it was read from."""

    after: datetime | None
    before: datetime | None
    phrase: str

    def to_dict(self, source: str) -> dict[str, str | None]:
        return {
            "after": self.after.isoformat() if self.after else None,
            "before": self.before.isoformat() if self.before else None,
            "source": source,
            "phrase": self.phrase,
        }

    def contains(self, moment: datetime | None) -> bool:
        if moment is None:
            return False
        return (self.after is None or moment >= self.after) and (self.before is None or moment < self.before)


def parse_time_window(text: str, now: datetime, timezone: str) -> TimeWindow:
    """The window a whole date expression names; ValueError when the text is not one."""
    match = EXPRESSION.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"not a date: {text!r} (expected e.g. 2026-03-02, yesterday, last week, in March, two days ago, "
            "since Monday)"
        )
    return _window(match, now, timezone)


def find_time_window(query: str, now: datetime, timezone: str) -> tuple[TimeWindow | None, str]:
    """The first date expression inside a query, and the query with it removed (None and the query when none)."""
    for match in EXPRESSION.finditer(query):
        if _is_bare_word(match):
            continue
        window = _window(match, now, timezone)
        rest = (query[: match.start()] + " " + query[match.end():]).strip()
        return window, re.sub(r"\s{2,}", " ", re.sub(r"\s+([?.!,])", r"\1", rest))
    return None, query


def _is_bare_word(match: re.Match) -> bool:
    """A lone "may", "march" or "sun"-like month word in running text is too often not a date."""
    groups = match.groupdict()
    short_month = groups["month"] and not groups["my_year"] and not match.group(0).lower().startswith("in ")
    return bool(short_month)


def _window(match: re.Match, now: datetime, timezone: str) -> TimeWindow:
    tz = zone(timezone)
    start_at, end_at = (_instant(point, tz) for point in _point(match.groupdict(), now.astimezone(tz)))
    direction = (match.group("direction") or "").lower()
    if direction in ("since", "after"):
        after, before = (start_at if direction == "since" else end_at), None
    elif direction in ("before", "until"):
        after, before = None, (start_at if direction == "before" else end_at)
    else:
        after, before = start_at, end_at
    return TimeWindow(after, before, match.group(0))


def _instant(point: date | datetime, tz) -> datetime:
    """A local date as the instant its day starts in the zone (local midnight, whatever the UTC offset that day)."""
    return point if isinstance(point, datetime) else datetime.combine(point, time(), tz)


def _number(text: str) -> int:
    text = " ".join(text.lower().split())
    return int(text) if text.isdigit() else NUMBER_WORDS[text]


def _month_number(name: str) -> int:
    return next(i for i, month in enumerate(MONTHS, 1) if month.startswith(name.lower()[:3]))


def _shift_months(day: date, months: int) -> date:
    """The first of the month `months` after `day`'s month."""
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _unit_span(day: date, unit: str) -> tuple[date, date]:
    """The calendar day, week (from Monday), month or year holding `day`."""
    if unit == "day":
        return day, day + timedelta(days=1)
    if unit == "week":
        monday = day - timedelta(days=day.weekday())
        return monday, monday + timedelta(days=7)
    if unit == "month":
        first = day.replace(day=1)
        return first, _shift_months(first, 1)
    return date(day.year, 1, 1), date(day.year + 1, 1, 1)


def _back(day: date, unit: str, n: int) -> date:
    if unit == "day":
        return day - timedelta(days=n)
    if unit == "week":
        return day - timedelta(weeks=n)
    if unit == "month":
        return _shift_months(day, -n)
    return date(day.year - n, 1, 1)


def _point(groups: dict[str, str | None], now: datetime) -> tuple[date | datetime, date | datetime]:
    """[start, end) of the expression's point in time: local dates, or instants for ISO datetimes and "past N"."""
    today = now.date()
    if groups["iso"]:
        moment = datetime.fromisoformat(groups["iso"].replace("Z", "+00:00"))
        if len(groups["iso"]) == 10:
            return moment.date(), moment.date() + timedelta(days=1)
        moment = moment if moment.tzinfo else moment.replace(tzinfo=now.tzinfo)
        return moment, moment
    if groups["today"]:
        return _unit_span(today, "day")
    if groups["yesterday"]:
        days = 2 if "before" in groups["yesterday"].lower() else 1
        return _unit_span(today - timedelta(days=days), "day")
    if groups["span_kind"]:
        return _back(today, groups["unit"].lower(), _number(groups["span_n"])), now
    if groups["rel"]:
        unit, rel = groups["rel_unit"].lower(), groups["rel"].lower()
        current = _unit_span(today, unit)
        if rel == "past":  # "the past week": the last seven days up to now
            return _back(today, unit, 1), now
        return current if rel == "this" else _unit_span(current[0] - timedelta(days=1), unit)
    if groups["ago_n"]:
        unit = groups["ago_unit"].lower()
        return _unit_span(_back(today, unit, _number(groups["ago_n"])), unit)
    if groups["weekday"]:
        target = WEEKDAYS.index(groups["weekday"].lower())
        days_back = (today.weekday() - target) % 7
        if days_back == 0 and (groups["wd_last"] or "").lower() != "this":
            days_back = 7  # "Monday" said on a Monday means the one a week ago
        return _unit_span(today - timedelta(days=days_back), "day")
    if groups["md_month"] or groups["dm_month"]:
        month = _month_number(groups["md_month"] or groups["dm_month"])
        day_of_month = int(groups["md_day"] or groups["dm_day"])
        year = int(groups["dy_year"]) if groups["dy_year"] else _latest_year(today, month, day_of_month)
        return _unit_span(date(year, month, day_of_month), "day")
    if groups["month"]:
        month = _month_number(groups["month"])
        year = int(groups["my_year"]) if groups["my_year"] else _latest_year(today, month, 1)
        return _unit_span(date(year, month, 1), "month")
    return _unit_span(date(int(groups["year"]), 1, 1), "year")


def _latest_year(today: date, month: int, day: int) -> int:
    """The year of the most recent (month, day) not after today: "in March" said in February means last March."""
    return today.year if (month, day) <= (today.month, today.day) else today.year - 1


def time_bound(value: str | date | datetime, now: datetime, timezone: str) -> datetime:
    """An `after`/`before` value as an instant: a datetime as is (naive ones in the zone), a date or any date
    expression as the start of the day or window it names ("yesterday": yesterday's local midnight)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=zone(timezone))
    if isinstance(value, date):
        return datetime.combine(value, time(), zone(timezone))
    window = parse_time_window(value, now, timezone)
    return window.after or window.before


def understood_window(
    query: str, after: str | date | datetime | None, before: str | date | datetime | None, now: datetime,
    timezone: str,
) -> tuple[TimeWindow | None, str | None, str]:
    """What a search means by time: the window, where it came from ("flag" filters, "query" boosts) and the words
    to search. Flags win: with `after`/`before` given, a date in the query is searched as words."""
    if after is not None or before is not None:
        start = time_bound(after, now, timezone) if after is not None else None
        end = time_bound(before, now, timezone) if before is not None else None
        phrase = " ".join(f"{name} {value}" for name, value in (("after", after), ("before", before)) if value)
        return TimeWindow(start, end, phrase), "flag", query
    window, words = find_time_window(query, now, timezone)
    return window, ("query" if window else None), (words if window and words.strip() else query)
