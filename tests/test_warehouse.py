"""The warehouse module: schema and migrations, extensions loaded from packages, per-session replacement,
the writer lock, snapshots, and surviving a SIGKILL in the middle of a write."""

import os
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from sessionmem_pipeline import warehouse as wh_module
from sessionmem_pipeline.client import _nearest_sql
from sessionmem_pipeline.warehouse import (
    SCHEMA_VERSION,
    VECTOR_DELTA,
    Warehouse,
    WarehouseBusyError,
    connect,
    keyword_search,
    migrate,
    open_reader,
    publish_snapshot,
    rebuild_file,
    snapshot_path,
    writer_lock,
)


def test_new_file_gets_the_current_schema(tmp_path: Path) -> None:
    with Warehouse(tmp_path / "w.duckdb") as wh:
        assert wh.scalar("SELECT max(version) FROM schema_version") == SCHEMA_VERSION
        tables = {r[0] for r in wh.conn.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert {"sessions", "messages", "chunks", "source_files", "quarantine", "session_summaries", "runs"} <= tables


def test_migrates_a_version_1_file_keeping_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    conn = connect(path)
    assert migrate(conn, target=1) == [1]
    conn.execute("INSERT INTO sessions (session_id, project) VALUES ('s1', 'shop')")
    conn.close()
    with Warehouse(path) as wh:  # opening migrates
        assert wh.scalar("SELECT max(version) FROM schema_version") == SCHEMA_VERSION
        assert wh.query("SELECT session_id, project, summary_version FROM sessions") == [
            {"session_id": "s1", "project": "shop", "summary_version": None}
        ]
        assert wh.scalar("SELECT count(*) FROM session_summaries") == 0


def test_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    Warehouse(path).close()
    conn = connect(path)
    conn.execute("INSERT INTO schema_version VALUES (99, now())")
    conn.close()
    with pytest.raises(wh_module.WarehouseError, match="newer than this sessionmem"):
        Warehouse(path)


def test_replace_is_idempotent_and_atomic(tmp_path: Path) -> None:
    rows = [{"session_id": "s1", "seq": i, "message_id": f"L{i}", "role": "user", "text": f"m{i}"} for i in range(3)]
    with Warehouse(tmp_path / "w.duckdb") as wh:
        for _ in range(2):
            with wh.transaction():
                wh.replace("messages", "session_id", ["s1"], rows)
        assert wh.scalar("SELECT count(*) FROM messages") == 3
        with pytest.raises(RuntimeError), wh.transaction():
            wh.replace("messages", "session_id", ["s1"], rows[:1])
            raise RuntimeError("killed halfway")
        assert wh.scalar("SELECT count(*) FROM messages") == 3


def test_writer_lock_is_exclusive_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    code = f"from pathlib import Path; from sessionmem_pipeline.warehouse import writer_lock\n" \
           f"with writer_lock(Path({str(path)!r}), timeout=0): pass"
    with writer_lock(path, holder="test"):
        other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert other.returncode != 0 and "another writer holds the warehouse" in other.stderr
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
    with writer_lock(path, timeout=0):
        with pytest.raises(WarehouseBusyError):
            with writer_lock(path, timeout=0):
                pass


def test_snapshot_is_a_readable_copy(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as wh, wh.transaction():
        wh.insert("sessions", [{"session_id": "s1", "project": "p"}])
    publish_snapshot(path)
    assert snapshot_path(path).name == "w.search.duckdb"
    reader = open_reader(path)
    assert reader.execute("SELECT session_id FROM sessions").fetchall() == [("s1",)]
    with pytest.raises(duckdb.Error):
        reader.execute("INSERT INTO sessions (session_id) VALUES ('x')")
    reader.close()


@pytest.mark.parametrize("close_checkpoints", [True, False])
def test_a_finished_warehouse_holds_every_write_in_its_file(tmp_path: Path, close_checkpoints: bool) -> None:
    """finish() leaves the write-ahead log to DuckDB's checkpoint on close; a log the close left behind (its
    failures are swallowed) is checkpointed by CHECKPOINT: either way, a copy of the file alone has the rows."""
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as wh:
        wh.ensure_embedding_table("test-model", 4)
        with wh.transaction():
            wh.insert("sessions", [{"session_id": "s1", "project": "p"}])
            wh.bump_generation()
        if not close_checkpoints:
            wh.conn.execute("PRAGMA disable_checkpoint_on_shutdown")
        generation, _ = wh.finish(measure=False)
    assert generation == 1
    assert not Path(f"{path}.wal").exists() or Path(f"{path}.wal").stat().st_size == 0
    copy = tmp_path / "copy.duckdb"  # what publishing copies: the file, never its log
    copy.write_bytes(path.read_bytes())
    with Warehouse(copy) as wh:
        assert wh.scalar("SELECT count(*) FROM sessions") == 1
        assert wh.generation() == 1


def test_publishing_never_disturbs_an_open_reader_and_reuses_the_spare_once_free(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    spare = snapshot_path(path).with_name(".w.search.duckdb.spare")

    def add_and_publish(session: str) -> None:
        with Warehouse(path) as wh, wh.transaction():
            wh.insert("sessions", [{"session_id": session, "project": "p"}])
        publish_snapshot(path)

    def sessions(reader) -> int:
        return reader.execute("SELECT count(*) FROM sessions").fetchone()[0]

    add_and_publish("s1")
    first = open_reader(path)
    add_and_publish("s2")  # the first snapshot becomes the spare, still open
    second = open_reader(path)
    add_and_publish("s3")  # the spare is in use: a fresh copy is published instead
    assert (sessions(first), sessions(second)) == (1, 2)
    first.close()
    second.close()
    free_spare = spare.stat().st_ino
    add_and_publish("s4")  # now the spare is rewritten where it differs and becomes the snapshot
    assert snapshot_path(path).stat().st_ino == free_spare
    assert snapshot_path(path).read_bytes() == path.read_bytes()
    reader = open_reader(path)
    assert sessions(reader) == 4
    reader.close()
    for n in range(5, 9):  # the spare (two generations back) rewritten block by block, each time the live file's bytes
        add_and_publish(f"s{n}")
        assert snapshot_path(path).read_bytes() == path.read_bytes()


def test_a_rebuild_keeps_every_row_and_the_indexes(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as wh:
        wh.ensure_embedding_table("test-model", 4)
        for round_ in range(5):  # churn: sessions written, replaced and deleted
            with wh.transaction():
                session = f"s{round_ % 3}"
                wh.delete_sessions([session])
                wh.insert("sessions", [{"session_id": session, "project": "p"}])
                wh.insert("chunks", [{"chunk_id": f"{session}:{i}:{round_}", "session_id": session, "chunk_index": i,
                                      "content": f"order {round_}{i} shipped", "context_content": f"order {round_}{i} shipped"}
                                     for i in range(30)])
                wh.sync_keyword_index("chunks", [session])
                wh.insert(VECTOR_DELTA, [{"chunk_id": f"{session}:{i}:{round_}", "session_id": session, "text_hash": "h",
                                          "embedding": [1.0, i, round_, 0.5]} for i in range(30)])
            if round_ < 4:  # the last round's replaced vectors stay unlinked in the indexed base
                wh.maintain_vector_index()
        tables = [r[0] for r in wh.conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = 'wh' ORDER BY table_name").fetchall()]
        assert wh.scalar("SELECT count(*) FROM chunk_embeddings_base WHERE chunk_id IS NULL")  # unlinked rows kept
        before = {t: wh.query(f"SELECT * FROM {t} ORDER BY ALL") for t in tables}
        search_before = keyword_search(wh.conn, "chunks", "order 41 shipped", limit=5)
        nearest = _nearest_sql("?::FLOAT[4]", 5)
        vector_before = wh.conn.execute(nearest, [[1.0, 4, 4, 0.5], [1.0, 4, 4, 0.5]]).fetchall()

    rebuild_file(path)

    with Warehouse(path) as wh:
        after = {t: wh.query(f"SELECT * FROM {t} ORDER BY ALL") for t in tables}
        after["meta"] = [m for m in after["meta"] if m["key"] != "rebuild_baseline"]  # the rebuild's own record
        assert after == before
        assert keyword_search(wh.conn, "chunks", "order 41 shipped", limit=5) == search_before
        assert wh.conn.execute(nearest, [[1.0, 4, 4, 0.5], [1.0, 4, 4, 0.5]]).fetchall() == vector_before
        assert vector_before[0][0] == "s1:4:4"
        assert wh.scalar("SELECT count(*) FROM duckdb_indexes() WHERE index_name = 'chunk_embeddings_hnsw'") == 1
        with wh.transaction():  # sequences go on where they were: new documents get new keys
            wh.insert("chunks", [{"chunk_id": "n:0:x", "session_id": "n", "chunk_index": 0, "content": "new order"}])
            wh.sync_keyword_index("chunks", ["n"])
        assert wh.scalar("SELECT count(DISTINCT doc_key) = count(*) FROM kw_docs")


WRITER = textwrap.dedent(
    """
    import random, sys
    from pathlib import Path
    from sessionmem_pipeline.warehouse import Warehouse
    wh = Warehouse(Path(sys.argv[1]))
    wh.ensure_embedding_table("test-model", 16)
    rng = random.Random(7)
    batch = 0
    while True:
        rows = [{"chunk_id": f"c{batch}-{i}", "session_id": f"s{batch}", "text_hash": "h",
                 "embedding": [rng.uniform(-1, 1) for _ in range(16)]} for i in range(50)]
        with wh.transaction():
            wh.insert("chunk_embeddings_delta" if batch == 0 else "chunk_embeddings_base", rows)
        if batch == 0:
            wh.maintain_vector_index()  # builds the HNSW index: later batches are written through it
        batch += 1
        print(batch, flush=True)
    """
)


def test_sigkill_mid_write_keeps_every_committed_row_and_the_hnsw_index(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    committed = 0
    for line in writer.stdout:
        committed = int(line)
        if committed >= 40:
            break
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    writer.stdout.close()

    with Warehouse(path) as wh:
        count = wh.scalar("SELECT count(*) FROM chunk_embeddings_base")
        assert count >= committed * 50 and count % 50 == 0  # whole transactions only
        samples = wh.query("SELECT chunk_id, embedding FROM chunk_embeddings_base USING SAMPLE 25 ROWS (reservoir, 3)")
        plan = wh.conn.execute(
            "EXPLAIN SELECT chunk_id FROM chunk_embeddings_base ORDER BY array_cosine_distance(embedding, ?::FLOAT[16]) LIMIT 1",
            [samples[0]["embedding"]],
        ).fetchall()
        assert "HNSW_INDEX_SCAN" in str(plan)
        for sample in samples:  # every committed vector is reachable through the index
            nearest = wh.scalar(
                "SELECT chunk_id FROM chunk_embeddings_base ORDER BY array_cosine_distance(embedding, ?::FLOAT[16]) LIMIT 1",
                [sample["embedding"]],
            )
            assert nearest == sample["chunk_id"]


def test_extension_signatures_are_checked_by_the_first_connection_of_a_process_only(tmp_path: Path) -> None:
    """Later connections skip DuckDB's signature check of files the first one verified, and still have both
    extensions (stemming for the keyword index, an HNSW index that persists)."""
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from sessionmem_pipeline.warehouse import connect
        setting = "SELECT current_setting('allow_unsigned_extensions')"
        first = connect(Path({str(tmp_path / "w.duckdb")!r}))
        second = connect(Path({str(tmp_path / "w.duckdb")!r}).with_name("other.duckdb"))
        second.execute("CREATE TABLE v AS SELECT [1.0, 0.0]::FLOAT[2] AS e")
        second.execute("CREATE INDEX v_hnsw ON v USING HNSW (e)")
        print(first.execute(setting).fetchone()[0], second.execute(setting).fetchone()[0],
              second.execute("SELECT stem('running', 'porter')").fetchone()[0])
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True", "run"]


def test_a_transaction_opened_inside_another_commits_or_rolls_back_with_it(tmp_path: Path) -> None:
    """A batch of files ingested in one transaction: each file's own transaction is part of it, and the
    generation moves once for the whole batch."""
    with Warehouse(tmp_path / "w.duckdb") as wh:
        with pytest.raises(RuntimeError), wh.transaction():
            with wh.transaction():
                wh.insert("sessions", [{"session_id": "s1", "project": "p"}])
                wh.bump_generation()
            raise RuntimeError("the batch fails after the first file")
        assert wh.scalar("SELECT count(*) FROM sessions") == 0 and wh.generation() == 0

        with wh.transaction():
            for session_id in ("s1", "s2"):
                with wh.transaction():
                    wh.insert("sessions", [{"session_id": session_id, "project": "p"}])
                    wh.bump_generation()
        assert wh.scalar("SELECT count(*) FROM sessions") == 2 and wh.generation() == 1
        wh.bump_generation()  # outside any transaction: every call counts
        wh.bump_generation()
        assert wh.generation() == 3


def test_session_aggregates_asked_for_in_a_transaction_are_refreshed_as_it_commits(tmp_path: Path) -> None:
    """A batch of files asks once per file and refreshes once: the aggregates count every message the batch wrote,
    also those a later file added to a session an earlier one asked for; a rolled-back batch refreshes nothing."""
    def message(session_id: str, seq: int) -> dict:
        return {"session_id": session_id, "message_id": f"{session_id}:{seq}", "seq": seq, "role": "user",
                "kind": "message", "speaker": "user", "text": "hi", "timestamp": datetime(2026, 1, 1, seq, tzinfo=UTC)}

    with Warehouse(tmp_path / "w.duckdb") as wh:
        with wh.transaction():
            for session_id, seqs in (("s1", [0, 1]), ("s2", [0]), ("s1", [2])):  # the third file adds to s1
                with wh.transaction():
                    if not wh.scalar("SELECT count(*) FROM sessions WHERE session_id = ?", [session_id]):
                        wh.insert("sessions", [{"session_id": session_id, "project": "p"}])
                    wh.insert("messages", [message(session_id, seq) for seq in seqs])
                    wh.refresh_session_aggregates([session_id])
            assert wh.scalar("SELECT count(message_count) FROM sessions") == 0  # not yet: once, at the commit
        counts = dict(wh.conn.execute("SELECT session_id, message_count FROM sessions").fetchall())
        assert counts == {"s1": 3, "s2": 1}
        assert wh.scalar("SELECT ended_at FROM sessions WHERE session_id = 's1'") == datetime(2026, 1, 1, 2, tzinfo=UTC)

        with pytest.raises(RuntimeError), wh.transaction():
            wh.insert("messages", [message("s2", 1)])
            wh.refresh_session_aggregates(["s2"])
            raise RuntimeError("the batch fails")
        wh.refresh_session_aggregates(["s1"])  # outside a transaction: at once
        assert dict(wh.conn.execute("SELECT session_id, message_count FROM sessions").fetchall()) == counts


@pytest.mark.parametrize("narrow_max", [wh_module.STALE_NARROW_MAX, 0])
def test_stale_sessions_behind_the_clean_mark_are_those_a_full_comparison_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, narrow_max: int
) -> None:
    """The writer compares only upstream rows recorded after its clean mark (looked up, or joined past
    STALE_NARROW_MAX); a reader compares every row: through changes, key changes and scoped writes under another
    key, both find the same sessions."""
    monkeypatch.setattr(wh_module, "STALE_NARROW_MAX", narrow_max)
    now = datetime(2030, 1, 1, tzinfo=UTC)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        reader = wh_module.Snapshot(wh.conn)

        def stale(key: str = "d1", upstream_key: str = "u1", scope: list[str] | None = None) -> dict[str, str]:
            found = wh.stale_sessions("embed", key, "chunk", upstream_key, scope)
            assert found == reader.stale_sessions("embed", key, "chunk", upstream_key, scope)
            return found

        def record(stage: str, fingerprints: dict[str, str], key: str) -> None:
            with wh.transaction():
                wh.record_stage(stage, fingerprints, key, "run", now)

        record("chunk", {f"s{i}": f"c{i}" for i in range(4)}, "u1")
        record("embed", stale(), "d1")
        assert stale() == {}
        assert wh.get_meta("clean:embed") == "d1|u1|1"  # up to date through the chunk rows' seq
        record("chunk", {"s2": "c2b"}, "u1")  # a change after the mark
        assert list(stale()) == ["s2"]
        record("embed", stale(scope=["s2"]), "d1")
        assert stale() == {}
        record("embed", stale("d2", scope=["s0", "s1"]), "d2")  # scoped writes under another key (no mark moves)
        assert list(stale()) == ["s0", "s1"]  # back to the first key: those two are stale again
        record("chunk", {"s3": "c3"}, "u2")  # the upstream under another key: s3 waits for it
        assert list(stale()) == ["s0", "s1"]
        assert list(stale(upstream_key="u2")) == ["s3"]


def test_a_stale_session_found_below_the_clean_mark_drops_the_mark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mark's promise broken by hand (a downstream row removed behind it): the full comparison past
    STALE_NARROW_MAX still lists the session, and the mark is dropped so later runs compare every row."""
    monkeypatch.setattr(wh_module, "STALE_NARROW_MAX", 0)
    now = datetime(2030, 1, 1, tzinfo=UTC)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        with wh.transaction():
            wh.record_stage("chunk", {"s0": "c0", "s1": "c1"}, "u1", "run", now)
            wh.record_stage("embed", wh.stale_sessions("embed", "d1", "chunk", "u1"), "d1", "run", now)
        assert wh.stale_sessions("embed", "d1", "chunk", "u1") == {}
        with wh.transaction():
            wh.record_stage("chunk", {"s2": "c2"}, "u1", "run", now)  # one row after the mark: the full join runs
            wh.conn.execute("DELETE FROM stage_state WHERE stage = 'embed' AND session_id = 's0'")

        assert sorted(wh.stale_sessions("embed", "d1", "chunk", "u1")) == ["s0", "s2"]
        assert wh.get_meta("clean:embed") == "d1|u1|-1"
