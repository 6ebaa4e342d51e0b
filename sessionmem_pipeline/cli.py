"""`sessionmem`: the command line (INTERFACES.md). Exit 0 ok, 1 error, 2 usage.

Each command is a small function from parsed arguments to printed output; the work lives in stages/ (writing)
and client.py / status.py (reading).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sessionmem_pipeline.config import (
    USER_CONFIG,
    ConfigError,
    Settings,
    detect_source_roots,
    load_settings,
    render_config_file,
)
from sessionmem_pipeline.core.context import zone
from sessionmem_pipeline.core.errors import InvalidInputError, SessionMemoryError
from sessionmem_pipeline.warehouse import WarehouseError


class CommandError(RuntimeError):
    """A user-facing failure: printed as one line, exit 1."""


USER_ERRORS = (CommandError, ConfigError, WarehouseError, SessionMemoryError, ValueError, OSError)
"""Failures a person (or an agent, through the MCP server) can act on: reported as their one-line message."""


def _settings(args: argparse.Namespace, **flags: Any) -> Settings:
    return load_settings(args.config, {"warehouse": args.warehouse, **flags})


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


PROGRESS_FORMAT = (
    "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit}s, {elapsed} elapsed, about {remaining} left"
)


def local_time(moment: datetime | None, timezone: str) -> str:
    """A moment as people read it: `2026-05-11 10:27` in the configured zone (`?` when unknown; naive is UTC)."""
    if moment is None:
        return "?"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(zone(timezone)).strftime("%Y-%m-%d %H:%M")


def _progress_bar(enabled: bool) -> Callable[[str, int, int], None] | None:
    """A bar per stage on standard error with the time elapsed and an estimate of the time left, only for a
    person watching a terminal."""
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    bars: dict[str, Any] = {}

    def tick(stage: str, done: int, total: int) -> None:
        bar = bars.get(stage)
        if bar is None:
            bar = bars[stage] = tqdm(
                total=total, desc=stage, unit="file" if stage == "ingest" else "chunk", bar_format=PROGRESS_FORMAT
            )
        bar.total = max(total, done)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return tick


# ---- commands ------------------------------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    target = Path(args.config).expanduser() if args.config else Path.home() / USER_CONFIG.relative_to("~")
    if target.exists() and not args.force:
        raise CommandError(f"{target}: already exists; use --force to overwrite")
    roots = detect_source_roots(Path.home())
    warehouse = args.warehouse or str(Path.home() / ".local/share/sessionmem/sessionmem.duckdb")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_config_file(roots, warehouse), encoding="utf-8")
    found = ", ".join(str(r) for r in roots) or "none (add sources = [...] by hand)"
    print(f"wrote {target}; source roots found: {found}")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    settings = _settings(args)
    rows = settings.display()
    if args.json:
        _print_json({"config_file": settings.config_file, "values": {k: {"value": v, "origin": o} for k, v, o in rows}})
        return 0
    print(f"config file: {settings.config_file or 'none'}")
    width = max(len(k) for k, _, _ in rows)
    for key, value, origin in rows:
        print(f"{key:<{width}}  {value}  ({origin})")
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.stages.run import index_sources

    settings = _settings(args)
    sources = [Path(s) for s in args.source] if args.source else None
    roots = sources or list(settings.sources)
    if not roots:
        raise CommandError("no source roots: pass --source DIR or set `sources` in the config (`sessionmem init`)")
    if not any(Path(r).is_dir() for r in roots):  # some missing: a warning of the run (source problems)
        raise CommandError(f"source folder not found: {', '.join(str(r) for r in roots)}")
    since = _parse_date(args.since, settings) if args.since else None
    if args.validate_only:
        return _print_validation(roots, settings, since, args.json)
    report = index_sources(
        settings,
        sources=sources,
        session=args.session,
        full=args.full,
        since=since,
        progress=_progress_bar(not args.json),
    )
    if args.json:
        data = dict(vars(report))
        data["summary"] = report.summary_line()
        _print_json(data)
        return 0
    for item in report.quarantined:
        print(f"quarantined {item['path']}: {item['reason']}", file=sys.stderr)
    for problem in report.source_problems:
        print(f"warning: source problem: {problem['path']}: {problem['detail']}", file=sys.stderr)
    if report.excluded:
        print(f"{len(report.excluded)} kept out by privacy rules (sessionmem status)", file=sys.stderr)
    for warning in report.warnings[:20]:
        print(f"warning: {warning}", file=sys.stderr)
    if len(report.warnings) > 20:
        print(f"... and {len(report.warnings) - 20} more warnings (sessionmem status)", file=sys.stderr)
    for line in report.format_lines():
        print(line)
    if (batches := report.batch_line()) is not None:
        print(batches)
    print(report.summary_line())
    return 0


def cmd_reembed(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.stages.run import reembed

    report = reembed(_settings(args), progress=_progress_bar(not args.json))
    if args.json:
        _print_json({"embedded": report.embedded, "cached": report.embeddings_cached,
                     "failed": report.embedding_failures, "seconds": report.seconds})
    else:
        print(
            f"re-embedded {report.embedded + report.embeddings_cached} chunks ({report.embedded} computed, "
            f"{report.embeddings_cached} from the cache, {report.embedding_failures} failed) in {report.seconds:.1f}s"
        )
    return 0


def _print_validation(roots: list[Path], settings: Settings, since: datetime | None, as_json: bool) -> int:
    from sessionmem_pipeline.stages.run import validate_sources

    reports = validate_sources(roots, max_bad_share=settings["validation.max_bad_line_share"], since=since)
    if as_json:
        _print_json({"files": reports})
        return 0
    for report in reports:
        state = "valid" if report["valid"] else f"INVALID ({report.get('quarantine_reason')})"
        print(f"{report['path']}: {state}, {report['format'] or 'unknown format'}, {len(report['warnings'])} warnings")
        for line in report["errors"] + report["warnings"][:5]:
            print(f"  {line}")
    invalid = sum(not r["valid"] for r in reports)
    print(f"{len(reports)} files, {invalid} invalid; nothing was written")
    return 0


def _parse_date(value: str, settings: Settings) -> datetime:
    from sessionmem_pipeline.client import parse_moment

    try:
        return parse_moment(value, settings.timezone)
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def cmd_status(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.status import read_status

    settings = _settings(args)
    status = read_status(settings)
    if args.json:
        _print_json(status)
        return 0
    print(f"warehouse: {status['warehouse']} (reading {status['read_from']})")
    counts = status["counts"]
    print(
        f"sessions {counts['sessions']}, messages {counts['messages']}, chunks {counts['chunks']}, "
        f"embedded {counts['embedded']}, summaries {counts['summaries']}, files {counts['files']}"
    )
    if status["top_topics"]:
        print("top topics: " + ", ".join(f"{t['topic']} ({t['chunks']})" for t in status["top_topics"]))
    run = status["last_run"]
    if run:
        print(
            f"last run: {local_time(run['finished_at'], settings.timezone)} ({run['trigger']}, {run['status']}): "
            f"{run['sessions']} sessions, "
            f"{run['messages']} messages, {run['chunks']} chunks in {run['seconds']:.1f}s"
        )
    else:
        print("last run: never")
    for row in status["formats"]:
        what = f"{row['sessions']} sessions, {row['messages']} messages" if row["supported"] else "skipped: not supported"
        print(f"format {row['format']}: {row['files']} files, {what}")
    for reason, count in status["skipped_sessions"].items():
        print(f"skipped: {reason}: {count}")
    for item in status["quarantine"]:
        print(f"quarantined: {item['path']}: {item['reason']}")
    for problem in status["source_problems"]:
        print(f"source problem ({problem['kind']}): {problem['path']}: {problem['detail']}")
    for batch in status["provider_batches"]:
        print(
            f"provider batch {batch['batch_id'] or batch['local_id']} ({batch['stage']}): {batch['status']}, "
            f"{batch['requests']} requests for {batch['chunks']} chunks, sent {local_time(batch['created_at'], settings.timezone)}"
        )
    if status["excluded"]:
        print(f"kept out by privacy rules: {len(status['excluded'])} sessions (status --json lists them)")
    if status["seconds_per_session"] is not None:
        print(f"average index time per session: {status['seconds_per_session']:.3f}s")
    print(
        f"failed chunks {counts['embedding_failures']}, quarantined files {len(status['quarantine'])}, "
        f"storage {status['storage_mb']['warehouse']} MB (+ snapshot {status['storage_mb']['snapshot']} MB)"
    )
    searches = status["searches"]
    if searches["count"]:
        print(
            f"searches: {searches['count']} ({searches['last_24h']} in 24 h), mean {searches['mean_ms']} ms, "
            f"p50 {searches['p50_ms']} ms, p95 {searches['p95_ms']} ms"
        )
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.status import check_health

    state, reasons = check_health(_settings(args))
    if args.json:
        _print_json({"status": state, "reasons": reasons})
    else:
        print(state + (": " + "; ".join(reasons) if reasons else ""))
    return 1 if state == "ERROR" else 0


def _filter_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "after": args.after,
        "before": args.before,
        "speaker": args.speaker,
        "role": args.role,
        "topics": args.topic or None,
        "has_decision": True if args.has_decision else None,
        "has_action": True if args.has_action else None,
        "project": args.project,
        "session_id": args.session,
    }


def highlight(text: str, query: str, enabled: bool) -> str:
    """The query's words in bold (ANSI), for a person at a terminal."""
    words = sorted({w for w in re.findall(r"\w{3,}", query.lower())}, key=len, reverse=True)
    if not enabled or not words:
        return text
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, words)) + r")\w*", re.IGNORECASE)
    return pattern.sub(lambda m: f"\033[1m{m.group(0)}\033[0m", text)


