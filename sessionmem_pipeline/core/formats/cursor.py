"""Cursor chat and composer history: `state.vscdb` SQLite files in Cursor's global and per-workspace storage.

The file is never opened: the parser gets the bytes the ingest stage read and loads them into an in-memory
SQLite database (`deserialize`), so a running Cursor's files are neither locked nor altered. A database in WAL
mode is read as of its last checkpoint (the `-wal` file beside it is not read).

Two key-value tables hold the history:
- `cursorDiskKV` (global storage): `composerData:<composer id>` is one composer (Cursor's chat and agent panel):
  `{composerId, name, createdAt, conversation: [bubbles]}` in older versions; newer ones list
  `fullConversationHeadersOnly: [{bubbleId, type}]` and keep each bubble under `bubbleId:<composer id>:<bubble id>`.
  A bubble is `{bubbleId, type: 1 (user) | 2 (assistant), text, createdAt?, timingInfo?, thinking?, toolFormerData?}`;
  `toolFormerData` is a tool call (`name`, `rawArgs`/`params` JSON, `result`, `status` "error" for a failed one).
- `ItemTable` (older versions, workspace storage): `workbench.panel.aichat.view.aichatview.persistentData` holds
  the chat tabs, `{tabs: [{tabId, chatTitle, lastSendTime, bubbles: [{id, type: "user" | "ai", text}]}]}`.

One session per composer or chat tab, many per file: a changed database re-indexes only the sessions whose
messages changed (per-session fingerprints in the ingest stage).

Identity: session_id = `cursor/<composer id>` or `cursor/chat/<tab id>`; message_id = the bubble id (else `M<n>`,
its position); project = the last component of the folder in the `workspace.json` beside a workspace database,
else "cursor". Times: the bubble's `createdAt` or its timing info, else the composer's or tab's time.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from pathlib import PurePath
from typing import Any

from sessionmem_pipeline.core.formats.copilot import workspace_folder
from sessionmem_pipeline.core.formats.drafts import (
    DraftCall,
    DraftMessage,
    SessionDraft,
    as_dict,
    as_id,
    as_list,
    as_str,
    build_result,
    json_arguments,
)
from sessionmem_pipeline.core.formats.registry import FormatError, Related
from sessionmem_pipeline.core.formats.source import FileContext, parse_timestamp
from sessionmem_pipeline.core.models import ParseResult, ParseWarning

FORMAT = "cursor"
SQLITE_HEADER = b"SQLite format 3\x00"
WAL_VERSION_BYTES = slice(18, 20)  # file format write/read versions: 2 means WAL, which an in-memory copy cannot use
CHAT_KEY = "workbench.panel.aichat.view.aichatview.persistentData"
ROLES = {1: "user", 2: "assistant", "user": "user", "ai": "assistant"}


def parse(ctx: FileContext, data: bytes, related: Related) -> ParseResult:
    warnings: list[ParseWarning] = []
    skipped: Counter[str] = Counter()
    folder = workspace_folder(related.read(str(PurePath(ctx.path).parent / "workspace.json")))
    project = ctx.project(folder) if folder else "cursor"
    with closing(_open(ctx.path, data)) as conn:
        values = dict(_rows(conn, "cursorDiskKV", "composerData:%") + _rows(conn, "cursorDiskKV", "bubbleId:%"))
        chats = dict(_rows(conn, "ItemTable", CHAT_KEY))
    drafts = [
        _composer(key.removeprefix("composerData:"), document, values, project, skipped)
        for key, document in _documents(values, "composerData:", ctx.path, warnings)
    ]
    for _, document in _documents(chats, CHAT_KEY, ctx.path, warnings):
        drafts.extend(_chat_tab(as_dict(tab), project, skipped) for tab in as_list(as_dict(document).get("tabs")))
    return build_result(ctx.path, FORMAT, drafts, warnings, skipped)


def _open(path: str, data: bytes) -> sqlite3.Connection:
    if not data.startswith(SQLITE_HEADER):
        raise FormatError("not SQLite", f"{path}: not an SQLite database")
    image = bytearray(data)
    image[WAL_VERSION_BYTES] = b"\x01\x01"
    conn = sqlite3.connect(":memory:")
    try:
        conn.deserialize(bytes(image))
        conn.execute("PRAGMA query_only = 1")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise FormatError("not SQLite", f"{path}: cannot read the database: {exc}") from exc
    return conn


def _rows(conn: sqlite3.Connection, table: str, pattern: str) -> list[tuple[str, Any]]:
    """(key, value) rows whose key is LIKE the pattern; none when the table is missing or broken."""
    try:
        return conn.execute(f"SELECT key, value FROM {table} WHERE key LIKE ?", [pattern]).fetchall()
    except sqlite3.DatabaseError:
        return []


def _documents(values: dict[str, Any], prefix: str, path: str, warnings: list[ParseWarning]) -> Iterator[tuple]:
    """(key, decoded JSON) of the values whose key starts with the prefix, in key order."""
    for key in sorted(k for k in values if isinstance(k, str) and k.startswith(prefix)):
        document = _decode(values[key])
        if document is None:
            warnings.append(ParseWarning(path, 0, f"{key}: not JSON; skipped"))
            continue
        yield key, document


def _decode(value: Any) -> Any:
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        return None
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return None


def _composer(
    composer_id: str, document: Any, values: dict[str, Any], project: str, skipped: Counter[str]
) -> SessionDraft:
    composer = as_dict(document)
    composer_id = as_id(composer.get("composerId")) or composer_id
    started = parse_timestamp(composer.get("createdAt"))
    bubbles = [as_dict(bubble) for bubble in as_list(composer.get("conversation"))]
    inline = {as_id(bubble.get("bubbleId")) for bubble in bubbles}
    for header in map(as_dict, as_list(composer.get("fullConversationHeadersOnly"))):
        if as_id(header.get("bubbleId")) in inline - {None}:
            continue  # a version that keeps both: the inline copy is the bubble
        stored = _decode(values.get(f"bubbleId:{composer_id}:{as_id(header.get('bubbleId'))}"))
        if isinstance(stored, dict):
            bubbles.append(stored)
        else:
            skipped["bubble not stored"] += 1
    draft = SessionDraft(f"cursor/{composer_id}", project, title=as_str(composer.get("name")))
    for position, bubble in enumerate(bubbles, start=1):
        role = ROLES.get(bubble.get("type"))
        if role is None:
            skipped["unknown bubble type"] += 1
            continue
        timing = as_dict(bubble.get("timingInfo"))
        timestamp = parse_timestamp(bubble.get("createdAt")) or parse_timestamp(timing.get("clientStartTime"))
        message = DraftMessage(as_id(bubble.get("bubbleId")) or f"M{position}", role, 0, timestamp or started)
        message.texts.append(as_str(bubble.get("text")) or _rich_text(bubble.get("richText")))
        thinking = as_dict(bubble.get("thinking"))
        message.thinking.extend(t for t in [as_str(thinking.get("text"))] if t)
        tool = as_dict(bubble.get("toolFormerData"))
        if tool:
            message.calls.append(_call(tool))
        model = as_str(as_dict(bubble.get("modelInfo")).get("modelName"))
        if model:
            message.metadata["model"] = draft.model = model
        draft.messages.append(message)
    return draft


def _call(tool: dict[str, Any]) -> DraftCall:
    result = tool.get("result")
    return DraftCall(
        name=as_str(tool.get("name")) or "unknown",
        input=json_arguments(tool.get("rawArgs") or tool.get("params")),
        call_id=as_str(tool.get("toolCallId")),
        output=result if isinstance(result, str) else (json.dumps(result) if result is not None else None),
        is_error=tool.get("status") == "error",
    )


def _rich_text(value: Any) -> str:
    """The text nodes of an editor state (`richText`, a Lexical JSON string) when the plain text is missing."""
    document = _decode(value) if isinstance(value, str) else value
    found: list[str] = []
    stack = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("text"), str):
                found.append(node["text"])
            stack.extend(reversed(as_list(node.get("children")) or [node.get("root")]))
        elif isinstance(node, list):
            stack.extend(reversed(node))
    return "".join(found)


def _chat_tab(tab: dict[str, Any], project: str, skipped: Counter[str]) -> SessionDraft:
    tab_id = as_id(tab.get("tabId")) or "unnamed"
    sent = parse_timestamp(tab.get("lastSendTime"))
    draft = SessionDraft(f"cursor/chat/{tab_id}", project, title=as_str(tab.get("chatTitle")))
    for position, bubble in enumerate(map(as_dict, as_list(tab.get("bubbles"))), start=1):
        role = ROLES.get(bubble.get("type"))
        if role is None:
            skipped["unknown bubble type"] += 1
            continue
        message_id = as_id(bubble.get("id")) or f"M{position}"
        draft.messages.append(DraftMessage(message_id, role, 0, sent, texts=[as_str(bubble.get("text")) or ""]))
    return draft
