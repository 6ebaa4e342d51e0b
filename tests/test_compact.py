"""Live-context compaction (spec 002): target ratio, verbatim tail, tool pairs, system prompts, the agent's own
compactions, secrets, the model path over real HTTP, and what the CLI prints."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from openai_server import CHAT, OpenAICompatibleServer, Reply

from sessionmem_pipeline.core.compact import (
    SOURCE_AGENT,
    SummarizationConfig,
    agent_summaries,
    compact,
    find_agent_compactions,
    format_summaries,
    message_tokens,
    parse_transcript,
    render_context,
    render_history,
    render_stats_box,
    should_compact,
)
from sessionmem_pipeline.core.models import KIND_COMPACTION, KIND_EVENT, KIND_INJECTED, Message, ToolCall
from sessionmem_pipeline.providers.llm import OpenAIChatModel

ROOT = Path(__file__).resolve().parents[1]
WEBSHOP = ROOT / "samples/claude/-home-dev-webshop/3f6c2b9e-71d4-4a8e-b5c0-9e2d7a41f863.jsonl"
SHOP = ROOT / "tests/fixtures/transcripts/claude_code/-home-dev-shop"
COMPACTED_CLAUDE = SHOP / "5c1e7d2a-8b3f-4e61-9a0d-2f4b6c8e1a37.jsonl"  # compacted by Claude Code, then killed
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
SECRET = "sk-proj-4f8Jd92KdlqPz0aXc7Vb1Nm3QwErTyUi8oP"


def message(seq: int, role: str, text: str = "", *calls: ToolCall, kind: str = "message") -> Message:
    return Message(
        session_id="long",
        seq=seq,
        message_id=f"m{seq}",
        role=role,
        text=text,
        timestamp=T0 + timedelta(minutes=seq),
        kind=kind,
        tool_calls=calls,
        project="inventory",
    )


def long_session(steps: int = 25) -> list[Message]:
    """A system prompt, then `steps` exchanges of request, edit with test output, and answer: 76 messages."""
    messages = [message(0, "system", "You are a coding agent. Run the tests before you finish.")]
    for step in range(steps):
        seq = len(messages)
        output = "\n".join(f"tests/test_stock_{step}.py::test_case_{n} PASSED" for n in range(40))
        messages += [
            message(seq, "user", f"Step {step}: make stock module {step} reject negative quantities."),
            message(
                seq + 1,
                "assistant",
                f"I'll add a guard to inventory/stock_{step}.py.",
                ToolCall("Edit", {"file_path": f"inventory/stock_{step}.py", "old_string": "qty = q",
                                  "new_string": "if q < 0: raise ValueError(q)\nqty = q"}, output="Updated."),
                ToolCall("Bash", {"command": f"pytest tests/test_stock_{step}.py -q"}, output=output),
            ),
            message(seq + 2, "assistant", f"Done: stock module {step} now rejects negative quantities."),
        ]
    return messages


def parsed(path: Path) -> list[Message]:
    return parse_transcript(str(path), path.read_bytes()).messages


def chat_model(server: OpenAICompatibleServer) -> OpenAIChatModel:
    return OpenAIChatModel("compact-model", base_url=server.base_url, backoff_seconds=0.001)


# ---- the main path -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [0.1, 0.3, 0.5])
def test_compaction_meets_the_target_and_keeps_the_last_messages_verbatim(target: float) -> None:
    messages = long_session()
    config = SummarizationConfig(target_compression=target, preserve_recent=10)

    result = compact(messages, config, now=NOW)

    assert result.compacted
    stats = result.stats
    assert stats.summary_ratio is not None and stats.summary_ratio <= target and stats.met_target
    assert len(result.recent_messages) == 10
    assert all(kept is original for kept, original in zip(result.recent_messages, messages[-10:]))
    assert stats.tokens_after < stats.tokens_before
    assert stats.summarized_tokens == sum(message_tokens(m) for m in messages[1:-10])
    (summary,) = result.summaries
    assert summary.covering_messages == (1, len(messages) - 11)
    assert (summary.first_message_id, summary.last_message_id) == ("m1", messages[-11].message_id)
    assert summary.generated_at == NOW and summary.model is None


def test_the_context_is_system_prompt_then_summaries_then_recent_messages() -> None:
    messages = long_session()
    result = compact(messages, SummarizationConfig(preserve_recent=6))

    context = result.context()

    assert context[0] is messages[0]
    assert context[1].role == "system" and context[1].kind == KIND_COMPACTION
    assert context[1].text.startswith("Previous conversation context:")
    assert result.summaries[0].content in context[1].text
    assert "Files modified: inventory/stock_0.py" in context[1].text
    assert context[2:] == list(messages[-6:])
    assert result.stats.messages_before == len(messages) and result.stats.messages_after == len(context) == 8


def test_the_extractive_summary_says_what_was_asked_done_and_where_it_stopped() -> None:
    result = compact(long_session(), SummarizationConfig(preserve_recent=6, target_compression=0.3))
    content = result.summaries[0].content

    assert content.startswith("- Goal: Step 0: make stock module 0 reject negative quantities.")
    assert "Files modified" not in content  # the context lists them after the content, once
    assert format_summaries(result.summaries).count("Files modified: inventory/stock_0.py") == 1
    assert "State at the end: Done: stock module 22 now rejects negative quantities." in content


def test_compaction_is_deterministic() -> None:
    first, second = compact(long_session(), SummarizationConfig()), compact(long_session(), SummarizationConfig())
    assert first.as_json() == second.as_json()
    assert [m.text for m in first.context()] == [m.text for m in second.context()]
    assert first.summaries[0].generated_at is None  # no clock read unless asked


@pytest.mark.parametrize("preserve_recent", range(1, 9))
def test_a_tool_result_is_never_separated_from_its_call(preserve_recent: int) -> None:
    """Agents that keep tool results as their own messages (role "tool") get them kept with the call."""
    messages = [message(0, "user", "Count the open orders, then archive the old ones.")]
    for n in range(1, 9, 2):
        messages += [
            message(n, "assistant", f"Querying batch {n}.", ToolCall("sql", {"q": "select 1"}, call_id=f"c{n}")),
            message(n + 1, "tool", f"{n * 100} rows"),
        ]

    result = compact(messages, SummarizationConfig(trigger_threshold=0, preserve_recent=preserve_recent))

    recent = {m.message_id for m in result.recent_messages}
    assert result.recent_messages[0].role != "tool"
    # A summary that would not be shorter than the few messages before the tail leaves them all in place.
    assert len(recent) in (preserve_recent, preserve_recent + 1) or (not result.compacted and len(recent) == 9)
    for i, m in enumerate(messages):
        if m.role == "tool":
            assert (m.message_id in recent) == (messages[i - 1].message_id in recent)


# ---- when not to compact -------------------------------------------------------------------------------------


def test_below_the_trigger_threshold_nothing_changes() -> None:
    messages = long_session(steps=5)  # 16 messages, threshold 50
    result = compact(messages, SummarizationConfig())

    assert not should_compact(messages, SummarizationConfig())
    assert not result.compacted and "threshold of 50" in result.reason
    assert result.context() == messages
    assert result.stats.tokens_saved == 0 and result.stats.summary_ratio is None


def test_disabled_compaction_changes_nothing() -> None:
    result = compact(long_session(), SummarizationConfig(enabled=False))
    assert not result.compacted and result.reason == "compaction is disabled"
    assert result.context() == long_session()


def test_preserving_more_than_there_is_changes_nothing() -> None:
    result = compact(long_session(steps=3), SummarizationConfig(trigger_threshold=0, preserve_recent=100))
    assert not result.compacted and "nothing older" in result.reason


@pytest.mark.parametrize("bad", [{"target_compression": 0}, {"target_compression": 1.5}, {"preserve_recent": -1}])
def test_a_config_out_of_range_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SummarizationConfig(**bad)


# ---- system prompts, events, secrets ---------------------------------------------------------------------------


def test_system_prompts_and_injected_context_are_kept_unless_asked_otherwise() -> None:
    injected = message(1, "user", "<environment_context>cwd=/srv/inventory</environment_context>", kind=KIND_INJECTED)
    messages = [long_session()[0], injected, *long_session()[1:]]

    kept = compact(messages, SummarizationConfig(preserve_recent=4))
    dropped = compact(messages, SummarizationConfig(preserve_recent=4, preserve_system=False))

    assert kept.system_messages == (messages[0], injected)
    assert kept.context()[:2] == [messages[0], injected]
    assert dropped.system_messages == () and messages[0] not in dropped.context()


def test_system_events_are_neither_context_nor_counted() -> None:
    event = message(99, "system", "API error 529: Overloaded", kind=KIND_EVENT)
    messages = [*long_session()[:-1], event, long_session()[-1]]

    result = compact(messages, SummarizationConfig(preserve_recent=3))

    assert event not in result.context()
    assert result.full_message_count == len(messages) - 1


def test_secrets_never_reach_a_summary_or_the_kept_messages(tmp_path: Path) -> None:
    """compact() trusts its input to be sanitized: parse_transcript, the CLI's way in, sanitizes as ingest does."""
    lines = [json.loads(line) for line in WEBSHOP.read_text(encoding="utf-8").splitlines()]
    request = next(line for line in lines if line["type"] == "user" and isinstance(line["message"]["content"], str))
    request["message"]["content"] = f"Use the staging key {SECRET} and make the checkout strict."
    transcript = tmp_path / WEBSHOP.name
    transcript.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")

    session = parse_transcript(str(transcript), transcript.read_bytes())
    result = compact(session.messages, SummarizationConfig(preserve_recent=2, trigger_threshold=1))

    assert result.summaries and SECRET not in json.dumps(result.as_json())
    assert all(SECRET not in m.text for m in result.context())
    assert "[REDACTED:openai-key]" in result.summaries[0].content


