"""What the writer's two Dagster runs of the scale-out path cost in CPU per session (issue 21): the ingest run
(`raw_messages`) and the commit run (`collapsed_messages`, `chunks`, `chunk_embeddings`, `session_summaries`), each
taking what the compute steps staged, without the latency of compute around them.

    .venv/bin/python benchmarks/stage_commits.py [--sessions 48] [--repeat 3] [--profile FILE]
        [--planned-per-partition] [--postgres URL]

benchmarks/scale_out.py's N equal-sized sessions, configuration and Dagster instance (one planned event per asset of
a run, as the team deployment (deploy/) launches runs; `--planned-per-partition`: Dagster's default, one per asset and
partition; `--postgres URL`: deploy/'s PostgreSQL storage, see scale_out.py), embedding server on 127.0.0.1 with no
latency here, `--repeat` times from an empty warehouse: `staged_parses` (in this process), the writer's ingest run,
`staged_results`, the writer's commit run; CPU seconds (`time.process_time`: a loaded machine inflates them less
than wall time) of the two writer runs per session, their median. The same work through the stage functions alone
(`pipeline.ingest`, then each of `pipeline.SESSION_STEPS`, in process, no Dagster), per stage, shows how much of a
writer run is the stages' own and how much Dagster's.
`--profile FILE` writes cProfile stats (CPU time) of the last repeat's writer runs.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]

from openai_server import OpenAICompatibleServer  # noqa: E402  (tests/openai_server.py)
from scale_out import add_instance_option, dagster_instance, write_config, write_sessions  # noqa: E402


def writer_cpu(base: Path, sources: Path, base_url: str, keys: list[str], profile: cProfile.Profile | None) -> tuple[float, float]:
    """CPU seconds of the writer's ingest run and commit run, from an empty warehouse with everything staged."""
    import dagster as dg

    from sessionmem_pipeline.defs.assets import staged_parses, staged_results
    from sessionmem_pipeline.defs.resources import SessionmemResource
    from scale_out import writer_assets

    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    config = write_config(base / "sessionmem.toml", base / "w.duckdb", sources, base_url, 1)
    instance = dg.DagsterInstance.get()
    resources = {"sessionmem": SessionmemResource(config_file=str(config))}
    tags = {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
    ingest, commits, _ = writer_assets()
    seconds = []
    for compute, writer in (([staged_parses], ingest), ([staged_results], commits)):
        assert dg.materialize(compute, instance=instance, resources=resources, tags=tags).success
        if profile is not None:
            profile.enable()
        started = time.process_time()
        assert dg.materialize(writer, instance=instance, resources=resources, tags=tags).success
        seconds.append(time.process_time() - started)
        if profile is not None:
            profile.disable()
    return seconds[0], seconds[1]


def stages_cpu(base: Path, sources: Path, base_url: str) -> dict[str, float]:
    """CPU seconds of each stage function committing what compute staged, from an empty warehouse, no Dagster."""
    from sessionmem_pipeline.config import load_settings
    from sessionmem_pipeline.stages import pipeline
    from sessionmem_pipeline.stages.discover import scan_sources
    from sessionmem_pipeline.stages.ingest_staging import compute_parses
    from sessionmem_pipeline.stages.privacy import privacy_rules
    from sessionmem_pipeline.stages.registry import SUMMARIZE_NOW, Providers, StageContext
    from sessionmem_pipeline.stages.staging import compute_sessions
    from sessionmem_pipeline.warehouse import Warehouse, publish_if_stale

    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    settings = load_settings(write_config(base / "sessionmem.toml", base / "w.duckdb", sources, base_url, 1), env={})
    seconds: dict[str, float] = {}

    def commit(steps: dict) -> None:
        with Warehouse(settings.warehouse) as wh:
            ctx = StageContext(wh, settings, Providers(settings), "benchmark", summarize=SUMMARIZE_NOW)
            for name, step in steps.items():
                started = time.process_time()
                step(ctx, pipeline.StageReport())
                seconds[name] = time.process_time() - started
            generation, _ = wh.finish(measure=False)
        publish_if_stale(settings.warehouse, generation)  # compute reads the snapshot

    compute_parses(settings, None)
    scan = scan_sources(settings.sources, rules=privacy_rules(settings))
    commit({"ingest": lambda ctx, report: pipeline.ingest(ctx, scan, report)})
    compute_sessions(settings, None, Providers(settings), summarize=SUMMARIZE_NOW)
    commit(pipeline.SESSION_STEPS)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", help="write cProfile stats of the last repeat's writer runs to this file")
    add_instance_option(parser)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="stage-commits-"))
    dagster_instance(base, planned_per_partition=args.planned_per_partition, postgres=args.postgres)

    import dagster as dg

    from sessionmem_pipeline.defs.partitions import session_partitions
    from sessionmem_pipeline.stages.discover import discover

    sources = base / "sources"
    write_sessions(sources, args.sessions)
    keys = sorted(f.partition_key for f in discover([sources]))
    dg.DagsterInstance.get().add_dynamic_partitions(session_partitions.name, keys)
    runs = []
    with OpenAICompatibleServer(latency_seconds=0.0) as server:
        for repeat in range(args.repeat):
            profile = cProfile.Profile(time.process_time) if args.profile and repeat == args.repeat - 1 else None
            runs.append(writer_cpu(base / "run", sources, server.base_url, keys, profile))
            if profile is not None:
                profile.dump_stats(args.profile)
        stages = [stages_cpu(base / "stages", sources, server.base_url) for _ in range(args.repeat)]
    shutil.rmtree(base, ignore_errors=True)
    print(f"{args.sessions} sessions, everything staged, median of {args.repeat} runs; CPU ms per session; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| writer run | median | each run |\n|---|---|---|")
    for name, index in (("ingest (raw_messages)", 0), ("commit (collapse, chunk, embed, summary)", 1)):
        values = [run[index] * 1000 / args.sessions for run in runs]
        print(f"| {name} | {statistics.median(values):.0f} | {' / '.join(f'{v:.0f}' for v in values)} |")
    print("\nthe stage functions alone (no Dagster)\n| stage | median | each run |\n|---|---|---|")
    for name in stages[0]:
        values = [run[name] * 1000 / args.sessions for run in stages]
        print(f"| {name} | {statistics.median(values):.1f} | {' / '.join(f'{v:.1f}' for v in values)} |")


if __name__ == "__main__":
    main()
