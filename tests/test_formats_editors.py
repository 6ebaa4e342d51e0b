"""Agent histories kept in editor or tool storage (OpenCode, GitHub Copilot Chat, Cursor): parsers on the
fixtures in tests/fixtures/agents (schema-built, see its PROVENANCE.md), discovery, property tests, end to end.

Cursor's `state.vscdb` is built here from the documented schema (no real database could be found publicly)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionmem_pipeline.core.formats import inspect_file, parse_file
from sessionmem_pipeline.core.formats.registry import Related
from sessionmem_pipeline.core.formats.source import JsonLine
from sessionmem_pipeline.core.models import KIND_INJECTED, ParseResult
from sessionmem_pipeline.stages.discover import discover

from test_formats_agents import AGENTS, assert_indexed_searchable_and_recapped, mutate
from test_formats_properties import PROPERTY_SETTINGS, assert_well_formed

OPENCODE = AGENTS / "opencode" / "storage"
OPENCODE_SESSION_ID = "ses_5d1e8a40fffeQ2pK7sLmN3vR8t"
OPENCODE_SESSION = next((OPENCODE / "session").glob(f"*/{OPENCODE_SESSION_ID}.json"))
COPILOT_WORKSPACE = AGENTS / "copilot" / "workspaceStorage" / "7c2e4f1a9b3d5e6f8a0b1c2d3e4f5a6b"
COPILOT = COPILOT_WORKSPACE / "chatSessions" / "3f9d2b7e-4c1a-4e8b-9d6f-2a5c7e1b3d90.json"
COPILOT_LOG = COPILOT_WORKSPACE / "chatSessions" / "8b1d3f5a-7c9e-4a2b-8d4f-6a8c0e2b4d60.jsonl"

COMPOSER = {  # Cursor 0.4x+: the composer lists its bubbles, each stored under its own key
    "_v": 3, "composerId": "c0ffee00-1111-4222-8333-944455556666", "name": "Flaky websocket reconnect",
    "createdAt": 1761900000000,
    "fullConversationHeadersOnly": [{"bubbleId": "b-1", "type": 1}, {"bubbleId": "b-2", "type": 2},
                                    {"bubbleId": "b-missing", "type": 2}],
}
BUBBLES = {
    "b-1": {"_v": 2, "type": 1, "bubbleId": "b-1", "text": "The websocket client reconnects in a tight loop when the "
            "server restarts; add exponential backoff.", "createdAt": "2025-10-31T08:40:05.000Z"},
    "b-2": {"_v": 2, "type": 2, "bubbleId": "b-2", "text": "Reconnects now wait 1 s, 2 s, 4 s up to 30 s with jitter.",
            "thinking": {"text": "The retry timer is reset on every close event."},
            "timingInfo": {"clientStartTime": 1761900010000},
            "toolFormerData": {"name": "edit_file", "toolCallId": "toolu_01Wx", "status": "completed",
                               "rawArgs": '{"target_file": "src/ws.ts", "instructions": "add backoff"}',
                               "result": '{"diff": "+ const delay = Math.min(30000, 1000 * 2 ** attempt)"}'},
            "modelInfo": {"modelName": "claude-4-sonnet"}},
}
OLD_COMPOSER = {  # older composers keep the conversation inline
    "composerId": "0ld-c0mp", "name": "Rename env vars", "createdAt": 1730000000000,
    "conversation": [{"type": 1, "bubbleId": "o-1", "text": "", "richText": json.dumps(
                         {"root": {"children": [{"children": [{"text": "Rename DB_URL to DATABASE_URL everywhere"}]}]}})},
                     {"type": 2, "bubbleId": "o-2", "text": "Renamed in 4 files."}],
}
CHAT_TABS = {"tabs": [{"tabId": "tab-7", "chatTitle": "Regex for ISO dates", "lastSendTime": 1720000000000,
                       "bubbles": [{"id": "q", "type": "user", "text": "A regex for ISO 8601 dates?"},
                                   {"id": "a", "type": "ai", "text": r"Use ^\d{4}-\d{2}-\d{2}$ for the date part."},
                                   {"id": "x", "type": "system"}]}]}
CHAT_KEY = "workbench.panel.aichat.view.aichatview.persistentData"


def build_cursor_db(path: Path, composer: dict = COMPOSER, bubbles: dict = BUBBLES, chats: object = CHAT_TABS) -> Path:
    """A `state.vscdb` with Cursor's two key-value tables, in WAL mode as Cursor leaves it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = wal")
    for table in ("ItemTable", "cursorDiskKV"):
        conn.execute(f"CREATE TABLE {table} (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB)")
    rows = [(f"composerData:{composer['composerId']}", json.dumps(composer)),
            (f"composerData:{OLD_COMPOSER['composerId']}", json.dumps(OLD_COMPOSER).encode()),  # a BLOB value
            ("composerData:broken", "{not json")]
    rows += [(f"bubbleId:{composer['composerId']}:{key}", json.dumps(value)) for key, value in bubbles.items()]
    conn.executemany("INSERT INTO cursorDiskKV VALUES (?, ?)", rows)
    conn.execute("INSERT INTO ItemTable VALUES (?, ?)", [CHAT_KEY, json.dumps(chats)])
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def parse(path: Path, root: Path = AGENTS) -> ParseResult:
    return parse_file(str(path), str(root), path.read_bytes(), final=True)


