"""What may be stored: every text a parsed session carries, without its `<private>` spans (core/privacy.py) and
with its secrets redacted (core/redact.py), before anything is written.

Both happen once, at ingest, so no table, snapshot, summary, index or output ever holds a private span or a raw
secret; the untouched source file stays the only original. The ingest stage's key includes `REDACTION_VERSION`
and its version, so a change of rules re-ingests (and so re-sanitizes) every file that still exists.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sessionmem_pipeline.core.models import Message, ParsedSession, ToolCall
from sessionmem_pipeline.core.privacy import strip_private
from sessionmem_pipeline.core.redact import redact, redact_named, redact_words


def sanitize_text(text: str) -> str:
    """The text without its private spans, then with its secrets redacted."""
    return redact(strip_private(text))


def sanitize_value(value: Any) -> Any:
    """Strings sanitized wherever they sit in JSON-like data; dict keys are names, kept as they are, and a string
    under one is judged with its name (`{"password": "…"}`, core/redact.py's `redact_named`); a list of strings is
    judged as the command line it may be (`["mysql", "-pPASS"]`, `redact_words`)."""
    if isinstance(value, str):
        return sanitize_text(value)
    if isinstance(value, dict):
        return {
            key: redact_named(key, strip_private(item)) if isinstance(item, str) and isinstance(key, str) else sanitize_value(item)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(item, str) for item in value):  # an argv: judged as its command line too
            return redact_words([strip_private(item) for item in value])
        return [sanitize_value(item) for item in value]
    return value


def _sanitize_call(call: ToolCall) -> ToolCall:
    return dataclasses.replace(
        call, input=sanitize_value(call.input), output=sanitize_text(call.output) if call.output is not None else None
    )


def sanitize_message(message: Message) -> Message:
    return dataclasses.replace(
        message,
        text=sanitize_text(message.text),
        thinking=sanitize_text(message.thinking),
        tool_calls=tuple(_sanitize_call(call) for call in message.tool_calls),
        metadata=sanitize_value(message.metadata),
    )


def sanitize_session(session: ParsedSession) -> ParsedSession:
    """The session with its messages, title and metadata sanitized."""
    return dataclasses.replace(
        session,
        messages=[sanitize_message(m) for m in session.messages],
        title=sanitize_text(session.title) if session.title else session.title,
        metadata=sanitize_value(session.metadata),
    )
