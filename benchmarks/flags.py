"""Precision and recall of the offline decision / action detectors on the hand-labelled exchanges.

    python benchmarks/flags.py [--json] [--errors] [FILE.jsonl ...]

Without files it reads every tests/fixtures/flags/*.jsonl (one table row per file and detector).
Each line is {"text": ..., "has_decision": bool, "has_action": bool, "tools": [{"name", "category", "command"}]?}.
`--errors` lists the misclassified exchanges, to see what the detectors miss.

The three files were written in order, each before the detectors were run on it: labelled.jsonl (96, the
development set), then holdout.jsonl (40), then fresh.jsonl (40). The figures at first contact, before any
change prompted by that file, are the honest estimate for unseen conversations:

    holdout.jsonl  has_decision  precision 1.000  recall 0.667    has_action  precision 0.818  recall 0.692
    fresh.jsonl    has_decision  precision 1.000  recall 0.643    has_action  precision 1.000  recall 0.833

Later runs score higher on those files because general cues they revealed were added afterwards (a "must"
clause, "going forward", "X then.", deadlines such as "by end of month", `git branch -D`). The detectors
favour precision: a flag filter that returns unrelated chunks is worse than one that misses a few.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sessionmem_pipeline.core.flags import has_action, has_decision
from sessionmem_pipeline.core.models import ToolRecord

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "flags"


@dataclass(frozen=True)
class Score:
    file: str
    detector: str
    examples: int
    positives: int
    true_positives: int
    false_positives: int
    false_negatives: int

    @property
    def precision(self) -> float:
        flagged = self.true_positives + self.false_positives
        return self.true_positives / flagged if flagged else 1.0

    @property
    def recall(self) -> float:
        return self.true_positives / self.positives if self.positives else 1.0


def load_labelled(path: Path) -> list[dict[str, Any]]:
    """The labelled rows of one file; a malformed line fails with its file:line."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as error:
            raise SystemExit(f"{path}:{number}: not JSON ({error})") from error
        if not (
            isinstance(row, dict)
            and isinstance(row.get("text"), str)
            and isinstance(row.get("has_decision"), bool)
            and isinstance(row.get("has_action"), bool)
        ):
            expected = '{"text": str, "has_decision": bool, "has_action": bool}'
            raise SystemExit(f"{path}:{number}: expected {expected}")
        rows.append(row)
    return rows


def tools_of(row: dict[str, Any]) -> tuple[ToolRecord, ...]:
    return tuple(
        ToolRecord(name=tool["name"], category=tool["category"], line=None, command=tool.get("command"))
        for tool in row.get("tools", ())
    )


def _detectors() -> dict[str, Callable[[dict[str, Any]], bool]]:
    return {
        "has_decision": lambda row: has_decision(row["text"]),
        "has_action": lambda row: has_action(row["text"], tools_of(row)),
    }


def score(path: Path, rows: Sequence[dict[str, Any]]) -> tuple[list[Score], list[tuple[str, dict[str, Any]]]]:
    """Scores per detector, and the misclassified rows as (detector, row)."""
    scores, errors = [], []
    for name, detect in _detectors().items():
        tp = fp = fn = 0
        for row in rows:
            predicted, expected = detect(row), row[name]
            tp += predicted and expected
            fp += predicted and not expected
            fn += expected and not predicted
            if predicted != expected:
                errors.append((name, row))
        positives = sum(bool(row[name]) for row in rows)
        scores.append(Score(path.name, name, len(rows), positives, tp, fp, fn))
    return scores, errors


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="labelled JSONL files (default: tests/fixtures/flags/)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--errors", action="store_true", help="also list the misclassified exchanges")
    args = parser.parse_args(argv)
    files = args.files or sorted(FIXTURES.glob("*.jsonl"))
    all_scores, all_errors = [], []
    for path in files:
        scores, errors = score(path, load_labelled(path))
        all_scores += scores
        all_errors += [(path.name, detector, row) for detector, row in errors]
    if args.json:
        report = [asdict(s) | {"precision": round(s.precision, 3), "recall": round(s.recall, 3)} for s in all_scores]
        json.dump({"scores": report}, sys.stdout, indent=2)
        print()
    else:
        header = ("file", "detector", "n", "pos", "tp", "fp", "fn", "precision", "recall")
        print("{:<16} {:<13} {:>4} {:>4} {:>4} {:>4} {:>4} {:>9} {:>7}".format(*header))
        for s in all_scores:
            print(
                f"{s.file:<16} {s.detector:<13} {s.examples:>4} {s.positives:>4} {s.true_positives:>4} "
                f"{s.false_positives:>4} {s.false_negatives:>4} {s.precision:>9.3f} {s.recall:>7.3f}"
            )
    if args.errors:
        for file, detector, row in all_errors:
            kind = "missed" if row[detector] else "false alarm"
            print(f"\n[{file} {detector}: {kind}]\n{row['text']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
