"""Change detection end to end (issue 4): each decision on real files and a real warehouse, the work each one
causes, quarantine and repair, deletion, the half-written last line, and a killed run that resumes."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.stages.run import forget, index_sources
from sessionmem_pipeline.warehouse import Warehouse

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"


def _line(n: int, role: str = "user") -> str:
    words = "cache eviction policy for the image thumbnails service" if n % 2 else "we decided to use an LRU cache"
    return json.dumps(
        {"id": f"m{n}", "role": role, "content": f"{words} (turn {n})", "timestamp": f"2026-04-01T10:{n % 60:02d}:00Z"}
    ) + "\n"


@pytest.fixture()
def env(tmp_path: Path) -> dict:
    root = tmp_path / "sources"
    (root / "infra").mkdir(parents=True)
    live = root / "infra" / "live.jsonl"
    live.write_text("".join(_line(n, "user" if n % 2 == 0 else "assistant") for n in range(6)), encoding="utf-8")
    shutil.copy(FIXTURES / "generic" / "team-sync" / "2026-01-15.jsonl", root / "infra" / "sync.jsonl")
    settings = load_settings(flags={"warehouse": str(tmp_path / "w.duckdb"), "sources": [str(root)]}, env={})
    return {"root": root, "live": live, "settings": settings}


def _count(settings, sql: str, params: list | None = None):
    with Warehouse(settings.warehouse) as wh:
        return wh.scalar(sql, params)


def test_unchanged_files_are_skipped_without_work(env: dict) -> None:
    first = index_sources(env["settings"])
    assert first.decisions == {"new": 2}
    again = index_sources(env["settings"])
    assert again.decisions == {"unchanged": 2}
    assert (again.messages_written, again.chunks, again.embedded, again.snapshot) == (0, 0, 0, None)
    # settled files are counted per format as read ones are (`index` prints files and sessions per format)
    assert again.formats == {name: {**counts, "messages": 0} for name, counts in first.formats.items()}
    assert sum(counts["files"] for counts in again.formats.values()) == 2


def test_only_files_whose_stat_moved_reach_the_per_file_ingest(env: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    from sessionmem_pipeline.stages import pipeline

    index_sources(env["settings"])
    looked_at: list[str] = []

    def counted(ctx, source, **kwargs):
        looked_at.append(Path(source.path).name)
        return ingest_file(ctx, source, **kwargs)

    ingest_file = pipeline.ingest_file
    monkeypatch.setattr(pipeline, "ingest_file", counted)
    assert index_sources(env["settings"]).decisions == {"unchanged": 2}
    assert looked_at == []  # settled from the walk's stat: no read, no transaction
    with env["live"].open("a", encoding="utf-8") as handle:
        handle.write(_line(6))
    report = index_sources(env["settings"])
    assert (report.decisions, looked_at) == ({"unchanged": 1, "grown": 1}, ["live.jsonl"])
    assert _count(env["settings"], "SELECT count(*) FROM messages WHERE text LIKE '%(turn 6)%'") == 1
    assert index_sources(env["settings"], full=True).decisions == {"rewritten": 2}  # --full reads every file


def test_touched_file_with_same_bytes_is_unchanged(env: dict) -> None:
    index_sources(env["settings"])
    os.utime(env["live"], ns=(1, 1))
    assert index_sources(env["settings"]).decisions == {"unchanged": 2}


def test_grown_file_writes_only_new_messages_and_embeds_only_new_chunks(env: dict) -> None:
    settings = env["settings"]
    index_sources(settings)
    chunks_before = _count(settings, "SELECT count(*) FROM chunks WHERE session_id = 'infra/live'")
    with open(env["live"], "a", encoding="utf-8") as handle:
        handle.write(_line(6) + _line(7, "assistant"))
    report = index_sources(settings)
    assert report.decisions == {"grown": 1, "unchanged": 1}
    assert report.messages_written == 3  # the two new lines, and the last stored message written again
    chunks_after = _count(settings, "SELECT count(*) FROM chunks WHERE session_id = 'infra/live'")
    assert chunks_after > chunks_before
    assert report.embedded == chunks_after - chunks_before  # a new exchange: earlier chunks keep their vectors
    assert _count(settings, "SELECT count(*) FROM messages WHERE session_id = 'infra/live'") == 8


def test_rewritten_file_is_reindexed_whole(env: dict) -> None:
    settings = env["settings"]
    index_sources(settings)
    env["live"].write_text(_line(0) + _line(1, "assistant"), encoding="utf-8")
    report = index_sources(settings)
    assert report.decisions == {"rewritten": 1, "unchanged": 1}
    assert _count(settings, "SELECT count(*) FROM messages WHERE session_id = 'infra/live'") == 2


def test_deleted_file_keeps_its_sessions_marked_until_forgotten(env: dict) -> None:
    settings = env["settings"]
    index_sources(settings)
    messages = _count(settings, "SELECT count(*) FROM messages WHERE session_id = 'infra/live'")
    env["live"].unlink()
    report = index_sources(settings)
    assert report.sources_missing == 1
    assert _count(settings, "SELECT count(*) FROM messages WHERE session_id = 'infra/live'") == messages
    assert _count(settings, "SELECT count(*) FROM sessions WHERE session_id = 'infra/live' AND source_missing") == 1
    assert _count(settings, "SELECT count(*) FROM source_files WHERE status = 'missing'") == 1
    assert index_sources(settings).sources_missing == 0  # marked once

    assert forget(settings, session_id="infra/live") == ["infra/live"]
    for table in ("sessions", "messages", "collapsed_messages", "chunks", "chunk_embeddings", "stage_state"):
        assert _count(settings, f"SELECT count(*) FROM {table} WHERE session_id = 'infra/live'") == 0, table


def test_half_written_last_line_waits_for_the_next_run(env: dict) -> None:
    settings = env["settings"]
    partial = _line(6).rstrip("\n")
    with open(env["live"], "a", encoding="utf-8") as handle:
        handle.write(partial[:25])
    report = index_sources(settings)
    assert not any("live.jsonl" in w for w in report.warnings)  # not malformed: unfinished
    assert _count(settings, "SELECT count(*) FROM messages WHERE session_id = 'infra/live'") == 6
    with open(env["live"], "a", encoding="utf-8") as handle:
        handle.write(partial[25:] + "\n")
    assert index_sources(settings).decisions["grown"] == 1
    assert _count(settings, "SELECT count(*) FROM messages WHERE session_id = 'infra/live'") == 7


def test_quarantine_is_recorded_then_a_repaired_file_is_indexed(env: dict) -> None:
    settings = env["settings"]
    broken = env["root"] / "infra" / "broken.jsonl"
    broken.write_text("not json\n{also not\n" * 5 + _line(0), encoding="utf-8")
    before = broken.read_bytes()
    report = index_sources(settings)
    assert [q["reason"] for q in report.quarantined] == ["too many bad lines (10 of 11 > 50%)"]
    with Warehouse(settings.warehouse) as wh:
        (row,) = wh.query("SELECT reason, sha256, details FROM quarantine")
    assert row["sha256"] and "broken.jsonl" in row["details"]
    assert broken.read_bytes() == before  # a record, never a move or an edit
    assert index_sources(settings).quarantined == []  # the same broken bytes are not reported again

    broken.write_text(_line(0) + _line(1, "assistant"), encoding="utf-8")
    fixed = index_sources(settings)
    assert fixed.decisions.get("new") == 1
    assert _count(settings, "SELECT count(*) FROM quarantine") == 0
    assert _count(settings, "SELECT count(*) FROM messages WHERE session_id = 'infra/broken'") == 2


def test_full_and_since(env: dict, tmp_path: Path) -> None:
    settings = env["settings"]
    index_sources(settings)
    assert index_sources(settings, full=True).decisions == {"rewritten": 2}
    os.utime(env["live"], (1_600_000_000, 1_600_000_000))  # written in 2020
    from datetime import UTC, datetime

    fresh = settings.with_overrides({"warehouse": str(tmp_path / "other.duckdb")})
    report = index_sources(fresh, since=datetime(2024, 1, 1, tzinfo=UTC))
    assert report.files_seen == 1


KILLED_INDEX = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from sessionmem_pipeline.config import load_settings
    from sessionmem_pipeline.providers import LocalMiniLMEmbedder
    from sessionmem_pipeline.stages.run import index_sources

    class Reporting(LocalMiniLMEmbedder):
        def embed_with_failures(self, texts):
            outcome = super().embed_with_failures(texts)
            print("batch", flush=True)
            return outcome

    settings = load_settings(flags={"warehouse": sys.argv[1], "sources": [sys.argv[2]]}, env={})
    index_sources(settings, embedder=Reporting())
    """
)


