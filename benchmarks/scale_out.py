"""The per-session stages outside the single writer (issue 21): parallel compute workers against a remote-like
embedding API, one writer committing.

    .venv/bin/python benchmarks/scale_out.py [--sessions 24] [--latency 0.3] [--workers 1,2,4]
        [--planned-per-partition] [--postgres URL] [--json]

N equal-sized synthetic Claude Code sessions. The embedding server is the tests' OpenAI-compatible server on
127.0.0.1 with a fixed latency per request (300 ms: a remote API's round trip), batch_size 4. Two tables:
- one worker (`compute_sessions` in this process: collapse, chunk, embed, over a warehouse ingested once; its
  requests go out while it still chunks later sessions) with 1 vs 8 requests in flight;
- the Dagster path, from an empty warehouse: a real instance (DAGSTER_HOME with this repo's dagster.yaml; runs
  launched as the team deployment (deploy/) launches them, with `DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS=1`:
  one planned event per asset of a run; `--planned-per-partition`, Dagster's default, one per asset and partition;
  its storage SQLite, or with `--postgres URL` deploy/dagster.yaml's PostgreSQL storage in a new database on that
  server, as the team deployment stores runs and events),
  the compute pool's limit set with `dagster instance concurrency set sessionmem_compute K`, K worker processes each
  covering 1/K of the partitions (one request in flight). Each worker runs `staged_parses` (parse, privacy rules,
  redaction) then `staged_results` (collapse, chunk, embed, from those parses: nothing is ingested yet) in one run,
  at once with the others; once every worker's parses are staged, the writer commits them (`raw_messages`) beside
  the compute; when every worker is done, one writer run commits the rest (`collapsed_messages`, `chunks`,
  `chunk_embeddings`, `session_summaries`). `compute s` is first start to last end of the K runs (process start-up
  excluded: before the measured run a worker computes one session of its own, in a scratch instance and warehouse,
  and it stays until the end, as a long-lived worker, deploy/'s Celery worker, does); `ingest s` and `commit s` the two writer runs (the latter's
  steps checked not to overlap); sessions/s and the speedup over K=1 are of the first start to the commit's end. The
  commit runs after the compute, not per worker as each ends: its fixed cost (a run, four assets: 1.3 s of CPU to commit
  one session, 3.0 s for 46) is most of it at this size, and in Dagster 1.13 a
  run whose next step waits for a pool slot polls for it without sleeping (a core busy the whole wait; README,
  Scaling out). The stages over everything (`session_threads`, `memories`, `search_index`: not split,
  the same work for every K) follow in another run, `global s`, shown with the speedup they leave. The final warehouse
  is compared whole (every table, run ids and timestamps aside) with a serial `index_sources` run's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]

from indexing import session_lines  # noqa: E402  (benchmarks/indexing.py: the synthetic transcript writer)
from openai_server import OpenAICompatibleServer  # noqa: E402  (tests/openai_server.py)
from warehouse_tables import warehouse_tables  # noqa: E402  (tests/warehouse_tables.py)

CHILD = """
import json, os, sys, time
import dagster as dg
from sessionmem_pipeline.defs import assets
from sessionmem_pipeline.defs.resources import SessionmemResource
from sessionmem_pipeline.defs.partitions import session_partitions
from sessionmem_pipeline.stages.discover import discover
config, keys, phases, earlier = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
# a long-lived worker has run compute steps before: one over another warehouse, in a scratch instance
scratch = dg.DagsterInstance.ephemeral()
earlier_keys = [f.partition_key for f in discover([earlier["sources"]])]
scratch.add_dynamic_partitions(session_partitions.name, earlier_keys)
assert dg.materialize([assets.staged_parses, assets.staged_results], instance=scratch,
    resources={"sessionmem": SessionmemResource(config_file=earlier["config"])},
    tags={"dagster/asset_partition_range_start": earlier_keys[0],
          "dagster/asset_partition_range_end": earlier_keys[-1]}).success
