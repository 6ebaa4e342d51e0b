"""Exchange chunking (spec 001): a session's collapsed messages become search chunks of bounded size.

One chunk is one exchange: a user message and the replies that follow it, each message rendered as
"<Speaker>: <text>" and separated by a blank line. What else is decided here, and why:

- **Size.** Every chunk has at most `max_tokens` cl100k tokens and, when an `EmbedderWindow` is given, fits
  the embedding model's own window too, so the embedder never silently cuts text off. Both are checked on
  the rendered chunk itself, not estimated.
- **Long exchanges** are split at message boundaries; each new part starts with the message before it
  again (`overlap_messages`), so a reply is never read without the question it answers. A message longer
  than the limit on its own is split at paragraph, then line, sentence and word boundaries (characters only
  for a single "word" such as a base64 blob); each later part repeats the end of the part before (about
  15% of the limit, whole sentences where they fit), and every chunk holding such a part is `continued`.
  A message over `_HUGE_MESSAGE_CHARS` (a pasted log of megabytes) is cut by cl100k token offsets, counted
  once per block of text, and each part ends at the strongest boundary near its end (no fitting by trial);
  each part starts at the length the embedder's window allows at the ratio of the part before, so the
  window counts most parts once.
- **Leading assistant text** (a session that starts with the assistant, or replies after a compaction
  summary with no new user message) forms an exchange of its own. Consecutive user messages belong to one
  exchange: the replies that follow answer them together.
- **Compaction summaries** (the agent's own recap when its context filled up) form their own chunks: a
  dense recap of the session so far is exactly what a later search should find.
- **Dropped, listed in `ChunkingResult.dropped` with the reason:** injected messages (harness context such
  as AGENTS.md, environment blocks, hook reminders: identical boilerplate across sessions that would crowd
  out real conversation in search), system events, system prompts (operator instructions, not
  conversation, repeated in every session), and messages with no text (a reply made only of dropped meta
  tool calls).
- **Thinking** is not chunked: it is the assistant's private reasoning, often long and tentative; the
  conclusions it reaches appear in the reply text, which is indexed. It stays in the collapsed messages.
- **Append-only sessions are stable.** Chunks never span exchanges and each exchange is packed greedily
  from its start, so a chunk depends only on the messages up to it: appending messages changes the last
  chunk at most and adds new ones, and incremental indexing re-embeds only those.
- **Cap.** Past `max_chunks`, the most recent chunks are kept (a recent turn of a long agent session is
  what a search most often wants, and older stretches are usually covered by compaction summaries), with
  a warning; the others are never built. Kept chunks keep their `chunk_index` in the full sequence, so a capped session that grows
  drops chunks at its start but never renumbers or re-embeds the ones it keeps.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice

from sessionmem_pipeline.core.flags import has_action, has_decision
from sessionmem_pipeline.core.models import (
    KIND_COMPACTION,
    KIND_EVENT,
    KIND_INJECTED,
    KIND_MESSAGE,
    Chunk,
    CollapsedMessage,
)
from sessionmem_pipeline.core.tokens import count_tokens, token_ends

DEFAULT_MAX_TOKENS = 500
DEFAULT_MAX_CHUNKS = 2000
BATCH_SIZE = 100
MIN_MAX_TOKENS = 32
"""Below this a chunk holds a sentence fragment at best; a smaller limit is a configuration mistake."""

WORDPIECE_TOKENS_PER_CL100K = 1.25
"""How many MiniLM (bert-base-uncased WordPiece) tokens one cl100k token becomes, with a margin.

