"""Failures degrade, they don't crash: an embedding server answering HTTP 500 (index finishes, search answers
keyword-only with a notice), a full disk (a recorded storage error that health reports), and inputs no search can
answer (a one-line message, exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest
from conftest import CORPUS, IndexedCorpus, write_corpus
from openai_server import EMBEDDINGS, OpenAICompatibleServer, Reply

from sessionmem_pipeline.cli import main
from sessionmem_pipeline.client import SessionMemory
from sessionmem_pipeline.config import Settings, load_settings
from sessionmem_pipeline.stages.run import index_sources
from sessionmem_pipeline.warehouse import read_storage_error

# ---- an embedding server answering HTTP 500 -------------------------------------------------------------------


def remote_config(base: Path, server: OpenAICompatibleServer) -> Path:
    write_corpus(base / "sources", {name: CORPUS[name] for name in ("infra/backups.jsonl", "webshop/search.jsonl")})
    config = base / "sessionmem.toml"
    config.write_text(
        'warehouse = "w.duckdb"\nsources = ["sources"]\n'
        f'[embedding]\nprovider = "openai"\nmodel = "test-embed"\nbase_url = "{server.base_url}"\ndimensions = 64\n',
        encoding="utf-8",
    )
    return config


def load(config: Path) -> Settings:
    return load_settings(config, env={}, cwd=config.parent, home=config.parent)


def counts(settings: Settings) -> dict[str, object]:
    with duckdb.connect(str(settings.warehouse), read_only=True) as conn:
        return {
            "chunks": conn.execute("SELECT count(*) FROM chunks").fetchone()[0],
            "embedded": conn.execute("SELECT count(*) FROM chunk_embeddings").fetchone()[0],
            "failures": conn.execute("SELECT error, attempts FROM embedding_failures").fetchall(),
            "summaries": conn.execute("SELECT count(*) FROM session_summaries").fetchone()[0],
            "summaries_embedded": conn.execute(
                "SELECT count(*) FROM session_summaries WHERE embedding IS NOT NULL"
            ).fetchone()[0],
        }


def test_an_embedding_server_answering_500_degrades_to_keyword_search_and_recovers(
    tmp_path: Path, openai_server: OpenAICompatibleServer, capsys: pytest.CaptureFixture[str]
) -> None:
    config = remote_config(tmp_path, openai_server)
    settings = load(config)
    openai_server.native_dimensions = 64
    openai_server.failing[EMBEDDINGS] = Reply.error(500, "upstream model crashed")

    report = index_sources(settings)

    first = counts(settings)
    assert first["chunks"] == report.embedding_failures > 0 and first["embedded"] == 0
    assert {(error.split(":")[0], attempts) for error, attempts in first["failures"]} == {("EMBEDDING_FAILED", 1)}
    assert first["summaries"] == 2 and first["summaries_embedded"] == 0  # written, embedded later
    assert [e["type"] for e in report.errors] == ["EMBEDDING_FAILED"]

    memory = SessionMemory(settings=settings)
    results = memory.search("nightly database backups vacuum")
    assert results[0].session_id == "infra/backups"
    assert memory.notice is not None and memory.notice.startswith("keyword-only results")
    assert memory.search_sessions("backups") and memory.notice is not None

    capsys.readouterr()
    assert main(["search", "database backups", "--config", str(config)]) == 0
    first_line = capsys.readouterr().out.splitlines()[0]
    assert first_line.startswith("note: keyword-only results: the embedding provider failed")
    assert main(["search", "database backups", "--config", str(config), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["notice"].startswith("keyword-only results") and answer["results"]

    index_sources(settings)  # still down: tried again, counted
    assert {attempts for _, attempts in counts(settings)["failures"]} == {2}

    openai_server.failing.clear()
    index_sources(settings)

    healed = counts(settings)
    assert healed["failures"] == [] and healed["embedded"] == healed["chunks"]
    assert healed["summaries_embedded"] == healed["summaries"] == 2
    memory.search("nightly database backups vacuum")
    assert memory.notice is None


# ---- a full disk --------------------------------------------------------------------------------------------

LIMITED_WRITER = """
import resource, signal, sys
from pathlib import Path

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
from sessionmem_pipeline.cli import main

