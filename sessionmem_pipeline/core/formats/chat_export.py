"""ChatGPT and Claude.ai data exports: `conversations.json`, a JSON array with one object per conversation.

Each conversation is its own session, so a newer export of the same account yields the same session and message
ids for the conversations it shares with an older one (no duplicates; only changed conversations change).

ChatGPT (`mapping` + `current_node`): the conversation is a tree of nodes `{id, parent, children, message}`; the
shown branch is the path from `current_node` up to the root, read root first (edited and regenerated branches
are left out). A message's `author.role` is its role; `content.content_type` "text"/"multimodal_text" hold
`parts` (images become placeholders), "code" and "execution_output" hold `text`, "thoughts" and
"reasoning_recap" are thinking, "user_editable_context" (custom instructions) is kind=injected. An assistant
message addressed to a tool (`recipient` other than "all") is a ToolCall named after the recipient, filled by the
tool's reply (`author.role` "tool"). Messages hidden from the conversation (`is_visually_hidden_from_conversation`)
and empty system messages are skipped. Times are `create_time` (epoch seconds).

Claude.ai (`chat_messages`): messages in order, `sender` "human"/"assistant"; `content` blocks (`text`,
`thinking`, `tool_use`, `tool_result`) when present, else `text`; attachments and files become placeholders
naming the file. When messages carry `parent_message_uuid` only the branch ending at the last message is read.

Identity: session_id = the conversation id (ChatGPT `id`/`conversation_id`, Claude `uuid`); message_id = the
message id (ChatGPT `message.id`, Claude `uuid`), else `M<n>`; project = "chatgpt" / "claude.ai" (or the Claude
project's name). Session.format is "chatgpt" or "claude_ai".
"""

from __future__ import annotations

from collections import Counter
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
    freeze_session,
    placeholder,
)
from sessionmem_pipeline.core.formats.gemini import decode_json
from sessionmem_pipeline.core.formats.registry import FormatError, Related
from sessionmem_pipeline.core.formats.source import FileContext, parse_timestamp
from sessionmem_pipeline.core.models import KIND_INJECTED, ParseResult, ParseWarning

FORMAT = "chat_export"
CHATGPT, CLAUDE_AI = "chatgpt", "claude_ai"
CHATGPT_ROLES = frozenset({"user", "assistant", "system", "tool"})
MAX_TREE_DEPTH = 100_000  # a corrupt parent chain that loops must end


def parse(ctx: FileContext, data: bytes, related: Related) -> ParseResult:
    document = decode_json(data)
    if not isinstance(document, list):
        raise FormatError("unknown format", f"{ctx.path}: expected a JSON array of conversations")
    warnings: list[ParseWarning] = []
    skipped: Counter[str] = Counter()
    result = ParseResult(ctx.path, FORMAT)
    for index, item in enumerate(document):
        conversation = as_dict(item)
        if "mapping" in conversation:
            format_name, draft = CHATGPT, _chatgpt(conversation, skipped)
        elif "chat_messages" in conversation:
            format_name, draft = CLAUDE_AI, _claude(conversation, skipped)
        else:
            warnings.append(ParseWarning(ctx.path, 0, f"conversation {index}: neither ChatGPT nor Claude.ai; skipped"))
            continue
        draft.session_id = draft.session_id or f"{ctx.file_session_id}#{index + 1}"
        session = freeze_session(draft, ctx.path, format_name, warnings, skipped)
        if session is not None:
            result.sessions.append(session)
    result.warnings = sorted(warnings, key=lambda warning: warning.line)
    result.skipped = dict(sorted(skipped.items()))
    return result


# ---- ChatGPT --------------------------------------------------------------------------------------------------


def _chatgpt(conversation: dict[str, Any], skipped: Counter[str]) -> SessionDraft:
    mapping = as_dict(conversation.get("mapping"))
    draft = SessionDraft(
        session_id=as_id(conversation.get("id")) or as_id(conversation.get("conversation_id")) or "",
        project=CHATGPT,
        title=as_str(conversation.get("title")),
        model=as_str(conversation.get("default_model_slug")),
    )
    calls: dict[str, DraftCall] = {}  # recipient -> the last call addressed to it, waiting for its reply
    for position, node in enumerate(_current_branch(mapping, conversation.get("current_node")), start=1):
        message = as_dict(node.get("message"))
        if not message:
            continue
        author = as_dict(message.get("author"))
        role = as_str(author.get("role"))
        metadata = as_dict(message.get("metadata"))
        if role not in CHATGPT_ROLES or metadata.get("is_visually_hidden_from_conversation") is True:
            skipped["hidden message"] += 1
            continue
        content = as_dict(message.get("content"))
        kind = as_str(content.get("content_type")) or "text"
        text = _chatgpt_text(content)
        if role == "tool":
            call = calls.pop(as_str(author.get("name")) or "", None)
            if call is not None:
                call.output = text
                continue
        draft_message = DraftMessage(
            message_id=as_id(message.get("id")) or as_id(node.get("id")) or f"M{position}",
            role=role,
            line=0,
            timestamp=parse_timestamp(message.get("create_time")),
            kind=KIND_INJECTED if kind == "user_editable_context" or role == "system" else "message",
            speaker=as_str(author.get("name")) if role == "tool" else None,
        )
        recipient = as_str(message.get("recipient")) or "all"
        if kind in ("thoughts", "reasoning_recap"):
            draft_message.thinking.append(text)
        elif role == "assistant" and recipient != "all":
            call = DraftCall(recipient, {"code": text} if kind == "code" else {"input": text})
            draft_message.calls.append(call)
            calls[recipient] = call
        else:
            draft_message.texts.append(text)
        model = as_str(metadata.get("model_slug"))
        if model:
            draft_message.metadata["model"] = model
        draft.messages.append(draft_message)
    return draft


