"""Live-context compaction (spec 002): an agent's older messages become a summary; recent ones stay verbatim.

`compact(messages, config)` decides whether to compact (more than `trigger_threshold` messages in the live context),
keeps the `preserve_recent` most recent messages intact (moving the boundary back rather than separating a tool
result from its call), keeps system prompts and harness-injected context verbatim (`preserve_system`), and replaces
the rest with a `ConversationSummary` whose content is at most `target_compression` times the tokens it replaces.
`SummarizedSession.context()` is what to send next: system prompts, one system message with the summaries, the
recent messages.

The offline summary is extractive and deterministic: the goal (first request), later requests, decisions (the
decision detector), files modified and commands run (the collapsing records), and the state at the end (the last
assistant words), taken in that order of importance while they fit. With a chat model the spec's prompt is used,
in parts of at most LLM_INPUT_TOKENS so nothing is silently cut; an unusable reply falls back to the extractive
summary. Summaries are built from sanitized text only (`parse_transcript` sanitizes as ingest does, and stored
messages were sanitized at ingest), so secrets never reach a summary or the model; a model's reply is redacted again.

Compaction-aware: a transcript may already hold the agent's own compaction summaries (Claude Code
`isCompactSummary`, Codex `compacted`; `KIND_COMPACTION`). `find_agent_compactions` says which messages each one
replaced; those become `ConversationSummary`s with source "agent". The live context starts after the last one, so
nothing the agent already summarized is summarized (or counted) twice, while its messages stay in the transcript
and searchable.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sessionmem_pipeline.core.collapse import ToolUse, collapse_messages, summarize_tools
from sessionmem_pipeline.core.flags import has_decision
from sessionmem_pipeline.core.formats import parse_file
from sessionmem_pipeline.core.llm_protocol import ChatModel, LLMError
from sessionmem_pipeline.core.models import (
    KIND_COMPACTION,
    KIND_EVENT,
    KIND_INJECTED,
    KIND_MESSAGE,
    CollapsedMessage,
    Message,
    ParsedSession,
    content_hash,
)
from sessionmem_pipeline.core.recap import clip_line, opening_sentences, prose_lines, split_sentences
from sessionmem_pipeline.core.redact import redact
from sessionmem_pipeline.core.sanitize import sanitize_session
from sessionmem_pipeline.core.tokens import count_tokens, truncate_to_tokens
from sessionmem_pipeline.core.topics import keyword_topics

SOURCE_SESSIONMEM = "sessionmem"
SOURCE_AGENT = "agent"
MAX_DECISIONS = 5  # spec 002 keeps the top 5
MAX_LATER_REQUESTS = 8  # requests after the first that a summary lists, the latest ones
LLM_INPUT_TOKENS = 12_000
"""Transcript tokens per model call; a longer range is summarized in parts, one summary each."""


@dataclass(frozen=True)
class SummarizationConfig:
    """Spec 002's knobs. `model` names the chat model the caller builds (providers.build_chat_model) and passes to
    `compact`; None means the offline extractive summary."""

    enabled: bool = True
    trigger_threshold: int = 50  # compact when the live context holds more messages than this
    target_compression: float = 0.3  # summary tokens / tokens of the messages it replaces, at most
    preserve_recent: int = 10  # the N most recent messages stay verbatim
    preserve_system: bool = True  # system prompts and injected context are never summarized
    model: str | None = None

    def __post_init__(self) -> None:
        if not 0 < self.target_compression < 1:
            raise ValueError(f"target_compression must be between 0 and 1, got {self.target_compression}")
        if self.preserve_recent < 0 or self.trigger_threshold < 0:
            raise ValueError("preserve_recent and trigger_threshold must not be negative")


@dataclass(frozen=True)
class ConversationSummary:
    """A summary standing in for a range of messages (spec 002), ours or the agent's own."""

    id: str
    covering_messages: tuple[int, int] | None  # 0-based positions in the session's messages, inclusive
    first_message_id: str | None
    last_message_id: str | None
    message_count: int
    content: str
    key_decisions: tuple[str, ...]
    files_modified: tuple[str, ...]
    tools_used: tuple[ToolUse, ...]  # spec 002 ToolUsageSummary: name, count, notable uses
    generated_at: datetime | None
    token_count: int
    source: str = SOURCE_SESSIONMEM  # "sessionmem" | "agent"
    model: str | None = None  # the chat model that wrote it; None when extractive or the agent's

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source": self.source,
            "covering_messages": list(self.covering_messages) if self.covering_messages else None,
            "first_message_id": self.first_message_id,
            "last_message_id": self.last_message_id,
            "message_count": self.message_count,
            "content": self.content,
            "key_decisions": list(self.key_decisions),
            "files_modified": list(self.files_modified),
            "tools_used": [
                {"tool": t.name, "count": t.count, "notable_uses": list(t.notable_uses)} for t in self.tools_used
            ],
            "generated_at": self.generated_at.isoformat() if self.generated_at else None,
            "token_count": self.token_count,
            "model": self.model,
        }


