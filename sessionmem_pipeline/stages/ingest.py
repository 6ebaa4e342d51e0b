"""Ingest: one source file into canonical messages (`raw_messages`), with validation, quarantine and change decisions.

A grown file (a live agent session) writes only its new messages: the last stored message is written again,
because an agent may still be appending blocks to it, and everything after it is new. If the file's earlier
messages no longer match what is stored (a generic file re-split at a new gap, an edited file), the file is
treated as rewritten and its sessions are replaced whole.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sessionmem_pipeline.config import Settings
from sessionmem_pipeline.core import changes
from sessionmem_pipeline.core.formats import ValidationReport, inspect_file
from sessionmem_pipeline.core.formats.registry import ON_DISK, Related
from sessionmem_pipeline.core.models import KIND_MESSAGE, Message, ParsedSession, ParseResult
from sessionmem_pipeline.core.sanitize import sanitize_session
from sessionmem_pipeline.stages.discover import SourceFile, file_stat
from sessionmem_pipeline.core.privacy import Exclusion
from sessionmem_pipeline.stages.privacy import apply_privacy, exclusion_rows, find_ignore_file, privacy_rules
from sessionmem_pipeline.stages.registry import INGEST, StageContext
from sessionmem_pipeline.warehouse import Warehouse, message_row, to_json


@dataclass
class IngestOutcome:
    """What one file's ingest did: the decision, and the work it caused."""

    path: str
    partition_key: str
    decision: str
    format: str | None = None
    session_ids: list[str] = field(default_factory=list)
    changed_session_ids: list[str] = field(default_factory=list)
    messages_written: int = 0
    warnings: list[str] = field(default_factory=list)
    quarantine_reason: str | None = None
    excluded: list[tuple[str, str]] = field(default_factory=list)  # (session id, why) kept out by privacy rules
    excluded_removed: int = 0  # of those, sessions stored before (an exclusion added since)


@dataclass
class ParsedSource:
    """A file's bytes as ingest stores them: the validation report, and when the file is valid its sessions that
    the privacy rules let through (private spans and secrets removed) and the (session id, why) of those kept out.
    Besides the bytes and the ingest key's settings, it depends only on the files on disk that `opt_outs` names
    (the sessions' working folders -> the opt-out file found for each)."""

    report: ValidationReport
    parsed: ParseResult | None
    excluded: list[tuple[str, Exclusion]] = field(default_factory=list)
    opt_outs: dict[str | None, str | None] = field(default_factory=dict)


StagedParse = Callable[[SourceFile, str], ParsedSource | None]
"""(source, sha256 of the bytes the commit read) -> the parse staged for exactly those bytes, or None."""


def parse_source(source: SourceFile, data: bytes, settings: Settings, related: Related = ON_DISK) -> ParsedSource:
    """Parse and validate the bytes, apply the privacy rules, redact what is kept: what the commit needs of the
    file, built from the file alone (no warehouse state), so a compute step can build it outside the writer."""
    max_bad_share = settings["validation.max_bad_line_share"]
    report, parsed = inspect_file(source.path, source.root, data, max_bad_share=max_bad_share, related=related)
    if parsed is None:
        return ParsedSource(report, None)
    opt_outs = {session.cwd: find_ignore_file(session.cwd) for session in parsed.sessions}
    parsed, excluded = apply_privacy(parsed, privacy_rules(settings), opt_outs.__getitem__)
    sanitized = dataclasses.replace(parsed, sessions=[sanitize_session(s) for s in parsed.sessions])
    return ParsedSource(report, sanitized, excluded, opt_outs)


def _read_prefix(path: str):
    def read(count: int) -> bytes:
        with open(path, "rb") as handle:
            return handle.read() if count < 0 else handle.read(count)

    return read


def session_fingerprint(session: ParsedSession) -> str:
    """What downstream stages are built from: the session's stored (redacted) messages and attributes, not the file
    they were read from (the same conversation in a newer export is the same input)."""
    digest = hashlib.sha256()
    attributes = {k: v for k, v in vars(session).items() if k not in ("messages", "source_path")}
    digest.update(to_json(attributes).encode())
    for message in session.messages:
        row = message_row(message)
        del row["source_path"]
        digest.update(to_json(row).encode())
    return digest.hexdigest()


