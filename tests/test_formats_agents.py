"""Agent formats told by path (Gemini CLI, Aider, ChatGPT/Claude.ai exports, Cline/Roo Code): parsers on
the fixtures in tests/fixtures/agents (see its PROVENANCE.md), discovery, property tests, and end to end."""

from __future__ import annotations

import json
import shutil
from pathlib import Path, PurePath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionmem_pipeline.config import detect_source_roots, load_settings
from sessionmem_pipeline.core.formats import REGISTRY, detect_format, inspect_file, parse_file
from sessionmem_pipeline.core.formats.source import JsonLine
from sessionmem_pipeline.core.models import KIND_INJECTED, ParseResult
from sessionmem_pipeline.stages.discover import discover

from test_formats_properties import PROPERTY_SETTINGS, assert_well_formed, json_values

AGENTS = Path(__file__).parent / "fixtures" / "agents"
GEMINI_OLD = next((AGENTS / "gemini" / "tmp").glob("*/chats/session-2025-*.json"))
GEMINI_NEW = AGENTS / "gemini/tmp/bookshelf/chats/session-2026-06-12T04-14-8a7b6c5d.jsonl"
AIDER = AGENTS / "aider/health-analyzer-poc/.aider.chat.history.md"
CLINE = AGENTS / "cline/saoudrizwan.claude-dev/tasks/1777073160794/api_conversation_history.json"
CHATGPT = AGENTS / "exports/chatgpt-2026-01/conversations.json"
CLAUDE_AI = AGENTS / "exports/claude-2026-02/conversations.json"


def parse(path: Path, root: Path = AGENTS) -> ParseResult:
    return parse_file(str(path), str(root), path.read_bytes(), final=True)


# ---- Gemini CLI ---------------------------------------------------------------------------------------------


def test_gemini_document_with_tool_calls_thoughts_and_events() -> None:
    session = parse(GEMINI_OLD, AGENTS / "gemini" / "tmp").sessions[0]

    assert session.session_id == "5f0c2a71-3d4e-4b8a-9c1f-2e6d7a8b9c01"
    assert session.project == GEMINI_OLD.parent.parent.name  # older CLIs: the hash folder is all there is
    assert [m.role for m in session.messages] == ["user", "assistant", "system", "user"]
    answer = session.messages[1]
    assert answer.message_id == "a1c2e3f4-5b6d-4e8f-9a0b-1c2d3e4f5a6b"
    assert answer.thinking.startswith("Locating the exporter: ")
    assert [(c.name, c.output) for c in answer.tool_calls] == [
        ("read_file", "COLUMNS = ['date', 'net', 'total']"),
        ("replace", "Successfully modified file: /home/dev/billing/export.py (1 replacements)."),
    ]
    assert session.messages[2].kind == "event" and session.model == "gemini-2.5-pro"


def test_gemini_jsonl_keeps_the_last_copy_of_a_message_in_its_first_place() -> None:
    session = parse(GEMINI_NEW, AGENTS / "gemini" / "tmp").sessions[0]

    assert session.project == "bookshelf"  # newer CLIs name the folder after the project
    assert [m.message_id for m in session.messages] == ["ctx-0001", "u-0002", "g-0003"]
    assert session.messages[0].kind == KIND_INJECTED
    answer = session.messages[2]
    assert "session['user_id']" in answer.text and answer.thinking.startswith("**Checking the session**")
    assert answer.tool_calls[0].output == "Output: 12: session.clear()"


def test_a_gemini_document_outside_its_folder_is_detected_by_content(tmp_path: Path) -> None:
    copy = tmp_path / "exported.json"
    shutil.copy(GEMINI_OLD, copy)

    report, result = inspect_file(str(copy), str(tmp_path), copy.read_bytes())

    assert report.valid and report.format == "gemini"
    assert result is not None and result.sessions[0].session_id == "5f0c2a71-3d4e-4b8a-9c1f-2e6d7a8b9c01"


# ---- Aider --------------------------------------------------------------------------------------------------