@dataclass(frozen=True)
class SessionMetadata:
    session_id: str
    project: str
    started_at: datetime | None
    ended_at: datetime | None


@dataclass(frozen=True)
class CompactionStats:
    """What spec 002's stats box shows, measured in cl100k tokens of the context sent to the model."""

    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    summarized_messages: int
    summarized_tokens: int  # tokens of the messages our summaries replace
    summary_tokens: int  # tokens our summaries take in the context: content, range lines, files modified
    target_compression: float
    topics: tuple[str, ...] = ()
    files_modified: tuple[str, ...] = ()
    commands_run: int = 0
    decisions: int = 0

    @property
    def tokens_saved(self) -> int:
        return self.tokens_before - self.tokens_after

    @property
    def summary_ratio(self) -> float | None:
        """Summary tokens over the tokens they replace; None when nothing was summarized."""
        return self.summary_tokens / self.summarized_tokens if self.summarized_tokens else None

    @property
    def met_target(self) -> bool:
        return self.summary_ratio is not None and self.summary_ratio <= self.target_compression

    def as_json(self) -> dict[str, Any]:
        return {
            "messages_before": self.messages_before,
            "messages_after": self.messages_after,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "tokens_saved": self.tokens_saved,
            "summarized_messages": self.summarized_messages,
            "summarized_tokens": self.summarized_tokens,
            "summary_tokens": self.summary_tokens,
            "summary_ratio": self.summary_ratio,
            "target_compression": self.target_compression,
            "met_target": self.met_target,
            "topics": list(self.topics),
            "files_modified": list(self.files_modified),
            "commands_run": self.commands_run,
            "decisions": self.decisions,
        }


@dataclass(frozen=True)
class SummarizedSession:
    """Spec 002's SummarizedSession: the summaries (agent's and ours), the system prompts and recent messages kept
    verbatim, and what it achieved. `context()` is the message list to send next."""

    metadata: SessionMetadata
    summaries: tuple[ConversationSummary, ...]
    system_messages: tuple[Message, ...]
    recent_messages: tuple[Message, ...]
    full_message_count: int
    compacted: bool
    reason: str  # why it did or did not compact, for the CLI
    stats: CompactionStats
    message_positions: dict[str, int] = field(default_factory=dict, repr=False)  # message_id -> 0-based position

    @property
    def context_summaries(self) -> tuple[ConversationSummary, ...]:
        """The summaries the context needs: the agent's latest (it already folds in its earlier ones) and ours."""
        last_agent = max((i for i, s in enumerate(self.summaries) if s.source == SOURCE_AGENT), default=0)
        return self.summaries[last_agent:]

    def context(self) -> list[Message]:
        return _assemble(self.metadata, self.system_messages, self.context_summaries, self.recent_messages)

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": self.metadata.session_id,
            "project": self.metadata.project,
            "compacted": self.compacted,
            "reason": self.reason,
            "full_message_count": self.full_message_count,
            "stats": self.stats.as_json(),
            "summaries": [summary.as_json() for summary in self.summaries],
            "system_message_ids": [m.message_id for m in self.system_messages],
            "recent_message_ids": [m.message_id for m in self.recent_messages],
        }


# ---- what a message costs in context ---------------------------------------------------------------------------


