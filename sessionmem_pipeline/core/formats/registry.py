"""Which agent wrote a file, told by where it lies: each agent format names the files it reads (spec issue 19).

The JSONL formats (Claude Code, Codex, generic, OpenAI chat) are told apart by content, so any `.jsonl`/`.json`
file is a candidate for them. Agents that keep their history inside an editor's or a tool's storage folder are
told apart by path instead: their patterns (matched against the end of the path) always win, and inside their
storage folders ("territory") nothing else is read, so an editor's settings JSON is never picked up or quarantined.

A format without a parser is recognised but not read: its files are reported as "skipped: <label> not supported"
and neither quarantined nor counted as broken.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path, PurePath

from sessionmem_pipeline.core.formats.source import FileContext
from sessionmem_pipeline.core.models import ParseResult

JSON_SUFFIXES = (".jsonl", ".json")


class FormatError(ValueError):
    """A file of a known format that cannot be read at all (its message says why; the file is quarantined)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason  # the quarantine reason: "invalid JSON", "not SQLite", ...


@dataclass(frozen=True)
class Related:
    """Read access to the files beside a source file (Cline's ui_messages.json, OpenCode's message folders).

    Parsers never open files themselves; the default reads the disk read-only, tests may pass a dict-backed one.
    """

    read: Callable[[str], bytes | None]
    list: Callable[[str], list[str]]  # file names in a folder, sorted; [] when it does not exist


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _list_folder(folder: str) -> list[str]:
    try:
        return sorted(entry.name for entry in os.scandir(folder) if entry.is_file(follow_symlinks=False))
    except OSError:
        return []


ON_DISK = Related(_read_bytes, _list_folder)

Parser = Callable[[FileContext, bytes, Related], ParseResult]


@dataclass(frozen=True)
class SourceFormat:
    """One agent's history files: where they live and how they are read."""

    name: str
    label: str  # for people: "Gemini CLI"
    patterns: tuple[str, ...]  # PurePath.match patterns, matched against the end of the absolute path
    parser: Parser | None  # None: recognised, not supported yet
    territory: tuple[str, ...] = ()  # folder names inside which only registered patterns are read
    locations: tuple[str, ...] = ()  # default folders, relative to home, on Linux and macOS
    binary: bool = False  # a database, not text

    def matches(self, path: PurePath) -> bool:
        return any(_matches_end(path.parts, pattern) for pattern in self.patterns)


@lru_cache(maxsize=None)
def _pattern_parts(pattern: str) -> tuple[str, ...]:
    return PurePath(pattern).parts


def _matches_end(parts: tuple[str, ...], pattern: str) -> bool:
    """`PurePath.match` for a relative pattern (its components match the path's last ones), without parsing the
    pattern again for every file of a walk."""
    wanted = _pattern_parts(pattern)
    return len(wanted) <= len(parts) and all(
        fnmatchcase(part, glob) for part, glob in zip(reversed(parts), reversed(wanted), strict=False)
    )


@dataclass
class Registry:
    """The path-identified formats, in the order they are tried."""

    formats: list[SourceFormat] = field(default_factory=list)

    def add(self, source_format: SourceFormat) -> None:
        self.formats.append(source_format)

    def format_for_path(self, path: str | PurePath) -> SourceFormat | None:
        pure = PurePath(path)
        return next((f for f in self.formats if f.matches(pure)), None)

    def wants(self, path: str | PurePath, excluded_names: Iterable[str] = ()) -> bool:
        """Whether discovery should pick the file up: a registered pattern, or a JSON file outside every territory."""
        pure = PurePath(path)
        if self.format_for_path(pure) is not None:
            return True
        if not pure.name.endswith(JSON_SUFFIXES) or pure.name.startswith(".") or pure.name in excluded_names:
            return False
        territory = {folder for f in self.formats for folder in f.territory}
        return not territory.intersection(pure.parts[:-1])

    def default_locations(self, home: Path) -> list[Path]:
        """Every default folder of a registered format that exists, outermost only (a folder inside another found
        folder would be walked twice)."""
        found = sorted({home / location for f in self.formats for location in f.locations if (home / location).is_dir()})
        return [path for path in found if not any(other != path and other in path.parents for other in found)]


REGISTRY = Registry()
