"""Privacy: the user's exclusions applied to parsed files before anything is stored, and to what is already stored
when an exclusion is added later (both in the ingest stage, stages/pipeline.py). Decisions are core/privacy.py's;
this module brings the facts (settings, opt-out files on disk) and removes rows (`Warehouse.forget_sessions`, the
one way sessions leave the warehouse). Private spans are removed with the redaction (core/sanitize.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Sequence
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


def apply_privacy(
    parsed: ParseResult, rules: PrivacyRules, opt_out_file: Callable[[str | None], str | None] = find_ignore_file
) -> tuple[ParseResult, list[tuple[str, Exclusion]]]:
    """The file's sessions that may be stored, and the (session id, why) of those kept out; `opt_out_file`: the
    opt-out file of a working folder (the caller may have looked them up already)."""
    kept, excluded = [], []
    for session in parsed.sessions:
        why = session_exclusion(
            rules,
            source_path=session.source_path or parsed.path,
            project=session.project,
            cwd=session.cwd,
            ignore_file=opt_out_file(session.cwd),
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


PRIVACY_CHECKED = "privacy_rules_checked"
"""meta: the configured exclusions every stored session was last checked against."""


def _rules_fingerprint(rules: PrivacyRules) -> str:
    return hashlib.md5(json.dumps(dataclasses.asdict(rules), sort_keys=True).encode()).hexdigest()


def _opted_out_cwds(wh: Warehouse) -> list[str]:
    """The stored sessions' working folders that now have an opt-out file (one look per distinct folder)."""
    cwds = [r[0] for r in wh.conn.execute("SELECT DISTINCT cwd FROM sessions WHERE cwd IS NOT NULL").fetchall()]
    return [cwd for cwd in cwds if find_ignore_file(cwd)]


def _covered(wh: Warehouse, rules: PrivacyRules, cwds: Sequence[str] | None) -> list[tuple[dict, Exclusion]]:
    """Stored sessions the rules exclude: all of them, or only those run in `cwds`."""
    scoped = "WHERE cwd IN (SELECT unnest(?))" if cwds is not None else ""
    found = []
    for row in wh.query(
        f"SELECT session_id, source_path, project, cwd FROM sessions {scoped} ORDER BY session_id",
        [list(cwds)] if cwds is not None else None,
    ):
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
    path globs now cover lose their state too, so that they are read again once no glob covers them.

    Every session and file is checked only when the configured exclusions differ from those of the last full
    check (sessions stored since were kept out at ingest by the same rules); otherwise only sessions whose working
    folder has gained an opt-out file can be newly covered, so a run costs one look per distinct folder."""
    rules = privacy_rules(settings)
    fingerprint = _rules_fingerprint(rules)
    everything = wh.get_meta(PRIVACY_CHECKED) != fingerprint
    found = _covered(wh, rules, None if everything else _opted_out_cwds(wh))
    excluded_paths = []
    if everything:
        stored_paths = [row["path"] for row in wh.indexed_paths()] + wh.quarantined_paths()
        excluded_paths = [path for path in stored_paths if path_exclusion(path, rules)]
    if found or excluded_paths or everything:
        with wh.transaction():
            if found:
                wh.forget_sessions([row["session_id"] for row, _ in found], datetime.now(UTC), remember=False)
                wh.insert("excluded_sessions", exclusion_rows([(r["source_path"], r["session_id"], why) for r, why in found]))
            for table in ("source_files", "quarantine", "parse_warnings"):
                wh.delete_where(table, "path", excluded_paths)
            wh.set_meta(PRIVACY_CHECKED, fingerprint)
    return [(row["session_id"], str(why)) for row, why in found]
