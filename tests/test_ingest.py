"""Ingest on a real DuckDB warehouse (issue 4): each change decision and the work it causes, the half-written last
line, quarantine and repair, deletion everywhere, and, through whole `index` runs, that a grown file embeds only
its new chunks, `full` re-embeds nothing it has cached, and source files are never modified."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessionmem_pipeline.client import SessionMemory
from sessionmem_pipeline.config import Settings, load_settings
from sessionmem_pipeline.core.changes import FileStat, decide
from sessionmem_pipeline.providers import LocalMiniLMEmbedder
from sessionmem_pipeline.stages import pipeline
from sessionmem_pipeline.stages.discover import SourceFile, discover, file_stat, scan_sources
from sessionmem_pipeline.stages.ingest import IngestOutcome, ingest_file
from sessionmem_pipeline.stages.pipeline import StageReport, mark_missing_sources
from sessionmem_pipeline.stages.registry import Providers, StageContext
from sessionmem_pipeline.stages.run import forget, index_sources
from sessionmem_pipeline.warehouse import SESSION_TABLES, Warehouse

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
ONE_PER_FORMAT = (
    "generic/team-sync/2026-01-15.jsonl",
    "openai_chat/support/refund-request.json",
    "codex/2025/08/12/rollout-2025-08-12T16-30-00-4f2e8d1c-9a7b-4c3d-8e5f-6a7b8c9d0e1f.jsonl",
    "claude_code/-home-dev-blog/9d4a2f61-3c8e-4b7d-a1f0-6e5b8c2d9a14.jsonl",
)
TOPICS = ["the cache eviction policy", "the thumbnail service", "retry budgets", "the deploy window", "log rotation"]


def line(n: int, *, minute: int | None = None, hour: int = 10) -> bytes:
    """Message n of a generic transcript: even n the user asks, odd n the assistant answers."""
    role = "user" if n % 2 == 0 else "assistant"
    text = f"What about {TOPICS[n // 2 % 5]}? (turn {n})" if role == "user" else f"We chose LRU for it (turn {n})."
    stamp = f"2026-04-01T{hour:02d}:{minute if minute is not None else n:02d}:00Z"
    return (json.dumps({"id": f"m{n}", "role": role, "content": text, "timestamp": stamp}) + "\n").encode()


def lines(count: int, start: int = 0) -> bytes:
    return b"".join(line(n) for n in range(start, start + count))


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "sources"
    (folder / "proj").mkdir(parents=True)
    return folder


@pytest.fixture(scope="module")
def shared_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Warehouse]:
    """One warehouse for the ingest-level tests (opening one costs about half a second)."""
    with Warehouse(tmp_path_factory.mktemp("ingest") / "w.duckdb") as warehouse:
        yield warehouse


@pytest.fixture()
def wh(shared_warehouse: Warehouse) -> Iterator[Warehouse]:
    """The shared warehouse, emptied after each test so that every test starts from nothing."""
    yield shared_warehouse
    tables = shared_warehouse.conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_catalog = 'wh' AND table_schema = 'main' "
        "AND table_type = 'BASE TABLE' AND table_name NOT IN ('schema_version', 'meta')"
    ).fetchall()
    for (table,) in tables:
        shared_warehouse.conn.execute(f"DELETE FROM {table}")


def stage_context(wh: Warehouse, max_bad_share: float = 0.5) -> StageContext:
    settings = load_settings(None, {"warehouse": str(wh.path), "validation.max_bad_line_share": max_bad_share})
    return StageContext(wh, settings, Providers(settings), "test-run")


def ingest(wh: Warehouse, root: Path, path: Path, *, max_bad_share: float = 0.5, full: bool = False) -> IngestOutcome:
    """What one ingest of `path` does, found the way a run finds it (or named directly once it is gone)."""
    found = [f for f in discover([root]) if f.path == str(path.resolve())]
    source = found[0] if found else SourceFile(str(path.resolve()), str(root.resolve()), "gone", FileStat(0, 0))
    return ingest_file(stage_context(wh, max_bad_share), source, full=full)


def message_ids(wh: Warehouse, session_id: str) -> list[str]:
    rows = wh.conn.execute("SELECT message_id FROM messages WHERE session_id = ? ORDER BY seq", [session_id])
    return [r[0] for r in rows.fetchall()]


# ---- decisions and the work each one causes ----------------------------------------------------------------------


def test_a_new_file_is_ingested_and_remembered(wh: Warehouse, root: Path) -> None:
    live = root / "proj" / "live.jsonl"
    live.write_bytes(lines(4))
    outcome = ingest(wh, root, live)
    assert (outcome.decision, outcome.format, outcome.session_ids) == ("new", "generic", ["proj/live"])
    assert outcome.messages_written == 4 and outcome.changed_session_ids == ["proj/live"]
    assert message_ids(wh, "proj/live") == ["m0", "m1", "m2", "m3"]
    (state,) = wh.query("SELECT sha256, size, status, session_ids FROM source_files")
    size = live.stat().st_size
    assert state == {"sha256": sha256_file(live), "size": size, "status": "indexed", "session_ids": ["proj/live"]}
    assert wh.session_row("proj/live")["project"] == "proj"


def test_an_unchanged_file_writes_nothing(wh: Warehouse, root: Path) -> None:
    live = root / "proj" / "live.jsonl"
    live.write_bytes(lines(4))
    ingest(wh, root, live)
    outcome = ingest(wh, root, live)
    assert (outcome.decision, outcome.messages_written, outcome.changed_session_ids) == ("unchanged", 0, [])
    assert outcome.session_ids == ["proj/live"]


def test_a_touched_file_with_the_same_bytes_is_unchanged(wh: Warehouse, root: Path) -> None:
    live = root / "proj" / "live.jsonl"
    live.write_bytes(lines(4))
    ingest(wh, root, live)
    live.write_bytes(lines(4))  # same bytes, new mtime
    assert ingest(wh, root, live).decision == "unchanged"


def test_a_touched_file_is_settled_from_its_stat_on_the_next_run(wh: Warehouse, root: Path) -> None:
    live = root / "proj" / "live.jsonl"
    live.write_bytes(lines(4))
    ingest(wh, root, live)
    os.utime(live, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))  # a touch: same bytes
    assert ingest(wh, root, live).decision == "unchanged"
    remembered, _ = wh.source_state(str(live.resolve()))

    def no_reading(count: int) -> bytes:
        raise AssertionError(f"read {count} bytes of a file whose size and mtime are known")

    assert decide(file_stat(live), remembered, no_reading) == "unchanged"


def test_a_grown_file_writes_only_its_new_messages(wh: Warehouse, root: Path) -> None:
    live = root / "proj" / "live.jsonl"
    live.write_bytes(lines(6))
    ingest(wh, root, live)
    with open(live, "ab") as handle:
        handle.write(lines(2, start=6))
    outcome = ingest(wh, root, live)
    assert outcome.decision == "grown"
    # the two new messages, plus the last stored one written again (an agent may still be adding to it)
    assert outcome.messages_written == 3
    assert outcome.changed_session_ids == ["proj/live"]
    assert message_ids(wh, "proj/live") == [f"m{n}" for n in range(8)]


def test_new_lines_after_an_edit_of_old_ones_rewrite_the_session(wh: Warehouse, root: Path) -> None:
    live = root / "proj" / "live.jsonl"
    live.write_bytes(lines(4))
    ingest(wh, root, live)
    live.write_bytes(lines(4).replace(b"turn 1", b"turn one") + lines(2, start=4))
    outcome = ingest(wh, root, live)
    assert (outcome.decision, outcome.messages_written) == ("rewritten", 6)
    texts = [r[0] for r in wh.conn.execute("SELECT text FROM messages ORDER BY seq").fetchall()]
    assert "(turn one)" in texts[1] and len(texts) == 6


@pytest.mark.parametrize(
    "rewrite",
    [
        pytest.param(lambda data: data[: data.index(b"\n") + 1], id="shorter"),
        pytest.param(lambda data: data.replace(b"LRU", b"LFU"), id="same-size-other-bytes"),
    ],
)
def test_a_rewritten_file_replaces_its_session(wh: Warehouse, root: Path, rewrite) -> None:
    live = root / "proj" / "live.jsonl"
    live.write_bytes(lines(4))
    ingest(wh, root, live)
    live.write_bytes(rewrite(lines(4)))
    outcome = ingest(wh, root, live)
    assert outcome.decision == "rewritten"
    stored = [r[0] for r in wh.conn.execute("SELECT text FROM messages ORDER BY seq").fetchall()]
    assert stored == [json.loads(row)["content"] for row in live.read_bytes().splitlines()]
    assert outcome.messages_written == len(stored)


def test_growth_that_splits_the_session_at_a_gap_replaces_the_old_session(wh: Warehouse, root: Path) -> None:
    live = root / "proj" / "live.jsonl"
    live.write_bytes(lines(4))
    ingest(wh, root, live)
    with open(live, "ab") as handle:  # two hours later: a generic file's session ends at a 30-minute gap
        handle.write(line(4, minute=0, hour=12) + line(5, minute=1, hour=12))
    outcome = ingest(wh, root, live)
    assert outcome.decision == "rewritten"
    assert outcome.session_ids == ["proj/live#1", "proj/live#2"]
    assert message_ids(wh, "proj/live") == [] and wh.session_row("proj/live") is None
    assert message_ids(wh, "proj/live#2") == ["m4", "m5"]


def test_full_reingests_an_unchanged_file(wh: Warehouse, root: Path) -> None:
    live = root / "proj" / "live.jsonl"
    live.write_bytes(lines(4))
    ingest(wh, root, live)
    outcome = ingest(wh, root, live, full=True)
    assert (outcome.decision, outcome.messages_written) == ("rewritten", 4)
    assert message_ids(wh, "proj/live") == ["m0", "m1", "m2", "m3"]


def test_a_deleted_file_keeps_its_rows_marked_source_missing(wh: Warehouse, root: Path) -> None:
    live = root / "proj" / "live.jsonl"
    live.write_bytes(lines(4))
    ingest(wh, root, live)
    live.unlink()
    assert ingest(wh, root, live).decision == "deleted"
    assert wh.scalar("SELECT count(*) FROM messages WHERE session_id = 'proj/live'") == 4
    assert wh.scalar("SELECT source_missing FROM sessions WHERE session_id = 'proj/live'") is True
    assert wh.scalar("SELECT status FROM source_files") == "missing"
    live.write_bytes(lines(4))  # back again: indexed as it is now
    assert ingest(wh, root, live).decision == "new"
    assert wh.scalar("SELECT source_missing FROM sessions WHERE session_id = 'proj/live'") is False


# ---- validation: the half-written line, bad lines, quarantine -----------------------------------------------------


def test_a_half_written_last_line_is_left_for_the_next_run(wh: Warehouse, root: Path) -> None:
    live = root / "proj" / "live.jsonl"
    complete = line(4)
    live.write_bytes(lines(4) + complete[:20])  # the agent is writing line 5
    first = ingest(wh, root, live)
    assert first.decision == "new" and first.quarantine_reason is None
    assert not any(":5:" in warning for warning in first.warnings)  # unfinished, not malformed
    assert message_ids(wh, "proj/live") == ["m0", "m1", "m2", "m3"]
    assert wh.scalar("SELECT consumed_bytes FROM source_files") == len(lines(4))

    with open(live, "ab") as handle:
        handle.write(complete[20:])
    second = ingest(wh, root, live)
    assert second.decision == "grown"
    assert second.messages_written == 2  # the completed line, and the last stored message written again
    assert message_ids(wh, "proj/live") == ["m0", "m1", "m2", "m3", "m4"]
    assert wh.scalar("SELECT count(*) FROM parse_warnings") == 0


def test_a_file_whose_only_line_is_half_written_waits_without_quarantine(wh: Warehouse, root: Path) -> None:
    live = root / "proj" / "live.jsonl"
    live.write_bytes(line(0)[:15])
    first = ingest(wh, root, live)
    assert first.quarantine_reason is None and first.messages_written == 0
    assert wh.scalar("SELECT count(*) FROM quarantine") == 0
    live.write_bytes(line(0) + line(1))
    ingest(wh, root, live)
    assert message_ids(wh, "proj/live") == ["m0", "m1"]


def test_a_malformed_line_is_skipped_with_a_warning_naming_file_and_line(wh: Warehouse, root: Path) -> None:
    live = root / "proj" / "live.jsonl"
    live.write_bytes(lines(2) + b"{not json\n" + lines(2, start=2))
    outcome = ingest(wh, root, live)
    assert outcome.quarantine_reason is None
    assert message_ids(wh, "proj/live") == ["m0", "m1", "m2", "m3"]
    assert any(warning.startswith(f"{live.resolve()}:3:") for warning in outcome.warnings)
    assert wh.query("SELECT path, line FROM parse_warnings") == [{"path": str(live.resolve()), "line": 3}]


def test_a_file_failing_inside_a_batch_loses_the_files_before_it_nothing(
    wh: Warehouse, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files commit in batches of one transaction; when one fails, the batch is rolled back and committed file by
    file: those before the failing one are stored, and its error is raised as it would be alone."""
    for name in ("a", "b", "c"):
        (root / "proj" / f"{name}.jsonl").write_bytes(lines(2))
    failing = str((root / "proj" / "b.jsonl").resolve())
    ingest_file = pipeline.ingest_file
    attempts = []

    def failing_on_b(ctx, source, **options):
        attempts.append(source.path)
        if source.path == failing:
            raise RuntimeError("cannot ingest b")
        return ingest_file(ctx, source, **options)

    monkeypatch.setattr(pipeline, "ingest_file", failing_on_b)
    with pytest.raises(RuntimeError, match="cannot ingest b"):
        pipeline.ingest(stage_context(wh), scan_sources([root]), StageReport())
    assert len(attempts) == 4  # a, b in the batch; a, b again alone
    assert wh.query("SELECT path FROM source_files") == [{"path": str((root / "proj" / "a.jsonl").resolve())}]
    assert [r["session_id"] for r in wh.query("SELECT session_id FROM sessions")] == ["proj/a"]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        pytest.param(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", "binary", id="binary"),
        pytest.param(b"", "empty", id="empty"),
        pytest.param(b"  \n\n", "empty", id="blank"),
        pytest.param(b"not json\n{broken\n" * 3 + line(0), "too many bad lines", id="mostly-bad"),
        pytest.param(b"oops\n" * 3, "no valid lines", id="all-bad"),
    ],
)
def test_quarantine_is_recorded_then_a_repaired_file_is_picked_up(
    wh: Warehouse, root: Path, content: bytes, reason: str
) -> None:
    bad = root / "proj" / "bad.jsonl"
    bad.write_bytes(content)
    outcome = ingest(wh, root, bad)
    assert outcome.quarantine_reason.startswith(reason)
    (row,) = wh.query("SELECT path, reason, sha256, size, details, quarantined_at FROM quarantine")
    assert row["path"] == str(bad.resolve()) and row["reason"].startswith(reason)
    assert row["sha256"] == hashlib.sha256(content).hexdigest() and row["size"] == len(content)
    assert str(bad.resolve()) in row["details"] and row["quarantined_at"] is not None
    assert wh.scalar("SELECT count(*) FROM messages") == 0
    assert bad.read_bytes() == content  # recorded, never moved or edited

    again = ingest(wh, root, bad)  # the same broken bytes: nothing new to say
    assert again.quarantine_reason is None and again.decision == "unchanged"

    bad.write_bytes(lines(2))  # repaired: a new sha256
    repaired = ingest(wh, root, bad)
    assert (repaired.decision, repaired.quarantine_reason, repaired.messages_written) == ("new", None, 2)
    assert wh.scalar("SELECT count(*) FROM quarantine") == 0


