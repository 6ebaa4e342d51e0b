"""Ingest split in two like the other per-session stages (stages/staging.py): parse outside the writer, commit in it.

Compute (`compute_parses`, Dagster's `staged_parses` in the compute pool) reads each source file of its partitions
that may have changed since the published snapshot, parses and validates it, applies the privacy rules and
redacts (`ingest.parse_source`: nothing of it depends on the warehouse), and leaves one Parquet file with a row per
source file in the staging folder, keyed by the file's partition key and the fingerprint of (path, source root,
sha256 of the bytes it read) under the ingest stage key. Besides the bytes, a parse depends only on files on disk:
the opt-out files of the sessions' working folders and the files beside it some formats read (Cline's
ui_messages.json, OpenCode's message folders); the row names them, and the commit takes the row only while they
are as they were.

The commit (`ingest_file`) keeps every decision that depends on live state (grown or rewritten, quarantined
bytes, forgotten sessions, sessions claimed by newer files, the write plan) and, for the bytes it has just read,
takes the staged parse instead of parsing: anything missing, stale or in doubt is parsed there as before, so
staging can only make a run faster, never change its result. A file compute could not read safely (gone, not a
regular file, unreadable) or whose parse raised is simply not staged.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sessionmem_pipeline.config import Settings
from sessionmem_pipeline.core import changes
from sessionmem_pipeline.core.formats import ValidationReport
from sessionmem_pipeline.core.formats.registry import ON_DISK, Related
from sessionmem_pipeline.core.formats.source import IMPLAUSIBLY_LATE
from sessionmem_pipeline.core.models import Message, ParsedSession, ParseResult, ParseWarning, ToolCall
from sessionmem_pipeline.core.privacy import Exclusion
from sessionmem_pipeline.stages.discover import SourceFile, scan_sources
from sessionmem_pipeline.stages.ingest import ParsedSource, parse_source
from sessionmem_pipeline.stages.privacy import find_ignore_file, privacy_rules
from sessionmem_pipeline.stages.registry import INGEST, Providers, stage_key
from sessionmem_pipeline.stages.staging import (
    StagedFiles,
    read_results,
    staged_files,
    staging_folder,
    write_atomically,
)
from sessionmem_pipeline.warehouse import NothingIndexedYet, Snapshot, open_reader

UNIT = "partition_key"
"""What a staged parse belongs to (its file's partition): the commit removes the files its run's partitions cover."""


def parse_input(source: SourceFile, sha256: str) -> str:
    """What a staged parse was built from: the file's path and source root (its sessions' ids and paths follow
    from them) and the sha256 of its bytes."""
    return hashlib.md5(f"{source.path}\0{source.root}\0{sha256}".encode()).hexdigest()


# ---- compute ---------------------------------------------------------------------------------------------------


@dataclass
class ParseOutcome:
    """What one compute step staged, and which files it left to the commit and why."""

    files: int = 0  # files parsed and staged
    not_staged: list[str] = field(default_factory=list)  # "path: why" of files left to the commit
    path: Path | None = None


def compute_parses(settings: Settings, partition_keys: Sequence[str] | None) -> ParseOutcome:
    """The parses of these partitions' files (every file when None) that the published snapshot does not hold
    under the same size, mtime and ingest key, written to one new staging file (none when there is nothing)."""
    scan = scan_sources(settings.sources, rules=privacy_rules(settings))
    wanted = set(partition_keys) if partition_keys is not None else None
    files = [f for f in scan.files if wanted is None or f.partition_key in wanted]
    key = stage_key(INGEST, settings, Providers(settings))
    unchanged, quarantined = _settled_in_snapshot(settings, files, key)
    outcome = ParseOutcome()
    rows = []
    for source in files:
        if source.path in unchanged:
            continue
        data = _read_regular_file(source.path)
        if data is None:
            outcome.not_staged.append(f"{source.path}: not a readable regular file")
            continue
        sha256 = changes.sha256_bytes(data)
        if quarantined.get(source.path) == sha256:
            continue
        beside = _RelatedReads()
        try:
            found = parse_source(source, data, settings, beside.related())
        except Exception as exc:  # noqa: BLE001  the commit parses it again and reports what it does
            outcome.not_staged.append(f"{source.path}: {type(exc).__name__}: {exc}")
            continue
        if any(IMPLAUSIBLY_LATE in warning for warning in found.report.warnings):
            outcome.not_staged.append(f"{source.path}: a late timestamp the commit's clock must judge")
            continue
        rows.append(
            {
                UNIT: source.partition_key,
                "input_fp": parse_input(source, sha256),
                "stage_key": key,
                "beside": json.dumps(beside.facts(found), sort_keys=True),
                "parse": json.dumps(_encoded(found), default=_encode_value),
            }
        )
    outcome.files = len(rows)
    if rows:
        outcome.path = write_atomically(staging_folder(settings, INGEST), pa.Table.from_pylist(rows))
    return outcome


def _settled_in_snapshot(settings: Settings, files: Sequence[SourceFile], key: str) -> tuple[set[str], dict[str, str]]:
    """What the commit will leave alone as the snapshot stands: the paths indexed with the same size, mtime and
    ingest key, and the sha256 of each quarantined path's bytes."""
    try:
        conn = open_reader(settings.warehouse, extensions=False)
    except NothingIndexedYet:
        return set(), {}
    try:
        snapshot = Snapshot(conn)
        paths = [source.path for source in files]
        states = snapshot.source_states(paths)
        unchanged = set()
        for source in files:
            previous, row = states.get(source.path, (None, None))
            same_stat = previous is not None and changes.FileStat(previous.size, previous.mtime_ns) == source.stat
            if same_stat and row["stage_key"] == key:
                unchanged.add(source.path)
        rows = snapshot.query("SELECT path, sha256 FROM quarantine WHERE path IN (SELECT unnest(?))", [paths])
        return unchanged, {row["path"]: row["sha256"] for row in rows}
    finally:
        conn.close()


