"""Aider chat history: `.aider.chat.history.md` in each repository where aider ran (Markdown, append-only).

Aider writes `# aider chat started at YYYY-MM-DD HH:MM:SS` (local time, no zone) each time it starts: each header
opens a session. Inside, `#### ` lines are what the person typed (consecutive ones are one message), `> ` lines
are aider's own output (version banner, token costs, prompts), and everything else is the model's reply.
Of aider's output, `> Applied edit to <file>` becomes an Edit tool call and `> Commit <hash> <message>` a git
commit call on the reply before it, so collapsing and summaries see the files changed; the banner's
`Model:`/`Main model:` names the session's model; the rest is counted in ParseResult.skipped. A typed
`/code <text>` followed by `<text>` (aider echoes the message of a mode command) keeps only the message.

Timestamps: aider records only the start of a session, so every message carries that time (read as UTC).
Identity: session_id = `<folder>/aider/<start time>` (the folder holding the file, relative to the source root;
`#2` on a repeated start time); message_id = `T<n>`, the message's 1-based position in its session, stable
because the file is only appended to; project = the folder holding the file (the repository).
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime
from pathlib import PurePath

from sessionmem_pipeline.core.formats.drafts import DraftCall, DraftMessage, SessionDraft, build_result
from sessionmem_pipeline.core.formats.registry import FormatError, Related
from sessionmem_pipeline.core.formats.source import FileContext, parse_timestamp
from sessionmem_pipeline.core.models import ParseResult, ParseWarning

FORMAT = "aider"
FILE_NAME = ".aider.chat.history.md"
SESSION_HEADER = re.compile(r"^# aider chat started at (?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s*$")
APPLIED_EDIT = re.compile(r"^Applied edit to (?P<file>.+)$")
COMMIT = re.compile(r"^Commit (?P<hash>[0-9a-f]{7,40}) (?P<message>.+)$")
MODEL = re.compile(r"^(?:Main model|Model): (?P<model>\S+)")
MODE_COMMAND = re.compile(r"^/(?:code|ask|architect|context|help)\s+(?P<text>.+)$", re.DOTALL)


def parse(ctx: FileContext, data: bytes, related: Related) -> ParseResult:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FormatError("not UTF-8", f"{ctx.path}: not UTF-8 (byte {exc.start})") from exc
    return _History(ctx).read(text.splitlines())


class _History:
    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.folder = _folder_id(ctx)
        self.sessions: list[SessionDraft] = []
        self.skipped: Counter[str] = Counter()
        self.warnings: list[ParseWarning] = []
        self.start: datetime | None = None
        self.block_kind: str | None = None  # "user" | "assistant" | "output"
        self.block: list[str] = []
        self.block_line = 0

    def read(self, lines: list[str]) -> ParseResult:
        for number, raw in enumerate(lines, start=1):
            header = SESSION_HEADER.match(raw)
            if header:
                self._flush()
                self._open_session(header.group("time"), number)
                continue
            kind, text = _line_kind(raw)
            if kind == "blank" and self.block_kind != "assistant":
                self._flush()  # a blank line ends what the person typed and aider's output
                continue
            if kind != self.block_kind and kind != "blank":
                self._flush()
                self.block_kind, self.block_line = kind, number
            self.block.append(text)
        self._flush()
        for session in self.sessions:
            _drop_echoed_commands(session)
        return build_result(self.ctx.path, FORMAT, self.sessions, self.warnings, self.skipped)

    def _open_session(self, start: str, number: int) -> None:
        self.start = parse_timestamp(start.replace(" ", "T"))
        session_id = f"{self.folder}/aider/{start.replace(' ', 'T')}"
        taken = sum(1 for s in self.sessions if s.session_id.split("#")[0] == session_id)
        project = PurePath(self.ctx.path).parent.name or self.ctx.project()
        self.sessions.append(SessionDraft(session_id + (f"#{taken + 1}" if taken else ""), project))
        self.sessions[-1].metadata["started_line"] = number

    def _flush(self) -> None:
        kind, block, line = self.block_kind, self.block, self.block_line
        self.block_kind, self.block = None, []
        if kind is None:
            return
        if not self.sessions:  # text before the first header: a session without a known start
            self.sessions.append(SessionDraft(f"{self.folder}/aider/start", PurePath(self.ctx.path).parent.name))
        session = self.sessions[-1]
        if kind == "output":
            self._output(session, block)
            return
        text = "\n".join(block).strip()
        if not text:
            return
        position = len(session.messages) + 1
        session.messages.append(DraftMessage(f"T{position}", kind, line, self.start, texts=[text]))

    def _output(self, session: SessionDraft, block: list[str]) -> None:
        """Aider's `> ` lines: edits and commits become tool calls of the reply before them; the rest is counted."""
        reply = next((m for m in reversed(session.messages) if m.role == "assistant"), None)
        for text in block:
            edit, commit, model = APPLIED_EDIT.match(text), COMMIT.match(text), MODEL.match(text)
            if model:
                session.model = model.group("model")
            if reply is not None and edit:
                reply.calls.append(DraftCall("Edit", {"file_path": edit.group("file").strip()}, output="applied"))
            elif reply is not None and commit:
                command = f"git commit -m {commit.group('message')!r}"
                reply.calls.append(DraftCall("Bash", {"command": command}, output=f"commit {commit.group('hash')}"))
            elif text.strip():
                self.skipped["aider output"] += 1


def _line_kind(raw: str) -> tuple[str, str]:
    """("user" | "output" | "assistant" | "blank", the line's text without its marker and Markdown line break)."""
    if raw.startswith("####"):
        return "user", raw[4:].removeprefix(" ").rstrip()
    if raw == ">" or raw.startswith("> "):  # not `>>>>>>> REPLACE` inside a reply
        return "output", raw[1:].strip()
    if not raw.strip():
        return "blank", ""
    return "assistant", raw.rstrip()


def _drop_echoed_commands(session: SessionDraft) -> None:
    """`/code fix it` then `fix it`: aider echoes the message of a mode command; keep the message once."""
    kept: list[DraftMessage] = []
    for index, message in enumerate(session.messages):
        command = MODE_COMMAND.match(message.texts[0]) if message.role == "user" else None
        following = session.messages[index + 1] if index + 1 < len(session.messages) else None
        if command and following and following.role == "user" and following.texts[0] == command.group("text"):
            continue
        kept.append(message)
    session.messages = kept


def _folder_id(ctx: FileContext) -> str:
    parent = ctx.relative.parent
    return str(parent) if str(parent) != "." else (PurePath(ctx.source_root).name or "aider")