def test_the_bad_line_share_is_configurable(wh: Warehouse, root: Path) -> None:
    bad = root / "proj" / "bad.jsonl"
    bad.write_bytes(b"{broken\n" + lines(3))  # 1 of 4 lines bad
    assert ingest(wh, root, bad, max_bad_share=0.2).quarantine_reason.startswith("too many bad lines")
    bad.write_bytes(b"{broken\n" + lines(4))
    assert ingest(wh, root, bad, max_bad_share=0.5).quarantine_reason is None


def test_a_deleted_quarantined_file_leaves_the_quarantine(wh: Warehouse, root: Path) -> None:
    bad = root / "proj" / "bad.jsonl"
    bad.write_bytes(b"\x00\x01 binary")
    ingest(wh, root, bad)
    bad.unlink()
    mark_missing_sources(stage_context(wh), [root], StageReport())
    assert wh.scalar("SELECT count(*) FROM quarantine") == 0


def test_a_once_valid_file_that_breaks_is_reported_once(wh: Warehouse, root: Path) -> None:
    live = root / "proj" / "live.jsonl"
    live.write_bytes(lines(4))
    ingest(wh, root, live)
    live.write_bytes(b"\x00\x01 binary now")
    assert ingest(wh, root, live).quarantine_reason == "binary"
    assert message_ids(wh, "proj/live") == ["m0", "m1", "m2", "m3"]  # earlier rows stay searchable
    again = ingest(wh, root, live)
    assert again.quarantine_reason is None and again.decision == "unchanged"


