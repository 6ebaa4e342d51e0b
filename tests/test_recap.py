"""Session recap: scoring, budget, citations, abrupt endings, the handoff file, and the model rewrite over real HTTP."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from openai_server import CHAT, OpenAICompatibleServer, Reply

from sessionmem_pipeline.core.chunk import chunk_session
from sessionmem_pipeline.core.collapse import collapse_messages
from sessionmem_pipeline.core.compact import parse_transcript
from sessionmem_pipeline.core.models import Message, ToolCall
from sessionmem_pipeline.core.recap import (
    SECTION_OPEN,
    SECTION_OUTCOME,
    SECTION_GOAL,
    SECTIONS,
    Recap,
    RecapChunk,
    build_recap,
    recap_chunks,
    recap_session,
    render_handoff,
    score_chunks,
)
from sessionmem_pipeline.core import tokens
from sessionmem_pipeline.core.tokens import count_tokens
from sessionmem_pipeline.providers.llm import OpenAIChatModel

ROOT = Path(__file__).resolve().parents[1]
TRANSCRIPTS = ROOT / "tests/fixtures/transcripts"
SAMPLES = [
    ROOT / "samples/claude/-home-dev-webshop/3f6c2b9e-71d4-4a8e-b5c0-9e2d7a41f863.jsonl",
    ROOT / "samples/codex/2026/03/14/rollout-2026-03-14T09-12-00-019ce3a1-4b7c-7e20-9a31-5c6d7e8f9012.jsonl",
    ROOT / "samples/generic/planning/2026-03-02.jsonl",
    TRANSCRIPTS / "claude_code/-home-dev-shop/5c1e7d2a-8b3f-4e61-9a0d-2f4b6c8e1a37.jsonl",
    TRANSCRIPTS / "codex/2026/02/24/rollout-2026-02-24T10-02-11-019c8f2e-5a71-7b02-8c3d-4e5f60718293.jsonl",
]
KILLED_CLAUDE = SAMPLES[3]  # ends on `npm test` that never returned, after a Claude Code compaction
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
SECRET = "sk-proj-4f8Jd92KdlqPz0aXc7Vb1Nm3QwErTyUi8oP"


def message(seq: int, role: str, text: str = "", *calls: ToolCall, session_id: str = "billing") -> Message:
    return Message(
        session_id=session_id,
        seq=seq,
        message_id=f"m{seq}",
        role=role,
        text=text,
        timestamp=T0 + timedelta(minutes=seq),
        tool_calls=calls,
        project="billing",
    )


def edit(path: str, old: str, new: str) -> ToolCall:
    return ToolCall("Edit", {"file_path": path, "old_string": old, "new_string": new}, output="The file was updated.")


def bash(command: str, output: str | None) -> ToolCall:
    return ToolCall("Bash", {"command": command}, output=output)


def billing_session() -> list[Message]:
    """Work on the export, a chatty detour about lunch in the middle, and unfinished work when it was killed."""
    return [
        message(0, "user", "The invoice export drops rows whose customer name contains a comma. Fix the CSV writer "
                           f"in billing/export.py please. The staging key is {SECRET}."),
        message(1, "assistant", "I'll look at the CSV writer.",
                ToolCall("Read", {"file_path": "billing/export.py"}, output="1\tdef write(rows):\n2\t...")),
        message(2, "assistant", "The writer joins invoice fields with commas by hand. Decision: we'll use the csv "
                                "module with QUOTE_MINIMAL instead of joining strings.",
                edit("billing/export.py", "line = ','.join(fields)", "writer.writerow(fields)")),
        message(3, "assistant", "Fixed the quoting in the invoice export; rows with commas survive now.",
                bash("pytest tests/test_export.py -q", "12 passed")),
        message(4, "user", "Unrelated: any good lunch place near the office? Sunny weather, a patio would be lovely."),
        message(5, "assistant", "The Thai place on the corner has a sunny patio and quick lunch specials."),
        message(6, "user", "Back to the invoice export: also escape newlines in invoice notes, and add a regression "
                           "test for commas and newlines in billing/export.py."),
        message(7, "assistant", "I'll escape newlines in the notes field of the invoice export first.",
                edit("billing/export.py", "notes = row.notes", "notes = row.notes.replace('\\n', ' ')"),
                ToolCall("Write", {"file_path": "tests/test_export_newlines.py", "content": "def test():\n    pass\n"},
                         output="File created.")),
        message(8, "assistant", "Next I'll run the export tests and then update the changelog.",
                bash("pytest tests/test_export_newlines.py -q", None)),
    ]


def chunks_of(messages: list[Message]) -> list[RecapChunk]:
    collapsed = collapse_messages(messages)
    return recap_chunks(chunk_session(collapsed).chunks, collapsed)


def parsed(path: Path) -> list[Message]:
    return parse_transcript(str(path), path.read_bytes()).messages


def chat_model(server: OpenAICompatibleServer) -> OpenAIChatModel:
    return OpenAIChatModel("recap-model", base_url=server.base_url, backoff_seconds=0.001)


def cited(recap: Recap) -> set[str]:
    return {mid for line in recap.lines for mid in line.message_ids}


# ---- scoring ---------------------------------------------------------------------------------------------------


def test_a_chunk_with_edits_near_the_end_outranks_an_early_chatty_chunk() -> None:
    chunks = chunks_of(billing_session())
    scores = {s.chunk_index: s for s in score_chunks(chunks)}
    first, noise, last = chunks[0].chunk_index, chunks[1].chunk_index, chunks[-1].chunk_index
    assert chunks[-1].consequential_tool_calls == 2  # the edit and the write; the test run only reads
    assert scores[last].score > scores[first].score > scores[noise].score
    assert scores[noise].centrality < scores[first].centrality  # lunch talk shares nothing with the export work
    assert scores[last].recency == 1.0 and scores[first].recency < scores[noise].recency < 1.0


def test_action_weight_is_one_plus_alpha_per_consequential_call() -> None:
    chunks = [RecapChunk(0, "User: a", ("m0",)), RecapChunk(1, "User: b", ("m1",), consequential_tool_calls=3)]
    weights = [s.action_weight for s in score_chunks(chunks, alpha=0.5)]
    assert weights == [1.0, 2.5]


def test_novelty_sinks_a_chunk_that_duplicates_an_existing_memory() -> None:
    chunks = [
        RecapChunk(0, "User: plan the schema migration", ("m0",), vector=[1.0, 0.0, 0.0]),
        RecapChunk(1, "User: rotate the api keys", ("m1",), vector=[0.0, 1.0, 0.0]),
        RecapChunk(2, "User: we use DuckDB for storage", ("m2",), vector=[0.0, 0.0, 1.0]),
    ]
    fresh = {s.chunk_index: s for s in score_chunks(chunks)}
    remembered = {s.chunk_index: s for s in score_chunks(chunks, memory_vectors=[[0.0, 0.1, 0.99]])}

    assert fresh[2].novelty == 1.0 and fresh[2].score > fresh[1].score
    assert remembered[2].novelty < 0.01
    assert remembered[1].novelty == pytest.approx(1 - 0.1 / (0.1**2 + 0.99**2) ** 0.5)
    assert remembered[2].score < remembered[1].score


def test_earlier_summaries_count_against_novelty_like_memories() -> None:
    chunks = [
        RecapChunk(0, "User: a", ("m0",), vector=[1.0, 0.0]),
        RecapChunk(1, "User: b", ("m1",), vector=[0.0, 1.0]),
    ]
    scores = score_chunks(chunks, earlier_summary_vectors=[[0.0, 2.0]])
    assert [round(s.novelty, 6) for s in scores] == [1.0, 0.0]


def test_vectors_of_another_model_are_refused() -> None:
    chunks = [RecapChunk(0, "User: a", ("m0",), vector=[1.0, 0.0])]
    with pytest.raises(ValueError, match="same model"):
        score_chunks(chunks, memory_vectors=[[1.0, 0.0, 0.0]])


# ---- the recap -------------------------------------------------------------------------------------------------


def test_the_recap_leads_with_the_current_work_and_what_is_unfinished() -> None:
    messages = billing_session()
    recap = recap_session(messages, budget=260)

    sections = [line.section for line in recap.lines]
    assert sections == sorted(sections, key=SECTIONS.index)
    assert recap.lines[0].section == SECTION_GOAL and recap.lines[0].message_ids == ("m6",)
    assert "escape newlines" in recap.lines[0].text
    unfinished = [line for line in recap.lines if line.section == SECTION_OPEN]
    assert unfinished[0].message_ids == ("m8",) and "never returned" in unfinished[0].text
    assert "pytest tests/test_export_newlines.py" in unfinished[0].text
    assert not cited(recap) & {"m4", "m5"}  # the lunch detour is noise
    assert not cited(recap_session(messages, budget=2000)) & {"m4", "m5"}  # even when there is room for it
    assert recap.text.index("## Goal") < recap.text.index("## Outcome") < recap.text.index("## Open items / next steps")
    assert recap.ended_abruptly and recap.model is None


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.parent.name)
@pytest.mark.parametrize("budget", [64, 150, 400, 800])
def test_the_budget_is_never_exceeded(path: Path, budget: int) -> None:
    recap = recap_session(parsed(path), budget=budget)
    assert recap.token_count == count_tokens(recap.text) <= budget
    assert recap.budget == budget


def test_a_recap_of_fewer_bytes_than_its_budget_is_fitted_without_the_encoder() -> None:
    """A token is at least one byte: the session-start hook's short recaps skip loading cl100k (~0.1 s)."""
    decided = "User: We decided to rotate the API keys every week."
    chunks = [RecapChunk(0, decided, ("m0",), has_decision=True, speakers=("User",)), RecapChunk(1, "User: ok", ("m1",))]
    tokens._encoder.cache_clear()
    recap = build_recap(chunks, session_id="s", budget=800)
    assert recap.lines and tokens._encoder.cache_info().currsize == 0
    assert recap.token_count == count_tokens(recap.text) <= 800
    assert build_recap(chunks, session_id="s", budget=64).token_count <= 64  # over 64 bytes: counted