sys.exit(main({argv!r}))
"""


def run_limited(limit: int, *argv: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a process that may not write files larger than `limit` bytes (a full disk, for it)."""
    code = textwrap.dedent(LIMITED_WRITER).format(limit=limit, argv=list(argv))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
@pytest.mark.parametrize(
    "limit, indexed_before",
    [(400_000, False), (100, True)],
    ids=["a new warehouse grows past the limit", "the full pause marker does not fit"],
)
def test_a_full_disk_names_the_file_and_what_to_do_and_pauses_until_health_recovers(
    tmp_path: Path, limit: int, indexed_before: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    write_corpus(tmp_path / "sources", {"infra/backups.jsonl": CORPUS["infra/backups.jsonl"]})
    config = tmp_path / "sessionmem.toml"
    config.write_text('warehouse = "w.duckdb"\nsources = ["sources"]\n', encoding="utf-8")
    if indexed_before:
        assert main(["index", "--config", str(config)]) == 0
    big = [("x1", "assistant", "Max", "2026-03-10T16:05:00Z", "The vacuum job log says: done. " * 40_000)]
    write_corpus(tmp_path / "sources", {"infra/log.jsonl": big})

    indexed = run_limited(limit, "index", "--config", str(config))

    assert indexed.returncode == 1, indexed.stderr
    message = indexed.stderr.strip().splitlines()[-1]
    assert message.startswith("sessionmem index: error: STORAGE_ERROR: ")
    assert str(tmp_path / "w.duckdb") in message and "File too large" in message
    assert "MB are free in" in message and "then run `sessionmem health`" in message
    marker = read_storage_error(tmp_path / "w.duckdb")
    assert marker is not None and marker["where"] == "index" and marker["error"]

    still_full = run_limited(100, "health", "--config", str(config))  # not even a small write fits yet
    assert still_full.returncode == 1 and "STORAGE_ERROR" in still_full.stdout + still_full.stderr
    assert read_storage_error(tmp_path / "w.duckdb") is not None  # the sensors stay paused

    capsys.readouterr()
    code = main(["health", "--config", str(config)])  # room again: the pause is lifted
    assert "recovered from the storage error" in capsys.readouterr().out
    assert code == (0 if indexed_before else 1)  # a warehouse never published is still "nothing indexed yet"
    assert read_storage_error(tmp_path / "w.duckdb") is None


def test_a_pause_marker_cut_short_by_a_full_disk_still_pauses(tmp_path: Path) -> None:
    warehouse = tmp_path / "w.duckdb"
    (tmp_path / "w.storage-error.json").write_text('{"time": "2026-03-02T10:00:00+00:00", "where": "ind', "utf-8")

    marker = read_storage_error(warehouse)

    assert marker is not None and marker["error"] == "the disk was too full to record the error in full"


# ---- inputs no search can answer ----------------------------------------------------------------------------

EMPTY = "the query is empty: give the words or question to search for"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["search", "   "], EMPTY),
        (["search", "backups", "--limit", "0"], "limit must be a whole number of at least 1, got 0"),
        (["search", "backups", "--limit", "-1"], "limit must be a whole number of at least 1, got -1"),
        (["search-sessions", ""], EMPTY),
        (["recall", "backups", "--sessions", "0"], "sessions must be a whole number of at least 1, got 0"),
        (["memories", "x", "--limit", "-5"], "limit must be a whole number of at least 1, got -5"),
        (["recap", "--budget", "0"], "budget must be a whole number of at least 1, got 0"),
    ],
)
def test_the_cli_rejects_inputs_no_search_can_answer_with_one_line_and_exit_2(
    indexed_corpus: IndexedCorpus, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()

    code = main([*argv, "--config", str(indexed_corpus.config)])

    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.splitlines() == [f"sessionmem {argv[0]}: error: {message}"]


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.search(""),
        lambda m: m.search("\n\t "),
        lambda m: m.search("backups", limit=0),
        lambda m: m.search("backups", limit=True),
        lambda m: m.search_sessions("backups", limit=-1),
        lambda m: m.recall("backups", sessions=0),
        lambda m: m.search_memories(" "),
        lambda m: m.recap(budget=-800),
    ],
)
def test_the_client_raises_value_error_for_inputs_no_search_can_answer(indexed_corpus: IndexedCorpus, call) -> None:
    with pytest.raises(ValueError, match="the query is empty|must be a whole number of at least 1"):
        call(SessionMemory(settings=indexed_corpus.settings))