def message_tokens(message: Message) -> int:
    """cl100k tokens a message takes in a model's context: text, thinking, tool inputs and outputs."""
    parts = [message.text, message.thinking]
    for call in message.tool_calls:
        parts += [call.name, json.dumps(call.input, ensure_ascii=False, sort_keys=True, default=str), call.output or ""]
    return count_tokens("\n".join(part for part in parts if part))


def _is_system_context(message: Message) -> bool:
    """A system prompt or context the harness injected (AGENTS.md, environment): kept, never summarized."""
    return message.kind == KIND_INJECTED or (message.kind == KIND_MESSAGE and message.role == "system")


def _is_conversation(message: Message) -> bool:
    return message.kind == KIND_MESSAGE and message.role != "system"


# ---- the agent's own compactions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentCompaction:
    """A compaction summary the agent wrote into its transcript, and the messages it replaced."""

    message_id: str
    position: int  # in the session's messages
    text: str
    covered_positions: tuple[int, ...]  # the conversation messages since the previous compaction
    covered_message_ids: tuple[str, ...]


def find_agent_compactions(messages: Sequence[Message]) -> list[AgentCompaction]:
    """The agent's compaction summaries in order, each with the conversation messages it replaced (those after
    the previous one). A transcript that starts with one (a continued session) has it cover nothing here."""
    found = []
    start = 0
    for position, message in enumerate(messages):
        if message.kind != KIND_COMPACTION:
            continue
        covered = tuple(i for i in range(start, position) if _is_conversation(messages[i]))
        ids = tuple(messages[i].message_id for i in covered)
        found.append(AgentCompaction(message.message_id, position, message.text, covered, ids))
        start = position + 1
    return found


def agent_summaries(messages: Sequence[Message]) -> list[ConversationSummary]:
    """The agent's compaction summaries as ConversationSummaries (source "agent"), for summary history, `history`
    and recap, from sanitized messages; tools and files come from the messages they replaced."""
    summaries = []
    for compaction in find_agent_compactions(messages):
        covered = [messages[i] for i in compaction.covered_positions]
        content = compaction.text.strip()
        usage = summarize_tools(collapse_messages(covered))
        summaries.append(
            ConversationSummary(
                id=_summary_id(messages[compaction.position].session_id, compaction.covered_message_ids, content),
                covering_messages=_span(compaction.covered_positions),
                first_message_id=compaction.covered_message_ids[0] if covered else None,
                last_message_id=compaction.covered_message_ids[-1] if covered else None,
                message_count=len(covered),
                content=content,
                key_decisions=tuple(_decisions([content])),
                files_modified=usage.files_modified,
                tools_used=usage.tools,
                generated_at=messages[compaction.position].timestamp,
                token_count=count_tokens(content),
                source=SOURCE_AGENT,
            )
        )
    return summaries


def _span(positions: Sequence[int]) -> tuple[int, int] | None:
    return (positions[0], positions[-1]) if positions else None


def _summary_id(session_id: str, message_ids: Sequence[str], content: str) -> str:
    return content_hash("\n".join([session_id, *message_ids, content]))[:16]


# ---- extractive summary ----------------------------------------------------------------------------------------


def _decisions(texts: Sequence[str]) -> list[str]:
    """Up to MAX_DECISIONS decision sentences, in order, each once."""
    found: list[str] = []
    for text in texts:
        for line in prose_lines(text):
            for sentence in split_sentences(line):
                if has_decision(sentence) and (clipped := clip_line(sentence, 200)) not in found:
                    found.append(clipped)
    return found[:MAX_DECISIONS]


@dataclass(frozen=True)
class _Item:
    priority: int  # lower is kept first when the budget is tight
    order: int  # where it is shown
    text: str


