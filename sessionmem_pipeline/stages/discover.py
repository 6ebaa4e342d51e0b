"""Finding session files under the configured source roots (read-only: stat and list, never open for writing).

Real folders hold more than session files: symlinks (followed, each real folder and file read once, loops
recorded), FIFOs, sockets and devices (never opened), folders nobody may read, roots that are gone. Each becomes a
`SourceProblem` in the scan's record; none stops a run."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sessionmem_pipeline.core.changes import FileStat
from sessionmem_pipeline.core.formats import REGISTRY
from sessionmem_pipeline.core.formats.source import FileContext
from sessionmem_pipeline.core.privacy import Exclusion, PrivacyRules, path_exclusion
from sessionmem_pipeline.warehouse import Warehouse

MEMORIES_FILE = "memories.jsonl"  # curated memories, not a session (stages/memories.py)


@dataclass(frozen=True)
class SourceFile:
    """A session file and the partition it is indexed in."""

    path: str  # absolute
    root: str  # absolute source root it was found under
    partition_key: str  # the file-derived session id (INTERFACES.md), unique across roots
    stat: FileStat


@dataclass(frozen=True)
class SourceProblem:
    """An entry under a source root that could not be read as a session file; recorded, never fatal."""

    root: str
    path: str
    kind: str  # missing_root | unreadable_root | unreadable_folder | not_a_file | symlink_loop | broken_symlink | duplicate
    detail: str

    def __str__(self) -> str:
        return f"{self.path}: {self.detail}"


@dataclass
class Discovery:
    """What a scan of the source roots found: session files, problems, and files the exclusions keep out."""

    roots: list[str] = field(default_factory=list)  # the roots scanned, resolved
    files: list[SourceFile] = field(default_factory=list)
    problems: list[SourceProblem] = field(default_factory=list)
    excluded: list[tuple[str, Exclusion]] = field(default_factory=list)  # (path, why)


def _is_session_name(folder: Path, name: str) -> bool:
    """The agent-format registry decides which names are session files (core/formats/registry.py)."""
    return REGISTRY.wants_in(folder, name, excluded_names=(MEMORIES_FILE,))


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return kind
    return "not a regular file"


class _Walk:
    """A depth-first walk that follows symlinked files and folders, visits each real folder and file once, and
    records what it cannot read instead of raising. Only regular files are yielded: a FIFO is never opened."""

    def __init__(self, root: Path, problems: list[SourceProblem]) -> None:
        self.root = root
        self.problems = problems
        self.seen: set[tuple[int, int]] = set()

    def problem(self, path: Path | str, kind: str, detail: str) -> None:
        self.problems.append(SourceProblem(str(self.root), str(path), kind, detail))

    def files(self) -> Iterator[tuple[Path, os.stat_result]]:
        try:
            info = os.stat(self.root)
        except FileNotFoundError:
            self.problem(self.root, "missing_root", "source root not found")
            return
        except OSError as exc:
            self.problem(self.root, "unreadable_root", f"source root cannot be read: {exc.strerror or exc}")
            return
        if not stat.S_ISDIR(info.st_mode):
            self.problem(self.root, "missing_root", f"source root is {_file_kind(info.st_mode)}, not a folder")
            return
        yield from self._folder(self.root, info, ancestors=frozenset())

    def _folder(
        self, folder: Path, info: os.stat_result, ancestors: frozenset[tuple[int, int]]
    ) -> Iterator[tuple[Path, os.stat_result]]:
        key = (info.st_dev, info.st_ino)
        self.seen.add(key)
        ancestors = ancestors | {key}
        try:
            with os.scandir(folder) as listing:
                names = sorted(entry.name for entry in listing)
        except OSError as exc:
            kind = "unreadable_root" if folder == self.root else "unreadable_folder"
            self.problem(folder, kind, f"folder cannot be read: {exc.strerror or exc}")
            return
        for name in names:
            path = folder / name
            if name.startswith(".") and not _is_session_name(folder, name):  # hidden folders; `.aider.chat.history.md`
                continue
            try:
                target = os.stat(path)  # follows symlinks
            except FileNotFoundError:
                if os.path.islink(path):
                    self.problem(path, "broken_symlink", f"symlink to missing {os.readlink(path)}")
                continue
            except OSError as exc:
                kind = "symlink_loop" if exc.errno == errno.ELOOP else "unreadable_folder"
                self.problem(path, kind, f"cannot be followed: {exc.strerror or exc}")
                continue
            target_key = (target.st_dev, target.st_ino)
            if stat.S_ISDIR(target.st_mode):
                if target_key in ancestors:
                    self.problem(path, "symlink_loop", "symlink loop: leads back to a folder above it; not followed")
                elif target_key in self.seen:
                    self.problem(path, "duplicate", "folder already read under another path; not read twice")
                else:
                    yield from self._folder(path, target, ancestors)
            elif _is_session_name(folder, name):
                if not stat.S_ISREG(target.st_mode):
                    self.problem(path, "not_a_file", f"{_file_kind(target.st_mode)}, not a regular file; not opened")
                elif target_key in self.seen:
                    self.problem(path, "duplicate", "file already read under another path; not read twice")
                else:
                    self.seen.add(target_key)
                    yield path, target


def file_stat(path: str | Path) -> FileStat | None:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return FileStat(info.st_size, info.st_mtime_ns)


def scan_sources(
    roots: Sequence[Path], *, since: datetime | None = None, rules: PrivacyRules = PrivacyRules()
) -> Discovery:
    """Every session file under the roots, in a stable order, with what could not be read and what is excluded;
    `since` skips files last written before it."""
    found = Discovery(roots=[os.path.realpath(r) for r in roots])  # realpath never raises, also for a looping link
    keys: set[str] = set()
    cutoff = since.timestamp() * 1e9 if since else None
    for root in map(Path, found.roots):
        for path, info in _Walk(root, found.problems).files():
            if cutoff is not None and info.st_mtime_ns < cutoff:
                continue
            excluded = path_exclusion(str(path), rules)
            if excluded:
                found.excluded.append((str(path), excluded))
                continue
            key = FileContext(str(path), str(root)).file_session_id
            if key in keys:  # the same relative path under two roots
                key = f"{root.name}:{key}"
            keys.add(key)
            found.files.append(SourceFile(str(path), str(root), key, FileStat(info.st_size, info.st_mtime_ns)))
    return found


def discover(
    roots: Sequence[Path], *, since: datetime | None = None, rules: PrivacyRules = PrivacyRules()
) -> list[SourceFile]:
    """The session files of `scan_sources`, for callers that only need those."""
    return scan_sources(roots, since=since, rules=rules).files


def record_source_problems(wh: Warehouse, scan: Discovery) -> None:
    """The scanned roots' problems replace what their previous scan recorded (`status` and `health` read them);
    when they differ, the snapshot readers open is published again."""
    before = wh.query(
        "SELECT root, path, kind, detail FROM source_problems WHERE root IN (SELECT unnest(?))", [scan.roots]
    )
    problems = scan.problems
    if sorted(tuple(row.values()) for row in before) == sorted((p.root, p.path, p.kind, p.detail) for p in problems):
        return
    now = datetime.now(UTC)
    with wh.transaction():
        wh.replace(
            "source_problems",
            "root",
            scan.roots,
            [{"root": p.root, "path": p.path, "kind": p.kind, "detail": p.detail, "recorded_at": now} for p in problems],
        )
        wh.bump_generation()
