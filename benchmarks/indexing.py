"""Indexing speed and scale with the offline defaults (issue 8), against the embedding model's own limit.

    .venv/bin/python benchmarks/indexing.py [--sessions 100] [--big 10000] [--json]

Generates N synthetic Claude Code sessions (sizes mostly 20-200 messages, a few over 2,000; tool calls; some
malformed lines), indexes them with `index_sources` in a child process (for its peak RSS), then measures: the
per-stage breakdown; the embedding model alone on the same chunk texts (the physical limit: overhead =
end-to-end / embedding-only); adding one session; appending 10 messages to one session; a re-run with nothing
changed; and the peak RSS of one 10,000-message session (`--big`, 0 to skip).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

WORDS = (
    "cache invoice parser retry queue schema migration token webhook checkout cart session index vector pipeline "
    "deploy config flag latency timeout encoder tenant billing report export import shard replica backup alert"
).split()
TOOLS = ["Read", "Edit", "Bash", "Grep", "Write"]


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def session_lines(rng: random.Random, messages: int, start: datetime, project: str) -> list[str]:
    """A Claude Code transcript: user requests, assistant text with tool calls, tool results, a few bad lines."""
    session_id = str(uuid.UUID(int=rng.getrandbits(128)))
    lines, parent = [], None
    moment = start

    def emit(kind: str, message: dict) -> None:
        nonlocal parent, moment
        moment += timedelta(seconds=rng.randint(5, 90))
        entry_id = str(uuid.UUID(int=rng.getrandbits(128)))
        lines.append(json.dumps({
            "parentUuid": parent, "isSidechain": False, "type": kind, "message": message, "uuid": entry_id,
            "sessionId": session_id, "cwd": f"/home/dev/{project}", "version": "2.1.41",
            "timestamp": moment.isoformat().replace("+00:00", "Z"),
        }))
        parent = entry_id

    while len(lines) < messages:
        emit("user", {"role": "user", "content": " ".join(_sentence(rng, rng.randint(6, 18)) for _ in range(2))})
        for _ in range(rng.randint(0, 3)):
            tool = rng.choice(TOOLS)
            call_id = f"toolu_{rng.getrandbits(48):x}"
            arguments = {"command": f"pytest tests/test_{rng.choice(WORDS)}.py"} if tool == "Bash" else {
                "file_path": f"src/{rng.choice(WORDS)}/{rng.choice(WORDS)}.py", "old_string": "a", "new_string": "b",
                "pattern": rng.choice(WORDS), "content": "x = 1\n"}
            emit("assistant", {"id": f"msg_{rng.getrandbits(40):x}", "role": "assistant", "model": "claude",
                               "content": [{"type": "text", "text": _sentence(rng, rng.randint(8, 20))},
                                           {"type": "tool_use", "id": call_id, "name": tool, "input": arguments}]})
            emit("user", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id,
                                                       "content": "\n".join(_sentence(rng, 8) for _ in range(4))}]})
        emit("assistant", {"id": f"msg_{rng.getrandbits(40):x}", "role": "assistant", "model": "claude",
                           "content": [{"type": "text", "text": " ".join(_sentence(rng, 14) for _ in range(3))}]})
        if rng.random() < 0.02:
            lines.append('{"type": "user", "message": {"role": "user", "content": "truncated')
    return lines


def generate(root: Path, count: int, seed: int = 3) -> int:
    """N sessions in `root/<project>/<id>.jsonl`; the total line count."""
    rng = random.Random(seed)
    total = 0
    for n in range(count):
        size = 2200 if n % 50 == 49 else min(max(int(rng.lognormvariate(4.2, 0.6)), 20), 200)
        project = f"project-{n % 7}"
        lines = session_lines(rng, size, datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=n), project)
        folder = root / f"-home-dev-{project}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"s{n:05d}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        total += len(lines)
    return total


CHILD = """
import json, resource, sys, time
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.stages.run import index_sources
settings = load_settings(flags={"warehouse": sys.argv[1], "sources": [sys.argv[2]]}, env={})
started = time.perf_counter()
report = index_sources(settings)
print(json.dumps({"seconds": time.perf_counter() - started, "stages": report.stage_seconds,
    "sessions": report.sessions_changed, "messages": report.messages_written, "chunks": report.chunks,
    "embedded": report.embedded, "summaries": report.summaries_written,
    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_index(warehouse: Path, sources: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(warehouse), str(sources)], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


DAGSTER_CHILD = """
import json, sys, time
import dagster as dg
from sessionmem_pipeline.defs.assets import PIPELINE_ASSETS
from sessionmem_pipeline.defs.partitions import session_partitions
from sessionmem_pipeline.defs.resources import SessionmemResource
from sessionmem_pipeline.stages.discover import discover
from sessionmem_pipeline.config import load_settings
settings = load_settings(sys.argv[1], env={})
keys = sorted(f.partition_key for f in discover(settings.sources))
instance = dg.DagsterInstance.ephemeral()
instance.add_dynamic_partitions(session_partitions.name, keys)
partitioned = [a for a in PIPELINE_ASSETS if a.partitions_def is not None]
resource = SessionmemResource(config_file=sys.argv[1])
started = time.perf_counter()
result = dg.materialize(partitioned, instance=instance, resources={"sessionmem": resource},
    tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]})
print(json.dumps({"seconds": time.perf_counter() - started, "success": result.success}))
"""


def dagster_overhead(base: Path, sessions: int = 5) -> dict:
    """The same small import in-process (`index_sources`) and as one Dagster run of the partitioned assets."""
    sources = base / "dagster-sources"
    generate(sources, sessions, seed=11)
    direct = run_index(base / "direct.duckdb", sources)
    config = base / "dagster.toml"
    config.write_text(f'warehouse = "{base / "dagster.duckdb"}"\nsources = ["{sources}"]\n', encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", DAGSTER_CHILD, str(config)], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr)
    run = json.loads(done.stdout.strip().splitlines()[-1])
    return {"sessions": sessions, "in_process_s": direct["seconds"], "dagster_run_s": run["seconds"],
            "overhead_s": run["seconds"] - direct["seconds"]}


def embedding_only(warehouse: Path) -> tuple[float, int]:
    """The model alone on the texts the pipeline embedded (chunk contexts and summaries), fresh model, same batch
    size: the physical limit."""
    from sessionmem_pipeline.providers import LocalMiniLMEmbedder
    from sessionmem_pipeline.warehouse import open_reader

    conn = open_reader(warehouse)
    texts = [r[0] for r in conn.execute("SELECT context_content FROM chunks").fetchall()]
    texts += [r[0] for r in conn.execute("SELECT search_text FROM session_summaries").fetchall()]
    conn.close()
    embedder = LocalMiniLMEmbedder()
    started = time.perf_counter()
    for start in range(0, len(texts), 100):
        embedder.embed(texts[start : start + 100])
    return time.perf_counter() - started, len(texts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--big", type=int, default=10_000, help="messages in the single-session RSS run (0: skip)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out: dict = {}
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        sources, warehouse = base / "projects", base / "w.duckdb"
        out["lines"] = generate(sources, args.sessions)
        full = run_index(warehouse, sources)
        out["full"] = full
        limit_seconds, texts = embedding_only(warehouse)
        out["embedding_only"] = {"seconds": limit_seconds, "texts": texts}
        out["overhead"] = full["seconds"] / limit_seconds

        extra = random.Random(99)
        lines = session_lines(extra, 60, datetime(2026, 6, 1, tzinfo=UTC), "project-1")
        (sources / "-home-dev-project-1" / "new.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        out["add_one_session"] = run_index(warehouse, sources)
        grown = sources / "-home-dev-project-1" / "new.jsonl"
        more = session_lines(random.Random(7), 10, datetime(2026, 6, 2, tzinfo=UTC), "project-1")
        session_id = json.loads(lines[0])["sessionId"]
        with open(grown, "a", encoding="utf-8") as handle:
            handle.write("\n".join(line.replace(json.loads(more[0])["sessionId"], session_id) for line in more) + "\n")
        out["append_10_messages"] = run_index(warehouse, sources)
        out["unchanged"] = run_index(warehouse, sources)
        out["dagster"] = dagster_overhead(base)
        if args.big:
            big_sources = base / "big"
            (big_sources / "-home-dev-big").mkdir(parents=True)
            big = session_lines(random.Random(5), args.big, datetime(2026, 2, 1, tzinfo=UTC), "big")
            (big_sources / "-home-dev-big" / "huge.jsonl").write_text("\n".join(big) + "\n", encoding="utf-8")
            out["big_session"] = run_index(base / "big.duckdb", big_sources)
    out["parent_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    full = out["full"]
    print(f"N = {args.sessions} sessions, {out['lines']} lines -> {full['messages']} messages, {full['chunks']} chunks")
    print(f"end-to-end {full['seconds']:.1f}s: {full['sessions'] / full['seconds']:.2f} sessions/s, "
          f"{full['messages'] / full['seconds']:.0f} messages/s, {full['chunks'] / full['seconds']:.1f} chunks/s; "
          f"peak RSS {full['peak_rss_mb']:.0f} MB")
    print("stage breakdown: " + ", ".join(f"{k} {v:.1f}s" for k, v in full["stages"].items()))
    only = out["embedding_only"]
    print(f"embedding model alone on the same {only['texts']} texts: {only['seconds']:.1f}s "
          f"({only['texts'] / only['seconds']:.1f} texts/s)")
    print(f"pipeline overhead = end-to-end / embedding-only = {out['overhead']:.2f}  (target <= 1.25)")
    for label in ("add_one_session", "append_10_messages", "unchanged"):
        run = out[label]
        print(f"{label:<20} {run['seconds']:6.2f}s  {run['messages']} messages written, {run['embedded']} embedded")
    dag = out["dagster"]
    print(f"Dagster: {dag['sessions']} sessions in one run of the partitioned assets {dag['dagster_run_s']:.1f}s vs "
          f"in-process {dag['in_process_s']:.1f}s: overhead {dag['overhead_s']:.1f}s per run")
    if "big_session" in out:
        big = out["big_session"]
        print(f"one {args.big}-message session: {big['seconds']:.1f}s, {big['chunks']} chunks, "
              f"peak RSS {big['peak_rss_mb']:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
