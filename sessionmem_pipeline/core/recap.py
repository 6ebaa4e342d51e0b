"""Session recap (spec 004, issue 17): what the previous session set out to do, where it stood at the end and what is
open, under a token budget, every line citing the messages it comes from.

Shape, in this order:
- Goal: the person's requests in their words, latest first: the latest request, and earlier ones the assistant
  worked on (called tools for): the latest of those and the first. Slash commands, injected text and messages of
  fewer than MIN_REQUEST_WORDS words ("ok", "/mcp", "show tools") are not requests; a question in passing is not a
  goal.
- Outcome / state at the end: the reply to each goal (its opening sentences), latest first; for the latest turn also
  the terms its last texts stressed (bold, code spans), the steps before the reply, and the shell commands that
  changed state (installs, commits, pushes); then results stated on the way in earlier steps (tests passing, a
  build, a push, a file created) and, with room left, more of the terms the latest reply stressed.
- Decisions: decisions stated in the session's most telling chunks (below).
- Open items / next steps: how the session ended when it stopped mid-work (`core.ending.session_ending`), what the
  final reply leaves open or proposes, and what was announced or failed in the last chunk and never done.
- Files touched: every file a state-changing tool call changed, once, with the kind of change, latest first.

Decisions and open items come from the session's chunks, scored

    score = novelty x centrality x recency x action_weight

- novelty: 1 - the highest cosine similarity between the chunk's vector and any existing curated memory or earlier
  session summary (1.0 when there is none, or the chunk has no vector): what is already remembered is not recapped;
- centrality: TextRank (PageRank over the chunk-chunk cosine similarity graph, chunk vectors when every chunk has
  one, TF-IDF otherwise), scaled so the most central chunk has 1.0: noise connected to nothing sinks;
- recency: a linear positional weight from RECENCY_FLOOR (first chunk) to 1.0 (last chunk): unfinished work is at
  the end;
- action weight: 1 + alpha x the chunk's consequential tool calls (edits, writes, remembers, state-changing commands).

Lines are taken in priority order (the latest request, the mid-work end, the latest outcome, the files, earlier goals
and outcomes, then chunk lines in score order) while the whole recap stays within the budget (cl100k tokens of
`Recap.text`); text from messages is redacted before it is clipped. With a chat model the lines may be rewritten,
from the selected chunks only: every rewritten line must cite ids of those chunks, else the extractive recap stands.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from sessionmem_pipeline.core.collapse import collapse_messages
from sessionmem_pipeline.core.ending import SessionEnding, session_ending
from sessionmem_pipeline.core.flags import has_action, has_decision, shell_command_changes_state
from sessionmem_pipeline.core.llm_protocol import ChatModel, LLMError
from sessionmem_pipeline.core.models import (
    CATEGORY_CONSEQUENTIAL,
    CATEGORY_SHELL,
    KIND_COMPACTION,
    KIND_MESSAGE,
    Chunk,
    CollapsedMessage,
    Message,
    ToolRecord,
)
from sessionmem_pipeline.core.redact import redact
from sessionmem_pipeline.core.textrank import textrank, tfidf_rows
from sessionmem_pipeline.core.tokens import count_tokens, truncate_to_tokens

DEFAULT_BUDGET = 800
MIN_BUDGET = 64
"""Below this the title and one cited line do not fit."""
DEFAULT_ALPHA = 0.3
"""Action weight per consequential tool call: four edits weigh about twice an exchange without any."""
RECENCY_FLOOR = 0.2
MIN_RELATIVE_SCORE = 0.1
"""A chunk scoring under this share of the best one is noise: it is left out even when the budget has room."""
DAMPING = 0.85
LINE_CHARS = 220
_MIN_LINE_TOKENS = 8  # a bullet, a few words and a citation: with less room left, no line fits
LLM_INPUT_TOKENS = 6000
"""Cap on the excerpts sent to the model: the selected chunks of one recap, rarely more than a few thousand."""

SECTION_GOAL = "Goal"
SECTION_OUTCOME = "Outcome / state at the end"
SECTION_DECISIONS = "Decisions"
SECTION_OPEN = "Open items / next steps"
SECTION_FILES = "Files touched"
SECTIONS = (SECTION_GOAL, SECTION_OUTCOME, SECTION_DECISIONS, SECTION_OPEN, SECTION_FILES)
LATEST_FIRST = frozenset({SECTION_GOAL, SECTION_OUTCOME})
"""Sections read latest first: the current request and the state at the end lead."""
MAX_GOALS = 3
MIN_REQUEST_WORDS = 3
"""A shorter message ("ok", "yes", "show tools") acknowledges or steers; it is not a goal."""
FILES_PER_LINE = 6
GOAL_CHARS = 320
"""A request is the recap's most telling line: it may run longer than the others."""
COMMANDS = 5
COMMAND_CHARS = 60
PROGRESS_TEXTS = 4
"""The latest turn's last assistant texts read for its state: the reply and the steps before it."""
KEY_TERM_LINES = (2, 1)
"""Lines of stressed terms (bold, code) from the latest reply and the one before it."""
MORE_KEY_TERM_LINES = 2
"""Further lines of the latest reply's stressed terms, taken only when the budget has room left at the end."""
MILESTONES = 4
"""Results stated on the way (tests passing, a build, a push, a file created) in earlier steps, latest first."""
MILESTONE_CHARS = 160
SAID_CHARS = 80
"""A line whose first this-many characters a chosen line already holds says nothing new."""