# ---- whole runs: the work a change causes downstream ---------------------------------------------------------------


@pytest.fixture(scope="module")
def embedder() -> LocalMiniLMEmbedder:
    return LocalMiniLMEmbedder()


def run_settings(tmp_path: Path, root: Path) -> Settings:
    flags = {"warehouse": str(tmp_path / "w.duckdb"), "sources": [str(root)], "summaries.enabled": False}
    return load_settings(flags=flags, env={}, cwd=tmp_path, home=tmp_path)


def embeddings(settings: Settings) -> dict[str, list[float]]:
    with Warehouse(settings.warehouse) as wh:
        rows = wh.conn.execute("SELECT chunk_id, embedding FROM chunk_embeddings").fetchall()
    return {chunk_id: list(vector) for chunk_id, vector in rows}


def test_a_grown_file_embeds_only_its_new_chunks(tmp_path: Path, root: Path, embedder) -> None:
    live = root / "proj" / "live.jsonl"
    live.write_bytes(lines(6))
    settings = run_settings(tmp_path, root)
    first = index_sources(settings, embedder=embedder)
    before = embeddings(settings)
    assert first.embedded == len(before) == first.chunks

    with open(live, "ab") as handle:
        handle.write(lines(2, start=6))  # one more exchange
    report = index_sources(settings, embedder=embedder)
    after = embeddings(settings)
    assert report.decisions == {"grown": 1} and report.messages_written == 3
    assert (report.embedded, report.embeddings_cached) == (len(after) - len(before), 0) == (1, 0)
    assert {k: after[k] for k in before} == before  # earlier chunks keep their vectors