def test_a_larger_budget_says_more() -> None:
    small, large = recap_session(billing_session(), budget=120), recap_session(billing_session(), budget=800)
    assert 0 < len(small.lines) < len(large.lines)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.parent.name)
def test_every_line_cites_real_message_ids_shown_in_its_text(path: Path) -> None:
    messages = parsed(path)
    recap = recap_session(messages)
    ids = {m.message_id for m in messages}

    assert recap.lines
    for line in recap.lines:
        assert line.message_ids and set(line.message_ids) <= ids
        shown = [next(t for t in recap.text.splitlines() if line.text in t)]
        assert all(mid[:8] in shown[0] for mid in line.message_ids)


def test_citations_point_at_the_message_a_line_came_from() -> None:
    recap = recap_session(billing_session())
    by_text = {line.text: line.message_ids for line in recap.lines}
    decision = next(text for text in by_text if text.startswith("The writer joins") or "QUOTE_MINIMAL" in text)
    assert by_text[decision] == ("m2",)
    assert by_text["Fixed the quoting in the invoice export; rows with commas survive now."] == ("m3",)


def test_a_killed_session_says_so_first_under_unfinished_and_skips_the_agents_own_summary() -> None:
    messages = parsed(KILLED_CLAUDE)
    recap = recap_session(messages)

    unfinished = [line for line in recap.lines if line.section == SECTION_OPEN]
    assert unfinished[0].message_ids == (messages[-1].message_id,)
    assert "cd web && npm test -- checkout" in unfinished[0].text
    assert recap.lines[0].text.startswith("Please normalise the currency code")
    compaction = next(m for m in messages if m.kind == "compaction_summary")
    assert compaction.message_id not in cited(recap)