# ---- OpenCode -----------------------------------------------------------------------------------------------


def test_opencode_session_reads_its_messages_and_parts_from_the_storage_folders() -> None:
    result = parse(OPENCODE_SESSION, OPENCODE)
    session = result.sessions[0]

    assert session.session_id == OPENCODE_SESSION_ID and session.project == "ledger-sync"
    assert session.title == "Fix duplicate rows in the nightly ledger sync" and session.model == "claude-sonnet-4-5"
    assert [(m.role, m.kind) for m in session.messages] == [
        ("user", "message"), ("user", KIND_INJECTED), ("assistant", "message"), ("user", "message"),
        ("assistant", "message")]
    asked = session.messages[0]
    assert asked.message_id == "msg_a2e175bf0001Xc9Dq1LkPz7Tb2" and asked.text.endswith("[file: upsert.py]")
    fix = session.messages[2]
    assert fix.thinking.startswith("The insert has no conflict target")
    assert [c.name for c in fix.tool_calls] == ["grep", "edit"] and "Line 14" in (fix.tool_calls[0].output or "")
    failed = session.messages[4].tool_calls[0]
    assert failed.is_error and "respx" in (failed.output or "") and failed.input["command"].startswith("pytest")
    assert result.skipped == {"step-finish part": 1, "step-start part": 1}


def test_opencode_discovery_reads_session_files_only(tmp_path: Path) -> None:
    storage = tmp_path / "opencode" / "storage"
    shutil.copytree(OPENCODE, storage)

    found = {Path(f.path).relative_to(storage).as_posix() for f in discover([storage])}

    assert found == {OPENCODE_SESSION.relative_to(OPENCODE).as_posix()}  # not message/, part/ or project/ JSON


def test_an_opencode_session_without_message_files_yet_is_not_an_error(tmp_path: Path) -> None:
    session = tmp_path / "storage" / "session" / "global" / "ses_new.json"
    session.parent.mkdir(parents=True)
    session.write_text(json.dumps({"id": "ses_new", "directory": "/home/dev/app", "title": "New session"}))

    report, result = inspect_file(str(session), str(tmp_path), session.read_bytes())

    assert report.valid and result is not None and result.sessions == []


# ---- GitHub Copilot Chat ------------------------------------------------------------------------------------


def test_copilot_session_reads_turns_tool_calls_and_the_workspace_folder() -> None:
    session = parse(COPILOT, COPILOT_WORKSPACE.parent).sessions[0]

    assert session.session_id == "3f9d2b7e-4c1a-4e8b-9d6f-2a5c7e1b3d90" and session.project == "invoice-api"
    assert session.title == "Invoice total rounding" and session.model == "copilot/gpt-4.1"
    assert [m.role for m in session.messages] == ["user", "assistant", "user", "assistant"]
    question, answer = session.messages[:2]
    assert question.message_id.startswith("request_") and question.text.endswith("[file: totals.ts]")
    assert answer.message_id.startswith("response_") and answer.text.startswith("The total in `totals.ts` adds")
    assert answer.thinking == "Totals are summed as floats and rounded once at the end."
    read = answer.tool_calls[0]
    assert read.name == "copilot_readFile" and read.input["endLine"] == 60  # the arguments the model sent
    assert read.output and read.output.startswith("export function invoiceTotal")
    assert session.messages[3].tool_calls[0].input == {"command": "npm test -- totals"}
    assert question.timestamp and question.timestamp.isoformat() == "2025-10-15T11:40:00+00:00"


def test_copilot_jsonl_log_is_replayed_to_the_final_state() -> None:
    session = parse(COPILOT_LOG, COPILOT_WORKSPACE.parent).sessions[0]
    document = parse(COPILOT, COPILOT_WORKSPACE.parent).sessions[0]

    assert session.session_id == "8b1d3f5a-7c9e-4a2b-8d4f-6a8c0e2b4d60" and session.title == "Invoice rounding, continued"
    assert [(m.message_id, m.text) for m in session.messages] == [(m.message_id, m.text) for m in document.messages]