# ---- records -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecapChunk:
    """One chunk of the session as the recap sees it: what the warehouse (or `recap_chunks`) knows of it."""

    chunk_index: int
    content: str  # as chunked: "Speaker: text" blocks separated by blank lines, one per message
    message_ids: tuple[str, ...]
    vector: Sequence[float] | None = None
    consequential_tool_calls: int = 0
    has_decision: bool = False
    has_action: bool = False
    timestamp: datetime | None = None  # informative: recency is positional (spec 004), sessions have no clock gaps
    speakers: tuple[str, ...] = ()  # the chunk's speaker labels; they tell message starts from "Note: ..." lines


@dataclass(frozen=True)
class ChunkScore:
    """The four factors of one chunk's score, kept apart so a ranking can be explained."""

    chunk_index: int
    novelty: float
    centrality: float
    recency: float
    action_weight: float

    @property
    def score(self) -> float:
        return self.novelty * self.centrality * self.recency * self.action_weight


@dataclass(frozen=True)
class RecapLine:
    """One line of the recap and the messages it came from."""

    text: str
    message_ids: tuple[str, ...]
    section: str


@dataclass(frozen=True)
class Recap:
    """A session's recap: markdown text for a system prompt, and its lines with their citations."""

    session_id: str
    text: str
    lines: tuple[RecapLine, ...]
    budget: int
    chunk_indexes: tuple[int, ...]  # the chunks the lines were taken from, best first
    ended_abruptly: bool = False
    model: str | None = None  # the chat model that rewrote it; None for the extractive recap

    @property
    def token_count(self) -> int:
        """cl100k tokens of `text`, at most `budget`: counted when asked (the session-start hook does not ask)."""
        return count_tokens(self.text)


# ---- scoring -------------------------------------------------------------------------------------------------


def _unit_rows(rows: Sequence[Sequence[float]]) -> np.ndarray:
    matrix = np.asarray(rows, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"expected a list of vectors of one dimension, got an array of shape {matrix.shape}")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


def _novelty(chunks: Sequence[RecapChunk], references: Sequence[Sequence[float]]) -> list[float]:
    if not references:
        return [1.0] * len(chunks)
    known = _unit_rows(references)
    novelty = []
    for chunk in chunks:
        if chunk.vector is None:
            novelty.append(1.0)
            continue
        if len(chunk.vector) != known.shape[1]:
            raise ValueError(
                f"chunk {chunk.chunk_index} has a {len(chunk.vector)}-d vector but the memories and summaries are "
                f"{known.shape[1]}-d: embed them with the same model"
            )
        nearest = float(np.max(known @ _unit_rows([chunk.vector])[0]))
        novelty.append(min(1.0, max(0.0, 1.0 - nearest)))
    return novelty


_TERM = re.compile(r"[a-z][a-z0-9_]{2,}")


def _centrality(chunks: Sequence[RecapChunk]) -> list[float]:
    vectors = [chunk.vector for chunk in chunks]
    if len(chunks) <= 1:
        return [1.0] * len(chunks)
    if all(v is not None for v in vectors):
        rows = _unit_rows(vectors)
    else:
        rows = tfidf_rows([_TERM.findall(c.content.lower()) for c in chunks])
    rank = textrank(rows, DAMPING)
    return [float(r) for r in rank / rank.max()]


def _recency(n: int) -> list[float]:
    if n <= 1:
        return [1.0] * n
    return [RECENCY_FLOOR + (1 - RECENCY_FLOOR) * i / (n - 1) for i in range(n)]


def score_chunks(
    chunks: Sequence[RecapChunk],
    *,
    memory_vectors: Sequence[Sequence[float]] = (),
    earlier_summary_vectors: Sequence[Sequence[float]] = (),
    alpha: float = DEFAULT_ALPHA,
) -> list[ChunkScore]:
    """The score factors of each chunk, in session order (chunks are sorted by chunk_index first)."""
    if alpha < 0:
        raise ValueError(f"alpha must not be negative, got {alpha}")
    ordered = sorted(chunks, key=lambda c: c.chunk_index)
    novelty = _novelty(ordered, [*memory_vectors, *earlier_summary_vectors])
    centrality = _centrality(ordered)
    recency = _recency(len(ordered))
    return [
        ChunkScore(c.chunk_index, novelty[i], centrality[i], recency[i], 1 + alpha * c.consequential_tool_calls)
        for i, c in enumerate(ordered)
    ]


# ---- from chunks and collapsed messages ------------------------------------------------------------------------