def test_aider_history_splits_at_each_start_and_reads_edits_and_commits() -> None:
    result = parse(AIDER, AGENTS / "aider")

    assert [s.session_id for s in result.sessions] == [
        "health-analyzer-poc/aider/2025-09-22T12:04:00",
        "health-analyzer-poc/aider/2025-09-22T14:55:00",
    ]
    first, second = result.sessions
    assert first.project == "health-analyzer-poc" and second.model == "openrouter/qwen/qwen3-coder"
    assert all(m.timestamp and m.timestamp.isoformat() == "2025-09-22T12:04:00+00:00" for m in first.messages)
    script = next(m for m in first.messages if m.text.startswith("Here's a shell script"))
    assert [c.name for c in script.tool_calls] == ["Edit", "Bash"]
    assert script.tool_calls[0].input == {"file_path": "metrics_check.sh"}
    assert ">>>>>>> REPLACE" in script.text  # a SEARCH/REPLACE block is the reply, not aider output
    typed = [m.text for m in first.messages if m.role == "user"]
    assert typed.count("Please write a .sh file that runs these commands. The token is $GITHUB_TOKEN, the owner is"
                       " $OWNER, the repo name is $REPO_NAME") == 1
    assert result.skipped["aider output"] > 0


def test_aider_ids_do_not_move_when_the_history_grows(tmp_path: Path) -> None:
    text = AIDER.read_text(encoding="utf-8")
    cut = text.index("# aider chat started at 2025-09-22 14:55:00")
    early = parse_file(str(tmp_path / "r/.aider.chat.history.md"), str(tmp_path), text[:cut].encode(), final=True)
    later = parse_file(str(tmp_path / "r/.aider.chat.history.md"), str(tmp_path), text.encode(), final=True)

    first_early, first_later = early.sessions[0], later.sessions[0]
    assert [(m.message_id, m.text) for m in first_early.messages] == [(m.message_id, m.text) for m in first_later.messages]


# ---- ChatGPT and Claude.ai exports --------------------------------------------------------------------------


def test_chatgpt_export_follows_the_current_branch_and_pairs_tool_replies() -> None:
    result = parse(CHATGPT, AGENTS / "exports")

    retry = result.sessions[0]
    assert retry.session_id == "6790a1b2-0c3d-800e-9f10-a1b2c3d4e5f6" and retry.format == "chatgpt"
    assert retry.title == "Retry policy for webhooks" and retry.project == "chatgpt"
    assert [m.message_id for m in retry.messages] == ["u-1", "a-new", "u-2", "a-2", "a-3"]  # not a-old, not hidden
    call = retry.messages[3].tool_calls[0]
    assert call.name == "python" and call.output == "[2, 4, 8, 16, 32, 64, 128, 256]"
    assert retry.messages[0].timestamp and retry.messages[0].timestamp.year == 2025


def test_claude_ai_export_reads_blocks_attachments_and_skips_empty_conversations() -> None:
    result = parse(CLAUDE_AI, AGENTS / "exports")

    assert [s.session_id for s in result.sessions] == ["2b7c9d1e-5f3a-4c8b-a1d2-e3f4a5b6c7d8"]
    question, answer = result.sessions[0].messages
    assert question.role == "user" and "[file: explain.txt]" in question.text
    assert answer.thinking == "A GIN index fits array containment."
    assert answer.tool_calls[0].output == "GIN indexes support @> on arrays."
    assert "USING gin (tags)" in answer.text and result.sessions[0].format == "claude_ai"