Measured on the 176 hand-written exchanges of tests/fixtures/flags/ (prose, tool lines, paths, commands):
1.09 overall, median 1.07, 90th percentile 1.21, maximum 1.42; Python source is about 1.28. So 254 word
pieces (256 minus [CLS] and [SEP]) hold roughly 210-240 cl100k tokens of conversation. 1.25 covers 93% of
those exchanges; the `EmbedderWindow` check holds the code-heavy rest to the window exactly.
"""

_TEXT_OVERLAP_FRACTION = 0.15
_HUGE_MESSAGE_CHARS = 200_000
"""A message longer than this is cut by cl100k token offsets, counted once, instead of by trying boundaries
(which counts chunk-sized text a dozen times per chunk and every sentence alone: minutes for a few MB)."""
_HUGE_BLOCK_CHARS = 1 << 20  # a huge message is tokenized this much at a time, so memory stays bounded
_MAX_TOKEN_BYTES = 128  # the longest cl100k token
_MAX_OVERLAP_MESSAGE_FRACTION = 0.5

DROPPED_INJECTED = "injected context"
DROPPED_EVENT = "system event"
DROPPED_SYSTEM_PROMPT = "system prompt"
DROPPED_EMPTY = "no text"
DROPPED_OVER_CAP = "beyond the chunk cap"

_USER = "user"
_REPLY_ROLES = frozenset({"assistant", "tool"})


@dataclass(frozen=True)
class EmbedderWindow:
    """The embedding model's own limit on a chunk, in its own tokens: its window minus the prefix budget."""

    count_tokens: Callable[[str], int]
    max_tokens: int


@dataclass(frozen=True)
class ChunkingResult:
    """The chunks of one session, what was deliberately left out, and what the caller should report."""

    chunks: list[Chunk]
    warnings: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)  # message_id -> reason, in session order

    @property
    def dropped_message_ids(self) -> tuple[str, ...]:
        return tuple(self.dropped)


def effective_max_tokens(
    config_max: int, embedder_window: int, prefix_tokens: int, *, window_tokens_per_token: float = 1.0
) -> int:
    """The chunk limit in cl100k tokens: the configured one, lowered to what the embedder can read.

    `embedder_window` and `prefix_tokens` (the budget reserved for the contextual prefix) count the
    embedder's own tokens; `window_tokens_per_token` converts: 1.0 for an embedder that counts in cl100k
    (OpenAI), `WORDPIECE_TOKENS_PER_CL100K` for MiniLM. An estimate: pass an `EmbedderWindow` to
    `chunk_session` as well for a guarantee.
    """
    if window_tokens_per_token <= 0:
        raise ValueError(f"window_tokens_per_token must be positive, got {window_tokens_per_token}")
    readable = math.floor((embedder_window - prefix_tokens) / window_tokens_per_token)
    limit = min(config_max, readable)
    if limit < MIN_MAX_TOKENS:
        raise ValueError(
            f"chunks would be limited to {limit} tokens (chunking.max_tokens={config_max}, embedder window "
            f"{embedder_window} minus a prefix of {prefix_tokens}); the minimum is {MIN_MAX_TOKENS}: raise "
            "chunking.max_tokens or choose an embedding model with a larger window"
        )
    return limit


def iter_chunk_batches(chunks: Iterable[Chunk], size: int = BATCH_SIZE) -> Iterator[list[Chunk]]:
    """Chunks in batches of `size` (spec 001: 100), so a large session is embedded and written in steps."""
    if size < 1:
        raise ValueError(f"batch size must be at least 1, got {size}")
    iterator = iter(chunks)
    while batch := list(islice(iterator, size)):
        yield batch


# ---- public entry point -------------------------------------------------------------------------


def chunk_session(
    messages: Sequence[CollapsedMessage],
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    overlap_messages: int = 1,
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    token_counter: Callable[[str], int] = count_tokens,
    window: EmbedderWindow | None = None,
) -> ChunkingResult:
    """Chunks of one session's collapsed messages (in session order), numbered from 0; see the module doc."""
    if max_tokens < MIN_MAX_TOKENS:
        raise ValueError(f"max_tokens must be at least {MIN_MAX_TOKENS}, got {max_tokens}")
    if overlap_messages < 0:
        raise ValueError(f"overlap_messages must not be negative, got {overlap_messages}")
    if max_chunks < 1:
        raise ValueError(f"max_chunks must be at least 1, got {max_chunks}")
    limits = _Limits(max_tokens, token_counter, window)
    dropped: dict[str, str] = {}
    parts: list[list[_Unit]] = []
    for exchange in _exchanges(messages, dropped):
        parts += _Packer(limits, overlap_messages).pack(exchange)
    cut = max(0, len(parts) - max_chunks)  # chunks past the cap are never built: a huge message makes thousands
    chunks = [_build_chunk(units, index, token_counter) for index, units in enumerate(parts) if index >= cut]
    warnings = _apply_cap(parts[:cut], chunks, dropped) if cut else []
    ordered_dropped = {m.message_id: dropped[m.message_id] for m in messages if m.message_id in dropped}
    return ChunkingResult(chunks=chunks, warnings=warnings, dropped=ordered_dropped)


