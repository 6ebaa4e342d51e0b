"""Per-session stages computed outside the writer: staged by parallel compute steps from the sources (parsing) and
the published snapshot (the rest), committed by the one writer, and the whole warehouse the same as an in-process
run's."""

from __future__ import annotations

import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest
from openai_server import EMBEDDINGS, OpenAICompatibleServer

from sessionmem_pipeline.config import load_settings
from warehouse_tables import warehouse_tables

from sessionmem_pipeline.defs.assets import (
    chunk_embeddings,
    chunks,
    collapsed_messages,
    memories,
    raw_messages,
    search_index,
    session_summaries,
    session_threads,
    staged_parses,
    staged_results,
)
from sessionmem_pipeline.defs.partitions import session_partitions
from sessionmem_pipeline.defs.resources import SessionmemResource
from sessionmem_pipeline.stages.discover import discover
from sessionmem_pipeline.stages.ingest_staging import compute_parses, staged_sessions
from sessionmem_pipeline.stages.registry import (
    CHUNK,
    COLLAPSE,
    EMBED,
    FAULT_VARIABLE,
    INGEST,
    InjectedFault,
    Providers,
)
from sessionmem_pipeline.stages.run import forget, index_sources
from sessionmem_pipeline.stages import staging
from sessionmem_pipeline.stages.staging import compute_sessions, staging_folder
from sessionmem_pipeline.warehouse import Warehouse

SAMPLES = Path(__file__).parent.parent / "samples"
COMMITS = [collapsed_messages, chunks, chunk_embeddings, session_summaries]


def write_config(folder: Path, sources: Path, server: OpenAICompatibleServer) -> Path:
    config = folder / "sessionmem.toml"
    config.write_text(
        f'warehouse = "{folder / "w.duckdb"}"\nsources = ["{sources}"]\n'
        f'[embedding]\nprovider = "openai"\nbase_url = "{server.base_url}"\nmodel = "text-embedding-3-small"\n'
        "dimensions = 32\nbatch_size = 4\nmax_in_flight = 1\n",
        encoding="utf-8",
    )
    return config


@pytest.fixture()
def sources(tmp_path: Path) -> Path:
    root = tmp_path / "sources"
    shutil.copytree(SAMPLES / "generic", root / "generic")
    shutil.copytree(SAMPLES / "claude", root / "claude")
    return root


