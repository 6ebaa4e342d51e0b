"""Quality of the offline (extractive) session summarizer, next to two baselines of the same length.

    python benchmarks/summaries.py [--json] [--bench DIR] [--seeds N]

1. LoCoMo dev split (../shared/bench/locomo-dev, read in place, never copied): every session with a reference
   summary is parsed and collapsed as the pipeline does, summarized with `summarize_session` (no LLM), and
   the summary's searchable text (`text_for_embedding()`) is scored against the reference: ROUGE-1/2/L
   recall, precision and F1 (lowercase alphanumeric tokens, no stemming), and key-term coverage: the share
   of reference sentences at least half of whose key terms (content words other than the speakers' names)
   occur in the summary.
2. The repository's transcript fixtures, hand-labelled below (`FIXTURE_LABELS`): per field (files modified,
   decisions, open items), the share of labelled items the field names (recall) and the share of its items
   that name a labelled one (precision).

Baselines: lead-N (the transcript's first sentences, each with its speaker, as the summary's key points have)
and random-N (random sentences in transcript order, averaged over `--seeds` seeds). On LoCoMo they are cut to
exactly the summary's word count; on the fixtures they list as many sentences as the summary lists items in
that field (the fixtures are so short that a same-length excerpt would be the whole transcript). Ratios are
the summarizer's score over each baseline's, from the same run.

Both sets are in-sample: the extractive summarizer was developed looking at them (on LoCoMo only TextRank
against centroid scoring and a position-spread selection were compared: within 0.005 of each other, the
simplest kept). The other eight LoCoMo conversations are the honest check. At extractive-v1 (173 words on
average against references of 138): ROUGE-1 recall 0.409 (lead-N 0.378, random-N 0.389), ROUGE-2 recall
0.111 (0.072, 0.069), ROUGE-L recall 0.246 (0.218, 0.227), key-term coverage 0.260 (0.208, 0.174).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sessionmem_pipeline.core.collapse import collapse_messages
from sessionmem_pipeline.core.formats import parse_file
from sessionmem_pipeline.core.models import CollapsedMessage
from sessionmem_pipeline.core.summarize import EXTRACTIVE_MODEL, summarize_session

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BENCH = ROOT.parent / "shared" / "bench" / "locomo-dev"
FIXTURES = ROOT / "tests" / "fixtures" / "transcripts"

# What a reader of each fixture session should learn from its summary, labelled from the transcripts. Open items
# are requests left unanswered, work announced and not done, and tool calls cut off or failing at the end. A
# phrase counts as found when it occurs (case-insensitively) in one of the field's items.
FIXTURE_LABELS: dict[str, dict[str, list[str]]] = {
    "claude_code/-home-dev-shop/5c1e7d2a-8b3f-4e61-9a0d-2f4b6c8e1a37.jsonl": {
        "files_modified": ["src/shop/cart.py", "tests/test_cart.py"],
        "decisions": ["half-up"],
        "open_items": ["normalise the currency code", "npm test"],
    },
    "claude_code/-home-dev-legacy-api/0b9e4c11-6d2a-4f3b-8e57-1c9a3d5f7b20.jsonl": {
        "files_modified": ["api/ratelimit.py"],
        "decisions": ["lives in redis"],
        "open_items": ["add the middleware"],
    },
    "claude_code/-home-dev-blog/9d4a2f61-3c8e-4b7d-a1f0-6e5b8c2d9a14.jsonl": {
        "files_modified": ["src/styles/global.css"],
        "decisions": [],
        "open_items": [],
    },
    "codex/2026/02/24/rollout-2026-02-24T10-02-11-019c8f2e-5a71-7b02-8c3d-4e5f60718293.jsonl": {
        "files_modified": ["src/notes/sync.py"],
        "decisions": [],
        "open_items": ["regression test", "grep -n"],
    },
    "codex/2025/09/25/rollout-2025-09-24T20-12-23-01997ea4-2b1c-7d3e-9f40-5a6b7c8d9e0f.jsonl": {
        "files_modified": ["ledger/cli.py"],
        "decisions": [],
        "open_items": ["xlsx", "import openpyxl"],
    },
    "codex/2025/08/12/rollout-2025-08-12T16-30-00-4f2e8d1c-9a7b-4c3d-8e5f-6a7b8c9d0e1f.jsonl": {
        "files_modified": [],
        "decisions": [],
        "open_items": [],
    },
    "generic/team-sync/2026-01-15.jsonl#1": {
        "files_modified": [],
        "decisions": ["03:00"],
        "open_items": ["cron entry", "analytics team"],
    },
    "generic/team-sync/2026-01-15.jsonl#2": {"files_modified": [], "decisions": [], "open_items": ["run log"]},
    "openai_chat/support/refund-request.json": {
        "files_modified": [],
        "decisions": [],
        "open_items": ["refund number"],
    },
    "openai_chat/agent-run.jsonl": {"files_modified": [], "decisions": ["dropping 5.7"], "open_items": []},
}

_TOKEN = re.compile(r"[a-z0-9]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_STOP = frozenset(
    """
    a about after again all also am an and any are as at be because been before being both but by can could did do
    does doing during each few for from had has have having he her here hers him his how i if in into is it its
    just me more most my no nor not now of off on once only or other our out over own same she should so some such
    than that the their them then there these they this those through to too under until up very was we were what
    when where which while who whom why will with would you your yours yourself she's he's it's that's they're
    told said mentioned shared asked talked also really about
    """.split()
)


# ---- loading --------------------------------------------------------------------------------------------------


def load_sessions(path: Path, root: Path) -> dict[str, list[CollapsedMessage]]:
    """Every session in a transcript file, parsed and collapsed as the pipeline does."""
    result = parse_file(str(path), str(root), path.read_bytes(), final=True)
    return {session.session_id: collapse_messages(session.messages) for session in result.sessions}


def transcript_sentences(messages: Sequence[CollapsedMessage]) -> list[str]:
    """The baselines' material: each sentence of what the user and assistant wrote, with its speaker."""
    sentences = []
    for message in messages:
        if message.kind != "message" or message.role not in ("user", "assistant"):
            continue
        for line in message.text.splitlines():
            sentences += [f"{message.speaker}: {s.strip()}" for s in _SENTENCE_END.split(line) if s.strip()]
    return sentences