# ---- the agent's own compactions -----------------------------------------------------------------------------


def test_find_agent_compactions_names_the_messages_each_one_replaced() -> None:
    messages = parsed(COMPACTED_CLAUDE)

    (compaction,) = find_agent_compactions(messages)

    assert messages[compaction.position].kind == KIND_COMPACTION
    before = messages[: compaction.position]
    expected = [m.message_id for m in before if m.kind == "message" and m.role != "system"]
    assert list(compaction.covered_message_ids) == expected and len(expected) == 10
    (summary,) = agent_summaries(messages)
    assert summary.source == SOURCE_AGENT and summary.message_count == 10
    assert summary.content.startswith("This session is being continued from a previous conversation")
    assert summary.files_modified == ("src/shop/cart.py", "tests/test_cart.py")
    assert summary.covering_messages == (0, 11)


def test_a_compaction_summary_that_opens_a_transcript_covers_nothing_here() -> None:
    opening = message(0, "system", "Summary of the earlier conversation: stock guards added.", kind=KIND_COMPACTION)
    (compaction,) = find_agent_compactions([opening, *long_session(steps=1)[1:]])
    assert compaction.covered_message_ids == () and agent_summaries([opening])[0].covering_messages is None


def test_what_the_agent_already_compacted_is_not_summarized_again() -> None:
    session = long_session(steps=30)
    agent_summary = message(500, "system", "Earlier: stock modules 0-9 reject negatives.", kind=KIND_COMPACTION)
    messages = [*session[:31], agent_summary, *session[31:]]

    result = compact(messages, SummarizationConfig(trigger_threshold=20, preserve_recent=5))

    agent, ours = result.summaries
    assert agent.source == SOURCE_AGENT and agent.covering_messages == (1, 30)
    assert ours.covering_messages[0] == 32  # right after the agent's summary
    context_text = result.context()[1].text
    assert context_text.count("Earlier: stock modules 0-9 reject negatives.") == 1
    assert result.stats.messages_before == 1 + 1 + (len(messages) - 32)  # system, agent summary, live messages
    assert "Step 3:" not in ours.content


