"""A CLI that explains itself: --version, help with examples, `remember` searchable at once, hints instead of
empty answers, printed paths, no empty headings, times in the configured zone."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sessionmem_pipeline.cli import EXAMPLES, build_parser, local_time, main
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.stages.run import index_sources

from conftest import write_corpus


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One small session indexed in Berlin time."""
    base = tmp_path_factory.mktemp("usable")
    write_corpus(base / "sources", {"deploys/friday.jsonl": [
        ("d1", "user", "Ada", "2026-03-13T16:30:00Z", "Can we deploy the payments service today?"),
        ("d2", "assistant", "Max", "2026-03-13T16:31:00Z", "Deployed payments 2.4 to production; all checks green."),
    ]})
    path = base / "sessionmem.toml"
    path.write_text('warehouse = "w.duckdb"\nsources = ["sources"]\ntimezone = "Europe/Berlin"\n', encoding="utf-8")
    index_sources(load_settings(path, env={}, cwd=base, home=base))
    return str(path)


def test_version_names_the_installed_release(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == "sessionmem 0.1.0"


def test_every_command_help_ends_with_examples_and_every_option_is_explained() -> None:
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # noqa: SLF001 (argparse has no public walk)
    assert set(commands) == set(EXAMPLES)
    for name, sub in commands.items():
        assert sub.format_help().rstrip().endswith(EXAMPLES[name].splitlines()[-1]), name
        unexplained = [a.dest for a in sub._actions if not a.help]  # noqa: SLF001
        assert not unexplained, f"{name}: {unexplained}"


@pytest.mark.parametrize("indexed", [False, True], ids=["before the first index", "on an indexed warehouse"])
def test_a_remembered_fact_is_found_at_once(config: str, tmp_path: Path, capsys, indexed: bool) -> None:
    where = ["--config", config] if indexed else ["--warehouse", str(tmp_path / "w.duckdb")]
    code, out, _ = _run(capsys, "memories", "which day do we deploy", *where)
    assert code == 0 and 'sessionmem remember "TEXT"' in out  # how to add one, not just "no results"

    fake_key = "sk-ant-api03-FAKEWKbsDE5kGZoDiPCFdcERFmdD5nHQrroDnobDQCm7JUcKkHnV"  # `sk-ant-api03-xxxx…` is filler and stays
    code, out, _ = _run(capsys, "remember", f"Deploys go out on Tuesdays only. key {fake_key}",
                        "--importance", "0.8", *where)
    assert code == 0 and out.startswith("remembered mem-")

    code, out, _ = _run(capsys, "memories", "which day do we deploy", *where, "--json")
    [found] = json.loads(out)["results"]
    assert found["content"].startswith("Deploys go out on Tuesdays only.") and found["importance"] == 0.8
    assert "sk-ant-api03" not in found["content"] and "[REDACTED" in found["content"]


def test_remember_rejects_an_importance_outside_zero_to_one(tmp_path: Path, capsys) -> None:
    code, _, err = _run(capsys, "remember", "x", "--importance", "3", "--warehouse", str(tmp_path / "w.duckdb"))
    assert code == 1 and "between 0 and 1" in err


def test_recap_write_prints_the_path_and_history_has_no_empty_heading(config: str, tmp_path: Path, capsys) -> None:
    code, out, err = _run(capsys, "recap", "--config", config, "--write", str(tmp_path / "repo"))
    assert code == 0 and f"wrote {tmp_path / 'repo' / '_handoff.md'}" in err
    assert (tmp_path / "repo" / "_handoff.md").is_file()

    code, out, _ = _run(capsys, "history", "deploys/friday", "--config", config)
    assert code == 0 and "## Messages since the latest summary" not in out  # the summary covers every message
    assert "No messages after the latest summary." in out
    code, out, _ = _run(capsys, "history", "deploys/friday", "--config", config, "--full")
    assert "[d1] 2026-03-13 17:30 Ada:" in out  # 16:30 UTC in Berlin


def test_times_print_in_the_configured_zone(config: str, capsys) -> None:
    code, out, _ = _run(capsys, "sessions", "--config", config)
    assert code == 0 and "2026-03-13 17:30 → 2026-03-13 17:31" in out
    code, out, _ = _run(capsys, "sessions", "--config", config, "--json")
    assert json.loads(out)["sessions"][0]["started_at"].startswith("2026-03-13")
    assert local_time(None, "Europe/Berlin") == "?"


@pytest.mark.parametrize("benchmark, argv", [
    ("retrieval.py", ["--sessions", "/nonexistent/sessions"]),
    ("summaries.py", ["--dataset", "/nonexistent/samsum.csv"]),
])
def test_a_benchmark_without_its_data_says_where_to_get_it(benchmark: str, argv: list[str], tmp_path: Path) -> None:
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, str(root / "benchmarks" / benchmark), *argv],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("/nonexistent/") and "not found; get the" in line and "github.com/" in line
