"""Structured session summaries (issue 7; specs 000, 002, 003): incremental, map-reduce, LLM or extractive.

One entry point, `summarize_session`, gives a `SessionSummary`: overview, topics, decisions, files modified,
tools used, key points, open items, and the message range it covers. Two summarizers sit behind it:

- the offline default (`llm=None`, model `EXTRACTIVE_MODEL`) needs no model download and is deterministic.
  The overview is composed, not picked: who talked or worked on what and when (topics that came up more
  than once), the first request quoted (a conversation's opener told about its speaker), the work the tool
  records show, and the last report. Key points are the most central statements of the transcript (TextRank
  over TF-IDF vectors, with a redundancy filter; questions are none); key points, decisions and open items
  are told in the third person (`core.reported`: "Paul will send Luke the login"); decisions are the sentences
  `core.flags.has_decision` accepts; files and tools come from `core.collapse.summarize_tools`; topics from
  `core.topics.keyword_topics`; open items from the end of the session (an unanswered request, planned or
  pending work, a question nobody answered, a last tool call that failed). Measured with
  `python benchmarks/summaries.py`.
- with a `ChatModel`, prompts ask for the same structure as JSON; a reply with a missing or mistyped field
  raises `LLMError`, and `summarize_with_fallback` then gives the extractive summary instead. Files and tools
  always come from the tool records, not from the model.

Incremental (spec 003): given the `previous` summary, only the messages after its last message are read and
merged into it; `previous=None` summarizes from the start (`--full`). No silent truncation (spec 003): input
over `max_input_tokens` is split into parts, each summarized (map) and then merged (reduce), and `parts`
records how many. Idempotent (spec 000): `summary_input_hash` names the input; a caller writes a new version
only when the returned summary's `input_hash` differs from the latest stored one.

Messages are `CollapsedMessage`s, whose text is already redacted; the LLM's own output is redacted again.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sessionmem_pipeline.core.collapse import ToolUsage, ToolUse, summarize_tools
from sessionmem_pipeline.core.flags import has_action, has_decision, shell_command_changes_state
from sessionmem_pipeline.core.llm_protocol import ChatModel, LLMError
from sessionmem_pipeline.core.models import (
    CATEGORY_CONSEQUENTIAL,
    CATEGORY_SHELL,
    CATEGORY_UNKNOWN,
    KIND_MESSAGE,
    CollapsedMessage,
    ToolRecord,
    content_hash,
)
from sessionmem_pipeline.core.redact import redact
from sessionmem_pipeline.core.reported import reported
from sessionmem_pipeline.core.textrank import textrank, tfidf_rows
from sessionmem_pipeline.core.tokens import count_tokens, truncate_to_tokens
from sessionmem_pipeline.core.topics import keyword_topics, spoken_form, usable_tags

EXTRACTIVE_MODEL = "extractive-v3"
"""The `model` of offline summaries; a change to the extractive algorithm gets a new name."""
SUMMARY_VERSION = "summary-v3"
"""Part of every input hash: change it whenever prompts or output change, so old summaries are redone."""
DEFAULT_MAX_INPUT_TOKENS = 6000
MIN_INPUT_TOKENS = 200
MAX_TOPICS = 5
MAX_DECISIONS = 8
MAX_KEY_POINTS = 6
MAX_OPEN_ITEMS = 5
OVERVIEW_MAX_WORDS = 150
QUOTE_WORDS = 60  # a quoted request, report or key point

_NO_CONVERSATION = "No conversation: only injected context or system events."
_SUMMARIZED_ROLES = frozenset({"user", "assistant", "tool"})
_PROSE_ROLES = frozenset({"user", "assistant"})


# ---- the summary ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionSummary:
    """A session's structured summary and the message range it covers (one version row in the warehouse)."""

    overview: str
    topics: tuple[str, ...]
    decisions: tuple[str, ...]
    files_modified: tuple[str, ...]  # spec 003's code references: files changed by successful tool calls
    tools_used: tuple[ToolUse, ...]  # name, count, up to 3 notable uses; in order of first use
    key_points: tuple[str, ...]
    open_items: tuple[str, ...]
    first_message_id: str
    last_message_id: str
    message_count: int  # messages in the range covered (all kinds, events included)
    messages_processed: int  # messages read by this run: the new ones when incremental (spec 003)
    token_count: int  # cl100k tokens of `to_markdown()` (spec 002)
    model: str  # EXTRACTIVE_MODEL or the chat model's name
    is_incremental: bool
    parts: int  # how many parts the input was summarized in (map-reduce); 1 when it fit at once
    input_hash: str  # summary_input_hash of what produced it

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types only (lists, not tuples), keyed by field name: one row of DuckDB columns."""
        return {
            "overview": self.overview,
            "topics": list(self.topics),
            "decisions": list(self.decisions),
            "files_modified": list(self.files_modified),
            "tools_used": [
                {"name": tool.name, "count": tool.count, "notable_uses": list(tool.notable_uses)}
                for tool in self.tools_used
            ],
            "key_points": list(self.key_points),
            "open_items": list(self.open_items),
            "first_message_id": self.first_message_id,
            "last_message_id": self.last_message_id,
            "message_count": self.message_count,
            "messages_processed": self.messages_processed,
            "token_count": self.token_count,
            "model": self.model,
            "is_incremental": self.is_incremental,
            "parts": self.parts,
            "input_hash": self.input_hash,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionSummary:
        """The summary `to_dict` gave; ValueError naming the first field that is missing or mistyped."""
        tools = _field(data, "tools_used", list)
        if not all(isinstance(t, Mapping) for t in tools):
            raise ValueError("summary field 'tools_used' must be a list of objects")
        return cls(
            overview=_field(data, "overview", str),
            topics=_strings(data, "topics"),
            decisions=_strings(data, "decisions"),
            files_modified=_strings(data, "files_modified"),
            tools_used=tuple(
                ToolUse(_field(t, "name", str), _field(t, "count", int), _strings(t, "notable_uses")) for t in tools
            ),
            key_points=_strings(data, "key_points"),
            open_items=_strings(data, "open_items"),
            first_message_id=_field(data, "first_message_id", str),
            last_message_id=_field(data, "last_message_id", str),
            message_count=_field(data, "message_count", int),
            messages_processed=_field(data, "messages_processed", int),
            token_count=_field(data, "token_count", int),
            model=_field(data, "model", str),
            is_incremental=_field(data, "is_incremental", bool),
            parts=_field(data, "parts", int),
            input_hash=_field(data, "input_hash", str),
        )

    def to_markdown(self) -> str:
        """The summary for people: CLI output, `history`, recaps."""
        sections = [self.overview]
        if self.topics:
            sections.append("**Topics:** " + ", ".join(self.topics))
        lists = (("Decisions", self.decisions), ("Key points", self.key_points), ("Open items", self.open_items))
        for title, items in lists:
            if items:
                sections.append(f"**{title}**\n" + "\n".join(f"- {item}" for item in items))
        if self.files_modified:
            sections.append("**Files modified:** " + ", ".join(f"`{path}`" for path in self.files_modified))
        if self.tools_used:
            sections.append("**Tools used:** " + ", ".join(f"{t.name} ({t.count})" for t in self.tools_used))
        how = [f"{self.message_count} messages", self.model]
        if self.is_incremental:
            how.append("incremental")
        if self.parts > 1:
            how.append(f"summarized in {self.parts} parts")
        sections.append(f"_Messages {self.first_message_id} to {self.last_message_id} ({', '.join(how)})._")
        return "\n\n".join(sections)

    def text_for_embedding(self) -> str:
        """What the summary embedding and the search_sessions keyword index see: the content, most telling first
        (an embedder that cuts long input keeps the overview), without tool statistics or provenance."""
        lines = [self.overview]
        if self.topics:
            lines.append("Topics: " + ", ".join(topic.replace("-", " ") for topic in self.topics))
        lines += [*self.decisions, *self.key_points, *self.open_items]
        if self.files_modified:
            lines.append("Files: " + ", ".join(self.files_modified))
        return "\n".join(lines)


def _field(data: Mapping[str, Any], key: str, kind: type) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"summary field {key!r} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _strings(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    values = _field(data, key, list)
    if not all(isinstance(value, str) for value in values):
        raise ValueError(f"summary field {key!r} must be a list of strings")
    return tuple(values)


@dataclass(frozen=True)
class _Content:
    """What a summarizer writes; ranges, files and tools are added by `summarize_session` alike for both."""

    overview: str
    topics: tuple[str, ...] = ()
    decisions: tuple[str, ...] = ()
    key_points: tuple[str, ...] = ()
    open_items: tuple[str, ...] = ()

    @classmethod
    def of(cls, summary: SessionSummary) -> _Content:
        return cls(summary.overview, summary.topics, summary.decisions, summary.key_points, summary.open_items)

    def as_json(self) -> str:
        return json.dumps(
            {
                "overview": self.overview,
                "topics": list(self.topics),
                "decisions": list(self.decisions),
                "key_points": list(self.key_points),
                "open_items": list(self.open_items),
            },
            ensure_ascii=False,
        )


# ---- public entry points --------------------------------------------------------------------------------------


def messages_after(messages: Sequence[CollapsedMessage], previous: SessionSummary | None) -> list[CollapsedMessage]:
    """The messages a summary would read, in seq order: all of them, or those after `previous.last_message_id`.

    `messages` must hold that message (the whole session, or its tail from that message on): a summary whose
    last message is missing cannot be continued safely, so that is a ValueError (regenerate with --full).
    """
    ordered = sorted(messages, key=lambda message: message.seq)
    if previous is None:
        return ordered
    for index, message in enumerate(ordered):
        if message.message_id == previous.last_message_id:
            return ordered[index + 1 :]
    raise ValueError(
        f"the previous summary ends at message {previous.last_message_id!r}, which is not among the "
        f"{len(ordered)} messages given: pass the whole session, or summarize from the start (--full)"
    )


def summary_input_hash(
    messages: Sequence[CollapsedMessage],
    previous: SessionSummary | None,
    model: str,
    *,
    max_input_tokens: int = DEFAULT_MAX_INPUT_TOKENS,
) -> str:
    """The identity of a summarization's input: the messages it reads, the summary it continues, the model
    (`EXTRACTIVE_MODEL` or `llm.model`), the budget and `SUMMARY_VERSION`. Equal hashes give equal extractive
    summaries; for a chat model the hash is the key under which its answer can be reused."""
    payload = {
        "version": SUMMARY_VERSION,
        "model": model,
        "max_input_tokens": max_input_tokens,
        "previous": content_hash(json.dumps(previous.to_dict(), sort_keys=True)) if previous else None,
        "messages": [_message_key(message) for message in messages_after(messages, previous)],
    }
    return content_hash(json.dumps(payload, sort_keys=True, ensure_ascii=False))


def _message_key(message: CollapsedMessage) -> list[Any]:
    """Everything of a message that a summary can depend on (thinking is never read)."""
    tools = [[r.name, r.category, r.line, list(r.files), r.is_error, r.command] for r in message.tools]
    stamp = message.timestamp.isoformat() if message.timestamp else None
    return [message.message_id, message.seq, message.role, message.speaker, message.kind, stamp, message.text, tools]


def summarize_session(
    messages: Sequence[CollapsedMessage],
    *,
    previous: SessionSummary | None = None,
    llm: ChatModel | None = None,
    max_input_tokens: int = DEFAULT_MAX_INPUT_TOKENS,
) -> SessionSummary:
    """The session's summary: from the start, or `previous` brought up to date with the messages after it.

    `llm=None` gives the extractive summary; with a chat model, LLMError when its reply is unusable (see
    `summarize_with_fallback`). With `previous` and no new message, `previous` itself is returned: its
    input hash is unchanged, so nothing new is written. `max_input_tokens` bounds the transcript one step
    reads; a longer one is summarized in parts and merged.
    """
    if max_input_tokens < MIN_INPUT_TOKENS:
        raise ValueError(f"max_input_tokens must be at least {MIN_INPUT_TOKENS}, got {max_input_tokens}")
    new = messages_after(messages, previous)
    if previous is not None and not new:
        return previous
    if not new:
        raise ValueError("no messages to summarize")
    stretch = _Stretch.of(new)
    parts = _split_parts(stretch.messages, max_input_tokens)
    if llm is not None and parts:
        content = _llm_content(stretch, parts, previous, llm, max_input_tokens)
        model = llm.model
    else:
        content = _extractive_content(stretch, parts, previous)
        model = EXTRACTIVE_MODEL
    usage = stretch.usage
    prior_tools = previous.tools_used if previous else ()
    draft = SessionSummary(
        overview=content.overview,
        topics=content.topics,
        decisions=content.decisions,
        files_modified=_unique([*(previous.files_modified if previous else ()), *usage.files_modified]),
        tools_used=_merge_tools(prior_tools, usage.tools),
        key_points=content.key_points,
        open_items=content.open_items,
        first_message_id=previous.first_message_id if previous else new[0].message_id,
        last_message_id=new[-1].message_id,
        message_count=(previous.message_count if previous else 0) + len(new),
        messages_processed=len(new),
        token_count=0,
        model=model,
        is_incremental=previous is not None,
        parts=max(1, len(parts)),
        input_hash=summary_input_hash(messages, previous, model, max_input_tokens=max_input_tokens),
    )
    return replace(draft, token_count=count_tokens(draft.to_markdown()))


def summarize_with_fallback(
    messages: Sequence[CollapsedMessage],
    *,
    previous: SessionSummary | None = None,
    llm: ChatModel | None = None,
    max_input_tokens: int = DEFAULT_MAX_INPUT_TOKENS,
) -> tuple[SessionSummary, LLMError | None]:
    """The LLM summary, or the extractive one when the model fails, with the model's error for the run's logs.

    A model that keeps failing therefore costs quality, never the run; the summary's `model` says which it is.
    """
    if llm is None:
        return summarize_session(messages, previous=previous, max_input_tokens=max_input_tokens), None
    try:
        return summarize_session(messages, previous=previous, llm=llm, max_input_tokens=max_input_tokens), None
    except LLMError as error:
        return summarize_session(messages, previous=previous, max_input_tokens=max_input_tokens), error


def summary_is_due(
    *,
    last_message_at: datetime | None,
    now: datetime,
    new_messages_since_summary: int,
    idle_minutes: float = 30,
    message_threshold: int = 20,
) -> bool:
    """Whether a session needs a (new) summary (spec 000): it has unsummarized messages and has been idle for
    more than `idle_minutes`, or has `message_threshold` or more of them. A session without timestamps counts
    as idle: nothing says it is still going. Both datetimes must be timezone-aware."""
    if new_messages_since_summary <= 0:
        return False
    if new_messages_since_summary >= message_threshold:
        return True
    return last_message_at is None or now - last_message_at > timedelta(minutes=idle_minutes)


# ---- merging with what came before ----------------------------------------------------------------------------


def _unique(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(value for value in values if value))


def _merge_tools(earlier: Sequence[ToolUse], later: Sequence[ToolUse]) -> tuple[ToolUse, ...]:
    """Counts added per tool name; notable uses kept up to 3, earliest first."""
    merged: dict[str, ToolUse] = {}
    for tool in (*earlier, *later):
        known = merged.get(tool.name)
        if known is None:
            merged[tool.name] = tool
        else:
            uses = _unique([*known.notable_uses, *tool.notable_uses])[:3]
            merged[tool.name] = ToolUse(tool.name, known.count + tool.count, uses)
    return tuple(merged.values())


# ---- the stretch being summarized -----------------------------------------------------------------------------


_ATTACHMENT = re.compile(r"\[(?:image|document|file|attachment): [\w.+-]+/[\w.+-]+\]")  # bare MIME placeholders
_ATTACHMENT_LABEL = re.compile(r"\[(?:image|document|file|attachment): ")
_INTERRUPTED = re.compile(r"\binterrupted\)\.?$")  # collapse's "(no result: interrupted)."


@dataclass(frozen=True)
class _Stretch:
    """The new messages, as the summarizers see them."""

    messages: tuple[CollapsedMessage, ...]  # what is summarized: user, assistant and tool messages with text
    usage: ToolUsage

    @classmethod
    def of(cls, new: Sequence[CollapsedMessage]) -> _Stretch:
        kept = tuple(m for m in new if m.kind == KIND_MESSAGE and m.role in _SUMMARIZED_ROLES and m.text.strip())
        return cls(messages=kept, usage=summarize_tools(new))

    @property
    def speakers(self) -> tuple[str, ...]:
        return _unique(m.speaker for m in self.messages if m.role in _PROSE_ROLES)

    @property
    def transcript(self) -> str:
        """The text topics are drawn from; attachment labels ("[image: a photo of ...]") are format, not subject."""
        return _ATTACHMENT_LABEL.sub("[", "\n\n".join(f"{m.speaker}: {m.text}" for m in self.messages))


def _prose(text: str, tools: Sequence[ToolRecord]) -> str:
    """A message's own words: its text without the collapsed tool lines or bare attachment placeholders."""
    tool_lines = {record.line for record in tools if record.line}
    lines = [line for line in text.splitlines() if line.strip() not in tool_lines]
    return _ATTACHMENT.sub("", "\n".join(lines)).strip()


