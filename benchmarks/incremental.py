"""Cost follows the change (issue 15): what one small change costs in a small and a large warehouse.

    .venv/bin/python benchmarks/incremental.py [--chunks 1000 10000 100000] [--changes 20] [--json]
        [--keep DIR] [--profile DIR] [--repeat N]

Per size: generates Claude Code sessions (benchmarks/indexing.py) until the warehouse holds about that many chunks,
indexes them with `index_sources` (embeddings from a fast fake OpenAI-compatible server on 127.0.0.1 that hashes
words into vectors: the point is the pipeline's own cost), then times a run after: nothing changed; one message
appended to one session; one new session; one deleted file (wall time and the stages that took 0.01 s or more).
Then applies `--changes` more such changes (run after each) and compares the live file and snapshot with a fresh
build of the same sources, and the first build's file with a bulk copy of its data (`warehouse.rebuild_file`): the
two file-size ratios of issue 15, printed in their own table.

Each run is reported as wall time and CPU time (the process's, all threads: the machine may be shared). `--keep DIR`
keeps each size's first build (sources and warehouse) in DIR/<chunks>/base and measures on a copy of it, so a 100k build
is paid once; `--changes 0` skips the size comparison (and its fresh build); `--profile DIR` writes a cProfile of
each timed run there; `--repeat N` measures each size N times and reports the least times. Before timing, a build
is settled untimed (`settle`: one run, then appends until one rebuilt the file), so the timed runs start from the
state a user's warehouse is in between changes; each timed run says whether it rebuilt the file.
"""

from __future__ import annotations

import argparse
import cProfile
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
        self.files: list[Path] = sorted(root.rglob("session-*.jsonl"), key=lambda p: p.name)

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


def timed_run(settings: Settings, profile: Path | None = None) -> dict:
    """One `index_sources` run: wall and CPU seconds and the stages that took 0.01 s or more (cProfile'd into
    `profile`, if given)."""
    profiler = cProfile.Profile(time.process_time) if profile else None  # CPU time: the machine may be shared
    cpu = time.process_time()
    if profiler:
        profiler.enable()
    report = index_sources(settings)
    if profiler:
        profiler.disable()
        profile.parent.mkdir(parents=True, exist_ok=True)
        profiler.dump_stats(profile)
    stages = sorted(report.stage_seconds.items(), key=lambda item: -item[1])
    return {"seconds": round(report.seconds, 2), "cpu": round(time.process_time() - cpu, 2),
            "stages": {k: round(v, 2) for k, v in stages if v >= 0.01}, "rebuilt": "rebuild" in report.stage_seconds,
            "walk": round(report.stage_seconds["walk"], 2) if "walk" in report.stage_seconds else None}


def sizes(warehouse: Path) -> dict:
    return {"file_mb": round(warehouse.stat().st_size / 1e6, 1),
            "snapshot_mb": round(snapshot_path(warehouse).stat().st_size / 1e6, 1)}


def chunk_count(warehouse: Path) -> int:
    with Warehouse(warehouse) as wh:
        return wh.scalar("SELECT count(*) FROM chunks")


def build(folder: Path, target_chunks: int, base_url: str) -> dict:
    """Sessions in folder/sources until about `target_chunks` chunks, indexed into folder/live: the first build."""
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
    shutil.rmtree(bulk.parent)
    return row


def warm_up(base_url: str) -> None:
    """Index one session once, so what a process loads on first use (the tokenizer, clients) is not charged to
    whichever size is measured first."""
    with tempfile.TemporaryDirectory() as name:
        corpus = Corpus(Path(name) / "sources")
        corpus.add_session()
        index_sources(settings_for(Path(name) / "live" / "w.duckdb", corpus.root, base_url))


def kept_build(keep: Path, target_chunks: int, base_url: str) -> tuple[Path, dict]:
    """The first build of this size, made once in keep/<chunks>/run and kept as keep/<chunks>/base; each call
    restores run/ from base/ (the warehouse stores absolute source paths, so the copy must live where it was built)."""
    run, base = keep / str(target_chunks) / "run", keep / str(target_chunks) / "base"
    done = base / "build.json"
    if not done.exists():
        shutil.rmtree(run.parent, ignore_errors=True)
        run.mkdir(parents=True)
        row = build(run, target_chunks, base_url)
        shutil.copytree(run, base, symlinks=True)
        done.write_text(json.dumps(row))
    else:
        shutil.rmtree(run, ignore_errors=True)
        shutil.copytree(base, run, symlinks=True)
        (run / "build.json").unlink()
    return run, json.loads(done.read_text())


SETTLING_APPENDS = 3
"""Untimed appends (each with its run) at most before the timed runs, stopping after the first that rebuilt the file."""


def settle(corpus: Corpus, settings: Settings) -> int:
    """Brings a kept build to the state a user's warehouse is in between two changes, untimed: one run does whatever
    a newer stage version asks of a build made by older code; appends follow (the first data change of a build from
    before migration 9 links every session's threads once) until one rebuilt the file (Warehouse.finish: a kept
    build is rebuilt in its second or third data change, which would otherwise be timed as that change; in a small
    warehouse this recurs every few changes, which each timed run's `rebuilt` shows) or SETTLING_APPENDS were made.
    Returns the appends made."""
    index_sources(settings)
    for made in range(1, SETTLING_APPENDS + 1):
        corpus.append_message()
        if "rebuild" in index_sources(settings).stage_seconds:
            return made
    return SETTLING_APPENDS