def test_a_newer_overlapping_export_yields_the_same_ids_for_shared_conversations(tmp_path: Path) -> None:
    older = json.loads(CHATGPT.read_bytes())
    changed = json.loads(json.dumps(older))
    changed[1]["mapping"]["a-9"]["message"]["content"]["parts"] = ["2.4 fixes the CSV importer crash."]
    newer = [changed[0], changed[1], {**older[1], "id": "new-conv", "conversation_id": "new-conv", "title": "New"}]
    root = tmp_path / "exports"

    def sessions(document: list) -> dict:
        path = root / "conversations.json"
        return {s.session_id: s for s in parse_file(str(path), str(root), json.dumps(document).encode()).sessions}

    before, after = sessions(older), sessions(newer)
    assert set(before) < set(after) and "new-conv" in after
    for session_id, session in before.items():
        assert [m.message_id for m in session.messages] == [m.message_id for m in after[session_id].messages]
    texts = {sid: [m.text for m in s.messages] for sid, s in after.items()}
    assert texts[older[0]["id"]] == [m.text for m in before[older[0]["id"]].messages]  # unchanged conversation
    assert texts[older[1]["id"]] != [m.text for m in before[older[1]["id"]].messages]  # the changed one differs


# ---- Cline and Roo Code -------------------------------------------------------------------------------------


def test_cline_task_reads_the_task_tools_and_results() -> None:
    result = parse(CLINE, AGENTS / "cline" / "saoudrizwan.claude-dev")
    session = result.sessions[0]

    assert session.session_id == "cline/1777073160794" and session.project == "Marine-Response-Repo"
    task = session.messages[0]
    assert task.role == "user" and task.text.startswith("The attached is a technical writeup")
    assert session.messages[1].kind == KIND_INJECTED  # the attached file and the task_progress reminder
    assert "environment_details" not in " ".join(m.text for m in session.messages)
    calls = [call for m in session.messages for call in m.tool_calls]
    assert calls[0].name == "use_subagents" and calls[0].output and calls[0].output.startswith("[subagents] Result:")
    assert all(m.timestamp is not None for m in session.messages)
    assert result.skipped["environment details"] >= 2


def test_roo_code_tasks_use_ui_messages_for_times_and_read_xml_tools(tmp_path: Path) -> None:
    task = tmp_path / "rooveterinaryinc.roo-cline" / "tasks" / "5c1d"
    task.mkdir(parents=True)
    history = [
        {"role": "user", "content": [{"type": "text", "text": "<task>\nRename the config loader\n</task>"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "<thinking>Find it first.</thinking>\n"
                                           "<read_file>\n<path>src/config.ts</path>\n</read_file>"}]},
        {"role": "user", "content": [{"type": "text", "text": "[read_file for 'src/config.ts'] Result:\nexport {}"}]},
        {"role": "assistant", "content": "<attempt_completion>\n<result>Renamed to loadSettings.</result>\n"
                                         "</attempt_completion>"},
    ]
    (task / "api_conversation_history.json").write_text(json.dumps(history))
    ui = [{"ts": 1760000000000, "type": "say", "say": "text"},
          {"ts": 1760000001000, "type": "say", "say": "api_req_started"},
          {"ts": 1760000009000, "type": "say", "say": "api_req_started"}]
    (task / "ui_messages.json").write_text(json.dumps(ui))

    session = parse(task / "api_conversation_history.json", tmp_path).sessions[0]

    assert session.session_id == "roo/5c1d" and session.format == "roo_code"
    assert [m.text for m in session.messages] == ["Rename the config loader", "", "Renamed to loadSettings."]
    read = session.messages[1].tool_calls[0]
    assert (read.name, read.input, read.output) == ("read_file", {"path": "src/config.ts"}, "[read_file for "
                                                    "'src/config.ts'] Result:\nexport {}")
    assert session.messages[1].thinking == "Find it first."
    times = [m.timestamp.timestamp() for m in session.messages]  # type: ignore[union-attr]
    assert times == [1760000001.0, 1760000001.0, 1760000009.0]  # the n-th request's time


# ---- discovery, unsupported formats, init -------------------------------------------------------------------


