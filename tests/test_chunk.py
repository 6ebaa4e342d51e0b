"""Exchange chunking (spec 001, issue 5 item 3) and the token counting it relies on."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from sessionmem_pipeline.core.chunk import (
    DROPPED_EMPTY,
    DROPPED_EVENT,
    DROPPED_INJECTED,
    DROPPED_OVER_CAP,
    DROPPED_SYSTEM_PROMPT,
    EmbedderWindow,
    chunk_session,
    effective_max_tokens,
    iter_chunk_batches,
)
from sessionmem_pipeline.core.models import CollapsedMessage, ToolRecord
from sessionmem_pipeline.core.tokens import count_tokens, truncate_to_tokens

ROOT = Path(__file__).resolve().parent.parent

SESSION = "7f3c2a10-5b1e-4c55-9a0e-2f1d9b8c7e61"
START = datetime(2026, 2, 5, 10, 30, tzinfo=timezone.utc)
SPEAKERS = {"user": "Jason", "assistant": "Max", "system": "System", "tool": "Tool"}


def msg(
    seq: int,
    role: str,
    text: str,
    *,
    kind: str = "message",
    tools: tuple[ToolRecord, ...] = (),
    thinking: str = "",
    timestamp: datetime | None = None,
) -> CollapsedMessage:
    return CollapsedMessage(
        session_id=SESSION,
        seq=seq,
        message_id=f"msg-{seq:04d}",
        role=role,
        speaker=SPEAKERS[role],
        timestamp=timestamp or START + timedelta(minutes=seq),
        text=text,
        kind=kind,
        thinking=thinking,
        tools=tools,
    )


def session(*turns: tuple[str, str]) -> list[CollapsedMessage]:
    return [msg(seq, role, text) for seq, (role, text) in enumerate(turns)]


CHECKOUT_BUG = session(
    ("user", "The checkout total is wrong when a discount code is applied twice. Can you look?"),
    ("assistant", "The discount is subtracted in Cart.total and again in the invoice renderer."),
    ("user", "Let's go with removing it from the renderer."),
    ("assistant", "Done: the renderer now shows the cart total as is."),
)

PARAGRAPH = (
    "The embedding batches were 512 texts each, and the endpoint times out on anything that large. "
    "Lowering the batch size to 100 keeps every request under ten seconds. "
    "Retries with exponential backoff cover the occasional rate limit."
)


def long_reply(paragraphs: int) -> str:
    return "\n\n".join(f"Step {n}. {PARAGRAPH}" for n in range(1, paragraphs + 1))


# ---- exchanges --------------------------------------------------------------------------------------


def test_one_chunk_per_exchange_renders_speakers_and_metadata() -> None:
    result = chunk_session(CHECKOUT_BUG)

    assert [c.message_ids for c in result.chunks] == [("msg-0000", "msg-0001"), ("msg-0002", "msg-0003")]
    first = result.chunks[0]
    assert first.content == (
        "Jason: The checkout total is wrong when a discount code is applied twice. Can you look?\n\n"
        "Max: The discount is subtracted in Cart.total and again in the invoice renderer."
    )
    assert (first.session_id, first.chunk_index) == (SESSION, 0)
    assert first.speakers == ("Jason", "Max") and first.roles == ("user", "assistant")
    assert (first.ts_start, first.ts_end) == (START, START + timedelta(minutes=1))
    assert first.token_count == count_tokens(first.content)
    assert not first.continued
    assert result.chunks[1].has_decision and not first.has_decision
    assert result.warnings == [] and result.dropped == {}


def test_timestamps_span_the_messages_even_when_they_go_backwards() -> None:
    messages = [
        msg(0, "user", "Why is the sync slow?", timestamp=START),
        msg(1, "assistant", "The index is rebuilt on every write.", timestamp=START - timedelta(seconds=5)),
        replace(msg(2, "assistant", "Batching the writes fixes it."), timestamp=None),
    ]
    (chunk,) = chunk_session(messages).chunks
    assert (chunk.ts_start, chunk.ts_end) == (START - timedelta(seconds=5), START)


def test_consecutive_user_messages_share_one_exchange() -> None:
    messages = session(
        ("user", "Fix the flaky export test."),
        ("user", "Oh, and keep the CSV header lowercase."),
        ("assistant", "Both done: the test now uses a fixed clock and the header stays lowercase."),
        ("user", "Thanks!"),
    )
    chunks = chunk_session(messages).chunks
    assert [c.message_ids for c in chunks] == [("msg-0000", "msg-0001", "msg-0002"), ("msg-0003",)]


def test_leading_assistant_text_forms_its_own_chunk() -> None:
    messages = session(
        ("assistant", "Welcome back. Last time we left the pricing page half done."),
        ("user", "Right, let's finish the annual toggle."),
        ("assistant", "The toggle needs the annual prices from the plan config."),
    )
    chunks = chunk_session(messages).chunks
    assert [c.message_ids for c in chunks] == [("msg-0000",), ("msg-0001", "msg-0002")]
    assert chunks[0].roles == ("assistant",)


def test_compaction_summary_is_its_own_chunk_and_replies_after_it_stand_alone() -> None:
    messages = [
        msg(0, "user", "Migrate the sessions table to DuckDB."),
        msg(1, "assistant", "Started with the schema."),
        msg(2, "system", "This session is being continued from a previous conversation...", kind="compaction_summary"),
        msg(3, "assistant", "Continuing with the data copy."),
        msg(4, "user", "How far along are we?"),
    ]
    chunks = chunk_session(messages).chunks
    assert [c.message_ids for c in chunks] == [("msg-0000", "msg-0001"), ("msg-0002",), ("msg-0003",), ("msg-0004",)]
    assert chunks[1].content.startswith("System: This session is being continued")


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (msg(1, "user", "<environment_context>/repo</environment_context>", kind="injected"), DROPPED_INJECTED),
        (msg(1, "system", "Conversation compacted", kind="event"), DROPPED_EVENT),
        (msg(1, "system", "You are a helpful coding assistant."), DROPPED_SYSTEM_PROMPT),
        (msg(1, "assistant", "   \n"), DROPPED_EMPTY),
        (msg(1, "system", "", kind="compaction_summary"), DROPPED_EMPTY),
    ],
)
def test_dropped_messages_are_listed_with_their_reason(message: CollapsedMessage, reason: str) -> None:
    messages = [msg(0, "user", "Where is the config loaded?"), message, msg(2, "assistant", "In config.py, once.")]
    result = chunk_session(messages)
    assert result.dropped == {"msg-0001": reason}
    assert result.dropped_message_ids == ("msg-0001",)
    assert [c.message_ids for c in result.chunks] == [("msg-0000", "msg-0002")]
    assert message.text.strip() == "" or message.text.strip() not in result.chunks[0].content


def test_injected_context_does_not_split_an_exchange() -> None:
    messages = [
        msg(0, "user", "Add a retry to the fetch helper."),
        msg(1, "user", "<system-reminder>The file was modified by a hook.</system-reminder>", kind="injected"),
        msg(2, "assistant", "Added three retries with backoff."),
    ]
    (chunk,) = chunk_session(messages).chunks
    assert chunk.message_ids == ("msg-0000", "msg-0002")


def test_tool_messages_belong_to_the_reply() -> None:
    messages = session(
        ("user", "What does the weather tool say for Melbourne?"),
        ("assistant", "Checking the forecast."),
        ("tool", "Melbourne: 24°C, light wind."),
        ("assistant", "It will be 24°C with a light wind."),
    )
    (chunk,) = chunk_session(messages).chunks
    assert chunk.roles == ("user", "assistant", "tool")


def test_thinking_stays_out_of_the_content() -> None:
    messages = [
        msg(0, "user", "Which queue library?"),
        msg(1, "assistant", "RQ: Redis is already there.", thinking="Celery is heavier; RQ would do."),
    ]
    (chunk,) = chunk_session(messages).chunks
    assert "Celery" not in chunk.content


# ---- tool-only turns and flags ----------------------------------------------------------------------

EDIT = ToolRecord(
    name="Edit",
    category="consequential",
    line='Edited src/checkout/cart.py: replaced "return subtotal - self.discount" with "return subtotal".',
    files=("src/checkout/cart.py",),
)
READ = ToolRecord(
    name="Read",
    category="observational",
    line="Read src/checkout/cart.py (120 lines).",
    files=("src/checkout/cart.py",),
)


@pytest.mark.parametrize(("tool", "expected_action"), [(EDIT, True), (READ, False)])
def test_tool_only_turn_is_chunked_and_flags_its_state_changes(tool: ToolRecord, expected_action: bool) -> None:
    messages = [
        msg(0, "user", "Why is the discount applied twice?"),
        msg(1, "assistant", tool.line or "", tools=(tool,)),
    ]
    (chunk,) = chunk_session(messages).chunks
    assert chunk.content.endswith(tool.line or "")
    assert chunk.has_action is expected_action


def test_a_tool_counts_only_in_the_chunk_that_shows_its_line() -> None:
    messages = [
        msg(0, "user", "Explain the cart code."),
        msg(1, "assistant", long_reply(6) + "\n" + (EDIT.line or ""), tools=(EDIT,)),
    ]
    chunks = chunk_session(messages, max_tokens=120).chunks
    assert len(chunks) > 2
    assert [c.has_action for c in chunks] == [(EDIT.line or "") in c.content for c in chunks]
    assert chunks[-1].has_action


# ---- size limits ------------------------------------------------------------------------------------


def test_long_exchange_splits_at_message_boundaries_repeating_the_previous_message() -> None:
    messages = [msg(0, "user", "Walk me through the embedding fix.")] + [
        msg(n, "assistant", f"Step {n}. {PARAGRAPH}") for n in range(1, 7)
    ]
    chunks = chunk_session(messages, max_tokens=160).chunks

    assert len(chunks) > 1
    assert not any(c.continued for c in chunks)
    for previous, current in zip(chunks, chunks[1:]):
        assert current.message_ids[0] == previous.message_ids[-1]  # the overlap: context for what follows
        assert current.content.startswith(previous.content.split("\n\n")[-1])
    covered = [message_id for c in chunks for message_id in c.message_ids]
    assert sorted(set(covered)) == [m.message_id for m in messages]
    for message in messages:  # never split mid-message when the message fits
        assert any(f"{message.speaker}: {message.text}" in c.content for c in chunks)


def test_no_overlap_when_asked_for_none() -> None:
    messages = [msg(0, "user", "Walk me through the fix.")] + [msg(n, "assistant", PARAGRAPH) for n in range(1, 7)]
    chunks = chunk_session(messages, max_tokens=160, overlap_messages=0).chunks
    ids = [message_id for c in chunks for message_id in c.message_ids]
    assert len(ids) == len(set(ids)) == len(messages)


def test_long_message_splits_at_paragraphs_with_overlap_and_is_marked_continued() -> None:
    reply = long_reply(8)
    messages = [msg(0, "user", "How did you fix the embedding timeouts?"), msg(1, "assistant", reply)]
    chunks = chunk_session(messages, max_tokens=150).chunks

    assert len(chunks) >= 4 and all(c.continued for c in chunks)
    assert all(c.token_count <= 150 for c in chunks)
    assert chunks[0].content.startswith("Jason: How did you fix the embedding timeouts?\n\nMax: Step 1.")
    parts = [c.content.split("Max: ", 1)[1] for c in chunks]
    for previous, current in zip(parts, parts[1:]):
        assert previous.endswith("."), "parts end at sentence boundaries"
        first_sentence = current.split(".")[0] + "."
        assert previous.endswith(first_sentence), "each part repeats the end of the one before"
    for step in range(1, 9):  # nothing is lost
        assert any(f"Step {step}." in part for part in parts)


def test_single_sentence_longer_than_the_limit_splits_at_words() -> None:
    sentence = " ".join(["the retry budget covers rate limits"] * 60) + "."
    chunks = chunk_session([msg(0, "assistant", sentence)], max_tokens=64).chunks
    assert len(chunks) > 3 and all(c.token_count <= 64 for c in chunks)
    assert all(c.content.startswith("Max: ") for c in chunks)
    assert all(not c.content.endswith(("ret", "bud", "cov")) for c in chunks), "cut between words"


def test_unbroken_blob_splits_at_characters() -> None:
    blob = "data:image/png;base64," + "iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB" * 200
    chunks = chunk_session([msg(0, "user", blob)], max_tokens=100).chunks
    assert len(chunks) > 5 and all(c.token_count <= 100 and c.continued for c in chunks)
    assert "".join(c.content.removeprefix("Jason: ") for c in chunks).replace(" ", "").startswith("data:image/png")


def test_first_part_of_a_long_reply_shares_the_chunk_with_its_question() -> None:
    messages = [msg(0, "user", "Short question?"), msg(1, "assistant", long_reply(5))]
    first = chunk_session(messages, max_tokens=200).chunks[0]
    assert first.message_ids == ("msg-0000", "msg-0001") and first.continued


def minilm_token_counter() -> Callable[[str], int]:
    """The MiniLM embedder's own WordPiece count, [CLS] and [SEP] included, from the tokenizer it ships."""
    source = resources.files("sessionmem_pipeline.providers").joinpath("minilm_tokenizer.json").read_text("utf-8")
    tokenizer = Tokenizer.from_str(source)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return lambda text: len(tokenizer.encode(text).ids)


