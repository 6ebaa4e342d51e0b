"""Topic tags (issue 5 item 5): keyword extraction, normalization, the LLM path and session aggregation."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionmem_pipeline.core.llm_protocol import ChatModel, LLMError
from sessionmem_pipeline.core.tokens import count_tokens
from sessionmem_pipeline.core.topics import (
    LLM_INPUT_TOKENS,
    MAX_TAG_LENGTH,
    TopicStats,
    keyword_topics,
    keyword_topics_for_chunks,
    llm_topics,
    normalize_tag,
    session_topics,
)

NOISE = frozenset(
    "okay ok thanks thank yeah yes think really going just like the and of to self def return py js md json "
    "user assistant jason max edited replaced ran read lines".split()
)


def assert_clean(tags: list[str]) -> None:
    """Tags are normalized, unique, and free of stop words, filler, code noise and speaker names."""
    assert tags == [normalize_tag(tag) for tag in tags]
    assert len(tags) == len(set(tags))
    assert not [part for tag in tags for part in tag.split("-") if part in NOISE], tags


X_POSTING = """Jason: How often should we post on X? I feel like we're overdoing it and engagement is dropping.

Max: Based on the research, two to three posts per day is the sweet spot for accounts of your size. More than \
that tends to reduce per-post engagement, and the algorithm seems to penalize bursts. For your content strategy \
I'd suggest one thread in the morning and one short post in the afternoon, then we review the posting frequency \
against the analytics on Friday.

Jason: okay thanks, really helpful. Let's go with two posts a day."""

CHECKOUT = """Jason: The checkout total is wrong when a discount code is applied twice.

Max: Read src/checkout/cart.py (120 lines).
Searched for "discount" in src/ (7 matches).
The discount is applied in two places: once in Cart.total and again in the invoice renderer, which explains \
the double discount.
Edited src/checkout/cart.py: replaced "return subtotal - self.discount" with "return subtotal"."""

EMBEDDINGS = """Jason: can you look at why the embeddings job keeps timing out?

Max: Ran `uv run pytest -q tests/test_embed.py` (exit 1): TimeoutError: embedding batch exceeded 30s
The embedding batches are 512 texts each; the embedding endpoint times out on large batches. I'll lower the \
batch size to 100 and add retries with backoff."""


@pytest.mark.parametrize(
    ("text", "key_terms"),
    [
        (X_POSTING, ("post", "posting", "content-strategy", "engagement")),
        (CHECKOUT, ("checkout", "discount")),
        (EMBEDDINGS, ("embedding",)),
        (
            "Jason: Postgres or SQLite for the local cache?\n\nMax: SQLite: no server, one file. Postgres pays off "
            "with concurrent writers.\n\nJason: Agreed, SQLite it is.",
            ("sqlite", "postgres"),
        ),
    ],
    ids=["x-posting", "checkout-bug", "embedding-timeouts", "database-choice"],
)
def test_keyword_tags_name_the_subject(text: str, key_terms: tuple[str, ...]) -> None:
    tags = keyword_topics(text, exclude=["Jason", "Max"])
    assert 1 <= len(tags) <= 3
    assert_clean(tags)
    assert any(term in tag for tag in tags for term in key_terms), tags


@pytest.mark.parametrize(
    "path", ["src/checkout/cart.py", "/home/jason/projects/shop/src/checkout/cart.py", "./checkout/api/cart.py"]
)
def test_file_paths_contribute_their_module(path: str) -> None:
    tags = keyword_topics(f'Edited {path}: replaced "return subtotal - self.discount" with "return subtotal".')
    assert tags[:2] == ["checkout", "cart"]
    assert_clean(tags)


def test_a_repeated_phrase_beats_its_own_words() -> None:
    text = (
        "Cache invalidation is the hard part. We tried cache invalidation by TTL first, then moved cache "
        "invalidation to write events. The cache itself is Redis."
    )
    assert keyword_topics(text)[0] == "cache-invalidation"


def test_plurals_add_up() -> None:
    text = "Posts get more reach than replies. A short post wins. Schedule posts early. Replies help too."
    assert keyword_topics(text)[0] == "post"


@pytest.mark.parametrize(
    "text",
    ["okay thanks, really helpful!", "Yeah, I think so too.", "", "   ", "👍", "def f(self):\n    return None"],
)
def test_filler_and_noise_give_no_tags(text: str) -> None:
    assert keyword_topics(text) == []


def test_code_blocks_urls_and_placeholders_are_not_topics() -> None:
    text = (
        "Deploy the billing worker.\n```python\nclass Worker:\n    def run(self):\n        return queue.pop()\n```\n"
        "See https://docs.example.com/workers and the key [REDACTED:aws-key]."
    )
    tags = keyword_topics(text)
    assert tags and all(word not in tag for tag in tags for word in ("queue", "docs", "example", "aws", "class"))
    assert any("billing" in tag or "worker" in tag for tag in tags)


def test_speaker_names_can_be_excluded() -> None:
    text = (
        "Caroline: Thanks Melanie, the pottery class schedule works.\n\n"
        "Melanie: Great, Caroline, see you at pottery class."
    )
    tags = keyword_topics(text, exclude=["Caroline", "Melanie"])
    assert tags and not any(name in tag for tag in tags for name in ("caroline", "melanie"))
    assert "pottery-class" in tags


def test_max_topics_is_respected() -> None:
    assert len(keyword_topics(X_POSTING, max_topics=1)) == 1
    assert len(keyword_topics(X_POSTING, max_topics=5)) <= 5