def _extractive_items(
    messages: Sequence[Message], collapsed: Sequence[CollapsedMessage], decisions: Sequence[str]
) -> list[_Item]:
    requests = [
        text
        for m in messages
        if m.role == "user" and m.kind == KIND_MESSAGE and (text := opening_sentences(m.text))
    ]
    items: list[_Item] = []
    if requests:
        items.append(_Item(0, 0, f"Goal: {requests[0]}"))
    later = list(enumerate(requests[1:], start=1))[-MAX_LATER_REQUESTS:]
    for n, request in later:
        items.append(_Item(10 + len(requests) - n, n, f"Then asked: {request}"))  # the latest first
    for n, decision in enumerate(decisions):
        items.append(_Item(2 + n, 100 + n, f"Decision: {decision}"))
    usage = summarize_tools(collapsed)
    if usage.commands:
        shown = ", ".join(f"`{clip_line(c, 60)}`" for c in usage.commands[:3])
        items.append(_Item(30, 201, f"Commands run ({len(usage.commands)}): {shown}"))
    if usage.failures:
        items.append(_Item(31, 202, f"Last failure: {clip_line(usage.failures[-1], 200)}"))
    replies = [m for m in messages if m.role == "assistant" and m.kind == KIND_MESSAGE and m.text.strip()]
    if replies and (state := opening_sentences(replies[-1].text)):
        items.append(_Item(1, 300, f"State at the end: {state}"))
    return items


def _render_items(items: Sequence[_Item]) -> str:
    return "\n".join(f"- {item.text}" for item in sorted(items, key=lambda item: item.order))


def _extractive_content(items: Sequence[_Item], budget: int) -> str:
    """The items that fit `budget` tokens, most important first; the most important one cut to fit if none does.

    Lines are counted one by one (a line and its newline add their own tokens), then the whole is checked once.
    """
    chosen: list[_Item] = []
    used = 0
    for item in sorted(items, key=lambda item: (item.priority, item.order)):
        cost = count_tokens(f"- {item.text}") + 1
        if used + cost <= budget:
            chosen.append(item)
            used += cost
    while chosen and count_tokens(_render_items(chosen)) > budget:
        chosen.remove(max(chosen, key=lambda item: (item.priority, item.order)))
    if chosen or not items:
        return _render_items(chosen)
    return truncate_to_tokens(_render_items([min(items, key=lambda item: item.priority)]), budget).rstrip()


# ---- model summary -----------------------------------------------------------------------------------------------

_LLM_PROMPT = """\
Summarize this conversation segment concisely, in at most {budget} tokens.
Focus on:
1. What the user was trying to accomplish
2. What actions were taken (files changed, commands run)
3. Any important decisions or discoveries
4. Current state at the end of this segment

Keep the summary focused and technical. Use bullet points.
Reply with a JSON object only: {{"summary": "- ...", "key_decisions": ["...", ...]}}"""


def _transcript(collapsed: Sequence[CollapsedMessage]) -> str:
    return "\n\n".join(f"{m.speaker}: {m.text}" for m in collapsed)


def _parts(collapsed: Sequence[CollapsedMessage]) -> list[list[CollapsedMessage]]:
    """Consecutive groups whose transcript fits one model call (message counts add up to a little more than the
    joined text's). A single message longer than that is a part of its own, cut to LLM_INPUT_TOKENS: collapsed
    messages hold no tool output, so only pasted walls of text get there."""
    parts: list[list[CollapsedMessage]] = []
    used = 0
    for message in collapsed:
        tokens = count_tokens(_transcript([message])) + 1  # +1: the blank line between messages
        if parts and used + tokens <= LLM_INPUT_TOKENS:
            parts[-1].append(message)
            used += tokens
        else:
            parts.append([message])
            used = tokens
    return parts


def _llm_summary(llm: ChatModel, collapsed: Sequence[CollapsedMessage], budget: int) -> tuple[str, list[str]]:
    reply = llm.complete_json(
        _LLM_PROMPT.format(budget=budget), truncate_to_tokens(_transcript(collapsed), LLM_INPUT_TOKENS)
    )
    summary = reply.get("summary") if isinstance(reply, dict) else None
    decisions = reply.get("key_decisions", []) if isinstance(reply, dict) else None
    if not isinstance(summary, str) or not summary.strip():
        expected = '{"summary": "...", "key_decisions": [...]}'
        raise LLMError(f"{llm.model} replied {str(reply)[:200]!r}; expected {expected}")
    if not isinstance(decisions, list) or not all(isinstance(d, str) for d in decisions):
        raise LLMError(f"{llm.model} replied key_decisions {str(decisions)[:200]!r}; expected a list of strings")
    kept: list[str] = []
    for line in redact(summary).strip().splitlines():  # whole lines while they fit: never half a bullet
        if count_tokens("\n".join([*kept, line])) > budget:
            break
        kept.append(line)
    if not kept:
        raise LLMError(f"{llm.model} wrote a summary whose first line alone exceeds the budget of {budget} tokens")
    return "\n".join(kept), [clip_line(redact(d), 200) for d in decisions[:MAX_DECISIONS]]


