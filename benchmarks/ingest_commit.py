"""What the writer's ingest (the `raw_messages` commit) costs per session, parsing in the writer or taking the parses
a compute step staged (issue 21), without Dagster around it.

    .venv/bin/python benchmarks/ingest_commit.py [--sessions 48] [--repeat 3] [--parse-in-writer]

N synthetic Claude Code sessions (benchmarks/scale_out.py's) are ingested into a fresh warehouse by the ingest stage
(`pipeline.ingest`, in this process), `--repeat` times each way, alternating: with nothing staged (the writer
parses, validates, applies the privacy rules and redacts) and after `compute_parses` staged every file. CPU seconds
(`time.process_time`, so a loaded machine inflates them less than wall time) per session, each way's median; the
compute step's CPU is shown apart. `--parse-in-writer` measures the first way only (also runs against code without
staged parses, for a baseline).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "benchmarks")]

from scale_out import write_sessions  # noqa: E402  (the same equal-sized sessions)


def ingest_cpu(base: Path, sources: Path, staged: bool) -> tuple[float, float]:
    """CPU seconds of one compute step (0 when not staged) and of the writer's ingest stage, on a new warehouse."""
    from sessionmem_pipeline.config import load_settings
    from sessionmem_pipeline.stages.discover import scan_sources
    from sessionmem_pipeline.stages.pipeline import StageReport, ingest
    from sessionmem_pipeline.stages.registry import Providers, StageContext
    from sessionmem_pipeline.warehouse import Warehouse

    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    settings = load_settings(flags={"warehouse": str(base / "w.duckdb"), "sources": [str(sources)]}, env={})
    compute = 0.0
    if staged:
        from sessionmem_pipeline.stages.ingest_staging import compute_parses

        started = time.process_time()
        compute_parses(settings, None)
        compute = time.process_time() - started
    with Warehouse(settings.warehouse) as wh:
        ctx = StageContext(wh, settings, Providers(settings), "benchmark")
        scan = scan_sources(settings.sources)
        started = time.process_time()
        ingest(ctx, scan, StageReport())
        return compute, time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--parse-in-writer", action="store_true", help="only the writer parsing (a baseline)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ingest-commit-"))
    sources = base / "sources"
    write_sessions(sources, args.sessions)
    ways = [False] if args.parse_in_writer else [False, True]
    measured: dict[bool, list[tuple[float, float]]] = {way: [] for way in ways}
    for _ in range(args.repeat):
        for way in ways:
            measured[way].append(ingest_cpu(base / "run", sources, way))
    shutil.rmtree(base, ignore_errors=True)
    print(f"{args.sessions} sessions, median of {args.repeat} runs each, CPU ms per session")
    print("| parse in | compute step | writer's ingest | writer's ingest, each run |\n|---|---|---|---|")
    for way, runs in measured.items():
        per_session = [writer * 1000 / args.sessions for _, writer in runs]
        compute = statistics.median(c for c, _ in runs) * 1000 / args.sessions
        print(f"| {'compute (staged)' if way else 'the writer'} | {compute:.0f} | {statistics.median(per_session):.0f} | "
              f"{' / '.join(f'{value:.0f}' for value in per_session)} |")


if __name__ == "__main__":
    main()
