"""Property tests: every parser survives truncated, reordered, dropped and type-swapped lines of real transcripts.

It never raises; it yields well-formed messages (file order, unique ids, known roles) plus a warning for every line
it could not read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionmem_pipeline.core.formats import (
    UnknownFormatError,
    claude_code,
    codex,
    detect_format,
    generic,
    inspect_file,
    openai_chat,
    parse_file,
)
from sessionmem_pipeline.core.formats.source import FileContext, JsonLine, split_jsonl
from sessionmem_pipeline.core.models import KINDS, ROLES, ParseResult

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
PARSERS: dict[str, Callable[[FileContext, Sequence[JsonLine]], ParseResult]] = {
    "generic": generic.parse,
    "claude_code": claude_code.parse,
    "codex": codex.parse,
    "openai_chat": openai_chat.parse_lines,
}
CORPUS: dict[str, list[bytes]] = {  # every JSONL fixture line, by format (fixture folders are named after formats)
    name: [line for path in sorted((FIXTURES / name).rglob("*.jsonl")) for line in path.read_bytes().splitlines()]
    for name in PARSERS
}
PROPERTY_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**12) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)


def swap_type(line: bytes, choice: int, value: Any) -> bytes:
    """Replace one field (top level, or inside message/payload/content) with a value of any JSON type."""
    try:
        obj = json.loads(line)
    except ValueError:
        return line
    if not isinstance(obj, dict) or not obj:
        return line
    target = obj
    for nested in ("message", "payload"):
        if isinstance(obj.get(nested), dict) and obj[nested] and choice % 2:
            target = obj[nested]
    keys = sorted(target)
    target[keys[choice % len(keys)]] = value
    return json.dumps(obj).encode()


@st.composite
def mangled(draw: st.DrawFn, lines: list[bytes]) -> bytes:
    """Real lines, reordered, dropped, truncated mid-line and with fields of the wrong type."""
    chosen = draw(st.lists(st.sampled_from(lines), min_size=1, max_size=25))
    chosen = draw(st.permutations(chosen)) if draw(st.booleans()) else chosen
    for _ in range(draw(st.integers(0, 4))):
        index = draw(st.integers(0, len(chosen) - 1))
        operation = draw(st.sampled_from(["truncate", "swap", "swap"]))
        if operation == "truncate":
            chosen[index] = chosen[index][: draw(st.integers(0, max(0, len(chosen[index]) - 1)))]
        else:
            chosen[index] = swap_type(chosen[index], draw(st.integers(0, 50)), draw(json_values))
    return b"\n".join(chosen) + (b"\n" if draw(st.booleans()) else b"")


def assert_well_formed(result: ParseResult, lines: list[JsonLine]) -> None:
    for session in result.sessions:
        assert session.session_id and session.messages
        assert [m.seq for m in session.messages] == list(range(len(session.messages)))
        ids = [m.message_id for m in session.messages]
        assert len(ids) == len(set(ids))
        assert all(m.role in ROLES and m.kind in KINDS and m.session_id == session.session_id for m in session.messages)
        lines_in_order = [m.source_line for m in session.messages]
        assert lines_in_order == sorted(lines_in_order)
    numbers = {line.number for line in lines}
    assert all(warning.line in numbers or warning.line == 0 for warning in result.warnings)
    assert all(isinstance(count, int) and count > 0 for count in result.skipped.values())


def check_parser(format_name: str, data: bytes, final: bool) -> None:
    lines, _, split_warnings = split_jsonl(data, "/r/p/s.jsonl", final)
    result = PARSERS[format_name](FileContext("/r/p/s.jsonl", "/r"), lines)
    assert_well_formed(result, lines)
    unreadable = {line.number for line in lines if line.data is None}
    assert unreadable == {warning.line for warning in split_warnings}  # every unreadable line is a counted warning


@PROPERTY_SETTINGS
@given(data=mangled(CORPUS["claude_code"]), final=st.booleans())
def test_claude_code_parser_never_crashes(data: bytes, final: bool) -> None:
    check_parser("claude_code", data, final)


@PROPERTY_SETTINGS
@given(data=mangled(CORPUS["codex"]), final=st.booleans())
def test_codex_parser_never_crashes(data: bytes, final: bool) -> None:
    check_parser("codex", data, final)


@PROPERTY_SETTINGS
@given(data=mangled(CORPUS["generic"]), final=st.booleans())
def test_generic_parser_never_crashes(data: bytes, final: bool) -> None:
    check_parser("generic", data, final)


@PROPERTY_SETTINGS
@given(data=mangled(CORPUS["openai_chat"]), final=st.booleans())
def test_openai_chat_parser_never_crashes(data: bytes, final: bool) -> None:
    check_parser("openai_chat", data, final)


@PROPERTY_SETTINGS
@given(format_name=st.sampled_from(sorted(PARSERS)), data=st.data())
def test_each_parser_survives_the_other_formats_lines(format_name: str, data: st.DataObject) -> None:
    other = data.draw(st.sampled_from(sorted(set(PARSERS) - {format_name})))
    check_parser(format_name, data.draw(mangled(CORPUS[other])), True)


@PROPERTY_SETTINGS
@given(messages=st.lists(json_values, max_size=8), wrapped=st.booleans())
def test_chat_documents_of_any_shape(messages: list[Any], wrapped: bool) -> None:
    document = {"messages": messages, "session_id": "s"} if wrapped else messages
    result = openai_chat.parse_document(FileContext("/r/c.json", "/r"), document)
    assert_well_formed(result, [])


@PROPERTY_SETTINGS
@given(
    data=st.one_of(st.binary(max_size=300), mangled([line for lines in CORPUS.values() for line in lines])),
    final=st.booleans(),
)
def test_validation_never_raises_and_entry_points_raise_only_unknown_format(data: bytes, final: bool) -> None:
    report, result = inspect_file("/r/p/s.jsonl", "/r", data, final=final)

    assert report.valid == (report.quarantine_reason is None) == (not report.errors)
    assert (result is not None) == report.valid
    assert 0 <= report.bad_lines <= max(report.lines, 0)
    try:
        detect_format(data, "/r/p/s.jsonl")
        parse_file("/r/p/s.jsonl", "/r", data, final=final)
    except UnknownFormatError:
        pass
