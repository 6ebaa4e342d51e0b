"""Quality of session recaps (the session-start hook's handoff) on real public Claude Code and Codex sessions.

    python -m benchmarks.recap [--json] [--budget N] [--show FILE]

The set is `benchmarks/recap_set/`: twelve real sessions from public repositories (provenance.json) with hand
labels written before the recap code was tuned (labels.json): the goal, whether the session finished, what was
achieved and what was left open, each as key terms that occur literally in the transcript. Each file is parsed
with the ingest parsers (`parse_file`) and recapped with `recap_session`, as `sessionmem recap` and the hook do
from the warehouse's messages; the warehouse also has chunk vectors (MiniLM), here centrality falls back to
TF-IDF, and there are no earlier summaries or memories, so novelty is 1 for every chunk.

Scores per session: goal coverage (share of goal terms in the recap text), outcome coverage (share of the achieved
and left-open terms), whether the recap claims the session ended mid-work and whether that is false (the session
finished), and the recap's tokens (cl100k). A term matches case-insensitively, as a whole word when it is one word.
Tune on the `tune` half; the `report` half is the honest number.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from sessionmem_pipeline.core.formats import parse_file
from sessionmem_pipeline.core.recap import DEFAULT_BUDGET, Recap, recap_session

SET_DIR = Path(__file__).resolve().parent / "recap_set"
HALVES = ("tune", "report")
_ONE_WORD = re.compile(r"^\w+$")


@dataclass(frozen=True)
class SessionScore:
    file: str
    split: str
    finished: bool
    goal_coverage: float
    outcome_coverage: float
    claims_mid_work: bool
    tokens: int
    missed_goal: tuple[str, ...]
    missed_outcome: tuple[str, ...]

    @property
    def false_mid_work(self) -> bool:
        return self.claims_mid_work and self.finished


def term_found(term: str, text: str) -> bool:
    """Case-insensitive; a single word must stand alone (so "PATH" is not found in "paths")."""
    if _ONE_WORD.match(term):
        return re.search(rf"(?<!\w){re.escape(term)}(?!\w)", text, re.IGNORECASE) is not None
    return term.lower() in text.lower()


def recap_file(path: Path, budget: int) -> Recap:
    """The recap of the file's main session (the one with the most messages), as ingest parses it."""
    result = parse_file(str(path), str(path.parent), path.read_bytes(), final=True)
    if not result.sessions:
        raise ValueError(f"{path.name} yielded no session: {result.skipped or result.warnings[:3]}")
    session = max(result.sessions, key=lambda s: len(s.messages))
    return recap_session(session.messages, budget=budget)


def score(label: dict, recap: Recap) -> SessionScore:
    outcome_terms = [*label["achieved"], *label["left_open"]]
    missed_goal = tuple(t for t in label["goal"] if not term_found(t, recap.text))
    missed_outcome = tuple(t for t in outcome_terms if not term_found(t, recap.text))
    return SessionScore(
        file=label["file"],
        split=label["split"],
        finished=label["finished"],
        goal_coverage=1 - len(missed_goal) / len(label["goal"]),
        outcome_coverage=1 - len(missed_outcome) / len(outcome_terms),
        claims_mid_work=recap.ended_abruptly,
        tokens=recap.token_count,
        missed_goal=missed_goal,
        missed_outcome=missed_outcome,
    )


def _table(scores: list[SessionScore]) -> str:
    rows = [f"{'session':32} {'goal':>5} {'outcome':>7} {'mid-work':>8} {'tokens':>6}  missed"]
    for s in scores:
        claim = ("FALSE" if s.false_mid_work else "yes") if s.claims_mid_work else ("no" if s.finished else "MISSED")
        missed = ", ".join([*s.missed_goal, *(f"+{t}" for t in s.missed_outcome)])
        rows.append(
            f"{s.file.removesuffix('.jsonl'):32} {s.goal_coverage:5.2f} {s.outcome_coverage:7.2f} {claim:>8} "
            f"{s.tokens:6d}  {missed}"
        )
    rows.append(
        f"{'mean':32} {statistics.mean(s.goal_coverage for s in scores):5.2f} "
        f"{statistics.mean(s.outcome_coverage for s in scores):7.2f} "
        f"{sum(s.false_mid_work for s in scores):>6} F {statistics.mean(s.tokens for s in scores):6.0f}"
    )
    return "\n".join(rows)


def summary(scores: list[SessionScore]) -> dict:
    return {
        "sessions": len(scores),
        "goal_coverage": round(statistics.mean(s.goal_coverage for s in scores), 3),
        "outcome_coverage": round(statistics.mean(s.outcome_coverage for s in scores), 3),
        "false_mid_work": sum(s.false_mid_work for s in scores),
        "missed_mid_work": sum(1 for s in scores if not s.finished and not s.claims_mid_work),
        "mean_tokens": round(statistics.mean(s.tokens for s in scores)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET, help=f"recap token budget ({DEFAULT_BUDGET})")
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")
    parser.add_argument("--show", metavar="FILE", help="also print the recap of this file of the set")
    args = parser.parse_args(argv)
    labels = json.loads((SET_DIR / "labels.json").read_text(encoding="utf-8"))["sessions"]
    scores = []
    for label in labels:
        recap = recap_file(SET_DIR / label["file"], args.budget)
        scores.append(score(label, recap))
        if args.show and args.show in label["file"]:
            print(recap.text, file=sys.stderr)
    halves = {half: [s for s in scores if s.split == half] for half in HALVES}
    if args.json:
        print(json.dumps({h: {"summary": summary(v), "sessions": [asdict(s) for s in v]} for h, v in halves.items()}))
        return 0
    for half, half_scores in halves.items():
        print(f"\n## {half} half (goal/outcome: share of labelled terms in the recap; mid-work: FALSE = wrong claim)")
        print(_table(half_scores))
    return 0


if __name__ == "__main__":
    sys.exit(main())