# ---- compaction --------------------------------------------------------------------------------------------------


def should_compact(messages: Sequence[Message], config: SummarizationConfig) -> bool:
    """Spec 002's trigger: enabled, and the live context (after the agent's last compaction) holds more than
    `trigger_threshold` messages."""
    return config.enabled and len(_live_positions(messages)) > config.trigger_threshold


def _live_positions(messages: Sequence[Message]) -> list[int]:
    compactions = find_agent_compactions(messages)
    start = compactions[-1].position + 1 if compactions else 0
    return [i for i in range(start, len(messages)) if messages[i].kind not in (KIND_EVENT, KIND_COMPACTION)]


def _recent_start(messages: Sequence[Message], live: Sequence[int], preserve_recent: int) -> int:
    """Index into `live` where the verbatim tail starts: the last N messages, moved back while it would begin with
    a tool result (its call stays with it)."""
    start = max(0, len(live) - preserve_recent)
    while 0 < start < len(live) and messages[live[start]].role == "tool":
        start -= 1
    return start


def _metadata(messages: Sequence[Message]) -> SessionMetadata:
    times = [m.timestamp for m in messages if m.timestamp is not None]
    first = messages[0] if messages else None
    return SessionMetadata(
        session_id=first.session_id if first else "",
        project=first.project if first else "",
        started_at=min(times, default=None),
        ended_at=max(times, default=None),
    )


_CONTEXT_HEADER = "Previous conversation context:"


def format_summaries(summaries: Sequence[ConversationSummary]) -> str:
    """The system message that carries summaries into the context (spec 002 formatSummariesForContext)."""
    blocks = [_summary_block(s.content, s.covering_messages, s.source, s.files_modified) for s in summaries]
    return "\n\n".join([_CONTEXT_HEADER, *blocks])


def _summary_block(content: str, span: tuple[int, int] | None, source: str, files: Sequence[str]) -> str:
    """One summary as the context carries it: its range, its content, then the files it modified (listed here
    only, never in the content too)."""
    by = "summarized by the agent" if source == SOURCE_AGENT else "summarized"
    where = f"messages {span[0] + 1}-{span[1] + 1}, {by}" if span else by
    block = f"--- Earlier in conversation ({where}) ---\n{content}"
    return block + (f"\nFiles modified: {', '.join(files)}" if files else "")


def _carried_tokens(summaries: Sequence[ConversationSummary]) -> int:
    """Tokens the summaries take in the context: content, range lines and files modified."""
    blocks = [_summary_block(s.content, s.covering_messages, s.source, s.files_modified) for s in summaries]
    return count_tokens("\n\n".join(blocks))


def _content_budget(
    config: SummarizationConfig, messages: Sequence[Message], positions: Sequence[int], costs: Mapping[str, int]
) -> int:
    """Tokens the content of a summary of the messages at `positions` may take: the target share of what it
    replaces, less what the context adds around it (range line, files modified), so that the summary as carried
    meets the target. At least 1: a budget the framing alone exceeds shows as a missed target in the stats."""
    selected = [messages[i] for i in positions]
    files = summarize_tools(collapse_messages(selected)).files_modified
    framing = count_tokens(_summary_block("", _span(positions), SOURCE_SESSIONMEM, files))
    return max(int(config.target_compression * sum(costs[m.message_id] for m in selected)) - framing, 1)


def _assemble(
    metadata: SessionMetadata,
    system: Sequence[Message],
    summaries: Sequence[ConversationSummary],
    recent: Sequence[Message],
) -> list[Message]:
    if not summaries:
        return [*system, *recent]
    carrier = Message(
        session_id=metadata.session_id,
        seq=recent[0].seq if recent else 0,
        message_id="summary:" + "+".join(s.id for s in summaries),
        role="system",
        text=format_summaries(summaries),
        kind=KIND_COMPACTION,
        project=metadata.project,
    )
    return [*system, carrier, *recent]