def test_corpus_statistics_favour_what_sets_a_chunk_apart() -> None:
    chunks = [
        "Sessionmem search uses the hnsw index. Sessionmem ranks by score. Sessionmem is fast.",
        "The sessionmem indexer reads the transcripts.",
        "The sessionmem warehouse stores them.",
        "The sessionmem CLI prints results.",
        "The sessionmem MCP server answers agents.",
        "Sessionmem summaries are versioned.",
    ]
    stats = TopicStats.from_texts(chunks)
    assert stats.documents == 6 and stats.idf("sessionmem") == 1.0 < stats.idf("hnsw index")
    assert keyword_topics(chunks[0])[0] == "sessionmem"
    weighed = keyword_topics(chunks[0], corpus_stats=stats)
    assert "sessionmem" not in weighed and "hnsw-index" in weighed


def test_chunk_tags_never_change_when_the_session_grows() -> None:
    texts = [X_POSTING, CHECKOUT, EMBEDDINGS, "Jason: the checkout discount again?\n\nMax: Fixed in cart.py."]
    whole = keyword_topics_for_chunks(texts)
    for cut in range(1, len(texts)):
        assert keyword_topics_for_chunks(texts[:cut]) == whole[:cut]


WORDS = st.sampled_from(
    "the and okay thanks really deploy deployed kubernetes cluster billing worker posts strategy src/app/cart.py "
    "self def return 42 0x1f https://x.com 🙂 café naïve c++ . , ? \n".split(" ")
)


@settings(max_examples=80, deadline=None)
@given(st.lists(WORDS, max_size=40).map(" ".join))
def test_any_text_gives_clean_tags_and_a_tag_when_it_has_a_content_word(text: str) -> None:
    tags = keyword_topics(text)
    assert len(tags) <= 3
    assert_clean(tags)
    content_words = set("deploy deployed kubernetes cluster billing worker posts strategy cafe naive c++".split())
    if content_words & set(text.replace("é", "e").replace("ï", "i").split()):
        assert tags


# ---- normalization ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Content Strategy", "content-strategy"),
        ("  --posting__frequency-- ", "posting-frequency"),
        ("X / Twitter posting", "x-twitter-posting"),
        ("Café Crème", "cafe-creme"),
        ("C++ templates", "cpp-templates"),
        ("C#", "csharp"),
        ("数据库", ""),
        ("", ""),
        ("a" * 50, "a" * MAX_TAG_LENGTH),
        ("database-migration-strategy-for-the-legacy-billing-system", "database-migration-strategy-for-the"),
    ],
)
def test_normalize_tag(raw: str, expected: str) -> None:
    assert normalize_tag(raw) == expected
    assert len(normalize_tag(raw)) <= MAX_TAG_LENGTH


# ---- LLM path -----------------------------------------------------------------------------------------


class ScriptedModel:
    """A ChatModel answering from a script, recording what it was asked."""

    def __init__(self, *replies: Any) -> None:
        self.model = "scripted-model"
        self.replies = list(replies)
        self.requests: list[tuple[str, str]] = []

    def complete_json(self, system: str, user: str) -> dict[str, Any]:
        self.requests.append((system, user))
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def test_scripted_model_is_a_chat_model() -> None:
    model: ChatModel = ScriptedModel()
    assert model.model == "scripted-model"


def test_llm_tags_are_normalized_deduplicated_and_capped() -> None:
    tags = ["Content Strategy", "X posting", "content_strategy", "posting frequency", "growth"]
    model = ScriptedModel({"topics": tags})
    assert llm_topics(X_POSTING, model) == ["content-strategy", "x-posting", "posting-frequency"]
    ((system, user),) = model.requests
    assert '{"topics"' in system and "1 to 3" in system
    assert user == X_POSTING


def test_llm_generic_tags_are_skipped() -> None:
    model = ScriptedModel({"topics": ["Conversation", "question", "checkout bug"]})
    assert llm_topics(CHECKOUT, model) == ["checkout-bug"]


def test_long_text_is_cut_before_it_is_sent() -> None:
    model = ScriptedModel({"topics": ["billing"]})
    llm_topics("invoice totals " * 3000, model)
    assert count_tokens(model.requests[0][1]) <= LLM_INPUT_TOKENS


@pytest.mark.parametrize(
    "reply",
    [
        {"tags": ["billing"]},
        {"topics": "billing"},
        {"topics": [1, 2]},
        {"topics": ["billing", None]},
        {"topics": []},
        {"topics": ["", "!!!", "数据"]},
        {"topics": ["conversation"]},
        ["billing"],
        "billing",
    ],
    ids=["wrong-key", "string", "numbers", "null-item", "empty", "unusable", "generic-only", "list", "text"],
)
def test_malformed_llm_replies_raise_llm_error(reply: Any) -> None:
    with pytest.raises(LLMError, match="scripted-model"):
        llm_topics(CHECKOUT, ScriptedModel(reply))


def test_provider_failure_propagates_as_llm_error() -> None:
    with pytest.raises(LLMError, match="rate limited"):
        llm_topics(CHECKOUT, ScriptedModel(LLMError("rate limited after 3 attempts")))


# ---- session level --------------------------------------------------------------------------------------


def test_session_topics_rank_by_chunk_count_and_skip_covered_words() -> None:
    chunk_tags = [
        ["cache-invalidation", "redis"],
        ["cache-invalidation", "ttl"],
        ["Redis", "cache"],
        ["pricing-page"],
        [],
    ]
    assert session_topics(chunk_tags) == ["cache-invalidation", "redis", "ttl", "pricing-page"]
    assert session_topics(chunk_tags, max_topics=2) == ["cache-invalidation", "redis"]
    assert session_topics([]) == []
