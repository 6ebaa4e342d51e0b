"""Secret redaction quality: catch rate per kind of secret, false positives per kind of clean look-alike.

    python benchmarks/redaction.py                # per-kind tables on each report half (report16 first: the
                                                  # headline), a line for the tuning side, its misses and false
                                                  # positives, and the stored lines of twelve real sessions
                                                  # (benchmarks/recap_set) that sanitizing at ingest altered
    python benchmarks/redaction.py --baseline main  # also the rules at a git revision, side by side: each half's
                                                  # totals, the headline's kinds, redact() CPU seconds per MB
    python benchmarks/redaction.py --show-misses  # also the report halves' misses and false positives
    python benchmarks/redaction.py --json         # the figures as JSON (tests/test_redact.py reads this)

The report halves' failing lines stay hidden unless asked for, so that reading routine output is not tuning on them.

The corpus (benchmarks/redaction_corpus/, provenance in its README) has folders with the same layout: the report
halves, taken from the published examples and test cases of maintained secret scanners:
`report16/` (the headline: built mechanically and committed before the rules it measures, never seen before its
measurement), `report15/`, `report14/` and `report13/` (versions 22's, 20's and 19's headlines, measured once; their
failures were read since), `report4/` and
`report3/` (the same for versions 7 and 6; their per-kind totals were read after those measurements), `report2/`
(kept for comparison: its per-kind totals were read while tuning version 5), `report5/` to `report12/` (versions
8's to 18's halves; their failures were read while tuning versions 9 to 19, so they are tuning data now, printed
beside the others); and the tuning side:
`tuning/`, written here, and `tuning_from_report/`, the first report half, seen while tuning and so tuning data now.
In each:
- secrets.txt: one entry per line, or a block between `<<<` and `>>>` lines; each secret is marked ⟦kind:value⟧.
  An entry is caught when every marked span is covered by a redaction.
- clean.txt: lines of code, logs and prose that must come out of `redact` unchanged; a `## --- category` comment
  starts a category, other `## ` lines are comments.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from sessionmem_pipeline.core import redact as current_rules
from sessionmem_pipeline.core import sanitize
from sessionmem_pipeline.core.formats import parse_file
from sessionmem_pipeline.core.redact import REDACTION_VERSION, SecretMatch

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "benchmarks" / "redaction_corpus"
REPORTS = {  # `report` is the headline
    "report": ("report16",), "report15": ("report15",), "report14": ("report14",), "report13": ("report13",), "report12": ("report12",), "report11": ("report11",), "report10": ("report10",), "report9": ("report9",), "report8": ("report8",), "report7": ("report7",), "report6": ("report6",), "report5": ("report5",), "report4": ("report4",),
    "report3": ("report3",), "report2": ("report2",),
}
TUNING = ("tuning", "tuning_from_report")
MARKER = re.compile(r"⟦([a-z0-9-]+):([^⟧]+)⟧")
CATEGORY = re.compile(r"^## --- (.+?)(?:\s*---)?\s*(?:\(.*)?$")


@dataclass(frozen=True)
class MarkedSecret:
    kind: str
    start: int
    end: int


@dataclass(frozen=True)
class SecretEntry:
    line: str  # `folder/secrets.txt:N`, where the entry starts
    text: str  # markers removed
    secrets: tuple[MarkedSecret, ...]


@dataclass(frozen=True)
class CleanLine:
    line: str  # `folder/clean.txt:N`
    category: str
    text: str


@dataclass
class HalfScore:
    """One half of the corpus: secrets caught per kind, clean lines altered per category."""

    secrets: int = 0
    caught: int = 0
    clean_lines: int = 0
    clean_altered: int = 0
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    by_category: dict[str, dict[str, int]] = field(default_factory=dict)
    misses: list[str] = field(default_factory=list)
    false_positives: list[str] = field(default_factory=list)

    @property
    def catch_rate(self) -> float:
        return self.caught / self.secrets if self.secrets else 0.0

    @property
    def false_positive_rate(self) -> float:
        return self.clean_altered / self.clean_lines if self.clean_lines else 0.0


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
    return SecretEntry(f"{path.parent.name}/{path.name}:{line}", "".join(text_parts), tuple(secrets))


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


def load_clean_lines(path: Path) -> list[CleanLine]:
    """The lines of a clean corpus with the category each sits under; comments and blank lines left out."""
    lines: list[CleanLine] = []
    category = "uncategorised"
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("## "):
            if m := CATEGORY.match(line):
                category = m.group(1)
        elif line.strip():
            lines.append(CleanLine(f"{path.parent.name}/{path.name}:{number}", category, line))
    return lines


def _is_covered(secret: MarkedSecret, found: list[SecretMatch]) -> bool:
    return any(f.start <= secret.start and secret.end <= f.end for f in found)


def score(entries: list[SecretEntry], clean: list[CleanLine], rules: ModuleType = current_rules) -> HalfScore:
    """The half's figures under `rules` (a module with `find_secrets` and `redact`: these rules, or a baseline's)."""
    find_secrets, redact = rules.find_secrets, rules.redact
    result = HalfScore()
    by_kind: dict[str, dict[str, int]] = defaultdict(lambda: {"secrets": 0, "caught": 0})
    for entry in entries:
        found = find_secrets(entry.text)
        for secret in entry.secrets:
            caught = _is_covered(secret, found)
            by_kind[secret.kind]["secrets"] += 1
            by_kind[secret.kind]["caught"] += int(caught)
            result.secrets += 1
            result.caught += int(caught)
        if not all(_is_covered(secret, found) for secret in entry.secrets):
            result.misses.append(f"{entry.line}: {redact(entry.text)}")
    by_category: dict[str, dict[str, int]] = defaultdict(lambda: {"lines": 0, "altered": 0})
    for clean_line in clean:
        redacted = redact(clean_line.text)
        altered = redacted != clean_line.text
        by_category[clean_line.category]["lines"] += 1
        by_category[clean_line.category]["altered"] += int(altered)
        result.clean_lines += 1
        result.clean_altered += int(altered)
        if altered:
            result.false_positives.append(f"{clean_line.line}: {redacted}")
    result.by_kind = dict(sorted(by_kind.items()))
    result.by_category = dict(by_category)
    return result


def score_half(corpus: Path, folders: tuple[str, ...], rules: ModuleType = current_rules) -> HalfScore:
    """One score over the folders that make up a half."""
    entries = [entry for folder in folders for entry in load_secret_entries(corpus / folder / "secrets.txt")]
    clean = [line for folder in folders for line in load_clean_lines(corpus / folder / "clean.txt")]
    return score(entries, clean, rules)


def baseline_rules(revision: str) -> ModuleType:
    """`core/redact.py` as it was at a git revision, loaded as its own module, to score side by side."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{revision}:sessionmem_pipeline/core/redact.py"],
        capture_output=True, text=True, check=True,
    ).stdout
    module = ModuleType("redact_baseline")
    sys.modules[module.__name__] = module  # its dataclasses look their module up while being built
    exec(compile(source, f"{revision}:sessionmem_pipeline/core/redact.py", "exec"), module.__dict__)
    return module