# ---- sentences and terms --------------------------------------------------------------------------------------


_FENCED_CODE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_LIST_MARKER = re.compile(r"^\s*(?:[-*+>]|\d+[.)]|#+)\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[`*]?[A-Z0-9])")
_TERM = re.compile(r"[a-z][a-z0-9]+")
_STOP_TERMS = frozenset(
    """
    about above after again all also am an and any are as at be because been before being below between both but
    by can could did do does doing done down during each few for from further had has have having he her here
    hers him his how if in into is it its itself just me more most my no nor not now of off on once only or other
    our ours out over own same she should so some such than that the their theirs them then there these they this
    those through to too under until up very was we were what when where which while who whom why will with would
    you your yours yourself ll ve re don didn doesn isn wasn aren won wouldn couldn shouldn let lets us
    yes yeah yep ok okay hey hi hello bye thanks thank oh wow haha lol cool great awesome nice sure really so just
    also like got get gets going gonna want wanna know think thing things stuff lot lots much many well
    good see seen glad hope doing been new anything something everything talk soon way please
    """.split()
)


def _sentences(text: str) -> list[str]:
    """Sentences of prose, one line each, code blocks and list markers removed."""
    found: list[str] = []
    for line in _FENCED_CODE.sub(" ", text).splitlines():
        line = _LIST_MARKER.sub("", line).strip()
        found += [" ".join(sentence.split()) for sentence in _SENTENCE_END.split(line) if sentence.strip()]
    return found