def _context_tokens(messages: Sequence[Message], costs: Mapping[str, int]) -> int:
    """Tokens of a context; `costs` holds the known messages' (counted once per compaction), the rest are counted."""
    return sum(costs[m.message_id] if m.message_id in costs else message_tokens(m) for m in messages)


def _unique_system(messages: Sequence[Message], positions: Sequence[int]) -> list[Message]:
    """System context at these positions, each distinct text once (harnesses re-inject it after a compaction)."""
    seen: set[str] = set()
    kept = []
    for i in positions:
        if _is_system_context(messages[i]) and messages[i].text not in seen:
            seen.add(messages[i].text)
            kept.append(messages[i])
    return kept


def compact(
    messages: Sequence[Message],
    config: SummarizationConfig = SummarizationConfig(),
    *,
    llm: ChatModel | None = None,
    now: datetime | None = None,
) -> SummarizedSession:
    """Compact one session's messages (in session order) for the next model call; see the module doc.

    `now` stamps our summaries' `generated_at` (None leaves it unset, keeping the result a pure function of its
    input). System events never enter a context and are not counted as messages.
    """
    metadata = _metadata(messages)
    agent = agent_summaries(messages)
    live = _live_positions(messages)
    start = _recent_start(messages, live, config.preserve_recent)
    before_live = range(live[0] if live else len(messages))
    system_before = _unique_system(messages, before_live) if config.preserve_system else []
    older, recent = live[:start], live[start:]
    kept_system = [i for i in older if _is_system_context(messages[i])] if config.preserve_system else []
    summarized = [i for i in older if i not in kept_system]
    full_count = sum(1 for m in messages if m.kind != KIND_EVENT)
    agent_last = agent[-1:]
    before_context = _assemble(metadata, system_before, agent_last, [messages[i] for i in live])
    costs = {m.message_id: message_tokens(m) for m in messages if m.kind != KIND_EVENT}
    tokens_before = _context_tokens(before_context, costs)

    def unchanged(reason: str) -> SummarizedSession:
        stats = CompactionStats(
            messages_before=len(before_context),
            messages_after=len(before_context),
            tokens_before=tokens_before,
            tokens_after=tokens_before,
            summarized_messages=0,
            summarized_tokens=0,
            summary_tokens=0,
            target_compression=config.target_compression,
        )
        return SummarizedSession(
            metadata=metadata,
            summaries=tuple(agent),
            system_messages=tuple(system_before),
            recent_messages=tuple(messages[i] for i in live),
            full_message_count=full_count,
            compacted=False,
            reason=reason,
            stats=stats,
            message_positions=_positions(messages),
        )

    if not config.enabled:
        return unchanged("compaction is disabled")
    if not should_compact(messages, config):
        threshold = config.trigger_threshold
        return unchanged(f"{len(live)} messages in context, not more than the trigger threshold of {threshold}")
    if not any(_is_conversation(messages[i]) for i in summarized):
        return unchanged(f"nothing older than the {config.preserve_recent} most recent messages to summarize")

    ours = _summaries(messages, summarized, config, llm, now, costs)
    summarized_tokens = sum(costs[messages[i].message_id] for i in summarized)
    summary_tokens = _carried_tokens(ours)
    if not any(s.content for s in ours):
        return unchanged("the older messages hold nothing to summarize within the target")
    if summary_tokens >= summarized_tokens:
        return unchanged("a summary would not be shorter than the messages it replaces")
    system = [*system_before, *_unique_system(messages, kept_system)]
    recent_messages = [messages[i] for i in recent]
    after_context = _assemble(metadata, system, [*agent_last, *ours], recent_messages)
    collapsed = collapse_messages([messages[i] for i in summarized])
    usage = summarize_tools(collapsed)
    stats = CompactionStats(
        messages_before=len(before_context),
        messages_after=len(after_context),
        tokens_before=tokens_before,
        tokens_after=_context_tokens(after_context, costs),
        summarized_messages=len(summarized),
        summarized_tokens=summarized_tokens,
        summary_tokens=summary_tokens,
        target_compression=config.target_compression,
        topics=tuple(keyword_topics("\n\n".join(m.text for m in collapsed), exclude=_speakers(collapsed))),
        files_modified=usage.files_modified,
        commands_run=len(usage.commands),
        decisions=sum(len(s.key_decisions) for s in ours),
    )
    return SummarizedSession(
        metadata=metadata,
        summaries=(*agent, *ours),
        system_messages=tuple(system),
        recent_messages=tuple(recent_messages),
        full_message_count=full_count,
        compacted=True,
        reason=f"summarized {len(summarized)} older messages; kept the {len(recent_messages)} most recent",
        stats=stats,
        message_positions=_positions(messages),
    )


