"""The MCP server over real stdio, driven by the official MCP client: tools/list and tool calls."""

import json
import sys
from pathlib import Path

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.stages.run import index_sources

SAMPLES = Path(__file__).parent.parent / "samples"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mcp") / "w.duckdb"
    index_sources(load_settings(SAMPLES / "sessionmem.toml", {"warehouse": str(path)}))
    return path


async def _session_calls(warehouse: Path) -> tuple[list[str], dict, dict, str]:
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
    return tools, json.loads(search.content[0].text), json.loads(sessions.content[0].text), recap.content[0].text


def test_mcp_server_lists_tools_and_answers_with_citations(warehouse: Path) -> None:
    tools, search, sessions, recap = anyio.run(_session_calls, warehouse)
    assert set(tools) == {"session_search", "search_sessions", "recall", "search_memories", "recap"}
    assert search["note"].startswith("Quoted memory")
    assert len(search["results"]) == 2
    first = search["results"][0]
    assert first["project"] == "webshop" and first["message_ids"] and first["timestamp"].startswith("2026-03-10")
    assert sessions["results"][0]["session_id"].startswith("planning/2026-03-02")
    recap_data = json.loads(recap)
    assert recap_data["session_id"] == "019ce3a1-4b7c-7e20-9a31-5c6d7e8f9012"
    assert all(line["message_ids"] for line in recap_data["lines"])
