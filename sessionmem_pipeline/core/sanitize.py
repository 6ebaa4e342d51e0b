"""What may be stored: every text a parsed session carries, redacted (core/redact.py) before anything is written.

Redaction happens once, at ingest, so no table, snapshot, summary, index or output ever holds a raw secret; the
untouched source file stays the only original. The ingest stage's key includes `REDACTION_VERSION`, so a change of
rules re-ingests (and so re-redacts) every file that still exists.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sessionmem_pipeline.core.models import Message, ParsedSession, ToolCall
from sessionmem_pipeline.core.redact import redact


def redact_value(value: Any) -> Any:
    """Strings redacted wherever they sit in JSON-like data (dict keys are names, kept as they are)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: redact_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(item) for item in value]
    return value


def _redact_call(call: ToolCall) -> ToolCall:
    return dataclasses.replace(
        call, input=redact_value(call.input), output=redact(call.output) if call.output is not None else None
    )


def redact_message(message: Message) -> Message:
    return dataclasses.replace(
        message,
        text=redact(message.text),
        thinking=redact(message.thinking),
        tool_calls=tuple(_redact_call(call) for call in message.tool_calls),
        metadata=redact_value(message.metadata),
    )


def redact_session(session: ParsedSession) -> ParsedSession:
    """The session with its messages, title and metadata redacted."""
    return dataclasses.replace(
        session,
        messages=[redact_message(m) for m in session.messages],
        title=redact(session.title) if session.title else session.title,
        metadata=redact_value(session.metadata),
    )