def _positions(messages: Sequence[Message]) -> dict[str, int]:
    return {m.message_id: i for i, m in enumerate(messages)}


def _speakers(collapsed: Sequence[CollapsedMessage]) -> set[str]:
    return {word.lower() for m in collapsed for word in m.speaker.split()}


def _summaries(
    messages: Sequence[Message],
    positions: Sequence[int],
    config: SummarizationConfig,
    llm: ChatModel | None,
    now: datetime | None,
    costs: Mapping[str, int],
) -> list[ConversationSummary]:
    """Our summaries of the messages at `positions`: one per model call with an LLM, else one extractive."""
    if llm is not None:
        try:
            return _model_summaries(messages, positions, config, llm, now, costs)
        except LLMError:
            pass  # the extractive summary below: compaction must not fail because the model did
    selected = [messages[i] for i in positions]
    collapsed = collapse_messages(selected)
    budget = _content_budget(config, messages, positions, costs)
    decisions = _decisions([m.text for m in collapsed if m.role in ("user", "assistant")])
    content = _extractive_content(_extractive_items(selected, collapsed, decisions), budget)
    return [_summary(messages, positions, content, decisions, collapsed, now, None)]


def _model_summaries(
    messages: Sequence[Message],
    positions: Sequence[int],
    config: SummarizationConfig,
    llm: ChatModel,
    now: datetime | None,
    costs: Mapping[str, int],
) -> list[ConversationSummary]:
    by_id = {messages[i].message_id: i for i in positions}
    parts = _parts(collapse_messages([messages[i] for i in positions]))
    if not parts:
        raise LLMError("nothing with text to summarize")
    ends = [by_id[part[-1].message_id] for part in parts[:-1]] + [positions[-1]]
    summaries = []
    for n, part in enumerate(parts):
        # Each summary replaces a contiguous range: messages that collapse to nothing go with the part before them.
        part_positions = [i for i in positions if (n == 0 or i > ends[n - 1]) and i <= ends[n]]
        budget = _content_budget(config, messages, part_positions, costs)
        content, decisions = _llm_summary(llm, part, budget)
        summaries.append(_summary(messages, part_positions, content, decisions, part, now, llm.model))
    return summaries


def _summary(
    messages: Sequence[Message],
    positions: Sequence[int],
    content: str,
    decisions: Sequence[str],
    collapsed: Sequence[CollapsedMessage],
    now: datetime | None,
    model: str | None,
) -> ConversationSummary:
    ids = [messages[i].message_id for i in positions]
    usage = summarize_tools(collapsed)
    return ConversationSummary(
        id=_summary_id(messages[positions[0]].session_id, ids, content),
        covering_messages=_span(positions),
        first_message_id=ids[0],
        last_message_id=ids[-1],
        message_count=len(ids),
        content=content,
        key_decisions=tuple(decisions),
        files_modified=usage.files_modified,
        tools_used=usage.tools,
        generated_at=now,
        token_count=count_tokens(content),
        model=model,
    )


# ---- reading a transcript file and showing the result ------------------------------------------------------------