def test_only_the_latest_agent_summary_enters_the_context() -> None:
    session = long_session(steps=4)
    first = message(100, "system", "First compaction summary.", kind=KIND_COMPACTION)
    second = message(101, "system", "Second compaction summary, including the first.", kind=KIND_COMPACTION)
    messages = [*session[:4], first, *session[4:8], second, *session[8:]]

    result = compact(messages, SummarizationConfig())

    assert [s.content for s in result.summaries] == [first.text, second.text]
    assert "Second compaction" in result.context()[1].text and "First compaction" not in result.context()[1].text


# ---- with a model, over real HTTP --------------------------------------------------------------------------------


def test_a_model_summary_is_used_when_it_fits(openai_server: OpenAICompatibleServer) -> None:
    reply = {"summary": "- Added negative-quantity guards to stock modules 0-22.\n- All stock tests pass.",
             "key_decisions": ["Raise ValueError on negative quantities."]}
    openai_server.enqueue(CHAT, Reply.chat(json.dumps(reply)))
    messages = long_session()

    result = compact(messages, SummarizationConfig(preserve_recent=6), llm=chat_model(openai_server))

    (summary,) = result.summaries
    assert summary.model == "compact-model" and summary.content == reply["summary"]
    assert summary.key_decisions == ("Raise ValueError on negative quantities.",)
    assert result.stats.decisions == 1
    (request,) = openai_server.requests_to(CHAT)
    system, user = (m["content"] for m in request.body["messages"])
    assert "What the user was trying to accomplish" in system
    assert "Step 0:" in user


@pytest.mark.parametrize(
    "replies",
    [
        [Reply.chat(json.dumps({"summary": "x " * 5000, "key_decisions": []}))],
        [Reply.chat(json.dumps({"key_decisions": []})), Reply.chat(json.dumps({"key_decisions": []}))],
        [Reply.chat("no json here"), Reply.chat("still none")],
    ],
    ids=["over-budget", "no-summary", "not-json"],
)
def test_an_unusable_model_reply_falls_back_to_the_extractive_summary(
    openai_server: OpenAICompatibleServer, replies: list[Reply]
) -> None:
    openai_server.enqueue(CHAT, *replies)

    result = compact(long_session(), SummarizationConfig(preserve_recent=6), llm=chat_model(openai_server))

    assert result.compacted and result.summaries[0].model is None
    assert result.summaries == compact(long_session(), SummarizationConfig(preserve_recent=6)).summaries


