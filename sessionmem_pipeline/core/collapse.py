"""Tool-call collapsing (spec 004): each tool call and its result become one narrative line, by category.

- consequential tools (Write, Edit, MultiEdit, NotebookEdit, apply_patch, remember, ask, Task, ExitPlanMode) keep
  detail: they changed state, asked the user, delegated work or proposed a plan;
- observational tools (Read, LS, Glob, Grep, WebFetch, WebSearch, recall, and shell commands that only read)
  collapse to the action and a brief outcome;
- shell commands keep the command and the exit status, and a failure keeps its first error line;
- meta tools (status, TodoWrite, update_plan, EnterPlanMode, done) are minimal or dropped;
- anything else, MCP tools included, gets an honest generic line with its name and input keys.

Tool outputs are otherwise discarded: that the agent read a file matters, its contents do not. Messages come in
sanitized (secrets already redacted at ingest, core/sanitize.py), so collapsing redacts nothing again; a clipped line
never cuts a redaction placeholder in half. The rules are one
table (`_RULES`) from lower-cased tool names, Claude Code, Codex and Gemini CLI alike, to a category and a
formatter.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from sessionmem_pipeline.core.models import (
    CATEGORY_CONSEQUENTIAL,
    CATEGORY_META,
    CATEGORY_OBSERVATIONAL,
    CATEGORY_SHELL,
    CATEGORY_UNKNOWN,
    CollapsedMessage,
    Message,
    ToolCall,
    ToolRecord,
)
from sessionmem_pipeline.core.redact import PLACEHOLDER_RE

DEFAULT_SPEAKERS: Mapping[str, str] = {"user": "User", "assistant": "Assistant", "system": "System", "tool": "Tool"}

COMMAND_CHARS = 200  # a command as shown in a line
QUOTE_CHARS = 80  # old/new text of an edit
ERROR_CHARS = 200  # the first error line of a failure
PLAN_CHARS = 300  # a proposed plan
RECORDED_COMMAND_CHARS = 500  # a command as kept in ToolRecord.command


# ---- text helpers ----------------------------------------------------------------------------------------------


def _clip(text: str, limit: int) -> str:
    """On one line, at most `limit` characters with … when cut; never cuts a redaction placeholder in half."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = limit - 1
    for m in PLACEHOLDER_RE.finditer(text, 0, limit + 40):
        if m.start() < cut < m.end():
            cut = m.start()
    return text[:cut].rstrip() + "…"


def _unpunctuated(text: str) -> str:
    """Text about to be closed with our own full stop."""
    return text.rstrip(" .")


def _quote(text: str, limit: int = QUOTE_CHARS) -> str:
    return f'"{_clip(text, limit)}"'


def _count(n: int, singular: str, plural: str | None = None) -> str:
    return f"{n} {singular if n == 1 else (plural or singular + 's')}"


def _line_count(text: str) -> int:
    return len(text.splitlines())


_NUMBERED_LINE = re.compile(r"^\s*(\d+)(?:→|\t)", re.MULTILINE)  # Claude Read: "     1→text"
_EXIT_CODE = re.compile(r"^\s*(?:Process exited with code|Exit code:?)[ \t]*(-?\d+)\s*$", re.IGNORECASE | re.MULTILINE)
_HEADER_LINE = re.compile(
    r"^(?:Chunk ID|Wall time|Process exited with code|Process running with session ID|Original token count|"
    r"Total output lines|Exit code|Exit Code|Output)\b.*$"
)


@dataclass(frozen=True)
class _Result:
    """A tool output unwrapped from its harness framing (Codex JSON envelope, exit-code header lines)."""

    text: str
    exit_code: int | None


def _unwrap_output(output: str) -> _Result:
    text = output
    exit_code: int | None = None
    stripped = output.lstrip()
    if stripped.startswith("{"):
        try:
            envelope = json.loads(stripped)
        except ValueError:
            envelope = None
        if isinstance(envelope, dict) and "output" in envelope:  # Codex <= 0.77 shell results
            text = str(envelope.get("output") or "")
            metadata = envelope.get("metadata")
            if isinstance(metadata, dict) and isinstance(metadata.get("exit_code"), int):
                exit_code = metadata["exit_code"]
    if exit_code is None and (m := _EXIT_CODE.search(output)):
        exit_code = int(m.group(1))
    lines = text.splitlines()
    if "Output:" in lines[:8]:
        lines = lines[lines.index("Output:") + 1 :]
    else:
        while lines and _HEADER_LINE.match(lines[0].strip()):
            lines = lines[1:]
    return _Result("\n".join(lines), exit_code)


_PYTEST_ERROR = re.compile(r"^E\s+\S")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure)\b:?")
_ERROR_WORDS = re.compile(
    r"error(?:\[\w+\])?:|\bERROR\b|\bFAILED\b|\bFAIL\b|fatal:|No such file|command not found|Permission denied|"
    r"npm ERR!|panic:|Traceback|timed out|\bcannot\b|\bnot found\b",
    re.IGNORECASE,
)


def _traceback_final_line(lines: list[str]) -> str | None:
    """The exception line that ends the last Python traceback (`KeyError: 'total'`)."""
    final: str | None = None
    in_traceback = False
    for line in lines:
        if line.startswith("Traceback (most recent call last)"):
            in_traceback = True
        elif in_traceback and line.strip() and not line[0].isspace():
            final, in_traceback = line.strip(), False
    return final


