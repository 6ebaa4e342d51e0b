"""Secret redaction quality: catch rate on a corpus of realistic secrets, false positives on ordinary code and prose.

    python benchmarks/redaction.py          # a table, then every miss and every clean line that was altered
    python benchmarks/redaction.py --json   # the same figures as JSON (tests/test_redact.py reads this)

Corpora (tests/fixtures/redaction/):
- secrets.txt: one entry per line, or a block between `<<<` and `>>>` lines; each secret is marked ⟦kind:value⟧.
  An entry is caught when every marked span is covered by a redaction; its kind is right when the placeholder's
  kind is the marked one.
- clean.txt: one line each of code and prose that must come out of `redact` unchanged (`## ` lines are comments).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sessionmem_pipeline.core.redact import find_secrets, redact

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "redaction"
MARKER = re.compile(r"⟦([a-z-]+):([^⟧]+)⟧")


@dataclass(frozen=True)
class MarkedSecret:
    kind: str
    start: int
    end: int


@dataclass(frozen=True)
class SecretEntry:
    line: int  # 1-based line in secrets.txt where the entry starts
    text: str  # markers removed
    secrets: tuple[MarkedSecret, ...]


@dataclass
class RedactionScore:
    secret_entries: int = 0
    caught: int = 0
    kind_correct: int = 0
    clean_lines: int = 0
    clean_altered: int = 0
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    misses: list[str] = field(default_factory=list)
    wrong_kinds: list[str] = field(default_factory=list)
    false_positives: list[str] = field(default_factory=list)

    @property
    def catch_rate(self) -> float:
        return self.caught / self.secret_entries if self.secret_entries else 0.0

    @property
    def kind_accuracy(self) -> float:
        return self.kind_correct / self.secret_entries if self.secret_entries else 0.0


def _unmark(raw: str, path: Path, line: int) -> SecretEntry:
    text_parts: list[str] = []
    secrets: list[MarkedSecret] = []
    position = length = 0
    for m in MARKER.finditer(raw):
        text_parts.append(raw[position : m.start()])
        length += m.start() - position
        secrets.append(MarkedSecret(m.group(1), length, length + len(m.group(2))))
        text_parts.append(m.group(2))
        length += len(m.group(2))
        position = m.end()
    text_parts.append(raw[position:])
    if not secrets:
        raise ValueError(f"{path}:{line}: entry has no ⟦kind:value⟧ marker; mark its secret")
    return SecretEntry(line, "".join(text_parts), tuple(secrets))


def load_secret_entries(path: Path) -> list[SecretEntry]:
    """The entries of a secrets corpus, markers removed and secret spans recorded."""
    entries: list[SecretEntry] = []
    block: list[str] | None = None
    block_start = 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if block is not None:
            if line == ">>>":
                entries.append(_unmark("\n".join(block), path, block_start))
                block = None
            else:
                block.append(line)
        elif line == "<<<":
            block, block_start = [], number
        elif line.strip() and not line.startswith("## "):
            entries.append(_unmark(line, path, number))
    if block is not None:
        raise ValueError(f"{path}:{block_start}: block opened with <<< is never closed with >>>")
    return entries


def load_clean_lines(path: Path) -> list[tuple[int, str]]:
    """Numbered lines of a clean corpus, comments and blank lines left out."""
    return [
        (number, line)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if line.strip() and not line.startswith("## ")
    ]


def score(entries: list[SecretEntry], clean: list[tuple[int, str]]) -> RedactionScore:
    result = RedactionScore(secret_entries=len(entries), clean_lines=len(clean))
    by_kind: dict[str, dict[str, int]] = defaultdict(lambda: {"entries": 0, "caught": 0})
    for entry in entries:
        found = find_secrets(entry.text)
        covered = all(any(f.start <= s.start and s.end <= f.end for f in found) for s in entry.secrets)
        kinds_right = covered and all(
            any(f.start <= s.start and s.end <= f.end and f.kind == s.kind for f in found) for s in entry.secrets
        )
        for kind in {s.kind for s in entry.secrets}:
            by_kind[kind]["entries"] += 1
            by_kind[kind]["caught"] += int(covered)
        result.caught += int(covered)
        result.kind_correct += int(kinds_right)
        if not covered:
            result.misses.append(f"secrets.txt:{entry.line}: {redact(entry.text)}")
        elif not kinds_right:
            result.wrong_kinds.append(f"secrets.txt:{entry.line}: {redact(entry.text)}")
    for number, line in clean:
        redacted = redact(line)
        if redacted != line:
            result.clean_altered += 1
            result.false_positives.append(f"clean.txt:{number}: {redacted}")
    result.by_kind = dict(sorted(by_kind.items()))
    return result


def _table(result: RedactionScore) -> str:
    rows = [
        ("secret entries", str(result.secret_entries)),
        ("caught (fully redacted)", f"{result.caught} ({result.catch_rate:.1%})"),
        ("caught with the right kind", f"{result.kind_correct} ({result.kind_accuracy:.1%})"),
        ("clean lines", str(result.clean_lines)),
        ("clean lines altered", str(result.clean_altered)),
    ]
    rows += [(f"  {kind}", f"{c['caught']}/{c['entries']}") for kind, c in result.by_kind.items()]
    width = max(len(name) for name, _ in rows)
    lines = [f"{'measure'.ljust(width)}  value", f"{'-' * width}  -----"]
    lines += [f"{name.ljust(width)}  {value}" for name, value in rows]
    listings = (("missed", result.misses), ("wrong kind", result.wrong_kinds), ("altered", result.false_positives))
    for title, items in listings:
        if items:
            lines.append(f"\n{title}:")
            lines += [f"  {item}" for item in items]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--fixtures", type=Path, default=FIXTURES, help="folder holding secrets.txt and clean.txt")
    args = parser.parse_args(argv)
    result = score(load_secret_entries(args.fixtures / "secrets.txt"), load_clean_lines(args.fixtures / "clean.txt"))
    if args.json:
        payload = asdict(result) | {"catch_rate": result.catch_rate, "kind_accuracy": result.kind_accuracy}
        print(json.dumps(payload, indent=2, ensure_ascii=False))
    else:
        print(_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
