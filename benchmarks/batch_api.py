"""The embed stage's backlog through the provider's Batch API (`embedding.batch_api`) against plain requests.

    .venv/bin/python benchmarks/batch_api.py [--sessions 12] [--latency 0.3] [--json]

N equal-sized synthetic Claude Code sessions (benchmarks/scale_out.py's) are indexed twice with `sessionmem index`'s
`index_sources`, against the tests' OpenAI-compatible server on 127.0.0.1 with a fixed latency per request (300 ms:
a remote API's round trip; batch_size 4, 4 requests in flight, summaries off):
- plain: every chunk text by plain embeddings requests;
- batch: the first run sends the backlog as one batch and returns; the server then finishes the batch; a second
  run polls it and takes the vectors.
Printed per mode: HTTP requests, the embed stage's wall seconds in each run (what the writer spends waiting on the
provider), and whether the final vectors equal the plain run's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]

import duckdb  # noqa: E402

from openai_server import OpenAICompatibleServer  # noqa: E402  (tests/openai_server.py)
from scale_out import write_config, write_sessions  # noqa: E402  (the same synthetic sessions)
from sessionmem_pipeline.config import load_settings  # noqa: E402
from sessionmem_pipeline.stages.run import index_sources  # noqa: E402


def vectors(warehouse: Path) -> dict[str, list[float]]:
    with duckdb.connect(str(warehouse), read_only=True) as conn:
        return dict(conn.execute("SELECT chunk_id, embedding FROM chunk_embeddings").fetchall())


def measure(base: Path, sources: Path, server: OpenAICompatibleServer, *, batch_api: bool) -> dict:
    config = write_config(base / f"{batch_api}.toml", base / f"{batch_api}.duckdb", sources, server.base_url, 4)
    if batch_api:
        config.write_text(config.read_text() + "batch_api = true\nbatch_min_backlog = 1\n", encoding="utf-8")
    settings = load_settings(config, env={})
    server.requests.clear()
    first = index_sources(settings)
    server.settle_batches("completed")
    second = index_sources(settings) if batch_api else None
    return {
        "mode": "batch" if batch_api else "plain",
        "chunks": first.chunks,
        "requests": len(server.requests),
        "first_embed_s": round(first.stage_seconds["embed"], 2),
        "second_embed_s": round(second.stage_seconds["embed"], 2) if second else None,
        "vectors": vectors(settings.warehouse),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=12)
    parser.add_argument("--latency", type=float, default=0.3, help="seconds the server adds to every request")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, OpenAICompatibleServer(latency_seconds=args.latency) as server:
        base = Path(folder)
        write_sessions(base / "sources", args.sessions)
        rows = [measure(base, base / "sources", server, batch_api=mode) for mode in (False, True)]
    plain = rows[0]["vectors"]
    for row in rows:
        row["vectors_equal_plain"] = row.pop("vectors") == plain
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{args.sessions} sessions, {rows[0]['chunks']} chunks, {args.latency * 1000:.0f} ms per request")
    print("| mode | HTTP requests | embed stage s, run 1 | embed stage s, run 2 (poll) | vectors = plain |")
    print("|---|---|---|---|---|")
    for row in rows:
        later = "" if row["second_embed_s"] is None else row["second_embed_s"]
        print(f"| {row['mode']} | {row['requests']} | {row['first_embed_s']} | {later} | {row['vectors_equal_plain']} |")


if __name__ == "__main__":
    main()