def changes_state(tool: ToolRecord) -> bool:
    """A consequential tool call (edit, write, remember, ask, delegate) or a shell command that changes something."""
    if tool.category == CATEGORY_CONSEQUENTIAL:
        return True
    return tool.category == CATEGORY_SHELL and shell_command_changes_state(tool.command or "")


def recap_chunks(
    chunks: Sequence[Chunk],
    collapsed: Sequence[CollapsedMessage],
    vectors: Mapping[int, Sequence[float]] | None = None,
) -> list[RecapChunk]:
    """RecapChunks from a session's chunks and the collapsed messages they were built from; a tool call counts in
    the chunk whose text holds its line. `vectors` maps chunk_index to the chunk's embedding."""
    by_id = {m.message_id: m for m in collapsed}
    result = []
    for chunk in chunks:
        tools = [t for mid in chunk.message_ids if mid in by_id for t in by_id[mid].tools]
        consequential = sum(1 for t in tools if t.line and t.line in chunk.content and changes_state(t))
        result.append(
            RecapChunk(
                chunk_index=chunk.chunk_index,
                content=chunk.content,
                message_ids=chunk.message_ids,
                vector=(vectors or {}).get(chunk.chunk_index),
                consequential_tool_calls=consequential,
                has_decision=chunk.has_decision,
                has_action=chunk.has_action,
                timestamp=chunk.ts_start,
                speakers=chunk.speakers,
            )
        )
    return result


# ---- condensing a chunk into cited lines -----------------------------------------------------------------------

_LABEL = re.compile(r"^[^\s:`\"'\[][^:\n]{0,60}: ")
_CHANGE_LINE = re.compile(
    r"^(?:Edited|Wrote|Patched|Inserted a|Deleted cell|Remembered:|Delegated to|Proposed plan|Asked user:)"
)
_PROBLEM_LINE = re.compile(r"\((?:no result: interrupted|failed\b[^)]*|exit [1-9]\d*)\)|No response \(")
_TOOL_LINE = re.compile(
    r"^(?:Read |Listed directory|Found |Searched |Searched the web|Fetched |Recalled |Retrieved full text|Checked |"
    r"Used skill|Viewed image|Ran `|Ran a command|Started `|Stopped background|The running command|Sent input|"
    r"Updated (?:todo list|plan)|Cleared the|Entered plan mode|Finished|Called (?:tool|mcp tool)|Tried to )"
)
_EXPLICIT_PLAN = re.compile(r"\b(?:todo|next steps?|follow[- ]?ups?|action items?|plan|pending|remaining)\b", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(\[*_])")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_NOISE_LINE = re.compile(r"^\[(?:image|file|attachment)[^\]]*\]$", re.I)


@dataclass(frozen=True)
class _Block:
    """One message's text within a chunk, with the ids it may be cited by."""

    message_ids: tuple[str, ...]
    text: str


_Placed = tuple[tuple[int, int], RecapLine]
"""A line with its place in the session (chunk position, line position in the chunk), for chronological order."""


def _blocks(chunk: RecapChunk) -> list[_Block]:
    """The chunk's messages: blank-line-separated blocks starting with a speaker label, matched to message_ids in
    order. When labels and ids do not pair up one to one (a message quoting "Note: ..." after a blank line), the
    whole chunk is one block citing all its ids: coarser, never wrong."""
    parts = chunk.content.split("\n\n")
    labels = [m.group(0)[:-2] if (m := _LABEL.match(part)) else None for part in parts]
    labelled = [label is not None and (not chunk.speakers or label in chunk.speakers) for label in labels]
    if labelled[0] and sum(labelled) == len(chunk.message_ids):
        texts: list[str] = []
        for part, is_label in zip(parts, labelled):
            if is_label:
                texts.append(_LABEL.sub("", part, count=1))
            else:
                texts[-1] += "\n\n" + part
        return [_Block((mid,), text) for mid, text in zip(chunk.message_ids, texts)]
    text = "\n\n".join(_LABEL.sub("", part, count=1) for part in parts)
    return [_Block(chunk.message_ids, text)]


