"""OpenAI Chat Completions message arrays: a JSON file (`[...]` or `{"messages": [...]}`) or JSONL, one message a line.

Roles: `system` and `developer` are the app's instructions (role system, kind=injected); `user` and `assistant`
messages are the conversation (`name` becomes the speaker); an assistant's `tool_calls`
`[{id, type: function, function: {name, arguments}}]` become ToolCalls with the arguments decoded from their JSON
string, and the later `tool` message with that `tool_call_id` fills the call's output instead of being a message of
its own. The legacy `function_call` / `function` pair is handled the same way, paired by name. A tool message whose
call is unknown is kept as a role "tool" message (with a warning) rather than lost.

Identity: message_id is `M<n>` (1-based position in the array) in a JSON file and `L<n>` (line) in JSONL;
session_id is the document's `session_id` when it has one, else the path-derived id (one session per file; chat
arrays have no times to split on). Messages carry no timestamp unless a message has a `timestamp` field.
source_line is 0 for JSON documents, which have no line structure worth pointing at.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from sessionmem_pipeline.core.formats.drafts import (
    CallBook,
    DraftCall,
    DraftMessage,
    SessionDraft,
    as_dict,
    as_id,
    as_list,
    as_str,
    build_result,
    image_placeholder,
    json_arguments,
    placeholder,
)
from sessionmem_pipeline.core.formats.source import FileContext, JsonLine, parse_timestamp
from sessionmem_pipeline.core.models import KIND_INJECTED, KIND_MESSAGE, ParseResult, ParseWarning

FORMAT = "openai_chat"
CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
KNOWN_FIELDS = frozenset(
    {"role", "content", "name", "tool_calls", "tool_call_id", "function_call", "refusal", "timestamp"}
)
DOCUMENT_FIELDS = frozenset({"messages", "session_id", "title", "model", "tools", "functions"})


def line_problem(obj: dict[str, Any]) -> str | None:
    """Why an object cannot be a chat message (a bad line), or None."""
    role = obj.get("role")
    if not isinstance(role, str):
        return "missing role"
    if role not in CHAT_ROLES:
        return f"unknown role {role!r} (expected system, developer, user, assistant or tool)"
    return None


def document_messages(document: Any) -> list[Any] | None:
    """The messages array of a chat document (`[...]` or `{"messages": [...]}`), or None when it is not one."""
    if isinstance(document, list):
        return document
    if isinstance(document, dict) and isinstance(document.get("messages"), list):
        return document["messages"]
    return None


def parse_lines(ctx: FileContext, lines: Sequence[JsonLine]) -> ParseResult:
    """JSONL, one chat message per line."""
    chat = _Chat(ctx)
    for line in lines:
        if line.data is not None:
            chat.add(line.data, f"L{line.number}", line.number, "")
    return chat.result(SessionDraft(ctx.file_session_id, ctx.project()))


def parse_document(ctx: FileContext, document: Any) -> ParseResult:
    """A JSON chat array, or an object holding one under `messages` (with optional session_id, title, model)."""
    chat = _Chat(ctx)
    for position, item in enumerate(document_messages(document) or [], start=1):
        where = f"messages[{position - 1}]: "
        if isinstance(item, dict):
            chat.add(item, f"M{position}", 0, where)
        else:
            chat.warn(0, f"{where}expected a message object, found {type(item).__name__}; skipped")
    header = as_dict(document)
    session = SessionDraft(
        session_id=as_id(header.get("session_id")) or ctx.file_session_id,
        project=ctx.project(),
        title=as_str(header.get("title")),
        model=as_str(header.get("model")),
        metadata={key: value for key, value in header.items() if key not in DOCUMENT_FIELDS},
    )
    return chat.result(session)


class _Chat:
    """Messages of one chat, with tool calls open until their tool message arrives."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.warnings: list[ParseWarning] = []
        self.skipped: Counter[str] = Counter()
        self.messages: list[DraftMessage] = []
        self.calls = CallBook()
        self.function_calls: list[DraftCall] = []  # legacy `function_call`s awaiting a `function` message

    def warn(self, line: int, reason: str) -> None:
        self.warnings.append(ParseWarning(self.ctx.path, line, reason))

    def add(self, obj: dict[str, Any], message_id: str, line: int, where: str) -> None:
        problem = line_problem(obj)
        if problem:
            self.warn(line, f"{where}{problem}; skipped")
            return
        role = obj["role"]
        text = _content_text(obj.get("content"))
        if role in ("tool", "function") and self._attach(obj, text):
            return
        if role in ("tool", "function"):
            self.warn(line, f"{where}{role} message answers no known call; kept as a tool message")
            role = "tool"
        refusal = as_str(obj.get("refusal"))
        message = DraftMessage(
            message_id=message_id,
            role="system" if role == "developer" else role,
            line=line,
            timestamp=parse_timestamp(obj.get("timestamp")),
            kind=KIND_INJECTED if role in ("system", "developer") else KIND_MESSAGE,
            speaker=as_str(obj.get("name")) if role in ("user", "assistant") else None,
            texts=[text or refusal or ""],
            metadata={key: value for key, value in obj.items() if key not in KNOWN_FIELDS},
        )
        for tool_call in map(as_dict, as_list(obj.get("tool_calls"))):
            function = as_dict(tool_call.get("function"))
            call = DraftCall(
                name=as_str(function.get("name")) or as_str(tool_call.get("type")) or "unknown",
                input=json_arguments(function.get("arguments")),
                call_id=as_str(tool_call.get("id")),
            )
            message.calls.append(call)
            self.calls.add(call)
        legacy = as_dict(obj.get("function_call"))
        if legacy:
            call = DraftCall(as_str(legacy.get("name")) or "unknown", json_arguments(legacy.get("arguments")))
            message.calls.append(call)
            self.function_calls.append(call)
        self.messages.append(message)

    def _attach(self, obj: dict[str, Any], output: str) -> bool:
        """Fill the call this tool (or legacy function) message answers; False when there is none."""
        if obj["role"] == "tool":
            return self.calls.resolve(as_str(obj.get("tool_call_id")), output, False)
        name = as_str(obj.get("name"))
        for call in reversed(self.function_calls):
            if call.name == name and call.output is None:
                call.output = output
                return True
        return False

    def result(self, session: SessionDraft) -> ParseResult:
        session.messages = self.messages
        return build_result(self.ctx.path, FORMAT, [session], self.warnings, self.skipped)


def _content_text(content: Any) -> str:
    """A string, or content parts: text, refusal, image_url, input_audio, file."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in map(as_dict, as_list(content)):
        kind = part.get("type")
        if kind in ("text", "refusal") and isinstance(part.get(kind), str):
            parts.append(part[kind])
        elif kind == "image_url":
            parts.append(image_placeholder(as_dict(part.get("image_url")).get("url")))
        elif kind == "input_audio":
            parts.append(placeholder("audio", as_str(as_dict(part.get("input_audio")).get("format"))))
        elif kind == "file":
            parts.append(placeholder("file", as_str(as_dict(part.get("file")).get("filename"))))
    return "\n\n".join(parts)
