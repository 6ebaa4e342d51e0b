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
    assert "AKIAFAKE7Q2MZKD4RW6N" not in json.dumps(data)  # the sample's AWS key is redacted before indexing


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
    assert sum(f["sessions"] for f in status["formats"]) == 5 and all(f["supported"] for f in status["formats"])
    assert {"claude_code", "codex", "generic"} <= {f["format"] for f in status["formats"]}
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


# ---- index, status, health, search, config and init on small corpora (conftest `indexed_corpus`) -----------------
import hashlib  # noqa: E402
import shutil  # noqa: E402
import os  # noqa: E402
from datetime import UTC, datetime  # noqa: E402

from conftest import AWS_KEY, CORPUS, IndexedCorpus, write_corpus  # noqa: E402


@pytest.fixture()
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder and home of its own, and no SESSIONMEM_* variables from the caller's environment."""
    for name in list(os.environ):
        if name.startswith("SESSIONMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _config(folder: Path, **extra: str) -> Path:
    """A config file naming the warehouse and the `sources` folder beside it, in New York time, no summaries."""
    lines = ['warehouse = "w.duckdb"', 'sources = ["sources"]', 'timezone = "America/New_York"']
    lines += [f"{key} = {value}" for key, value in extra.items()]
    config = folder / "sessionmem.toml"
    config.write_text("\n".join(lines) + "\n\n[summaries]\nenabled = false\n", encoding="utf-8")
    return config


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _hashes(root: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def test_index_reports_decisions_skips_unchanged_files_and_full_reindexes(isolated: Path, capsys) -> None:
    write_corpus(isolated / "sources", {k: CORPUS[k] for k in ("infra/backups.jsonl", "webshop/search.jsonl")})
    config = str(_config(isolated))
    before = _hashes(isolated / "sources")

    code, out, _ = _run(capsys, "index", "--config", config, "--json")
    first = json.loads(out)
    assert code == 0 and first["decisions"] == {"new": 2} and first["embedded"] == first["chunks"] > 0
    assert first["snapshot"] and first["summary"].startswith("indexed 2 files")

    code, out, _ = _run(capsys, "index", "--config", config)  # readable: per-format lines and the summary line
    assert code == 0 and "generic: 2 files, 2 sessions, 0 new messages" in out
    assert out.strip().splitlines()[-1].startswith("indexed 2 files (2 unchanged): 0 sessions changed, 0 messages")

    full = json.loads(_run(capsys, "index", "--config", config, "--full", "--json")[1])
    assert full["decisions"] == {"rewritten": 2} and full["messages_written"] == first["messages_written"]
    assert (full["embedded"], full["embeddings_cached"]) == (0, first["chunks"])
    assert _hashes(isolated / "sources") == before  # sources are only ever read


def test_since_is_a_day_in_the_configured_zone(isolated: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    root = isolated / "sources"
    write_corpus(root, {k: CORPUS[k] for k in ("infra/backups.jsonl", "webshop/checkout.jsonl")})
    old = datetime(2026, 3, 10, 3, 0, tzinfo=UTC).timestamp()  # 23:00 on March 9 in New York
    os.utime(root / "webshop" / "checkout.jsonl", (old, old))
    config = str(_config(isolated))

    validate = ("index", "--config", config, "--since", "2026-03-10", "--validate-only", "--json")
    validated = json.loads(_run(capsys, *validate)[1])
    assert [Path(f["path"]).name for f in validated["files"]] == ["backups.jsonl"]
    assert not (isolated / "w.duckdb").exists()  # --validate-only writes nothing
    monkeypatch.setenv("SESSIONMEM_TIMEZONE", "UTC")  # the same date in UTC includes the older file
    in_utc = json.loads(_run(capsys, *validate)[1])
    assert len(in_utc["files"]) == 2
    monkeypatch.delenv("SESSIONMEM_TIMEZONE")

    report = json.loads(_run(capsys, "index", "--config", config, "--since", "2026-03-10", "--json")[1])
    assert report["files_seen"] == 1 and report["decisions"] == {"new": 1}
    sessions = json.loads(_run(capsys, "sessions", "--config", config, "--json")[1])["sessions"]
    assert [s["session_id"] for s in sessions] == ["infra/backups"]
    assert _run(capsys, "index", "--config", config, "--since", "someday")[0] == 1


def test_status_and_health_show_quarantine_until_the_file_is_repaired(isolated: Path, capsys) -> None:
    root = isolated / "sources"
    write_corpus(root, {"infra/backups.jsonl": CORPUS["infra/backups.jsonl"]})
    broken = root / "infra" / "dump.jsonl"
    broken.write_bytes(b"\x00\x01\x02\x03 core dump")
    config = str(_config(isolated))

    code, _, err = _run(capsys, "index", "--config", config)
    assert code == 0 and f"quarantined {broken}: binary" in err
    status = json.loads(_run(capsys, "status", "--config", config, "--json")[1])
    (item,) = status["quarantine"]
    assert (item["path"], item["reason"]) == (str(broken), "binary")
    assert item["sha256"] == hashlib.sha256(broken.read_bytes()).hexdigest() and item["quarantined_at"]
    assert f"quarantined: {broken}: binary" in _run(capsys, "status", "--config", config)[1]
    code, out, _ = _run(capsys, "health", "--config", config)
    assert code == 0 and out.startswith("DEGRADED") and "1 quarantined files" in out

    write_corpus(root, {"infra/dump.jsonl": CORPUS["infra/alerts.jsonl"]})  # repaired
    assert _run(capsys, "index", "--config", config)[0] == 0
    status = json.loads(_run(capsys, "status", "--config", config, "--json")[1])
    assert status["quarantine"] == [] and status["counts"]["sessions"] == 2
    code, out, _ = _run(capsys, "health", "--config", config, "--json")
    assert (code, json.loads(out)) == (0, {"status": "OK", "reasons": []})

    with open(root / "infra" / "backups.jsonl", "a", encoding="utf-8") as handle:  # written after the last run
        late = {"role": "user", "content": "and the restore test?", "timestamp": "2026-03-10T17:00:00Z"}
        handle.write(json.dumps(late) + "\n")
    code, out, _ = _run(capsys, "health", "--config", config)
    assert code == 0 and out.startswith("DEGRADED") and "stale index" in out


def test_health_is_ok_on_a_fresh_index_and_an_error_for_another_model(
    isolated: Path, indexed_corpus: IndexedCorpus, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = str(indexed_corpus.config)
    assert json.loads(_run(capsys, "health", "--config", config, "--json")[1]) == {"status": "OK", "reasons": []}
    monkeypatch.setenv("SESSIONMEM_EMBEDDING__PROVIDER", "openai")
    monkeypatch.setenv("SESSIONMEM_EMBEDDING__BASE_URL", "http://127.0.0.1:9/v1")  # never contacted
    code, out, _ = _run(capsys, "health", "--config", config)
    assert code == 1 and out.startswith("ERROR") and "reembed" in out


def test_search_filters_from_flags_and_the_configured_zone(
    isolated: Path, indexed_corpus: IndexedCorpus, capsys
) -> None:
    config = str(indexed_corpus.config)

    def sessions(*flags: str) -> set[str]:
        argv = ("search", "payment retries backups", "--config", config, "--json", "--limit", "20", *flags)
        code, out, _ = _run(capsys, *argv)
        assert code == 0
        return {r["session_id"] for r in json.loads(out)["results"]}

    assert sessions("--before", "2026-03-10") == {"webshop/checkout"}  # March 9, 23:00 in New York
    assert sessions("--after", "2026-03-10", "--speaker", "MAYA") == set()
    # the infra alerts were assistant-only and decided nothing
    assert sessions("--project", "infra", "--role", "user", "--has-decision", "--has-action") == {"infra/backups"}
    assert sessions("--session", "webshop/checkout", "--speaker", "maya") == {"webshop/checkout"}
    assert sessions("--topic", "espresso", "--topic", "no-such-topic") == {"notes/grinder"}


def test_search_prints_readable_results_and_redacts_secrets(
    isolated: Path, indexed_corpus: IndexedCorpus, capsys
) -> None:
    config = str(indexed_corpus.config)
    code, out, _ = _run(capsys, "search", "AWS access key deploy bot", "--config", config, "--limit", "2")
    assert code == 0
    assert out.startswith("1. [") and "webshop/checkout (webshop) 2026-03-09 23:00  messages: c1, c2" in out  # New York time
    assert "   | Maya: " in out and "[REDACTED" in out and AWS_KEY not in out
    code, out, _ = _run(capsys, "search", "coffee", "--config", config, "--project", "nowhere")
    assert (code, out) == (0, "no results\n")


def test_search_before_the_first_index_answers_empty_and_says_why(isolated: Path, capsys) -> None:
    code, out, err = _run(capsys, "search", "anything", "--warehouse", str(isolated / "none.duckdb"))
    assert code == 0 and out.strip() == "no results" and "nothing indexed yet" in err
    code, _, err = _run(capsys, "status", "--warehouse", str(isolated / "none.duckdb"))
    assert code == 1 and "nothing indexed yet" in err


def test_sessions_lists_the_indexed_sessions(isolated: Path, indexed_corpus: IndexedCorpus, capsys) -> None:
    config = str(indexed_corpus.config)
    sessions = json.loads(_run(capsys, "sessions", "--config", config, "--json")[1])["sessions"]
    assert {s["session_id"] for s in sessions} == {p.removesuffix(".jsonl") for p in CORPUS}
    webshop = json.loads(_run(capsys, "sessions", "--config", config, "--project", "webshop", "--json")[1])
    assert {s["session_id"] for s in webshop["sessions"]} == {"webshop/checkout", "webshop/search"}


def test_config_text_shows_each_origin_and_masks_keys(isolated: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(isolated, **{"llm.provider": '"openai"', "llm.api_key": '"sk-live-abcdef123456"'})
    monkeypatch.setenv("SESSIONMEM_CHUNKING__MAX_TOKENS", "300")
    code, out, _ = _run(capsys, "config", "--config", str(config), "--warehouse", "elsewhere.duckdb")
    assert code == 0 and out.startswith(f"config file: {config}")
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert rows["timezone"].endswith(f"America/New_York  ({config})")
    assert rows["chunking.max_tokens"].endswith("300  (env SESSIONMEM_CHUNKING__MAX_TOKENS)")
    assert rows["warehouse"].endswith("elsewhere.duckdb  (flag)")
    assert rows["embedding.provider"].endswith("local  (default)")
    assert "abcdef123456" not in out and f"({config})" in rows["llm.api_key"]


def test_init_writes_a_config_once(isolated: Path, capsys) -> None:
    target = isolated / "conf" / "sessionmem.toml"
    code, out, _ = _run(capsys, "init", "--config", str(target), "--warehouse", str(isolated / "w.duckdb"))
    assert code == 0 and target.is_file() and str(target) in out
    shown = json.loads(_run(capsys, "config", "--config", str(target), "--json")[1])["values"]
    assert shown["warehouse"] == {"value": str(isolated / "w.duckdb"), "origin": str(target)}
    code, _, err = _run(capsys, "init", "--config", str(target))
    assert code == 1 and "already exists" in err
    assert _run(capsys, "init", "--config", str(target), "--force")[0] == 0


def test_a_warmup_sidechain_is_counted_in_status_and_never_found(isolated: Path, capsys) -> None:
    blog = Path(__file__).parent / "fixtures" / "transcripts" / "claude_code" / "-home-dev-blog"
    shutil.copytree(blog, isolated / "sources" / "-home-dev-blog")  # a session, a subagent and a warmup sidechain
    config = isolated / "sessionmem.toml"
    config.write_text('warehouse = "w.duckdb"\nsources = ["sources"]\n', encoding="utf-8")

    code, _, err = _run(capsys, "index", "--config", str(config))
    assert code == 0 and "quarantined" not in err
    status = json.loads(_run(capsys, "status", "--config", str(config), "--json")[1])
    assert status["skipped_sessions"] == {"warmup sidechain": 1} and status["quarantine"] == []
    assert status["counts"]["sessions"] == 2
    assert "skipped: warmup sidechain: 1" in _run(capsys, "status", "--config", str(config))[1]
    query = ("search-sessions", "file search specialist ready to help explore codebase", "--config", str(config))
    found = json.loads(_run(capsys, *query, "--json")[1])["results"]
    assert found and not [r for r in found if r["session_id"].endswith("/c81d4e2")]
