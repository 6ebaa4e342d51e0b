"""Quality of the offline (extractive) session summarizer on two domains, next to baselines of the same length.

    python benchmarks/summaries.py --dataset PATH [--bench DIR] [--seeds N] [--json]

Summaries are scored against human reference summaries with ROUGE-1/2/L (lowercase alphanumeric tokens, no
stemming) and key-term coverage (the share of reference sentences at least half of whose content words, other
than the speakers' names, occur in the summary). The summary scored is its prose (`summary_prose`: overview,
decisions, key points, open items), as a person reads it; topic tags, files and tools are metadata, not
sentences (with the tags, SAMSum tune R1-F over lead was 0.92x instead of 0.99x at this commit's first run).

1. LoCoMo dev (../shared/bench/locomo-dev, read in place, never copied; CC BY-NC 4.0): 38 sessions of two long
   conversations, each parsed and collapsed as the pipeline does, against the benchmark's own session summaries.
2. SAMSum test split (Gliwa et al. 2019, "SAMSum Corpus: A Human-annotated Dialogue Dataset for Abstractive
   Summarization"; 819 messenger-like dialogues written by linguists, each with a human summary). Its licence,
   CC BY-NC-ND 4.0, forbids redistributing it here: pass your own copy with `--dataset`. The copy measured was
   data/samsum/test.csv of github.com/BinWang28/LA-BART at commit 10db0f0ca99970aefc6e547b2c3c56ab4c161e66
   (columns id, summary, dialogue; sha256 0ae3ed7bf18b9eee2646267001314597c9b7e0def3f30823f8458264711a59de),
   the same dialogues as test.json in the authors' corpus.7z (https://arxiv.org/src/1911.12237v2/anc/corpus.7z).
   Each dialogue becomes an OpenAI chat session (`name` is the speaker; the first speaker's lines are `user`, the
   others `assistant`, as in LoCoMo) and goes through the same parser and collapsing.
3. The repository's transcript fixtures, hand-labelled below (`FIXTURE_LABELS`): per field (files modified,
   decisions, open items), the share of labelled items the field names (recall) and the share of its items
   that name a labelled one (precision).

Baselines: lead-N (the transcript's first sentences, each with its speaker, as the summary's key points have)
and random-N (random sentences in transcript order, averaged over `--seeds` seeds), each cut to exactly the
summary's number of ROUGE tokens, so precision and recall trade off alike. On the fixtures they list as many
sentences as the summary lists items in that field (the fixtures are so short that a same-length excerpt would
be the whole transcript). Ratios are the summarizer's score over each baseline's, from the same run.

Tuning discipline: each dataset is split in two halves, `tune` (LoCoMo conv-26; SAMSum's dialogues at even
positions) and `report` (conv-30; odd positions). Constants of the extractive summarizer were chosen looking at
the tune halves only; the report halves are the estimate for unseen conversations. Both are printed. For
extractive-v3 (statements told in the third person, overview topics that recur, no questions as key points,
no who-only sentence for an undated two-person chat) every choice was measured on the tune halves; the report
halves were run once, at the end.
"""

from __future__ import annotations

import argparse
import csv
import io
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script or with -m, from any folder

from benchmarks.bench_data import LOCOMO_DEV, LOCOMO_SOURCE, require  # noqa: E402
from sessionmem_pipeline.core.collapse import collapse_messages
from sessionmem_pipeline.core.formats import parse_file
from sessionmem_pipeline.core.models import CollapsedMessage
from sessionmem_pipeline.core.summarize import EXTRACTIVE_MODEL, SessionSummary, summarize_session

ROOT = Path(__file__).resolve().parent.parent
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


def cut_to_tokens(sentences: Sequence[str], count: int) -> str:
    """The sentences in order, cut to exactly `count` ROUGE tokens (fewer when the transcript is shorter)."""
    return " ".join(tokens(" ".join(sentences))[:count])


def lead_baseline(sentences: Sequence[str], count: int) -> str:
    return cut_to_tokens(sentences, count)


def random_baseline(sentences: Sequence[str], count: int, seed: int) -> str:
    """Random sentences in transcript order until `count` ROUGE tokens, cut there."""
    order = list(range(len(sentences)))
    random.Random(seed).shuffle(order)
    chosen: list[int] = []
    total = 0
    for index in order:
        if total >= count:
            break
        chosen.append(index)
        total += len(tokens(sentences[index]))
    return cut_to_tokens([sentences[i] for i in sorted(chosen)], count)


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


# ---- datasets -------------------------------------------------------------------------------------------------

TUNE, REPORT = "tune", "report"
SAMSUM_SOURCE = (
    "the SAMSum test split (CC BY-NC-ND 4.0, not bundled): data/samsum/test.csv of github.com/BinWang28/LA-BART "
    "or test.json of https://arxiv.org/src/1911.12237v2/anc/corpus.7z, then pass --dataset PATH"
)


@dataclass(frozen=True)
class Case:
    """One session to summarize and the human summary of it."""

    half: str
    messages: list[CollapsedMessage]
    reference: str


def locomo_cases(bench: Path) -> list[Case]:
    """LoCoMo dev sessions with a reference summary; conv-26 is the tune half, conv-30 the report half."""
    references = [json.loads(line) for line in (bench / "session_summaries.jsonl").read_text().splitlines() if line]
    cases = []
    for reference in references:
        path = bench / "sessions" / reference["conv_id"] / f"{reference['session_id']}.jsonl"
        messages = load_sessions(path, bench / "sessions")[reference["session_id"]]
        half = TUNE if reference["conv_id"] == "conv-26" else REPORT
        cases.append(Case(half, messages, reference["summary"]))
    return cases


