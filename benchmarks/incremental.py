"""Cost follows the change (issue 15): what one small change costs in a small and a large warehouse.

    .venv/bin/python benchmarks/incremental.py [--chunks 1000 10000 100000] [--changes 20] [--json]

Per size: generates Claude Code sessions (benchmarks/indexing.py) until the warehouse holds about that many chunks,
indexes them with `index_sources` (embeddings from a fast fake OpenAI-compatible server on 127.0.0.1 that hashes
words into vectors: the point is the pipeline's own cost), then times a run after: nothing changed; one message
appended to one session; one new session; one deleted file (wall time and the slowest stages). Then applies
`--changes` more such changes (run after each) and compares the live file and snapshot with a fresh build of the
same sources, and the first build's file with a bulk copy of its data (`warehouse.rebuild_file`): the two file-size
ratios of issue 15, printed in their own table.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests")]

from indexing import session_lines  # noqa: E402
from openai_server import OpenAICompatibleServer  # noqa: E402

from sessionmem_pipeline.config import Settings, load_settings  # noqa: E402
from sessionmem_pipeline.stages.run import index_sources  # noqa: E402
from sessionmem_pipeline.warehouse import Warehouse, rebuild_file, snapshot_path  # noqa: E402

DIMENSIONS = 384
MESSAGES_PER_SESSION = 60
START = datetime(2025, 1, 6, tzinfo=UTC)


class Corpus:
    """Session files under one source root, and the small changes made to them."""

    def __init__(self, root: Path, seed: int = 15) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.files: list[Path] = []

    def add_session(self) -> Path:
        number = len(self.files)
        project = f"project-{number % 20}"
        lines = session_lines(self.rng, MESSAGES_PER_SESSION, START + timedelta(hours=number), project)
        path = self.root / project / f"session-{number:06d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.files.append(path)
        return path

    def append_message(self) -> None:
        path = self.files[len(self.files) // 2]
        last = json.loads(path.read_text(encoding="utf-8").splitlines()[-1])
        moment = datetime.fromisoformat(last["timestamp"].replace("Z", "+00:00")) + timedelta(minutes=1)
        line = {**last, "parentUuid": last["uuid"], "uuid": f"appended-{time.monotonic_ns()}", "type": "user",
                "timestamp": moment.isoformat().replace("+00:00", "Z"),
                "message": {"role": "user", "content": "One more thing: the invoice export times out at 30 s."}}
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")

    def delete_file(self) -> None:
        self.files.pop(self.rng.randrange(len(self.files))).unlink()


def settings_for(warehouse: Path, sources: Path, base_url: str) -> Settings:
    flags = {
        "warehouse": str(warehouse),
        "sources": [str(sources)],
        "embedding.provider": "openai",
        "embedding.base_url": base_url,
        "embedding.model": "fake-hash-embedder",
        "embedding.dimensions": DIMENSIONS,
        "embedding.api_key": "not-a-key",
    }
    return load_settings(None, flags, env={}, cwd=warehouse.parent, home=warehouse.parent)


def timed_run(settings: Settings) -> dict:
    report = index_sources(settings)
    stages = sorted(report.stage_seconds.items(), key=lambda item: -item[1])
    return {"seconds": round(report.seconds, 2), "stages": {k: round(v, 2) for k, v in stages[:4]},
            "rebuilt": "rebuild" in report.stage_seconds}


def sizes(warehouse: Path) -> dict:
    return {"file_mb": round(warehouse.stat().st_size / 1e6, 1),
            "snapshot_mb": round(snapshot_path(warehouse).stat().st_size / 1e6, 1)}


def chunk_count(warehouse: Path) -> int:
    with Warehouse(warehouse) as wh:
        return wh.scalar("SELECT count(*) FROM chunks")


def measure(folder: Path, target_chunks: int, changes: int, base_url: str) -> dict:
    corpus = Corpus(folder / "sources")
    warehouse = folder / "live" / "w.duckdb"
    settings = settings_for(warehouse, corpus.root, base_url)
    corpus.add_session()
    index_sources(settings)
    per_session = max(chunk_count(warehouse), 1)
    for _ in range(max(target_chunks // per_session - 1, 0)):
        corpus.add_session()
    started = time.perf_counter()
    first = timed_run(settings)
    first["seconds"] = round(time.perf_counter() - started, 2)
    row: dict = {"chunks": chunk_count(warehouse), "sessions": len(corpus.files), "first_index": first}
    bulk = folder / "bulk" / "w.duckdb"
    bulk.parent.mkdir()
    shutil.copy(warehouse, bulk)
    rebuild_file(bulk)
    row["first_mb"] = round(warehouse.stat().st_size / 1e6, 1)
    row["bulk_mb"] = round(bulk.stat().st_size / 1e6, 1)
    row["first_vs_bulk"] = round(warehouse.stat().st_size / bulk.stat().st_size, 2)

    changes_by_name = {"append": corpus.append_message, "new session": corpus.add_session, "delete": corpus.delete_file}
    row["nothing"] = timed_run(settings)
    for name, change in changes_by_name.items():
        change()
        row[name] = timed_run(settings)
    rebuilds = 0
    for step in range(changes):
        list(changes_by_name.values())[step % 3]()
        rebuilds += timed_run(settings)["rebuilt"]
    row["after_changes"] = {**sizes(warehouse), "rebuilds": rebuilds}
    fresh = folder / "fresh" / "w.duckdb"
    index_sources(settings_for(fresh, corpus.root, base_url))
    row["fresh"] = sizes(fresh)
    row["growth"] = round(row["after_changes"]["file_mb"] / row["fresh"]["file_mb"], 2)
    row["snapshot_growth"] = round(row["after_changes"]["snapshot_mb"] / row["fresh"]["snapshot_mb"], 2)
    return row


def print_table(rows: Sequence[dict], changes: int) -> None:
    print(f"{'chunks':>8} {'first s':>8} {'nothing s':>9} {'append s':>9} {'new s':>7} {'delete s':>9} "
          f"{'file MB':>8} {'snap MB':>8} {'fresh MB':>9} {'growth':>7} {'1st/bulk':>8}")
    for r in rows:
        print(f"{r['chunks']:>8} {r['first_index']['seconds']:>8} {r['nothing']['seconds']:>9} "
              f"{r['append']['seconds']:>9} {r['new session']['seconds']:>7} {r['delete']['seconds']:>9} "
              f"{r['after_changes']['file_mb']:>8} {r['after_changes']['snapshot_mb']:>8} {r['fresh']['file_mb']:>9} "
              f"{r['growth']:>7} {r['first_vs_bulk']:>8}")
    print(f"file/snap MB: after {changes} more changes (append/new/delete in turn); growth = file / fresh build's file;"
          " 1st/bulk = first index's file / a bulk copy of its data")
    print(f"\nfile size (issue 15 targets: both ratios <= 1.3):")
    print(f"{'chunks':>8} {'first MB':>9} {'bulk MB':>8} {'first/bulk':>10} {'rebuilt':>7}   {'after MB':>8} "
          f"{'fresh MB':>8} {'after/fresh':>11} {'snap MB':>8} {'snap/fresh':>10} {'rebuilds':>8}")
    for r in rows:
        after = r["after_changes"]
        print(f"{r['chunks']:>8} {r['first_mb']:>9} {r['bulk_mb']:>8} {r['first_vs_bulk']:>10} "
              f"{'yes' if r['first_index']['rebuilt'] else 'no':>7}   {after['file_mb']:>8} {r['fresh']['file_mb']:>8} "
              f"{r['growth']:>11} {after['snapshot_mb']:>8} {r['snapshot_growth']:>10} {after['rebuilds']:>8}")
    print("first: the file after the first index (rebuilt: whether that run rebuilt it, Warehouse.outgrown); bulk: "
          f"a rebuild_file copy of it; after: after {changes} changes, of which `rebuilds` rebuilt the file")
    print("\nslowest stages (s):")
    for r in rows:
        for name in ("first_index", "nothing", "append", "new session", "delete"):
            stages = ", ".join(f"{k} {v}" for k, v in r[name]["stages"].items())
            print(f"  {r['chunks']:>8} {name:<12} {stages}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    with OpenAICompatibleServer(native_dimensions=DIMENSIONS) as server:
        for target in args.chunks:
            with tempfile.TemporaryDirectory() as folder:
                rows.append(measure(Path(folder), target, args.changes, server.base_url))
            if not args.json:
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows, args.changes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
