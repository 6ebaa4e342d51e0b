"""The embed stage's backlog through the provider's Batch API (`embedding.batch_api`), against a real
OpenAI-compatible server on 127.0.0.1: a batch is sent and its chunks wait (found by keyword), a later run takes
its vectors (equal to what plain requests give), a batch that fails or expires falls back to plain requests, and a
run killed while submitting neither loses nor duplicates the batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import CORPUS, write_corpus
from openai_server import BATCHES, CHAT, EMBEDDINGS, OpenAICompatibleServer, Reply

from sessionmem_pipeline.cli import main
from sessionmem_pipeline.client import SessionMemory
from sessionmem_pipeline.config import Settings, load_settings
from sessionmem_pipeline.stages.registry import FAULT_VARIABLE
from sessionmem_pipeline.stages.run import index_sources
from sessionmem_pipeline.status import check_health

SOURCES = ("infra/backups.jsonl", "webshop/search.jsonl")
SUMMARY_REPLY = json.dumps(
    {"overview": "Backups and search were set up.", "topics": ["backups"], "decisions": ["Vacuum nightly."],
     "key_points": ["Search got synonyms."], "open_items": []}
)


@pytest.fixture
def server() -> OpenAICompatibleServer:
    with OpenAICompatibleServer(native_dimensions=64) as running:
        yield running


def configured(base: Path, server: OpenAICompatibleServer, *, batch_api: bool = True, chat: bool = False) -> Settings:
    """The two sources, embedded by the server (through its Batch API or not); `chat`: summaries by its chat model
    through its Batch API."""
    write_corpus(base / "sources", {name: CORPUS[name] for name in SOURCES})
    config = base / "sessionmem.toml"
    llm = f'[llm]\nprovider = "openai"\nmodel = "chat-test"\nbase_url = "{server.base_url}"\nbatch_api = true\n'
    config.write_text(
        'warehouse = "w.duckdb"\nsources = ["sources"]\ntimezone = "UTC"\n'
        f'[embedding]\nprovider = "openai"\nmodel = "test-embed"\nbase_url = "{server.base_url}"\ndimensions = 64\n'
        f"batch_api = {str(batch_api).lower()}\nbatch_min_backlog = 1\n" + (f"{llm}batch_min_backlog = 1\n" if chat else ""),
        encoding="utf-8",
    )
    server.default_chat_content = SUMMARY_REPLY
    return load_settings(config, env={}, cwd=base, home=base)


def vectors(settings: Settings) -> dict[str, list[float]]:
    with duckdb.connect(str(settings.warehouse), read_only=True) as conn:
        return dict(conn.execute("SELECT chunk_id, embedding FROM chunk_embeddings").fetchall())


def chunk_count(settings: Settings) -> int:
    with duckdb.connect(str(settings.warehouse), read_only=True) as conn:
        return conn.execute("SELECT count(*) FROM chunks").fetchone()[0]


def batch_records(settings: Settings) -> list[tuple]:
    with duckdb.connect(str(settings.warehouse), read_only=True) as conn:
        return conn.execute(
            "SELECT batch_id, status, requests, results FROM provider_batches ORDER BY created_at"
        ).fetchall()


def chunk_texts_embedded_plainly(settings: Settings, server: OpenAICompatibleServer) -> int:
    """Chunk texts sent to /v1/embeddings (summaries are always embedded by plain requests)."""
    with duckdb.connect(str(settings.warehouse), read_only=True) as conn:
        chunk_texts = {text for (text,) in conn.execute("SELECT context_content FROM chunks").fetchall()}
    return sum(text in chunk_texts for r in server.requests_to(EMBEDDINGS) for text in r.body["input"])


def test_a_batch_is_sent_its_chunks_wait_by_keyword_and_a_later_run_takes_vectors_equal_to_plain_ones(
    tmp_path: Path, server: OpenAICompatibleServer, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = configured(tmp_path / "plain", server, batch_api=False)
    index_sources(plain)
    settings = configured(tmp_path / "batched", server)
    server.requests.clear()

    first = index_sources(settings)

    chunks = chunk_count(settings)
    assert first.embed_batch_submitted == first.chunks_waiting == chunks > 0 and vectors(settings) == {}
    assert first.batch_line().startswith(f"provider batches: {chunks} texts sent, 0 vectors taken, {chunks} chunks wait")
    assert [(status, requests) for _, status, requests, _ in batch_records(settings)] == [("validating", chunks)]
    sent = server.files[next(iter(server.batches.values()))["input_file_id"]].decode().splitlines()
    assert {json.loads(line)["url"] for line in sent} == {"/v1/embeddings"}
    assert chunk_texts_embedded_plainly(settings, server) == 0
    memory = SessionMemory(settings=settings)
    assert memory.search("nightly database backups vacuum")[0].session_id == "infra/backups"  # by keyword
    state, reasons = check_health(settings)
    assert state == "DEGRADED" and any(f"1 batches of the provider's Batch API are open, owing {chunks} chunks'"
                                       in reason for reason in reasons)
    capsys.readouterr()
    assert main(["status", "--json", "--config", str(tmp_path / "batched" / "sessionmem.toml")]) == 0
    [shown] = json.loads(capsys.readouterr().out)["provider_batches"]
    assert (shown["stage"], shown["status"], shown["chunks"]) == ("embed", "validating", chunks)
    assert main(["status", "--config", str(tmp_path / "batched" / "sessionmem.toml")]) == 0
    assert f"provider batch {shown['batch_id']} (embed): validating, {chunks} requests for {chunks} chunks" in (
        capsys.readouterr().out
    )

    second = index_sources(settings)  # the provider is still working: nothing sent again, nothing embedded
    assert second.embed_batch_submitted == 0 and second.chunks_waiting == chunks and len(server.batches) == 1
    assert vectors(settings) == {}

    server.settle_batches("completed")
    third = index_sources(settings)

    assert third.embed_batch_written == chunks and third.embedded == 0 and third.chunks_waiting == 0
    assert third.batch_line().startswith(f"provider batches: 0 texts sent, {chunks} vectors taken, 0 chunks wait")
    assert vectors(settings) == vectors(plain)
    assert [(status, results) for _, status, _, results in batch_records(settings)] == [("applied", chunks)]
    assert check_health(settings)[0] == "OK"
    assert memory.search("nightly database backups vacuum")[0].session_id == "infra/backups"


@pytest.mark.parametrize(
    "ending, answered", [("failed", 0), ("expired", 2), ("cancelled", 0)], ids=["failed", "expired", "cancelled"]
)
def test_a_batch_that_ends_without_all_answers_falls_back_to_plain_requests_for_the_rest(
    tmp_path: Path, server: OpenAICompatibleServer, ending: str, answered: int
) -> None:
    plain = configured(tmp_path / "plain", server, batch_api=False)
    index_sources(plain)
    settings = configured(tmp_path / "batched", server)
    index_sources(settings)
    server.requests.clear()

    server.settle_batches(ending, answered=answered)
    report = index_sources(settings)

    chunks = chunk_count(settings)
    assert report.embed_batch_written == answered and report.embedded == chunks - answered
    assert chunk_texts_embedded_plainly(settings, server) == chunks - answered
    assert report.embed_batch_submitted == 0 and len(server.batches) == 1  # the rest is not sent in a new batch
    assert vectors(settings) == vectors(plain)
    assert [(status, results) for _, status, _, results in batch_records(settings)] == [(ending, answered)]


def test_switched_off_the_chunks_go_by_plain_requests_and_open_batches_are_polled_to_their_end(
    tmp_path: Path, server: OpenAICompatibleServer
) -> None:
    index_sources(configured(tmp_path, server))
    settings = configured(tmp_path, server, batch_api=False)

    report = index_sources(settings)

    chunks = chunk_count(settings)
    assert report.embedded == len(vectors(settings)) == chunks and report.chunks_waiting == 0
    assert [status for _, status, _, _ in batch_records(settings)] == ["validating"]
    server.settle_batches("completed")
    index_sources(settings)
    assert [status for _, status, _, _ in batch_records(settings)] == ["applied"]
    with duckdb.connect(str(settings.warehouse), read_only=True) as conn:  # the answers were cached already
        assert conn.execute("SELECT count(*) = count(DISTINCT text_hash) FROM embedding_cache").fetchone()[0]


def test_a_provider_refusing_batches_costs_nothing_but_the_batches(
    tmp_path: Path, server: OpenAICompatibleServer
) -> None:
    server.failing[BATCHES] = Reply.error(400, "batches are not enabled for this organization")
    settings = configured(tmp_path, server, chat=True)

    report = index_sources(settings)

    assert len(vectors(settings)) == chunk_count(settings) == report.embedded
    assert report.summaries_written == len(summaries(settings)) == 2 and report.summaries_waiting == 0
    assert [status for _, status, _, _ in batch_records(settings)] == ["abandoned", "abandoned"]
    assert [w.split(" batch not submitted")[0] for w in report.warnings if "not submitted" in w] == ["embed", "summarize"]


def killed_run(settings: Settings, fault: str) -> subprocess.CompletedProcess:
    code = (
        "from sessionmem_pipeline.config import load_settings\n"
        "from sessionmem_pipeline.stages.run import index_sources\n"
        f"index_sources(load_settings({str(settings.config_file)!r}, env={{}}))\n"
    )
    environment = {**os.environ, FAULT_VARIABLE: fault}
    return subprocess.run(
        [sys.executable, "-c", code], env=environment, cwd=settings.config_file.parent, capture_output=True,
        text=True, timeout=300,
    )


@pytest.mark.parametrize(
    "fault, adopted",
    [("exit-after:provider_batch_create", True), ("exit-after:provider_batch_upload", False)],
    ids=["killed after the batch was created", "killed before the batch was created"],
)
def test_a_run_killed_while_submitting_neither_loses_nor_duplicates_the_batch(
    tmp_path: Path, server: OpenAICompatibleServer, fault: str, adopted: bool
) -> None:
    settings = configured(tmp_path, server)
    killed = killed_run(settings, fault)
    assert killed.returncode == 137, killed.stderr
    assert [status for batch_id, status, _, _ in batch_records(settings) if batch_id is None] == ["preparing"]
    assert len(server.batches) == (1 if adopted else 0)

    index_sources(settings)

    chunks = chunk_count(settings)
    assert len(server.batches) == 1  # adopted, or the abandoned one sent anew: never two
    [only] = server.batches
    records = batch_records(settings)
    expected = [(only, "validating")] if adopted else [(None, "abandoned"), (only, "validating")]
    assert [(batch_id, status) for batch_id, status, _, _ in records] == expected
    server.settle_batches("completed")
    index_sources(settings)
    assert len(vectors(settings)) == chunks and chunk_texts_embedded_plainly(settings, server) == 0


def test_on_dagster_compute_leaves_vectors_and_summaries_to_batches_and_the_sensor_polls_the_waiting_partitions(
    tmp_path: Path, server: OpenAICompatibleServer
) -> None:
    import dagster as dg

    from sessionmem_pipeline.definitions import defs
    from sessionmem_pipeline.defs.assets import PIPELINE_ASSETS, chunk_embeddings, search_index, session_summaries
    from sessionmem_pipeline.defs.partitions import session_partitions
    from sessionmem_pipeline.defs.resources import SessionmemResource
    from sessionmem_pipeline.defs.sensors import provider_batches_sensor
    from sessionmem_pipeline.stages.discover import discover

    settings = configured(tmp_path, server, chat=True)
    resources = {"sessionmem": SessionmemResource(config_file=str(settings.config_file))}
    instance = dg.DagsterInstance.ephemeral()
    keys = sorted(source.partition_key for source in discover(settings.sources))
    instance.add_dynamic_partitions(session_partitions.name, keys)
    every = {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
    partitioned = [a for a in PIPELINE_ASSETS if a.partitions_def is not None]
    assert dg.materialize(partitioned + [search_index], instance=instance, resources=resources, tags=every).success
    chunks = chunk_count(settings)
    assert len(server.batches) == 2 and vectors(settings) == {} and summaries(settings) == {}
    assert chunk_texts_embedded_plainly(settings, server) == 0  # neither the compute step nor the commit
    summary_prompts = [r for r in server.requests_to(CHAT) if "You summarize" in r.body["messages"][0]["content"]]
    assert summary_prompts == []

    def tick() -> dg.SensorResult:
        return provider_batches_sensor(
            dg.build_sensor_context(instance=instance, resources=resources, definitions=defs)
        )

    server.settle_batches("completed")
    requests = tick().run_requests
    polled_assets = [chunk_embeddings, session_summaries]
    assert [sorted(r.asset_graph_subset.partitions_subsets_by_asset_key[a.key].get_partition_keys())
            for r, a in zip(requests, polled_assets, strict=True)] == [keys, keys]
    polled = dg.materialize(polled_assets + [search_index], instance=instance, resources=resources, tags=every)

    assert polled.success and len(vectors(settings)) == chunks and len(summaries(settings)) == 2
    written = {m.metadata["batch_written"].value for m in polled.asset_materializations_for_node("chunk_embeddings")}
    assert written == {chunks} and len(server.batches) == 2  # one step over both partitions: its counts on each
    assert not tick().run_requests  # nothing waits any more


# ---- summaries --------------------------------------------------------------------------------------------------

def with_chat(settings: Settings, server: OpenAICompatibleServer, *, batch_api: bool) -> Settings:
    """Embeddings plain, summaries from a chat model, through the Batch API or not."""
    return settings.with_overrides(
        {"embedding.batch_api": False, "llm.provider": "openai", "llm.model": "chat-test",
         "llm.base_url": server.base_url, "llm.batch_api": batch_api, "llm.batch_min_backlog": 1},
        origin="test",
    )


def summaries(settings: Settings) -> dict[str, tuple]:
    with duckdb.connect(str(settings.warehouse), read_only=True) as conn:
        rows = conn.execute("SELECT session_id, model, summary FROM session_summaries").fetchall()
    return {session_id: (model, summary) for session_id, model, summary in rows}


def test_summaries_wait_for_their_batch_and_equal_plain_ones_once_it_completed(
    tmp_path: Path, server: OpenAICompatibleServer
) -> None:
    plain = with_chat(configured(tmp_path / "plain", server), server, batch_api=False)
    index_sources(plain)
    settings = with_chat(configured(tmp_path / "batched", server), server, batch_api=True)

    first = index_sources(settings)

    sessions = len(summaries(plain))
    assert sessions == 2 and first.summary_batch_submitted == first.summaries_waiting == sessions
    assert summaries(settings) == {}
    assert any(f"owing {sessions} summary requests" in reason for reason in check_health(settings)[1])
    second = index_sources(settings)
    assert second.summary_batch_submitted == 0 and second.summaries_waiting == sessions and len(server.batches) == 1

    server.settle_batches("completed")
    third = index_sources(settings)

    assert third.summary_batch_answers == sessions and third.summaries_written == sessions
    assert third.summaries_waiting == 0 and summaries(settings) == summaries(plain)
    assert {model for model, _ in summaries(settings).values()} == {"chat-test"}
    assert [(status, results) for _, status, _, results in batch_records(settings)] == [("applied", sessions)]
    with duckdb.connect(str(settings.warehouse), read_only=True) as conn:  # used: the summaries hold what they said
        assert conn.execute("SELECT count(*) FROM provider_batch_requests WHERE answer IS NOT NULL").fetchone() == (0,)


def test_summaries_switched_off_go_plainly_and_open_batches_are_polled_to_their_end(
    tmp_path: Path, server: OpenAICompatibleServer
) -> None:
    batched = with_chat(configured(tmp_path, server), server, batch_api=True)
    index_sources(batched)
    settings = with_chat(batched, server, batch_api=False)

    report = index_sources(settings)

    assert report.summaries_written == len(summaries(settings)) == 2 and report.summaries_waiting == 0
    assert [status for _, status, _, _ in batch_records(settings)] == ["validating"]
    server.settle_batches("completed")
    index_sources(settings)
    assert [status for _, status, _, _ in batch_records(settings)] == ["applied"]


def test_summaries_of_a_failed_batch_are_asked_plainly(tmp_path: Path, server: OpenAICompatibleServer) -> None:
    plain = with_chat(configured(tmp_path / "plain", server), server, batch_api=False)
    index_sources(plain)
    settings = with_chat(configured(tmp_path / "batched", server), server, batch_api=True)
    index_sources(settings)

    server.settle_batches("failed")
    report = index_sources(settings)

    assert report.summaries_written == 2 and report.summary_batch_submitted == 0 and len(server.batches) == 1
    assert summaries(settings) == summaries(plain)


def test_forgetting_a_session_leaves_nothing_of_it_in_the_batch_records(
    tmp_path: Path, server: OpenAICompatibleServer
) -> None:
    from sessionmem_pipeline.stages.run import forget

    settings = configured(tmp_path, server)
    index_sources(settings)
    with duckdb.connect(str(settings.warehouse), read_only=True) as conn:
        kept = conn.execute(
            "SELECT count(*) FROM chunks WHERE session_id <> 'infra/backups'"
        ).fetchone()[0]

    forget(settings, session_id="infra/backups")

    with duckdb.connect(str(settings.warehouse), read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM provider_batch_requests").fetchone()[0] == kept > 0