def test_discovery_reads_only_registered_files_inside_editor_storage(tmp_path: Path) -> None:
    storage = tmp_path / "globalStorage" / "saoudrizwan.claude-dev"
    task = storage / "tasks" / "17"
    task.mkdir(parents=True)
    shutil.copy(CLINE, task / "api_conversation_history.json")
    (task / "ui_messages.json").write_text("[]")
    (task / "task_metadata.json").write_text("{}")
    (storage / "settings").mkdir()
    (storage / "settings" / "cline_mcp_settings.json").write_text('{"mcpServers": {}}')
    gemini = tmp_path / ".gemini" / "tmp" / "p" / "chats"
    gemini.mkdir(parents=True)
    shutil.copy(GEMINI_OLD, gemini / "session-1.json")
    (gemini.parent / "logs.json").write_text("[]")
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(AIDER, repo / ".aider.chat.history.md")
    (repo / "package.json").write_text("{}")  # outside every agent's storage: still a JSON candidate

    found = {Path(f.path).relative_to(tmp_path).as_posix() for f in discover([tmp_path, tmp_path / ".gemini"])}

    assert found == {
        "globalStorage/saoudrizwan.claude-dev/tasks/17/api_conversation_history.json",
        "repo/.aider.chat.history.md",
        "repo/package.json",
        ".gemini/tmp/p/chats/session-1.json",
    }


def test_a_recognised_unsupported_file_is_skipped_not_quarantined(tmp_path: Path) -> None:
    database = tmp_path / "opencode" / "opencode.db"
    database.parent.mkdir(parents=True)
    database.write_bytes(b"SQLite format 3\x00" + bytes(100))

    report, result = inspect_file(str(database), str(tmp_path), database.read_bytes())

    assert report.valid and report.quarantine_reason is None
    assert report.warnings == (f"{database}: skipped: OpenCode 1.2+ (SQLite) not supported",)
    assert result is not None and result.sessions == [] and detect_format(b"", str(database)) == "opencode_db"


def test_init_offers_every_default_location_that_exists(tmp_path: Path) -> None:
    for folder in (".gemini/tmp", ".config/Code/User/globalStorage/saoudrizwan.claude-dev",
                   ".config/Code/User/workspaceStorage", ".local/share/opencode/storage",
                   "Library/Application Support/Cursor/User/globalStorage",
                   "Library/Application Support/Cursor/User/globalStorage/rooveterinaryinc.roo-cline"):
        (tmp_path / folder).mkdir(parents=True)

    roots = [path.relative_to(tmp_path).as_posix() for path in detect_source_roots(tmp_path)]

    assert roots == [".config/Code/User/globalStorage/saoudrizwan.claude-dev", ".config/Code/User/workspaceStorage",
                     ".gemini/tmp", ".local/share/opencode/storage",
                     "Library/Application Support/Cursor/User/globalStorage"]  # the Roo folder is inside Cursor's


# ---- properties: no crash on mutated input ------------------------------------------------------------------

DOCUMENT_FIXTURES = {"gemini": GEMINI_OLD, "chat_export": CHATGPT, "claude": CLAUDE_AI, "cline": CLINE}


def mutate(value: object, data: st.DataObject, depth: int = 0) -> object:
    """The document with some values swapped for any JSON value, some list items dropped."""
    if isinstance(value, dict) and value:
        if data.draw(st.integers(0, 4)) == 0:
            key = data.draw(st.sampled_from(sorted(value)))
            return {**value, key: data.draw(json_values)}
        return {key: mutate(item, data, depth + 1) if depth < 6 else item for key, item in value.items()}
    if isinstance(value, list) and value:
        kept = [item for item in value if data.draw(st.integers(0, 5))]
        return [mutate(item, data, depth + 1) if depth < 6 else item for item in kept]
    return value


@PROPERTY_SETTINGS
@given(name=st.sampled_from(sorted(DOCUMENT_FIXTURES)), data=st.data())
def test_document_formats_never_crash_on_mutated_documents(name: str, data: st.DataObject) -> None:
    path = DOCUMENT_FIXTURES[name]
    document = mutate(json.loads(path.read_bytes()), data)
    report, result = inspect_file(str(path), str(AGENTS), json.dumps(document).encode())
    assert report.valid == (result is not None)
    if result is not None:
        assert_well_formed(result, [])


