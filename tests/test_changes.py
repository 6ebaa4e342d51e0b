"""decide(): what change detection says about one file, from its stat and what the warehouse remembers, and how
much of the file it reads to say it (spec 001 "Change Detection & Incremental Indexing")."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionmem_pipeline.core.changes import (
    DELETED,
    GROWN,
    NEW,
    REWRITTEN,
    UNCHANGED,
    FileStat,
    IndexedState,
    decide,
    stat_changed,
)

OLD = b'{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "hello"}\n'
PARTIAL = b'{"role": "user", "con'  # a line still being written: not consumed


class Reads:
    """A file's bytes as `read_prefix` sees them, remembering every read decide() asked for."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.calls: list[int] = []

    def __call__(self, count: int) -> bytes:
        self.calls.append(count)
        return self.data if count < 0 else self.data[:count]


def _indexed(data: bytes, consumed: int | None = None, mtime_ns: int = 1_000) -> IndexedState:
    consumed = len(data) if consumed is None else consumed
    return IndexedState(
        size=len(data),
        mtime_ns=mtime_ns,
        sha256=hashlib.sha256(data).hexdigest(),
        consumed_bytes=consumed,
        prefix_sha256=hashlib.sha256(data[:consumed]).hexdigest(),
    )


def _decide(now: bytes | None, previous: IndexedState | None, mtime_ns: int = 2_000) -> tuple[str, list[int]]:
    reads = Reads(now or b"")
    stat = FileStat(len(now), mtime_ns) if now is not None else None
    return decide(stat, previous, reads), reads.calls


def test_a_file_never_indexed_is_new_without_reading_it() -> None:
    assert _decide(OLD, None) == (NEW, [])


def test_an_indexed_file_that_is_gone_is_deleted() -> None:
    assert _decide(None, _indexed(OLD)) == (DELETED, [])


def test_a_file_neither_here_nor_remembered_needs_nothing() -> None:
    assert _decide(None, None) == (UNCHANGED, [])


def test_same_size_and_mtime_is_unchanged_without_reading() -> None:
    assert _decide(OLD, _indexed(OLD, mtime_ns=5), mtime_ns=5) == (UNCHANGED, [])


def test_a_touched_file_with_the_same_bytes_is_unchanged() -> None:
    decision, reads = _decide(OLD, _indexed(OLD), mtime_ns=9_999)
    assert decision == UNCHANGED
    assert reads == [-1]  # same size, new mtime: only the whole file's hash can tell


def test_same_size_with_other_bytes_is_rewritten() -> None:
    edited = OLD.replace(b"hello", b"HELLO")
    assert _decide(edited, _indexed(OLD))[0] == REWRITTEN


def test_appended_lines_with_the_old_bytes_intact_are_grown_reading_only_the_old_part() -> None:
    grown = OLD + b'{"role": "user", "content": "more"}\n'
    decision, reads = _decide(grown, _indexed(OLD))
    assert decision == GROWN
    assert reads == [len(OLD)]  # the indexed prefix, not the whole file


def test_a_completed_half_written_line_makes_the_file_grown() -> None:
    before = OLD + PARTIAL
    after = before + b'tent": "finished"}\n'
    assert _decide(after, _indexed(before, consumed=len(OLD)))[0] == GROWN


def test_appended_lines_after_an_edit_of_the_old_bytes_are_rewritten() -> None:
    grown = OLD.replace(b"hi", b"yo") + b'{"role": "user", "content": "more"}\n'
    assert _decide(grown, _indexed(OLD))[0] == REWRITTEN


def test_a_shorter_file_is_rewritten_without_reading() -> None:
    assert _decide(OLD[:10], _indexed(OLD)) == (REWRITTEN, [])


def test_growth_of_a_file_with_nothing_consumed_yet_is_rewritten() -> None:
    """Nothing was indexed from it (only a half-written first line), so there is no prefix to keep."""
    assert _decide(PARTIAL + b'tent": "x"}\n', _indexed(PARTIAL, consumed=0))[0] == REWRITTEN


@given(old=st.binary(min_size=1, max_size=200), appended=st.binary(min_size=1, max_size=200))
def test_any_append_to_intact_bytes_is_grown(old: bytes, appended: bytes) -> None:
    assert _decide(old + appended, _indexed(old))[0] == GROWN


@given(
    old=st.binary(min_size=2, max_size=200),
    appended=st.binary(max_size=200),
    flip=st.integers(min_value=0),
)
def test_any_change_inside_the_indexed_bytes_is_rewritten(old: bytes, appended: bytes, flip: int) -> None:
    position = flip % len(old)
    changed = old[:position] + bytes([old[position] ^ 0xFF]) + old[position + 1 :]
    assert _decide(changed + appended, _indexed(old))[0] == REWRITTEN


@pytest.mark.parametrize(
    ("current", "remembered", "changed"),
    [
        (FileStat(10, 5), (10, 5), False),
        (FileStat(11, 5), (10, 5), True),
        (FileStat(10, 6), (10, 5), True),
        (FileStat(10, 5), None, True),  # a new file
        (None, (10, 5), True),  # a deleted file
        (None, None, False),
    ],
)
def test_the_sensor_sees_any_stat_change(current: FileStat | None, remembered, changed: bool) -> None:
    assert stat_changed(current, remembered) is changed