def first_error_line(text: str) -> str:
    """The most telling line of a failure: pytest's `E` line, a traceback's exception, a line naming an error,
    else the last non-empty line."""
    lines = [line.rstrip() for line in text.splitlines()]
    non_empty = [line.strip() for line in lines if line.strip()]
    if not non_empty:
        return ""
    for line in lines:
        if _PYTEST_ERROR.match(line):
            return line.strip()
    if final := _traceback_final_line(lines):
        return final
    for line in non_empty:
        if _EXCEPTION_LINE.match(line):
            return line
    for line in non_empty:
        if _ERROR_WORDS.search(line) and not line.startswith("Traceback"):
            return line
    return non_empty[-1]


# ---- a tolerant view of one call -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    """A ToolCall seen through accessors that never raise: parsers hand over whatever the transcript held."""

    name: str
    input: Mapping[str, Any]
    output: str | None
    is_error: bool
    cwd: str | None

    @classmethod
    def of(cls, call: ToolCall, cwd: str | None) -> _Call:
        raw = call.input
        if isinstance(raw, Mapping):
            arguments: Mapping[str, Any] = raw
        elif isinstance(raw, str) and raw.strip():
            try:
                decoded = json.loads(raw)
            except ValueError:
                decoded = None
            arguments = decoded if isinstance(decoded, dict) else {"input": raw}
        else:
            arguments = {}
        output = call.output if isinstance(call.output, str) or call.output is None else str(call.output)
        return cls(str(call.name or "unknown"), arguments, output, bool(call.is_error), cwd)

    def text(self, *keys: str) -> str:
        """The first non-empty string (or number) among `keys`."""
        for key in keys:
            value = self.input.get(key)
            if isinstance(value, str) and value.strip():
                return value
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return str(value)
        return ""

    def path(self, *keys: str) -> str:
        return _display_path(self.text(*keys), self.cwd)

    @cached_property
    def result(self) -> _Result | None:
        return None if self.output is None else _unwrap_output(self.output)

    @property
    def failed(self) -> bool:
        result = self.result
        return self.is_error or bool(result and result.exit_code not in (None, 0))

    @property
    def error_line(self) -> str:
        result = self.result
        return _clip(first_error_line(result.text if result else ""), ERROR_CHARS)