# Markup tags ("<file_photo>", "<command-name>") and redaction markers say nothing about the subject.
_MARKUP = re.compile(r"</?[a-z][\w-]*/?>|\[redacted\b[^\]]*\]|<redacted\b[^>]*>", re.IGNORECASE)


def _terms(text: str) -> tuple[str, ...]:
    """Content terms for similarity: lowercase words without function words or markup, plurals folded."""
    terms = []
    for word in _TERM.findall(_MARKUP.sub(" ", text).lower()):
        if word in _STOP_TERMS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
            word = word[:-1]
        terms.append(word)
    return tuple(terms)


def _clip_words(text: str, limit: int) -> str:
    words = text.split()
    return text if len(words) <= limit else " ".join(words[:limit]).rstrip(",;:") + " …"


def _is_question(sentence: str) -> bool:
    return sentence.rstrip(" )\"'*").endswith("?")


@dataclass(frozen=True)
class _Sentence:
    """A candidate key point: one sentence, where it came from, and its terms."""

    order: int  # position in the summarized stretch; earlier summaries' key points come first (negative)
    text: str
    terms: tuple[str, ...]
    display: str  # as the summary shows it: `_statement` of the sentence, or a carried-over key point as it was


def _statement(speaker: str, sentence: str, speakers: Sequence[str]) -> str:
    """A sentence as a summary item: told in the third person about its speaker (`core.reported`), clipped."""
    text = _clip_words(sentence, QUOTE_WORDS)
    return reported(speaker, text, [other for other in speakers if other != speaker]) or f"{speaker}: {text}"


