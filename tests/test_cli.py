"""The CLI in-process: exit codes, `--json` shapes, filters, status and health, config origins."""

import json
from pathlib import Path

import pytest

from sessionmem_pipeline.cli import main

SAMPLES = Path(__file__).parent.parent / "samples"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("cli") / "w.duckdb"
    assert main(["index", "--config", str(SAMPLES / "sessionmem.toml"), "--warehouse", str(path)]) == 0
    return str(path)


def _json(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_search_json_results_cite_their_sources(warehouse: str, capsys) -> None:
    data = _json(capsys, "search", "gift card coupon", "--warehouse", warehouse, "--json", "--limit", "3")
    assert len(data["results"]) == 3
    for result in data["results"]:
        assert result["session_id"] and result["message_ids"] and result["source_path"].endswith(".jsonl")
    assert "AKIAIOSFODNN7EXAMPLE" not in json.dumps(data)  # the sample's AWS key is redacted before indexing


@pytest.mark.parametrize(
    ("flags", "check"),
    [
        (["--project", "imgtool"], lambda r: r["project"] == "imgtool"),
        (["--speaker", "maya"], lambda r: "Maya" in r["speakers"]),
        (["--after", "2026-03-10", "--before", "2026-03-11"], lambda r: r["timestamp"].startswith("2026-03-10")),
        (["--has-decision"], lambda r: True),
        (["--session", "planning/2026-03-02#2"], lambda r: r["session_id"] == "planning/2026-03-02#2"),
    ],
)
def test_search_filters_narrow_results(warehouse: str, capsys, flags: list[str], check) -> None:
    data = _json(capsys, "search", "plan", "--warehouse", warehouse, "--json", "--limit", "10", *flags)
    assert data["results"] and all(check(r) for r in data["results"])


def test_status_and_health(warehouse: str, capsys) -> None:
    status = _json(capsys, "status", "--warehouse", warehouse, "--json")
    assert status["counts"]["sessions"] == 5 and status["counts"]["chunks"] > 0
    assert status["top_topics"] and status["last_run"]["status"] == "success"
    assert status["searches"]["count"] >= 0
    health = _json(capsys, "health", "--warehouse", warehouse, "--json")
    assert health["status"] in ("OK", "DEGRADED")


def test_health_is_an_error_without_a_warehouse(tmp_path: Path, capsys) -> None:
    assert main(["health", "--warehouse", str(tmp_path / "none.duckdb")]) == 1
    assert "ERROR" in capsys.readouterr().out


def test_usage_errors_exit_2_and_errors_exit_1(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as usage:
        main(["search"])
    assert usage.value.code == 2
    assert main(["index", "--source", str(tmp_path / "missing"), "--warehouse", str(tmp_path / "w.duckdb")]) == 1
    assert "source folder not found" in capsys.readouterr().err


def test_config_shows_origins_and_masks_keys(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SESSIONMEM_LLM__PROVIDER", "openai")
    monkeypatch.setenv("SESSIONMEM_LLM__API_KEY", "sk-secret-1234567890")
    data = _json(capsys, "config", "--json")
    assert data["values"]["llm.provider"] == {"value": "openai", "origin": "env SESSIONMEM_LLM__PROVIDER"}
    assert "1234567890" not in data["values"]["llm.api_key"]["value"]
