"""What you did, day by day: sessions grouped by the local day they started on (configured time zone), each with
its project, agent, duration, message count, the first line of its summary and its decisions.

Pure: `group_by_day` takes session rows already read from the snapshot; `default_window` is "the last 7 days"
against an injected now, so a fixed clock gives a fixed timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from sessionmem_pipeline.core.context import zone
from sessionmem_pipeline.core.timewindow import TimeWindow, parse_time_window

DEFAULT_WINDOW = "past 7 days"


@dataclass(frozen=True)
class TimelineSession:
    session_id: str
    project: str
    agent: str
    started_at: datetime | None
    ended_at: datetime | None
    message_count: int
    summary: str  # the first line of the latest summary's overview ("" before the first summary)
    decisions: list[str] = field(default_factory=list)
    source_missing: bool = False  # the transcript file is gone; memory keeps the session

    @property
    def duration(self) -> timedelta | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return self.ended_at - self.started_at

    def to_dict(self) -> dict[str, Any]:
        duration = self.duration
        return {
            "session_id": self.session_id,
            "project": self.project,
            "agent": self.agent,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "ended_at": self.ended_at.isoformat() if self.ended_at else None,
            "duration_seconds": round(duration.total_seconds()) if duration is not None else None,
            "message_count": self.message_count,
            "summary": self.summary,
            "decisions": list(self.decisions),
            "source_missing": self.source_missing,
        }


@dataclass(frozen=True)
class TimelineDay:
    day: date
    sessions: list[TimelineSession]

    def to_dict(self) -> dict[str, Any]:
        return {"day": self.day.isoformat(), "sessions": [s.to_dict() for s in self.sessions]}


def default_window(now: datetime, timezone: str) -> TimeWindow:
    """The last 7 days up to now (from local midnight seven days ago)."""
    return parse_time_window(DEFAULT_WINDOW, now, timezone)


def first_line(text: str | None) -> str:
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def group_by_day(sessions: list[TimelineSession], timezone: str) -> list[TimelineDay]:
    """Days newest first, each with its sessions in the order they started; a day is the local date (in
    `timezone`) the session started on. Sessions with no start time are left out: they have no day."""
    tz = zone(timezone)
    days: dict[date, list[TimelineSession]] = {}
    for session in sessions:
        if session.started_at is not None:
            days.setdefault(session.started_at.astimezone(tz).date(), []).append(session)
    return [
        TimelineDay(day, sorted(days[day], key=lambda s: (s.started_at, s.session_id)))
        for day in sorted(days, reverse=True)
    ]


def format_duration(duration: timedelta | None) -> str:
    """`1 h 05 min`, `12 min`, `under a minute`; `?` when unknown."""
    if duration is None:
        return "?"
    minutes = int(duration.total_seconds() // 60)
    if minutes < 1:
        return "under a minute"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"