def _print_listing(
    results: Sequence[Any],
    as_json: bool,
    show: Callable[[int, Any], None],
    notice: str | None = None,
    empty: str = "no results",
) -> None:
    """`{"results": [...]}` for machines; numbered entries (or what to do when there are none) for people. A
    search's notice (keyword-only results) is one line before the results, or a `notice` key."""
    if as_json:
        _print_json({"results": [r.to_dict() for r in results], **({"notice": notice} if notice else {})})
        return
    if notice:
        print(f"note: {notice}")
    if not results:
        print(empty)
    for number, result in enumerate(results, start=1):
        show(number, result)


def _print_results(
    results: Sequence[Any], as_json: bool, query: str, timezone: str, notice: str | None = None
) -> None:
    _print_listing(results, as_json, lambda number, result: _show_chunk(number, result, query, timezone), notice)


def _show_chunk(number: int, result: Any, query: str, timezone: str) -> None:
    when = local_time(result.timestamp, timezone)
    ids = ", ".join(result.message_ids[:4]) + (" …" if len(result.message_ids) > 4 else "")
    print(f"{number}. [{result.score:.4f}] {result.session_id} ({result.project}) {when}  messages: {ids}")
    if result.topics:
        print(f"   topics: {', '.join(result.topics)}")
    print(f"   {result.context}")
    bold = sys.stdout.isatty()
    for line in result.content.splitlines()[:8]:
        print(f"   | {highlight(line, query, bold)}")
    print()


