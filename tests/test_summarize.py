"""Session summaries (issue 7): structure, incremental and full, map-reduce, the LLM path and its fallback, triggers."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from openai_server import CHAT, OpenAICompatibleServer, Reply

from sessionmem_pipeline.core.collapse import collapse_messages
from sessionmem_pipeline.core.formats import parse_file
from sessionmem_pipeline.core.llm_protocol import LLMError
from sessionmem_pipeline.core.models import KIND_EVENT, KIND_INJECTED, CollapsedMessage, ToolRecord
from sessionmem_pipeline.core.summarize import (
    EXTRACTIVE_MODEL,
    SessionSummary,
    messages_after,
    summarize_session,
    summarize_with_fallback,
    summary_input_hash,
    summary_is_due,
)
from sessionmem_pipeline.providers.llm import OpenAIChatModel

TRANSCRIPTS = Path(__file__).parent / "fixtures" / "transcripts"
SHOP = "claude_code/-home-dev-shop/5c1e7d2a-8b3f-4e61-9a0d-2f4b6c8e1a37.jsonl"
TEAM_SYNC = "generic/team-sync/2026-01-15.jsonl"
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def fixture_sessions(relative: str) -> list[list[CollapsedMessage]]:
    """The sessions of a fixture transcript, parsed and collapsed as the pipeline does."""
    path = TRANSCRIPTS / relative
    result = parse_file(str(path), str(TRANSCRIPTS / relative.split("/")[0]), path.read_bytes(), final=True)
    return [collapse_messages(session.messages) for session in result.sessions]


@pytest.fixture(scope="module")
def shop() -> list[CollapsedMessage]:
    (messages,) = fixture_sessions(SHOP)
    return messages


def message(
    seq: int,
    role: str,
    text: str,
    *,
    speaker: str | None = None,
    tools: tuple[ToolRecord, ...] = (),
    kind: str = "message",
) -> CollapsedMessage:
    return CollapsedMessage(
        session_id="s1",
        seq=seq,
        message_id=f"m{seq}",
        role=role,
        speaker=speaker or role.title(),
        timestamp=START + timedelta(minutes=seq),
        text="\n".join([text, *(tool.line for tool in tools if tool.line)]).strip(),
        kind=kind,
        tools=tools,
    )


def edit(path: str) -> ToolRecord:
    return ToolRecord("Edit", "consequential", f"Edited {path}: replaced a line.", files=(path,))


def bash(command: str, *, failed: bool = False) -> ToolRecord:
    outcome = "exit 1): AssertionError: boom" if failed else "exit 0)."
    return ToolRecord("Bash", "shell", f"Ran `{command}` ({outcome}", is_error=failed, command=command)


def chat_model(server: OpenAICompatibleServer) -> OpenAIChatModel:
    return OpenAIChatModel("llama-test", base_url=server.base_url, backoff_seconds=0.001)


def llm_json(**overrides: Any) -> str:
    content: dict[str, Any] = {
        "overview": "User asked Assistant to fix a rounding error; it was fixed with Decimal.",
        "topics": ["Cart Rounding", "decimal"],
        "decisions": ["Totals use Decimal rounded half-up."],
        "key_points": ["The bug came from math.floor on float cents."],
        "open_items": ["Normalise currency codes."],
    }
    content.update(overrides)
    return json.dumps({k: v for k, v in content.items() if v is not None})


def llm_reply(**overrides: Any) -> Reply:
    return Reply.chat(llm_json(**overrides))


# ---- the extractive summary of a real coding session ------------------------------------------------------------


def test_a_coding_session_gives_files_tools_decisions_and_open_items(shop: list[CollapsedMessage]) -> None:
    summary = summarize_session(shop)

    assert summary.files_modified == ("src/shop/cart.py", "tests/test_cart.py")
    tools = {tool.name: tool for tool in summary.tools_used}
    assert tools["Edit"].count == 2 and tools["Bash"].count == 3
    assert any("pytest" in use for use in tools["Bash"].notable_uses)
    assert any("half-up" in decision for decision in summary.decisions)
    open_items = " ".join(summary.open_items)
    assert "normalise the currency code" in open_items  # the last request, never answered
    assert "npm test" in open_items and "interrupted" in open_items  # the last tool call did not finish
    assert summary.overview.startswith("On 12 February 2026, User and Assistant worked on")
    assert 'User asked: "The cart total is off by a cent' in summary.overview
    assert "edited src/shop/cart.py and tests/test_cart.py" in summary.overview
    assert "Assistant last reported: \"Fixed." in summary.overview
    assert summary.topics and summary.key_points
    assert not set(summary.key_points) & set(summary.decisions)  # each section says something new
    assert (summary.first_message_id, summary.last_message_id) == (shop[0].message_id, shop[-1].message_id)
    assert summary.message_count == summary.messages_processed == len(shop)
    assert (summary.model, summary.is_incremental, summary.parts) == (EXTRACTIVE_MODEL, False, 1)


def test_a_conversation_between_people_gives_decisions_and_commitments() -> None:
    first, second = fixture_sessions(TEAM_SYNC)

    summary = summarize_session(first)

    assert summary.overview.startswith("On 15 January 2026, Priya and Alfred talked about")
    # what people said is told about them: greetings and fillers left out, "I" named
    assert summary.overview.endswith("Priya: Before standup: the nightly export job failed again at 02:10.")
    assert summary.decisions == ("Alfred: Decision: the nightly export moves to 03:00 UTC.",)
    assert summary.open_items == (
        "Alfred: Action item: Alfred will update the cron entry in `deploy/cron/export.yaml` today.",
        "Priya will tell the analytics team.",
    )
    assert summary.files_modified == () and summary.tools_used == ()
    assert summarize_session(second).open_items == ("Priya: Let's check the run log tomorrow morning.",)


def test_open_items_come_from_the_end_of_the_session() -> None:
    messages = [
        message(0, "user", "Please add retries with backoff to the upload client in uploader.py."),
        message(1, "assistant", "I'll add retries now.", tools=(edit("uploader.py"),)),
        message(2, "assistant", "Retries are in. Should I also cap the total wait time at thirty seconds?"),
    ]

    summary = summarize_session(messages)

    question = "Should I also cap the total wait time at thirty seconds?"
    assert summary.open_items == (f'Assistant asked: "{question}" (unanswered)',)
    assert summary.files_modified == ("uploader.py",)


def test_work_announced_and_then_done_is_not_open() -> None:
    messages = [
        message(0, "user", "The deploy script fails on a clean checkout, can you fix it?"),
        message(1, "assistant", "I'll create the missing build directory first.", tools=(edit("deploy.sh"),)),
        message(2, "assistant", "Done: the deploy script creates the build directory.", tools=(bash("make deploy"),)),
    ]

    assert summarize_session(messages).open_items == ()


def test_a_session_of_only_injected_context_and_events_says_so() -> None:
    messages = [
        message(0, "user", "<environment_context>cwd</environment_context>", kind=KIND_INJECTED),
        message(1, "system", "Conversation compacted", kind=KIND_EVENT),
    ]

    summary = summarize_session(messages)

    assert summary.overview.startswith("No conversation")
    assert (summary.message_count, summary.key_points, summary.decisions) == (2, (), ())


def test_the_summary_is_deterministic_and_follows_seq_order(shop: list[CollapsedMessage]) -> None:
    first = summarize_session(shop)

    assert summarize_session(list(reversed(shop))) == first
    assert summarize_session(shop).to_dict() == first.to_dict()


# ---- incremental and full ---------------------------------------------------------------------------------------


def test_an_incremental_summary_reads_only_the_new_messages(shop: list[CollapsedMessage]) -> None:
    earlier = summarize_session(shop[:10])
    later = summarize_session(shop, previous=earlier)

    assert later.is_incremental
    assert (later.first_message_id, later.last_message_id) == (shop[0].message_id, shop[-1].message_id)
    assert (later.message_count, later.messages_processed) == (len(shop), len(shop) - 10)
    assert set(earlier.decisions) <= set(later.decisions)
    assert later.files_modified == earlier.files_modified
    assert "normalise the currency code" in " ".join(later.open_items)
    assert later.overview.startswith(earlier.overview.split(".")[0])
    assert "the session continued" in later.overview
    # Rewriting the messages the earlier summary covered changes nothing: they are not read again.
    rewritten = [replace(m, text="Something else entirely about llamas and pasta.") for m in shop[:10]] + shop[10:]
    assert summarize_session(rewritten, previous=earlier) == later


def test_a_full_summary_differs_from_the_incremental_one_in_kind_not_range(shop: list[CollapsedMessage]) -> None:
    incremental = summarize_session(shop, previous=summarize_session(shop[:10]))
    full = summarize_session(shop)

    assert not full.is_incremental and full.messages_processed == len(shop)
    assert (full.first_message_id, full.last_message_id, full.message_count) == (
        incremental.first_message_id,
        incremental.last_message_id,
        incremental.message_count,
    )
    assert full.input_hash != incremental.input_hash


def test_no_new_messages_returns_the_previous_summary_unchanged(shop: list[CollapsedMessage]) -> None:
    summary = summarize_session(shop)

    assert summarize_session(shop, previous=summary) is summary
    assert messages_after(shop, summary) == []


def test_a_previous_summary_whose_last_message_is_missing_is_refused(shop: list[CollapsedMessage]) -> None:
    summary = summarize_session(shop)

    with pytest.raises(ValueError, match="not among the 3 messages given.*--full"):
        summarize_session(shop[:3], previous=summary)


def test_the_input_hash_names_messages_previous_summary_and_model(shop: list[CollapsedMessage]) -> None:
    earlier = summarize_session(shop[:10])
    base = summary_input_hash(shop, None, EXTRACTIVE_MODEL)

    assert summarize_session(shop).input_hash == base
    assert summary_input_hash(list(reversed(shop)), None, EXTRACTIVE_MODEL) == base
    assert summary_input_hash(shop[:-1], None, EXTRACTIVE_MODEL) != base
    assert summary_input_hash(shop, None, "gpt-4o-mini") != base
    assert summary_input_hash(shop, None, EXTRACTIVE_MODEL, max_input_tokens=1000) != base
    with_previous = summary_input_hash(shop, earlier, EXTRACTIVE_MODEL)
    assert with_previous != base
    assert summary_input_hash(shop, replace(earlier, overview="Other."), EXTRACTIVE_MODEL) != with_previous
    edited = [replace(m, text=m.text + " (edited)") if m is shop[-1] else m for m in shop]
    assert summary_input_hash(edited, earlier, EXTRACTIVE_MODEL) != with_previous


# ---- map-reduce -------------------------------------------------------------------------------------------------


def long_session(exchanges: int = 40) -> list[CollapsedMessage]:
    """A long session: each exchange is about one numbered component; a decision comes near the end."""
    messages = []
    for n in range(exchanges):
        messages.append(message(2 * n, "user", f"Component {n} of the billing service logs a timeout on startup. Why?"))
        messages.append(
            message(
                2 * n + 1,
                "assistant",
                f"Component {n} opens its database pool before the config loads, so the first query waits for the "
                f"default timeout of {n + 5} seconds. Loading the config first removes the wait for component {n}.",
            )
        )
    messages[-1] = replace(messages[-1], text=messages[-1].text + " Decision: we load the config before any pool.")
    return messages


def test_a_transcript_over_the_budget_is_summarized_in_parts() -> None:
    messages = long_session()

    summary = summarize_session(messages, max_input_tokens=400)

    assert summary.parts > 1
    assert summarize_session(messages).parts == 1
    assert summary.message_count == len(messages)
    assert summary.decisions == ("Assistant: Decision: we load the config before any pool.",)  # from the last part
    assert summary.key_points and all("omponent" in point for point in summary.key_points)
    assert "summarized in" in summary.to_markdown()


def test_the_llm_reads_every_part_and_merges_them(openai_server: OpenAICompatibleServer) -> None:
    messages = long_session(12)
    openai_server.default_chat_content = llm_json()

    summary = summarize_session(messages, llm=chat_model(openai_server), max_input_tokens=300)

    requests = openai_server.requests_to(CHAT)
    prompts = [request.body["messages"][1]["content"] for request in requests]
    map_prompts = [p for p in prompts if p.startswith("Conversation on")]
    assert summary.parts == len(map_prompts) > 1
    assert len(requests) > len(map_prompts)  # and at least one merging call
    for m in messages:  # no silent truncation: every message reached the model
        assert any(m.text in prompt for prompt in map_prompts)
    assert all(len(p) < 4 * 300 + 200 for p in map_prompts)
    assert "merge the summaries of consecutive parts" in requests[-1].body["messages"][0]["content"]
    assert summary.model == "llama-test"


def test_an_incremental_llm_summary_over_the_budget_merges_the_previous_summary_first(
    openai_server: OpenAICompatibleServer,
) -> None:
    messages = long_session(12)
    earlier = summarize_session(messages[:4])
    openai_server.default_chat_content = llm_json()

    later = summarize_session(messages, previous=earlier, llm=chat_model(openai_server), max_input_tokens=300)

    prompts = [[part["content"] for part in r.body["messages"][:2]] for r in openai_server.requests_to(CHAT)]
    maps = [user for _, user in prompts if user.startswith("Conversation")]
    merges = [user for system, user in prompts if "merge the summaries" in system]
    assert later.is_incremental and later.parts == len(maps) > 1
    assert merges[0].startswith("Summary 1 of ") and json.dumps(earlier.overview)[1:-1] in merges[0]
    assert not [m for m in messages[:4] if any(f"{m.speaker}: {m.text}" in user for user in maps)]
    assert all(any(f"{m.speaker}: {m.text}" in user for user in maps) for m in messages[4:])


# ---- the LLM path -----------------------------------------------------------------------------------------------


def test_the_llm_summary_is_validated_and_completed_from_the_tool_records(
    openai_server: OpenAICompatibleServer, shop: list[CollapsedMessage]
) -> None:
    openai_server.enqueue(CHAT, llm_reply(key_points=["The key sk-ant-api03-" + "a" * 90 + " was pasted."]))

    summary = summarize_session(shop, llm=chat_model(openai_server))

    (request,) = openai_server.requests_to(CHAT)
    system, user = (part["content"] for part in request.body["messages"][:2])
    assert '"overview"' in system and "JSON" in system
    assert user.startswith("Conversation on 12 February 2026:")
    assert "User: The cart total is off by a cent" in user
    assert "SessionStart hook" not in user  # injected context is not summarized
    assert summary.overview == "User asked Assistant to fix a rounding error; it was fixed with Decimal."
    assert summary.topics == ("cart-rounding", "decimal")
    assert summary.files_modified == ("src/shop/cart.py", "tests/test_cart.py")  # from the records, not the model
    assert "sk-ant" not in summary.key_points[0] and "[REDACTED:" in summary.key_points[0]
    assert (summary.model, summary.parts) == ("llama-test", 1)
    assert summary.input_hash == summary_input_hash(shop, None, "llama-test")


def test_an_incremental_llm_summary_sends_the_previous_summary_and_only_new_messages(
    openai_server: OpenAICompatibleServer, shop: list[CollapsedMessage]
) -> None:
    earlier = summarize_session(shop[:10])
    openai_server.enqueue(CHAT, llm_reply())

    later = summarize_session(shop, previous=earlier, llm=chat_model(openai_server))

    (request,) = openai_server.requests_to(CHAT)
    system, user = (part["content"] for part in request.body["messages"][:2])
    assert "update the summary" in system
    assert json.dumps(earlier.overview, ensure_ascii=False)[1:-1] in user
    assert "normalise the currency code in Summary.tsx" in user
    assert "Searched for" not in user and "Read src/shop/cart.py" not in user  # old messages are not sent again
    assert later.is_incremental and later.messages_processed == len(shop) - 10


@pytest.mark.parametrize(
    "reply",
    [
        llm_reply(overview=None),
        llm_reply(overview="   "),
        llm_reply(decisions="Totals use Decimal."),
        llm_reply(key_points=["ok", 3]),
        llm_reply(open_items=None),
        Reply.chat('["not", "an", "object"]'),
    ],
    ids=["no-overview", "blank-overview", "decisions-not-a-list", "key-point-not-a-string", "no-open-items", "array"],
)
def test_an_unusable_llm_summary_raises_llm_error(
    openai_server: OpenAICompatibleServer, shop: list[CollapsedMessage], reply: Reply
) -> None:
    openai_server.enqueue(CHAT, reply, reply)

    with pytest.raises(LLMError, match="llama-test"):
        summarize_session(shop, llm=chat_model(openai_server))


def test_invalid_json_from_the_model_falls_back_to_the_extractive_summary(
    openai_server: OpenAICompatibleServer, shop: list[CollapsedMessage]
) -> None:
    openai_server.enqueue(CHAT, Reply.chat("Here is a summary: it went well."), Reply.chat("Still prose."))

    summary, error = summarize_with_fallback(shop, llm=chat_model(openai_server))

    assert isinstance(error, LLMError) and "not a JSON object" in str(error)
    assert summary == summarize_session(shop)
    assert summary.model == EXTRACTIVE_MODEL


def test_without_a_model_there_is_nothing_to_fall_back_from(shop: list[CollapsedMessage]) -> None:
    assert summarize_with_fallback(shop) == (summarize_session(shop), None)


# ---- storage and text forms -------------------------------------------------------------------------------------


def test_the_summary_survives_a_json_round_trip(shop: list[CollapsedMessage]) -> None:
    summary = summarize_session(shop, previous=summarize_session(shop[:10]))

    assert SessionSummary.from_dict(json.loads(json.dumps(summary.to_dict()))) == summary


@pytest.mark.parametrize(
    ("field", "value"), [("overview", None), ("parts", "2"), ("topics", ["a", 1]), ("is_incremental", 1)]
)
def test_a_malformed_stored_summary_is_refused_with_the_field_named(
    shop: list[CollapsedMessage], field: str, value: Any
) -> None:
    data = summarize_session(shop).to_dict()
    data[field] = value

    with pytest.raises(ValueError, match=field):
        SessionSummary.from_dict(data)


def test_markdown_and_embedding_text(shop: list[CollapsedMessage]) -> None:
    summary = summarize_session(shop)
    markdown, embedded = summary.to_markdown(), summary.text_for_embedding()

    assert markdown.startswith(summary.overview)
    for heading in ("Topics:", "Decisions", "Key points", "Open items", "Files modified:", "Tools used:"):
        assert f"**{heading}**" in markdown
    assert f"{summary.message_count} messages" in markdown
    assert embedded.startswith(summary.overview)
    assert all(decision in embedded for decision in summary.decisions)
    assert "src/shop/cart.py" in embedded and "Bash" not in embedded
    assert summary.token_count > 0


# ---- when a summary is due --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("idle_minutes", "new_messages", "due"),
    [(31, 1, True), (30, 19, False), (5, 20, True), (5, 19, False), (600, 0, False)],
    ids=["idle", "not-yet-idle", "threshold", "below-threshold", "nothing-new"],
)
def test_a_summary_is_due_when_idle_or_after_enough_messages(idle_minutes: int, new_messages: int, due: bool) -> None:
    now = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)

    assert summary_is_due(
        last_message_at=now - timedelta(minutes=idle_minutes), now=now, new_messages_since_summary=new_messages
    ) is due


def test_due_thresholds_are_configurable_and_undated_sessions_count_as_idle() -> None:
    now = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)

    eleven_minutes_ago = now - timedelta(minutes=11)
    assert summary_is_due(last_message_at=eleven_minutes_ago, now=now, new_messages_since_summary=1, idle_minutes=10)
    assert summary_is_due(last_message_at=now, now=now, new_messages_since_summary=5, message_threshold=5)
    assert summary_is_due(last_message_at=None, now=now, new_messages_since_summary=1)


# ---- noise: spliced quotes, placeholder topics, assent taken for a decision (issue 17) ---------------------------


def test_a_quote_of_sentences_that_do_not_follow_each_other_marks_the_gap() -> None:
    request = (
        "Hi there, I hope the week started well for everyone on the team and that the release went fine. "
        "Can you move the nightly export job to a later hour so it stops colliding with the backup window? "
        "The backup runs from two to three in the morning and locks the orders table for the whole hour. "
        "It has been failing for a week now and the analytics people keep asking me about the missing numbers. "
        "Please update the runbook page in the wiki so the on-call person knows about the new schedule."
    )
    summary = summarize_session([message(0, "user", request), message(1, "assistant", "Sure, moving it to 04:00.")])

    assert (
        "User asked: Can you move the nightly export job to a later hour so it stops colliding with the backup "
        "window? … User: Update the runbook page in the wiki" in summary.overview
    )


def test_redaction_markers_and_markup_are_neither_topics_nor_key_points() -> None:
    messages = [
        message(0, "user", "Rotate the deploy token in the billing service: [redacted text len=40 sha256=9f2c1ab3]."),
        message(1, "assistant", "<file_photo>"),
        message(2, "assistant", "Rotated the billing service deploy token [REDACTED:github-token] len=40 sha=9f2c1a."),
        message(3, "user", "Thanks. Does the billing service pick up the new deploy token without a restart?"),
    ]
    summary = summarize_session(messages)

    assert not {"len", "sha", "text-len", "len-sha", "redacted", "file-photo"} & set(summary.topics)
    assert "billing-service" in summary.topics or "deploy-token" in summary.topics
    assert not any("<file_photo>" in point for point in summary.key_points)


def test_assent_to_go_on_is_not_a_decision_but_a_dropped_version_is() -> None:
    messages = [
        message(0, "user", "Should we keep supporting MySQL 5.7 in the installer?"),
        message(1, "assistant", "Only 2% of installs use it and it is past end of life."),
        message(2, "user", "ok continue"),
        message(3, "assistant", "We're dropping 5.7."),
        message(4, "user", "Thanks, I'll keep an eye on it."),
    ]
    decisions = summarize_session(messages).decisions

    context = "Only 2% of installs use it and it is past end of life."
    assert decisions == (f'Assistant: We\'re dropping 5.7. (re: "{context}")',)


def test_the_llm_summary_keeps_no_marker_or_hash_tags(openai_server: OpenAICompatibleServer) -> None:
    tags = ["Billing Service", "text-len", "len-sha", "9f2c1ab3e4", "discussion"]
    openai_server.enqueue(CHAT, llm_reply(topics=tags))
    messages = [message(0, "user", "Rotate the billing deploy token."), message(1, "assistant", "Rotated it.")]

    summary = summarize_session(messages, llm=chat_model(openai_server))

    assert summary.topics == ("billing-service",)
    assert summary.model == "llama-test"
