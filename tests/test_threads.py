"""Threads link related sessions and leave an unrelated one alone, with real offline embeddings."""

from datetime import UTC, datetime

import pytest

from sessionmem_pipeline.core.threads import ThreadInput, build_threads, link_score
from sessionmem_pipeline.providers import LocalMiniLMEmbedder

SUMMARIES = {
    "checkout-1": "Customer checkout fails with a 500 when a gift card is applied after a coupon; traced to the order "
    "of discounts in pricing.py; fixed by applying coupons first.",
    "checkout-2": "Follow-up on the gift card checkout bug: a regression test for coupons and gift cards, and the "
    "refund for order W-77120 that failed at checkout.",
    "holiday": "Planning the team offsite: choosing a venue in Lisbon, travel dates in June and a budget for dinners.",
}


@pytest.fixture(scope="module")
def sessions() -> list[ThreadInput]:
    vectors = LocalMiniLMEmbedder().embed(list(SUMMARIES.values()))
    days = {"checkout-1": 3, "checkout-2": 12, "holiday": 5}
    topics = {"checkout-1": ("gift-card", "checkout"), "checkout-2": ("gift-card", "refund"), "holiday": ("offsite",)}
    files = {"checkout-1": ("pricing.py",), "checkout-2": ("pricing.py", "test_pricing.py"), "holiday": ()}
    return [
        ThreadInput(sid, "webshop", datetime(2026, 3, days[sid], tzinfo=UTC), topics[sid], files[sid], list(v))
        for sid, v in zip(SUMMARIES, vectors, strict=True)
    ]


def test_related_sessions_share_a_thread_and_the_unrelated_one_is_alone(sessions: list[ThreadInput]) -> None:
    (thread,) = build_threads(sessions)
    assert thread.session_ids == ("checkout-1", "checkout-2")
    assert "gift card" in thread.title
    assert thread.thread_id == build_threads(list(reversed(sessions)))[0].thread_id  # deterministic


def test_link_scores_order_related_above_unrelated(sessions: list[ThreadInput]) -> None:
    one, two, holiday = sessions
    assert link_score(one, two) > 0.5 > link_score(one, holiday)


def test_sessions_of_other_projects_are_never_linked(sessions: list[ThreadInput]) -> None:
    moved = [sessions[0], ThreadInput(**{**vars(sessions[1]), "project": "other"}), sessions[2]]
    assert build_threads(moved) == []


def test_index_builds_threads_and_search_results_name_theirs(tmp_path) -> None:
    import json

    from sessionmem_pipeline.client import SessionMemory
    from sessionmem_pipeline.cli import main
    from sessionmem_pipeline.config import load_settings
    from sessionmem_pipeline.stages.run import index_sources

    root = tmp_path / "sources" / "webshop"
    root.mkdir(parents=True)
    conversations = {
        "a": ("2026-03-03", [
            "Checkout returns a 500 when a gift card is applied after a coupon.",
            "The discounts run in the wrong order in pricing.py; I'll apply coupons first, then gift cards.",
        ]),
        "b": ("2026-03-09", [
            "The gift card checkout bug is back for coupons on sale items.",
            "Coupons still apply before gift cards in pricing.py, but sale prices skip the coupon check; fixed.",
        ]),
        "c": ("2026-03-05", [
            "Let's plan the team offsite in Lisbon for June.",
            "I'll shortlist three venues near the river and a dinner budget.",
        ]),
    }
    for name, (day, turns) in conversations.items():
        lines = [
            json.dumps({"role": role, "content": text, "timestamp": f"{day}T10:0{n}:00Z"})
            for n, (role, text) in enumerate(zip(["user", "assistant"], turns, strict=True))
        ]
        (root / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    settings = load_settings(flags={"warehouse": str(tmp_path / "w.duckdb"), "sources": [str(tmp_path / "sources")]}, env={})
    assert index_sources(settings).threads == 1
    memory = SessionMemory(settings=settings)
    (thread,) = memory.threads(project="webshop")
    assert thread["session_ids"] == ["webshop/a", "webshop/b"]
    hit = memory.search("gift card coupon order in pricing.py", limit=1)[0]
    assert hit.thread_id == thread["thread_id"]
    assert memory.search("offsite venue in Lisbon", limit=1)[0].thread_id is None
    assert main(["threads", "--warehouse", str(settings.warehouse), "--json"]) == 0