REAL_SESSIONS = ROOT / "benchmarks" / "recap_set"  # twelve public Claude Code and Codex sessions (its README)


@dataclass
class RealSessionsScore:
    """Stored lines of real sessions that ingest's sanitizing changed: each a false alarm unless a secret was there."""

    lines: int = 0
    altered: list[str] = field(default_factory=list)


@contextmanager
def _sanitizing_with(rules: ModuleType) -> Iterator[None]:
    """core/sanitize.py with `rules`' functions (a baseline without the named-value ones judges each value alone)."""
    functions = {
        "redact": rules.redact,
        "redact_named": getattr(rules, "redact_named", lambda name, value: rules.redact(value)),
        "redact_words": getattr(rules, "redact_words", lambda words: [rules.redact(word) for word in words]),
    }
    saved = {name: getattr(sanitize, name) for name in functions}
    for name, function in functions.items():
        setattr(sanitize, name, function)
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(sanitize, name, function)


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _texts(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _texts(item)


def score_real_sessions(rules: ModuleType = current_rules, folder: Path = REAL_SESSIONS) -> RealSessionsScore:
    """Each session parsed and sanitized as ingest does; every stored text compared line by line with the parsed one."""
    result = RealSessionsScore()
    with _sanitizing_with(rules):
        for path in sorted(folder.glob("*.jsonl")):
            for session in parse_file(str(path), str(folder), path.read_bytes(), final=True).sessions:
                for before, after in zip(_texts(asdict(session)), _texts(asdict(sanitize.sanitize_session(session)))):
                    result.lines += before.count("\n") + 1
                    result.altered += [
                        f"{path.name}: {new.strip()[:200]}" for old, new in zip(before.split("\n"), after.split("\n")) if old != new
                    ]
    return result


def speed_texts(corpus: Path) -> dict[str, str]:
    """About 2 MB each: every corpus file joined and repeated (dense with keys, names and look-alikes), and prose
    with code lines (huge_message.py's text)."""
    dense = "\n".join(path.read_text(encoding="utf-8") for path in sorted(corpus.glob("*/*.txt")))
    sentences = [
        f"Step {n} retried the upload after the proxy reset the connection. "
        + (f"\n    retry(upload, attempts={n})\n" if n % 7 == 0 else "")
        + ("\n\n" if n % 11 == 0 else "")
        for n in range(1, 30_000)
    ]
    return {"corpus": (dense + "\n") * (2_000_000 // len(dense) + 1), "prose": "".join(sentences)}


def cpu_seconds_per_mb(rule_sets: tuple[ModuleType, ...], text: str, rounds: int = 5) -> list[float]:
    """Each rule set's best CPU time of `redact(text)` over `rounds`, per MB (CPU, not wall time: the machine is
    shared; the sets take turns within each round, so a change of load hits them alike)."""
    best = [float("inf")] * len(rule_sets)
    for _ in range(rounds):
        for index, rules in enumerate(rule_sets):
            started = time.process_time()
            rules.redact(text)
            best[index] = min(best[index], time.process_time() - started)
    return [seconds / (len(text.encode()) / 1_000_000) for seconds in best]


def _rows(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    def line(row: tuple[str, ...]) -> str:
        return "  ".join(cell.ljust(width) if i == 0 else cell.rjust(width) for i, (cell, width) in enumerate(zip(row, widths)))
    return [line(header), "  ".join("-" * width for width in widths), *(line(row) for row in rows)]


def _half_tables(name: str, folders: tuple[str, ...], report: HalfScore, baseline: HalfScore | None = None) -> list[str]:
    kinds = [(kind, str(c["secrets"]), str(c["caught"]), f"{c['caught'] / c['secrets']:.0%}") for kind, c in report.by_kind.items()]
    kinds.append(("TOTAL", str(report.secrets), str(report.caught), f"{report.catch_rate:.1%}"))
    header: tuple[str, ...] = ("kind", "secrets", "caught", "catch rate")
    if baseline is not None:  # the baseline's catches beside each kind
        kinds = [(*row, str(baseline.by_kind.get(row[0], {}).get("caught", baseline.caught if row[0] == "TOTAL" else 0))) for row in kinds]
        header = (*header, "baseline caught")
    categories = [
        (category, str(c["lines"]), str(c["altered"]), f"{c['altered'] / c['lines']:.1%}") for category, c in report.by_category.items()
    ]
    categories.append(("TOTAL", str(report.clean_lines), str(report.clean_altered), f"{report.false_positive_rate:.1%}"))
    lines = ["", f"{name} half ({' + '.join(folders)}): {len(report.by_kind)} kinds of secret", ""]
    lines += _rows(header, kinds)
    lines += ["", f"{name} half: clean look-alikes", ""]
    lines += _rows(("category", "lines", "altered", "altered %"), categories)
    return lines


def _summary(key: str, folders: tuple[str, ...], r: HalfScore) -> str:
    return (
        f"{key.upper()} ({' + '.join(folders)}): {r.caught}/{r.secrets} secrets caught ({r.catch_rate:.1%}) over "
        f"{len(r.by_kind)} kinds; {r.clean_altered}/{r.clean_lines} clean lines altered ({r.false_positive_rate:.1%})"
    )


def _real_summary(r: RealSessionsScore) -> str:
    return (
        f"REAL SESSIONS ({REAL_SESSIONS.relative_to(ROOT)}, parsed and sanitized as ingest does): {len(r.altered)}/"
        f"{r.lines} stored lines altered ({len(r.altered) / max(r.lines, 1):.2%})"
    )


def _report(
    reports: dict[str, HalfScore],
    tuning: HalfScore,
    real: RealSessionsScore,
    show_report_misses: bool,
    baseline: tuple[str, dict[str, HalfScore], RealSessionsScore] | None = None,
) -> str:
    lines = [f"redaction rules version {REDACTION_VERSION}"]
    for key, report in reports.items():
        lines += _half_tables(key.upper(), REPORTS[key], report, baseline[1][key] if baseline and key == "report" else None)
    lines += ["", *(_summary(key, REPORTS[key], r) for key, r in reports.items()), "", _summary("tuning side", TUNING, tuning)]
    lines.append(_real_summary(real))
    if baseline:
        label, scores, baseline_real = baseline
        lines += ["", f"BASELINE {label}, the same halves:"]
        lines += [_summary(key, REPORTS.get(key, TUNING), r) for key, r in scores.items()]
        lines.append(_real_summary(baseline_real))
    shown = (*reports.items(), ("tuning", tuning)) if show_report_misses else (("tuning", tuning),)
    for half, result in shown:
        for title, items in (("missed", result.misses), ("altered", result.false_positives)):
            if items:
                lines.append(f"\n{half} {title}:")
                lines += [f"  {item}" for item in items]
    if real.altered:  # public sessions, not a report half: their lines print every time
        lines += ["\nreal sessions altered (a false alarm unless a secret was there):", *(f"  {item}" for item in real.altered)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--show-misses", action="store_true", help="also list the report half's failing lines")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="folder holding the report and tuning folders")
    parser.add_argument("--baseline", metavar="REVISION", help="also score core/redact.py as of this git revision")
    args = parser.parse_args(argv)
    reports = {key: score_half(args.corpus, folders) for key, folders in REPORTS.items()}
    tuning = score_half(args.corpus, TUNING)
    real = score_real_sessions()
    baseline = None
    if args.baseline and not args.json:
        rules = baseline_rules(args.baseline)
        scores = {key: score_half(args.corpus, folders, rules) for key, folders in {**REPORTS, "tuning": TUNING}.items()}
        baseline = (f"{args.baseline} (rules version {rules.REDACTION_VERSION})", scores, score_real_sessions(rules))
    if args.json:
        payload = {
            half: asdict(result) | {"catch_rate": result.catch_rate, "false_positive_rate": result.false_positive_rate}
            for half, result in (*reports.items(), ("tuning", tuning))
        }
        if not args.show_misses:
            for key in reports:
                payload[key] |= {"misses": [], "false_positives": []}
        payload["real_sessions"] = {"lines": real.lines, "altered": len(real.altered), "altered_lines": real.altered}
        print(json.dumps({"redaction_version": REDACTION_VERSION} | payload, indent=2, ensure_ascii=False))
    else:
        print(_report(reports, tuning, real, args.show_misses, baseline))
        if baseline:
            print(f"\nredact() CPU seconds per MB, best of 5 taking turns (version {REDACTION_VERSION} / {baseline[0]}):")
            for name, text in speed_texts(args.corpus).items():
                ours, theirs = cpu_seconds_per_mb((current_rules, rules), text)
                print(f"  {name:7} {len(text) / 1e6:4.1f} MB  {ours:.3f} / {theirs:.3f}  ({ours / theirs - 1:+.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