# ---- files, the stats box and the history view ---------------------------------------------------------------


def test_parse_transcript_picks_the_session_and_names_missing_ones() -> None:
    session = parse_transcript(str(WEBSHOP), WEBSHOP.read_bytes())
    assert session.session_id == "3f6c2b9e-71d4-4a8e-b5c0-9e2d7a41f863" and len(session.messages) == 16
    with pytest.raises(ValueError, match="no session 'nope'"):
        parse_transcript(str(WEBSHOP), WEBSHOP.read_bytes(), session_id="nope")


def test_a_transcript_file_is_sanitized_as_it_is_read(tmp_path: Path) -> None:
    """Compaction reads a live file, not the warehouse: it redacts as ingest does, so neither its output nor a
    configured model ever sees a secret."""
    lines = [
        {"role": "user", "content": f"Use the staging key {SECRET} <private>and my home address</private>.",
         "timestamp": "2026-03-02T10:00:00Z"},
        {"role": "assistant", "content": "Done.", "timestamp": "2026-03-02T10:01:00Z"},
    ]
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))

    first = parse_transcript(str(path), path.read_bytes()).messages[0]

    assert SECRET not in first.text and "[REDACTED:openai-key]" in first.text and "home address" not in first.text


def test_the_stats_box_of_a_shipped_sample() -> None:
    result = compact(parsed(WEBSHOP), SummarizationConfig(trigger_threshold=0, preserve_recent=4))

    box = render_stats_box(result)

    lines = box.splitlines()
    assert lines[0].startswith("┌─ Session Summary ") and lines[-1].startswith("└")
    assert len({len(line) for line in lines}) == 1  # a closed box
    assert "│ Messages: 16 → 5 (69% reduction)" in box
    assert f"Tokens saved: ~{result.stats.tokens_saved:,}" in box
    ratio = result.stats.summary_tokens / result.stats.summarized_tokens
    assert f"Summary: {result.stats.summary_tokens:,} tokens in place of {result.stats.summarized_tokens:,}" in box
    assert f"({ratio:.0%} of them)" in box
    assert "Target: summary at most 30% of what it replaces: met" in box
    assert "Files Modified: 2" in box and "Commands Run: 4" in box and "Key Decisions: 1" in box
    assert "• Gift card" in box


def test_the_stats_box_says_the_achieved_share_and_whether_the_ceiling_was_kept() -> None:
    small = compact(long_session(), SummarizationConfig(preserve_recent=6, target_compression=0.05))
    box = render_stats_box(small)
    ratio = small.stats.summary_tokens / small.stats.summarized_tokens
    assert f"({ratio:.1%} of them)" in box  # a share under 10% keeps its decimal instead of rounding to 0% or 1%
    assert "Target: summary at most 5.0% of what it replaces: met" in box
    assert ratio <= 0.05


def test_the_printed_context_has_no_empty_messages() -> None:
    messages = long_session()
    seq = len(messages)
    messages += [
        message(seq, "assistant", "", ToolCall("Bash", {"command": "git status"}, output="clean")),  # tool call only
        message(seq + 1, "assistant", ""),  # an empty turn
        message(seq + 2, "assistant", "All 25 modules reject negative quantities."),
    ]
    result = compact(messages, SummarizationConfig(preserve_recent=6))

    printed = render_context(result)

    assert not any(line.strip() in ("[assistant]", "[user]") for line in printed.splitlines())
    assert "[assistant] Ran `git status`" in printed  # a tool-only turn shows as its narration
    assert printed.count("Files modified:") == 1
    assert printed.startswith("[system] ")


def test_the_history_view_lists_summaries_then_recent_messages() -> None:
    messages = parsed(COMPACTED_CLAUDE)
    result = compact(messages, SummarizationConfig(trigger_threshold=0, preserve_recent=1))

    history = render_history(result)

    assert history.startswith("Session history (14 messages total):")
    assert "[Summary 1] Messages 1-12 (by the agent):" in history
    assert "[Summary 2] Messages 16-16:" in history
    assert "[Recent] Messages 17-17:" in history
    assert "Message 17 (Assistant): Ran `cd web && npm test -- checkout` (no result: interrupted)." in history


def test_as_json_is_plain_json() -> None:
    data = json.loads(json.dumps(compact(long_session(), SummarizationConfig(), now=NOW).as_json()))
    assert data["compacted"] and data["stats"]["met_target"]
    edits = data["summaries"][0]["tools_used"][0]
    assert (edits["tool"], edits["count"]) == ("Edit", 22)  # steps 0-21: step 21's answer is the 11th from the end
    assert data["recent_message_ids"][-1] == "m75"