def test_full_reindexes_everything_from_the_cache_and_never_touches_sources(
    tmp_path: Path, embedder
) -> None:
    root = tmp_path / "sources"
    for relative in ONE_PER_FORMAT:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURES / relative, root / relative)
    before = tree_hashes(root)
    settings = run_settings(tmp_path, root)
    first = index_sources(settings, embedder=embedder)
    assert first.quarantined == [] and set(first.formats) == {"generic", "claude_code", "codex", "openai_chat"}
    again = index_sources(settings, embedder=embedder, full=True)
    assert again.decisions == {"rewritten": first.files_seen}
    assert (again.embedded, again.embeddings_cached) == (0, first.chunks)  # same chunks: every vector from the cache
    assert tree_hashes(root) == before
    assert not any(p.name.endswith((".tmp", ".lock", ".duckdb")) for p in root.rglob("*"))


def test_a_deleted_file_leaves_every_table_and_the_published_snapshot(tmp_path: Path, root: Path, embedder) -> None:
    keep, gone = root / "proj" / "keep.jsonl", root / "proj" / "gone.jsonl"
    keep.write_bytes(lines(4))
    gone.write_bytes(lines(4).replace(b"LRU", b"a bloom filter"))
    settings = run_settings(tmp_path, root).with_overrides({"summaries.enabled": True})
    index_sources(settings, embedder=embedder)
    memory = SessionMemory(settings=settings)
    assert memory.search("bloom filter", session_id="proj/gone")

    gone.unlink()
    report = index_sources(settings, embedder=embedder)
    assert report.sources_missing == 1
    assert memory.search("bloom filter", session_id="proj/gone")  # memory outlives its source
    forget(settings, session_id="proj/gone")
    with Warehouse(settings.warehouse) as wh:
        for table in SESSION_TABLES:
            assert wh.scalar(f"SELECT count(*) FROM {table} WHERE session_id = 'proj/gone'") == 0, table
        assert wh.scalar("SELECT count(*) FROM session_summaries") == 1  # the kept session's
    assert memory.search("bloom filter", session_id="proj/gone") == []  # the reader sees the new snapshot
    assert {r.session_id for r in memory.search("bloom filter LRU cache")} == {"proj/keep"}