def materialize(assets: list, config: Path, keys: list[str] | None = None) -> dg.ExecuteInProcessResult:
    instance = dg.DagsterInstance.ephemeral()
    tags = {}
    if keys is not None:
        instance.add_dynamic_partitions(session_partitions.name, keys)
        tags = {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
    resources = {"sessionmem": SessionmemResource(config_file=str(config))}
    result = dg.materialize(assets, instance=instance, resources=resources, tags=tags)
    assert result.success
    return result


def staged_files(settings) -> list[Path]:
    return sorted(staging_folder(settings).parent.glob("*/*.parquet"))


@pytest.mark.slow
def test_parallel_compute_steps_then_one_commit_build_the_same_warehouse_as_a_serial_run(
    tmp_path: Path, sources: Path, openai_server: OpenAICompatibleServer
) -> None:
    (tmp_path / "serial").mkdir()
    index_sources(load_settings(write_config(tmp_path / "serial", sources, openai_server), env={}))
    (tmp_path / "parallel").mkdir()
    config = write_config(tmp_path / "parallel", sources, openai_server)
    settings = load_settings(config, env={})
    keys = sorted(f.partition_key for f in discover(settings.sources))

    with ThreadPoolExecutor(3) as pool:  # one compute step per partition, three at a time
        list(pool.map(lambda key: materialize([staged_parses], config, [key]), keys))
        assert {path.parent.name for path in staged_files(settings)} == {"ingest"}
        # from the staged parses: nothing is ingested or published yet
        list(pool.map(lambda key: materialize([staged_results], config, [key]), keys))
    assert not settings.warehouse.exists()
    assert {path.parent.name for path in staged_files(settings)} == {"ingest", "collapse", "chunk", "embed", "summarize"}
    ingest = materialize([raw_messages], config, keys)
    commit = materialize(COMMITS, config, keys)
    materialize([session_threads, memories, search_index], config)

    events = [*ingest.get_asset_materialization_events(), *commit.get_asset_materialization_events()]
    for event in events:  # every result came from the compute steps
        assert event.materialization.metadata["computed_in_commit"].value == 0, event.asset_key
    assert staged_files(settings) == []  # committed files are removed
    parallel = warehouse_tables(tmp_path / "parallel" / "w.duckdb")
    serial = warehouse_tables(tmp_path / "serial" / "w.duckdb")
    assert parallel.keys() == serial.keys()
    filled = {table for table, rows in serial.items() if rows}
    assert {"collapsed_messages", "chunks", "embedding_cache", "session_summaries", "stage_state"} <= filled
    for table in serial:
        assert parallel[table] == serial[table], table


def test_compute_builds_a_new_session_from_its_staged_parse_and_waits_for_the_ingest_of_a_grown_one(
    tmp_path: Path, sources: Path, openai_server: OpenAICompatibleServer
) -> None:
    built = twin_settings(tmp_path, sources, openai_server)
    for settings in built.values():
        index_sources(settings)
    claude = next((sources / "claude").rglob("*.jsonl"))
    text = claude.read_text(encoding="utf-8")
    newcomer = claude.with_name("0b5e7a9c-1111-4222-8333-944455556666.jsonl")  # a new session of the same project
    newcomer.write_text(text.replace(claude.stem, newcomer.stem).replace("gift card", "voucher"), encoding="utf-8")
    last = json.loads(text.splitlines()[-1])
    reply = {**last, "uuid": "5d1e0c3a-0000-4000-8000-000000000001", "parentUuid": last["uuid"],
             "message": {**last["message"], "id": "msg_appended", "content": [
                 {"type": "text", "text": "Follow-up: the gift card refund job now retries twice before paging."}]}}
    with claude.open("a", encoding="utf-8") as handle:  # one more assistant message: the file grew
        handle.write(json.dumps(reply) + "\n")
    staged = built["staged"]
    keys = [f.partition_key for f in discover(staged.sources) if f.path in (str(claude), str(newcomer))]

    assert compute_parses(staged, keys).files == 2
    outcome = compute_sessions(staged, keys, Providers(staged), parsed=staged_sessions(staged, keys))

    # the new session from its parse (the snapshot holds none of it); the grown one waits for its ingest: ingest
    # keeps its stored messages, which its parse alone cannot tell
    assert outcome.sessions == 1 and outcome.computed[COLLAPSE.name] == outcome.computed[CHUNK.name] == 1
    staged_run = index_sources(staged)
    index_sources(built["serial"])
    assert staged_run.computed_in_commit[INGEST.name] == 0
    assert staged_run.computed_in_commit[COLLAPSE.name] == staged_run.computed_in_commit[CHUNK.name] == 1  # the grown
    assert staged_files(staged) == []
    assert warehouse_tables(staged.warehouse) == warehouse_tables(built["serial"].warehouse)


def test_compute_leaves_out_a_session_opted_out_after_its_parse_was_staged(
    tmp_path: Path, openai_server: OpenAICompatibleServer
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    sample = next((SAMPLES / "claude").rglob("*.jsonl"))
    target = tmp_path / "sources" / "claude" / sample.parent.name / sample.name
    target.parent.mkdir(parents=True)
    target.write_text(sample.read_text(encoding="utf-8").replace("/home/dev/webshop", str(project)), encoding="utf-8")
    settings = load_settings(write_config(tmp_path, tmp_path / "sources", openai_server), env={})
    keys = [f.partition_key for f in discover(settings.sources)]
    assert compute_parses(settings, keys).files == 1
    (project / ".sessionmem-ignore").write_text("", encoding="utf-8")  # the person opts the project out

    assert staged_sessions(settings, keys) == {}
    assert compute_sessions(settings, keys, Providers(settings), parsed=staged_sessions(settings, keys)).paths == []
    assert openai_server.requests_to(EMBEDDINGS) == []  # none of its words went to the provider


def test_one_run_with_the_writers_ingest_first_still_commits_what_compute_staged(
    tmp_path: Path, sources: Path, openai_server: OpenAICompatibleServer
) -> None:
    config = write_config(tmp_path, sources, openai_server)
    keys = sorted(f.partition_key for f in discover(load_settings(config, env={}).sources))

    # in process, Dagster runs raw_messages before staged_results: it consumes the parses and publishes at once
    run = materialize([staged_parses, raw_messages, staged_results, *COMMITS], config, keys)

    events = run.get_asset_materialization_events()
    computed = next(e.materialization.metadata for e in events if e.asset_key == staged_results.key)
    assert computed["sessions"].value > 0  # from the published snapshot: the parses were consumed
    for event in events:
        if "computed_in_commit" in event.materialization.metadata:
            assert event.materialization.metadata["computed_in_commit"].value == 0, event.asset_key


def test_compute_leaves_out_a_forgotten_session_of_a_staged_parse(
    tmp_path: Path, sources: Path, openai_server: OpenAICompatibleServer
) -> None:
    settings = load_settings(write_config(tmp_path, sources, openai_server), env={})
    index_sources(settings)
    claude = next((sources / "claude").rglob("*.jsonl"))
    [session_id] = forget(settings, session_id=claude.stem)
    claude.write_text(claude.read_text(encoding="utf-8").replace("gift card", "giftcard"), encoding="utf-8")
    [key] = [f.partition_key for f in discover(settings.sources) if f.path == str(claude)]
    assert compute_parses(settings, [key]).files == 1
    assert session_id in staged_sessions(settings, [key])
    before = len(openai_server.requests_to(EMBEDDINGS))

    outcome = compute_sessions(settings, [key], Providers(settings), parsed=staged_sessions(settings, [key]))

    assert outcome.computed == {} and outcome.paths == []  # nothing of its words staged, nor sent to the provider
    assert len(openai_server.requests_to(EMBEDDINGS)) == before


def test_compute_reads_the_published_snapshot_while_a_writer_holds_the_live_file(
    tmp_path: Path, sources: Path, openai_server: OpenAICompatibleServer
) -> None:
    settings = load_settings(write_config(tmp_path, sources, openai_server), env={})
    assert compute_sessions(settings, None, Providers(settings)).paths == []  # nothing published yet
    index_sources(settings)
    wider = settings.with_overrides({"embedding.dimensions": 48})  # another model: every chunk needs a new vector

    with Warehouse(settings.warehouse) as live:  # a run is writing
        chunk_texts = live.scalar("SELECT count(DISTINCT context_content) FROM chunks")
        outcome = compute_sessions(wider, None, Providers(wider))

    assert COLLAPSE.name not in outcome.computed  # what the snapshot holds up to date is not computed again
    [vectors] = [path for path in outcome.paths if path.parent.name == EMBED.name]
    staged = pq.read_table(vectors)
    assert staged.num_rows == outcome.computed[EMBED.name] == chunk_texts
    assert {len(vector) for vector in staged.column("vector").to_pylist()} == {48}


def test_compute_sends_embedding_requests_while_it_still_computes_later_sessions(
    tmp_path: Path, sources: Path, openai_server: OpenAICompatibleServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings(write_config(tmp_path, sources, openai_server), env={})
    index_sources(settings)
    wider = settings.with_overrides({"embedding.dimensions": 48})  # every chunk needs a new vector
    with Warehouse(settings.warehouse) as wh:
        sessions = wh.scalar("SELECT count(*) FROM sessions")
    before = len(openai_server.requests_to(EMBEDDINGS))
    seen_at_start: list[int] = []  # requests the server had when compute began each session
    session = staging._Compute.session

    def session_after_the_first_request(self, snapshot, session_id, state, parsed):
        if len(seen_at_start) == sessions - 1:  # the earlier sessions' texts fill a batch: it goes out meanwhile
            deadline = time.monotonic() + 10
            while len(openai_server.requests_to(EMBEDDINGS)) == before and time.monotonic() < deadline:
                time.sleep(0.01)
        seen_at_start.append(len(openai_server.requests_to(EMBEDDINGS)) - before)
        return session(self, snapshot, session_id, state, parsed)

    monkeypatch.setattr(staging._Compute, "session", session_after_the_first_request)
    outcome = compute_sessions(wider, None, Providers(wider))

    assert len(seen_at_start) > 1 and seen_at_start[0] == 0 and seen_at_start[-1] > 0
    requests = openai_server.requests_to(EMBEDDINGS)[before:]
    sent = [text for request in requests for text in request.body["input"]]
    assert [len(request.body["input"]) for request in requests[:-1]] == [4] * (len(requests) - 1)  # full batches
    [vectors] = [path for path in outcome.paths if path.parent.name == EMBED.name]
    assert [staging.text_key(text) for text in sent] == pq.read_table(vectors).column("text_key").to_pylist()


def test_sessionmem_index_commits_what_a_compute_step_staged_and_builds_the_same_warehouse(
    tmp_path: Path, sources: Path, openai_server: OpenAICompatibleServer
) -> None:
    built = {}
    for name in ("plain", "staged"):
        (tmp_path / name).mkdir()
        settings = load_settings(write_config(tmp_path / name, sources, openai_server), env={})
        index_sources(settings)
        built[name] = settings.with_overrides({"chunking.max_tokens": 200})  # every session is chunked anew

    outcome = compute_sessions(built["staged"], None, Providers(built["staged"]))
    assert outcome.computed["chunk"] > 0 and outcome.computed["embed"] > 0
    staged_run = index_sources(built["staged"])
    plain_run = index_sources(built["plain"])

    assert {"chunk", "embed"} <= staged_run.computed_in_commit.keys()
    assert set(staged_run.computed_in_commit.values()) == {0}  # the CLI committed the staged results
    assert plain_run.computed_in_commit["chunk"] == outcome.computed["chunk"]
    assert staged_files(built["staged"]) == []
    assert warehouse_tables(built["staged"].warehouse) == warehouse_tables(built["plain"].warehouse)


def test_a_result_staged_under_another_configuration_is_computed_again_by_the_commit(
    tmp_path: Path, sources: Path, openai_server: OpenAICompatibleServer
) -> None:
    settings = load_settings(write_config(tmp_path, sources, openai_server), env={})
    index_sources(settings)
    other = settings.with_overrides({"chunking.max_tokens": 200})
    staged = compute_sessions(other, None, Providers(other)).computed["chunk"]

    run = index_sources(settings.with_overrides({"chunking.max_tokens": 300}))  # the chunk stage's key differs

    assert run.computed_in_commit["chunk"] == staged > 0


# ---- parsing (ingest) in compute ---------------------------------------------------------------------------------

LATE = "2999-01-01T00:00:00Z"  # judged by the clock of whoever parses: never staged


@pytest.fixture()
def awkward_sources(sources: Path) -> Path:
    """The samples, a file to quarantine, one with a bad line among good ones and one with a late timestamp."""
    good = (SAMPLES / "generic" / "planning" / "2026-03-02.jsonl").read_text(encoding="utf-8").splitlines()
    (sources / "generic" / "broken.jsonl").write_text("not json\nnor this\n", encoding="utf-8")
    (sources / "generic" / "partly.jsonl").write_text("\n".join([*good[:6], "{oops", *good[6:12]]) + "\n", encoding="utf-8")
    late = good[12].replace(good[12].split('"timestamp": "')[1].split('"')[0], LATE)
    (sources / "generic" / "late.jsonl").write_text("\n".join([*good[:3], late]) + "\n", encoding="utf-8")
    return sources


def twin_settings(tmp_path: Path, sources: Path, server: OpenAICompatibleServer) -> dict:
    """Two warehouses over the same sources: one built serially, one from staged parses."""
    built = {}
    for name in ("serial", "staged"):
        (tmp_path / name).mkdir()
        built[name] = load_settings(write_config(tmp_path / name, sources, server), env={})
    return built


def test_staged_parses_give_the_serial_warehouse_with_quarantine_and_parse_warnings(
    tmp_path: Path, awkward_sources: Path, openai_server: OpenAICompatibleServer
) -> None:
    built = twin_settings(tmp_path, awkward_sources, openai_server)
    outcome = compute_parses(built["staged"], None)
    assert outcome.files == 4  # the late file is left to the commit
    assert [problem.split(": ")[-1] for problem in outcome.not_staged] == ["a late timestamp the commit's clock must judge"]

    staged_run = index_sources(built["staged"])
    serial_run = index_sources(built["serial"])

    assert staged_run.computed_in_commit[INGEST.name] == 1  # only the late file was parsed by the writer
    assert serial_run.computed_in_commit[INGEST.name] == 5
    assert staged_files(built["staged"]) == []
    staged, serial = (warehouse_tables(built[name].warehouse) for name in ("staged", "serial"))
    assert [row[1] for row in serial["quarantine"]] == ["generic/broken"]  # partition key
    assert len(serial["parse_warnings"]) == 2  # the bad line, the late timestamp
    assert staged == serial


def test_a_file_changed_after_compute_is_parsed_by_the_commit(
    tmp_path: Path, sources: Path, openai_server: OpenAICompatibleServer
) -> None:
    built = twin_settings(tmp_path, sources, openai_server)
    assert compute_parses(built["staged"], None).files == 2
    planning = sources / "generic" / "planning" / "2026-03-02.jsonl"
    planning.write_text("\n".join(planning.read_text(encoding="utf-8").splitlines()[:-2]) + "\n", encoding="utf-8")

    staged_run = index_sources(built["staged"])
    index_sources(built["serial"])

    assert staged_run.computed_in_commit[INGEST.name] == 1
    assert warehouse_tables(built["staged"].warehouse) == warehouse_tables(built["serial"].warehouse)


def test_a_commit_that_crashed_after_compute_is_completed_by_the_next_plain_run(
    tmp_path: Path, awkward_sources: Path, openai_server: OpenAICompatibleServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = twin_settings(tmp_path, awkward_sources, openai_server)
    compute_parses(built["staged"], None)
    monkeypatch.setenv(FAULT_VARIABLE, "raise-in:ingest")  # after the first file's commit
    with pytest.raises(InjectedFault):
        index_sources(built["staged"])
    monkeypatch.delenv(FAULT_VARIABLE)
    assert staged_files(built["staged"])  # not consumed: the commit did not finish

    repair = index_sources(built["staged"])
    index_sources(built["serial"])

    assert repair.computed_in_commit[INGEST.name] == 1  # the late file; the rest from the staging file
    assert staged_files(built["staged"]) == []
    assert warehouse_tables(built["staged"].warehouse) == warehouse_tables(built["serial"].warehouse)


def test_compute_skips_what_the_snapshot_holds_and_never_opens_a_fifo(
    tmp_path: Path, sources: Path, openai_server: OpenAICompatibleServer
) -> None:
    settings = load_settings(write_config(tmp_path, sources, openai_server), env={})
    os.mkfifo(sources / "generic" / "pipe.jsonl")  # opening it for reading would wait for a writer
    index_sources(settings)
    assert compute_parses(settings, None).files == 0  # the snapshot holds every file as it is

    claude = next((sources / "claude").rglob("*.jsonl"))
    claude.write_text(claude.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    outcome = compute_parses(settings, [discover(settings.sources)[0].partition_key])
    assert outcome.files == 1 and outcome.path is not None
    run = index_sources(settings)
    assert run.computed_in_commit[INGEST.name] == 0 and staged_files(settings) == []


def test_a_parse_staged_under_other_privacy_rules_is_parsed_again_by_the_commit(
    tmp_path: Path, sources: Path, openai_server: OpenAICompatibleServer
) -> None:
    settings = load_settings(write_config(tmp_path, sources, openai_server), env={})
    other = settings.with_overrides({"privacy.exclude_projects": ["webshop"]})  # the ingest stage's key differs
    assert compute_parses(other, None).files == 2

    run = index_sources(settings)

    assert run.computed_in_commit[INGEST.name] == 2 and run.excluded == []
    assert staged_files(settings) == []  # read, not taken, and removed with the run's other staging files