# ---- baselines ------------------------------------------------------------------------------------------------


def cut_to_words(sentences: Sequence[str], words: int) -> str:
    """The sentences in order, cut to exactly `words` words (fewer when the transcript is shorter)."""
    return " ".join(" ".join(sentences).split()[:words])


def lead_baseline(sentences: Sequence[str], words: int) -> str:
    return cut_to_words(sentences, words)


def random_baseline(sentences: Sequence[str], words: int, seed: int) -> str:
    """Random sentences in transcript order until `words` words, cut there."""
    order = list(range(len(sentences)))
    random.Random(seed).shuffle(order)
    chosen: list[int] = []
    total = 0
    for index in order:
        if total >= words:
            break
        chosen.append(index)
        total += len(sentences[index].split())
    return cut_to_words([sentences[i] for i in sorted(chosen)], words)


# ---- metrics --------------------------------------------------------------------------------------------------


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def _prf(overlap: int, system: int, reference: int) -> tuple[float, float, float]:
    recall = overlap / reference if reference else 0.0
    precision = overlap / system if system else 0.0
    f1 = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
    return recall, precision, f1


def ngrams(words: list[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def rouge_n(system: list[str], reference: list[str], n: int) -> tuple[float, float, float]:
    sys_grams, ref_grams = ngrams(system, n), ngrams(reference, n)
    overlap = sum(min(count, sys_grams[gram]) for gram, count in ref_grams.items())
    return _prf(overlap, sum(sys_grams.values()), sum(ref_grams.values()))


def rouge_l(system: list[str], reference: list[str]) -> tuple[float, float, float]:
    """ROUGE-L over the whole texts: the longest common subsequence of their tokens."""
    previous = [0] * (len(reference) + 1)
    for word in system:
        current = [0]
        for j, ref_word in enumerate(reference, start=1):
            current.append(previous[j - 1] + 1 if word == ref_word else max(previous[j], current[j - 1]))
        previous = current
    return _prf(previous[-1], len(system), len(reference))


def key_term_coverage(summary: str, reference: str, names: set[str]) -> float:
    """The share of reference sentences at least half of whose key terms occur in the summary."""
    present = set(tokens(summary))
    covered = total = 0
    for sentence in _SENTENCE_END.split(reference):
        terms = {t for t in tokens(sentence) if len(t) >= 3 and t not in _STOP and t not in names}
        if not terms:
            continue
        total += 1
        covered += len(terms & present) >= len(terms) / 2
    return covered / total if total else 0.0


METRICS = ("R1-R", "R1-P", "R1-F", "R2-R", "R2-F", "RL-R", "RL-F", "terms")


def score(summary: str, reference: str, names: set[str]) -> dict[str, float]:
    system, ref = tokens(summary), tokens(reference)
    r1, r2, rl = rouge_n(system, ref, 1), rouge_n(system, ref, 2), rouge_l(system, ref)
    values = (r1[0], r1[1], r1[2], r2[0], r2[2], rl[0], rl[2], key_term_coverage(summary, reference, names))
    return dict(zip(METRICS, values))


# ---- runs -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    method: str
    sessions: int
    words: float
    scores: dict[str, float]


def _mean_scores(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    return {metric: statistics.fmean(row[metric] for row in rows) for metric in rows[0]}


def locomo(bench: Path, seeds: int) -> list[Row]:
    references = [json.loads(line) for line in (bench / "session_summaries.jsonl").read_text().splitlines() if line]
    per_method: dict[str, list[dict[str, float]]] = {EXTRACTIVE_MODEL: [], "lead-N": [], "random-N": []}
    words: list[int] = []
    for reference in references:
        path = bench / "sessions" / reference["conv_id"] / f"{reference['session_id']}.jsonl"
        messages = load_sessions(path, bench / "sessions")[reference["session_id"]]
        names = {t for m in messages for t in tokens(m.speaker)}
        text = summarize_session(messages).text_for_embedding()
        count = len(text.split())
        words.append(count)
        sentences = transcript_sentences(messages)
        per_method[EXTRACTIVE_MODEL].append(score(text, reference["summary"], names))
        per_method["lead-N"].append(score(lead_baseline(sentences, count), reference["summary"], names))
        randoms = [score(random_baseline(sentences, count, seed), reference["summary"], names) for seed in range(seeds)]
        per_method["random-N"].append(_mean_scores(randoms))
    mean_words = statistics.fmean(words)
    return [Row(method, len(references), mean_words, _mean_scores(rows)) for method, rows in per_method.items()]


def _fixture_sessions() -> list[tuple[str, list[CollapsedMessage]]]:
    sessions = []
    for key in FIXTURE_LABELS:
        relative, _, split = key.partition("#")
        path = FIXTURES / relative
        found = load_sessions(path, FIXTURES / relative.split("/")[0])
        wanted = [sid for sid in found if not split or sid.endswith(f"#{split}")]
        if len(wanted) != 1:
            raise SystemExit(f"{key}: expected one session, found {sorted(found)}")
        sessions.append((key, found[wanted[0]]))
    return sessions


FIELDS = ("files_modified", "decisions", "open_items")


def _matches(items: Sequence[str], gold: Sequence[str]) -> tuple[int, int]:
    """(gold phrases found in some item, items that contain some gold phrase)."""
    lowered = [item.lower() for item in items]
    found = sum(any(phrase.lower() in item for item in lowered) for phrase in gold)
    relevant = sum(any(phrase.lower() in item for phrase in gold) for item in lowered)
    return found, relevant


def fixtures(seeds: int) -> list[dict[str, Any]]:
    """Per field, recall (labelled items found) and precision (listed items that are labelled ones). Each
    baseline lists as many transcript sentences as the summarizer listed items in that field."""
    counts: dict[str, Counter[str]] = {method: Counter() for method in (EXTRACTIVE_MODEL, "lead-N", "random-N")}
    for key, messages in _fixture_sessions():
        summary = summarize_session(messages)
        sentences = transcript_sentences(messages)
        for field in FIELDS:
            gold, items = FIXTURE_LABELS[key][field], list(getattr(summary, field))
            size = min(len(items), len(sentences))
            runs = {
                EXTRACTIVE_MODEL: [items],
                "lead-N": [sentences[:size]],
                "random-N": [random.Random(seed).sample(sentences, size) for seed in range(seeds)],
            }
            for method, lists in runs.items():
                results = [_matches(listed, gold) for listed in lists]
                counts[method][f"{field}/found"] += statistics.fmean(found for found, _ in results)
                counts[method][f"{field}/relevant"] += statistics.fmean(relevant for _, relevant in results)
                counts[method][f"{field}/gold"] += len(gold)
                counts[method][f"{field}/listed"] += len(items)
    rows = []
    for method, count in counts.items():
        row: dict[str, Any] = {"method": method}
        for field in FIELDS:
            gold, listed = count[f"{field}/gold"], count[f"{field}/listed"]
            row[f"{field}_recall"] = count[f"{field}/found"] / gold if gold else 1.0
            row[f"{field}_precision"] = count[f"{field}/relevant"] / listed if listed else 1.0
        rows.append(row)
    return rows


# ---- output ---------------------------------------------------------------------------------------------------


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def print_tables(rows: list[Row], fixture_rows: list[dict[str, Any]], seeds: int) -> None:
    print(f"LoCoMo dev: {rows[0].sessions} sessions vs the benchmark's reference summaries (random-N: {seeds} seeds)")
    print(f"{'method':<16}{'words':>7}" + "".join(f"{m:>8}" for m in METRICS))
    for row in rows:
        print(f"{row.method:<16}{row.words:>7.1f}" + "".join(f"{row.scores[m]:>8.3f}" for m in METRICS))
    ours = rows[0].scores
    for row in rows[1:]:
        print(f"{'/ ' + row.method:<16}{'':>7}" + "".join(f"{_ratio(ours[m], row.scores[m]):>8}" for m in METRICS))
    print()
    print(
        f"Fixtures: {len(FIXTURE_LABELS)} sessions, hand-labelled; recall / precision per field (baselines list as "
        "many sentences as the summary lists items)"
    )
    print(f"{'method':<16}" + "".join(f"{field:>20}" for field in FIELDS))
    for row in fixture_rows:
        cells = [f"{row[f'{field}_recall']:.2f} / {row[f'{field}_precision']:.2f}" for field in FIELDS]
        print(f"{row['method']:<16}" + "".join(f"{cell:>20}" for cell in cells))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--bench", type=Path, default=DEFAULT_BENCH, help="the LoCoMo dev folder")
    parser.add_argument("--seeds", type=int, default=10, help="random baselines averaged per session")
    args = parser.parse_args(argv)
    if not (args.bench / "session_summaries.jsonl").is_file():
        print(f"{args.bench}: no session_summaries.jsonl; pass --bench DIR", file=sys.stderr)
        return 1
    rows = locomo(args.bench, args.seeds)
    fixture_rows = fixtures(args.seeds)
    if args.json:
        print(json.dumps({"locomo": [row.__dict__ for row in rows], "fixtures": fixture_rows}, indent=2))
    else:
        print_tables(rows, fixture_rows, args.seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