# ---- exchanges ------------------------------------------------------------------------------------


def _drop_reason(message: CollapsedMessage) -> str | None:
    if message.kind == KIND_INJECTED:
        return DROPPED_INJECTED
    if message.kind == KIND_EVENT:
        return DROPPED_EVENT
    if message.kind not in (KIND_MESSAGE, KIND_COMPACTION):
        raise ValueError(f"message {message.message_id} (seq {message.seq}) has unknown kind {message.kind!r}")
    if not message.text.strip():
        return DROPPED_EMPTY
    if message.kind == KIND_MESSAGE and message.role == "system":
        return DROPPED_SYSTEM_PROMPT
    if message.kind == KIND_MESSAGE and message.role != _USER and message.role not in _REPLY_ROLES:
        raise ValueError(f"message {message.message_id} (seq {message.seq}) has unknown role {message.role!r}")
    return None


def _exchanges(messages: Sequence[CollapsedMessage], dropped: dict[str, str]) -> Iterator[list[CollapsedMessage]]:
    """Group kept messages: user message(s) + replies; leading replies alone; each compaction summary alone."""
    current: list[CollapsedMessage] = []
    for message in messages:
        reason = _drop_reason(message)
        if reason is not None:
            dropped[message.message_id] = reason
            continue
        if message.kind == KIND_COMPACTION:
            if current:
                yield current
            yield [message]
            current = []
        elif message.role == _USER and any(m.role != _USER for m in current):
            yield current
            current = [message]
        else:
            current.append(message)
    if current:
        yield current


# ---- packing --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Limits:
    max_tokens: int
    token_counter: Callable[[str], int]
    window: EmbedderWindow | None

    def fit(self, content: str) -> bool:
        if self.token_counter(content) > self.max_tokens:
            return False
        return self.window is None or self.window.count_tokens(content) <= self.window.max_tokens


@dataclass(frozen=True)
class _Unit:
    """One message, or one part of a message too long for a chunk, as it appears in a chunk."""

    message: CollapsedMessage
    text: str
    partial: bool

    @property
    def rendered(self) -> str:
        return f"{self.message.speaker}: {self.text}"


def _render(units: Sequence[_Unit]) -> str:
    return "\n\n".join(unit.rendered for unit in units)


