"""Discovery on folders as real machines have them (issue 18): symlinked folders are indexed, loops, FIFOs,
unreadable folders and missing roots are recorded problems that never stop or hang a run, and `index`, `status
--json` and `health` show each one with its path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sessionmem_pipeline.cli import main
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.providers import LocalMiniLMEmbedder
from sessionmem_pipeline.stages.discover import scan_sources
from sessionmem_pipeline.stages.run import index_sources
from sessionmem_pipeline.status import read_status


def session(text: str) -> str:
    return "".join(
        json.dumps({"id": f"m{n}", "role": role, "content": f"{text} ({role})", "timestamp": f"2026-03-01T10:0{n}:00Z"})
        + "\n"
        for n, role in enumerate(("user", "assistant"))
    )


@pytest.fixture()
def hostile_root(tmp_path: Path) -> Path:
    """A root with a plain session, a symlinked project folder, a folder loop, a self-looping file link, a FIFO
    and a broken link, each named like a session file where that matters."""
    root = tmp_path / "sources"
    (root / "plain").mkdir(parents=True)
    (root / "plain" / "a.jsonl").write_text(session("plain session about sourdough"), encoding="utf-8")
    elsewhere = tmp_path / "elsewhere" / "linked-project"
    elsewhere.mkdir(parents=True)
    (elsewhere / "b.jsonl").write_text(session("linked session about kayaks"), encoding="utf-8")
    (root / "linked").symlink_to(elsewhere, target_is_directory=True)
    (root / "plain" / "back-up").symlink_to(root, target_is_directory=True)  # a loop through the root
    (root / "self.jsonl").symlink_to(root / "self.jsonl")  # ELOOP when followed
    (root / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    os.mkfifo(root / "pipe.jsonl")
    return root


def kinds(problems) -> dict[str, str]:
    return {Path(p.path).name: p.kind for p in problems}


def test_symlinked_folders_are_followed_and_every_hostile_entry_is_a_recorded_problem(hostile_root: Path) -> None:
    scan = scan_sources([hostile_root, hostile_root.parent / "missing"])
    assert sorted(f.partition_key for f in scan.files) == ["linked/b", "plain/a"]
    assert [f.path for f in scan.files if f.partition_key == "linked/b"] == [str(hostile_root / "linked" / "b.jsonl")]
    assert kinds(scan.problems) == {
        "back-up": "symlink_loop",
        "self.jsonl": "symlink_loop",
        "gone.jsonl": "broken_symlink",
        "pipe.jsonl": "not_a_file",
        "missing": "missing_root",
    }
    assert "a FIFO" in next(p.detail for p in scan.problems if p.kind == "not_a_file")


def test_a_folder_reached_twice_is_read_once(tmp_path: Path) -> None:
    root = tmp_path / "sources"
    (root / "real").mkdir(parents=True)
    (root / "real" / "a.jsonl").write_text(session("once"), encoding="utf-8")
    (root / "twin").symlink_to(root / "real", target_is_directory=True)
    scan = scan_sources([root])
    assert [f.partition_key for f in scan.files] == ["real/a"]
    assert kinds(scan.problems) == {"twin": "duplicate"}


def test_an_unreadable_folder_is_recorded_and_the_rest_is_read(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "sources"
    (root / "locked").mkdir(parents=True)
    (root / "locked" / "x.jsonl").write_text(session("hidden"), encoding="utf-8")
    (root / "open").mkdir()
    (root / "open" / "y.jsonl").write_text(session("visible"), encoding="utf-8")
    (root / "locked").chmod(0)
    try:
        if os.geteuid() == 0:  # root reads any folder whatever its mode: refuse it the way the kernel would
            real_scandir = os.scandir

            def scandir(path):
                if Path(path) == root / "locked":
                    raise PermissionError(13, "Permission denied", str(path))
                return real_scandir(path)

            monkeypatch.setattr(os, "scandir", scandir)
        scan = scan_sources([root])
    finally:
        (root / "locked").chmod(0o755)
    assert [f.partition_key for f in scan.files] == ["open/y"]
    (problem,) = scan.problems
    assert (problem.kind, problem.path) == ("unreadable_folder", str(root / "locked"))
    assert "Permission denied" in problem.detail


def test_index_finishes_and_status_and_health_show_each_problem(hostile_root: Path, tmp_path: Path, capsys) -> None:
    warehouse = tmp_path / "w.duckdb"
    missing = tmp_path / "missing"
    config = tmp_path / "sessionmem.toml"
    config.write_text(
        f'warehouse = "{warehouse}"\nsources = ["{hostile_root}", "{missing}"]\n[summaries]\nenabled = false\n',
        encoding="utf-8",
    )
    # a subprocess with a time limit: a FIFO that is opened blocks forever
    run = subprocess.run(
        [sys.executable, "-m", "sessionmem_pipeline.cli", "index", "--config", str(config)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert "indexed 2 files" in run.stdout
    problem_paths = [hostile_root / "plain" / "back-up", *(hostile_root / n for n in ("self.jsonl", "gone.jsonl",
                                                                                        "pipe.jsonl")), missing]
    for path in problem_paths:
        assert f"source problem: {path}: " in run.stderr

    capsys.readouterr()
    assert main(["status", "--json", "--config", str(config)]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["counts"]["sessions"] == 2
    assert {Path(p["path"]).name: p["kind"] for p in status["source_problems"]} == kinds(
        scan_sources([hostile_root, missing]).problems
    )
    main(["health", "--json", "--config", str(config)])
    health = json.loads(capsys.readouterr().out)
    assert health["status"] == "DEGRADED"
    reasons = "\n".join(health["reasons"])
    assert f"source roots not found: {missing}" in reasons
    for name in ("back-up", "self.jsonl", "gone.jsonl", "pipe.jsonl"):
        assert f"{name}: " in reasons


def test_a_problem_that_appears_between_runs_reaches_the_readers(tmp_path: Path) -> None:
    root = tmp_path / "sources"
    root.mkdir()
    (root / "a.jsonl").write_text(session("a quiet session"), encoding="utf-8")
    flags = {"warehouse": str(tmp_path / "w.duckdb"), "sources": [str(root)], "summaries.enabled": False}
    settings = load_settings(flags=flags, env={}, cwd=tmp_path, home=tmp_path)
    embedder = LocalMiniLMEmbedder()
    index_sources(settings, embedder=embedder)
    assert read_status(settings)["source_problems"] == []

    os.mkfifo(root / "late.jsonl")  # nothing else changes, yet the snapshot readers open must say so
    report = index_sources(settings, embedder=embedder)
    assert report.sessions_changed == 0 and report.snapshot
    assert [(p["path"], p["kind"]) for p in read_status(settings)["source_problems"]] == [
        (str(root / "late.jsonl"), "not_a_file")
    ]