def _items(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a list argument (edits, questions, todos), whatever else the transcript put there."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _display_path(path: str, cwd: str | None) -> str:
    """A path relative to the session's working directory when it lies inside it."""
    path = path.strip()
    if cwd and path.startswith(cwd.rstrip("/") + "/"):
        return path[len(cwd.rstrip("/")) + 1 :]
    return path


@dataclass(frozen=True)
class _Outcome:
    """What a formatter made of a call; `category` overrides the rule's (a read-only shell command is observational)."""

    line: str | None
    files: tuple[str, ...] = ()
    command: str | None = None
    category: str | None = None
    failed: bool = False


def _finish(call: _Call, attempt: str, done: str, files: tuple[str, ...] = ()) -> _Outcome:
    """The usual three endings: done (with files), failed with its first error line, or cut off without a result."""
    if call.output is None:
        return _Outcome(f"Tried to {attempt} (no result: interrupted).")
    if call.failed:
        error = _unpunctuated(call.error_line)
        return _Outcome(f"Tried to {attempt} (failed{': ' + error if error else ''}).", failed=True)
    return _Outcome(done, tuple(path for path in files if path))  # a call that named no file changed none we know


# ---- consequential ---------------------------------------------------------------------------------------------


def _write(call: _Call) -> _Outcome:
    path = call.path("file_path", "filePath", "path", "filename", "absolute_path")
    content = call.input.get("content")
    if not isinstance(content, str):
        content = call.text("contents", "text")
    size = _count(_line_count(content), "line") if content else "empty"
    return _finish(call, f"write {path}", f"Wrote {path} ({size}).", (path,))


def _replacement(old: str, new: str, limit: int, every: bool = False) -> str:
    if not old.strip():
        return f"inserted {_quote(new, limit)}"
    if not new.strip():
        return f"removed {'every ' if every else ''}{_quote(old, limit)}"
    return f"replaced {'every ' if every else ''}{_quote(old, limit)} with {_quote(new, limit)}"


def _edit(call: _Call) -> _Outcome:
    path = call.path("file_path", "filePath", "path", "absolute_path")  # filePath: OpenCode
    change = _replacement(
        call.text("old_string", "old_str", "oldString", "old"),
        call.text("new_string", "new_str", "newString", "new"),
        QUOTE_CHARS,
        every=call.input.get("replace_all") is True,
    )
    return _finish(call, f"edit {path}", f"Edited {path}: {change}.", (path,))


def _multi_edit(call: _Call) -> _Outcome:
    path = call.path("file_path", "path")
    edits = _items(call.input.get("edits"))
    changes = [
        _replacement(str(e.get("old_string") or ""), str(e.get("new_string") or ""), 40, e.get("replace_all") is True)
        for e in edits[:2]
    ]
    if len(edits) > 2:
        changes.append(f"and {_count(len(edits) - 2, 'more edit')}")
    detail = f": {'; '.join(changes)}" if changes else ""
    return _finish(call, f"edit {path}", f"Edited {path} ({_count(len(edits), 'edit')}){detail}.", (path,))


def _notebook_edit(call: _Call) -> _Outcome:
    path = call.path("notebook_path", "path", "file_path")
    cell = call.text("cell_number", "cell_id")
    mode = call.text("edit_mode") or "replace"
    cell_type = call.text("cell_type")
    if mode == "insert":
        where = f" after cell {cell}" if cell else ""
        done = f"Inserted a {cell_type + ' ' if cell_type else ''}cell into notebook {path}{where}."
    elif mode == "delete":
        done = f"Deleted cell {cell} of notebook {path}." if cell else f"Deleted a cell of notebook {path}."
    else:
        done = f"Edited notebook {path} cell {cell}." if cell else f"Edited notebook {path}."
    return _finish(call, f"edit notebook {path}", done, (path,))


@dataclass(frozen=True)
class PatchedFile:
    path: str
    action: str  # added | updated | deleted | moved
    added: int = 0
    removed: int = 0
    moved_to: str | None = None


_PATCH_HEADER = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$")


def parse_patch(patch: str) -> list[PatchedFile]:
    """The files of a Codex `*** Begin Patch` text, each with what happened to it and its +/- line counts."""
    files: list[PatchedFile] = []
    for line in patch.splitlines():
        if m := _PATCH_HEADER.match(line):
            action = {"Add": "added", "Update": "updated", "Delete": "deleted"}[m.group(1)]
            files.append(PatchedFile(m.group(2), action))
        elif not files or line.startswith("*** End"):
            continue
        elif line.startswith("*** Move to: "):
            files[-1] = replace(files[-1], action="moved", moved_to=line[len("*** Move to: ") :].strip())
        elif line.startswith("+"):
            files[-1] = replace(files[-1], added=files[-1].added + 1)
        elif line.startswith("-"):
            files[-1] = replace(files[-1], removed=files[-1].removed + 1)
    return files


def _patch_text(call: _Call) -> str:
    """The patch, wherever the parser put it: `input`, `patch`, or any string value holding one."""
    text = call.text("input", "patch")
    if "*** Begin Patch" in text:
        return text
    for value in call.input.values():
        if isinstance(value, str) and "*** Begin Patch" in value:
            return value
        if isinstance(value, list):
            for item in value:
                if isinstance(item, str) and "*** Begin Patch" in item:
                    return item
    return text


_PATCH_FAILURE = re.compile(r"^(?:apply_patch verification failed|Failed to|error:|Invalid patch)", re.IGNORECASE)


def _describe_patch(call: _Call, patch: str) -> _Outcome:
    patched = parse_patch(patch)
    described = []
    for f in patched[:4]:
        counts = " ".join(c for c in (f"+{f.added}" if f.added else "", f"-{f.removed}" if f.removed else "") if c)
        name = _display_path(f.path, call.cwd)
        if f.moved_to:
            name += f" → {_display_path(f.moved_to, call.cwd)}"
        detail = f.action + (f", {counts}" if counts and f.action != "deleted" else "")
        described.append(f"{name} ({detail})")
    if len(patched) > 4:
        described.append(f"and {_count(len(patched) - 4, 'more file')}")
    target = ", ".join(described) or "no files"
    files = tuple(_display_path(f.moved_to or f.path, call.cwd) for f in patched)
    result = call.result
    if result is not None and not call.failed and _PATCH_FAILURE.match(result.text.strip()):
        error = _clip(first_error_line(result.text), ERROR_CHARS)
        return _Outcome(f"Tried to patch {target} (failed: {error}).", failed=True, category=CATEGORY_CONSEQUENTIAL)
    outcome = _finish(call, f"patch {target}", f"Patched {target}.", files)
    return replace(outcome, category=CATEGORY_CONSEQUENTIAL)


def _apply_patch(call: _Call) -> _Outcome:
    return _describe_patch(call, _patch_text(call))


def _remember(call: _Call) -> _Outcome:
    abstract = " ".join(call.text("abstract", "content", "text", "memory", "fact", "summary", "note").split())
    return _finish(call, f"remember '{abstract}'", f"Remembered: '{abstract}'.")


_ANSWER_PAIR = re.compile(r'"((?:[^"\\]|\\.)*)"\s*=\s*"((?:[^"\\]|\\.)*)"')


def _ask(call: _Call) -> _Outcome:
    questions = [
        str(q.get("question") or q.get("header") or "")
        for q in _items(call.input.get("questions"))
    ] or [call.text("question", "prompt", "message", "text")]
    asked = " / ".join(f"'{_clip(q, 200)}'" for q in questions if q) or "a question"
    result = call.result
    if call.output is None:
        return _Outcome(f"Asked user: {asked}. No response (interrupted).")
    if call.is_error:
        return _Outcome(f"Asked user: {asked}. No response ({_clip(first_error_line(result.text), 120)}).", failed=True)
    pairs = _ANSWER_PAIR.findall(result.text)  # Claude: User has answered your questions: "Q"="A", ...
    answers = [a for _, a in pairs] or [next((ln.strip() for ln in result.text.splitlines() if ln.strip()), "")]
    response = " / ".join(f"'{_clip(a, 200)}'" for a in answers if a) or "none"
    return _Outcome(f"Asked user: {asked}. Response: {response}.")


def _first_line(text: str) -> str:
    """The first line that says something: past blank lines, fences and rules, and Markdown headings when a
    sentence follows."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and line.strip() not in ("```", "---")]
    sentence = next((line for line in lines if not line.startswith("#")), None)
    return sentence or (lines[0].lstrip("#").strip() if lines else "")


def _delegate(call: _Call) -> _Outcome:
    """A subagent does work out of sight (its own transcript): the task and its conclusion are what matter here."""
    description = call.text("description", "prompt", "task")
    kind = call.text("subagent_type", "agent_type")
    who = f"subagent ({kind})" if kind and kind != "general-purpose" else "subagent"
    attempt = f"delegate to {who}: '{_clip(description, 200)}'"
    outcome = _finish(call, attempt, f"Delegated to {who}: '{_clip(description, 200)}'.")
    if outcome.failed or call.output is None:
        return outcome
    result = _first_line(call.result.text if call.result else "")
    return _Outcome(outcome.line[:-1] + f". Result: {_unpunctuated(_clip(result, 200))}." if result else outcome.line)


def _exit_plan(call: _Call) -> _Outcome:
    plan = _clip(re.sub(r"(?m)^\s*#+\s*", "", call.text("plan", "text")), PLAN_CHARS)
    rejected = " (not accepted)" if call.is_error else ""
    return _Outcome(f"Proposed plan{rejected}: {plan}", failed=call.is_error)


# ---- observational ---------------------------------------------------------------------------------------------


def _read(call: _Call) -> _Outcome:
    paths = call.input.get("paths")
    if isinstance(paths, list) and paths:  # Gemini read_many_files
        shown = [_display_path(str(p), call.cwd) for p in paths]
        names = ", ".join(shown[:5]) + (", …" if len(shown) > 5 else "")
        return _finish(call, f"read {names}", f"Read {_count(len(shown), 'file')}: {names}.", tuple(shown))
    path = call.path("file_path", "filePath", "path", "absolute_path", "filename")
    result = call.result
    text = result.text if result else ""
    numbers = [int(n) for n in _NUMBERED_LINE.findall(text)]
    offset, limit = call.input.get("offset"), call.input.get("limit")
    if numbers and (offset or limit):
        outcome = f" (lines {numbers[0]}-{numbers[-1]})"
    elif numbers:
        outcome = f" ({_count(len(numbers), 'line')})"
    elif isinstance(offset, int) and isinstance(limit, int):
        outcome = f" (lines {offset}-{offset + limit - 1})"
    elif text.strip():
        outcome = f" ({_count(_line_count(text.strip()), 'line')})"
    else:
        outcome = ""
    return _finish(call, f"read {path}", f"Read {path}{outcome}.", (path,))


def _directory_entries(text: str) -> list[str]:
    """Entries of a directory listing: Claude LS's `- name` tree (first level) or Gemini's `[DIR] name` lines."""
    tree = re.findall(r"^( *)- (.+?)\s*$", text, re.MULTILINE)
    if tree:
        root_indent = len(tree[0][0])
        if len(tree) > 1 and tree[0][1].endswith("/") and len(tree[1][0]) > root_indent:
            child_indent = len(tree[1][0])
            return [name for indent, name in tree[1:] if len(indent) == child_indent]
        return [name for _, name in tree]
    entries = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.lower().startswith(("directory listing", "listed ")) or line.endswith(":"):
            continue
        entries.append(line[6:].strip() + "/" if line.startswith("[DIR] ") else line)
    return entries


def _list_directory(call: _Call) -> _Outcome:
    path = call.path("path", "dir_path", "directory") or "."
    shown = path if path.endswith("/") else path + "/"
    result = call.result
    entries = _directory_entries(result.text) if result else []
    names = ", ".join(entries[:5]) + (", …" if len(entries) > 5 else "")
    listing = f": {names} ({_count(len(entries), 'entry', 'entries')})"
    return _finish(call, f"list directory {shown}", f"Listed directory {shown}{listing if entries else ' (empty)'}.")


_NOT_A_PATH = re.compile(r"(?i)^(no files found|no matches found|\(results are truncated|found \d+ files?\b)")


def _listed_paths(text: str) -> list[str]:
    return [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not _NOT_A_PATH.match(line.strip())
    ]


def _glob(call: _Call) -> _Outcome:
    pattern = call.text("pattern", "glob")
    where = call.path("path", "dir_path")
    scope = f" in {where}" if where else ""
    result = call.result
    found = len(_listed_paths(result.text)) if result else 0
    count = _count(found, "file") if found else "no files"
    return _finish(call, f"find files matching {_quote(pattern)}", f"Found {count} matching {_quote(pattern)}{scope}.")


def _grep_count(text: str, mode: str) -> str:
    if m := re.match(r"(?i)\s*found (\d+) (files?|match(?:es)?)", text):
        n, unit = int(m.group(1)), m.group(2).lower()
        return _count(n, "file") if unit.startswith("file") else _count(n, "match", "matches")
    if re.match(r"(?i)\s*no (files|matches) found", text) or not text.strip():
        return "no matches"
    lines = [ln for ln in text.splitlines() if ln.strip() and ln.strip() != "--"]
    if mode == "files_with_matches":
        return _count(len(lines), "file")
    if mode == "count":
        total = sum(int(m.group(1)) for ln in lines if (m := re.search(r":(\d+)$", ln)))
        return _count(total, "match", "matches")
    return _count(len(lines), "match", "matches")


def _grep(call: _Call) -> _Outcome:
    pattern = call.text("pattern", "query", "regex")
    where = call.path("path", "dir_path") or call.text("glob", "include", "type")
    scope = f" in {where}" if where else ""
    result = call.result
    found = _grep_count(result.text, call.text("output_mode")) if result else ""
    return _finish(call, f"search for {_quote(pattern)}{scope}", f"Searched for {_quote(pattern)}{scope} ({found}).")


_URL = re.compile(r"https?://\S+")


def _web_fetch(call: _Call) -> _Outcome:
    url = call.text("url", "uri")
    if not url and (m := _URL.search(call.text("prompt"))):
        url = m.group(0)  # Gemini web_fetch: URLs inside the prompt
    shown = _clip(url, COMMAND_CHARS) or "a web page"
    return _finish(call, f"fetch {shown}", f"Fetched {shown}.")


def _web_search(call: _Call) -> _Outcome:
    query = call.text("query", "q")
    action = call.input.get("action")
    if not query and isinstance(action, Mapping):  # Codex web_search_call
        queries = action.get("queries")
        query = str(action.get("query") or (queries[0] if isinstance(queries, list) and queries else ""))
    line = f"Searched the web for {_quote(query, COMMAND_CHARS)}." if query else "Searched the web."
    if call.output is not None and call.failed:
        return _Outcome(line[:-1] + f" (failed: {_unpunctuated(call.error_line)}).", failed=True)
    return _Outcome(line)


def _memory_count(text: str) -> int | None:
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, list):
        return len(data)
    if isinstance(data, dict):
        for key in ("results", "memories", "items"):
            if isinstance(data.get(key), list):
                return len(data[key])
    if re.search(r"(?i)\bno (memories|results|matches)\b", text):
        return 0
    items = re.findall(r"^\s*(?:[-*•]\s|\d+[.)]\s|#\d+\b|\[\d+\])", text, re.MULTILINE)
    return len(items) or None


def _recall(call: _Call) -> _Outcome:
    query = call.text("query", "q", "topic", "about", "text")
    about = f" about {_quote(query)}" if query else ""
    result = call.result
    n = _memory_count(result.text) if result else None
    done = f"Recalled {_count(n, 'memory', 'memories')}{about}." if n is not None else f"Recalled memories{about}."
    return _finish(call, f"recall memories{about}", done)


def _recall_detail(call: _Call) -> _Outcome:
    memory = call.text("id", "memory_id", "n", "index", "number")
    target = f"memory #{memory.lstrip('#')}" if memory else "a memory"
    return _finish(call, f"retrieve {target}", f"Retrieved full text of {target}.")


def _brief(template: str, *keys: str, fallback: str = "") -> Callable[[_Call], _Outcome]:
    """A formatter for a small tool: `template` filled with the first of `keys` (or the fallback wording)."""

    def format_call(call: _Call) -> _Outcome:
        value = _clip(call.text(*keys), 120)
        done = template.format(value) if value else fallback or template.format("").replace(" .", ".")
        if call.output is None:
            return _Outcome(f"{done[:-1]} (no result: interrupted).")
        if call.failed:
            return _Outcome(f"{done[:-1]} (failed: {_unpunctuated(call.error_line)}).", failed=True)
        return _Outcome(done)

    return format_call


# ---- shell ---------------------------------------------------------------------------------------------------------

_SHELLS = frozenset("bash sh zsh dash fish ksh pwsh powershell powershell.exe cmd cmd.exe".split())
_SCRIPT_FLAGS = frozenset({"-c", "-lc", "-ic", "-lic", "-command", "/c"})


def shell_command(arguments: Mapping[str, Any]) -> str:
    """The command a shell tool ran: Claude's `command` string, Codex's argv (`["bash", "-lc", "…"]` unwrapped),
    exec_command's `cmd`."""
    command = arguments.get("command", arguments.get("cmd", arguments.get("argv")))
    if isinstance(command, str):
        return command
    if not isinstance(command, list) or not command:
        return ""
    argv = [str(a) for a in command]
    if argv[0].rsplit("/", 1)[-1].lower() in _SHELLS:
        for index, arg in enumerate(argv[1:-1], start=1):
            if arg.lower() in _SCRIPT_FLAGS:
                return argv[index + 1]
    return shlex.join(argv)


_READ_ONLY_COMMANDS = frozenset(
    "cat head tail less more ls ll la tree pwd cd echo printf grep egrep fgrep rg ag ack find fd wc file stat du df "
    "which whereis type whoami id uname hostname env printenv date diff cmp sed awk jq yq nl sort uniq cut tr column "
    "realpath readlink dirname basename sha256sum sha1sum shasum md5sum xxd hexdump od strings true ps bat exa eza "
    "tldr man test [".split()
)
_READ_ONLY_SUBCOMMANDS = {
    "git": frozenset(
        "status diff log show blame rev-parse ls-files ls-tree grep describe shortlog reflog cat-file show-ref "
        "rev-list merge-base whatchanged".split()
    ),
    "gh": frozenset("view list status diff checks search".split()),
    "docker": frozenset("ps images logs inspect".split()),
    "kubectl": frozenset("get describe logs".split()),
    "npm": frozenset("ls list view outdated".split()),
    "pip": frozenset("list show freeze".split()),
}
_COMMAND_PREFIXES = frozenset({"sudo", "time", "nice", "command", "builtin", "exec", "nohup"})
_OPERATORS = frozenset({"|", "||", "&&", ";", "&", "|&", ";;"})
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>"})


def _segments(command: str) -> list[list[str]] | None:
    """The words of each simple command in a pipeline or list, quotes respected; None when it cannot be read."""
    lexer = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return None
    segments: list[list[str]] = [[]]
    for token in tokens:
        if token in _OPERATORS:
            segments.append([])
        else:
            segments[-1].append(token)
    return [segment for segment in segments if segment]


def _git_arguments(words: list[str]) -> list[str]:
    """git's positional arguments, past `-C path` and `-c key=value`."""
    arguments, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in ("-C", "-c"):
            skip = True
        elif not word.startswith("-"):
            arguments.append(word)
    return arguments


def _segment_is_read_only(words: list[str]) -> bool:
    if any(word in _WRITE_REDIRECTS and target != "/dev/null" for word, target in zip(words, [*words[1:], ""])):
        return False
    while words and (re.match(r"^[A-Za-z_]\w*=", words[0]) or words[0] in _COMMAND_PREFIXES):
        words = words[1:]
    if not words:
        return True
    program, arguments = words[0].rsplit("/", 1)[-1], words[1:]
    if program in _READ_ONLY_SUBCOMMANDS:
        positional = _git_arguments(arguments) if program == "git" else [w for w in arguments if not w.startswith("-")]
        return any(word in _READ_ONLY_SUBCOMMANDS[program] for word in positional[:2])
    if program not in _READ_ONLY_COMMANDS:
        return False
    if program == "sed":
        return not any(w.startswith(("-i", "--in-place")) for w in arguments)
    if program == "find":
        return not any(w in ("-delete", "-exec", "-execdir", "-ok", "-fprint") for w in arguments)
    if program == "awk":
        return "inplace" not in arguments
    return True


def is_read_only_command(command: str) -> bool:
    """True when every part of a shell command only reads (cat, sed -n, rg, git status…) and nothing is redirected
    into a file."""
    segments = _segments(command)
    return bool(segments) and all(_segment_is_read_only(words) for words in segments)


_RUNNING = re.compile(r"Process running with session ID (\d+)|Command running in background with ID: (\S+)")


def _shell(call: _Call) -> _Outcome:
    command = shell_command(call.input)
    if "*** Begin Patch" in command:  # Codex: apply_patch through the shell
        return _describe_patch(call, command)
    recorded = _clip(command, RECORDED_COMMAND_CHARS)
    shown = f"`{_clip(command, COMMAND_CHARS)}`" if command.strip() else "a command"
    category = CATEGORY_OBSERVATIONAL if is_read_only_command(command) else CATEGORY_SHELL
    result = call.result
    if result is None:
        return _Outcome(f"Ran {shown} (no result: interrupted).", command=recorded, category=category)
    running = _RUNNING.search(call.output or "")
    if running and result.exit_code is None and not call.is_error:
        session = running.group(1) or running.group(2)
        return _Outcome(f"Started {shown} in the background (session {session}).", command=recorded, category=category)
    if call.failed:
        status = f"exit {result.exit_code}" if result.exit_code not in (None, 0) else "failed"
        error = _clip(first_error_line(result.text), ERROR_CHARS)
        line = f"Ran {shown} ({status}): {error}" if error else f"Ran {shown} ({status})."
        return _Outcome(line, command=recorded, category=category, failed=True)
    # Claude reports a non-zero exit as an error, so a Claude result without an error is exit 0.
    return _Outcome(f"Ran {shown} (exit {result.exit_code or 0}).", command=recorded, category=category)


def _write_stdin(call: _Call) -> _Outcome:
    """Codex exec_command sessions: typing into a running command, or polling it (dropped) until it exits."""
    session = call.text("session_id")
    which = f"running command (session {session})" if session else "running command"
    result = call.result
    if result is not None and result.exit_code is not None:
        if result.exit_code == 0:
            return _Outcome(f"The {which} finished (exit 0).", category=CATEGORY_SHELL)
        error = _clip(first_error_line(result.text), ERROR_CHARS)
        line = f"The {which} finished (exit {result.exit_code}): {error}"
        return _Outcome(line, category=CATEGORY_SHELL, failed=True)
    if call.text("chars"):
        return _Outcome(f"Sent input to the {which}.", category=CATEGORY_SHELL)
    return _Outcome(None)


# ---- meta ------------------------------------------------------------------------------------------------------------

_DONE_STATUSES = frozenset({"completed", "done", "complete"})
_ACTIVE_STATUSES = frozenset({"in_progress", "in-progress", "active", "doing"})


def _plan_items(call: _Call) -> list[tuple[str, str]] | None:
    """(text, status) of each item of a TodoWrite / update_plan call; None when the call holds no list."""
    items = call.input.get("todos", call.input.get("plan"))
    if not isinstance(items, list):
        return None
    return [
        (
            str(item.get("content") or item.get("step") or item.get("text") or ""),
            str(item.get("status") or "pending").lower(),
        )
        for item in _items(items)
    ]


def _plan_update(title: str) -> Callable[[_Call], _Outcome]:
    def format_call(call: _Call) -> _Outcome:
        items = _plan_items(call)
        if not items:
            return _Outcome(f"Cleared the {title}." if items == [] else None)
        done = sum(status in _DONE_STATUSES for _, status in items)
        active = [text for text, status in items if status in _ACTIVE_STATUSES]
        pending = len(items) - done - len(active)
        if done == len(items):
            return _Outcome(f"Updated {title}: {'all ' if done > 1 else ''}{done} done.")
        parts = [f"{done} done"] if done else []
        if active:
            parts.append(f"{len(active)} in progress: {_quote(active[0])}")
        if pending:
            parts.append(f"{pending} to do")
        return _Outcome(f"Updated {title}: {', '.join(parts)}.")

    return format_call


def _done(call: _Call) -> _Outcome:
    summary = _clip(call.text("summary", "message", "text", "result"), 300)
    return _Outcome(f"Finished: '{summary}'." if summary else "Finished.")


def _dropped(_: _Call) -> _Outcome:
    return _Outcome(None)


# ---- unknown -------------------------------------------------------------------------------------------------------


def _generic(call: _Call) -> _Outcome:
    """No rule for this tool: say what was called and with which keys, and nothing we cannot know."""
    if m := re.fullmatch(r"mcp__(.+?)__(.+)", call.name):
        what = f"mcp tool {m.group(1)}/{m.group(2)}"
    else:
        what = f"tool {call.name}"
    keys = ", ".join(str(k) for k in call.input)
    called = f"Called {what} with keys: {keys}" if keys else f"Called {what} with no input"
    if call.output is None:
        return _Outcome(f"{called} (no result: interrupted).")
    if call.failed:
        error = _unpunctuated(call.error_line)
        return _Outcome(f"{called} (failed{': ' + error if error else ''}).", failed=True)
    return _Outcome(f"{called}.")


# ---- the table ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolRule:
    """How one tool collapses: its category and the formatter that writes its line."""

    category: str
    format: Callable[[_Call], _Outcome]


def _table(*entries: tuple[str, Callable[[_Call], _Outcome], str]) -> dict[str, ToolRule]:
    return {name: ToolRule(category, formatter) for names, formatter, category in entries for name in names.split()}


_RULES: dict[str, ToolRule] = _table(
    # names (Claude Code, Codex, Gemini CLI, memory tools), formatter, category
    ("write write_file", _write, CATEGORY_CONSEQUENTIAL),
    ("edit replace", _edit, CATEGORY_CONSEQUENTIAL),
    ("multiedit", _multi_edit, CATEGORY_CONSEQUENTIAL),
    ("notebookedit", _notebook_edit, CATEGORY_CONSEQUENTIAL),
    ("apply_patch", _apply_patch, CATEGORY_CONSEQUENTIAL),
    ("remember save_memory", _remember, CATEGORY_CONSEQUENTIAL),
    ("ask askuserquestion", _ask, CATEGORY_CONSEQUENTIAL),
    ("task", _delegate, CATEGORY_CONSEQUENTIAL),
    ("exitplanmode", _exit_plan, CATEGORY_CONSEQUENTIAL),
    ("read read_file read_many_files", _read, CATEGORY_OBSERVATIONAL),
    ("ls list_directory", _list_directory, CATEGORY_OBSERVATIONAL),
    ("glob", _glob, CATEGORY_OBSERVATIONAL),
    ("grep search_file_content", _grep, CATEGORY_OBSERVATIONAL),
    ("webfetch web_fetch", _web_fetch, CATEGORY_OBSERVATIONAL),
    ("websearch web_search google_web_search", _web_search, CATEGORY_OBSERVATIONAL),
    ("recall", _recall, CATEGORY_OBSERVATIONAL),
    ("recall_detail", _recall_detail, CATEGORY_OBSERVATIONAL),
    ("taskoutput", _brief("Checked background task {}.", "task_id", "id"), CATEGORY_OBSERVATIONAL),
    ("bashoutput", _brief("Checked output of background shell {}.", "bash_id", "shell_id"), CATEGORY_OBSERVATIONAL),
    (
        "list_mcp_resources list_mcp_resource_templates",
        _brief("Listed MCP resources of server {}.", "server", fallback="Listed MCP resources."),
        CATEGORY_OBSERVATIONAL,
    ),
    ("read_mcp_resource", _brief("Read MCP resource {}.", "uri", "server"), CATEGORY_OBSERVATIONAL),
    ("skill", _brief('Used skill "{}".', "skill", "command", "name"), CATEGORY_OBSERVATIONAL),
    ("view_image", _brief("Viewed image {}.", "path", "file_path"), CATEGORY_OBSERVATIONAL),
    ("bash shell shell_command exec_command run_shell_command", _shell, CATEGORY_SHELL),
    ("killshell killbash", _brief("Stopped background shell {}.", "shell_id", "bash_id"), CATEGORY_SHELL),
    ("write_stdin", _write_stdin, CATEGORY_META),
    ("todowrite", _plan_update("todo list"), CATEGORY_META),
    ("update_plan", _plan_update("plan"), CATEGORY_META),
    ("enterplanmode", _brief("Entered plan mode."), CATEGORY_META),
    ("status", _dropped, CATEGORY_META),
    ("done", _done, CATEGORY_META),
)
_PLAN_TOOLS = frozenset({"todowrite", "update_plan"})


def collapse_tool_call(call: ToolCall, cwd: str | None = None) -> ToolRecord:
    """One tool call and its result as a narrative line (None when dropped), with the files it modified
    (consequential) or read (observational) and, for shell tools, the command. Paths inside `cwd` are shown
    relative to it. A failed or interrupted consequential call lists no files: nothing is known to have changed."""
    view = _Call.of(call, cwd)
    rule = _RULES.get(view.name.lower())
    category = rule.category if rule else CATEGORY_UNKNOWN
    outcome = (rule.format if rule else _generic)(view)
    return ToolRecord(
        name=view.name,
        category=outcome.category or category,
        line=outcome.line,
        files=outcome.files,
        is_error=outcome.failed,
        command=outcome.command,
    )


def _speaker(message: Message, speaker_names: Mapping[str, str] | None) -> str:
    if message.speaker:
        return message.speaker
    if speaker_names and speaker_names.get(message.role):
        return speaker_names[message.role]
    return DEFAULT_SPEAKERS.get(message.role, message.role.title() or "Unknown")


def collapse_messages(
    messages: Sequence[Message], speaker_names: Mapping[str, str] | None = None
) -> list[CollapsedMessage]:
    """Messages (sanitized at ingest) as narrative: each one's own text, then one line per tool call in order;
    thinking kept apart. A todo/plan update identical to the previous one is dropped. A message left with no
    text, no tool line and no thinking (a bare tool-result carrier, a `status` call) is dropped entirely, and so
    are its dropped records.

    Speakers: the message's own speaker, else `speaker_names[role]`, else User / Assistant / System / Tool."""
    collapsed: list[CollapsedMessage] = []
    last_plan: tuple[tuple[str, str], ...] | None = None
    for message in messages:
        records: list[ToolRecord] = []
        for call in message.tool_calls:
            record = collapse_tool_call(call, message.cwd)
            if str(call.name).lower() in _PLAN_TOOLS:
                items = _plan_items(_Call.of(call, message.cwd))
                plan = tuple(items) if items is not None else None
                if plan is not None and plan == last_plan:
                    record = replace(record, line=None)
                last_plan = plan if plan is not None else last_plan
            records.append(record)
        text = (message.text or "").strip()
        body = "\n".join(part for part in (text, *(r.line for r in records if r.line)) if part)
        thinking = (message.thinking or "").strip()
        if not body and not thinking:
            continue
        collapsed.append(
            CollapsedMessage(
                session_id=message.session_id,
                seq=message.seq,
                message_id=message.message_id,
                role=message.role,
                speaker=_speaker(message, speaker_names),
                timestamp=message.timestamp,
                text=body,
                kind=message.kind,
                thinking=thinking,
                tools=tuple(records),
            )
        )
    return collapsed


# ---- what summaries report -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolUse:
    """One tool's use across a stretch of conversation (spec 002 ToolUsageSummary)."""

    name: str
    count: int
    notable_uses: tuple[str, ...]  # up to 3 distinct lines, in order


@dataclass(frozen=True)
class ToolUsage:
    """Tools used, files modified and read, commands run and failures, for summaries to report."""

    tools: tuple[ToolUse, ...]  # in order of first use
    files_modified: tuple[str, ...]
    files_read: tuple[str, ...]
    commands: tuple[str, ...]
    failures: tuple[str, ...]

    @property
    def call_count(self) -> int:
        return sum(tool.count for tool in self.tools)


def _unique(values: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v for v in values if v))


def summarize_tools(collapsed: Sequence[CollapsedMessage]) -> ToolUsage:
    """Tool use over collapsed messages: per tool its count and up to 3 notable lines; files modified (by
    consequential calls that succeeded) and read, in first-seen order; commands run; the lines of failed calls."""
    records = [record for message in collapsed for record in message.tools]
    counts: dict[str, int] = {}
    uses: dict[str, list[str]] = {}
    for record in records:
        counts[record.name] = counts.get(record.name, 0) + 1
        notable = uses.setdefault(record.name, [])
        if record.line and record.line not in notable and len(notable) < 3:
            notable.append(record.line)
    return ToolUsage(
        tools=tuple(ToolUse(name, count, tuple(uses[name])) for name, count in counts.items()),
        files_modified=_unique([f for r in records if r.category == CATEGORY_CONSEQUENTIAL for f in r.files]),
        files_read=_unique([f for r in records if r.category == CATEGORY_OBSERVATIONAL for f in r.files]),
        commands=_unique([r.command for r in records if r.command]),
        failures=tuple(r.line or f"{r.name} failed." for r in records if r.is_error),
    )
