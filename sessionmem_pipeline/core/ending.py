"""How a session ended, decided once from canonical messages for every transcript format.

A session "ended mid-work" only when its last event is
- a tool call with no result, or with no reply after it (the assistant called tools and never answered),
- an aborted turn (Codex `turn_aborted`, Claude Code "[Request interrupted by user]": parsers mark these events with
  metadata["turn_aborted"]), or
- a request with no reply, in a session where the assistant works with tools (a reply was due; a conversation
  between people that ends on someone's message is not cut off).

What is not an event of the conversation is looked through: injected context, compaction summaries, other system
events (API errors, local command output, compact boundaries), slash commands the person ran (`/exit`, `/clear`:
metadata["command"]), and assistant messages with neither text nor tool calls (thinking only). Parsers must give
messages in their real order (what happened last is last) for this to hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sessionmem_pipeline.core.collapse import collapse_tool_call
from sessionmem_pipeline.core.models import KIND_EVENT, KIND_MESSAGE, Message

TURN_ABORTED = "turn_aborted"
"""Message metadata key parsers set (to True) on the event of an aborted or interrupted turn."""


@dataclass(frozen=True)
class SessionEnding:
    """How the session ended; `abrupt` is the mid-work end, described with the message it was decided from."""

    abrupt: bool
    description: str = ""
    message_id: str | None = None


def _is_aborted(message: Message) -> bool:
    return message.kind == KIND_EVENT and message.metadata.get(TURN_ABORTED) is True


def _is_conversation(message: Message) -> bool:
    """An event that can end the conversation: what the person asked, the assistant's reply or calls, a tool result,
    an aborted turn."""
    if _is_aborted(message):
        return True
    if message.kind != KIND_MESSAGE:
        return False
    if message.role == "user":
        return "command" not in message.metadata and bool(message.text.strip())
    if message.role == "assistant":
        return bool(message.text.strip() or message.tool_calls)
    return message.role == "tool"


def session_ending(messages: Sequence[Message]) -> SessionEnding:
    """The session's end (see the module doc): abrupt, why, and the message that shows it."""
    conversation = [m for m in messages if _is_conversation(m)]
    if not conversation:
        return SessionEnding(abrupt=False)
    last = conversation[-1]
    if _is_aborted(last):
        return SessionEnding(True, f"Session ended on an aborted turn ({last.text.strip()}).", last.message_id)
    pending = [call for call in last.tool_calls if call.output is None]
    if pending:
        line = collapse_tool_call(pending[0], last.cwd).line or f"called {pending[0].name}"
        return SessionEnding(True, f"Session ended during a tool call that never returned: {line}", last.message_id)
    if last.role == "assistant" and last.tool_calls:
        line = collapse_tool_call(last.tool_calls[-1], last.cwd).line
        called = f" ({line.rstrip('.')})" if line else ""
        return SessionEnding(True, f"Session ended after a tool call{called}, with no reply after it.", last.message_id)
    if last.role == "tool":
        return SessionEnding(True, "Session ended after a tool call, with no reply after it.", last.message_id)
    agent_session = any(m.role == "assistant" and m.tool_calls for m in conversation)
    if last.role == "user" and agent_session:
        return SessionEnding(True, "Session ended before the last request got a reply.", last.message_id)
    return SessionEnding(abrupt=False)
