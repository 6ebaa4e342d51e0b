"""`sessionmem hook session-start` with a payload as Claude Code sends it: the previous session's recap as added
context, and silence (exit 0, no output) whenever it cannot help."""

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sessionmem_pipeline.client import SessionMemory, Snapshot
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.recaps import HOOK_BUDGET, stored_recap_text
from sessionmem_pipeline.stages.run import index_sources
from sessionmem_pipeline.warehouse import (
    EARLIER_SUMMARIES,
    Warehouse,
    publish_snapshot,
    snapshot_path,
)

ROOT = Path(__file__).parent.parent
PAYLOAD = (ROOT / "tests" / "fixtures" / "hooks" / "claude_session_start.json").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hook") / "w.duckdb"
    index_sources(load_settings(ROOT / "samples" / "sessionmem.toml", {"warehouse": str(path)}))
    return path


def _hook(warehouse: Path, stdin: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sessionmem_pipeline.cli", "hook", "session-start", "--warehouse", str(warehouse)],
        input=stdin, capture_output=True, text=True, timeout=60,
    )


def test_session_start_prints_the_previous_sessions_recap_for_the_project(warehouse: Path) -> None:
    done = _hook(warehouse, PAYLOAD)
    assert done.returncode == 0
    output = json.loads(done.stdout)["hookSpecificOutput"]
    assert output["hookEventName"] == "SessionStart"
    context = output["additionalContext"]
    assert "3f6c2b9e-71d4-4a8e-b5c0-9e2d7a41f863" in context  # the webshop session, project from cwd
    assert "gift card" in context.lower() and "[" in context  # cited lines


@pytest.mark.parametrize(
    "stdin",
    ["{not json", json.dumps({"session_id": "x", "cwd": "/home/dev/unknown-project"}), ""],
)
def test_session_start_is_silent_when_it_cannot_help(warehouse: Path, stdin: str) -> None:
    done = _hook(warehouse, stdin)
    assert done.returncode == 0 and done.stdout == ""


def test_session_start_is_silent_without_a_warehouse(tmp_path: Path) -> None:
    done = _hook(tmp_path / "missing.duckdb", PAYLOAD)
    assert done.returncode == 0 and done.stdout == ""


def test_the_hook_reads_the_recap_the_index_made_which_is_the_recap_made_now(warehouse: Path) -> None:
    memory = SessionMemory(warehouse)
    reader = Snapshot(memory.connection())
    stored = [row["session_id"] for row in reader.query("SELECT session_id FROM session_recaps ORDER BY 1")]
    assert len(stored) == 5  # the samples' projects: at most the latest two sessions of each
    for session_id in stored:
        made_now = memory.recap(session_id=session_id, budget=HOOK_BUDGET).text
        assert stored_recap_text(reader, session_id, HOOK_BUDGET) == made_now
        assert memory.recap_text(session_id, budget=100) == memory.recap(session_id=session_id, budget=100).text
    context = json.loads(_hook(warehouse, PAYLOAD).stdout)["hookSpecificOutput"]["additionalContext"]
    assert context.endswith(memory.recap(session_id="3f6c2b9e-71d4-4a8e-b5c0-9e2d7a41f863").text)
    memory.close()


def _add_a_memory(wh: Warehouse) -> str:
    """A curated memory added outside a run's index stage changes what the recap leaves out as already known."""
    session_id = "3f6c2b9e-71d4-4a8e-b5c0-9e2d7a41f863"
    vector = list(wh.chunk_vectors(session_id).values())[-1]
    wh.insert("memories", [{"memory_id": "m1", "content": "known", "source": "test", "embedding": vector}])
    return session_id


def _an_earlier_summary(wh: Warehouse) -> dict:
    """A summary the recap of a session with a stored recap counts as its project's earlier session's."""
    earlier = wh.query(
        "SELECT r.session_id, v.session_id AS earlier_session_id, v.summary_id FROM session_recaps r "
        "JOIN sessions w USING (session_id), "
        + EARLIER_SUMMARIES.format(project="w.project", session="w.session_id", start="w.started_at")
        + " ORDER BY ALL LIMIT 1"
    )
    assert earlier  # the samples have one
    return earlier[0]


def _drop_an_earlier_summarys_vector(wh: Warehouse) -> str:
    """An earlier session whose summary lost its vector no longer counts as already known."""
    earlier = _an_earlier_summary(wh)
    wh.conn.execute("UPDATE session_summaries SET embedding = NULL WHERE summary_id = ?", [earlier["summary_id"]])
    return earlier["session_id"]


def _summarize_an_earlier_session_again(wh: Warehouse) -> str:
    """An earlier session's new summary version (another summary id, the same vector) is another input."""
    earlier = _an_earlier_summary(wh)
    wh.conn.execute(
        "INSERT INTO session_summaries SELECT * REPLACE (version + 1 AS version, summary_id || '+' AS summary_id) "
        "FROM session_summaries WHERE summary_id = ?",
        [earlier["summary_id"]],
    )
    wh.conn.execute(
        "UPDATE sessions SET summary_version = summary_version + 1 WHERE session_id = ?", [earlier["earlier_session_id"]]
    )
    return earlier["session_id"]


@pytest.mark.parametrize(
    "change", [_add_a_memory, _drop_an_earlier_summarys_vector, _summarize_an_earlier_session_again]
)
def test_a_stored_recap_is_not_used_once_what_it_was_made_from_changed(
    warehouse: Path, tmp_path: Path, change: Callable[[Warehouse], str]
) -> None:
    path = tmp_path / "w.duckdb"
    shutil.copy(warehouse, path)
    shutil.copy(snapshot_path(warehouse), snapshot_path(path))
    with Warehouse(path) as wh:
        with wh.transaction():
            session_id = change(wh)
            wh.bump_generation()
        wh.checkpoint()
    publish_snapshot(path)
    memory = SessionMemory(path)
    assert stored_recap_text(Snapshot(memory.connection()), session_id, HOOK_BUDGET) is None
    assert memory.recap_text(session_id) == memory.recap(session_id=session_id).text
    memory.close()
