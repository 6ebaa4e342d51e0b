"""Ingest through chunking of one huge message, on this machine: one command, one table.

    python benchmarks/huge_message.py [--sizes 2,10,30] [--json]

For each size (MB) a generic transcript holds a short question and one assistant reply of that size (numbered
sentences in paragraphs, with code lines: text the chunker must cut at boundaries). Each size runs in a fresh
process and reports the CPU seconds (not wall time: on a shared machine it is the honest number) of parsing and
validation (`inspect_file`), sanitizing at ingest (`sanitize_session`: private spans out, secrets redacted; the
only redaction pass), collapsing (`collapse_messages`) and chunking with the offline embedder's window
(`chunk_session`), the chunks kept (the cap is `chunking.max_chunks`, 2,000), and the process's peak memory above
what it held before reading the file.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

MEASURE = """
import json, resource, sys, time
from sessionmem_pipeline.core.chunk import chunk_session
from sessionmem_pipeline.core.collapse import collapse_messages
from sessionmem_pipeline.core.formats import inspect_file
from sessionmem_pipeline.core.sanitize import sanitize_session
from sessionmem_pipeline.providers.embedders import LocalMiniLMEmbedder
from sessionmem_pipeline.stages.embed import chunk_limits

size = int(float(sys.argv[1]) * 1_000_000)
limit, window = chunk_limits(LocalMiniLMEmbedder(), 500)
sentences, length, number = [], 0, 0
while length < size:
    number += 1
    part = f"Step {number} retried the upload after the proxy reset the connection. "
    part += f"\\n    retry(upload, attempts={number})\\n" if number % 7 == 0 else ""
    part += "\\n\\n" if number % 11 == 0 else ""
    sentences.append(part)
    length += len(part)
lines = [
    {"role": "user", "content": "Why does the upload fail?", "timestamp": "2026-03-02T10:00:00Z"},
    {"role": "assistant", "content": "".join(sentences), "timestamp": "2026-03-02T10:01:00Z"},
]
data = "".join(json.dumps(line) + "\\n" for line in lines).encode()
del sentences, lines
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
seconds = {}
started = time.process_time()
report, parsed = inspect_file("/data/p/huge.jsonl", "/data", data, final=True)
seconds["parse"] = time.process_time() - started
del data
started = time.process_time()
session = sanitize_session(parsed.sessions[0])
seconds["redact"] = time.process_time() - started
del parsed
started = time.process_time()
collapsed = collapse_messages(session.messages)
seconds["collapse"] = time.process_time() - started
started = time.process_time()
result = chunk_session(collapsed, max_tokens=limit, window=window)
seconds["chunk"] = time.process_time() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"seconds": seconds, "chunks": len(result.chunks), "last_index": result.chunks[-1].chunk_index,
                  "peak_mb": peak / 1024}))
"""


def measure(size_mb: float) -> dict:
    """One size in a fresh process, so peak memory is its own."""
    done = subprocess.run([sys.executable, "-c", MEASURE, str(size_mb)], capture_output=True, text=True, check=True)
    return {"size_mb": size_mb, **json.loads(done.stdout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,10,30", help="message sizes in MB, comma-separated")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = [measure(float(size)) for size in args.sizes.split(",")]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    header = f"{'MB':>5} {'parse s':>8} {'redact s':>9} {'collapse s':>11} {'chunk s':>8} {'total s':>8}"
    header += f" {'chunks':>7} {'parts':>7}"
    print(f"{header} {'peak MB':>8}  (CPU seconds)")
    for row in rows:
        s = row["seconds"]
        print(
            f"{row['size_mb']:>5g} {s['parse']:>8.1f} {s['redact']:>9.1f} {s['collapse']:>11.1f} {s['chunk']:>8.1f}"
            f" {sum(s.values()):>8.1f}"
            f" {row['chunks']:>7} {row['last_index'] + 1:>7} {row['peak_mb']:>8.0f}"
        )
    wall = time.perf_counter() - started
    print(f"({wall:.0f} s wall in all; 'parts' counts chunks before the cap of 2,000; peak is above the input held)")


if __name__ == "__main__":
    main()