instance = dg.DagsterInstance.get()
resources = {"sessionmem": SessionmemResource(config_file=config)}
print("ready", flush=True)
for names, go in phases:
    while not os.path.exists(go):
        time.sleep(0.01)
    started, cpu = time.time(), time.process_time()
    result = dg.materialize([getattr(assets, name) for name in names], instance=instance, resources=resources,
        tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]})
    print(json.dumps({"started": started, "ended": time.time(), "cpu": time.process_time() - cpu,
                      "success": result.success}), flush=True)
sys.stdin.read()  # a long-lived worker: it stays (idle) until the benchmark is done with it
"""


def write_sessions(root: Path, count: int, messages: int = 80) -> None:
    """N sessions of the same size (same message count, same sentence lengths), one project each."""
    rng = random.Random(5)
    for n in range(count):
        folder = root / f"-home-dev-project-{n}"
        folder.mkdir(parents=True)
        lines = session_lines(rng, messages, datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=n), f"project-{n}")
        (folder / f"s{n:04d}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def dagster_instance(base: Path, *, planned_per_partition: bool = False, postgres: str | None = None) -> Path:
    """DAGSTER_HOME for this process and the ones it starts: this repo's dagster.yaml with its storage under
    `base`, or with `postgres` (a server's URL) deploy/dagster.yaml, the team deployment's instance, its storage in
    a new database on that server (dropped at exit); and the environment the team deployment gives the processes
    that launch runs (`DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS=1`: one planned event per asset of a run, not
    one per asset and partition), unless `planned_per_partition` (Dagster's default, for comparison)."""
    home = base / "dagster_home"
    home.mkdir()
    if postgres:
        settings = (ROOT / "deploy" / "dagster.yaml").read_text(encoding="utf-8")
        os.environ["DAGSTER_PG_URL"] = fresh_database(postgres, f"scale_out_{os.getpid()}")
    else:  # storage in this run's home, not the clone's
        settings = (ROOT / "dagster.yaml").read_text(encoding="utf-8")
        settings = settings.replace("base_dir: .dagster_home", f"base_dir: {home}")
    (home / "dagster.yaml").write_text(settings, encoding="utf-8")
    os.environ["DAGSTER_HOME"] = str(home)
    os.environ["DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS"] = "0" if planned_per_partition else "1"
    return home


def fresh_database(url: str, name: str) -> str:
    """The URL of a new, empty database `name` on the server of `url` (a SQLAlchemy psycopg2 URL), dropped when
    this process exits."""
    import atexit

    import psycopg2  # dagster-postgres's driver (the `[deploy]` extra)
    from sqlalchemy.engine import make_url

    server = make_url(url)
    options = {"host": server.host, "port": server.port, "user": server.username, "password": server.password,
               "dbname": server.database}

    def execute(statement: str) -> None:
        connection = psycopg2.connect(**options)
        connection.autocommit = True  # CREATE and DROP DATABASE run outside a transaction
        try:
            connection.cursor().execute(statement)
        finally:
            connection.close()

    execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    execute(f"CREATE DATABASE {name}")
    atexit.register(execute, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    return server.set(database=name).render_as_string(hide_password=False)


def add_instance_option(parser: argparse.ArgumentParser) -> None:
    """`--planned-per-partition` and `--postgres`, `dagster_instance`'s choices."""
    parser.add_argument("--planned-per-partition", action="store_true",
                        help="Dagster's default: a planned event per asset and partition when a run starts")
    parser.add_argument("--postgres", metavar="URL",
                        help="the team deployment's instance (deploy/dagster.yaml) on this PostgreSQL server, e.g. "
                             "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres (needs the [deploy] extra)")


def write_config(path: Path, warehouse: Path, sources: Path, base_url: str, in_flight: int) -> Path:
    path.write_text(
        f'warehouse = "{warehouse}"\nsources = ["{sources}"]\n[summaries]\nenabled = false\n'
        f'[embedding]\nprovider = "openai"\nbase_url = "{base_url}"\nmodel = "text-embedding-3-small"\n'
        f"dimensions = 64\nbatch_size = 4\nmax_in_flight = {in_flight}\n",
        encoding="utf-8",
    )
    return path


def one_worker(config: Path, sessions: int, in_flight_options: list[int]) -> list[dict]:
    """`compute_sessions` over every partition in this process, with N requests in flight."""
    from sessionmem_pipeline.config import load_settings
    from sessionmem_pipeline.stages.registry import Providers
    from sessionmem_pipeline.stages.staging import compute_sessions, staging_folder

    rows = []
    for in_flight in in_flight_options:
        settings = load_settings(config, env={}).with_overrides({"embedding.max_in_flight": in_flight})
        started = time.perf_counter()
        outcome = compute_sessions(settings, None, Providers(settings))
        seconds = time.perf_counter() - started
        shutil.rmtree(staging_folder(settings).parent)
        rows.append({"in_flight": in_flight, "texts": outcome.computed.get("embed", 0), "seconds": seconds,
                     "sessions_per_s": sessions / seconds})
    for row in rows:
        row["speedup"] = rows[0]["seconds"] / row["seconds"]
    return rows


def overlapping_steps(instance, run_id: str) -> int:
    """How many of the run's steps started before the previous one ended (the writer's steps must not)."""
    import dagster as dg

    spans: dict[str, list[float]] = {}
    for record in instance.get_records_for_run(run_id).records:
        event = record.event_log_entry
        if event.dagster_event is None or event.step_key is None:
            continue
        if event.dagster_event.event_type == dg.DagsterEventType.STEP_START:
            spans.setdefault(event.step_key, [event.timestamp, event.timestamp])[0] = event.timestamp
        elif event.dagster_event.event_type == dg.DagsterEventType.STEP_SUCCESS:
            spans.setdefault(event.step_key, [event.timestamp, event.timestamp])[1] = event.timestamp
    ordered = sorted(spans.values())
    return sum(1 for before, after in zip(ordered, ordered[1:]) if after[0] < before[1])


def dagster_workers(base: Path, config: Path, keys: list[str], workers: int) -> dict:
    """From an empty warehouse: K compute runs at once (1/K of the partitions each; `staged_parses` then
    `staged_results`) under pool limit K, the writer's ingest run as soon as every parse is staged (beside the
    compute runs' `staged_results`, which work from the staged parses), then the one writer commit run."""
    import dagster as dg

    from sessionmem_pipeline.config import load_settings
    from sessionmem_pipeline.defs.resources import SessionmemResource
    from sessionmem_pipeline.stages.registry import INGEST
    from sessionmem_pipeline.stages.staging import staged_files

    warehouse_dir = base / "warehouse"
    shutil.rmtree(warehouse_dir, ignore_errors=True)
    warehouse_dir.mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(base / "dagster_home")}
    subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "instance", "concurrency", "set", "sessionmem_compute", str(workers)],
        env=env, check=True, capture_output=True,
    )
    go = base / f"go-{workers}"
    phases = [(["staged_parses", "staged_results"], str(go))]
    # contiguous runs of the (sorted) partition order: a worker's run names its part as a partition range
    slices = [keys[i * len(keys) // workers:(i + 1) * len(keys) // workers] for i in range(workers)]
    children = [
        subprocess.Popen([sys.executable, "-c", CHILD, str(config), json.dumps(sorted(part)), json.dumps(phases),
                          json.dumps(earlier_run(base / f"earlier-{workers}-{n}", config))],
                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for n, part in enumerate(slices)
    ]
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    instance = dg.DagsterInstance.get()
    resources = {"sessionmem": SessionmemResource(config_file=str(config))}
    tags = {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
    ingest, commits, global_assets = writer_assets()
    settings = load_settings(config, env={})
    go.touch()
    deadline = time.monotonic() + 600
    while len(staged_files(settings, INGEST)) < workers:  # each compute run stages its parses in one file
        assert time.monotonic() < deadline, "the compute runs staged no parses"
        time.sleep(0.01)
    spans = {"ingest": [writer_run(instance, ingest, resources, tags)]}
    results = [next_result(child) for child in children]
    assert all(r["success"] for r in results)
    spans["commit"] = [writer_run(instance, commits, resources, tags)]
    for child in children:  # the workers end only now: their process exits do not slow the commit
        child.communicate()
    started = time.perf_counter()
    assert dg.materialize(global_assets, instance=instance, resources=resources).success
    global_seconds = time.perf_counter() - started
    computed_in_commit = {
        name: sum(
            event.materialization.metadata["computed_in_commit"].value
            for *_, result in runs
            for event in result.get_asset_materialization_events()
            if "computed_in_commit" in event.materialization.metadata
        )
        for name, runs in spans.items()
    }
    first_start = min(r["started"] for r in results)
    last_end = max(r["ended"] for r in results)
    [(ingest_s, ingest_cpu, ingest_start, _)] = spans["ingest"]
    [(commit_s, commit_cpu, commit_start, commit)] = spans["commit"]
    end_to_end = commit_start + commit_s - first_start
    return {"workers": workers, "compute_s": last_end - first_start, "compute_cpu_s": sum(r["cpu"] for r in results),
            "ingest_s": ingest_s, "ingest_cpu_s": ingest_cpu, "ingest_started_s": ingest_start - first_start,
            "commit_s": commit_s, "commit_cpu_s": commit_cpu, "after_compute_s": commit_start + commit_s - last_end,
            "end_to_end_s": end_to_end, "global_s": global_seconds, "computed_in_commit": computed_in_commit,
            "overlapping_commits": overlapping_steps(instance, commit.run_id),
            "sessions_per_s": len(keys) / end_to_end, "tables": warehouse_tables(warehouse_dir / "w.duckdb")}


def earlier_run(folder: Path, config: Path) -> dict:
    """What a worker computes before the measured run, as a long-lived worker has (its first run pays for lazy
    imports and set-ups the later ones do not): one session into a warehouse of its own, same embedder."""
    write_sessions(folder / "sources", 1)
    settings = config.read_text(encoding="utf-8").splitlines()
    own = {"warehouse": f'warehouse = "{folder / "w.duckdb"}"', "sources": f'sources = ["{folder / "sources"}"]'}
    lines = [own.get(line.split(" = ")[0], line) for line in settings]
    (folder / "sessionmem.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"config": str(folder / "sessionmem.toml"), "sources": str(folder / "sources")}


def next_result(child: subprocess.Popen) -> dict:
    """A worker's report of its next run (its only output lines that are JSON objects)."""
    assert child.stdout is not None
    while not (line := child.stdout.readline()).startswith("{"):
        assert line, "the worker ended without reporting"
    return json.loads(line)


def writer_run(instance, assets: list, resources: dict, tags: dict) -> tuple[float, float, float, object]:
    """One writer run over every partition: wall seconds, this process's CPU seconds, when it started (epoch
    seconds, the workers' clock), the result."""
    import dagster as dg

    started, wall, cpu = time.time(), time.perf_counter(), time.process_time()
    result = dg.materialize(assets, instance=instance, resources=resources, tags=tags)
    assert result.success
    return time.perf_counter() - wall, time.process_time() - cpu, started, result


def writer_assets() -> tuple[list, list, list]:
    """The writer's ingest, its other per-session commit assets, and those over everything (imported late:
    DAGSTER_HOME must be set first)."""
    from sessionmem_pipeline.defs.assets import (
        chunk_embeddings,
        chunks,
        collapsed_messages,
        memories,
        raw_messages,
        search_index,
        session_summaries,
        session_threads,
    )

    commits = [collapsed_messages, chunks, chunk_embeddings, session_summaries]
    return [raw_messages], commits, [session_threads, memories, search_index]


def serial_tables(base: Path, sources: Path, base_url: str) -> dict:
    """The same sessions indexed by one in-process `index_sources` run."""
    from sessionmem_pipeline.config import load_settings
    from sessionmem_pipeline.stages.run import index_sources

    (base / "serial").mkdir()
    config = write_config(base / "serial.toml", base / "serial" / "w.duckdb", sources, base_url, 1)
    index_sources(load_settings(config, env={}))
    return warehouse_tables(base / "serial" / "w.duckdb")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=24)
    parser.add_argument("--latency", type=float, default=0.3)
    parser.add_argument("--workers", default="1,2,4")
    add_instance_option(parser)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()  # the wall times are those of a latency-bound run only while the cores are free
    base = Path(tempfile.mkdtemp(prefix="scale-out-"))
    dagster_instance(base, planned_per_partition=args.planned_per_partition, postgres=args.postgres)

    import dagster as dg

    from sessionmem_pipeline.defs.assets import raw_messages
    from sessionmem_pipeline.defs.partitions import session_partitions
    from sessionmem_pipeline.defs.resources import SessionmemResource
    from sessionmem_pipeline.stages.discover import discover

    sources = base / "sources"
    write_sessions(sources, args.sessions)
    with OpenAICompatibleServer(latency_seconds=args.latency) as server:
        template = base / "template"
        template.mkdir()
        config = write_config(base / "sessionmem.toml", base / "warehouse" / "w.duckdb", sources, server.base_url, 1)
        prepare = write_config(base / "prepare.toml", template / "w.duckdb", sources, server.base_url, 1)
        keys = sorted(f.partition_key for f in discover([sources]))
        instance = dg.DagsterInstance.get()
        instance.add_dynamic_partitions(session_partitions.name, keys)
        dg.materialize([raw_messages], instance=instance,
                       resources={"sessionmem": SessionmemResource(config_file=str(prepare))},
                       tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]})
        single = one_worker(prepare, args.sessions, [1, 8])
        runs = [dagster_workers(base, config, keys, int(k)) for k in args.workers.split(",")]
        serial = serial_tables(base, sources, server.base_url)
        requests = len(server.requests)
    for row in runs:
        row["speedup"] = runs[0]["end_to_end_s"] / row["end_to_end_s"]
        row["speedup_with_global"] = (
            (runs[0]["end_to_end_s"] + runs[0]["global_s"]) / (row["end_to_end_s"] + row["global_s"])
        )
        row["same_as_serial"] = row.pop("tables") == serial
    shutil.rmtree(base, ignore_errors=True)
    if args.json:
        print(json.dumps({"one_worker": single, "dagster": runs, "requests": requests}, indent=2))
        return
    print(f"{args.sessions} sessions, {single[0]['texts']} chunk texts, {args.latency * 1000:.0f} ms per request, batch 4; "
          f"load average {load[0]:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores")
    print("\none worker (compute_sessions)\n| in flight | seconds | sessions/s | speedup |\n|---|---|---|---|")
    for row in single:
        print(f"| {row['in_flight']} | {row['seconds']:.1f} | {row['sessions_per_s']:.2f} | {row['speedup']:.1f}x |")
    planned = "asset and partition" if args.planned_per_partition else "asset"
    print("\nDagster from an empty warehouse: K compute runs at once (staged_parses then staged_results; 1/K of the "
          "partitions each, pool sessionmem_compute = K, 1 request in flight each); the writer's ingest run once "
          "every parse is staged (beside the compute), then one writer commit run; each run starts with a planned "
          f"event per {planned}; instance storage "
          f"{'PostgreSQL (deploy/dagster.yaml)' if args.postgres else 'SQLite (dagster.yaml)'}")
    print("| K | compute s (CPU s) | ingest s (CPU s), started at s | ingest CPU ms/session | commit s (CPU s) "
          "| commit CPU ms/session | commit ends after compute, s | first parse to last commit s | sessions/s "
          "| speedup | + global s | speedup with global | computed in commit (ingest, other) | overlapping commits "
          "| warehouse = serial run's |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in runs:
        print(f"| {row['workers']} | {row['compute_s']:.1f} ({row['compute_cpu_s']:.1f}) | {row['ingest_s']:.1f} "
              f"({row['ingest_cpu_s']:.1f}), {row['ingest_started_s']:.1f} | "
              f"{row['ingest_cpu_s'] * 1000 / args.sessions:.0f} | {row['commit_s']:.1f} "
              f"({row['commit_cpu_s']:.1f}) | {row['commit_cpu_s'] * 1000 / args.sessions:.0f} | "
              f"{row['after_compute_s']:.1f} | {row['end_to_end_s']:.1f} | {row['sessions_per_s']:.2f} | "
              f"{row['speedup']:.1f}x | {row['global_s']:.1f} | {row['speedup_with_global']:.1f}x | "
              f"{row['computed_in_commit']['ingest']}, {row['computed_in_commit']['commit']} | "
              f"{row['overlapping_commits']} | {row['same_as_serial']} |")


if __name__ == "__main__":
    main()
