"""What the user keeps out of memory: excluded paths and projects, opted-out folders, marked sessions, private spans.

Pure decisions: the stages bring the facts (a file's path, a session's project and cwd, whether a
`.sessionmem-ignore` file sits in its working folder) and store only what these functions let through.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import PurePath

from sessionmem_pipeline.core.models import KIND_MESSAGE, Message

IGNORE_FILE = ".sessionmem-ignore"
"""A file by this name in a session's working folder (or a folder above it) keeps the session out."""
IGNORE_SESSION_MARKER = "sessionmem:ignore-session"
"""A user message containing this keeps its whole session out."""
PRIVATE_TAG = re.compile(r"<(/?)private>", re.IGNORECASE)

REASON_PATH = "path"
REASON_PROJECT = "project"
REASON_IGNORE_FILE = "ignore_file"
REASON_MARKER = "marker"


@dataclass(frozen=True)
class PrivacyRules:
    """The configured exclusions (`privacy.exclude_paths`, `privacy.exclude_projects`): glob patterns."""

    exclude_paths: tuple[str, ...] = ()
    exclude_projects: tuple[str, ...] = ()


@dataclass(frozen=True)
class Exclusion:
    """Why a file or session is kept out: which kind of rule, and the rule itself (a pattern, a file, the marker)."""

    kind: str  # path | project | ignore_file | marker
    rule: str

    def __str__(self) -> str:
        return {
            REASON_PATH: f"path matches privacy.exclude_paths {self.rule!r}",
            REASON_PROJECT: f"project matches privacy.exclude_projects {self.rule!r}",
            REASON_IGNORE_FILE: f"opted out by {self.rule}",
            REASON_MARKER: f"a user message contains {IGNORE_SESSION_MARKER}",
        }[self.kind]


def strip_private(text: str) -> str:
    """The text without its `<private>...</private>` spans (nested spans count; an unclosed one runs to the end)."""
    if "<" not in text or not PRIVATE_TAG.search(text):
        return text
    kept: list[str] = []
    depth = 0
    position = 0
    for tag in PRIVATE_TAG.finditer(text):
        if depth == 0:
            kept.append(text[position : tag.start()])
        depth = max(depth - 1, 0) if tag.group(1) else depth + 1
        position = tag.end()
    if depth == 0:
        kept.append(text[position:])
    return "".join(kept)


def path_matches(path: str, pattern: str) -> bool:
    """A glob against the whole path, or, for a pattern without a slash, against any one of its components."""
    if fnmatchcase(path, pattern):
        return True
    return "/" not in pattern and any(fnmatchcase(part, pattern) for part in PurePath(path).parts)


def first_match(path: str | None, patterns: Iterable[str]) -> str | None:
    if not path:
        return None
    return next((p for p in patterns if path_matches(path, p)), None)


def path_exclusion(path: str, rules: PrivacyRules) -> Exclusion | None:
    pattern = first_match(path, rules.exclude_paths)
    return Exclusion(REASON_PATH, pattern) if pattern else None


def has_ignore_marker(messages: Sequence[Message]) -> bool:
    return any(m.role == "user" and m.kind == KIND_MESSAGE and IGNORE_SESSION_MARKER in m.text for m in messages)


def session_exclusion(
    rules: PrivacyRules,
    *,
    source_path: str,
    project: str | None,
    cwd: str | None,
    ignore_file: str | None = None,
    messages: Sequence[Message] = (),
) -> Exclusion | None:
    """Why this session is kept out, or None. `ignore_file` is the opt-out file found for its cwd, if any."""
    excluded = path_exclusion(source_path, rules)
    if excluded:
        return excluded
    pattern = next((p for p in rules.exclude_projects if project and fnmatchcase(project, p)), None)
    pattern = pattern or first_match(cwd, rules.exclude_projects)
    if pattern:
        return Exclusion(REASON_PROJECT, pattern)
    if ignore_file:
        return Exclusion(REASON_IGNORE_FILE, ignore_file)
    if has_ignore_marker(messages):
        return Exclusion(REASON_MARKER, IGNORE_SESSION_MARKER)
    return None


def ignore_file_candidates(cwd: str) -> list[PurePath]:
    """Where an opt-out file for a session run in `cwd` may sit: the folder itself and each folder above it."""
    folder = PurePath(cwd)
    return [parent / IGNORE_FILE for parent in (folder, *folder.parents)]