def parse_transcript(path: str, data: bytes, *, session_id: str | None = None) -> ParsedSession:
    """One session of a transcript file's bytes (any supported format): `session_id`, else the file's last session
    (the one still going), sanitized as ingest stores it (core/sanitize.py), so the messages kept verbatim carry no
    secret or private span either. Raises ValueError naming the file when there is none to compact."""
    result = parse_file(path, os.path.dirname(path) or ".", data, final=True)
    sessions = [s for s in result.sessions if s.messages]
    if session_id is not None:
        sessions = [s for s in sessions if s.session_id == session_id]
        if not sessions:
            found = ", ".join(s.session_id for s in result.sessions) or "none"
            raise ValueError(f"{path}: no session {session_id!r} in this file (sessions: {found})")
    if not sessions:
        problems = "; ".join(str(w) for w in result.warnings[:3])
        raise ValueError(f"{path}: no messages found{f' ({problems})' if problems else ''}")
    return sanitize_session(sessions[-1])


def _humanized(tag: str) -> str:
    words = tag.replace("-", " ")
    return words[:1].upper() + words[1:]


def _share(ratio: float) -> str:
    """A ratio as a percentage that does not round small ones away: 0.9%, 12%."""
    return f"{ratio:.1%}" if ratio < 0.1 else f"{ratio:.0%}"


def render_context(session: SummarizedSession) -> str:
    """The context to send next, for people: each message with its role, tool calls as their one-line narration;
    messages with nothing to show (a bare tool result, an empty turn) are left out rather than printed empty."""
    blocks = []
    for message in session.context():
        text = message.text.strip()
        if message.kind == KIND_MESSAGE and message.role != "system":
            text = "\n".join(c.text for c in collapse_messages([message]) if c.text.strip()).strip()
        if text:
            blocks.append(f"[{message.role}] {text}")
    return "\n\n".join(blocks)


def render_stats_box(session: SummarizedSession) -> str:
    """Spec 002's "Session Summary" box: messages before and after, tokens saved, topics, files, commands, decisions."""
    stats = session.stats
    reduction = 1 - stats.messages_after / stats.messages_before if stats.messages_before else 0.0
    rows = [f"Messages: {stats.messages_before} → {stats.messages_after} ({reduction:.0%} reduction)"]
    rows.append(f"Tokens saved: ~{stats.tokens_saved:,}")
    if stats.summary_ratio is not None:
        rows.append(
            f"Summary: {stats.summary_tokens:,} tokens in place of {stats.summarized_tokens:,} "
            f"({_share(stats.summary_ratio)} of them)"
        )
        verdict = "met" if stats.met_target else "missed"
        rows.append(f"Target: summary at most {_share(stats.target_compression)} of what it replaces: {verdict}")
    if not session.compacted:
        rows.append(f"Not compacted: {session.reason}")
    if stats.topics:
        rows += ["", "Key Topics:", *(f"• {_humanized(topic)}" for topic in stats.topics)]
    rows += [
        "",
        f"Files Modified: {len(stats.files_modified)}",
        f"Commands Run: {stats.commands_run}",
        f"Key Decisions: {stats.decisions}",
    ]
    title = "─ Session Summary "
    width = max(51, max(len(row) for row in rows) + 2)
    top = "┌" + title + "─" * (width - len(title)) + "┐"
    body = [f"│ {row.ljust(width - 1)}│" for row in rows]
    return "\n".join([top, *body, "└" + "─" * width + "┘"])


def render_history(session: SummarizedSession) -> str:
    """Spec 002's "Viewing Full History": each summary with its message range, then the recent messages."""
    lines = [f"Session history ({session.full_message_count} messages total):", ""]
    for n, summary in enumerate(session.summaries, start=1):
        span = summary.covering_messages
        where = f"Messages {span[0] + 1}-{span[1] + 1}" if span else "Earlier messages"
        by = " (by the agent)" if summary.source == SOURCE_AGENT else ""
        lines.append(f"[Summary {n}] {where}{by}:")
        lines += [f"  {line}" for line in summary.content.splitlines()]
        lines.append("")
    recent = session.recent_messages
    if recent:
        number = {m.message_id: session.message_positions.get(m.message_id, 0) + 1 for m in recent}
        lines.append(f"[Recent] Messages {number[recent[0].message_id]}-{number[recent[-1].message_id]}:")
        for collapsed in collapse_messages(recent):
            text = clip_line(collapsed.text, 160)
            lines.append(f"  Message {number[collapsed.message_id]} ({collapsed.speaker}): {text}")
    return "\n".join(lines).rstrip() + "\n"
