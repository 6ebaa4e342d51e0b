"""Shared pytest fixtures. Each block belongs to one area; add new fixtures in their own block."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# --- providers: a real OpenAI-compatible HTTP server on 127.0.0.1 (tests/openai_server.py) ---------------
from openai_server import OpenAICompatibleServer


@pytest.fixture
def openai_server() -> Iterator[OpenAICompatibleServer]:
    """A fresh server per test: empty reply queues, no recorded requests."""
    with OpenAICompatibleServer() as server:
        yield server


# --- pipeline: a small generic corpus indexed once per test run (test_client.py, test_cli.py) ----------------
import json  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

from sessionmem_pipeline.config import Settings, load_settings  # noqa: E402

CORPUS_TIMEZONE = "America/New_York"
AWS_KEY = "AKIAFAKE7Q2MZKD4RW6N"
CORPUS: dict[str, list[tuple[str, str, str, str, str]]] = {
    # relative path: (id, role, speaker, timestamp UTC, content); the session id is the path without .jsonl
    "webshop/checkout.jsonl": [  # 03:00 UTC on March 10 is 23:00 on March 9 in New York
        ("c1", "user", "Maya", "2026-03-10T03:00:00Z",
         f"The payment retries in checkout keep failing with a timeout from the card processor. "
         f"The deploy bot uses the AWS access key {AWS_KEY}, could that be related?"),
        ("c2", "assistant", "Max", "2026-03-10T03:01:00Z",
         "The key is fine. We decided to use exponential backoff for the payment retries, capped at five attempts."),
        ("c3", "user", "Maya", "2026-03-10T03:05:00Z", "Please also log each payment retry with the order number."),
        ("c4", "assistant", "Max", "2026-03-10T03:06:00Z",
         "Done: every payment retry now logs the order number and the processor response code."),
    ],
    "webshop/search.jsonl": [
        ("s1", "user", "Jonas", "2026-03-12T15:00:00Z",
         "Product search ranks discontinued items above the bestsellers. Why does the ranking do that?"),
        ("s2", "assistant", "Max", "2026-03-12T15:01:00Z",
         "The ranking boosts how recently the catalog entry changed, not sales. I can add a sales weight to it."),
    ],
    "infra/backups.jsonl": [  # 16:00 UTC is noon in New York, March 10 in both zones
        ("b1", "user", "Priya", "2026-03-10T16:00:00Z",
         "The nightly database backups overlap with the vacuum job again and both slow down."),
        ("b2", "assistant", "Max", "2026-03-10T16:01:00Z",
         "Decision: the nightly database backups move to 03:00 UTC, after the vacuum job finishes. "
         "Action item: I will update the backup cron entry today."),
    ],
    "infra/alerts.jsonl": [  # an assistant-only session: its chunk has no user message
        ("a1", "assistant", "Max", "2026-03-11T10:00:00Z",
         "Disk usage alert: the backup volume on db-2 is at 91 percent of its capacity."),
        ("a2", "assistant", "Max", "2026-03-11T10:02:00Z",
         "Disk usage alert cleared after the old backup volume snapshots were pruned."),
    ],
    "notes/grinder.jsonl": [
        (f"g{n}{part}", role, speaker, f"2026-03-13T08:{n * 3 + (part == 'b'):02d}:00Z", text)
        for n, (question, answer) in enumerate(
            [
                ("How fine a grind for espresso?", "Set the coffee grinder to step 4 for espresso."),
                ("And for a pour-over coffee?", "Use step 18 on the coffee grinder for pour-over coffee."),
                ("Why does my coffee taste sour?", "Sour coffee means under-extraction; grind the coffee finer."),
                ("Why does my coffee taste bitter?", "Bitter coffee means over-extraction; grind the coffee coarser."),
                ("How often should I clean the coffee grinder?", "Clean the coffee grinder burrs every two weeks."),
                ("Which coffee beans for a french press?", "A medium roast, ground coarse, suits a french press."),
                ("How much coffee per cup?", "About 15 grams of coffee for a 250 ml cup."),
                ("Should coffee beans go in the fridge?", "No, keep coffee beans airtight at room temperature."),
            ]
        )
        for part, role, speaker, text in (("a", "user", "Ola", question), ("b", "assistant", "Max", answer))
    ],
}


def write_corpus(root: Path, corpus: dict[str, list[tuple[str, str, str, str, str]]]) -> None:
    """Generic JSONL files, one line per message."""
    for relative, messages in corpus.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [
            json.dumps({"id": mid, "role": role, "speaker": speaker, "timestamp": ts, "content": text})
            for mid, role, speaker, ts, text in messages
        ]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class IndexedCorpus:
    """CORPUS indexed into a warehouse; tests only read it (searches append to its search log)."""

    root: Path
    config: Path  # sessionmem.toml naming the warehouse, the source root and the time zone
    settings: Settings  # loaded from `config`, without the environment


@pytest.fixture(scope="session")
def indexed_corpus(tmp_path_factory: pytest.TempPathFactory) -> IndexedCorpus:
    """CORPUS, indexed once with the offline embedder, in the time zone CORPUS_TIMEZONE."""
    from sessionmem_pipeline.stages.run import index_sources  # the whole pipeline: imported only when used

    base = tmp_path_factory.mktemp("corpus")
    write_corpus(base / "sources", CORPUS)
    config = base / "sessionmem.toml"
    config.write_text(
        f'warehouse = "w.duckdb"\nsources = ["sources"]\ntimezone = "{CORPUS_TIMEZONE}"\n', encoding="utf-8"
    )
    settings = load_settings(config, env={}, cwd=base, home=base)
    index_sources(settings)
    return IndexedCorpus(base / "sources", config, settings)
