"""SessionMemory over the published snapshot (issue 6): results cite their messages, every filter narrows (bare
dates are days in the configured time zone), secrets never come back, each search is logged, and searching keeps
working while an index run writes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from conftest import AWS_KEY, CORPUS, IndexedCorpus, write_corpus

from sessionmem_pipeline.client import SearchResult, SessionMemory
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.stages.run import index_sources
from sessionmem_pipeline.warehouse import open_reader, search_log_path, snapshot_path

ALL_SESSIONS = {path.removesuffix(".jsonl") for path in CORPUS}


@pytest.fixture(scope="module")
def memory(indexed_corpus: IndexedCorpus) -> Iterator[SessionMemory]:
    client = SessionMemory(settings=indexed_corpus.settings)
    yield client
    client.close()


@pytest.fixture(scope="module")
def snapshot(indexed_corpus: IndexedCorpus) -> Iterator[duckdb.DuckDBPyConnection]:
    conn = open_reader(indexed_corpus.settings.warehouse)
    yield conn
    conn.close()


def chunk_flags(snapshot: duckdb.DuckDBPyConnection, result: SearchResult) -> dict:
    row = snapshot.execute(
        "SELECT has_decision, has_action, roles FROM chunks WHERE session_id = ? AND chunk_index = ?",
        [result.session_id, result.chunk_index],
    ).fetchone()
    return {"has_decision": row[0], "has_action": row[1], "roles": list(row[2])}


def sessions_of(results: list[SearchResult]) -> set[str]:
    return {r.session_id for r in results}


# ---- what a result says ---------------------------------------------------------------------------------------------


def test_results_cite_their_messages_session_and_time(
    memory: SessionMemory, snapshot: duckdb.DuckDBPyConnection, indexed_corpus: IndexedCorpus
) -> None:
    results = memory.search("payment retries exponential backoff", limit=3)
    assert results and results[0].session_id == "webshop/checkout"
    for result in results:
        messages = dict(
            snapshot.execute(
                "SELECT message_id, timestamp FROM messages WHERE session_id = ?", [result.session_id]
            ).fetchall()
        )
        assert result.message_ids and set(result.message_ids) <= set(messages)
        assert result.timestamp == min(messages[m] for m in result.message_ids)  # the chunk's start, in UTC
        assert result.timestamp.utcoffset().total_seconds() == 0
        assert Path(result.source_path).is_file() and Path(result.source_path).is_relative_to(indexed_corpus.root)
        assert not result.content.startswith("[Session from")  # the contextual prefix is not part of the content
        assert result.context and result.project
    best = results[0]
    assert best.message_ids == ["c1", "c2"] and best.speakers == ["Maya", "Max"] and best.project == "webshop"
    assert "exponential backoff" in best.content


def test_scores_are_best_first_and_limit_is_honoured(memory: SessionMemory) -> None:
    results = memory.search("coffee", limit=4)
    assert len(results) == 4
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)


# ---- filters --------------------------------------------------------------------------------------------------------


def test_a_bare_date_is_that_day_in_the_configured_time_zone(
    memory: SessionMemory, indexed_corpus: IndexedCorpus
) -> None:
    # the checkout session began at 03:00 UTC on March 10: 23:00 on March 9 in New York
    assert sessions_of(memory.search("payment retries", limit=10, before="2026-03-10")) == {"webshop/checkout"}
    after = memory.search("payment retries nightly backups", limit=10, after="2026-03-10")
    assert "webshop/checkout" not in sessions_of(after) and "infra/backups" in sessions_of(after)

    in_utc = SessionMemory(settings=indexed_corpus.settings.with_overrides({"timezone": "UTC"}))
    try:
        assert "webshop/checkout" in sessions_of(in_utc.search("payment retries", limit=10, after="2026-03-10"))
        assert in_utc.search("payment retries", limit=10, before="2026-03-10") == []
    finally:
        in_utc.close()


def test_after_is_inclusive_and_before_exclusive_for_datetimes(memory: SessionMemory) -> None:
    start = "2026-03-10T16:00:00+00:00"  # the backups chunk starts exactly then
    assert "infra/backups" in sessions_of(memory.search("nightly backups", limit=10, after=start))
    assert "infra/backups" not in sessions_of(memory.search("nightly backups", limit=10, before=start))
    window = memory.search("backups", limit=10, after="2026-03-10T11:00", before="2026-03-10T13:00")  # New York
    assert sessions_of(window) == {"infra/backups"}


def test_speaker_matches_any_message_of_the_chunk_ignoring_case(memory: SessionMemory) -> None:
    results = memory.search("search ranking", limit=10, speaker="jonas")
    assert results and all("Jonas" in r.speakers for r in results)
    assert sessions_of(results) == {"webshop/search"}


def test_role_selects_chunks_with_a_message_in_that_role(
    memory: SessionMemory, snapshot: duckdb.DuckDBPyConnection
) -> None:
    as_assistant = memory.search("disk usage alert backup volume", limit=10, role="assistant")
    assert "infra/alerts" in sessions_of(as_assistant)
    as_user = memory.search("disk usage alert backup volume", limit=10, role="user")
    assert as_user and "infra/alerts" not in sessions_of(as_user)  # only the assistant spoke there
    assert all("user" in chunk_flags(snapshot, r)["roles"] for r in as_user)


def test_topics_match_any_of_the_given_tags(memory: SessionMemory, snapshot: duckdb.DuckDBPyConnection) -> None:
    (tags,) = snapshot.execute("SELECT topics FROM chunks WHERE session_id = 'infra/backups'").fetchone()
    results = memory.search("backups", limit=10, topics=[tags[0]])
    assert results and all(tags[0] in r.topics for r in results)
    either = memory.search("backups coffee", limit=20, topics=[tags[0], "espresso"])
    assert {"infra/backups", "notes/grinder"} <= sessions_of(either)
    assert all(tags[0] in r.topics or "espresso" in r.topics for r in either)


def test_flags_select_chunks_with_decisions_and_actions(
    memory: SessionMemory, snapshot: duckdb.DuckDBPyConnection
) -> None:
    decided = memory.search("what did we decide", limit=10, has_decision=True)
    assert sessions_of(decided) == {"webshop/checkout", "infra/backups"}
    assert all(chunk_flags(snapshot, r)["has_decision"] for r in decided)
    acted = memory.search("cron entry", limit=10, has_action=True)
    assert acted and all(chunk_flags(snapshot, r)["has_action"] for r in acted)
    assert "infra/backups" in sessions_of(acted)


def test_project_and_session_scope_results(memory: SessionMemory) -> None:
    in_project = memory.search("backups payment ranking", limit=20, project="webshop")
    assert sessions_of(in_project) == {"webshop/checkout", "webshop/search"}
    assert all(r.project == "webshop" for r in in_project)
    in_session = memory.search("payment", limit=20, session_id="webshop/checkout")
    assert sessions_of(in_session) == {"webshop/checkout"} and len(in_session) == 2
    assert memory.search("payment", session_id="no/such-session") == []


def test_filters_combine(memory: SessionMemory) -> None:
    results = memory.search(
        "payment backups", limit=20, project="webshop", speaker="Maya", after="2026-03-01", before="2026-03-11"
    )
    assert sessions_of(results) == {"webshop/checkout"}
    assert memory.search("payment", limit=20, project="infra", speaker="Maya") == []


def test_a_filtered_search_still_fills_its_limit(memory: SessionMemory) -> None:
    results = memory.search("payment retries", limit=5, speaker="Ola")  # no Ola chunk mentions payments
    assert len(results) == 5 and sessions_of(results) == {"notes/grinder"}


# ---- secrets, the search log ----------------------------------------------------------------------------------------


def test_secrets_never_come_back(memory: SessionMemory, snapshot: duckdb.DuckDBPyConnection) -> None:
    results = memory.search("AWS access key deploy bot", limit=5)
    assert results[0].session_id == "webshop/checkout" and "[REDACTED" in results[0].content
    literal = memory.search(AWS_KEY, limit=20)
    sessions = memory.search_sessions("AWS access key deploy bot", limit=5)
    recalled = memory.recall("AWS access key deploy bot", limit=5)
    shown = json.dumps([r.to_dict() for r in [*results, *literal, *sessions, *recalled]])
    assert AWS_KEY not in shown
    assert AWS_KEY not in memory.recap(session_id="webshop/checkout").text
    for table, column in (("chunks", "content"), ("chunks", "context_content"), ("chunks", "context")):
        leaks = snapshot.execute(f"SELECT count(*) FROM {table} WHERE {column} LIKE ?", [f"%{AWS_KEY}%"]).fetchone()
        assert leaks == (0,), (table, column)


def test_each_search_appends_one_line_to_the_search_log(memory: SessionMemory, indexed_corpus: IndexedCorpus) -> None:
    log = search_log_path(indexed_corpus.settings.warehouse)
    before = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    counts = [len(memory.search(query, limit=3)) for query in ("coffee grinder", "nightly backups", "zzz-nothing")]
    after = log.read_text(encoding="utf-8").splitlines()
    assert len(after) == len(before) + 3
    entries = [json.loads(line) for line in after[len(before) :]]
    assert [e["results"] for e in entries] == counts
    assert all(e["kind"] == "search" and e["latency_ms"] >= 0 and e["time"] for e in entries)


def test_a_bad_date_is_a_clear_error(memory: SessionMemory) -> None:
    with pytest.raises(ValueError, match="not a date: 'when the moon is blue'"):
        memory.search("coffee", after="when the moon is blue")


def test_relative_dates_filter_against_the_given_clock(memory: SessionMemory) -> None:
    now = datetime(2026, 3, 11, 15, 0, tzinfo=UTC)  # the corpus was written on March 9 to 13 (UTC)
    recent = memory.search("coffee grinder backups", limit=20, after="yesterday", now=now)
    window = memory.time_window("coffee", after="yesterday", now=now)[0]
    assert recent and all(r.timestamp >= window.after for r in recent)
    assert memory.search("coffee grinder backups", limit=20, after="since Monday", before="two days ago", now=now) == []


# ---- reading while the pipeline writes -----------------------------------------------------------------------------


def test_searches_never_fail_while_an_index_run_writes(tmp_path: Path) -> None:
    root = tmp_path / "sources"
    write_corpus(root, {"webshop/checkout.jsonl": CORPUS["webshop/checkout.jsonl"]})
    flags = {"warehouse": str(tmp_path / "w.duckdb"), "sources": [str(root)], "summaries.enabled": False}
    settings = load_settings(flags=flags, env={}, cwd=tmp_path, home=tmp_path)
    index_sources(settings)
    more = {
        f"shop{n}/orders.jsonl": [
            (f"o{n}", "user", "Maya", f"2026-03-{n + 1:02d}T09:00:00Z", f"Refund order {n} for a broken kettle?"),
            (f"p{n}", "assistant", "Max", f"2026-03-{n + 1:02d}T09:01:00Z", f"Refunded order {n}; kettle recalled."),
        ]
        for n in range(4)
    }
    write_corpus(root, more)

    writing, searched = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def hold_after_first_file(stage: str, done: int, total: int) -> None:
        if stage == "ingest" and done == 1:  # the writer holds the lock, the live file is open and changing
            writing.set()
            searched.wait(timeout=60)

    def run() -> None:
        try:
            outcome["report"] = index_sources(settings, progress=hold_after_first_file)
        except BaseException as exc:  # noqa: BLE001 (reported by the test thread)
            outcome["error"] = exc
        finally:
            writing.set()

    memory = SessionMemory(settings=settings)
    writer = threading.Thread(target=run)
    writer.start()
    try:
        assert writing.wait(timeout=60)
        during = [memory.search("payment retries", limit=3)]
        searched.set()
        while writer.is_alive():
            during.append(memory.search("payment retries", limit=3))
    finally:
        searched.set()
        writer.join()
    assert "error" not in outcome, outcome.get("error")
    assert all(results and results[0].session_id == "webshop/checkout" for results in during)
    refunds = memory.search("kettle refund", limit=20)  # the reader moved to the newer snapshot by itself
    assert {f"shop{n}/orders" for n in range(len(more))} <= sessions_of(refunds)
    assert snapshot_path(settings.warehouse).exists()
    memory.close()
