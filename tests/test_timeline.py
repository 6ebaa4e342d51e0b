"""`timeline`: sessions grouped by the local day they started on, against a fixed clock, in a non-UTC zone."""

import json
from datetime import UTC, date, datetime, timedelta

from sessionmem_pipeline.cli import main
from sessionmem_pipeline.client import SessionMemory
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.core.timeline import (
    TimelineSession,
    default_window,
    first_line,
    format_duration,
    group_by_day,
)
from sessionmem_pipeline.stages.run import index_sources
from conftest import IndexedCorpus, write_corpus

NOW = datetime(2026, 3, 14, 12, 0, tzinfo=UTC)


def _session(session_id: str, started: str, minutes: int = 5) -> TimelineSession:
    start = datetime.fromisoformat(started)
    return TimelineSession(session_id, "p", "generic", start, start + timedelta(minutes=minutes), 2, "s")


def test_a_session_belongs_to_the_local_day_it_started_on() -> None:
    sessions = [
        _session("late-evening-in-tokyo", "2026-03-10T14:30:00+00:00"),  # 23:30 on March 10 in Tokyo
        _session("after-midnight-in-tokyo", "2026-03-10T15:30:00+00:00"),  # 00:30 on March 11 in Tokyo
        _session("morning-in-tokyo", "2026-03-10T00:00:00+00:00"),  # 09:00 on March 10
    ]
    days = group_by_day(sessions, "Asia/Tokyo")
    assert [(d.day, [s.session_id for s in d.sessions]) for d in days] == [
        (date(2026, 3, 11), ["after-midnight-in-tokyo"]),
        (date(2026, 3, 10), ["morning-in-tokyo", "late-evening-in-tokyo"]),
    ]
    assert [d.day for d in group_by_day(sessions, "UTC")] == [date(2026, 3, 10)]  # all on March 10 in UTC


def test_default_window_is_the_last_seven_days_from_local_midnight() -> None:
    window = default_window(NOW, "America/New_York")
    assert window.before == NOW
    assert window.after == datetime(2026, 3, 7, 5, 0, tzinfo=UTC)  # midnight in New York (EST, UTC-5)


def test_durations_and_first_lines_read_as_people_say_them() -> None:
    durations = [format_duration(timedelta(seconds=s)) for s in (20, 720, 3900)]
    assert durations == ["under a minute", "12 min", "1 h 05 min"]
    assert format_duration(None) == "?"
    assert first_line("\n  Fixed the gift card bug.\nMore detail") == "Fixed the gift card bug."


def test_timeline_groups_indexed_sessions_by_day_in_the_configured_zone(indexed_corpus: IndexedCorpus) -> None:
    memory = SessionMemory(settings=indexed_corpus.settings)  # America/New_York
    days = memory.timeline(now=NOW)
    by_day = {d.day: [s.session_id for s in d.sessions] for d in days}
    assert [d.day for d in days] == sorted(by_day, reverse=True)
    assert by_day[date(2026, 3, 9)] == ["webshop/checkout"]  # 03:00 UTC on March 10
    assert by_day[date(2026, 3, 10)] == ["infra/backups"]
    checkout = days[-1].sessions[0]
    assert checkout.project == "webshop" and checkout.agent == "generic" and checkout.message_count == 4
    assert checkout.duration == timedelta(minutes=6) and checkout.summary
    assert checkout.to_dict()["started_at"] == "2026-03-10T03:00:00+00:00"

    narrowed = memory.timeline(after="2026-03-10", before="2026-03-11", now=NOW)  # local days
    assert [(d.day, [s.session_id for s in d.sessions]) for d in narrowed] == [
        (date(2026, 3, 10), ["infra/backups"])
    ]
    assert memory.timeline(now=NOW + timedelta(days=30)) == []  # nothing in the last 7 days
    assert {s.project for d in memory.timeline(project="infra", now=NOW) for s in d.sessions} == {"infra"}


def test_timeline_command_prints_days_and_json(indexed_corpus: IndexedCorpus, capsys) -> None:
    config = str(indexed_corpus.config)
    assert main(["timeline", "--config", config, "--after", "2026-03-09", "--before", "2026-03-11"]) == 0
    out = capsys.readouterr().out
    assert "Tuesday 2026-03-10" in out and "Monday 2026-03-09" in out
    assert "23:00  webshop  generic  6 min, 4 messages  webshop/checkout" in out
    assert main(["timeline", "--config", config, "--after", "2026-03-09", "--before", "2026-03-11", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["timezone"] == "America/New_York"
    assert [d["day"] for d in data["days"]] == ["2026-03-10", "2026-03-09"]
    assert data["days"][1]["sessions"][0]["duration_seconds"] == 360


def test_sessions_whose_file_is_gone_are_still_shown_and_marked(tmp_path, capsys) -> None:
    (tmp_path / "sources").mkdir()
    write_corpus(tmp_path / "sources", {"solo/one.jsonl": [
        ("m1", "user", "Ada", "2026-03-12T09:00:00Z", "Rename the billing module to payments."),
        ("m2", "assistant", "Max", "2026-03-12T09:02:00Z", "Renamed billing to payments in three files."),
    ]})
    config = tmp_path / "sessionmem.toml"
    config.write_text('warehouse = "w.duckdb"\nsources = ["sources"]\ntimezone = "Europe/Berlin"\n', encoding="utf-8")
    settings = load_settings(config, env={}, cwd=tmp_path, home=tmp_path)
    index_sources(settings)
    (tmp_path / "sources/solo/one.jsonl").unlink()
    index_sources(settings)
    [day] = SessionMemory(settings=settings).timeline(now=NOW)
    assert day.day == date(2026, 3, 12) and day.sessions[0].source_missing
    assert main(["timeline", "--config", str(config), "--after", "2026-03-12"]) == 0
    assert "(transcript file gone)" in capsys.readouterr().out