def _samsum_rows(path: Path) -> list[dict[str, str]]:
    """id, dialogue and summary of each dialogue, from the corpus' JSON list or a CSV with those columns."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(text)
    return list(csv.DictReader(io.StringIO(text)))


_SPEAKER_LINE = re.compile(r"^\s*([^:\n]{1,40}):\s?(.*)$")


def dialogue_session(dialogue_id: str, dialogue: str) -> bytes:
    """A SAMSum dialogue ("Name: text" per line) as an OpenAI chat JSONL session (the format of an undated chat
    log; `name` is the speaker): the first speaker's lines are the user's."""
    lines = []
    first_speaker = None
    for line in dialogue.splitlines():
        match = _SPEAKER_LINE.match(line)
        if not match or not match.group(2).strip():
            continue
        speaker, content = match.group(1).strip(), match.group(2).strip()
        first_speaker = first_speaker or speaker
        role = "user" if speaker == first_speaker else "assistant"
        row = {"role": role, "name": speaker, "content": content}
        lines.append(json.dumps(row, ensure_ascii=False))
    return "\n".join(lines).encode()


def samsum_cases(path: Path) -> list[Case]:
    """SAMSum dialogues in file order; even positions are the tune half, odd ones the report half."""
    cases = []
    for position, row in enumerate(_samsum_rows(path)):
        data = dialogue_session(str(row["id"]), row["dialogue"])
        if not data:
            continue
        result = parse_file(f"samsum/{row['id']}.jsonl", "samsum", data, final=True)
        messages = [m for session in result.sessions for m in collapse_messages(session.messages)]
        cases.append(Case(TUNE if position % 2 == 0 else REPORT, messages, row["summary"]))
    return cases


# ---- runs -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    dataset: str
    half: str
    method: str
    sessions: int
    tokens: float  # mean ROUGE tokens of the summaries (the baselines are cut to the same)
    scores: dict[str, float]


def summary_prose(summary: SessionSummary) -> str:
    return "\n".join([summary.overview, *summary.decisions, *summary.key_points, *summary.open_items])


def _mean_scores(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    return {metric: statistics.fmean(row[metric] for row in rows) for metric in rows[0]}


def evaluate(dataset: str, cases: Sequence[Case], seeds: int) -> list[Row]:
    """Per half, the summarizer and both baselines of the same length, averaged over the half's sessions."""
    rows = []
    for half in (TUNE, REPORT):
        per_method: dict[str, list[dict[str, float]]] = {EXTRACTIVE_MODEL: [], "lead-N": [], "random-N": []}
        lengths: list[int] = []
        chosen = [case for case in cases if case.half == half]
        for case in chosen:
            names = {t for m in case.messages for t in tokens(m.speaker)}
            text = summary_prose(summarize_session(case.messages))
            count = len(tokens(text))
            lengths.append(count)
            sentences = transcript_sentences(case.messages)
            per_method[EXTRACTIVE_MODEL].append(score(text, case.reference, names))
            per_method["lead-N"].append(score(lead_baseline(sentences, count), case.reference, names))
            randoms = [random_baseline(sentences, count, seed) for seed in range(seeds)]
            per_method["random-N"].append(_mean_scores([score(r, case.reference, names) for r in randoms]))
        mean_length = statistics.fmean(lengths)
        for method, scores in per_method.items():
            rows.append(Row(dataset, half, method, len(chosen), mean_length, _mean_scores(scores)))
    return rows


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
    print("ROUGE against human reference summaries; baselines cut to the summary's token count "
          f"(random-N: {seeds} seeds)")
    print(f"{'dataset':<10}{'half':<8}{'method':<15}{'n':>5}{'tokens':>8}" + "".join(f"{m:>8}" for m in METRICS))
    for index, row in enumerate(rows):
        head = f"{row.dataset:<10}{row.half:<8}"
        cells = "".join(f"{row.scores[m]:>8.3f}" for m in METRICS)
        print(f"{head}{row.method:<15}{row.sessions:>5}{row.tokens:>8.1f}{cells}")
        if row.method == "random-N":  # the last of a half: the summarizer's ratios over each baseline
            ours = rows[index - 2].scores
            for baseline in rows[index - 1 : index + 1]:
                ratios = "".join(f"{_ratio(ours[m], baseline.scores[m]):>8}" for m in METRICS)
                print(f"{head}{'/ ' + baseline.method:<15}{'':>13}{ratios}")
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
    parser.add_argument("--bench", type=Path, default=LOCOMO_DEV, help="the LoCoMo dev folder")
    parser.add_argument("--dataset", type=Path, help="SAMSum test split: test.json of the corpus, or a CSV of it")
    parser.add_argument("--seeds", type=int, default=10, help="random baselines averaged per session")
    args = parser.parse_args(argv)
    require([args.dataset], SAMSUM_SOURCE)
    require([args.bench / "session_summaries.jsonl"], LOCOMO_SOURCE)
    rows = evaluate("LoCoMo", locomo_cases(args.bench), args.seeds)
    rows += evaluate("SAMSum", samsum_cases(args.dataset), args.seeds)
    fixture_rows = fixtures(args.seeds)
    if args.json:
        print(json.dumps({"rouge": [row.__dict__ for row in rows], "fixtures": fixture_rows}, indent=2))
    else:
        print_tables(rows, fixture_rows, args.seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
