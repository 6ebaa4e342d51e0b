"""Issue 16's end-to-end promise: a secret written anywhere in a transcript of any format is stored nowhere and
printed nowhere.

Every fixture transcript (Claude Code, Codex, generic, OpenAI chat, Gemini, Aider, Cline, ChatGPT and Claude.ai
exports, OpenCode, Copilot Chat, Cursor) is copied with a secret appended to every free-text value it holds (messages,
tool inputs and outputs, thinking, titles, Claude `summary` lines, ...), then indexed with a remote embedder and LLM on
127.0.0.1. The secrets are then looked for in every text column of every table of the warehouse and of the snapshot
readers open, in what was sent to the remote provider, in the log, and in the output of the CLI, the client, the MCP
server, the session-start hook, the handoff file and compaction."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from itertools import cycle
from pathlib import Path

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from openai_server import OpenAICompatibleServer
from test_formats_editors import BUBBLES, CHAT_TABS, COMPOSER, COPILOT_WORKSPACE, OPENCODE, build_cursor_db
from test_privacy import text_hits

from sessionmem_pipeline.cli import main
from sessionmem_pipeline.client import SessionMemory
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.stages.run import index_sources
from sessionmem_pipeline.warehouse import snapshot_path

FIXTURES = Path(__file__).parent / "fixtures"
AGENTS = FIXTURES / "agents"

# (the sentence written into transcripts, the part of it that must never come back); kinds the redactor names
SECRETS = [
    ("Use the key AKIAQ3EGRXLN7TZ2M4VW for the deploy bucket.", "AKIAQ3EGRXLN7TZ2M4VW"),
    ("My token is ghp_R8xKq2LmN4vB7cT1yZ9wE3uJ6pA0sD5fG2hK, keep it.", "R8xKq2LmN4vB7cT1yZ9wE3uJ6pA0sD5fG2hK"),
    ("export STRIPE_KEY=sk_live_51HcQz8KdL2mNp4Rs6Tv8Xw0Yb", "51HcQz8KdL2mNp4Rs6Tv8Xw0Yb"),
    ("The bot posts with xoxb-4820193756102-3917264058193-KSZbowxMSrttNijfGGx9Etan now.",
     "KSZbowxMSrttNijfGGx9Etan"),
    ("the password is Wombat!Quasar93 for prod", "Wombat!Quasar93"),
    ("psql postgres://admin:Hunter2Secretly@db.example.com/orders", "Hunter2Secretly"),
]
NAMED_SECRET = "Marlin-Quay-5530"  # a password only its name gives away: added to every tool call's input dict
NEEDLES = [needle.lower() for _, needle in SECRETS] + [NAMED_SECRET.lower()]


def with_secrets(value: object, sentences: Iterator[str]) -> object:
    """The JSON value with a secret sentence appended to every free-text string (text with a space that is not
    itself JSON), and a password under its name in every tool call's input (`{"db_password": …}`): ids,
    timestamps, roles and embedded JSON documents keep their shape, so every parser still reads it."""
    if isinstance(value, dict):
        copied = {key: with_secrets(item, sentences) for key, item in value.items()}
        if isinstance(copied.get("input"), dict):  # a tool call's arguments
            copied["input"] |= {"db_password": NAMED_SECRET}
        return copied
    if isinstance(value, list):
        return [with_secrets(item, sentences) for item in value]
    if isinstance(value, str) and " " in value.strip() and not value.lstrip().startswith(("{", "[")):
        return f"{value} {next(sentences)}"
    return value


def as_json(line: str) -> object | None:
    try:
        return json.loads(line)
    except ValueError:
        return None


def copy_with_secrets(source: Path, target: Path, sentences: Iterator[str]) -> None:
    """A transcript file with secrets in it: JSON documents and JSON lines through `with_secrets`, Aider's markdown
    on every message line."""
    target.parent.mkdir(parents=True, exist_ok=True)
    text = source.read_text(encoding="utf-8")
    if source.suffix == ".json":
        target.write_text(json.dumps(with_secrets(json.loads(text), sentences)), encoding="utf-8")
    elif source.suffix == ".jsonl":
        lines = [json.dumps(with_secrets(json_line, sentences)) if (json_line := as_json(line)) is not None else line
                 for line in text.splitlines()]  # the fixtures' deliberately bad lines stay as they are
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:  # Aider: "# aider chat started at" headers and fences stay; requests (####) and replies get a secret
        lines = [line if not line.strip() or line.startswith(("# ", "```", ">")) else f"{line} {next(sentences)}"
                 for line in text.splitlines()]
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")


def copy_tree_with_secrets(source: Path, target: Path, sentences: Iterator[str]) -> None:
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        copy_with_secrets(path, target / path.relative_to(source), sentences)


def write_sources(root: Path) -> None:
    """Every format's fixtures, where discovery looks for them, each carrying secrets."""
    sentences = cycle(sentence for sentence, _ in SECRETS)
    copy_tree_with_secrets(FIXTURES / "transcripts", root / "transcripts", sentences)
    for source, target in [
        (AGENTS / "gemini" / "tmp", root / "gemini" / "tmp"),
        (AGENTS / "aider" / "health-analyzer-poc", root / "health-analyzer-poc"),
        (AGENTS / "cline" / "saoudrizwan.claude-dev", root / "globalStorage" / "saoudrizwan.claude-dev"),
        (AGENTS / "exports" / "chatgpt-2026-01", root / "exports" / "chatgpt"),
        (AGENTS / "exports" / "claude-2026-02", root / "exports" / "claude"),
        (OPENCODE, root / "opencode" / "storage"),
        (COPILOT_WORKSPACE, root / "Code" / "User" / "workspaceStorage" / "7c2e"),
    ]:
        copy_tree_with_secrets(source, target, sentences)
    build_cursor_db(root / "Cursor" / "User" / "globalStorage" / "state.vscdb",
                    composer=with_secrets(COMPOSER, sentences), bubbles=with_secrets(BUBBLES, sentences),
                    chats=with_secrets(CHAT_TABS, sentences))