def cmd_search(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.client import SessionMemory

    memory = SessionMemory(settings=_settings(args))
    filters = _filter_kwargs(args)
    try:
        window, source, _ = memory.time_window(args.query, after=filters["after"], before=filters["before"])
        results = memory.search(args.query, limit=args.limit, **filters)
    except InvalidInputError:
        raise  # exit 2, as every command's invalid input
    except ValueError as exc:  # a date the time window could not read
        raise CommandError(str(exc)) from None
    understood = window.to_dict(source) if window else None
    if not memory.indexed and not args.json:
        print("nothing indexed yet: run `sessionmem index` (or wait for the first run to finish)", file=sys.stderr)
    notice = {"notice": memory.notice} if memory.notice else {}
    if args.json:
        _print_json({"time_window": understood, "results": [r.to_dict() for r in results], **notice})
        return 0
    if understood:
        verb = "filter" if source == "flag" else "boost (named in the query)"
        print(f"time window ({verb}): {understood['after'] or '…'} → {understood['before'] or 'now'}\n")
    _print_results(results, False, args.query, memory.settings.timezone, memory.notice)
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.stages.run import forget

    forgotten = forget(_settings(args), session_id=args.session_id, project=args.project)
    if args.json:
        _print_json({"forgotten": forgotten})
    else:
        print(f"forgot {len(forgotten)} session(s): {', '.join(forgotten[:10])}{' …' if len(forgotten) > 10 else ''}")
    return 0


def cmd_sessions(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.status import list_sessions

    settings = _settings(args)
    sessions = list_sessions(settings, project=args.project, with_summaries=args.summaries)
    if args.json:
        _print_json({"sessions": sessions})
        return 0
    if not sessions:
        print("no sessions yet: run `sessionmem index`")
    tz = settings.timezone
    for s in sessions:
        print(
            f"{s['session_id']}  {s['project']}  {local_time(s['started_at'], tz)} → "
            f"{local_time(s['ended_at'], tz)}  "
            f"{s['message_count']} messages, summary v{s['summary_version'] or '-'}"
        )
        for version in s.get("summaries", []):
            print(
                f"  v{version['version']} {local_time(version['created_at'], tz)} {version['model']} "
                f"{'incremental' if version['is_incremental'] else 'full'}, messages {version['first_message_id']}"
                f"…{version['last_message_id']} ({version['message_count']}): {version['overview'][:100]}"
            )
    return 0


def cmd_search_sessions(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.client import SessionMemory

    memory = SessionMemory(settings=_settings(args))
    filters = {k: v for k, v in _filter_kwargs(args).items() if k in ("after", "before", "project", "session_id", "topics")}
    def show(n: int, r: Any) -> None:
        span = local_time(r.started_at, memory.settings.timezone)
        print(f"{n}. [{r.score:.4f}] {r.session_id} ({r.project}) {span}, {r.message_count} messages, v{r.version}")
        print(f"   {r.summary}")
        if r.decisions:
            print(f"   decisions: {'; '.join(r.decisions[:3])}")
        print()

    _print_listing(memory.search_sessions(args.query, limit=args.limit, **filters), args.json, show, memory.notice)
    return 0


def cmd_recall(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.client import SessionMemory

    memory = SessionMemory(settings=_settings(args))
    results = memory.recall(args.query, sessions=args.sessions, limit=args.limit, **_filter_kwargs(args))
    _print_results(results, args.json, args.query, memory.settings.timezone, memory.notice)
    return 0


def cmd_memories(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.client import SessionMemory

    memory = SessionMemory(settings=_settings(args))
    results = memory.search_memories(args.query, limit=args.limit)
    hint = 'no memories match: add one with `sessionmem remember "TEXT"` (agents: the MCP tool `remember`)'

    def show(n: int, r: Any) -> None:
        print(f"{n}. [{r.score:.4f}] {r.memory_id}: {r.content}")

    _print_listing(results, args.json, show, memory.notice, hint)
    return 0


def cmd_remember(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.client import SessionMemory

    entry = SessionMemory(settings=_settings(args)).remember(
        args.text, importance=args.importance, session_id=args.session
    )
    if args.json:
        _print_json(entry)
    else:
        print(f"remembered {entry['id']}: {entry['content']} (searchable now: sessionmem memories QUERY)")
    return 0


TIMELINE_DECISIONS = 3  # per session in the human output; --json has them all


def cmd_timeline(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.client import SessionMemory
    from sessionmem_pipeline.core.timeline import format_duration

    memory = SessionMemory(settings=_settings(args))
    try:
        days = memory.timeline(after=args.after, before=args.before, project=args.project)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if args.json:
        _print_json({"timezone": memory.settings.timezone, "days": [day.to_dict() for day in days]})
        return 0
    if not days:
        window = "the last 7 days" if args.after is None and args.before is None else "that time"
        print(f"no sessions in {window}: widen it with e.g. --after 'last month'" + (
            "" if memory.indexed else " (nothing indexed yet: run `sessionmem index`)"))
    tz = zone(memory.settings.timezone)
    for day in days:
        print(f"{day.day:%A %Y-%m-%d}")
        for s in day.sessions:
            gone = "  (transcript file gone)" if s.source_missing else ""
            print(
                f"  {s.started_at.astimezone(tz):%H:%M}  {s.project or '?'}  {s.agent}  {format_duration(s.duration)}, "
                f"{s.message_count} messages  {s.session_id}{gone}"
            )
            if s.summary:
                print(f"         {textwrap.shorten(s.summary, 160, placeholder=' …')}")
            for decision in s.decisions[:TIMELINE_DECISIONS]:
                print(f"         decided: {textwrap.shorten(decision, 140, placeholder=' …')}")
            if len(s.decisions) > TIMELINE_DECISIONS:
                print(f"         … and {len(s.decisions) - TIMELINE_DECISIONS} more decisions (--json lists them)")
        print()
    return 0


def cmd_summarize(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.stages.run import summarize_now

    version, summary, written, fallback = summarize_now(_settings(args), args.session, full=args.full)
    if fallback:
        print(f"warning: the chat model failed, the extractive summary was used: {fallback}", file=sys.stderr)
    if args.json:
        _print_json({"session_id": args.session, "version": version, "new_version": written, **summary.to_dict()})
        return 0
    print(f"{args.session}: summary v{version} ({'new version' if written else 'unchanged'})")
    print(summary.to_markdown())
    return 0


def cmd_recap(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.client import SessionMemory
    from sessionmem_pipeline.core.recap import render_handoff

    memory = SessionMemory(settings=_settings(args))
    session = memory.latest_session(session_id=args.session, project=args.project)
    recap = memory.recap(session_id=session["session_id"], budget=args.budget)
    if args.write:
        folder = Path(args.write)
        folder.mkdir(parents=True, exist_ok=True)
        handoff = render_handoff(
            recap, session_id=session["session_id"], project=session["project"], ended_at=session["ended_at"]
        )
        written = folder / "_handoff.md"
        written.write_text(handoff, encoding="utf-8")
        print(f"wrote {written}", file=sys.stderr)
    if args.json:
        _print_json({
            "written": str(written) if args.write else None,
            "session_id": recap.session_id, "text": recap.text, "token_count": recap.token_count,
            "ended_abruptly": recap.ended_abruptly,
            "lines": [{"text": line.text, "message_ids": list(line.message_ids), "section": line.section}
                      for line in recap.lines],
        })
    else:
        print(recap.text)
    return 0


def record_compaction(warehouse: Path, path: Path, result: Any) -> None:
    """Spec 002's audit trail: one line per compaction beside the warehouse (the source file is never touched)."""
    from datetime import UTC

    stats = result.stats
    line = {
        "time": datetime.now(UTC).isoformat(),
        "file": str(path.resolve()),
        "session_id": result.metadata.session_id,
        "compacted": result.compacted,
        "messages_before": stats.messages_before,
        "messages_after": stats.messages_after,
        "tokens_saved": stats.tokens_saved,
    }
    warehouse.parent.mkdir(parents=True, exist_ok=True)
    with open(warehouse.with_name("compaction-log.jsonl"), "a", encoding="utf-8") as log:
        log.write(json.dumps(line) + "\n")


def cmd_compact(args: argparse.Namespace) -> int:
    from datetime import UTC

    from sessionmem_pipeline.core.compact import (
        SummarizationConfig,
        compact,
        parse_transcript,
        render_context,
        render_stats_box,
    )
    from sessionmem_pipeline.providers import chat_model_from_settings

    path = Path(args.file)
    session = parse_transcript(str(path), path.read_bytes())
    config = SummarizationConfig(trigger_threshold=0, preserve_recent=args.preserve_recent,
                                 target_compression=args.target)
    settings = _settings(args)
    result = compact(session.messages, config, llm=chat_model_from_settings(settings), now=datetime.now(UTC))
    record_compaction(settings.warehouse, path, result)
    if args.json:
        _print_json(result.as_json())
        return 0
    print(render_stats_box(result))
    print()
    print(render_context(result))
    return 0


def cmd_threads(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.client import SessionMemory

    threads = SessionMemory(settings=_settings(args)).threads(project=args.project)
    if args.json:
        _print_json({"threads": threads})
        return 0
    if not threads:
        print("no threads")
    for thread in threads:
        print(f"{thread['thread_id']} ({thread['project']}): {thread['title']}")
        for session_id in thread["session_ids"]:
            print(f"  - {session_id}")
    return 0


def cmd_hook(args: argparse.Namespace) -> int:
    """Claude Code's SessionStart hook: the recap of this project's previous session as added context.

    Never blocks the agent: any failure (no warehouse yet, no earlier session, bad payload) prints nothing and
    exits 0."""
    try:
        payload = json.loads(sys.stdin.read() or "{}")
        from sessionmem_pipeline.client import SessionMemory

        memory = SessionMemory(settings=_settings(args))
        cwd = payload.get("cwd") or str(Path.cwd())
        previous = memory.latest_session(project=Path(cwd).name, exclude=payload.get("session_id"))
        recap = memory.recap_text(previous["session_id"], budget=args.budget)
    except Exception:  # noqa: BLE001 (a hook must never break the session it runs in)
        return 0
    context = f"Recap of the previous session in this project ({previous['session_id']}):\n\n{recap}"
    print(json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": context}}))
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.client import SessionMemory
    from sessionmem_pipeline.mcp import serve

    serve(SessionMemory(settings=_settings(args)))
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.status import session_history

    settings = _settings(args)
    history = session_history(settings, args.session, full=args.full)
    if args.json:
        _print_json(history)
        return 0
    for version in history["summaries"]:
        who = "the agent's own compaction" if version["source"] == "agent" else f"v{version['version']}"
        print(f"## Summary {who} (messages {version['first_message_id']}…{version['last_message_id']})")
        print(version["markdown"])
        print()
    if not history["messages"]:
        print("No messages after the latest summary." if history["summaries"] else "No messages.")
        return 0
    print(f"## Messages{' (all)' if args.full else ' since the latest summary'}")
    for message in history["messages"]:
        when = local_time(message["timestamp"], settings.timezone) if message["timestamp"] else ""
        print(f"[{message['message_id']}] {when} {message['speaker']}: {message['text']}")
    return 0


# ---- parser ---------------------------------------------------------------------------------------------------


def _common(parser: argparse.ArgumentParser, *, json_flag: bool) -> None:
    parser.add_argument("--warehouse", help="DuckDB warehouse file (default: from the configuration)")
    parser.add_argument("--config", help="config file (default: ./sessionmem.toml, ~/.config/sessionmem/config.toml)")
    if json_flag:
        parser.add_argument("--json", action="store_true", help="machine-readable output")
    else:
        parser.set_defaults(json=False)


def _filters(parser: argparse.ArgumentParser) -> None:
    _dates(parser)
    parser.add_argument("--speaker", help="chunks with a message from this speaker")
    parser.add_argument("--role", choices=("user", "assistant"), help="chunks with a message in this role")
    parser.add_argument("--topic", action="append", help="topic tag (repeatable; any of them matches)")
    parser.add_argument("--has-decision", action="store_true", help="only chunks in which something was decided")
    parser.add_argument("--has-action", action="store_true", help="only chunks with an action item")
    _project(parser)
    parser.add_argument("--session", help="only this session (its id)")


def _dates(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--after", help="inclusive: ISO date/datetime or e.g. yesterday, 'last week', 'in March'")
    parser.add_argument("--before", help="exclusive: ISO date/datetime or e.g. today, 'two days ago', 'since Monday'")


def _project(parser: argparse.ArgumentParser, what: str = "only sessions of this project") -> None:
    parser.add_argument("--project", help=f"{what} (the working folder's name, see `sessionmem sessions`)")


def _limit(parser: argparse.ArgumentParser, default: int, what: str = "results") -> None:
    parser.add_argument("--limit", type=int, default=default, help=f"at most this many {what} (default {default})")


def _budget(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--budget", type=int, default=800, help="the recap's size in tokens at most (default 800)")


EXAMPLES: dict[str, str] = {
    "init": "sessionmem init\nsessionmem init --force --warehouse ~/memory/sessionmem.duckdb",
    "config": "sessionmem config\nsessionmem config --json",
    "index": "sessionmem index\nsessionmem index --source ~/.claude/projects --since 'last month'",
    "reembed": "sessionmem reembed",
    "status": "sessionmem status\nsessionmem status --json",
    "health": "sessionmem health && echo memory is fine",
    "search": 'sessionmem search "why did checkout fail with a gift card"\n'
              'sessionmem search "retry queue" --after "last week" --has-decision --project webshop',
    "search-sessions": 'sessionmem search-sessions "newsletter cadence"\n'
                       'sessionmem search-sessions "database migration" --after 2026-03-01',
    "recall": 'sessionmem recall "how do we deploy"\nsessionmem recall "flaky tests" --sessions 5 --limit 10',
    "memories": 'sessionmem memories "deploy day"\nsessionmem memories "code style" --json',
    "remember": 'sessionmem remember "Deploys go out on Tuesdays only."\n'
                'sessionmem remember "Use ruff, not flake8" --importance 0.8',
    "timeline": "sessionmem timeline\nsessionmem timeline --after 'last month' --project webshop",
    "summarize": "sessionmem summarize 019ce3a1-4b7c-7e20-9a31-5c6d7e8f9012\n"
                 "sessionmem summarize 019ce3a1-4b7c-7e20-9a31-5c6d7e8f9012 --full",
    "recap": "sessionmem recap --project webshop\nsessionmem recap --project webshop --write ~/code/webshop",
    "compact": "sessionmem compact ~/.claude/projects/-home-me-webshop/SESSION.jsonl --target 0.2",
    "history": "sessionmem history 019ce3a1-4b7c-7e20-9a31-5c6d7e8f9012\n"
               "sessionmem history 019ce3a1-4b7c-7e20-9a31-5c6d7e8f9012 --full",
    "hook": "echo '{\"cwd\": \"/home/me/webshop\"}' | sessionmem hook session-start",
    "mcp": "claude mcp add sessionmem -- sessionmem mcp",
    "threads": "sessionmem threads\nsessionmem threads --project webshop --json",
    "forget": "sessionmem forget 019ce3a1-4b7c-7e20-9a31-5c6d7e8f9012\nsessionmem forget --project acme-client",
    "sessions": "sessionmem sessions --project webshop\nsessionmem sessions --summaries --json",
}
"""Each command's `--help` ends with these."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sessionmem")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sessionmem",
        description="Searchable, summarized memory of agent sessions.",
        epilog="examples:\n  sessionmem init && sessionmem index\n  sessionmem timeline\n\n"
               "`sessionmem COMMAND --help` explains a command.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"sessionmem {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Callable[[argparse.Namespace], int], help_text: str, *, json_flag: bool = True):
        examples = "\n".join(f"  {line}" for line in EXAMPLES[name].splitlines())
        sub = commands.add_parser(
            name, help=help_text, description=help_text, epilog=f"examples:\n{examples}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _common(sub, json_flag=json_flag)
        sub.set_defaults(handler=handler)
        return sub

    init = command("init", cmd_init, "write a config file with the detected source roots", json_flag=False)
    init.add_argument("--force", action="store_true", help="overwrite an existing config file")
    command("config", cmd_config, "the effective configuration and where each value came from")
    index = command("index", cmd_index, "run the whole pipeline in-process on the source roots")
    index.add_argument("--source", action="append", help="a source root (repeatable; default: configured sources)")
    index.add_argument("--session", help="only the file holding this session id")
    index.add_argument("--full", action="store_true", help="re-index everything, unchanged files too")
    index.add_argument("--validate-only", action="store_true", help="print each file's validation report; write nothing")
    index.add_argument("--since", help="only files written on or after this date (a first import of a long history)")
    command("reembed", cmd_reembed, "re-embed every chunk with the configured embedding model")
    command("status", cmd_status, "sessions, messages, chunks, quarantined files, last run, search metrics")
    command("health", cmd_health, "OK / DEGRADED / ERROR with reasons (exit 1 on ERROR)")
    search = command("search", cmd_search, "search conversation chunks")
    search.add_argument("query", help="what to look for, in words; a date in it (e.g. 'last week') boosts that time")
    _limit(search, 5)
    _filters(search)
    search_sessions = command("search-sessions", cmd_search_sessions, "search sessions by their summaries")
    search_sessions.add_argument("query", help="what the sessions were about")
    _limit(search_sessions, 3, "sessions")
    _filters(search_sessions)
    recall = command("recall", cmd_recall, "two-stage retrieval: best sessions by summary, then their chunks")
    recall.add_argument("query", help="a broad question about past work")
    recall.add_argument("--sessions", type=int, default=3, help="how many best sessions to look inside (default 3)")
    _limit(recall, 5)
    _filters(recall)
    memories = command("memories", cmd_memories, "search curated memories (what you or agents chose to remember)")
    memories.add_argument("query", help="what to look for")
    _limit(memories, 5, "memories")
    remember = command("remember", cmd_remember, "keep a fact for later sessions; searchable at once with `memories`")
    remember.add_argument("text", help="the fact to keep (secrets are redacted, <private> spans removed)")
    remember.add_argument("--importance", type=float, help="0 to 1; ranks equally good matches (default none)")
    remember.add_argument("--session", help="the session this memory comes from (its id)")
    timeline = command("timeline", cmd_timeline, "what you did, day by day (default: the last 7 days)")
    _dates(timeline)
    _project(timeline)
    summarize = command("summarize", cmd_summarize, "summarize one session now (a new version if its input changed)")
    summarize.add_argument("session", help="the session's id (see `sessionmem sessions`)")
    summarize.add_argument("--full", action="store_true", help="regenerate from the start instead of incrementally")
    recap = command("recap", cmd_recap, "recap of the latest (or given) session for a handoff")
    recap.add_argument("--session", help="recap this session (default: the latest one)")
    _project(recap, "the latest session of this project")
    _budget(recap)
    recap.add_argument("--write", metavar="DIR", help="also write DIR/_handoff.md (its path is printed)")
    compact_cmd = command("compact", cmd_compact, "live-context compaction of a transcript file")
    compact_cmd.add_argument("file", help="a transcript file (read, never changed)")
    compact_cmd.add_argument("--preserve-recent", type=int, default=10, help="messages kept verbatim (default 10)")
    compact_cmd.add_argument("--target", type=float, default=0.3, help="summary/replaced token ratio (default 0.3)")
    history = command("history", cmd_history, "a session as its summaries plus the messages after them")
    history.add_argument("session", help="the session's id (see `sessionmem sessions`)")
    history.add_argument("--full", action="store_true", help="every summary version and every message")
    hook = command("hook", cmd_hook, "agent hooks: `session-start` prints the previous session's recap", json_flag=False)
    hook.add_argument("event", choices=("session-start",), help="the hook event (Claude Code's SessionStart)")
    _budget(hook)
    command("mcp", cmd_mcp, "serve the agent tools over MCP (stdio)", json_flag=False)
    threads = command("threads", cmd_threads, "threads of related sessions")
    _project(threads)
    forget = command(
        "forget", cmd_forget, "remove a session, or every session of a project, from memory (sources untouched)"
    )
    forget.add_argument("session_id", nargs="?", help="the session to forget")
    _project(forget, "forget every session of this project")
    sessions = command("sessions", cmd_sessions, "list sessions")
    _project(sessions)
    sessions.add_argument("--summaries", action="store_true", help="with each session's summary versions")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except BrokenPipeError:  # the reader (head, less) went away: not an error
        sys.stderr.close()
        return 0
    except InvalidInputError as exc:
        print(f"sessionmem {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except USER_ERRORS as exc:
        print(f"sessionmem {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"sessionmem {args.command}: interrupted; committed work is kept, run it again to finish", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