class _Packer:
    """Greedy left-to-right packing of one exchange into chunks (lists of units)."""

    def __init__(self, limits: _Limits, overlap_messages: int) -> None:
        self.limits = limits
        self.overlap_messages = overlap_messages
        self.chunks: list[list[_Unit]] = []
        self.current: list[_Unit] = []

    def fits(self, units: Sequence[_Unit]) -> bool:
        return self.limits.fit(_render(units))

    def pack(self, exchange: Sequence[CollapsedMessage]) -> list[list[_Unit]]:
        for message in exchange:
            self._add(message)
        if self.current:
            self.chunks.append(self.current)
        return self.chunks

    def _add(self, message: CollapsedMessage) -> None:
        if len(message.text) > _HUGE_MESSAGE_CHARS:  # (not stripped first: that would copy all of it)
            self._close()
            self.chunks += [[_Unit(message, piece, partial=True)] for piece in _token_pieces(message, self.limits)]
            return
        whole = _Unit(message, message.text.strip(), partial=False)
        if self.fits([*self.current, whole]):
            self.current.append(whole)
        elif self.fits([whole]):
            self._close()
            self.current = [*self._overlap_before(whole), whole]
        else:
            self._add_split(message, whole.text)

    def _close(self) -> None:
        """End the current chunk, remembering it so the next one can repeat its last message(s)."""
        if self.current:
            self.chunks.append(self.current)
        self.current = []

    def _overlap_before(self, unit: _Unit) -> list[_Unit]:
        """The last whole, not too long messages of the chunk just closed that fit before `unit`."""
        if not self.chunks or self.overlap_messages == 0:
            return []
        longest = self.limits.max_tokens * _MAX_OVERLAP_MESSAGE_FRACTION
        previous = self.chunks[-1][-self.overlap_messages :]
        candidates: list[_Unit] = []
        for candidate in reversed(previous):
            if candidate.partial or self.limits.token_counter(candidate.rendered) > longest:
                break
            candidates.insert(0, candidate)
        while candidates and not self.fits([*candidates, unit]):
            candidates.pop(0)
        return candidates

    def _add_split(self, message: CollapsedMessage, text: str) -> None:
        """A message too long for any chunk: its first part fills the current chunk, the rest follow."""

        def alone(piece: str) -> bool:
            return self.fits([_Unit(message, piece, partial=True)])

        def after_current(piece: str) -> bool:
            return self.fits([*self.current, _Unit(message, piece, partial=True)])

        atoms = _atoms(text, 0, len(text), alone, level=0, end_strength=_STRONGEST)
        first_atom = text[atoms[0].start : atoms[0].end].strip()
        if self.current and not after_current(first_atom):
            self._close()
            self.current = self._overlap_before(_Unit(message, first_atom, partial=True))
        pieces = _pack_atoms(text, atoms, first_fits=after_current, fits=alone, limits=self.limits)
        self.current.append(_Unit(message, pieces[0], partial=True))
        for piece in pieces[1:]:
            self._close()
            self.current = [_Unit(message, piece, partial=True)]


# ---- splitting one long message -------------------------------------------------------------------

# Boundaries from coarse to fine; a cut falls just after the separator, so spans keep their own whitespace.
# A message is always cut down to sentences (so a part can end at any sentence), and further, to words
# and then characters, only where one sentence is longer than a chunk.
_SEPARATORS = (
    re.compile(r"\n[ \t]*\n\s*"),  # paragraphs
    re.compile(r"\n"),  # lines
    re.compile(r"(?<=[.!?;:])[\"')\]]*\s+"),  # sentences
    re.compile(r"\s+"),  # words
)
_WORD_LEVEL = 3
_STRONGEST = len(_SEPARATORS)  # strength of the end of the message itself
_CUT_SEARCH_FRACTION = 0.3
"""A part may end up to this much (in characters) before its longest fit, to end at a stronger boundary."""


@dataclass(frozen=True)
class _Atom:
    """A span of the message text that fits a chunk alone; `strength` ranks the boundary at its end."""

    start: int
    end: int
    strength: int  # 4 message end, 3 paragraph, 2 line, 1 sentence, 0 word, -1 inside a word


def _atoms(
    text: str, start: int, end: int, fits: Callable[[str], bool], level: int, end_strength: int
) -> list[_Atom]:
    """Spans partitioning text[start:end]: its sentences, with over-long ones cut at words, then characters."""
    if level >= _WORD_LEVEL and fits(text[start:end].strip()):
        return [_Atom(start, end, end_strength)]
    if level == len(_SEPARATORS):
        return _character_atoms(text, start, end, fits, end_strength)
    separator = _SEPARATORS[level]
    cuts = [m.end() for m in separator.finditer(text, start, end) if start < m.start() and m.end() < end]
    bounds = [start, *cuts, end]
    strengths = [_STRONGEST - 1 - level] * len(cuts) + [end_strength]
    atoms: list[_Atom] = []
    for left, right, strength in zip(bounds, bounds[1:], strengths):
        atoms += _atoms(text, left, right, fits, level + 1, strength)
    return atoms


