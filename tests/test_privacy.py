"""Privacy controls (issue 18): `<private>` spans, the ignore-session marker, `.sessionmem-ignore` files and the
configured path and project globs keep their text out of every table of the warehouse and its snapshot and out of
the CLI's output; an exclusion added later removes what it now covers."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import duckdb
import pytest
from warehouse_tables import warehouse_tables

from sessionmem_pipeline.cli import main
from sessionmem_pipeline.config import Settings, load_settings
from sessionmem_pipeline.core.models import Message, ToolCall
from sessionmem_pipeline.core.privacy import (
    IGNORE_FILE,
    IGNORE_SESSION_MARKER,
    PrivacyRules,
    session_exclusion,
    strip_private,
)
from sessionmem_pipeline.core.sanitize import sanitize_message
from sessionmem_pipeline.providers import LocalMiniLMEmbedder
from sessionmem_pipeline.stages.ingest_staging import compute_parses
from sessionmem_pipeline.stages.run import index_sources
from sessionmem_pipeline.warehouse import connect, snapshot_path

# ---- pure decisions -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("my key is <private>hunter2</private>, use it", "my key is , use it"),
        ("a <PRIVATE>b</Private> c <private>d</private> e", "a  c  e"),
        ("outer <private>one <private>two</private> still hidden</private> shown", "outer  shown"),
        ("before <private>everything after an unclosed tag", "before "),
        ("a stray </private> closing tag hides nothing", "a stray  closing tag hides nothing"),
        ("no tags at all", "no tags at all"),
    ],
)
def test_private_spans_are_removed(text: str, kept: str) -> None:
    assert strip_private(text) == kept


def test_private_spans_leave_thinking_tool_calls_and_metadata_too() -> None:
    message = Message(
        session_id="s",
        seq=0,
        message_id="m",
        role="assistant",
        text="ok <private>t1</private>",
        thinking="hmm <private>t2",
        tool_calls=(ToolCall("Bash", {"command": "echo <private>t3</private>", "args": ["<private>t4</private>x"]},
                             output="out <private>t5</private>"),),
        metadata={"raw": {"note": "<private>t6</private>kept"}},
    )
    scrubbed = sanitize_message(message)
    assert "t1" not in repr(scrubbed) and all(f"t{n}" not in repr(scrubbed) for n in range(2, 7))
    assert scrubbed.tool_calls[0].input == {"command": "echo ", "args": ["x"]}
    assert (scrubbed.text, scrubbed.thinking, scrubbed.metadata) == ("ok ", "hmm ", {"raw": {"note": "kept"}})


def _user(text: str, role: str = "user") -> Message:
    return Message(session_id="s", seq=0, message_id="m", role=role, text=text)


RULES = PrivacyRules(exclude_paths=("*/clients/*", "scratch"), exclude_projects=("acme-*", "/work/secret/*"))


@pytest.mark.parametrize(
    ("facts", "kind"),
    [
        ({"source_path": "/s/clients/a.jsonl"}, "path"),
        ({"source_path": "/s/notes/scratch/a.jsonl"}, "path"),  # a pattern without "/" names one folder
        ({"project": "acme-web"}, "project"),
        ({"cwd": "/work/secret/api"}, "project"),
        ({"ignore_file": "/home/u/p/.sessionmem-ignore"}, "ignore_file"),
        ({"messages": [_user(f"please {IGNORE_SESSION_MARKER}")]}, "marker"),
        ({"messages": [_user(f"about the {IGNORE_SESSION_MARKER} marker", role="assistant")]}, None),
        ({"project": "webshop", "cwd": "/work/webshop", "source_path": "/s/scratchpad.jsonl"}, None),
    ],
)
def test_each_rule_names_why_a_session_is_kept_out(facts: dict, kind: str | None) -> None:
    facts = {"source_path": "/s/p/a.jsonl", "project": "p", "cwd": None} | facts
    why = session_exclusion(RULES, **facts)
    assert (why.kind if why else None) == kind
    if why:
        assert why.rule in str(why) or why.kind == "marker"


# ---- whole runs ------------------------------------------------------------------------------------------------------

SECRETS = {
    "project": "zebrafrond",
    "path": "quokkamist",
    "ignore_file": "marmotglint",
    "marker": "wombatcrust",
    "span_text": "ocelotprism",
    "span_thinking": "lynxquartz",
    "span_tool_input": "pumaverdant",
    "span_tool_output": "ibexcobalt",
    "span_unclosed": "tapirsolstice",
}
PUBLIC = "kingfisherdelta"


def claude_session(session_id: str, cwd: Path, user_text: str, *, thinking: str = "", command: str = "ls",
                   output: str = "done", reply: str = "Finished.") -> str:
    """A small Claude Code transcript: a request, a tool call with its result, and the answer."""
    base = {"sessionId": session_id, "cwd": str(cwd), "version": "2.1.37", "isSidechain": False, "userType": "external"}
    lines = [
        {**base, "type": "user", "uuid": "u1", "parentUuid": None, "timestamp": "2026-02-12T16:02:00Z",
         "message": {"role": "user", "content": user_text}},
        {**base, "type": "assistant", "uuid": "a1", "parentUuid": "u1", "timestamp": "2026-02-12T16:02:05Z",
         "message": {"role": "assistant", "id": "msg_1", "model": "claude-x", "content": [
             {"type": "thinking", "thinking": thinking or "Let me look.", "signature": "sig"},
             {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": command}}]}},
        {**base, "type": "user", "uuid": "u2", "parentUuid": "a1", "timestamp": "2026-02-12T16:02:07Z",
         "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": output}]}},
        {**base, "type": "assistant", "uuid": "a2", "parentUuid": "u2", "timestamp": "2026-02-12T16:02:09Z",
         "message": {"role": "assistant", "id": "msg_2", "model": "claude-x", "content": [{"type": "text", "text": reply}]}},
    ]
    return "".join(json.dumps(line) + "\n" for line in lines)


def generic_session(*texts: str) -> str:
    return "".join(
        json.dumps({"id": f"g{n}", "role": ("user", "assistant")[n % 2], "content": text,
                    "timestamp": f"2026-03-01T10:0{n}:00Z"}) + "\n"
        for n, text in enumerate(texts)
    )


def write_sources(tmp_path: Path) -> Path:
    """One session per exclusion mechanism, plus a kept session whose private spans sit everywhere they can."""
    root = tmp_path / "sources"
    work = tmp_path / "work"
    for folder in ("acme-portal", "optout/sub", "shop"):
        (work / folder).mkdir(parents=True)
    (work / "optout" / IGNORE_FILE).write_text("", encoding="utf-8")
    files = {
        "claude/p1/acme.jsonl": claude_session(
            "11111111-0000-4000-8000-000000000001", work / "acme-portal", f"Fix the {SECRETS['project']} login page."
        ),
        "notes/scratch/draft.jsonl": generic_session(f"Draft about {SECRETS['path']}.", "Noted."),
        "claude/p2/optout.jsonl": claude_session(
            "11111111-0000-4000-8000-000000000002", work / "optout" / "sub", f"Tune the {SECRETS['ignore_file']} job."
        ),
        "notes/marked.jsonl": generic_session(
            f"{IGNORE_SESSION_MARKER} the {SECRETS['marker']} plan", "Understood, nothing of this is kept."
        ),
        "claude/p3/kept.jsonl": claude_session(
            "11111111-0000-4000-8000-000000000003",
            work / "shop",
            f"The {PUBLIC} checkout fails. My token is <private>{SECRETS['span_text']}</private>, please look.",
            thinking=f"The user's secret <private>{SECRETS['span_thinking']}</private> is not needed.",
            command=f"grep -r {PUBLIC} src <private>--token {SECRETS['span_tool_input']}</private>",
            output=f"src/checkout.py: {PUBLIC} <private>{SECRETS['span_tool_output']}</private>",
            reply=f"The {PUBLIC} checkout retries now. <private>Remember {SECRETS['span_unclosed']} forever",
        ),
    }
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text, encoding="utf-8")
    return root


def settings_for(tmp_path: Path, root: Path, **privacy: list[str]) -> Settings:
    flags = {"warehouse": str(tmp_path / "w.duckdb"), "sources": [str(root)], "summaries.enabled": True}
    flags |= {f"privacy.{key}": value for key, value in privacy.items()}
    return load_settings(flags=flags, env={}, cwd=tmp_path, home=tmp_path)


def text_hits(database: Path, words: Iterable[str]) -> dict[str, list[str]]:
    """word -> the `schema.table.column`s of the database (every schema, the BM25 index's too) whose text holds it."""
    conn = connect(database, read_only=True)
    try:
        columns = conn.execute(
            """SELECT table_schema, table_name, column_name FROM information_schema.columns
               WHERE table_catalog = 'wh' AND (data_type IN ('VARCHAR', 'JSON') OR data_type LIKE 'VARCHAR[%')"""
        ).fetchall()
        hits: dict[str, list[str]] = {word: [] for word in words}
        for schema, table, column in columns:
            for word in hits:
                sql = f'SELECT count(*) FROM "{schema}"."{table}" WHERE lower(CAST("{column}" AS VARCHAR)) LIKE ?'
                if conn.execute(sql, [f"%{word}%"]).fetchone()[0]:
                    hits[word].append(f"{schema}.{table}.{column}")
        return hits
    finally:
        conn.close()


def assert_nowhere(settings: Settings, words: Iterable[str]) -> None:
    for database in (settings.warehouse, snapshot_path(settings.warehouse)):
        found = {word: where for word, where in text_hits(database, words).items() if where}
        assert found == {}, database


@pytest.fixture(scope="module")
def embedder() -> LocalMiniLMEmbedder:
    return LocalMiniLMEmbedder()


def test_excluded_text_is_in_no_table_no_snapshot_and_no_output(tmp_path: Path, embedder, capsys) -> None:
    root = write_sources(tmp_path)
    settings = settings_for(tmp_path, root, exclude_paths=["scratch"], exclude_projects=["acme-*"])
    report = index_sources(settings, embedder=embedder)
    reasons = {r.get("session_id") or r.get("path"): r["reason"] for r in report.excluded}
    assert len(reasons) == 4 and report.quarantined == []
    assert sorted(r.split(" ")[0] for r in reasons.values()) == ["a", "opted", "path", "project"]

    assert_nowhere(settings, SECRETS.values())
    hits = text_hits(settings.warehouse, [PUBLIC])[PUBLIC]
    assert {"main.messages.text", "main.chunks.content", "main.messages.tool_calls"} <= set(hits)  # the scan sees text

    config = ["--warehouse", str(settings.warehouse)]
    capsys.readouterr()
    assert main(["status", "--json", *config]) == 0
    status = json.loads(capsys.readouterr().out)
    assert {e["session_id"] for e in status["excluded"]} == {
        "11111111-0000-4000-8000-000000000001", "11111111-0000-4000-8000-000000000002", "notes/marked"
    }  # the path-excluded file is never opened: it is reported by the run, not stored
    assert status["counts"]["sessions"] == 1
    for word in [*SECRETS.values(), PUBLIC]:
        main(["search", word, *config])
        main(["search-sessions", word, *config])
    main(["history", "11111111-0000-4000-8000-000000000003", "--full", *config])
    output = capsys.readouterr()
    assert PUBLIC in output.out
    assert not [w for w in SECRETS.values() if w in output.out + output.err]


def test_an_exclusion_added_later_removes_what_it_now_covers(tmp_path: Path, embedder) -> None:
    root = write_sources(tmp_path)
    settings = settings_for(tmp_path, root)
    index_sources(settings, embedder=embedder)
    stored = {w for w, where in text_hits(settings.warehouse, SECRETS.values()).items() if where}
    assert {SECRETS["project"], SECRETS["path"]} <= stored  # indexed while nothing excluded them
    assert SECRETS["ignore_file"] not in stored and SECRETS["marker"] not in stored

    (tmp_path / "work" / "shop" / IGNORE_FILE).write_text("", encoding="utf-8")  # opt the kept project out too
    later = settings_for(tmp_path, root, exclude_paths=["*/notes/scratch/*"], exclude_projects=["acme-*"])
    report = index_sources(later, embedder=embedder)
    assert report.excluded_removed == 3  # the scratch draft, the acme session and the opted-out shop session
    assert_nowhere(later, [*SECRETS.values(), PUBLIC])
    with duckdb.connect(str(snapshot_path(later.warehouse)), read_only=True) as conn:
        sessions = conn.execute("SELECT session_id FROM sessions").fetchall()
        files = conn.execute("SELECT path, session_ids FROM source_files ORDER BY path").fetchall()
    assert sessions == []
    assert all(ids == [] for _, ids in files)
    assert not [path for path, _ in files if "scratch" in path]  # read again once no glob covers it

    again = index_sources(settings, embedder=embedder, full=True)  # the exclusions lifted (the opt-out file stays)
    assert again.excluded_removed == 0
    assert {w for w, where in text_hits(settings.warehouse, SECRETS.values()).items() if where} == {
        SECRETS["project"], SECRETS["path"]
    }


def test_an_opt_out_file_added_later_removes_its_folders_sessions_under_unchanged_rules(tmp_path: Path, embedder) -> None:
    root = write_sources(tmp_path)
    settings = settings_for(tmp_path, root)
    index_sources(settings, embedder=embedder)
    assert index_sources(settings, embedder=embedder).excluded_removed == 0  # rules checked once, nothing covered

    (tmp_path / "work" / "shop" / IGNORE_FILE).write_text("", encoding="utf-8")
    report = index_sources(settings, embedder=embedder)  # no file changed, no rule changed: only the opt-out file
    assert report.excluded_removed == 1
    with duckdb.connect(str(snapshot_path(settings.warehouse)), read_only=True) as conn:
        cwds = {row[0] for row in conn.execute("SELECT cwd FROM sessions").fetchall()}
    assert str(tmp_path / "work" / "shop") not in cwds


def test_privacy_rules_applied_by_a_compute_step_keep_out_what_the_writer_would(tmp_path: Path, embedder) -> None:
    root = write_sources(tmp_path)
    built = {}
    for name in ("staged", "serial"):
        (tmp_path / name).mkdir()
        built[name] = settings_for(tmp_path / name, root, exclude_paths=["scratch"], exclude_projects=["acme-*"])
    assert compute_parses(built["staged"], None).files == 4  # the path-excluded file is not even opened
    (tmp_path / "work" / "shop" / IGNORE_FILE).write_text("", encoding="utf-8")  # after compute looked

    staged = index_sources(built["staged"], embedder=embedder)
    serial = index_sources(built["serial"], embedder=embedder)

    assert staged.computed_in_commit["ingest"] == 1  # the shop session's opt-out file changed since compute
    assert sorted(map(str, staged.excluded)) == sorted(map(str, serial.excluded))
    assert len(serial.excluded) == 5
    assert warehouse_tables(built["staged"].warehouse) == warehouse_tables(built["serial"].warehouse)
    assert_nowhere(built["staged"], SECRETS.values())