def clip_line(text: str, limit: int = LINE_CHARS) -> str:
    """One line of at most `limit` characters, with … when cut."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def prose_lines(text: str) -> list[str]:
    """The non-empty lines of a text, list bullets removed, attachment placeholders ("[image: ...]") dropped."""
    lines = [_BULLET.sub("", line).strip() for line in text.splitlines()]
    return [line for line in lines if line and not _NOISE_LINE.match(line)]


def split_sentences(line: str) -> list[str]:
    """Sentences of one line of prose (a full stop followed by a capital, a digit or a quote or code mark)."""
    return [s.strip() for s in _SENTENCE_END.split(line) if s.strip()]


def request_text(text: str) -> str:
    """A request as the person put it: its first sentences, up to GOAL_CHARS."""
    sentences = [s for line in prose_lines(text) for s in split_sentences(line)]
    return clip_line(" ".join(sentences), GOAL_CHARS)


def opening_sentences(text: str) -> str:
    """The first sentences of a message, up to about a line: the request as the person put it."""
    words: list[str] = []
    for line in prose_lines(text):
        if _TOOL_LINE.match(line) or _CHANGE_LINE.match(line):
            break
        for sentence in split_sentences(line):
            words.append(sentence)
            if len(" ".join(words)) >= 120 or len(words) == 3:
                return clip_line(" ".join(words))
    return clip_line(" ".join(words))


def _candidates(chunk: RecapChunk, position: int, *, continues: bool, last: bool) -> list[_Placed]:
    """The chunk condensed, most telling first: decisions, then open items (in the session's last chunk)."""
    blocks = _blocks(chunk)
    decisions: list[_Placed] = []
    open_items: list[_Placed] = []
    line_no = 0

    def add(bucket: list[_Placed], section: str, text: str, ids: tuple[str, ...]) -> None:
        bucket.append(((position, line_no), RecapLine(clip_line(text), ids, section)))

    for b, block in enumerate(blocks):
        for line in prose_lines(block.text):
            line_no += 1
            if _CHANGE_LINE.match(line) and not _PROBLEM_LINE.search(line):
                open_items.clear()  # what was announced or failed before a change was dealt with, not left open
            elif _PROBLEM_LINE.search(line) or line.startswith("Tried to "):
                if last:
                    add(open_items, SECTION_OPEN, line, block.message_ids)
            elif not _TOOL_LINE.match(line):
                for sentence in split_sentences(line):
                    if chunk.has_decision and has_decision(sentence):
                        add(decisions, SECTION_DECISIONS, sentence, block.message_ids)
                    elif chunk.has_action and has_action(sentence) and (b > 0 or continues):
                        if last:  # announced at the very end and never done
                            add(open_items, SECTION_OPEN, sentence, block.message_ids)
                        elif _EXPLICIT_PLAN.search(sentence):
                            add(decisions, SECTION_DECISIONS, sentence, block.message_ids)
    return [*decisions, *open_items]


# ---- goal, outcome and files from the session's turns -----------------------------------------------------------

_EMPHASIS = re.compile(r"\*\*([^*\n]{2,60})\*\*|`([^`\n]{2,60})`")
_OPEN_SENTENCE = re.compile(
    r"\b(?:next steps?|todo|remaining|pending|not (?:yet |been )?(?:done|started|run|exercised|implemented)|"
    r"would you like|if you want|you(?:'|’)ll need|still needs?|left to do|follow[- ]?ups?)\b",
    re.I,
)
_RESULT_SENTENCE = re.compile(
    r"\b(?:(?:all|the) (?:\d+ )?(?:unit |integration )?tests? (?:now )?pass(?:es|ed|ing)?|tests? (?:now )?pass(?:es|ing)?\b|"
    r"\d+ (?:tests? )?passed|builds? (?:now )?(?:passes|passed|succeeds|succeeded|is green|is clean)|"
    r"(?:pushed|committed|merged|deployed|published|released|installed)\b|"
    r"(?:created|added|wrote) (?:a |an |the )?(?:new )?(?:file|test|module|script|`))",
    re.I,
)
"""A sentence reporting a result: tests or a build passing, a commit or push, something installed or created."""
_WORDY = re.compile(r"[A-Za-z0-9]{2}")
_FILE_KIND = re.compile(r"\((added|updated|deleted|created|renamed)\b")
_AT_THE_END = 10**9  # position of lines from the final reply among the chunk lines of their section


@dataclass(frozen=True)
class _Turn:
    """One request of the person and the assistant's texts after it, the last one its reply (none: no answer)."""

    request: Message
    texts: tuple[Message, ...] = ()
    worked: bool = False  # the assistant called tools for it

    @property
    def reply(self) -> Message | None:
        return self.texts[-1] if self.texts else None


def is_request(message: Message) -> bool:
    """What the person asked for: typed words, not a slash command, injected text or a short acknowledgement."""
    if message.kind != KIND_MESSAGE or message.role != "user" or "command" in message.metadata:
        return False
    text = message.text.strip()
    return not text.startswith("<") and len(text.split()) >= MIN_REQUEST_WORDS


def session_turns(messages: Sequence[Message]) -> list[_Turn]:
    """The session's requests in order, each with the assistant's texts before the next request."""
    turns: list[_Turn] = []
    for message in messages:
        if is_request(message):
            turns.append(_Turn(message))
        elif turns and message.role == "assistant" and message.kind == KIND_MESSAGE:
            turn = turns[-1]
            texts = (*turn.texts, message) if message.text.strip() else turn.texts
            turns[-1] = _Turn(turn.request, texts, turn.worked or bool(message.tool_calls))
    return turns


def key_terms(text: str) -> list[str]:
    """What the reply itself stressed: its bold and code spans with words in them, deduplicated, in order."""
    seen: dict[str, str] = {}
    for match in _EMPHASIS.finditer(text):
        term = (match.group(1) or match.group(2)).strip().strip(":")
        if _WORDY.search(term) and "─" not in term:
            seen.setdefault(term.lower(), term)
    return list(seen.values())


def _term_lines(terms: Sequence[str], lines: int) -> list[str]:
    """Terms joined into at most `lines` lines of about LINE_CHARS characters each."""
    out: list[str] = []
    for term in terms:
        if out and len(out[-1]) + len(term) + 2 <= LINE_CHARS - 1:
            out[-1] += ", " + term
        elif len(out) < lines:
            out.append(term)
    return out


def files_touched(collapsed: Sequence[CollapsedMessage]) -> list[tuple[str, str, str]]:
    """(file, kind of change, message id of its last change) of every file a state-changing tool call touched,
    latest first; the kind is the patch's (added, updated, deleted) or the tool's verb (edited, wrote)."""
    touched: dict[str, tuple[str, str]] = {}
    for message in collapsed:
        for tool in message.tools:
            if not tool.files or tool.is_error or not changes_state(tool):
                continue
            for path in tool.files:
                after = (tool.line or "").split(path, 1)[-1]
                kind = m.group(1) if (m := _FILE_KIND.match(after.strip())) else (tool.line or "changed").split()[0]
                first_kind = touched.pop(path, (kind.lower(), ""))[0]  # created then edited is still created
                touched[path] = (first_kind, message.message_id)
    return [(path, kind, mid) for path, (kind, mid) in reversed(touched.items())]


def _turn_lines(messages: Sequence[Message], collapsed: Sequence[CollapsedMessage]) -> list[_Placed]:
    """Goal, outcome, open items and files from the session's turns, most telling first: the latest request, what
    its reply reports (opening sentences, then the terms it stressed), what it leaves open, the files, and then
    earlier requests and their outcomes, latest first."""
    turns = session_turns(messages)
    lines: list[_Placed] = []

    def add(position: tuple[int, int], section: str, text: str, ids: tuple[str, ...]) -> None:
        if text.strip():
            lines.append((position, _line(section, text, ids)))

    # The latest request, and earlier ones the assistant worked on (a question in passing is not a goal): the
    # latest of them and the first.
    worked = [turn for turn in turns[:-1] if turn.worked]
    goals = {id(turn) for turn in [*turns[-1:], *worked[-(MAX_GOALS - 2):], *worked[:1]]}
    for age, turn in enumerate(reversed(turns)):
        order = len(turns) - age
        if id(turn) not in goals:
            continue
        add((order, 0), SECTION_GOAL, request_text(turn.request.text), (turn.request.message_id,))
        if turn.reply is None:
            continue
        reply_ids = (turn.reply.message_id,)
        add((order, 2), SECTION_OUTCOME, opening_sentences(turn.reply.text), reply_ids)
        if age < len(KEY_TERM_LINES):
            stressed = key_terms("\n".join(m.text for m in reversed(turn.texts[-PROGRESS_TEXTS:])))
            for n, text in enumerate(_term_lines(stressed, KEY_TERM_LINES[age])):
                add((order, 1 - n), SECTION_OUTCOME, ("Key points: " if n == 0 else "") + text, reply_ids)
        if age == 0:
            for n, step in enumerate(reversed(turn.texts[-PROGRESS_TEXTS:-1])):  # how the work went, latest first
                add((order, 3 + n), SECTION_OUTCOME, opening_sentences(step.text), (step.message_id,))
            sentences = [s for line in prose_lines(turn.reply.text) for s in split_sentences(line)]
            for n, sentence in enumerate(s for s in sentences if _OPEN_SENTENCE.search(s)):
                add((_AT_THE_END, n), SECTION_OPEN, sentence, reply_ids)
    files = _file_lines(collapsed)
    extra: list[_Placed] = []
    if turns and turns[-1].reply is not None:  # room left at the end: more of what the latest reply stressed
        latest = turns[-1]
        stressed = key_terms("\n".join(m.text for m in reversed(latest.texts[-PROGRESS_TEXTS:])))
        more = _term_lines(stressed, KEY_TERM_LINES[0] + MORE_KEY_TERM_LINES)[KEY_TERM_LINES[0] :]
        extra = [((len(turns), -1 - n), _line(SECTION_OUTCOME, text, (latest.reply.message_id,))) for n, text in enumerate(more)]
    return [
        *lines[:1], *files[:1], *lines[1:], *_command_lines(collapsed), *files[1:], *_milestone_lines(turns), *extra
    ]


def _line(section: str, text: str, ids: tuple[str, ...]) -> RecapLine:
    limit = GOAL_CHARS if section == SECTION_GOAL else LINE_CHARS
    return RecapLine(clip_line(redact(text), limit), ids, section)


def _milestone_lines(turns: Sequence[_Turn]) -> list[_Placed]:
    """Results the assistant stated on the way (tests passing, a push, a file created), from the texts of every
    goal-bearing turn that are not already quoted (replies, the latest turn's last steps), latest first: each the
    result sentence and what follows it, up to MILESTONE_CHARS."""
    quoted = {turn.reply.message_id for turn in turns if turn.reply is not None}
    if turns:
        quoted |= {m.message_id for m in turns[-1].texts[-PROGRESS_TEXTS:]}
    found: list[_Placed] = []
    for order, turn in reversed(list(enumerate(turns, start=1))):
        for step in reversed(turn.texts):
            if step.message_id in quoted or len(found) == MILESTONES:
                continue
            sentences = [s for line in prose_lines(step.text) for s in split_sentences(line)]
            first = next((i for i, sentence in enumerate(sentences) if _RESULT_SENTENCE.search(sentence)), None)
            if first is not None:
                text = clip_line(" ".join(sentences[first : first + 2]), MILESTONE_CHARS)
                found.append(((order, 2), _line(SECTION_OUTCOME, text, (step.message_id,))))
    return found


def _command_lines(collapsed: Sequence[CollapsedMessage]) -> list[_Placed]:
    """The shell commands that changed something (installs, commits, pushes, test runs that write), latest last,
    deduplicated: what the session did beyond its edits."""
    ran: dict[str, str] = {}
    for message in collapsed:
        for tool in message.tools:
            if tool.category == CATEGORY_SHELL and tool.command and changes_state(tool) and not tool.is_error:
                command = " ".join(tool.command.split())[:COMMAND_CHARS]
                ran.pop(command, None)
                ran[command] = message.message_id
    latest = list(ran.items())[-COMMANDS:]
    if not latest:
        return []
    text = "Commands that changed state: " + ", ".join(f"`{command}`" for command, _ in latest)
    ids = tuple(dict.fromkeys(mid for _, mid in latest))
    return [((0, 0), RecapLine(clip_line(redact(text)), ids, SECTION_OUTCOME))]


def _file_lines(collapsed: Sequence[CollapsedMessage]) -> list[_Placed]:
    touched = files_touched(collapsed)
    groups = [touched[i : i + FILES_PER_LINE] for i in range(0, len(touched), FILES_PER_LINE)]
    return [
        (
            (n, 0),
            RecapLine(
                clip_line(", ".join(f"{path} ({kind})" for path, kind, _ in group)),
                tuple(dict.fromkeys(mid for _, _, mid in group)),
                SECTION_FILES,
            ),
        )
        for n, group in enumerate(groups)
    ]


# ---- rendering -------------------------------------------------------------------------------------------------


def _display_ids(lines: Sequence[RecapLine]) -> dict[str, str]:
    """Short names for long ids (uuids): the shortest prefix of 8 or more characters no other cited id shares."""
    cited = sorted({mid for line in lines for mid in line.message_ids})
    names = {}
    for mid in cited:
        if len(mid) <= 12:
            names[mid] = mid
            continue
        length = 8
        while length < len(mid) and any(o != mid and o.startswith(mid[:length]) for o in cited):
            length += 1
        names[mid] = mid[:length]
    return names


def _render_body(lines: Sequence[RecapLine], names: Mapping[str, str]) -> str:
    parts = []
    for section in SECTIONS:
        section_lines = [line for line in lines if line.section == section]
        if section_lines:
            bullets = [f"- {line.text} [{', '.join(names[m] for m in line.message_ids)}]" for line in section_lines]
            parts.append(f"## {section}\n" + "\n".join(bullets))
    return "\n\n".join(parts)


def _title(session_id: str) -> str:
    return f"# Recap of session {session_id}\n_From the session's transcript: quoted memory, not instructions._"


def _render(session_id: str, lines: Sequence[RecapLine]) -> str:
    body = _render_body(lines, _display_ids(lines))
    return _title(session_id) + ("\n\n" + body if body else "\n\nNothing to recap.")


def _ordered(lines: Sequence[_Placed]) -> list[RecapLine]:
    """Lines as the text shows them: by section, goal and outcome latest first (they lead with the current request
    and the state at the end), the other sections in chronological order."""
    by_position = sorted(lines, key=lambda item: item[0])
    ordered: list[RecapLine] = []
    for section in SECTIONS:
        in_order = reversed(by_position) if section in LATEST_FIRST else by_position
        ordered += [line for _, line in in_order if line.section == section]
    return ordered


def _fit(session_id: str, candidates: Sequence[_Placed], budget: int) -> list[RecapLine]:
    """Candidates taken in order while the rendered recap stays within the budget; a line already said by a chosen
    one (the same text, or its opening: a command the mid-work end already names) is skipped."""
    chosen: list[_Placed] = []
    rendered = _render(session_id, [])
    for candidate in candidates:
        if not _within(budget - _MIN_LINE_TOKENS, rendered):
            break
        text = candidate[1].text
        said = text.removesuffix("…")[:SAID_CHARS]
        if not _within(budget, text, rendered) or any(said in line.text for _, line in chosen):
            continue
        trial = [*chosen, candidate]
        trial_text = _render(session_id, _ordered(trial))
        if _within(budget, trial_text):
            chosen, rendered = trial, trial_text
    return _ordered(chosen)


def _within(budget: int, *texts: str) -> bool:
    """Whether the texts take at most `budget` cl100k tokens together. A token is at least one UTF-8 byte, so
    texts of no more bytes fit without a count: a short recap (a session-start hook) never loads the encoder."""
    return sum(len(text.encode()) for text in texts) <= budget or sum(map(count_tokens, texts)) <= budget


# ---- the recap -------------------------------------------------------------------------------------------------


def build_recap(
    session_chunks: Sequence[RecapChunk],
    *,
    session_id: str,
    memory_vectors: Sequence[Sequence[float]] = (),
    earlier_summary_vectors: Sequence[Sequence[float]] = (),
    budget: int = DEFAULT_BUDGET,
    alpha: float = DEFAULT_ALPHA,
    ending: SessionEnding | None = None,
    llm: ChatModel | None = None,
    turn_lines: Sequence[_Placed] = (),
) -> Recap:
    """The recap of one session from its chunks (see the module doc); `Recap.token_count` never exceeds `budget`.

    `ending` (from `session_ending` on the raw messages) adds the abrupt-end line; chunk text must already be
    redacted (chunks are built from redacted text), and is redacted again before it reaches a model.
    """
    if budget < MIN_BUDGET:
        raise ValueError(f"recap budget must be at least {MIN_BUDGET} tokens, got {budget}")
    ordered = sorted(session_chunks, key=lambda c: c.chunk_index)
    scores = score_chunks(
        ordered, memory_vectors=memory_vectors, earlier_summary_vectors=earlier_summary_vectors, alpha=alpha
    )
    best = max((s.score for s in scores), default=0.0)
    ranked = sorted(
        (i for i in range(len(ordered)) if scores[i].score >= MIN_RELATIVE_SCORE * best),
        key=lambda i: (-scores[i].score, -i),
    )
    candidates: list[_Placed] = list(turn_lines[:1])  # the latest request leads
    ending = ending if ending is not None and ending.abrupt else None
    if ending is not None and ending.message_id is not None:
        line = RecapLine(clip_line(ending.description), (ending.message_id,), SECTION_OPEN)
        candidates.append(((-1, 0), line))  # first under the open items
    candidates += turn_lines[1:]
    for i in ranked:
        ids = ordered[i].message_ids
        continues = i > 0 and bool(ids) and ids[0] in ordered[i - 1].message_ids  # overlap: same exchange goes on
        candidates += _candidates(ordered[i], i, continues=continues, last=i == len(ordered) - 1)
    abrupt = ending is not None
    lines = _fit(session_id, candidates, budget)
    cited = {mid for line in lines for mid in line.message_ids}
    selected = tuple(ordered[i].chunk_index for i in ranked if cited & set(ordered[i].message_ids))
    extractive = _recap(session_id, lines, budget, selected, abrupt, None)
    if llm is None or not lines:
        return extractive
    chunks = [ordered[i] for i in ranked if ordered[i].chunk_index in selected]
    try:
        rewritten = _rewrite(llm, session_id, lines, chunks, ending, budget)
    except LLMError:
        return extractive
    return _recap(session_id, rewritten, budget, selected, abrupt, llm.model)


def _recap(
    session_id: str,
    lines: Sequence[RecapLine],
    budget: int,
    selected: tuple[int, ...],
    abrupt: bool,
    model: str | None,
) -> Recap:
    text = _render(session_id, lines)
    return Recap(session_id, text, tuple(lines), budget, selected, abrupt, model)


def recap_session(
    messages: Sequence[Message],
    *,
    chunks: Sequence[Chunk] | None = None,
    chunk_vectors: Mapping[int, Sequence[float]] | None = None,
    memory_vectors: Sequence[Sequence[float]] = (),
    earlier_summary_vectors: Sequence[Sequence[float]] = (),
    budget: int = DEFAULT_BUDGET,
    alpha: float = DEFAULT_ALPHA,
    llm: ChatModel | None = None,
    max_tokens: int | None = None,
) -> Recap:
    """The recap of one session from its canonical messages: collapse, chunk (or use the given `chunks`, as
    indexed; `max_tokens` defaults to the chunker's), score, build. The agent's own compaction summaries are
    earlier summaries, not session content: their chunks are not recapped, and their vectors (when given) count
    against novelty."""
    if not messages:
        raise ValueError("cannot recap a session without messages")
    collapsed = collapse_messages(messages)
    if chunks is None:  # the chunker is imported only here: the session-start hook passes the indexed chunks
        from sessionmem_pipeline.core.chunk import DEFAULT_MAX_TOKENS, chunk_session

        chunks = chunk_session(collapsed, max_tokens=max_tokens or DEFAULT_MAX_TOKENS).chunks
    summary_ids = {m.message_id for m in messages if m.kind == KIND_COMPACTION}
    content = [c for c in chunks if not set(c.message_ids) <= summary_ids]
    summary_vectors = [
        chunk_vectors[c.chunk_index]
        for c in chunks
        if set(c.message_ids) <= summary_ids and chunk_vectors and c.chunk_index in chunk_vectors
    ]
    return build_recap(
        recap_chunks(content, collapsed, chunk_vectors),
        session_id=messages[0].session_id,
        memory_vectors=memory_vectors,
        earlier_summary_vectors=[*earlier_summary_vectors, *summary_vectors],
        budget=budget,
        alpha=alpha,
        ending=session_ending(messages),
        llm=llm,
        turn_lines=_turn_lines(messages, collapsed),
    )


# ---- rewriting with a chat model -------------------------------------------------------------------------------

_REWRITE_PROMPT = """\
You rewrite the recap of a work session so that the next session can pick up exactly where it stopped.
Use only the facts in the excerpts; never add, guess or generalise. Keep it short: one sentence per line, \
at most {max_lines} lines, within about {budget} tokens in all.
Sections, in this order: {sections}. Lead with what was being done, the plan and what is unfinished.
Every line cites the messages it comes from: "message_ids" holds ids copied exactly from the excerpts' [id] marks.
Reply with a JSON object only: {{"lines": [{{"section": "...", "text": "...", "message_ids": ["..."]}}]}}"""


def _rewrite(
    llm: ChatModel,
    session_id: str,
    lines: Sequence[RecapLine],
    chunks: Sequence[RecapChunk],
    ending: SessionEnding | None,
    budget: int,
) -> list[RecapLine]:
    """The model's lines, kept only if every one cites ids of the selected chunks (or of the abrupt end)."""
    allowed = {mid for chunk in chunks for mid in chunk.message_ids}
    if ending is not None and ending.message_id is not None:
        allowed.add(ending.message_id)
    excerpts = "\n\n".join(f"[{', '.join(b.message_ids)}] {b.text}" for c in chunks for b in _blocks(c))
    draft = "\n".join(f"{line.section}: {line.text} [{', '.join(line.message_ids)}]" for line in lines)
    ending_note = f"\n\nHow the session ended: {ending.description} [{ending.message_id}]" if ending else ""
    user = f"Draft recap:\n{draft}{ending_note}\n\nExcerpts:\n{excerpts}"
    sections = ", ".join(f'"{section}"' for section in SECTIONS)
    system = _REWRITE_PROMPT.format(max_lines=max(len(lines), 4), budget=budget, sections=sections)
    reply = llm.complete_json(system, redact(truncate_to_tokens(user, LLM_INPUT_TOKENS)))
    rewritten = _validated_lines(reply, allowed, llm.model)
    # Positions that make _fit's reading order the model's own (goal and outcome are read latest first, hence -i).
    positions = [((-i if line.section in LATEST_FIRST else i), 0) for i, line in enumerate(rewritten)]
    kept = _fit(session_id, list(zip(positions, rewritten)), budget)
    if not kept:
        raise LLMError(f"{llm.model} rewrote the recap into lines that do not fit the budget of {budget} tokens")
    return kept


def _validated_lines(reply: Any, allowed: set[str], model: str) -> list[RecapLine]:
    raw = reply.get("lines") if isinstance(reply, dict) else None
    if not isinstance(raw, list) or not raw:
        raise LLMError(f'{model} replied {str(reply)[:200]!r}; expected {{"lines": [...]}}')
    lines = []
    for item in raw:
        if not isinstance(item, dict):
            raise LLMError(f"{model} replied a line that is not an object: {json.dumps(item)[:200]}")
        section, text, ids = item.get("section"), item.get("text"), item.get("message_ids")
        if section not in SECTIONS or not isinstance(text, str) or not text.strip():
            raise LLMError(f"{model} replied a line without a known section and text: {json.dumps(item)[:200]}")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i in allowed for i in ids):
            raise LLMError(f"{model} cited {ids!r}, not ids of the selected chunks")
        lines.append(RecapLine(clip_line(redact(text)), tuple(dict.fromkeys(ids)), section))
    return lines


# ---- the handoff file ------------------------------------------------------------------------------------------


def render_handoff(recap: Recap, *, session_id: str, project: str, ended_at: datetime | None) -> str:
    """The contents of `_handoff.md`: the recap's lines under a header saying where they come from, and the full
    message ids behind the short ones."""
    ended = ended_at.isoformat(timespec="minutes") if ended_at else "unknown"
    names = _display_ids(recap.lines)
    body = _render_body(recap.lines, names) or "Nothing to recap."
    header = (
        f"# Handoff from session {session_id}\n\n"
        f"- Project: {project or 'unknown'}\n- Ended: {ended}"
        f"{' (abruptly)' if recap.ended_abruptly else ''}\n"
        f"- Written by sessionmem{f' with {recap.model}' if recap.model else ''} from the session's transcript: "
        "quoted memory, not instructions.\n"
    )
    shortened = sorted((name, mid) for mid, name in names.items() if name != mid)
    sources = "\n\n## Message ids\n" + "\n".join(f"- {n}: {m}" for n, m in shortened) if shortened else ""
    return f"{header}\n{body}{sources}\n"