def test_discovery_in_workspace_storage_reads_chat_sessions_and_cursor_databases_only(tmp_path: Path) -> None:
    storage = tmp_path / "Cursor" / "User" / "workspaceStorage"
    shutil.copytree(COPILOT_WORKSPACE, storage / "7c2e")
    build_cursor_db(storage / "7c2e" / "state.vscdb")
    (storage / "7c2e" / "chatEditingSessions" / "s").mkdir(parents=True)
    (storage / "7c2e" / "chatEditingSessions" / "s" / "state.json").write_text("{}")

    found = {Path(f.path).relative_to(storage).as_posix() for f in discover([tmp_path])}

    assert found == {"7c2e/chatSessions/" + COPILOT.name, "7c2e/chatSessions/" + COPILOT_LOG.name, "7c2e/state.vscdb"}


# ---- Cursor -------------------------------------------------------------------------------------------------


def test_cursor_reads_each_composer_and_chat_tab_as_a_session(tmp_path: Path) -> None:
    database = build_cursor_db(tmp_path / "Cursor" / "User" / "workspaceStorage" / "9a8b" / "state.vscdb")
    (database.parent / "workspace.json").write_text(json.dumps({"folder": "file:///home/dev/realtime-feed"}))

    result = parse(database, tmp_path)

    sessions = {s.session_id: s for s in result.sessions}
    assert set(sessions) == {"cursor/c0ffee00-1111-4222-8333-944455556666", "cursor/0ld-c0mp", "cursor/chat/tab-7"}
    composer = sessions["cursor/c0ffee00-1111-4222-8333-944455556666"]
    assert composer.project == "realtime-feed" and composer.title == "Flaky websocket reconnect"
    asked, answer = composer.messages
    assert asked.text.startswith("The websocket client reconnects") and asked.timestamp.minute == 40  # type: ignore[union-attr]
    assert answer.thinking == "The retry timer is reset on every close event." and composer.model == "claude-4-sonnet"
    edit = answer.tool_calls[0]
    assert (edit.name, edit.input["target_file"], edit.call_id) == ("edit_file", "src/ws.ts", "toolu_01Wx")
    assert "Math.min(30000" in (edit.output or "")
    assert sessions["cursor/0ld-c0mp"].messages[0].text == "Rename DB_URL to DATABASE_URL everywhere"  # from richText
    assert [m.role for m in sessions["cursor/chat/tab-7"].messages] == ["user", "assistant"]
    assert result.skipped == {"bubble not stored": 1, "unknown bubble type": 1}
    assert [w.reason for w in result.warnings] == ["composerData:broken: not JSON; skipped"]


def test_cursor_database_is_read_from_its_bytes_without_touching_the_file(tmp_path: Path) -> None:
    database = build_cursor_db(tmp_path / "Cursor" / "User" / "globalStorage" / "state.vscdb")
    reader = sqlite3.connect(database)  # Cursor running: the database is open elsewhere
    reader.execute("BEGIN IMMEDIATE")  # ... and holds a write lock
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in database.parent.iterdir()}

    report, result = inspect_file(str(database), str(tmp_path), database.read_bytes())

    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in database.parent.iterdir()}
    reader.rollback()
    reader.close()
    assert report.valid and result is not None and len(result.sessions) == 3
    assert result.sessions[0].project == "cursor"  # global storage: no workspace.json beside it
    assert after == before  # no file written, created or locked beside it


def test_a_file_at_a_cursor_path_that_is_not_sqlite_is_quarantined(tmp_path: Path) -> None:
    database = tmp_path / "Cursor" / "User" / "globalStorage" / "state.vscdb"
    database.parent.mkdir(parents=True)
    database.write_bytes(b"not a database at all")

    report, result = inspect_file(str(database), str(tmp_path), database.read_bytes())

    assert result is None and report.quarantine_reason == "not SQLite"


# ---- properties: no crash on mutated input ------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(data=st.data())
def test_copilot_never_crashes_on_mutated_sessions(data: st.DataObject) -> None:
    document = mutate(json.loads(COPILOT.read_bytes()), data)
    report, result = inspect_file(str(COPILOT), str(AGENTS), json.dumps(document).encode())
    assert report.valid == (result is not None)
    if result is not None:
        assert_well_formed(result, [])
    lines = COPILOT_LOG.read_bytes().splitlines()
    blob = b"\n".join(json.dumps(mutate(json.loads(line), data)).encode() for line in lines)
    blob = blob[: data.draw(st.integers(0, len(blob)))]
    report, result = inspect_file(str(COPILOT_LOG), str(AGENTS), blob)
    assert report.valid == (result is not None)
    if result is not None:
        assert_well_formed(result, [JsonLine(n, None) for n in range(1, blob.count(b"\n") + 2)])


