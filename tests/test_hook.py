"""`sessionmem hook session-start` with a payload as Claude Code sends it: the previous session's recap as added
context, and silence (exit 0, no output) whenever it cannot help."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.stages.run import index_sources

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