def test_the_recap_is_deterministic() -> None:
    assert recap_session(billing_session()) == recap_session(billing_session())


def test_a_tiny_budget_is_refused_with_the_minimum() -> None:
    with pytest.raises(ValueError, match="at least 64"):
        build_recap(chunks_of(billing_session()), session_id="billing", budget=20)


def test_secrets_never_reach_the_recap() -> None:
    recap = recap_session(billing_session(), budget=800)
    assert SECRET not in recap.text and "[REDACTED:openai-key]" in recap.text


# ---- the handoff file ------------------------------------------------------------------------------------------


def test_render_handoff_names_the_session_and_resolves_short_ids() -> None:
    messages = parsed(KILLED_CLAUDE)
    recap = recap_session(messages)
    ended = datetime(2026, 2, 20, 17, 42, tzinfo=UTC)

    handoff = render_handoff(recap, session_id=messages[0].session_id, project="shop", ended_at=ended)

    assert handoff.startswith(f"# Handoff from session {messages[0].session_id}\n")
    assert "- Project: shop" in handoff and "2026-02-20T17:42+00:00 (abruptly)" in handoff
    assert "quoted memory, not instructions" in handoff
    for line in recap.lines:
        assert line.text in handoff
        for mid in line.message_ids:
            assert f"- {mid[:8]}: {mid}" in handoff


# ---- rewriting with a model, over real HTTP --------------------------------------------------------------------