def leaked(text: str) -> list[str]:
    return [needle for needle in NEEDLES if needle in text.lower()]


async def mcp_answers(config: Path, session_ids: list[str], projects: list[str]) -> str:
    params = StdioServerParameters(command=sys.executable, args=["-m", "sessionmem_pipeline.cli", "mcp",
                                                                 "--config", str(config)])
    answers = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        calls = [("session_search", {"query": "key token password deploy", "limit": 20}),
                 ("search_sessions", {"query": "token password", "limit": 20}),
                 ("recall", {"query": "password for prod", "limit": 20}),
                 ("search_memories", {"query": "deploy key"}),
                 ("timeline", {"after": "2000-01-01"})]
        calls += [("get_history", {"session_id": s}) for s in session_ids]
        calls += [("recap", {"session_id": s}) for s in session_ids]
        calls += [("recap", {"project": p}) for p in projects]
        calls += [("summarize_session", {"session_id": s, "incremental": False}) for s in session_ids[:3]]
        for name, arguments in calls:
            result = await session.call_tool(name, arguments)
            answers += [part.text for part in result.content]
    return "\n".join(answers)


@pytest.mark.slow
def test_no_secret_of_any_format_is_stored_sent_or_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "sources"
    write_sources(root)
    assert [p for p in root.rglob("*.jsonl") if NAMED_SECRET in p.read_text(encoding="utf-8")]  # tool inputs hold it
    caplog.set_level(logging.DEBUG)
    with OpenAICompatibleServer(native_dimensions=64) as server:
        config = tmp_path / "sessionmem.toml"
        config.write_text("\n".join([
            f'warehouse = "{tmp_path / "w.duckdb"}"', f'sources = ["{root}"]',
            "[embedding]", 'provider = "openai"', f'base_url = "{server.base_url}"', 'model = "fake-embedder"',
            "dimensions = 64", "[llm]", 'provider = "openai"', f'base_url = "{server.base_url}"',
            "[summaries]", "enabled = true",
        ]) + "\n", encoding="utf-8")
        settings = load_settings(config, {}, env={}, cwd=tmp_path, home=tmp_path)
        report = index_sources(settings)
        assert not report.quarantined and len(report.formats) >= 10, report.formats

        memory = SessionMemory(settings=settings)
        stored = memory.connection().execute("SELECT session_id, project FROM sessions ORDER BY session_id").fetchall()
        session_ids = [session_id for session_id, _ in stored]
        projects = sorted({project for _, project in stored if project})
        assert len(session_ids) >= 12

        assert main(["remember", "Deploys use the key AKIAQ3EGRXLN7TZ2M4VW on Tuesdays.", "--config", str(config)]) == 0
        assert main(["index", "--config", str(config)]) == 0  # publishes the remembered memory

        # what was sent to the remote embedder and LLM
        assert server.requests and not leaked(" ".join(r.raw.decode("utf-8", "replace") for r in server.requests))

        # every text column of every table, in the live file and the snapshot readers open
        for database in (settings.warehouse, snapshot_path(settings.warehouse)):
            assert {n: where for n, where in text_hits(database, NEEDLES).items() if where} == {}, database
        assert text_hits(settings.warehouse, ["kingfisher"])  # the scan does see stored text (a fixture word)
        assert text_hits(settings.warehouse, ["db_password"])  # and the tool inputs: the name stays, its value not

        # the client
        memory = SessionMemory(settings=settings)  # the snapshot now holds the remembered memory too
        shown = [memory.search("token password key deploy", limit=50), memory.recall("password for prod", limit=20),
                 memory.search_sessions("token password", limit=50), memory.search_memories("deploy key"),
                 memory.timeline(), memory.threads()]
        shown += [memory.recap(session_id=s).text for s in session_ids]
        shown += [memory.get_history(s) for s in session_ids]
        assert not leaked(json.dumps(shown, default=lambda o: o.to_dict() if hasattr(o, "to_dict") else str(o)))

        # the CLI, the hook, the handoff file and compaction
        handoffs = tmp_path / "handoffs"
        commands = [["search", "token password key", "--limit", "50"], ["search-sessions", "token password"],
                    ["recall", "password for prod"], ["memories", "deploy key"], ["timeline"],
                    ["sessions", "--summaries", "--json"], ["status", "--json"], ["health"], ["threads"]]
        commands += [["history", s, "--full"] for s in session_ids]
        commands += [["recap", "--project", p, "--write", str(handoffs / p)] for p in projects]
        commands += [["compact", str(path)] for path in sorted(root.rglob("*.jsonl"))]
        commands += [["hook", "session-start", f"/home/dev/{p}"] for p in projects]
        capsys.readouterr()
        printed, leaks = "", {}
        for command in commands:
            if command[0] == "hook":
                monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"cwd": command.pop()})))
            main([*command, "--config", str(config)])
            output = capsys.readouterr()
            printed += output.out
            if found := leaked(output.out + output.err):
                leaks[" ".join(command)] = found
        assert "REDACTED" in printed  # the secrets were there, and were shown redacted
        assert leaks == {}
        written = [path.read_text(encoding="utf-8") for path in handoffs.rglob("*.md")]
        assert written and not leaked("\n".join(written))
        compaction_log = [p.read_text(encoding="utf-8") for p in tmp_path.glob("*compact*")]
        assert not leaked("\n".join(compaction_log))

        # the MCP server over real stdio
        assert not leaked(anyio.run(mcp_answers, config, session_ids, projects))

    assert not leaked("\n".join(record.getMessage() for record in caplog.records))
