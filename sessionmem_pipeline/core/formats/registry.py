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


@lru_cache(maxsize=None)
def _pattern_parts(pattern: str) -> tuple[str, ...]:
    return PurePath(pattern).parts


def _folder_matches(folder: tuple[str, ...], wanted: tuple[str, ...]) -> bool:
    """`PurePath.match` of a relative pattern (its components match the path's last ones) for a file in `folder`,
    but for the pattern's last component: the name's, matched apart."""
    return len(wanted) <= len(folder) + 1 and all(
        fnmatchcase(part, glob) for part, glob in zip(reversed(folder), reversed(wanted[:-1]), strict=False)
    )


@dataclass(frozen=True)
class _FolderRules:
    """What the registry says of the files of one folder: the (format, pattern of the name) pairs whose pattern's
    other components match the folder's last ones, in the order the formats are tried; and whether the folder
    lies in a territory."""

    names: tuple[tuple[SourceFormat, str], ...]
    in_territory: bool


@dataclass
class Registry:
    """The path-identified formats, in the order they are tried."""

    formats: list[SourceFormat] = field(default_factory=list)
    _folders: dict[tuple[str, ...], _FolderRules] = field(default_factory=dict, repr=False)

    def add(self, source_format: SourceFormat) -> None:
        self.formats.append(source_format)
        self._folders.clear()

    def _rules(self, folder: tuple[str, ...]) -> _FolderRules:
        """The folder's rules, worked out once per folder: a walk asks for every file, and the files of a folder
        differ only by name (10,000 files: ~0.25 s of CPU less per scan)."""
        rules = self._folders.get(folder)
        if rules is None:
            names = tuple(
                (f, _pattern_parts(pattern)[-1])
                for f in self.formats
                for pattern in f.patterns
                if _folder_matches(folder, _pattern_parts(pattern))
            )
            territory = {name for f in self.formats for name in f.territory}
            rules = self._folders[folder] = _FolderRules(names, bool(territory.intersection(folder)))
        return rules

    def format_for_path(self, path: str | PurePath) -> SourceFormat | None:
        pure = PurePath(path)
        return self.format_in(pure.parent, pure.name)

    def format_in(self, folder: PurePath, name: str) -> SourceFormat | None:
        """The format of the file `name` in `folder` (a walk parses each folder once, not each file's whole path)."""
        return next((f for f, pattern in self._rules(folder.parts).names if fnmatchcase(name, pattern)), None)

    def wants(self, path: str | PurePath, excluded_names: Iterable[str] = ()) -> bool:
        pure = PurePath(path)
        return self.wants_in(pure.parent, pure.name, excluded_names)

    def wants_in(self, folder: PurePath, name: str, excluded_names: Iterable[str] = ()) -> bool:
        """Whether discovery should pick the file `name` in `folder` up: a registered pattern, or a JSON file outside
        every territory."""
        if self.format_in(folder, name) is not None:
            return True
        if not name.endswith(JSON_SUFFIXES) or name.startswith(".") or name in excluded_names:
            return False
        return not self._rules(folder.parts).in_territory

    def default_locations(self, home: Path) -> list[Path]:
        """Every default folder of a registered format that exists, outermost only (a folder inside another found
        folder would be walked twice)."""
        found = sorted({home / location for f in self.formats for location in f.locations if (home / location).is_dir()})
        return [path for path in found if not any(other != path and other in path.parents for other in found)]


REGISTRY = Registry()