def measure(folder: Path, row: dict, changes: int, base_url: str, profile: Path | None = None) -> dict:
    """Times a run after each kind of small change to the built `folder`, then (`changes` > 0) the file sizes
    after that many more changes against a fresh build of the same sources."""
    corpus = Corpus(folder / "sources", seed=16)
    warehouse = folder / "live" / "w.duckdb"
    settings = settings_for(warehouse, corpus.root, base_url)

    def profile_to(name: str) -> Path | None:
        return profile / f"{row['chunks']}-{name.replace(' ', '_')}.prof" if profile else None

    changes_by_name = {"append": corpus.append_message, "new session": corpus.add_session, "delete": corpus.delete_file}
    row["settling"] = settle(corpus, settings)
    row["nothing"] = timed_run(settings, profile_to("nothing"))
    for name, change in changes_by_name.items():
        change()
        row[name] = timed_run(settings, profile_to(name))
    if not changes:
        return row
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


RUNS = ("nothing", "append", "new session", "delete")


def fastest(repeats: Sequence[dict]) -> dict:
    """One row from repeated measurements of a size: per run, the least wall and the least CPU time (a shared
    machine only ever adds), and the stages of the run with the least wall time."""
    row = dict(repeats[0])
    for name in RUNS:
        runs = [r[name] for r in repeats]
        row[name] = {**min(runs, key=lambda run: run["seconds"]), "cpu": min(run["cpu"] for run in runs)}
    return row


def cell(run: dict) -> str:
    return f"{run['seconds']} / {run['cpu']}{' R' if run['rebuilt'] else ''}"


def print_table(rows: Sequence[dict], changes: int) -> None:
    print(f"{'chunks':>8} {'first s':>8} " + " ".join(f"{name + ' s/cpu':>17}" for name in RUNS)
          + f" {'append walk':>11} {'1st/bulk':>8}")
    for r in rows:
        runs = " ".join(f"{cell(r[name]):>17}" for name in RUNS)
        walk = r["append"].get("walk")
        print(f"{r['chunks']:>8} {r['first_index']['seconds']:>8} {runs} {'-' if walk is None else walk:>11} "
              f"{r['first_vs_bulk']:>8}")
    print("s/cpu: wall / CPU seconds of the run after that change (R: that run rebuilt the file); append walk: wall "
          "seconds of that run's source walk (stats every file: the one cost issue 15 lets grow with the files); "
          "1st/bulk = first index's file / a bulk copy of its data")
    if changes:
        print("\nfile size (issue 15 targets: both ratios <= 1.3):")
        print(f"{'chunks':>8} {'first MB':>9} {'bulk MB':>8} {'first/bulk':>10} {'rebuilt':>7}   {'after MB':>8} "
              f"{'fresh MB':>8} {'after/fresh':>11} {'snap MB':>8} {'snap/fresh':>10} {'rebuilds':>8}")
        for r in rows:
            after = r["after_changes"]
            rebuilt = {True: "yes", False: "no"}.get(r["first_index"].get("rebuilt"), "-")  # "-": a kept build from older code
            print(f"{r['chunks']:>8} {r.get('first_mb', '-'):>9} {r.get('bulk_mb', '-'):>8} {r['first_vs_bulk']:>10} "
                  f"{rebuilt:>7}   {after['file_mb']:>8} {r['fresh']['file_mb']:>8} "
                  f"{r['growth']:>11} {after['snapshot_mb']:>8} {r['snapshot_growth']:>10} {after['rebuilds']:>8}")
        print("first: the file after the first index (rebuilt: whether that run rebuilt it, Warehouse.finish); bulk: "
              f"a rebuild_file copy of it; after: after {changes} changes, of which `rebuilds` rebuilt the file")
    print("\nstages of 0.01 s or more, slowest first (s):")
    for r in rows:
        for name in ("first_index", *RUNS):
            stages = ", ".join(f"{k} {v}" for k, v in r[name]["stages"].items())
            print(f"  {r['chunks']:>8} {name:<12} {stages}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", type=Path, help="keep each size's first build here and measure on copies of it")
    parser.add_argument("--profile", type=Path, help="write a cProfile of each timed run into this folder")
    parser.add_argument("--repeat", type=int, default=1,
                        help="measure each size this many times (on fresh copies of the build); report the least times")
    args = parser.parse_args(argv)
    rows = []
    with OpenAICompatibleServer(native_dimensions=DIMENSIONS) as server:
        warm_up(server.base_url)
        for target in args.chunks:
            repeats = []
            for _ in range(args.repeat):
                if args.keep:
                    folder, row = kept_build(args.keep.resolve(), target, server.base_url)
                    repeats.append(measure(folder, row, args.changes, server.base_url, args.profile))
                else:
                    with tempfile.TemporaryDirectory() as name:
                        repeats.append(measure(Path(name), build(Path(name), target, server.base_url), args.changes,
                                               server.base_url, args.profile))
            rows.append(fastest(repeats))
            if not args.json:
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows, args.changes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
