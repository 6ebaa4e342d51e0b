"""Privacy: the user's exclusions applied to parsed files before anything is stored, and to what is already stored
when an exclusion is added later (both in the ingest stage, stages/pipeline.py). Decisions are core/privacy.py's;
this module brings the facts (settings, opt-out files on disk) and removes rows (`Warehouse.forget_sessions`, the
one way sessions leave the warehouse). Private spans are removed with the redaction (core/sanitize.py)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from datetime import UTC, datetime

from sessionmem_pipeline.config import Settings
from sessionmem_pipeline.core.models import ParseResult
from sessionmem_pipeline.core.privacy import (
    Exclusion,
    PrivacyRules,
    ignore_file_candidates,
    path_exclusion,
    session_exclusion,
)
from sessionmem_pipeline.warehouse import Warehouse


def privacy_rules(settings: Settings) -> PrivacyRules:
    return PrivacyRules(tuple(settings["privacy.exclude_paths"]), tuple(settings["privacy.exclude_projects"]))


def find_ignore_file(cwd: str | None) -> str | None:
    """The `.sessionmem-ignore` file in `cwd` or a folder above it, if there is one."""
    if not cwd or not os.path.isabs(cwd):
        return None
    return next((str(c) for c in ignore_file_candidates(cwd) if os.path.isfile(c)), None)


def apply_privacy(parsed: ParseResult, rules: PrivacyRules) -> tuple[ParseResult, list[tuple[str, Exclusion]]]:
    """The file's sessions that may be stored, and the (session id, why) of those kept out."""
    kept, excluded = [], []
    for session in parsed.sessions:
        why = session_exclusion(
            rules,
            source_path=session.source_path or parsed.path,
            project=session.project,
            cwd=session.cwd,
            ignore_file=find_ignore_file(session.cwd),
            messages=session.messages,
        )
        if why:
            excluded.append((session.session_id, why))
        else:
            kept.append(session)
    return dataclasses.replace(parsed, sessions=kept), excluded


def exclusion_rows(excluded: Sequence[tuple[str, str, Exclusion]]) -> list[dict]:
    """`excluded_sessions` rows of (source path, session id, why)."""
    now = datetime.now(UTC)
    return [
        {"path": path, "session_id": sid, "kind": why.kind, "rule": why.rule, "reason": str(why), "excluded_at": now}
        for path, sid, why in excluded
    ]


def _covered(wh: Warehouse, settings: Settings) -> list[tuple[dict, Exclusion]]:
    rules = privacy_rules(settings)
    found = []
    for row in wh.query("SELECT session_id, source_path, project, cwd FROM sessions ORDER BY session_id"):
        why = session_exclusion(
            rules,
            source_path=row["source_path"] or "",
            project=row["project"],
            cwd=row["cwd"],
            ignore_file=find_ignore_file(row["cwd"]),
        )
        if why:
            found.append((row, why))
    return found


def remove_excluded_sessions(wh: Warehouse, settings: Settings) -> list[tuple[str, str]]:
    """Forget the stored sessions the exclusions now cover and record why; the (id, reason) of each. Files the
    path globs now cover lose their state too, so that they are read again once no glob covers them."""
    found = _covered(wh, settings)
    rules = privacy_rules(settings)
    stored_paths = [p for p in wh.indexed_paths()] + [{"path": p} for p in wh.quarantined_paths()]
    excluded_paths = [row["path"] for row in stored_paths if path_exclusion(row["path"], rules)]
    if found or excluded_paths:
        with wh.transaction():
            wh.forget_sessions([row["session_id"] for row, _ in found], datetime.now(UTC), remember=False)
            wh.insert("excluded_sessions", exclusion_rows([(r["source_path"], r["session_id"], why) for r, why in found]))
            for table in ("source_files", "quarantine", "parse_warnings"):
                wh.delete_where(table, "path", excluded_paths)
    return [(row["session_id"], str(why)) for row, why in found]
