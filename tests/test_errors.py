"""Spec 001 errors: typed and marked recoverable, `--validate-only` writes nothing, and a storage error rolls
back, pauses indexing (the sensor stops asking for runs) until `health` finds the warehouse writable again."""

import shutil
from pathlib import Path

import dagster as dg
import pytest

from sessionmem_pipeline.cli import main
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.core.errors import ErrorType, SessionMemoryError
from sessionmem_pipeline.defs.resources import SessionmemResource
from sessionmem_pipeline.defs.sensors import session_files_sensor
from sessionmem_pipeline.definitions import defs
from sessionmem_pipeline.stages.run import index_sources
from sessionmem_pipeline.warehouse import read_storage_error

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"


@pytest.fixture()
def sources(tmp_path: Path) -> Path:
    root = tmp_path / "sources"
    shutil.copytree(FIXTURES / "generic", root / "generic")
    (root / "generic" / "broken.jsonl").write_bytes(b"\x00\x01\x02binary\xff\xfe" * 40)
    return root


def test_validate_only_reports_every_file_and_writes_nothing(tmp_path: Path, sources: Path, capsys) -> None:
    warehouse = tmp_path / "wh" / "w.duckdb"
    code = main(["index", "--validate-only", "--json", "--source", str(sources), "--warehouse", str(warehouse)])
    assert code == 0
    out = capsys.readouterr().out
    assert '"valid": false' in out and "broken.jsonl" in out and "team-sync" in out
    assert not warehouse.parent.exists()


def test_index_report_types_its_errors(tmp_path: Path, sources: Path) -> None:
    settings = load_settings(flags={"warehouse": str(tmp_path / "w.duckdb"), "sources": [str(sources)]}, env={})
    report = index_sources(settings)
    kinds = {(e["type"], e["recoverable"]) for e in report.errors}
    assert ("PARSE_ERROR", True) in kinds and ("VALIDATION_ERROR", True) in kinds
    assert SessionMemoryError(ErrorType.STORAGE_ERROR, "x").recoverable is False


def test_storage_error_pauses_the_sensor_until_health_recovers(tmp_path: Path, sources: Path, capsys) -> None:
    warehouse = tmp_path / "w.duckdb"
    warehouse.mkdir()  # injected fault: the warehouse path cannot be opened as a database
    settings = load_settings(flags={"warehouse": str(warehouse), "sources": [str(sources)]}, env={})
    with pytest.raises(SessionMemoryError) as error:
        index_sources(settings)
    assert error.value.type == ErrorType.STORAGE_ERROR and not error.value.recoverable
    assert read_storage_error(warehouse)["where"] == "index"

    config = tmp_path / "sessionmem.toml"
    config.write_text(f'warehouse = "{warehouse}"\nsources = ["{sources}"]\n', encoding="utf-8")
    resources = {"sessionmem": SessionmemResource(config_file=str(config))}
    instance = dg.DagsterInstance.ephemeral()

    def tick() -> dg.SensorResult:
        context = dg.build_sensor_context(instance=instance, resources=resources, definitions=defs)
        return session_files_sensor(context)

    paused = tick()
    assert paused.run_requests == [] and "paused" in paused.skip_reason.skip_message

    assert main(["health", "--config", str(config)]) == 1  # still broken: stays paused
    assert "STORAGE_ERROR" in capsys.readouterr().out
    assert tick().run_requests == []

    warehouse.rmdir()  # the fault is fixed
    main(["health", "--config", str(config)])
    assert "recovered from the storage error" in capsys.readouterr().out
    assert read_storage_error(warehouse) is None
    assert len(tick().run_requests) == 1  # indexing resumes