def _current_branch(mapping: dict[str, Any], current: Any) -> list[dict[str, Any]]:
    """Nodes from the root to `current_node` (else to the last node of the mapping)."""
    node_id = current if isinstance(current, str) and current in mapping else next(reversed(mapping), None)
    path: list[dict[str, Any]] = []
    seen: set[str] = set()
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen and len(path) < MAX_TREE_DEPTH:
        seen.add(node_id)
        node = as_dict(mapping[node_id])
        path.append(node)
        node_id = node.get("parent")
    return path[::-1]


def _chatgpt_text(content: dict[str, Any]) -> str:
    parts: list[str] = []
    for part in as_list(content.get("parts")):
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict):
            kind = as_str(part.get("content_type")) or ""
            parts.append(as_str(part.get("text")) or placeholder("image" if "image" in kind else "file"))
    for key in ("text", "result"):
        if isinstance(content.get(key), str):
            parts.append(content[key])
    for thought in map(as_dict, as_list(content.get("thoughts"))):
        parts.append(": ".join(p for p in (as_str(thought.get("summary")), as_str(thought.get("content"))) if p))
    context = [as_str(content.get(key)) for key in ("user_profile", "user_instructions")]
    parts.extend(text for text in context if text)
    return "\n\n".join(part for part in parts if part)


# ---- Claude.ai ------------------------------------------------------------------------------------------------


def _claude(conversation: dict[str, Any], skipped: Counter[str]) -> SessionDraft:
    project = as_dict(conversation.get("project"))
    draft = SessionDraft(
        session_id=as_id(conversation.get("uuid")) or "",
        project=as_str(project.get("name")) or "claude.ai",
        title=as_str(conversation.get("name")),
    )
    summary = as_str(conversation.get("summary"))
    if summary:
        draft.metadata["summary"] = summary
    book = CallBook()
    for position, item in enumerate(_claude_branch(as_list(conversation.get("chat_messages"))), start=1):
        sender = as_str(item.get("sender"))
        if sender not in ("human", "assistant"):
            skipped["unknown sender"] += 1
            continue
        message = DraftMessage(
            message_id=as_id(item.get("uuid")) or f"M{position}",
            role="user" if sender == "human" else "assistant",
            line=0,
            timestamp=parse_timestamp(item.get("created_at")),
        )
        blocks = [as_dict(block) for block in as_list(item.get("content"))]
        if blocks:
            _claude_blocks(message, blocks, book)
        else:
            message.texts.append(as_str(item.get("text")) or "")
        for attachment in map(as_dict, as_list(item.get("attachments")) + as_list(item.get("files"))):
            message.texts.append(placeholder("file", as_str(attachment.get("file_name"))))
        draft.messages.append(message)
    return draft


def _claude_branch(messages: list[Any]) -> list[dict[str, Any]]:
    items = [as_dict(item) for item in messages]
    by_id = {as_str(item.get("uuid")): item for item in items if as_str(item.get("uuid"))}
    if not items or not all("parent_message_uuid" in item for item in items):
        return items
    branch: list[dict[str, Any]] = []
    node: dict[str, Any] | None = items[-1]
    seen: set[int] = set()
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        branch.append(node)
        node = by_id.get(as_str(node.get("parent_message_uuid")) or "")
    return branch[::-1]


def _claude_blocks(message: DraftMessage, blocks: list[dict[str, Any]], book: CallBook) -> None:
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            message.texts.append(as_str(block.get("text")) or "")
        elif kind == "thinking":
            message.thinking.append(as_str(block.get("thinking")) or "")
        elif kind == "tool_use":
            call = DraftCall(as_str(block.get("name")) or "unknown", as_dict(block.get("input")), as_str(block.get("id")))
            message.calls.append(call)
            book.add(call)
        elif kind == "tool_result":
            output = "\n".join(as_str(as_dict(part).get("text")) or "" for part in as_list(block.get("content")))
            if not book.resolve(as_str(block.get("tool_use_id")), output, block.get("is_error") is True):
                _fill_by_name(message, as_str(block.get("name")), output, block.get("is_error") is True)


def _fill_by_name(message: DraftMessage, name: str | None, output: str, is_error: bool) -> None:
    """Claude.ai results often carry no call id: the open call of that name in the same message."""
    for call in message.calls:
        if call.output is None and call.name == name:
            call.output, call.is_error = output, is_error
            return
    message.texts.append(output if not name else f"[{name} result]\n{output}")