def test_embedder_window_limits_chunks_in_the_models_own_tokens() -> None:
    counter = minilm_token_counter()
    code_heavy = "\n".join(
        f'Edited src/pkg_{n}/mod_{n}.py: replaced "x_{n} = cfg[\'k{n}\']" with "x_{n} = cfg.get(\'k{n}\', 0)".'
        for n in range(40)
    )
    window = EmbedderWindow(count_tokens=counter, max_tokens=120)
    messages = [msg(0, "user", "Apply the config defaults."), msg(1, "assistant", code_heavy)]
    chunks = chunk_session(messages, window=window).chunks
    assert len(chunks) > 1
    assert all(counter(c.content) <= 120 for c in chunks)
    assert any(c.token_count < counter(c.content) for c in chunks), "WordPiece runs longer than cl100k on code"


def test_empty_session_gives_no_chunks() -> None:
    assert chunk_session([]).chunks == []
    only_boilerplate = [msg(0, "system", "You are helpful."), msg(1, "user", "", kind="injected")]
    result = chunk_session(only_boilerplate)
    assert result.chunks == [] and set(result.dropped) == {"msg-0000", "msg-0001"}


# ---- stability for append-only sessions --------------------------------------------------------------

LONG_SESSION = session(
    ("user", "Plan the blog migration to Astro."),
    ("assistant", long_reply(4)),
    ("user", "What about the RSS feed?"),
    ("assistant", "Astro has an RSS integration; the feed URL can stay the same."),
    ("user", "Good. And redirects?"),
    ("assistant", "A redirects map in astro.config covers the old /posts/ URLs."),
)