def _read_regular_file(path: str) -> bytes | None:
    """The file's bytes, or None when it is gone, unreadable or no longer a regular file (a FIFO put in its place
    since discovery is opened without blocking and not read)."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    with open(handle, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            return None
        try:
            return file.read()
        except OSError:
            return None


@dataclass
class _RelatedReads:
    """The files beside a source file that its parser read (path -> sha256, None when absent) and the folders it
    listed, so the commit can tell they are unchanged."""

    reads: dict[str, str | None] = field(default_factory=dict)
    lists: dict[str, list[str]] = field(default_factory=dict)

    def related(self) -> Related:
        def read(path: str) -> bytes | None:
            data = ON_DISK.read(path)
            self.reads[path] = None if data is None else changes.sha256_bytes(data)
            return data

        def listing(folder: str) -> list[str]:
            self.lists[folder] = ON_DISK.list(folder)
            return self.lists[folder]

        return Related(read, listing)

    def facts(self, found: ParsedSource) -> dict[str, Any]:
        return {"opt_outs": sorted(found.opt_outs.items(), key=str), "reads": self.reads, "lists": self.lists}


def _still_so(facts: dict[str, Any]) -> bool:
    """Whether the files beside a source that its staged parse depended on are as they were then."""
    if any(find_ignore_file(cwd) != found for cwd, found in facts["opt_outs"]):
        return False
    for path, digest in facts["reads"].items():
        data = ON_DISK.read(path)
        if (None if data is None else changes.sha256_bytes(data)) != digest:
            return False
    return all(ON_DISK.list(folder) == names for folder, names in facts["lists"].items())


# ---- the staged form -------------------------------------------------------------------------------------------


def _encode_value(value: Any) -> Any:
    """JSON for what parsers put in messages besides JSON's own types (timestamps)."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, ToolCall):
        return vars(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _encoded(found: ParsedSource) -> dict[str, Any]:
    parsed = found.parsed
    return {
        "report": asdict(found.report),
        "excluded": [[session_id, why.kind, why.rule] for session_id, why in found.excluded],
        "parsed": None if parsed is None else {
            "path": parsed.path,
            "format": parsed.format,
            "warnings": [[w.path, w.line, w.reason] for w in parsed.warnings],
            "skipped": parsed.skipped,
            "lines_read": parsed.lines_read,
            "consumed_bytes": parsed.consumed_bytes,
            "sessions": [
                {**{k: v for k, v in vars(s).items() if k != "messages"}, "messages": [vars(m) for m in s.messages]}
                for s in parsed.sessions
            ],
        },
    }


def _message(fields: dict[str, Any]) -> Message:
    timestamp = fields["timestamp"]
    return Message(
        **{
            **fields,
            "timestamp": None if timestamp is None else datetime.fromisoformat(timestamp),
            "tool_calls": tuple(ToolCall(**call) for call in fields["tool_calls"]),
        }
    )


def _decoded(encoded: dict[str, Any]) -> ParsedSource:
    report = encoded["report"]
    report = ValidationReport(**{**report, "errors": tuple(report["errors"]), "warnings": tuple(report["warnings"])})
    excluded = [(session_id, Exclusion(kind, rule)) for session_id, kind, rule in encoded["excluded"]]
    parsed = encoded["parsed"]
    if parsed is None:
        return ParsedSource(report, None, excluded)
    sessions = [
        ParsedSession(**{**s, "messages": [_message(m) for m in s["messages"]]}) for s in parsed["sessions"]
    ]
    result = ParseResult(
        parsed["path"],
        parsed["format"],
        sessions,
        [ParseWarning(*warning) for warning in parsed["warnings"]],
        parsed["skipped"],
        parsed["lines_read"],
        parsed["consumed_bytes"],
    )
    return ParsedSource(report, result, excluded)


# ---- commit ----------------------------------------------------------------------------------------------------


@dataclass
class StagedParses:
    """The staged parses a commit reads (`take` answers `ingest_file`), and how many files it parsed itself."""

    files: StagedFiles
    parsed_here: int = 0

    def take(self, source: SourceFile, sha256: str) -> ParsedSource | None:
        row = self.files.result(source.partition_key, parse_input(source, sha256))
        if row is None or not _still_so(json.loads(row["beside"])):
            self.parsed_here += 1
            return None
        return _decoded(json.loads(row["parse"]))

    def remove_consumed(self, partition_keys: Sequence[str] | None) -> None:
        self.files.remove_consumed(partition_keys)


def staged_sessions(settings: Settings, partition_keys: Sequence[str] | None) -> dict[str, ParsedSession]:
    """The sessions of the staged parses of these partitions (all when None) under the current ingest key, the
    newest parse of each partition whose files beside it are as they were (an opt-out made since keeps its
    sessions out here too), for compute to build new sessions from before the writer ingests them. Which bytes
    the commit will read is not known here: a parse it does not take leaves results under another ingest
    fingerprint, which the commit never takes."""
    key = stage_key(INGEST, settings, Providers(settings))
    wanted = set(partition_keys) if partition_keys is not None else None
    files = []
    for path in staged_files(settings, INGEST):
        try:
            files.append((path.stat().st_mtime_ns, pq.read_table(path, columns=[UNIT, "stage_key", "beside", "parse"])))
        except OSError:  # the writer's ingest consumed it meanwhile
            continue
    newest: dict[str, dict[str, Any]] = {}
    for _, table in sorted(files, key=lambda found: found[0]):
        for row in table.to_pylist():
            if row["stage_key"] == key and (wanted is None or row[UNIT] in wanted):
                newest[row[UNIT]] = row
    sessions: dict[str, ParsedSession] = {}
    for row in newest.values():
        if not _still_so(json.loads(row["beside"])):
            continue
        parsed = _decoded(json.loads(row["parse"])).parsed
        for session in parsed.sessions if parsed is not None else []:
            sessions[session.session_id] = session
    return sessions


def read_parses(settings: Settings, key: str) -> StagedParses:
    """Every complete staging file of parses built under the ingest key `key`."""
    return StagedParses(read_results(settings, INGEST, key, unit=UNIT))