@PROPERTY_SETTINGS
@given(data=st.data())
def test_text_formats_never_crash_on_mutated_lines(data: st.DataObject) -> None:
    for path in (AIDER, GEMINI_NEW):
        lines = path.read_bytes().splitlines()
        chosen = data.draw(st.lists(st.sampled_from(lines), max_size=40))
        cut = data.draw(st.integers(0, 30))
        blob = b"\n".join(chosen)[:-cut or None] + data.draw(st.binary(max_size=8))
        report, result = inspect_file(str(path), str(AGENTS), blob)
        assert report.valid == (result is not None)
        if result is not None:
            assert_well_formed(result, [JsonLine(n, None) for n in range(1, blob.count(b"\n") + 2)])


def test_every_registered_format_has_a_label_and_patterns() -> None:
    assert all(f.label and f.patterns for f in REGISTRY.formats)


def _format_by_match(path: PurePath) -> str | None:
    return next((f.name for f in REGISTRY.formats if any(path.match(p) for p in f.patterns)), None)


def test_the_format_of_a_path_is_the_first_whose_pattern_matches_whatever_was_asked_before() -> None:
    """Discovery asks per file and the registry answers from rules it keeps per folder: the answer must be
    PurePath.match's for every registered pattern, also for a folder asked about before with other names."""
    names = {"x.jsonl", "x.json", "x.md", "x.db", "x.sqlite", ".x.json", "memories.md"}
    folders = {("home", "u"), ("home", "u", "projects", "p")}
    for f in REGISTRY.formats:
        for pattern in f.patterns:
            parts = PurePath(pattern).parts
            names.add(parts[-1].replace("*", "a"))
            folder = tuple(part.replace("*", "b") for part in parts[:-1])
            folders.update({("home", "u", *folder), ("home", *folder[1:])})  # the whole pattern, and cut short
            folders.update(("home", "u", *parts[:-1][:k], territory) for territory in f.territory for k in (0, 1))
    paths = [PurePath("/", *folder, name) for folder in sorted(folders) for name in sorted(names)]
    for path in paths + paths[::-1]:
        chosen = REGISTRY.format_for_path(path)
        assert (chosen.name if chosen else None) == _format_by_match(path), path
        in_territory = any(t in path.parts[:-1] for f in REGISTRY.formats for t in f.territory)
        plain_json = path.name.endswith((".jsonl", ".json")) and not path.name.startswith(".") and not in_territory
        assert REGISTRY.wants(path) == (chosen is not None or plain_json), path


# ---- end to end ---------------------------------------------------------------------------------------------

KNOWN_MESSAGES = [  # (fixture, where it goes under the source root, a query, a session id the hit must be in)
    (GEMINI_OLD, "gemini/tmp/h/chats/session-a.json", "invoice export VAT column",
     "5f0c2a71-3d4e-4b8a-9c1f-2e6d7a8b9c01"),
    (AIDER, "health-analyzer-poc/.aider.chat.history.md", "GraphQL curl requests contributors",
     "health-analyzer-poc/aider/2025-09-22T12:04:00"),
    (CHATGPT, "exports/conversations.json", "exponential backoff jitter webhook", "6790a1b2-0c3d-800e-9f10-a1b2c3d4e5f6"),
    (CLINE, "globalStorage/saoudrizwan.claude-dev/tasks/1777073160794/api_conversation_history.json",
     "marine mammal technical writeup", "cline/1777073160794"),
]


def assert_indexed_searchable_and_recapped(
    tmp_path: Path, root: Path, formats: set[str], known: list[tuple[str, str]]
) -> None:
    """Index the source root; each (query, session id) is found by search and has a recap."""
    from sessionmem_pipeline.client import SessionMemory
    from sessionmem_pipeline.stages.run import index_sources

    flags = {"warehouse": str(tmp_path / "w.duckdb"), "sources": [str(root)], "summaries.enabled": False}
    settings = load_settings(flags=flags, env={}, cwd=tmp_path, home=tmp_path)

    report = index_sources(settings)

    assert formats <= set(report.formats) and not report.quarantined
    memory = SessionMemory(settings=settings)
    for query, session_id in known:
        assert session_id in {hit.session_id for hit in memory.search(query, limit=5)}, query
        assert memory.recap(session_id=session_id).lines, session_id