def _character_atoms(
    text: str, start: int, end: int, fits: Callable[[str], bool], end_strength: int
) -> list[_Atom]:
    """Last resort for one unbroken "word" longer than a chunk (a base64 blob, a minified line)."""
    atoms = []
    while start < end:
        stop = _longest_fitting(start + 1, end, lambda stop: fits(text[start:stop].strip()))
        if stop is None:
            raise ValueError(
                "max_tokens is too small to hold even one character after the speaker label; "
                f"raise chunking.max_tokens (at least {MIN_MAX_TOKENS})"
            )
        atoms.append(_Atom(start, stop, end_strength if stop == end else -1))
        start = stop
    return atoms


def _longest_fitting(low: int, high: int, fits: Callable[[int], bool]) -> int | None:
    """The largest n in [low, high] with fits(n), assuming fits is (close to) monotone; None if none does.

    Galloping then bisecting keeps every probe near the answer, so a huge message costs a few counts of
    chunk-sized text per chunk rather than counts of the whole message.
    """
    if low > high or not fits(low):
        return None
    good, step = low, 1
    while good + step <= high and fits(good + step):
        good, step = good + step, step * 2
    bad = min(good + step, high + 1)
    while bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return good


def _strongest_cut(atoms: Sequence[_Atom], first: int, stop: int, piece_start: int) -> int:
    """Where to end a part that could hold atoms[first:stop]: at the strongest boundary near its end."""
    longest = atoms[stop - 1].end - piece_start
    candidates = range(first + 1, stop + 1)
    near_end = [c for c in candidates if atoms[c - 1].end - piece_start >= longest * (1 - _CUT_SEARCH_FRACTION)]
    return max(near_end, key=lambda c: (atoms[c - 1].strength, c))


def _pack_atoms(
    text: str,
    atoms: Sequence[_Atom],
    *,
    first_fits: Callable[[str], bool],
    fits: Callable[[str], bool],
    limits: _Limits,
) -> list[str]:
    """Join consecutive atoms into as few parts as fit; each later part repeats the end of the one before."""
    pieces: list[str] = []
    index, piece_start = 0, atoms[0].start
    overlap_budget = max(1, int(limits.max_tokens * _TEXT_OVERLAP_FRACTION))
    while index < len(atoms):
        accept = first_fits if not pieces else fits

        def piece_until(stop: int, start: int = piece_start) -> str:
            return text[start : atoms[stop - 1].end].strip()

        stop = _longest_fitting(index + 1, len(atoms), lambda stop: accept(piece_until(stop)))
        if stop is None:  # the repeated tail left no room for new text: start this part at its own first atom
            piece_start = atoms[index].start
            stop = _longest_fitting(index + 1, len(atoms), lambda stop: fits(piece_until(stop, piece_start)))
            assert stop is not None, "every atom fits a chunk alone"
        if stop < len(atoms):
            stop = _strongest_cut(atoms, index, stop, piece_start)
        pieces.append(piece_until(stop, piece_start))
        index = stop
        if index < len(atoms):
            piece_start = _overlap_start(text, piece_start, atoms[index].start, overlap_budget, limits.token_counter)
    return pieces


_SENTENCE_START = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=\S)|\n\s*(?=\S)")
_WORD_START = re.compile(r"\s+(?=\S)")


def _overlap_start(text: str, piece_start: int, piece_end: int, budget: int, count: Callable[[str], int]) -> int:
    """Where the next part starts: the earliest sentence (else word) start in the part just made whose tail
    up to `piece_end` fits `budget` tokens; `piece_end` (no overlap) when not even a word does."""
    for boundary in (_SENTENCE_START, _WORD_START):
        starts = [m.end() for m in boundary.finditer(text, piece_start, piece_end) if m.end() < piece_end]
        # Tails shorten as the start moves right: find the longest one within budget, counting few of them.
        longest = _longest_fitting(1, len(starts), lambda k: count(text[starts[-k] : piece_end]) <= budget)
        if longest is not None:
            return starts[-longest]
    return piece_end


