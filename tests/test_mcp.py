"""The MCP server over real stdio, driven by the official MCP client: tools/list and tool calls."""

import json
import sys
from pathlib import Path

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from sessionmem_pipeline.client import SessionMemory
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.stages.run import index_sources

SAMPLES = Path(__file__).parent.parent / "samples"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mcp") / "w.duckdb"
    index_sources(load_settings(SAMPLES / "sessionmem.toml", {"warehouse": str(path)}))
    return path


async def _session_calls(warehouse: Path) -> tuple[list[str], dict, dict, str, dict]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "sessionmem_pipeline.cli", "mcp", "--warehouse", str(warehouse)],
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = [tool.name for tool in (await session.list_tools()).tools]
        search = await session.call_tool("session_search", {"query": "gift card coupon order", "limit": 2})
        sessions = await session.call_tool("search_sessions", {"query": "content strategy newsletter"})
        recap = await session.call_tool("recap", {"project": "imgtool", "budget": 300})
        writes = {}
        for name, arguments in [
            ("recall", {"query": "newsletter cadence", "limit": 2}),
            ("search_memories", {"query": "deploy"}),
            ("get_history", {"session_id": "019ce3a1-4b7c-7e20-9a31-5c6d7e8f9012"}),
            ("summarize_session", {"session_id": "019ce3a1-4b7c-7e20-9a31-5c6d7e8f9012", "incremental": False}),
            ("remember", {"content": "Deploys go out on Tuesdays only.", "importance": 0.8}),
            ("timeline", {"after": "2026-03-01", "project": "webshop"}),
        ]:
            writes[name] = json.loads((await session.call_tool(name, arguments)).content[0].text)
    return (
        tools, json.loads(search.content[0].text), json.loads(sessions.content[0].text), recap.content[0].text, writes
    )


def test_mcp_server_lists_tools_and_answers_with_citations(warehouse: Path) -> None:
    tools, search, sessions, recap, calls = anyio.run(_session_calls, warehouse)
    assert set(tools) == {
        "session_search", "search_sessions", "recall", "search_memories", "recap",
        "summarize_session", "get_history", "remember", "timeline",
    }
    assert {r["stage"] for r in calls["recall"]["results"]} <= {"session", "global"} and calls["recall"]["results"]
    assert calls["search_memories"]["results"] == []  # nothing remembered yet
    history = calls["get_history"]
    assert [m["message_id"] for m in history["messages"]][:1] == ["L2"] and history["summaries"][0]["version"] == 1
    summary = calls["summarize_session"]
    assert summary["version"] == 1 and summary["is_incremental"] is False  # same input: no new version
    assert calls["remember"]["stored"].startswith("mem-")
    [day] = calls["timeline"]["days"]
    assert day["day"] == "2026-03-10" and day["sessions"][0]["project"] == "webshop"

    settings = load_settings(SAMPLES / "sessionmem.toml", {"warehouse": str(warehouse)})
    assert index_sources(settings).memories == 1
    found = SessionMemory(settings=settings).search_memories("which day do deploys happen")
    assert found[0].content == "Deploys go out on Tuesdays only." and found[0].importance == 0.8
    assert search["note"].startswith("Quoted memory")
    assert len(search["results"]) == 2
    first = search["results"][0]
    assert first["project"] == "webshop" and first["message_ids"] and first["timestamp"].startswith("2026-03-10")
    assert sessions["results"][0]["session_id"].startswith("planning/2026-03-02")
    recap_data = json.loads(recap)
    assert recap_data["session_id"] == "019ce3a1-4b7c-7e20-9a31-5c6d7e8f9012"
    assert all(line["message_ids"] for line in recap_data["lines"])