def _statements(speaker: str, sentences: Sequence[str], speakers: Sequence[str], source: Sequence[str]) -> str:
    """Sentences of one speaker's message (`source`) told about them, as one passage: greetings and other chat
    noise left out, "…" where sentences of the message were skipped between two, and the "Priya: " label
    written once for a run of sentences that need it."""
    label = f"{speaker}: "
    passage: list[str] = []
    labelled = False  # whether the sentence before carried the label
    before = ""
    for sentence in sentences:
        told = reported(speaker, _clip_words(sentence, QUOTE_WORDS), [s for s in speakers if s != speaker])
        if not told:
            continue
        if passage and not _follows(source, before, sentence):
            passage.append("…")
            labelled = False
        needs_label = told.startswith(label)
        passage.append(told[len(label) :] if needs_label and labelled else told)
        labelled, before = needs_label, sentence
    return " ".join(passage)


_LABEL = re.compile(r"^[^:\n]{1,40}:\s+")


def _carried_over(key_points: Sequence[str]) -> list[_Sentence]:
    """An earlier summary's key points, as candidates that compete with the new sentences."""
    return [
        _Sentence(order=index - len(key_points), text=point, terms=_terms(_LABEL.sub("", point)), display=point)
        for index, point in enumerate(key_points)
    ]


# ---- splitting into parts (map-reduce) ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Piece:
    """A message, or a part of one that alone exceeds the budget."""

    message: CollapsedMessage
    text: str

    @property
    def rendered(self) -> str:
        return f"{self.message.speaker}: {self.text}"


_SPLITTERS = ((re.compile(r"\n+"), "\n"), (re.compile(r"(?<=[.!?])\s+"), " "), (re.compile(r"\s+"), " "))


def _pieces(text: str, limit: int, level: int = 0) -> list[str]:
    """`text` in consecutive pieces of about `limit` tokens at most, cut at lines, else sentences, else words."""
    if count_tokens(text) <= limit:
        return [text]
    if level == len(_SPLITTERS):  # one word longer than the limit
        head = truncate_to_tokens(text, limit) or text[:1]
        return [head, *_pieces(text[len(head) :], limit, level)]
    pattern, joiner = _SPLITTERS[level]
    pieces: list[str] = []
    current: list[str] = []
    used = 0
    for segment in (s for s in pattern.split(text) if s.strip()):
        tokens = count_tokens(segment)
        if tokens > limit:
            pieces += [joiner.join(current)] if current else []
            pieces += _pieces(segment, limit, level + 1)
            current, used = [], 0
            continue
        if current and used + tokens + 1 > limit:
            pieces.append(joiner.join(current))
            current, used = [], 0
        current.append(segment)
        used += tokens + 1
    return pieces + ([joiner.join(current)] if current else [])


def _split_parts(messages: Sequence[CollapsedMessage], budget: int) -> list[list[_Piece]]:
    """Consecutive parts of the transcript, each at most `budget` tokens; nothing is dropped."""
    parts: list[list[_Piece]] = []
    current: list[_Piece] = []
    used = 0
    for message in messages:
        label = count_tokens(f"{message.speaker}: ")
        for text in _pieces(message.text, max(budget - label, 1)):
            piece = _Piece(message, text)
            tokens = count_tokens(piece.rendered) + 1
            if current and used + tokens > budget:
                parts.append(current)
                current, used = [], 0
            current.append(piece)
            used += tokens
    return parts + ([current] if current else [])