# ---- splitting a huge message by token offsets ----------------------------------------------------


def _token_pieces(message: CollapsedMessage, limits: _Limits) -> Iterator[str]:
    """Parts of a huge message: about `max_tokens` each by cl100k offsets, ending at the strongest boundary
    in their last stretch, each later part repeating the end of the one before (as `_pack_atoms` does)."""
    text, label = message.text, f"{message.speaker}: "
    budget = limits.max_tokens - count_tokens(label) - 1  # the 1: the seam of label and part may count one more
    overlap = int(limits.max_tokens * _TEXT_OVERLAP_FRACTION)
    block_chars = max(_HUGE_BLOCK_CHARS, 2 * budget * _MAX_TOKEN_BYTES)  # so a block holds more than one part
    sizer = _PartSizer(limits, label, budget)
    start = 0
    while start < len(text):
        block = _TokenBlock(text[start : start + block_chars])
        final = start + block_chars >= len(text)
        first, count = 0, len(block.ends)
        while first < count:
            stop = min(first + sizer.first_try(), count)
            if stop == count and not final:
                break  # the rest is read again with the next block
            if stop < count:
                stop = block.best_cut(first, stop)
            piece = block.piece(first, stop)
            while (smaller := sizer.shrink(block, first, stop, piece)) is not None:
                if smaller < 1:
                    raise ValueError(f"max_tokens is too small to hold one token after the speaker label {label!r}")
                stop = block.best_cut(first, first + smaller)
                piece = block.piece(first, stop)
            if piece:
                yield piece
            first = count if stop == count else block.overlap_start(first, stop, overlap)
        start += len(block.data[: block.offset(first)].decode("utf-8"))


class _PartSizer:
    """How many cl100k tokens a part of a huge message gets, so that most parts are counted only once.

    A part cut at token offsets holds as many cl100k tokens as it spans (the budget keeps a token of slack
    for the seam after the label); only a part whose end moved into a following token, inside a multi-byte
    character, is counted again. The embedder's window counts in its own tokens: each part starts at the
    length that the window tokens per cl100k token of the part before predicts (a function of the text up
    to it, so parts stay stable), and a part that still does not fit shrinks by its own ratio.
    """

    def __init__(self, limits: _Limits, label: str, budget: int) -> None:
        self.limits, self.label, self.budget = limits, label, budget
        window = limits.window
        self.label_window_tokens = window.count_tokens(label) if window else 0
        self.room = window.max_tokens - self.label_window_tokens if window else 0  # window tokens left for a part
        self.ratio: float | None = None  # window tokens per cl100k token of the last part that fit

    def first_try(self) -> int:
        if self.limits.window is None or self.ratio is None:
            return self.budget
        return max(1, min(self.budget, math.floor(self.room / self.ratio)))

    def shrink(self, block: _TokenBlock, first: int, stop: int, piece: str) -> int | None:
        """None if the part fits; else how many tokens to try next (fewer than it has)."""
        tokens = stop - first
        limits = self.limits
        if block.ends_inside_character(stop) and limits.token_counter(self.label + piece) > limits.max_tokens:
            return tokens - 1
        if limits.window is None:
            return None
        own_tokens = limits.window.count_tokens(self.label + piece) - self.label_window_tokens
        if own_tokens <= self.room:
            self.ratio = max(own_tokens, 1) / max(tokens, 1)
            return None
        return min(tokens - 1, math.floor(tokens * self.room / own_tokens))


