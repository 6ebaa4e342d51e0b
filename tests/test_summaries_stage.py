"""Summaries in the warehouse: versions, incremental input, --full, the LLM path over real HTTP with a fallback,
and secrets that never reach the model or the stored summary."""

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from openai_server import CHAT, OpenAICompatibleServer, Reply

from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.core.summarize import EXTRACTIVE_MODEL
from sessionmem_pipeline.providers import OpenAIChatModel
from sessionmem_pipeline.stages.run import index_sources
from sessionmem_pipeline.stages.summaries import summarize_sessions
from sessionmem_pipeline.warehouse import Warehouse

SAMPLES = Path(__file__).parent.parent / "samples"
SECRET_KEY = "AKIAQ7ZK2MLD5XW3P9RT"
SECRET_PASSWORD = "hunter2-Zq9!vault"


def _line(text: str, minute: int, role: str = "user", speaker: str = "Maya") -> str:
    moment = datetime(2026, 3, 3, 9, minute, tzinfo=UTC).isoformat().replace("+00:00", "Z")
    return json.dumps({"role": role, "speaker": speaker, "content": text, "timestamp": moment}) + "\n"


@pytest.fixture()
def setup(tmp_path: Path) -> dict:
    root = tmp_path / "sources"
    (root / "ops").mkdir(parents=True)
    session = root / "ops" / "2026-03-03.jsonl"
    session.write_text(
        _line("The staging deploy fails when the cache warmer starts before migrations.", 0)
        + _line("We decided to run migrations first and gate the warmer on a health check.", 1, "assistant", "Alfred")
        + _line(f"The old key {SECRET_KEY} is in deploy.env, and the db password={SECRET_PASSWORD}.", 2)
        + _line("I'll rotate both and move them to the vault.", 3, "assistant", "Alfred"),
        encoding="utf-8",
    )
    settings = load_settings(flags={"warehouse": str(tmp_path / "w.duckdb"), "sources": [str(root)]}, env={})
    return {"settings": settings, "session": session, "session_id": "ops/2026-03-03"}


def _versions(settings, session_id: str) -> list[dict]:
    with Warehouse(settings.warehouse) as wh:
        return wh.query(
            "SELECT version, is_incremental, model, message_count, summary FROM session_summaries "
            "WHERE session_id = ? ORDER BY version",
            [session_id],
        )


def _chat(server: OpenAICompatibleServer) -> OpenAIChatModel:
    return OpenAIChatModel("llama-test", base_url=server.base_url, backoff_seconds=0.001)


def _llm_summary(overview: str) -> Reply:
    return Reply.chat(
        json.dumps(
            {"overview": overview, "topics": ["deploy"], "decisions": ["Migrations run first."],
             "key_points": ["The warmer is gated."], "open_items": ["Rotate credentials."]}
        )
    )


def test_versions_increment_keep_history_and_skip_unchanged_input(setup: dict) -> None:
    settings, session = setup["settings"], setup["session"]
    assert index_sources(settings).summaries_written == 1
    assert index_sources(settings).summaries_written == 0  # same input: nothing new
    with open(session, "a", encoding="utf-8") as handle:
        handle.write(_line("Rotation done; the warmer now waits for /healthz.", 30, "assistant", "Alfred"))
    assert index_sources(settings).summaries_written == 1
    versions = _versions(settings, setup["session_id"])
    assert [(v["version"], v["is_incremental"]) for v in versions] == [(1, False), (2, True)]
    assert versions[1]["message_count"] == 5 and versions[0]["message_count"] == 4
    stored = " ".join(v["summary"] for v in versions)
    assert SECRET_KEY not in stored and SECRET_PASSWORD not in stored


def test_llm_reads_only_new_messages_then_full_regenerates(setup: dict, openai_server: OpenAICompatibleServer) -> None:
    settings, session, session_id = setup["settings"], setup["session"], setup["session_id"]
    index_sources(settings.with_overrides({"summaries.enabled": False}))
    llm = _chat(openai_server)
    with Warehouse(settings.warehouse) as wh:
        openai_server.enqueue(CHAT, _llm_summary("Deploy ordering fixed."))
        assert summarize_sessions(wh, [session_id], llm=llm, embedder=None).versions_written == 1
    with open(session, "a", encoding="utf-8") as handle:
        handle.write(_line("Please also document the new startup order in RUNBOOK.md.", 20))
    index_sources(settings.with_overrides({"summaries.enabled": False}))
    with Warehouse(settings.warehouse) as wh:
        openai_server.enqueue(CHAT, _llm_summary("Deploy ordering fixed; runbook requested."))
        outcome = summarize_sessions(wh, [session_id], llm=llm, embedder=None)
        assert outcome.versions_written == 1 and outcome.messages_read == 1
        openai_server.enqueue(CHAT, _llm_summary("Full rebuild of the deploy story."))
        assert summarize_sessions(wh, [session_id], llm=llm, embedder=None, full=True).versions_written == 1

    requests = openai_server.requests_to(CHAT)
    incremental_prompt = json.dumps(requests[1].body["messages"])
    assert "RUNBOOK.md" in incremental_prompt and "cache warmer starts" not in incremental_prompt
    assert "cache warmer starts" in json.dumps(requests[2].body["messages"])  # --full reads from the start
    for request in requests:
        body = json.dumps(request.body)
        assert SECRET_KEY not in body and SECRET_PASSWORD not in body
    versions = _versions(settings, session_id)
    assert [(v["version"], v["is_incremental"], v["model"]) for v in versions] == [
        (1, False, "llama-test"), (2, True, "llama-test"), (3, False, "llama-test")
    ]