@pytest.mark.parametrize(
    "appended",
    [
        [("assistant", "One more thing: the sitemap plugin needs the site URL.")],
        [("user", "Let's go with Astro then."), ("assistant", "I'll start with the layout components.")],
        [("assistant", long_reply(5))],
        [("user", "ok")],
    ],
    ids=["reply-to-last-exchange", "new-exchange", "long-reply", "user-only"],
)
def test_appending_messages_changes_only_the_last_chunk(appended: list[tuple[str, str]]) -> None:
    before = chunk_session(LONG_SESSION, max_tokens=120).chunks
    grown = LONG_SESSION + [msg(len(LONG_SESSION) + n, role, text) for n, (role, text) in enumerate(appended)]
    after = chunk_session(grown, max_tokens=120).chunks

    assert len(after) >= len(before)
    assert after[: len(before) - 1] == before[:-1]
    assert [c.chunk_id for c in after[: len(before) - 1]] == [c.chunk_id for c in before[:-1]]


# ---- cap and batches ------------------------------------------------------------------------------------


def test_cap_keeps_the_most_recent_chunks_with_their_indexes_and_warns() -> None:
    messages = [msg(n, "user" if n % 2 == 0 else "assistant", f"Turn {n}.") for n in range(10)]
    result = chunk_session(messages, max_chunks=3)

    assert [c.chunk_index for c in result.chunks] == [2, 3, 4]
    assert result.chunks[0].message_ids == ("msg-0004", "msg-0005")
    assert result.dropped == {f"msg-{n:04d}": DROPPED_OVER_CAP for n in range(4)}
    (warning,) = result.warnings
    assert "5 chunks" in warning and "cap of 3" in warning and SESSION in warning


