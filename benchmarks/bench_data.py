"""Benchmark data that is not bundled (licences): where it is looked for, and one line on where to get it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCOMO_DEV = ROOT.parent / "shared" / "bench" / "locomo-dev"
LOCOMO_SOURCE = (
    "the LoCoMo dev split (2 conversations of data/locomo10.json of github.com/snap-research/LoCoMo, CC BY-NC 4.0, "
    "not bundled) as session JSONL: pass --sessions DIR --queries FILE (retrieval.py) or --bench DIR (summaries.py)"
)


def require(paths: list[Path | None], source: str) -> None:
    """Exit 2 with one line naming the first missing path and where to get the data."""
    missing = next((path for path in paths if path is None or not Path(path).exists()), False)
    if missing is not False:
        print(f"{missing or 'no data given'}: not found; get {source}", file=sys.stderr)
        sys.exit(2)