# ---- sentence centrality --------------------------------------------------------------------------------------


_REDUNDANT = 0.5  # cosine similarity above which a sentence repeats one already chosen



def _rank(candidates: Sequence[_Sentence], limit: int) -> list[_Sentence]:
    """The `limit` most central candidates, skipping near-repeats; best first. Short sentences are discounted:
    a key point is a statement with content (questions are no candidates at all)."""
    if not candidates or limit <= 0:
        return []
    vectors = tfidf_rows([candidate.terms for candidate in candidates])
    centrality = textrank(vectors) * len(candidates)  # mean 1
    scores = [round(float(centrality[i]) * min(1.0, len(c.terms) / 5), 9) for i, c in enumerate(candidates)]
    chosen: list[int] = []
    for index in sorted(range(len(candidates)), key=lambda i: (-scores[i], candidates[i].order)):
        if any(float(vectors[index] @ vectors[other]) > _REDUNDANT for other in chosen):
            continue
        chosen.append(index)
        if len(chosen) == limit:
            break
    return [candidates[i] for i in chosen]


def _key_point_count(sentences: int) -> int:
    """About the square root of the number of sentences: 1 for a short exchange, MAX_KEY_POINTS from 36 on."""
    return max(1, min(MAX_KEY_POINTS, round(math.sqrt(sentences))))


# ---- the extractive summarizer --------------------------------------------------------------------------------


def _extractive_content(
    stretch: _Stretch, parts: Sequence[Sequence[_Piece]], previous: SessionSummary | None
) -> _Content:
    if not stretch.messages:  # only injected context or system events: nothing new to say
        return _Content.of(previous) if previous else _Content(_NO_CONVERSATION)
    topics = _keyword_topics(stretch)
    overview, quoted = _extractive_overview(stretch, topics, continued=previous is not None)
    decisions = _decisions(stretch.messages, stretch.speakers)
    open_items = _open_items(stretch)
    new = _Content(
        overview=overview,
        topics=topics,
        decisions=decisions,
        key_points=_key_points(
            parts,
            previous,
            taken=quoted | {_REPLY_CONTEXT.sub("", d) for d in decisions} | set(open_items),
            speakers=stretch.speakers,
        ),
        open_items=open_items,
    )
    return _merge_contents(_Content.of(previous), new, stretch) if previous else new


def _keyword_topics(stretch: _Stretch) -> tuple[str, ...]:
    return tuple(keyword_topics(stretch.transcript, max_topics=MAX_TOPICS, exclude=stretch.speakers))


def _key_points(
    parts: Sequence[Sequence[_Piece]], previous: SessionSummary | None, taken: set[str], speakers: Sequence[str]
) -> tuple[str, ...]:
    """Map: the most central sentences of each part. Reduce: the most central among those (and the previous
    summary's key points), in transcript order. Sentences already in the overview, the decisions or the open
    items (`taken`) are left out: each section says something new."""
    part_candidates: list[list[_Sentence]] = []
    order = 0
    for part in parts:
        sentences = []
        for piece in part:
            if piece.message.role not in _PROSE_ROLES:
                continue
            for text in _sentences(_prose(piece.text, piece.message.tools)):
                order += 1
                shown = _statement(piece.message.speaker, text, speakers)
                sentence = _Sentence(order, text, _terms(text), shown)
                if _is_question(text) or len(sentence.terms) < 2 or text in taken or shown in taken:
                    continue
                sentences.append(sentence)
        part_candidates.append(sentences)
    total = sum(len(sentences) for sentences in part_candidates)
    carried = _carried_over(previous.key_points) if previous else []
    limit = min(MAX_KEY_POINTS, max(len(carried), _key_point_count(total)))
    if len(part_candidates) == 1 and not carried:
        chosen = _rank(part_candidates[0], limit)
    else:
        pool = carried + [sentence for sentences in part_candidates for sentence in _rank(sentences, 2 * limit)]
        chosen = _rank(pool, limit)
    return tuple(sentence.display for sentence in sorted(chosen, key=lambda s: s.order))


# ---- the overview ---------------------------------------------------------------------------------------------


_MONTHS = (
    "January February March April May June July August September October November December".split()
)


def _day(moment: datetime) -> str:
    return f"{moment.day} {_MONTHS[moment.month - 1]} {moment.year}"


def _when(messages: Sequence[CollapsedMessage]) -> str:
    """'on 8 May 2023', 'between 8 May 2023 and 9 May 2023', or '' without timestamps (dates in UTC)."""
    stamps = sorted(m.timestamp for m in messages if m.timestamp is not None)
    if not stamps:
        return ""
    first, last = _day(stamps[0]), _day(stamps[-1])
    return f"on {first}" if first == last else f"between {first} and {last}"