def test_invalid_json_from_the_model_falls_back_to_the_extractive_summary(
    setup: dict, openai_server: OpenAICompatibleServer
) -> None:
    settings, session_id = setup["settings"], setup["session_id"]
    index_sources(settings.with_overrides({"summaries.enabled": False}))
    openai_server.default_chat_content = "this is not JSON at all"
    with Warehouse(settings.warehouse) as wh:
        outcome = summarize_sessions(wh, [session_id], llm=_chat(openai_server), embedder=None)
    assert outcome.versions_written == 1 and len(outcome.llm_fallbacks) == 1
    (version,) = _versions(settings, session_id)
    assert version["model"] == EXTRACTIVE_MODEL
    assert "migrations" in json.loads(version["summary"])["overview"].lower()


def test_summaries_switched_off_write_nothing(setup: dict) -> None:
    settings = setup["settings"].with_overrides({"summaries.enabled": False})
    assert index_sources(settings).summaries_written == 0
    assert _versions(settings, setup["session_id"]) == []


def test_a_live_session_is_not_summarized_until_idle_or_busy(setup: dict) -> None:
    settings = setup["settings"]
    live = setup["session"].with_name("live.jsonl")
    now = datetime.now(UTC) - timedelta(minutes=2)
    live.write_text(
        json.dumps({"role": "user", "content": "start the migration", "timestamp": now.isoformat()}) + "\n",
        encoding="utf-8",
    )
    index_sources(settings)
    assert _versions(settings, "ops/live") == []
    assert len(_versions(settings, setup["session_id"])) == 1


def test_a_session_replaced_whole_continues_its_version_numbering(setup: dict) -> None:
    """A rewritten transcript (not its stored messages plus new ones) is replaced whole, its old summaries with it
    (they may hold what the new rules redact); its next summary is a new version, never a reused `<id>@1` that
    readers (threads, recap fingerprints, the sensor's marks) would take for the summary they already saw."""
    settings, session = setup["settings"], setup["session"]
    index_sources(settings)
    with open(session, "a", encoding="utf-8") as handle:
        handle.write(_line("Rotation done; the warmer now waits for /healthz.", 30, "assistant", "Alfred"))
    index_sources(settings)
    assert [v["version"] for v in _versions(settings, setup["session_id"])] == [1, 2]
    session.write_text(
        _line("Payments retries double-charge when the webhook times out.", 0)
        + _line("We decided to make the charge idempotent with the order id as key.", 1, "assistant", "Alfred"),
        encoding="utf-8",
    )
    assert index_sources(settings).summaries_written == 1
    versions = _versions(settings, setup["session_id"])
    assert [(v["version"], v["is_incremental"]) for v in versions] == [(3, False)]
    assert "idempotent" in versions[0]["summary"] and "warmer" not in versions[0]["summary"]
    with Warehouse(settings.warehouse) as wh:
        assert wh.scalar("SELECT summary_version FROM sessions WHERE session_id = ?", [setup["session_id"]]) == 3
        assert wh.scalar("SELECT summary_id FROM session_summaries WHERE session_id = ?",
                         [setup["session_id"]]) == f"{setup['session_id']}@3"
    assert index_sources(settings).summaries_written == 0


def test_an_upgraded_warehouse_knows_each_session_s_summary_versions(setup: dict) -> None:
    """Migration 14 takes the versions used so far from each session's latest summary."""
    settings = setup["settings"]
    index_sources(settings)
    with Warehouse(settings.warehouse) as wh, wh.transaction():  # back to the shape migration 13 left
        wh.conn.execute("ALTER TABLE sessions DROP COLUMN summary_versions_used")
        wh.conn.execute("DELETE FROM schema_version WHERE version >= 14")
    with Warehouse(settings.warehouse) as upgraded:
        assert upgraded.summary_versions_used([setup["session_id"]]) == {setup["session_id"]: 1}