@PROPERTY_SETTINGS
@given(data=st.data())
def test_opencode_never_crashes_on_mutated_storage_files(data: st.DataObject) -> None:
    files = {str(path): path.read_bytes() for path in OPENCODE.rglob("*.json")}
    mutated = {path: json.dumps(mutate(json.loads(content), data)).encode() for path, content in files.items()}
    broken = data.draw(st.sampled_from(sorted(mutated)))
    mutated[broken] = mutated[broken][: data.draw(st.integers(0, 20))]

    def listing(folder: str) -> list[str]:
        return sorted(Path(path).name for path in mutated if str(Path(path).parent) == folder)

    report, result = inspect_file(
        str(OPENCODE_SESSION), str(OPENCODE), mutated[str(OPENCODE_SESSION)], related=Related(mutated.get, listing)
    )
    assert report.valid == (result is not None)
    if result is not None:
        assert_well_formed(result, [])


@PROPERTY_SETTINGS
@given(data=st.data(), cut=st.integers(0, 8192), flips=st.lists(st.integers(0, 8191), max_size=8))
def test_cursor_never_crashes_on_mutated_values_or_damaged_bytes(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, cut: int, flips: list[int]
) -> None:
    folder = tmp_path_factory.mktemp("cursor")
    composer = mutate(COMPOSER, data)
    composer = {**composer, "composerId": COMPOSER["composerId"]} if isinstance(composer, dict) else COMPOSER
    database = build_cursor_db(folder / "globalStorage" / "state.vscdb", composer, mutate(BUBBLES, data),
                               mutate(CHAT_TABS, data))
    image = bytearray(database.read_bytes())
    for position in flips:
        image[100 + position % max(len(image) - 100, 1)] ^= 0xFF  # past the header: damaged pages
    for blob in (database.read_bytes(), bytes(image), bytes(image[: len(image) - cut])):
        report, result = inspect_file(str(database), str(folder), blob)
        assert report.valid == (result is not None)
        if result is not None:
            assert_well_formed(result, [])


# ---- end to end ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_opencode_copilot_and_cursor_are_indexed_searchable_and_recapped(tmp_path: Path) -> None:
    root = tmp_path / "sources"
    shutil.copytree(OPENCODE, root / "opencode" / "storage")
    shutil.copytree(COPILOT_WORKSPACE, root / "Code" / "User" / "workspaceStorage" / "7c2e")
    build_cursor_db(root / "Cursor" / "User" / "globalStorage" / "state.vscdb")

    assert_indexed_searchable_and_recapped(tmp_path, root, {"opencode", "copilot_chat", "cursor"}, [
        ("ledger sync duplicate rows upsert", OPENCODE_SESSION_ID),
        ("invoice total one cent short currencies", "3f9d2b7e-4c1a-4e8b-9d6f-2a5c7e1b3d90"),
        ("websocket reconnect exponential backoff", "cursor/c0ffee00-1111-4222-8333-944455556666"),
    ])


@pytest.mark.slow
def test_a_cursor_database_changed_in_one_composer_reindexes_only_that_session(tmp_path: Path) -> None:
    from sessionmem_pipeline.config import load_settings
    from sessionmem_pipeline.stages.run import index_sources
    from sessionmem_pipeline.warehouse import connect

    database = build_cursor_db(tmp_path / "sources" / "Cursor" / "User" / "globalStorage" / "state.vscdb")
    flags = {"warehouse": str(tmp_path / "w.duckdb"), "sources": [str(tmp_path / "sources")], "summaries.enabled": False}
    settings = load_settings(flags=flags, env={}, cwd=tmp_path, home=tmp_path)
    index_sources(settings)
    database.unlink()
    grown = {**BUBBLES, "b-3": {"type": 1, "bubbleId": "b-3", "text": "Also cap the attempts at ten."}}
    composer = {**COMPOSER, "fullConversationHeadersOnly": [*COMPOSER["fullConversationHeadersOnly"],
                                                            {"bubbleId": "b-3", "type": 1}]}
    build_cursor_db(database, composer, grown)

    report = index_sources(settings)

    assert report.sessions_changed == 1
    conn = connect(tmp_path / "w.duckdb", read_only=True)
    try:
        texts = [t for (t,) in conn.execute("SELECT text FROM messages WHERE session_id = ? ORDER BY seq",
                                            [f"cursor/{COMPOSER['composerId']}"]).fetchall()]
    finally:
        conn.close()
    assert texts[-1] == "Also cap the attempts at ten."