def _join(items: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _join_some(items: Sequence[str], shown: int, noun: str) -> str:
    """Up to `shown` items, then how many more: "a, b, c and 2 more files"."""
    if len(items) <= shown:
        return _join(items)
    rest = len(items) - shown
    return f"{', '.join(items[:shown])} and {rest} more {noun}{'s' if rest != 1 else ''}"


def _sentence_case(text: str) -> str:
    return text[:1].upper() + text[1:]


def _substance(message: CollapsedMessage) -> str:
    """The message's prose when it says something (three content words or more, not a slash command), else ""."""
    prose = _prose(message.text, message.tools)
    return prose if len(_terms(prose)) >= 3 and not prose.startswith("/") else ""


_COMMITMENT = re.compile(r"\b(?:i|we)(?:'ll|\s+will|'m\s+going\s+to|\s+am\s+going\s+to)\b", re.IGNORECASE)


def _asks(sentences: Sequence[str], worked: bool) -> bool:
    """Whether a user message asks for something: in a session with tool use, every message to the agent does;
    elsewhere a question or a request of two content words or more ("Anything new?" is small talk) that is not
    the speaker's own commitment ("I'll tell the team")."""
    return worked or any(
        len(_terms(s)) >= 2 and (_is_question(s) or (has_action(s) and not _COMMITMENT.search(s))) for s in sentences
    )


def _quote(prose: str, *, requests_first: bool, names: Sequence[str] = ()) -> list[str]:
    """The sentences to quote from a message, greetings ("Hey Gina, hope you're ok!") left out: all of them when
    short; else the first two requests or questions (`requests_first`), or the first two sentences."""
    skip = set(_terms(" ".join(names)))
    sentences = [s for s in _sentences(prose) if set(_terms(s)) - skip] or _sentences(prose)
    if len(" ".join(sentences).split()) <= QUOTE_WORDS:
        return sentences
    asked = [s for s in sentences if has_action(s) or _is_question(s)] if requests_first else []
    return (asked or sentences)[:2]


def _quoted(quote: Sequence[str], source: Sequence[str] = ()) -> str:
    """The quoted sentences in quotation marks: whole sentences, with "…" wherever sentences of `source` (the
    message they come from) were left out between them, or where the quote is cut at QUOTE_WORDS."""
    pieces: list[str] = []
    for sentence in quote:
        if pieces and not _follows(source, pieces[-1], sentence):
            pieces.append("…")
        pieces.append(sentence)
    return '"' + _clip_words(" ".join(pieces), QUOTE_WORDS) + '"'


def _follows(source: Sequence[str], first: str, second: str) -> bool:
    """Whether `second` comes right after `first` in `source` (always so when no source is given)."""
    if not source:
        return True
    positions = [i for i, sentence in enumerate(source[:-1]) if sentence == first]
    return any(source[i + 1] == second for i in positions)


def _opener(messages: Sequence[CollapsedMessage]) -> CollapsedMessage | None:
    """The user's first message with something to say: one with a sentence of four content words or more
    (past the greetings), else the first with any substance."""
    users = [m for m in messages if m.role == "user" and _substance(m)]
    telling = (m for m in users if any(len(_terms(s)) >= 4 for s in _sentences(_substance(m))))
    return next(telling, users[0] if users else None)


def _recurs(topic: str, stretch: _Stretch) -> bool:
    """Whether a topic came up in more than one message: in a short chat, one mention is no subject of the
    whole (and the topic tags are listed beside the overview anyway)."""
    words = set(topic.split("-"))
    return sum(words <= set(_terms(message.text)) for message in stretch.messages) >= 2


def _extractive_overview(stretch: _Stretch, topics: Sequence[str], *, continued: bool) -> tuple[str, set[str]]:
    """Who talked or worked on what and when; the first request; the work done; the last report. Also the
    sentences it quoted, which key points then skip."""
    usage = stretch.usage
    worked = usage.call_count > 0
    about = _join([spoken_form(topic, stretch.transcript) for topic in topics[:3] if _recurs(topic, stretch)])
    if continued:
        clause = "the session continued" + (f" with {about}" if about else "")
    else:
        who = _join(stretch.speakers) or "the participants"
        verb = "worked on" if worked else "wrote about" if len(stretch.speakers) == 1 else "talked about"
        clause = f"{who} {verb} {about}" if about else f"{who} {verb.split()[0]}"
    when = _when(stretch.messages)
    # "Ann and Bob talked." says only who, and the statements of a two-person chat name both: left out
    says_more = when or about or worked or continued or len(stretch.speakers) > 2
    heading = _sentence_case(f"{when}, {clause}." if when else f"{clause}.")
    sentences = [heading] if says_more else []
    quoted: set[str] = set()

    opener = _opener(stretch.messages)
    if opener is not None:
        quote = _quote(_substance(opener), requests_first=True, names=stretch.speakers)
        if worked:  # the request an agent worked on, in the person's words
            said = "asked" if _asks(quote, worked) else "said"
            sentences.append(f"{opener.speaker} {said}: {_quoted(quote, _sentences(_substance(opener)))}")
        else:  # a conversation: what its opener said, told about them
            sentences.append(_statements(opener.speaker, quote, stretch.speakers, _sentences(_substance(opener))))
        quoted.update(quote)
    if worked:
        worker = next((m.speaker for m in stretch.messages if m.tools), "The assistant")
        actions = []
        if usage.files_modified:
            actions.append("edited " + _join_some(usage.files_modified, 3, "file"))
        if usage.commands:
            actions.append(f"ran {len(usage.commands)} command{'s' if len(usage.commands) != 1 else ''}")
        if not actions:
            actions.append("used " + _join_some([tool.name for tool in usage.tools], 3, "tool"))
        failed = len(usage.failures)
        failures = f"; {failed} tool call{'s' if failed != 1 else ''} failed" if failed else ""
        sentences.append(f"{worker} {_join(actions)}{failures}.")
        report = next((m for m in reversed(stretch.messages) if m.role == "assistant" and _substance(m)), None)
        if report is not None and (opener is None or report.seq > opener.seq):
            quote = _quote(_substance(report), requests_first=False)[:2]
            sentences.append(f"{report.speaker} last reported: {_quoted(quote, _sentences(_substance(report)))}")
            quoted.update(quote)
    return " ".join(sentences) or heading, quoted


# ---- decisions and open items ---------------------------------------------------------------------------------


def _context(sentences: Sequence[str]) -> str:
    """What a short reply answers: the last question of the message before it, else its last sentence."""
    questions = [s for s in sentences if _is_question(s)]
    return (questions or list(sentences) or [""])[-1]


_REPLY_CONTEXT = re.compile(r' \(re: ".*"\)$')  # what a short decision answered, after it


def _decisions(messages: Sequence[CollapsedMessage], speakers: Sequence[str]) -> tuple[str, ...]:
    """Each sentence recording a choice or conclusion (core.flags), with its speaker; a short one ("Agreed,
    SQLite it is.") with what it answered. The latest MAX_DECISIONS: later choices supersede earlier ones.
    A sentence naming nothing but a speaker ("Yep, Caroline.") agrees with a person, not an option."""
    names = set(_terms(" ".join(speakers)))
    found: list[str] = []
    before: list[str] = []
    for message in messages:
        if message.role not in _PROSE_ROLES:
            continue
        sentences = _sentences(_prose(message.text, message.tools))
        for index, sentence in enumerate(sentences):
            if not has_decision(sentence) or not set(_terms(sentence)) - names:
                continue
            item = _statement(message.speaker, sentence, speakers)
            context = sentences[index - 1] if index else _context(before)
            if len(sentence.split()) < 6 and context:
                item += f' (re: "{_clip_words(context, 25)}")'
            found.append(item)
        if len(_terms(" ".join(sentences))) >= 2:  # "ok continue" is not what a later choice answers
            before = sentences
    return _unique(found)[-MAX_DECISIONS:]


_PENDING = re.compile(
    r"\b(?:todo|fixme|pending|next\s+steps?|follow[\s-]?up|not\s+yet|still\s+(?:need|needs|have|has)\s+to|"
    r"remaining|tomorrow|later|(?:i'm|i\s+am|we're|we\s+are)\s+(?:off\s+to|going\s+to|gonna|planning\s+to))\b",
    re.IGNORECASE,
)
_FUTURE = re.compile(r"\b(?:i|we)(?:'ll|\s+will|\s+shall)\b|\blet'?s\b|\bnext\b", re.IGNORECASE)
_TAIL_MESSAGES = 4


def _unfinished(record: ToolRecord) -> bool:
    return record.is_error or bool(record.line and _INTERRUPTED.search(record.line))


def _changed_something(record: ToolRecord) -> bool:
    """A tool call that succeeded in changing state: an edit, a write, a mutating command, or an unknown tool
    (MCP tools such as `issue_refund` mostly act; announced work followed by one is taken as done)."""
    if _unfinished(record):
        return False
    if record.category == CATEGORY_SHELL:
        return shell_command_changes_state(record.command or "")
    return record.category in (CATEGORY_CONSEQUENTIAL, CATEGORY_UNKNOWN)


def _open_items(stretch: _Stretch) -> tuple[str, ...]:
    """What is left at the end: the last request when nothing answered it, planned or pending work in the last
    messages (unless a later tool call changed something), a closing question, a last tool call that failed."""
    messages = stretch.messages
    talk = [m for m in messages if m.role in _PROSE_ROLES and _substance(m)]
    items: list[str] = []
    unanswered: CollapsedMessage | None = None
    last_request = next((m for m in reversed(talk) if m.role == "user"), None)
    if last_request is not None:
        after = [m for m in messages if m.seq > last_request.seq]
        replied = any(m.role == "assistant" and _prose(m.text, m.tools) for m in after)  # "Sure :)" answers too
        tools_after = [r for m in after for r in m.tools]
        quote = _quote(_substance(last_request), requests_first=True, names=stretch.speakers)
        stopped = not tools_after or _unfinished(tools_after[-1])  # nothing was done, or it did not finish
        if _asks(quote, stretch.usage.call_count > 0) and not replied and stopped:
            source = _sentences(_substance(last_request))
            items.append(f"{last_request.speaker} asked: {_quoted(quote, source)} (no reply yet)")
            unanswered = last_request
    start = min(len(talk) - _TAIL_MESSAGES, talk.index(last_request) if last_request else len(talk))
    for message in talk[max(start, 0) :]:
        if message is unanswered:
            continue
        changed_later = any(_changed_something(r) for m in messages if m.seq >= message.seq for r in m.tools)
        for sentence in _sentences(_substance(message)):
            if _is_question(sentence) or changed_later:
                continue
            if _PENDING.search(sentence) or (_FUTURE.search(sentence) and has_action(sentence)):
                items.append(_statement(message.speaker, sentence, stretch.speakers))
    if talk and talk[-1].role == "assistant":
        questions = [s for s in _sentences(_substance(talk[-1])) if _is_question(s) and len(_terms(s)) >= 2]
        if questions:
            items.append(f"{talk[-1].speaker} asked: {_quoted(questions[-1:])} (unanswered)")
    records = [record for message in messages for record in message.tools]
    if records and _unfinished(records[-1]):
        items.append(f"Last tool call did not succeed: {records[-1].line or records[-1].name}")
    return _unique(items)[:MAX_OPEN_ITEMS]


# ---- merging an earlier summary with the new stretch ----------------------------------------------------------


def _interleave(first: Sequence[str], second: Sequence[str]) -> tuple[str, ...]:
    """Alternately from each: an earlier summary's topics and the new ones share the places."""
    mixed = [item for pair in zip(first, second) for item in pair]
    shorter = min(len(first), len(second))
    return _unique([*mixed, *first[shorter:], *second[shorter:]])


def _still_open(item: str, terms: set[str]) -> bool:
    """An earlier open item stays unless the new messages talk about it (half of its terms come up)."""
    own = set(_terms(_LABEL.sub("", item)))
    return bool(own) and len(own & terms) / len(own) < 0.5


def _merge_contents(earlier: _Content, later: _Content, stretch: _Stretch) -> _Content:
    """The earlier summary brought forward: overview extended (the earlier part clipped to fit), topics shared,
    decisions appended, earlier open items kept while nothing since has touched them. Key points are already
    ranked together with the earlier ones."""
    budget = max(OVERVIEW_MAX_WORDS - len(later.overview.split()), 40)
    talked = {term for message in stretch.messages for term in _terms(message.text)}
    return _Content(
        overview=f"{_clip_words(earlier.overview, budget)} {later.overview}",
        topics=_interleave(earlier.topics, later.topics)[:MAX_TOPICS],
        decisions=_unique([*earlier.decisions, *later.decisions])[-MAX_DECISIONS:],
        key_points=later.key_points,
        open_items=_unique([*(i for i in earlier.open_items if _still_open(i, talked)), *later.open_items])[
            :MAX_OPEN_ITEMS
        ],
    )


# ---- the LLM summarizer ---------------------------------------------------------------------------------------


_SUMMARY_KEYS = """\
Reply with a JSON object with exactly these keys:
- "overview": 2 to 4 sentences in the third person, naming the speakers: who wanted what, what was done, \
and where things stood at the end;
- "topics": 1 to 5 short lowercase kebab-case tags naming what was discussed or worked on (no people's names);
- "decisions": each choice or conclusion that was reached, one sentence each;
- "key_points": up to 6 facts worth remembering later: findings, causes, results, names, numbers, dates;
- "open_items": what was left unfinished, unanswered or planned next.
Use [] for a list with nothing in it. Tool calls appear as one-line narration ("Edited src/app.py: ...", \
"Ran `pytest` (exit 1): ..."); the files modified and tools used are recorded separately, so do not list them. \
Never repeat secrets (keys, passwords, tokens) nor [REDACTED:...] placeholders."""

_FULL_PROMPT = (
    "You summarize a conversation for a searchable memory of past sessions: a person working with an AI "
    "assistant, or people talking with each other.\n" + _SUMMARY_KEYS
)
_UPDATE_PROMPT = (
    "You update the summary of a conversation that has continued. You get the existing summary (JSON, covering "
    "the earlier messages) and the new messages. Rewrite the overview to cover the whole conversation, keep the "
    "earlier decisions and key points that still matter, add the new ones, and list only the items still open "
    "after the new messages.\n" + _SUMMARY_KEYS
)
_REDUCE_PROMPT = (
    "You merge the summaries of consecutive parts of one conversation, given in order, into one summary of the "
    "whole conversation: one overview of the whole arc, the decisions and key points that matter, and the items "
    "still open at the end.\n" + _SUMMARY_KEYS
)
_LIST_KEYS = ("topics", "decisions", "key_points", "open_items")
_LIMITS = {"topics": MAX_TOPICS, "decisions": MAX_DECISIONS, "key_points": MAX_KEY_POINTS, "open_items": MAX_OPEN_ITEMS}


def _llm_content(
    stretch: _Stretch,
    parts: Sequence[Sequence[_Piece]],
    previous: SessionSummary | None,
    llm: ChatModel,
    budget: int,
) -> _Content:
    """One call when the new messages fit (with the previous summary when incremental); else one call per part
    (map) and merging calls over the part summaries and the previous one (reduce)."""
    when = _when(stretch.messages)
    heading = f"Conversation {when}".strip()
    texts = ["\n\n".join(piece.rendered for piece in part) for part in parts]
    if len(texts) == 1 and previous is not None:
        earlier = _Content.of(previous).as_json()
        new = f"New messages ({when or 'undated'}):\n\n{texts[0]}"
        return _ask(llm, _UPDATE_PROMPT, f"Existing summary:\n{earlier}\n\n{new}")
    if len(texts) == 1:
        return _ask(llm, _FULL_PROMPT, f"{heading}:\n\n{texts[0]}")
    mapped = [
        _ask(llm, _FULL_PROMPT, f"{heading}, part {number} of {len(texts)}:\n\n{text}")
        for number, text in enumerate(texts, start=1)
    ]
    return _reduce([_Content.of(previous), *mapped] if previous else mapped, llm, budget)


def _reduce(contents: list[_Content], llm: ChatModel, budget: int) -> _Content:
    """Merge summaries in order, as many per call as fit the budget (at least two), until one is left."""
    while len(contents) > 1:
        groups: list[list[_Content]] = []
        current: list[_Content] = []
        used = 0
        for content in contents:
            tokens = count_tokens(content.as_json())
            if len(current) >= 2 and used + tokens > budget:
                groups.append(current)
                current, used = [], 0
            current.append(content)
            used += tokens
        groups.append(current)
        contents = [group[0] if len(group) == 1 else _ask(llm, _REDUCE_PROMPT, _numbered(group)) for group in groups]
    return contents[0]


def _numbered(group: Sequence[_Content]) -> str:
    return "\n\n".join(
        f"Summary {number} of {len(group)}:\n{content.as_json()}" for number, content in enumerate(group, start=1)
    )


def _ask(llm: ChatModel, system: str, user: str) -> _Content:
    return _content_from_reply(llm.complete_json(system, user), llm.model)


def _content_from_reply(reply: Any, model: str) -> _Content:
    """The model's summary, validated (LLMError naming every missing or mistyped key), whitespace normalized,
    topics normalized to tags, lists capped, and redacted once more in case the model quoted a secret."""
    if not isinstance(reply, dict):
        raise LLMError(f"model {model!r} replied {str(reply)[:200]!r}; expected a JSON object")
    problems = []
    overview = reply.get("overview")
    if not isinstance(overview, str) or not overview.strip():
        problems.append('"overview" is missing or not a non-empty string')
    lists: dict[str, tuple[str, ...]] = {}
    for key in _LIST_KEYS:
        value = reply.get(key)
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            problems.append(f'"{key}" is missing or not a list of strings')
            continue
        cleaned = [redact(" ".join(item.split())) for item in value]
        lists[key] = tuple(usable_tags(cleaned, MAX_TOPICS)) if key == "topics" else _unique(cleaned)[: _LIMITS[key]]
    if problems:
        raise LLMError(
            f"model {model!r} replied with an unusable summary: {'; '.join(problems)}. "
            f"Reply began: {json.dumps(reply, ensure_ascii=False)[:200]!r}"
        )
    assert isinstance(overview, str)
    return _Content(redact(" ".join(overview.split())), **lists)
