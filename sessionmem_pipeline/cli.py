"""`sessionmem`: the command line (INTERFACES.md). Exit 0 ok, 1 error, 2 usage.

Each command is a small function from parsed arguments to printed output; the work lives in stages/ (writing)
and client.py / status.py (reading).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
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
from sessionmem_pipeline.warehouse import WarehouseError


class CommandError(RuntimeError):
    """A user-facing failure: printed as one line, exit 1."""


def _settings(args: argparse.Namespace, **flags: Any) -> Settings:
    return load_settings(args.config, {"warehouse": args.warehouse, **flags})


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def _progress_bar(enabled: bool) -> Callable[[str, int, int], None] | None:
    """A tqdm bar per stage on standard error, only for a person watching a terminal."""
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    bars: dict[str, Any] = {}

    def tick(stage: str, done: int, total: int) -> None:
        bar = bars.get(stage)
        if bar is None:
            bar = bars[stage] = tqdm(total=total, desc=stage, unit="file" if stage == "ingest" else "chunk")
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
    missing = [str(r) for r in roots if not Path(r).is_dir()]
    if missing:
        raise CommandError(f"source folder not found: {', '.join(missing)}")
    since = _parse_date(args.since, settings) if args.since else None
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
    for warning in report.warnings[:20]:
        print(f"warning: {warning}", file=sys.stderr)
    if len(report.warnings) > 20:
        print(f"... and {len(report.warnings) - 20} more warnings (sessionmem status)", file=sys.stderr)
    for line in report.format_lines():
        print(line)
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


def _parse_date(value: str, settings: Settings) -> datetime:
    from sessionmem_pipeline.client import parse_moment

    try:
        return parse_moment(value, settings.timezone)
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def cmd_status(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.status import read_status

    status = read_status(_settings(args))
    if args.json:
        _print_json(status)
        return 0
    print(f"warehouse: {status['warehouse']} (reading {status['read_from']})")
    counts = status["counts"]
    print(
        f"sessions {counts['sessions']}, messages {counts['messages']}, chunks {counts['chunks']}, "
        f"embedded {counts['embedded']}, summaries {counts['summaries']}, files {counts['files']}"
    )
    run = status["last_run"]
    if run:
        print(
            f"last run: {run['finished_at']} ({run['trigger']}, {run['status']}): {run['sessions']} sessions, "
            f"{run['messages']} messages, {run['chunks']} chunks in {run['seconds']:.1f}s"
        )
    else:
        print("last run: never")
    for item in status["quarantine"]:
        print(f"quarantined: {item['path']}: {item['reason']}")
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


def _print_results(results: Sequence[Any], as_json: bool, query: str = "") -> None:
    if as_json:
        _print_json({"results": [r.to_dict() for r in results]})
        return
    if not results:
        print("no results")
    for number, result in enumerate(results, start=1):
        when = result.timestamp.strftime("%Y-%m-%d %H:%M") if result.timestamp else "?"
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
    _print_results(memory.search(args.query, limit=args.limit, **_filter_kwargs(args)), args.json, args.query)
    return 0


def cmd_sessions(args: argparse.Namespace) -> int:
    from sessionmem_pipeline.status import list_sessions

    sessions = list_sessions(_settings(args), project=args.project)
    if args.json:
        _print_json({"sessions": sessions})
        return 0
    for s in sessions:
        print(
            f"{s['session_id']}  {s['project']}  {s['started_at'] or '?'} → {s['ended_at'] or '?'}  "
            f"{s['message_count']} messages"
        )
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
    parser.add_argument("--after", help="ISO date or datetime, inclusive")
    parser.add_argument("--before", help="ISO date or datetime, exclusive")
    parser.add_argument("--speaker", help="chunks with a message from this speaker")
    parser.add_argument("--role", choices=("user", "assistant"))
    parser.add_argument("--topic", action="append", help="topic tag (repeatable; any of them matches)")
    parser.add_argument("--has-decision", action="store_true")
    parser.add_argument("--has-action", action="store_true")
    parser.add_argument("--project")
    parser.add_argument("--session", help="session id")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sessionmem", description="Searchable, summarized memory of agent sessions.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Callable[[argparse.Namespace], int], help_text: str, *, json_flag: bool = True):
        sub = commands.add_parser(name, help=help_text, description=help_text)
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
    index.add_argument("--since", help="only files written on or after this date (a first import of a long history)")
    command("reembed", cmd_reembed, "re-embed every chunk with the configured embedding model")
    command("status", cmd_status, "sessions, messages, chunks, quarantined files, last run, search metrics")
    command("health", cmd_health, "OK / DEGRADED / ERROR with reasons (exit 1 on ERROR)")
    search = command("search", cmd_search, "search conversation chunks")
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=5)
    _filters(search)
    sessions = command("sessions", cmd_sessions, "list sessions")
    sessions.add_argument("--project")
    sessions.add_argument("--summaries", action="store_true", help="with each session's summary versions")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (CommandError, ConfigError, WarehouseError, ValueError, OSError) as exc:
        print(f"sessionmem {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"sessionmem {args.command}: interrupted; committed work is kept, run it again to finish", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