@pytest.mark.slow
def test_each_format_is_indexed_searchable_and_recapped(tmp_path: Path) -> None:
    root = tmp_path / "sources"
    for fixture, target, _, _ in KNOWN_MESSAGES:
        (root / target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(fixture, root / target)

    known = [(query, session_id) for _, _, query, session_id in KNOWN_MESSAGES]
    assert_indexed_searchable_and_recapped(tmp_path, root, {"gemini", "aider", "chat_export", "cline"}, known)


@pytest.mark.slow
def test_an_export_changed_in_one_conversation_rebuilds_only_it_and_a_newer_export_adds_no_duplicates(
    tmp_path: Path,
) -> None:
    import os

    from sessionmem_pipeline.stages.run import index_sources
    from sessionmem_pipeline.warehouse import connect

    older = json.loads(CHATGPT.read_bytes())
    kept, edited = older[0]["id"], older[1]["id"]
    changed = json.loads(json.dumps(older))
    changed[1]["mapping"]["a-9"]["message"]["content"]["parts"] = ["2.4 fixes the CSV importer crash."]
    root = tmp_path / "sources"
    old_export, new_export = root / "chatgpt-2026-01/conversations.json", root / "chatgpt-2026-03/conversations.json"
    old_export.parent.mkdir(parents=True)
    old_export.write_text(json.dumps(older))
    flags = {"warehouse": str(tmp_path / "w.duckdb"), "sources": [str(root)], "summaries.enabled": False}
    settings = load_settings(flags=flags, env={}, cwd=tmp_path, home=tmp_path)

    def rows(sql: str) -> list[tuple]:
        conn = connect(tmp_path / "w.duckdb", read_only=True)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    def built() -> dict[tuple[str, str], object]:
        return {(stage, sid): at for stage, sid, at in rows("SELECT stage, session_id, built_at FROM stage_state")}

    index_sources(settings)
    first = built()
    old_export.write_text(json.dumps(changed))

    report = index_sources(settings)

    again = built()
    assert report.decisions == {"rewritten": 1} and report.sessions_changed == 1
    for stage in ("ingest", "collapse", "chunk", "embed"):
        assert again[(stage, kept)] == first[(stage, kept)], stage  # the unchanged conversation is left alone
        assert again[(stage, edited)] != first[(stage, edited)], stage
    assert report.chunks == rows(f"SELECT count(*) FROM chunks WHERE session_id = '{edited}'")[0][0]
    assert 0 < report.embedded <= report.chunks

    new_export.parent.mkdir(parents=True)
    new_export.write_text(json.dumps([changed[0], changed[1], {**older[1], "id": "new-conv", "title": "New"}]))
    report = index_sources(settings)

    assert report.sessions_changed == 1  # only the new conversation: the shared ones are stored as they are
    owners = dict(rows("SELECT session_id, source_path FROM sessions"))
    assert owners == {kept: str(new_export), edited: str(new_export), "new-conv": str(new_export)}
    assert rows("SELECT count(*) - count(DISTINCT (session_id, message_id)) FROM messages") == [(0,)]

    old_export.write_text(json.dumps(older))  # the older export touched again: the newer one's version stays
    os.utime(old_export, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    index_sources(settings)
    texts = [t for (t,) in rows(f"SELECT text FROM messages WHERE session_id = '{edited}'")]
    assert "2.4 fixes the CSV importer crash." in texts

    old_export.unlink()
    index_sources(settings)
    assert rows("SELECT count(*) FROM sessions WHERE source_missing") == [(0,)]
    assert rows(f"SELECT status FROM source_files WHERE path = '{old_export}'") == [("missing",)]