def test_batches_of_one_hundred() -> None:
    chunks = chunk_session([msg(n, "user" if n % 2 == 0 else "assistant", f"Turn {n}.") for n in range(500)]).chunks
    assert [len(batch) for batch in iter_chunk_batches(chunks)] == [100, 100, 50]
    assert [len(batch) for batch in iter_chunk_batches(chunks, size=120)] == [120, 120, 10]


@pytest.mark.parametrize(
    ("config_max", "window", "prefix", "ratio", "expected"),
    [
        (500, 8191, 60, 1.0, 500),  # OpenAI: the configured limit
        (500, 256, 56, 1.25, 160),  # MiniLM: (256 - 56) / 1.25
        (120, 256, 56, 1.25, 120),  # a smaller configured limit wins
    ],
)
def test_effective_max_tokens(config_max: int, window: int, prefix: int, ratio: float, expected: int) -> None:
    assert effective_max_tokens(config_max, window, prefix, window_tokens_per_token=ratio) == expected


def test_effective_max_tokens_refuses_a_window_the_prefix_fills() -> None:
    with pytest.raises(ValueError, match="embedding model with a larger window"):
        effective_max_tokens(500, 256, 230, window_tokens_per_token=1.25)


@pytest.mark.parametrize(
    "kwargs",
    [{"max_tokens": 10}, {"overlap_messages": -1}, {"max_chunks": 0}],
)
def test_invalid_settings_are_refused(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        chunk_session(CHECKOUT_BUG, **kwargs)


def test_unknown_kind_names_the_message() -> None:
    with pytest.raises(ValueError, match="msg-0001.*'progress'"):
        chunk_session([CHECKOUT_BUG[0], replace(CHECKOUT_BUG[1], kind="progress")])


# ---- properties over random sessions ---------------------------------------------------------------------

FRAGMENTS = st.sampled_from(
    [
        "the cache", "invalidation", "checkout service", "src/checkout/cart.py", "def total(self):", "return 0",
        "Let's go with Redis.", "TODO: add a test.", "🙂", "naïve café", "数据库迁移",
        "https://example.com/a?b=c",
        ". ", "? ", "\n", "\n\n", "    ", "x" * 300, "A" * 1200, "word " * 80,
    ]
)
TEXTS = st.lists(FRAGMENTS, max_size=30).map(" ".join)
MESSAGES = st.lists(
    st.tuples(
        st.sampled_from(["user", "assistant", "assistant", "tool", "system"]),
        st.sampled_from(["message"] * 6 + ["injected", "event", "compaction_summary"]),
        TEXTS,
    ),
    max_size=10,
).map(lambda rows: [msg(n, role, text, kind=kind) for n, (role, kind, text) in enumerate(rows)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=MESSAGES, max_tokens=st.integers(min_value=32, max_value=300), overlap=st.integers(0, 2))
def test_chunks_never_exceed_the_limit_and_cover_every_kept_message(
    messages: list[CollapsedMessage], max_tokens: int, overlap: int
) -> None:
    result = chunk_session(messages, max_tokens=max_tokens, overlap_messages=overlap)
    for index, chunk in enumerate(result.chunks):
        assert chunk.chunk_index == index
        assert chunk.content.strip()
        assert chunk.token_count == count_tokens(chunk.content) <= max_tokens
    covered = {message_id for chunk in result.chunks for message_id in chunk.message_ids}
    assert covered | set(result.dropped) == {m.message_id for m in messages}
    assert not covered & set(result.dropped)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=MESSAGES, cut=st.integers(0, 10), max_tokens=st.integers(min_value=32, max_value=200))
def test_a_prefix_of_a_session_chunks_like_the_start_of_the_whole(
    messages: list[CollapsedMessage], cut: int, max_tokens: int
) -> None:
    prefix = chunk_session(messages[:cut], max_tokens=max_tokens).chunks
    whole = chunk_session(messages, max_tokens=max_tokens).chunks
    assert whole[: max(len(prefix) - 1, 0)] == prefix[:-1]


# ---- tokens ---------------------------------------------------------------------------------------------


def test_count_tokens_reads_special_token_markers_as_text() -> None:
    assert count_tokens("the <|endoftext|> marker") > 3
    assert count_tokens("") == 0


@pytest.mark.parametrize(
    "text", ["Lowering the batch size keeps requests short. " * 20, "数据库迁移和缓存失效 " * 30, "🙂" * 50]
)
def test_truncate_to_tokens_keeps_a_whole_character_prefix(text: str) -> None:
    cut = truncate_to_tokens(text, 17)
    assert text.startswith(cut) and count_tokens(cut) <= 17
    assert truncate_to_tokens(text, 10_000) == text and truncate_to_tokens(text, 0) == ""


# ---- huge messages ------------------------------------------------------------------------------------


def huge_text(size: int) -> str:
    """Numbered sentences in paragraphs, with a line of code now and then, about `size` characters."""
    parts, length, number = [], 0, 0
    while length < size:
        number += 1
        part = f"Step w{number} retried the upload after the proxy reset the connection. "
        if number % 7 == 0:
            part += f"\n    retry(upload, attempts={number}, backoff=0.5)\n"
        if number % 11 == 0:
            part += "\n\n"
        parts.append(part)
        length += len(part)
    return "".join(parts)


def marker_positions(chunks: list) -> list[int]:
    """The numbers of the `w<n>` markers in chunk order, each the first time it appears."""
    seen: dict[int, None] = {}
    for chunk in chunks:
        for word in chunk.content.split():
            if word.startswith("w") and word[1:].isdigit():
                seen.setdefault(int(word[1:]), None)
    return list(seen)


def test_a_huge_message_is_cut_by_token_offsets_into_fitting_overlapping_parts() -> None:
    text = huge_text(600_000)
    window = EmbedderWindow(count_tokens, 150)
    messages = session(("user", "Why does the upload keep failing?"), ("assistant", text), ("user", "Thanks."))

    result = chunk_session(messages, max_tokens=132, window=window, max_chunks=100_000)

    middle = [c for c in result.chunks if c.message_ids == ("msg-0001",)]
    assert middle and all(c.continued and c.token_count <= 132 for c in middle)
    assert all(c.content.startswith("Max: ") for c in middle)
    numbers = marker_positions(middle)
    assert numbers == list(range(1, numbers[-1] + 1)) and f"w{numbers[-1]} " in text[-200:]  # nothing lost
    repeated = sum(1 for a, b in zip(middle, middle[1:]) if a.content.split()[-1] in b.content)
    assert repeated > len(middle) * 0.9  # each part repeats the end of the one before
    assert result.chunks[0].message_ids == ("msg-0000",) and result.chunks[-1].message_ids[-1] == "msg-0002"


def test_a_huge_message_of_multibyte_text_is_cut_between_characters() -> None:
    text = "検索の結果は正しい。😀 " * 22_000

    result = chunk_session(session(("user", text)), max_tokens=64)

    assert len(result.chunks) > 100 and all(c.token_count <= 64 for c in result.chunks)
    assert all(c.content.removeprefix("Jason: ") in text for c in result.chunks)


@pytest.mark.slow
def test_a_30_mb_message_chunks_with_memory_bounded_by_a_small_multiple_of_its_size() -> None:
    text = huge_text(30_000_000)
    messages = session(("user", "Here is the whole log."), ("assistant", text))
    tracemalloc.start()
    try:
        result = chunk_session(messages, max_tokens=132, max_chunks=2000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert len(result.chunks) == 2000 and result.chunks[-1].chunk_index > 50_000
    assert peak < 4 * len(text)  # the parts themselves take about 1.2 times the text
    assert result.chunks[-1].content.endswith(text.strip()[-60:])  # the most recent part is kept


@pytest.mark.slow
def test_a_30_mb_message_goes_from_file_to_chunks_under_a_cpu_time_limit() -> None:
    """Parse, sanitize (the only redaction pass), collapse and chunk a 30 MB single message in a process that the
    kernel stops after `CPU_SECONDS` of CPU time (RLIMIT_CPU, inherited by the benchmark's measuring process): a
    bound on work, not a wall-clock timing. Memory stays a small multiple of the message."""
    cpu_seconds = 240  # measured about 15 s (chunking dominates); generous for a loaded machine

    def limit_cpu() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))

    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "huge_message.py"), "--sizes", "30", "--json"],
        capture_output=True, text=True, check=True, cwd=ROOT, preexec_fn=limit_cpu,
    )
    (row,) = json.loads(done.stdout)
    assert row["chunks"] == 2000 and row["last_index"] > 50_000
    assert row["peak_mb"] < 4 * 30  # above the 30 MB text the process already holds