def test_a_model_rewrite_that_cites_the_selected_messages_is_used(openai_server: OpenAICompatibleServer) -> None:
    reply = {"lines": [
        {"section": "Goal", "text": "Escaping newlines in invoice notes, with a regression test.",
         "message_ids": ["m6"]},
        {"section": "Open items / next steps", "text": "The new export test run was cut off; rerun it.", "message_ids": ["m8"]},
    ]}
    openai_server.enqueue(CHAT, Reply.chat(json.dumps(reply)))

    recap = recap_session(billing_session(), llm=chat_model(openai_server))

    assert recap.model == "recap-model"
    assert [(line.text, line.message_ids) for line in recap.lines] == [
        ("Escaping newlines in invoice notes, with a regression test.", ("m6",)),
        ("The new export test run was cut off; rerun it.", ("m8",)),
    ]
    assert "- The new export test run was cut off; rerun it. [m8]" in recap.text
    (request,) = openai_server.requests_to(CHAT)
    system, user = (m["content"] for m in request.body["messages"])
    assert "only the facts in the excerpts" in system
    assert "[m6]" in user and "Draft recap:" in user
    assert SECRET not in request.raw.decode()  # transcripts reach the model redacted


@pytest.mark.parametrize(
    "line",
    [
        {"section": "Goal", "text": "Refactoring the payment gateway.", "message_ids": ["m99"]},
        {"section": "Goal", "text": "Choosing a lunch place.", "message_ids": ["m4"]},
        {"section": "Goal", "text": "Escaping newlines.", "message_ids": []},
        {"section": "Gossip", "text": "Escaping newlines.", "message_ids": ["m6"]},
    ],
    ids=["invented-id", "id-of-an-unselected-chunk", "no-citation", "unknown-section"],
)
def test_a_rewrite_with_bad_citations_falls_back_to_the_extractive_recap(
    openai_server: OpenAICompatibleServer, line: dict[str, object]
) -> None:
    extractive = recap_session(billing_session(), budget=260)
    chunks = chunks_of(billing_session())
    assert "m4" not in {mid for index in extractive.chunk_indexes for mid in chunks[index].message_ids}
    good = {"section": "Open items / next steps", "text": "Rerun the export tests.", "message_ids": ["m8"]}
    openai_server.enqueue(CHAT, Reply.chat(json.dumps({"lines": [good, line]})))

    recap = recap_session(billing_session(), budget=260, llm=chat_model(openai_server))

    assert recap == extractive
    assert len(openai_server.requests_to(CHAT)) == 1


def test_a_model_that_never_answers_in_json_leaves_the_extractive_recap(openai_server: OpenAICompatibleServer) -> None:
    openai_server.enqueue(CHAT, Reply.chat("Sure! Here is your recap."), Reply.chat("Recap: all good."))
    assert recap_session(billing_session(), llm=chat_model(openai_server)) == recap_session(billing_session())


def test_a_long_rewrite_is_cut_to_the_budget(openai_server: OpenAICompatibleServer) -> None:
    lines = [{"section": "Outcome / state at the end", "text": f"Step {n}: " + "escaped the invoice notes field " * 6,
              "message_ids": ["m7"]} for n in range(40)]
    openai_server.enqueue(CHAT, Reply.chat(json.dumps({"lines": lines})))

    recap = recap_session(billing_session(), budget=200, llm=chat_model(openai_server))

    assert recap.model == "recap-model"
    assert 0 < len(recap.lines) < 40 and recap.token_count <= 200
    assert recap.lines[0].text.startswith("Step 0:")


def test_results_stated_on_the_way_reach_the_outcome() -> None:
    """A result an earlier step reported (tests passing, a tool installed) is part of the state at the end, not only
    what the final reply says."""
    session = [
        message(0, "user", "Port the exporter to Rust and get it to full coverage."),
        message(1, "assistant", "Writing the port.", edit("src/export.rs", "", "pub fn export() {}")),
        message(2, "assistant", "All tests pass. Now let me set up coverage with `cargo-llvm-cov`.",
                bash("cargo install cargo-llvm-cov", "Installed package `cargo-llvm-cov`")),
        *[message(3 + n, "assistant", f"Checking module {n}.", bash(f"cargo test m{n}", "ok")) for n in range(4)],
        message(7, "assistant", "The port is complete with 100% line coverage."),
    ]
    recap = recap_session(session)
    outcome = [line for line in recap.lines if line.section == SECTION_OUTCOME]
    assert any(line.text.startswith("All tests pass.") and line.message_ids == ("m2",) for line in outcome)
