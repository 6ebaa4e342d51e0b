"""Dates as people say them, against a fixed clock in a non-UTC zone, across a daylight-saving change."""

from datetime import UTC, datetime

import pytest

from sessionmem_pipeline.core.timewindow import find_time_window, parse_time_window, understood_window

BERLIN = "Europe/Berlin"
NOW = datetime(2025, 3, 31, 8, 0, tzinfo=UTC)  # Monday 10:00 in Berlin, the day after clocks went forward


def _utc(text: str) -> tuple[str | None, str | None]:
    window = parse_time_window(text, NOW, BERLIN)
    return tuple(m.astimezone(UTC).strftime("%Y-%m-%d %H:%M") if m else None for m in (window.after, window.before))


@pytest.mark.parametrize(
    ("text", "after", "before"),
    [
        # Sunday 30 March 2025 had 23 hours: local midnight was 23:00 UTC before it and 22:00 UTC after it
        ("yesterday", "2025-03-29 23:00", "2025-03-30 22:00"),
        ("two days ago", "2025-03-28 23:00", "2025-03-29 23:00"),
        ("the day before yesterday", "2025-03-28 23:00", "2025-03-29 23:00"),
        ("today", "2025-03-30 22:00", "2025-03-31 22:00"),
        ("last week", "2025-03-23 23:00", "2025-03-30 22:00"),
        ("since Monday", "2025-03-23 23:00", None),  # said on a Monday: the Monday a week ago
        ("in March", "2025-02-28 23:00", "2025-03-31 22:00"),
        ("in April", "2024-03-31 22:00", "2024-04-30 22:00"),  # April is still to come: the last one
        ("October 13, 2023", "2023-10-12 22:00", "2023-10-13 22:00"),
        ("2025-03-02", "2025-03-01 23:00", "2025-03-02 23:00"),
        ("past 3 days", "2025-03-27 23:00", "2025-03-31 08:00"),
        ("until Friday", None, "2025-03-28 23:00"),
    ],
)
def test_relative_dates_are_local_calendar_days(text: str, after: str | None, before: str | None) -> None:
    assert _utc(text) == (after, before)


def test_a_day_across_the_change_is_23_hours() -> None:
    window = parse_time_window("yesterday", NOW, BERLIN)
    elapsed = window.before.astimezone(UTC) - window.after.astimezone(UTC)  # same-zone subtraction is wall time
    assert elapsed.total_seconds() == 23 * 3600


def test_not_a_date_is_an_error_that_shows_examples() -> None:
    with pytest.raises(ValueError, match="last week"):
        parse_time_window("the retry queue", NOW, BERLIN)


def test_a_date_in_the_query_is_removed_from_the_words_searched() -> None:
    window, words = find_time_window("what did we decide last week about the retry queue?", NOW, BERLIN)
    assert window is not None and window.phrase == "last week"
    assert words == "what did we decide about the retry queue?"
    assert find_time_window("may I ask about the march of progress", NOW, BERLIN) == (
        None, "may I ask about the march of progress"
    )


def test_flags_filter_and_win_over_a_date_in_the_query() -> None:
    window, source, words = understood_window("retry queue last week", "yesterday", None, NOW, BERLIN)
    assert source == "flag" and words == "retry queue last week"
    assert window.after == parse_time_window("yesterday", NOW, BERLIN).after and window.before is None
    assert understood_window("retry queue last week", None, None, NOW, BERLIN)[1:] == ("query", "retry queue")
    assert understood_window("retry queue", None, None, NOW, BERLIN) == (None, None, "retry queue")