def ingest_file(
    ctx: StageContext,
    source: SourceFile,
    *,
    full: bool = False,
    stored: tuple[changes.IndexedState | None, dict | None] | None = None,
    staged: StagedParse | None = None,
) -> IngestOutcome:
    """Decide what the file needs and do it, in one transaction with the ingest stage's state of its sessions (part
    of the caller's, when it commits a batch of files in one).
    `stored`: the file's stored state and row, when the caller read a whole scan's in one query. `staged`: the
    file's parse a compute step left for exactly the bytes read here (stages/ingest_staging.py), else None.

    A file stored under another ingest key (a new parser, redaction version or privacy setting) is read again
    whole. Sessions the privacy rules exclude are not written (and forgotten if they were stored before); the rest
    lose their private spans and secrets before anything is stored."""
    wh: Warehouse = ctx.wh
    key = ctx.keys[INGEST.name]
    previous, row = stored if stored is not None else wh.source_state(source.path)
    current = file_stat(source.path)
    decision = changes.decide(current, previous, _read_prefix(source.path))
    stored_under_other_key = previous is not None and row["stage_key"] != key
    if decision in (changes.UNCHANGED, changes.GROWN) and previous is not None and (full or stored_under_other_key):
        decision = changes.REWRITTEN
    outcome = IngestOutcome(source.path, source.partition_key, decision)
    if decision == changes.DELETED:
        mark_missing(wh, source.path)
        return outcome
    if decision == changes.UNCHANGED:
        outcome.session_ids = list(row["session_ids"] or []) if row else []
        outcome.format = row["format"] if row else None
        if previous is not None and current is not None and current.mtime_ns != previous.mtime_ns:
            with wh.transaction():  # touched, same bytes: settle it from its stat next time
                wh.conn.execute("UPDATE source_files SET mtime_ns = ? WHERE path = ?", [current.mtime_ns, source.path])
        return outcome

    try:
        with open(source.path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:  # deleted between discovery and reading: the next run removes it
        outcome.decision = changes.UNCHANGED
        return outcome
    except OSError as exc:
        _quarantine(wh, source, "unreadable", [f"{source.path}: cannot read: {exc.strerror or exc}"], "", 0)
        outcome.quarantine_reason = "unreadable"
        return outcome
    sha256 = changes.sha256_bytes(data)
    if not full and wh.quarantined_sha256(source.path) == sha256:
        outcome.decision = changes.UNCHANGED  # still the same broken file: nothing new to say
        return outcome
    found = (staged(source, sha256) if staged is not None else None) or parse_source(source, data, ctx.settings)
    report, parsed, excluded = found.report, found.parsed, found.excluded
    outcome.warnings = list(report.warnings)
    outcome.format = report.format
    if parsed is None:
        _quarantine(wh, source, report.quarantine_reason or "invalid", report.errors, sha256, len(data))
        outcome.quarantine_reason = report.quarantine_reason
        return outcome

    outcome.excluded = [(sid, str(why)) for sid, why in excluded]
    forgotten = wh.forgotten_ids()
    sessions = [s for s in parsed.sessions if s.session_id not in forgotten]
    owners = wh.session_owners([s.session_id for s in sessions])
    sessions = _not_claimed_by_newer_files(owners, sessions, source.path, current)
    parsed = dataclasses.replace(parsed, sessions=sessions)
    stored_ids = list(row["session_ids"] or []) if row and previous else []
    outcome.excluded_removed = len({sid for sid, _ in excluded} & set(stored_ids))
    fingerprints = {session.session_id: session_fingerprint(session) for session in parsed.sessions}
    with wh.transaction():
        if excluded:  # (forgetting scans every file's session list)
            wh.forget_sessions([sid for sid, _ in excluded], _now(), remember=False)  # also publishes the exclusions
        wh.replace("excluded_sessions", "path", [source.path], exclusion_rows([(source.path, s, w) for s, w in excluded]))
        plan = _write_plan(wh, parsed, stored_ids, decision, fingerprints, key, source.path, full=full)
        replaced = sorted(plan.replaced & owners.keys())  # a new session has no rows
        versions_used = wh.summary_versions_used(replaced)
        wh.delete_sessions(plan.removed + replaced)
        written = []
        for session in parsed.sessions:
            if session.session_id in plan.unchanged:
                continue
            start = plan.first_seq.get(session.session_id, 0)
            written += [message_row(m) for m in session.messages if m.seq >= start]
            if session.session_id in owners:
                wh.conn.execute("DELETE FROM messages WHERE session_id = ? AND seq >= ?", [session.session_id, start])
            outcome.changed_session_ids.append(session.session_id)
        outcome.messages_written = wh.insert("messages", written)
        if plan.unchanged:  # a conversation taken over from an older export, as it was: only where it now lives
            wh.conn.execute(
                "UPDATE messages SET source_path = ? WHERE session_id IN (SELECT unnest(?)) AND source_path <> ?",
                [source.path, sorted(plan.unchanged), source.path],
            )
        _write_sessions(wh, parsed.sessions, source, owners, versions_used)
        session_ids = [s.session_id for s in parsed.sessions]
        wh.release_sessions(source.path, session_ids)
        wh.refresh_session_aggregates(session_ids)
        _write_source_state(wh, source, parsed, data, sha256, session_ids, key)
        ctx.record(INGEST, {s: fp for s, fp in fingerprints.items() if s not in plan.unchanged})
        wh.replace(
            "parse_warnings",
            "path",
            [source.path],
            [{"path": w.path, "line": w.line, "reason": w.reason, "recorded_at": _now()} for w in parsed.warnings],
        )
        wh.delete_where("quarantine", "path", [source.path])
        wh.bump_generation()
    rewrote_stored = plan.removed or plan.replaced.intersection(stored_ids)
    outcome.decision = changes.REWRITTEN if rewrote_stored and decision == changes.GROWN else decision
    outcome.session_ids = session_ids
    return outcome


def _not_claimed_by_newer_files(
    owners: dict[str, tuple[str, int | None]],
    sessions: Sequence[ParsedSession],
    path: str,
    current: changes.FileStat | None,
) -> list[ParsedSession]:
    """Leave out sessions last read from another, newer file that is still there (an older export of the same
    account must not overwrite the newer export's version of a conversation), whatever order files are read in.
    `owners`: the stored sessions' files and their mtimes (`Warehouse.session_owners`)."""
    mtime_ns = current.mtime_ns if current is not None else 0
    claimed = {
        session_id
        for session_id, (owner, owner_mtime_ns) in owners.items()
        if owner != path and owner_mtime_ns is not None and owner_mtime_ns > mtime_ns
    }
    return [s for s in sessions if s.session_id not in claimed]


@dataclass
class _Plan:
    unchanged: set[str]  # sessions stored with this fingerprint: left alone, their later stages stay built
    replaced: set[str]  # sessions whose rows in every table are replaced whole
    removed: list[str]  # sessions this file held and holds no more
    first_seq: dict[str, int]  # session -> first seq to (re)write


def _write_plan(
    wh: Warehouse,
    parsed: ParseResult,
    stored_ids: Sequence[str],
    decision: str,
    fingerprints: dict[str, str],
    key: str,
    path: str,
    *,
    full: bool,
) -> _Plan:
    """Per session, so a multi-session file (an export, an Aider history) changed in one session rebuilds only that
    one: a session stored with the same fingerprint is left alone; in a grown file, a session whose stored messages
    are still its first ones gets its new messages from its last stored one on; any other is replaced whole. The
    file's stored sessions that it no longer holds go, unless another file has taken them over since."""
    parsed_ids = set(fingerprints)
    owners = wh.session_owners([s for s in stored_ids if s not in parsed_ids])
    removed = [s for s in stored_ids if s not in parsed_ids and owners.get(s, (path,))[0] == path]
    stored = {} if full else wh.stage_inputs(INGEST.name, list(parsed_ids))
    plan = _Plan(set(), set(), removed, {})
    for session in parsed.sessions:
        session_id = session.session_id
        if stored.get(session_id) == (fingerprints[session_id], key):
            plan.unchanged.add(session_id)
            continue
        keys = wh.message_keys(session_id) if decision == changes.GROWN and session_id in stored_ids else []
        keep = max(len(keys) - 1, 0)  # the last stored message may still be growing
        if keys and [m.message_id for m in session.messages[:keep]] == keys[:keep]:
            plan.first_seq[session_id] = keep
        else:
            plan.replaced.add(session_id)
    return plan


def _first_request(messages: Sequence[Message]) -> str | None:
    for message in messages:
        if message.role == "user" and message.kind == KIND_MESSAGE and message.text.strip():
            return message.text.strip()[:500]
    return None


def _write_sessions(
    wh: Warehouse,
    sessions: Sequence[ParsedSession],
    source: SourceFile,
    owners: dict[str, tuple[str, int | None]],
    versions_used: Mapping[str, int],
) -> None:
    """`owners`: the sessions already stored (`Warehouse.session_owners`): only theirs keep earlier stages' columns.
    `versions_used`: the summary versions of sessions just replaced whole, so their numbering goes on."""
    rows = []
    for session in sessions:
        existing = (wh.session_row(session.session_id) if session.session_id in owners else None) or {}
        rows.append(
            {
                "session_id": session.session_id,
                "partition_key": source.partition_key,
                "project": session.project,
                "source_path": source.path,
                "format": session.format,
                "title": session.title,
                "parent_session_id": session.parent_session_id,
                "cwd": session.cwd,
                "git_branch": session.git_branch,
                "model": session.model,
                "first_request": existing.get("first_request") or _first_request(session.messages),
                "metadata": to_json(session.metadata),
                "indexed_at": _now(),
                "source_missing": False,
                "summary_version": existing.get("summary_version"),
                "summary_versions_used": existing.get("summary_versions_used") or versions_used.get(session.session_id),
                "summary_overview": existing.get("summary_overview"),
                "topics": existing.get("topics"),
            }
        )
    wh.replace("sessions", "session_id", [s.session_id for s in sessions], rows)


def _write_source_state(
    wh: Warehouse,
    source: SourceFile,
    parsed: ParseResult,
    data: bytes,
    sha256: str,
    session_ids: list[str],
    stage_key: str,
) -> None:
    current = file_stat(source.path) or source.stat
    consumed = parsed.consumed_bytes
    wh.replace(
        "source_files",
        "path",
        [source.path],
        [
            {
                "path": source.path,
                "partition_key": source.partition_key,
                "source_root": source.root,
                "format": parsed.format,
                "size": len(data),
                "mtime_ns": current.mtime_ns if current.size == len(data) else source.stat.mtime_ns,
                "sha256": sha256,
                "consumed_bytes": consumed,
                "prefix_sha256": changes.sha256_bytes(data[:consumed]),
                "status": "indexed",
                "session_ids": session_ids,
                "message_count": sum(len(s.messages) for s in parsed.sessions),
                "lines_read": parsed.lines_read,
                "warning_count": len(parsed.warnings),
                "skipped": to_json(parsed.skipped),
                "last_indexed_at": _now(),
                "stage_key": stage_key,
            }
        ],
    )


def _quarantine(
    wh: Warehouse, source: SourceFile, reason: str, errors: Sequence[str], sha256: str, size: int
) -> None:
    """Record the file as unusable; its earlier rows (if it was valid once) stay searchable."""
    with wh.transaction():
        wh.bump_generation()
        wh.replace(
            "quarantine",
            "path",
            [source.path],
            [
                {
                    "path": source.path,
                    "partition_key": source.partition_key,
                    "reason": reason,
                    "details": "\n".join(errors[:20]),
                    "sha256": sha256,
                    "size": size,
                    "quarantined_at": _now(),
                }
            ],
        )


def mark_missing(wh: Warehouse, path: str) -> list[str]:
    """A source file that is gone: its sessions stay (marked source-missing) until they are forgotten."""
    with wh.transaction():
        return wh.mark_source_missing(path)


def _now() -> datetime:
    return datetime.now(UTC)