class _TokenBlock:
    """Up to `_HUGE_BLOCK_CHARS` of a huge message as UTF-8 with the end of each cl100k token (one encoding)."""

    def __init__(self, text: str) -> None:
        self.data = text.encode("utf-8")
        self.ends = token_ends(self.data)

    def offset(self, index: int) -> int:
        """Where token `index` starts, moved forward to a character start (a token may end inside one)."""
        position = self.ends[index - 1] if index else 0
        while position < len(self.data) and 0x80 <= self.data[position] < 0xC0:
            position += 1
        return position

    def ends_inside_character(self, stop: int) -> bool:
        """Whether a part ending before token `stop` takes the rest of a character from the token after it."""
        return stop > 0 and self.offset(stop) != self.ends[stop - 1]

    def piece(self, first: int, stop: int) -> str:
        return self.data[self.offset(first) : self.offset(stop)].decode("utf-8").strip()

    def best_cut(self, first: int, stop: int) -> int:
        """The token to end before: the strongest boundary in the last 30 % of tokens first..stop, the latest."""
        lowest = max(first + 1, stop - (stop - first) * 3 // 10)
        stretch = self.data[max(0, self.offset(lowest) - 2) : self.offset(stop) + 1]
        strongest = _PARAGRAPH_CUT if b"\n\n" in stretch else _LINE_CUT if b"\n" in stretch else _SENTENCE_CUT
        best, best_strength = stop, -1
        for index in range(stop, lowest - 1, -1):
            strength = _cut_strength(self.data, self.offset(index))
            if strength > best_strength:
                best, best_strength = index, strength
                if strength >= strongest:
                    break  # no earlier candidate is stronger, and the latest of the strongest wins
        return best

    def overlap_start(self, first: int, stop: int, overlap: int) -> int:
        """Where the next part starts: the earliest word start among the last `overlap` tokens before `stop`."""
        starts = range(max(first + 1, stop - overlap), stop)
        return next((index for index in starts if _cut_strength(self.data, self.offset(index)) > 0), stop)


_PARAGRAPH_CUT, _LINE_CUT, _SENTENCE_CUT = 4, 3, 2


def _cut_strength(data: bytes, position: int) -> int:
    """How good a place `position` is to end a part: 4 paragraph, 3 line, 2 sentence, 1 word, 0 inside a word."""
    before, after = data[max(0, position - 2) : position], data[position : position + 1]
    if before == b"\n\n" or (before.endswith(b"\n") and after == b"\n"):
        return _PARAGRAPH_CUT
    if before.endswith(b"\n") or after == b"\n":
        return _LINE_CUT
    if before[:1] in (b".", b"!", b"?") and before.endswith((b" ", b"\t")):
        return _SENTENCE_CUT
    return 1 if before.endswith((b" ", b"\t")) or after in (b" ", b"\t") else 0


# ---- chunk records --------------------------------------------------------------------------------


def _unique(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


def _build_chunk(units: Sequence[_Unit], index: int, token_counter: Callable[[str], int]) -> Chunk:
    content = _render(units)
    messages = list({unit.message.message_id: unit.message for unit in units}.values())
    timestamps: list[datetime] = [m.timestamp for m in messages if m.timestamp is not None]
    tools = [tool for m in messages for tool in m.tools if tool.line and tool.line in content]
    return Chunk(
        session_id=messages[0].session_id,
        chunk_index=index,
        message_ids=tuple(m.message_id for m in messages),
        ts_start=min(timestamps, default=None),
        ts_end=max(timestamps, default=None),
        speakers=_unique(m.speaker for m in messages),
        roles=_unique(m.role for m in messages),
        content=content,
        token_count=token_counter(content),
        has_decision=has_decision(content),
        has_action=has_action(content, tools),
        continued=any(unit.partial for unit in units),
    )


def _apply_cap(cut: Sequence[Sequence[_Unit]], kept: Sequence[Chunk], dropped: dict[str, str]) -> list[str]:
    """Drop the messages found only in the `cut` chunks (the oldest, past the cap); the warning to report."""
    still_covered = {message_id for chunk in kept for message_id in chunk.message_ids}
    for units in cut:
        for unit in units:
            if unit.message.message_id not in still_covered:
                dropped[unit.message.message_id] = DROPPED_OVER_CAP
    total = len(cut) + len(kept)
    return [
        f"session {kept[0].session_id} has {total} chunks, more than the cap of {len(kept)} "
        f"(chunking.max_chunks): kept the most recent {len(kept)} (chunk_index {kept[0].chunk_index} to "
        f"{kept[-1].chunk_index}); the first {len(cut)} are not indexed"
    ]