@pytest.mark.slow
def test_a_run_killed_mid_session_resumes_without_redoing_finished_batches(tmp_path: Path) -> None:
    root = tmp_path / "sources" / "big"
    root.mkdir(parents=True)
    lines = []
    for n in range(700):
        role = "user" if n % 2 == 0 else "assistant"
        lines.append(json.dumps({"id": f"m{n}", "role": role, "content": f"Turn {n}: notes on shard {n} and its "
                                 f"rebalancing plan number {n * 7}.", "timestamp": f"2026-05-01T{n // 60 % 24:02d}:{n % 60:02d}:00Z"}))
    (root / "long.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    warehouse = tmp_path / "w.duckdb"
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_INDEX, str(warehouse), str(tmp_path / "sources")], stdout=subprocess.PIPE, text=True
    )
    batches = 0
    for line in child.stdout:
        batches += line.startswith("batch")
        if batches == 2:
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    child.stdout.close()

    settings = load_settings(flags={"warehouse": str(warehouse), "sources": [str(tmp_path / "sources")]}, env={})
    done_before = _count(settings, "SELECT count(*) FROM chunk_embeddings")
    total = _count(settings, "SELECT count(*) FROM chunks")
    assert 0 < done_before < total  # killed between batches of 100
    report = index_sources(settings)
    assert report.embedded == total - done_before  # only the unfinished work
    assert _count(settings, "SELECT count(*) FROM chunk_embeddings") == total
