"""Cost of keeping threads up to date in one large project (issue 15, item 3).

    .venv/bin/python benchmarks/threads.py [--sessions 500 2000] [--repeat 5]

Writes synthetic sessions of one project straight into a real warehouse (sessions + latest summaries: what the
threads stage reads), five a day, each working on one of many themes that stay active for about two weeks (a
theme's sessions share a summary direction, topics and files; every session also shares a project-wide direction,
so unrelated sessions of the project score 0.2-0.4 as on the offline embedder). Measures the CPU seconds (process
time, all threads) of `refresh_threads` after the newest session gets a new summary (an append), median of
`--repeat`, and of a full rebuild (a new stage key), and prints the strong components' sizes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from sessionmem_pipeline.stages.threads import refresh_threads
from sessionmem_pipeline.warehouse import Warehouse

WIDTH = 384
PER_DAY = 5
THEME_DAYS = 14
SESSIONS_PER_THEME = 12


class Project:
    """The synthetic project: `summary(n, version)` is session n's summary row."""

    def __init__(self, sessions: int) -> None:
        self.sessions = sessions
        self.rng = np.random.default_rng(11)
        themes = max(1, sessions // SESSIONS_PER_THEME)
        self.shared = self.rng.normal(size=WIDTH)
        self.centers = self.rng.normal(size=(themes, WIDTH))
        self.theme_start = np.sort(self.rng.uniform(0, sessions / PER_DAY, size=themes))

    def started(self, n: int) -> datetime:
        return datetime(2025, 1, 1, tzinfo=UTC) + timedelta(days=n / PER_DAY)

    def summary(self, n: int, version: int) -> dict:
        day = n / PER_DAY
        active = np.flatnonzero((self.theme_start <= day) & (day < self.theme_start + THEME_DAYS))
        theme = int(self.rng.choice(active)) if len(active) else int(np.argmin(abs(self.theme_start - day)))
        vector = 0.6 * self.shared + self.centers[theme] + self.rng.normal(scale=0.8, size=WIDTH)
        topics = [f"theme{theme}-{k}" for k in self.rng.choice(4, size=2, replace=False)]
        topics.append(f"misc{self.rng.integers(30)}")
        files = [f"src/theme{theme}/{k}.py" for k in self.rng.choice(3, size=2)]
        files.append(f"src/common{self.rng.integers(20)}.py")
        return {"summary_id": f"s{n}@{version}", "session_id": f"s{n}", "version": version,
                "summary": json.dumps({"topics": topics, "files_modified": files}),
                "embedding": [float(x) for x in vector]}

    def write(self, wh: Warehouse) -> None:
        with wh.transaction():
            wh.insert("sessions", [{"session_id": f"s{n}", "project": "big", "started_at": self.started(n),
                                    "summary_version": 1} for n in range(self.sessions)])
            wh.insert("session_summaries", [self.summary(n, 1) for n in range(self.sessions)])

    def append(self, wh: Warehouse, version: int) -> None:
        """The newest session's summary after an appended message."""
        newest = self.sessions - 1
        with wh.transaction():
            wh.insert("session_summaries", [self.summary(newest, version)])
            wh.conn.execute("UPDATE sessions SET summary_version = ? WHERE session_id = ?", [version, f"s{newest}"])


def cpu_seconds(action: Callable[[], object]) -> float:
    started = time.process_time()
    action()
    return time.process_time() - started


def component_sizes(wh: Warehouse) -> list[int]:
    from sessionmem_pipeline.core.threads import strong_components

    sessions = [row[0] for row in wh.conn.execute("SELECT session_id FROM sessions").fetchall()]
    links = wh.conn.execute("SELECT session_a, session_b FROM thread_links").fetchall()
    return sorted((len(c) for c in strong_components(sessions, links)), reverse=True)


def measure(sessions: int, repeat: int, folder: Path) -> dict:
    project = Project(sessions)
    with Warehouse(folder / f"threads-{sessions}.duckdb") as wh:
        project.write(wh)
        full = cpu_seconds(lambda: refresh_threads(wh, "first"))
        appends = []
        for version in range(2, repeat + 2):
            project.append(wh, version)
            appends.append(cpu_seconds(lambda: refresh_threads(wh, "first")))
        threads = wh.scalar("SELECT count(DISTINCT thread_id) FROM session_threads")
        sizes = component_sizes(wh)
    return {"sessions": sessions, "full": full, "append": statistics.median(appends), "threads": threads,
            "largest_components": sizes[:3]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[500, 2000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print("| sessions in the project | threads | largest strong components | full rebuild CPU s | one append CPU s |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for sessions in args.sessions:
            row = measure(sessions, args.repeat, Path(folder))
            print(f"| {row['sessions']:,} | {row['threads']} | {row['largest_components']} | {row['full']:.3f} | "
                  f"{row['append']:.4f} |")


if __name__ == "__main__":
    main()
