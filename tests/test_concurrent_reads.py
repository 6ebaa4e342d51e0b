"""Readers never fail because a pipeline run is writing: searches in a loop while `sessionmem index` runs in
another process, and a reader picks up the newer snapshot afterwards."""

import json
import subprocess
import sys
from pathlib import Path

from sessionmem_pipeline.client import SessionMemory
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.stages.run import index_sources


def _write_sessions(root: Path, start: int, count: int) -> None:
    for n in range(start, start + count):
        folder = root / f"team{n % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = [
            json.dumps({"role": "user", "content": f"How should we shard table {n} for the billing export?",
                        "timestamp": f"2026-04-{1 + n % 28:02d}T09:00:00Z"}),
            json.dumps({"role": "assistant", "content": f"Shard table {n} by tenant id; we decided on 16 shards.",
                        "timestamp": f"2026-04-{1 + n % 28:02d}T09:01:00Z"}),
        ]
        (folder / f"s{n}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_search_loop_never_fails_while_index_writes(tmp_path: Path) -> None:
    root = tmp_path / "sources"
    _write_sessions(root, 0, 5)
    settings = load_settings(flags={"warehouse": str(tmp_path / "w.duckdb"), "sources": [str(root)]}, env={})
    index_sources(settings)
    _write_sessions(root, 5, 60)  # the next run has real work to do while we search

    writer = subprocess.Popen(
        [sys.executable, "-m", "sessionmem_pipeline.cli", "index", "--warehouse", str(settings.warehouse),
         "--source", str(root)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    memory = SessionMemory(settings=settings)
    searches = 0
    while writer.poll() is None:
        assert memory.search("billing export shards", limit=3)  # never an error, never empty
        searches += 1
    out, err = writer.communicate()
    assert writer.returncode == 0, err
    assert searches > 0
    sessions = memory.connection().execute("SELECT count(*) FROM sessions").fetchone()[0]
    assert sessions == 65  # the reader reopened the newer snapshot
    log = (tmp_path / "search-log.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(log) == searches and all(json.loads(line)["latency_ms"] >= 0 for line in log)
