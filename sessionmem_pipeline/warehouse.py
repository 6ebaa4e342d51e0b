"""The DuckDB warehouse: the only code that knows the schema.

Opening a file always goes through an in-memory connection that LOADs vss (and fts) from their PyPI packages,
enables HNSW persistence and then ATTACHes the file: a connection without VSS would replay the write-ahead log
without the HNSW index and silently lose index entries. After ATTACH the file is `USE`d, because the FTS
extension's `create_fts_index` and `match_bm25` only work on the default database.

Writers: one at a time (`writer_lock`, shared by `sessionmem index` and Dagster runs, on top of the Dagster pool
`duckdb_warehouse`). Readers never open the live file: they open the snapshot `publish_snapshot` writes at the
end of every run that changed data.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import importlib.util
import itertools
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from sessionmem_pipeline.core.changes import IndexedState
from sessionmem_pipeline.core.models import Chunk, CollapsedMessage, Message, ToolCall, ToolRecord

if TYPE_CHECKING:
    import pyarrow as pa  # imported by the writer only (insert): readers do not pay for it


class _KnownMissing:
    """An import finder that answers "not installed" at once for a module known to be missing.

    DuckDB's Python client tries `import pandas` for every bound parameter; without pandas installed each try
    searches the whole import path again (~0.1 ms, a fifth of an ingest commit's CPU). This finder, first on
    `sys.meta_path`, gives the same answer without the search (unlike a `None` in `sys.modules`, which pyarrow
    reads as an installed module)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname == self.name:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)


def _remember_missing(name: str) -> None:
    if name not in sys.modules and importlib.util.find_spec(name) is None:
        sys.meta_path.insert(0, _KnownMissing(name))


_remember_missing("pandas")

DATABASE = "wh"
SCHEMA_VERSION = 14
KEYWORD_IGNORE = r"(\.|[^a-z0-9])+"
"""What the BM25 tokenizer drops: DuckDB's fts default also drops digits, which loses order numbers, error codes,
ports and versions, the things people search their sessions for."""
PREVIOUS_CHARS = 400
"""Characters of the chunk before that each chunk's BM25 document holds (see KEYWORD_CORPORA); chosen per
cross-validation direction by benchmarks/retrieval.py --tune (0, 200, 400 and 800: 400 is among the best on
both conversations, 800 ties on one)."""
BM25_K = 1.2
BM25_B = 0.75


def tokens_sql(text: str) -> str:
    """The words of a SQL text expression, as DuckDB's fts extension splits them (lower case, accents stripped)."""
    return f"string_split_regex(regexp_replace(lower(strip_accents(CAST({text} AS VARCHAR))), '{KEYWORD_IGNORE}', ' ', 'g'), '\\s+')"


def content_key(*expressions: str) -> str:
    """A BIGINT key derived from what a row holds (not from the order rows were written in), so an index built
    by many small updates is row for row the one built from scratch."""
    return f"(hash({', '.join(expressions)}) >> 1)::BIGINT"


@dataclass(frozen=True)
class KeywordCorpus:
    """One BM25 index: `documents` selects (doc_id, session_id, text) from the rows `{scope}` keeps."""

    documents: str
    scope_column: str | None = "session_id"


KEYWORD_CORPORA = {
    "chunks": KeywordCorpus(
        """SELECT chunk_id AS doc_id, session_id, concat_ws(' ', context_content,
                   right(lag(content) OVER (PARTITION BY session_id ORDER BY chunk_index), {previous_chars})) AS text
            FROM chunks WHERE {scope}"""
    ),
    "summaries": KeywordCorpus("SELECT summary_id AS doc_id, session_id, search_text AS text FROM session_summaries WHERE {scope}"),
    "memories": KeywordCorpus("SELECT memory_id AS doc_id, session_id, content AS text FROM memories WHERE {scope}", None),
}
"""One BM25 document per chunk: its contextual prefix and text, and the end of the chunk before it in its session
(the message it answers: "How was the trip?" names what the reply "We hiked and roasted marshmallows" is about).
Measured on LoCoMo dev (benchmarks/retrieval.py), hybrid recall within 10 turns 0.728 -> 0.80. Summaries (every
version) and curated memories have their own corpora."""
VECTOR_BASE = "chunk_embeddings_base"
VECTOR_DELTA = "chunk_embeddings_delta"
VECTOR_INDEX = "chunk_embeddings_hnsw"
VECTOR_DELTA_MAX = 5_000
"""New vectors searched exactly (about 2 ms per 1,000 at 384 d) before they join the HNSW base."""
VECTOR_REBUILD_SHARE = 0.5
HNSW_DELETED_SHARE = 0.1
EARLIER_SUMMARIES = """session_summaries v JOIN sessions s
      ON s.session_id = v.session_id AND s.summary_version = v.version
    WHERE v.embedding IS NOT NULL AND s.project = {project} AND s.session_id <> {session}
      AND coalesce(s.ended_at, s.started_at) <= coalesce({start}::TIMESTAMPTZ, now())"""
"""The summaries a recap counts as its project's earlier sessions (the latest version of each other session of the
project that ended by the recapped session's start, with a vector), for `project`, `session` and `start` given as
SQL: one rule for the recap (earlier_summary_vectors) and its fingerprint (recap_fingerprints)."""
REBUILD_GROWTH = 1.3
"""The file is rebuilt once it is this much larger than its rows need (Warehouse.finish): DuckDB reuses freed
blocks but never returns them, a run's checkpoint leaves its tables' last blocks partly used, and the first
index's early checkpoints fix each column's compression while it holds a few rows."""
REBUILD_MIN_EXCESS = 2 << 20
"""Nor is it rebuilt for less. A run's checkpoint rewrites the last segment of every column it appended to, and
in a small warehouse that is most of each table: about 7 MB of 256 KB blocks at 1k chunks, half of a 13 MB file
(reused by the next run, but never returned). So until the data needs about 23 MB (some 4k chunks) a run that
adds data is followed by a rebuild (0.6 s at 1k chunks: benchmarks/incremental.py; more near 4k), which keeps the
file within REBUILD_GROWTH of its data at every size (issue 15); from ~10k chunks up the churn is under the bound
and rebuilds are rare. (8 MB kept small files 1.6x their data.)"""
REBUILD_FIXED_BYTES = 6 << 20
"""What a compact warehouse with any data holds whatever its rows (every table's first blocks; 6.0 MB with one
session), not scaled with the rows."""
REBUILD_ROWS_GROWTH = 2.0
"""Once the rows have grown this much since the last rebuild (a first index, a large import), their need is not
known from it: the file is rebuilt (and measured). One rebuild per doubling copies each row about twice in all."""
SIZE_TABLES = ("messages", "chunks", "chunk_embeddings", "kw_postings")
COMMON_TERM_SHARE = 0.05
"""Query terms in more documents than this share are scored only where a rarer term is (see keyword_search)."""
SCORE_UNIT = 1e-12
"""keyword_search adds each term's BM25 score as a whole number of these: integer sums do not depend on the order
of their terms, so a document scores the same to the last bit whichever plan (pruned or not) read its postings."""
SCORE_SLACK = 1e-9
"""Added to keyword_search's score bounds (a rounded term score may pass the exact bound by half a SCORE_UNIT)."""
STALE_NARROW_MAX = 200
"""Past this many upstream rows recorded since a stage's clean mark, one join over every session finds the stale
ones sooner than a lookup of those sessions' rows (Warehouse.stale_sessions)."""
KEYWORD_RESORT_SHARE = 0.1
"""Postings are stored sorted by term, so a query reads only the row groups of its terms (zone maps); rows
appended since the last sort are read whole, and once they pass this share of all postings the table is re-sorted."""
KEYWORD_DEAD_SHARE = 0.02
"""A document whose text changed or went is only marked dead (`kw_dead`: searches skip its postings and take them
out of their terms' document frequencies); once dead documents pass this share of the live ones, their postings
are dropped in one pass over the postings. A document whose session was ingested again under another ingest key
(new redaction rules or privacy settings) loses its postings at once: no word the old rules let through stays."""


class WarehouseError(RuntimeError):
    """The warehouse cannot be used as asked; the message says which file and what to do."""


class WarehouseBusyError(WarehouseError):
    """Another writer (a `sessionmem index` or a Dagster run) holds the warehouse."""


# ---- extensions --------------------------------------------------------------------------------------------


def extension_path(name: str) -> Path:
    """The extension file shipped by the `duckdb-extension-<name>` package for this DuckDB version."""
    module = __import__(f"duckdb_extension_{name}")
    folder = Path(module.__file__).parent / "extensions" / f"v{duckdb.__version__}"
    path = folder / f"{name}.duckdb_extension"
    if not path.is_file():
        raise WarehouseError(
            f"{path}: DuckDB extension '{name}' for duckdb {duckdb.__version__} not found; "
            f"install duckdb-extension-{name}=={duckdb.__version__}"
        )
    return path


EXTENSIONS = ("vss", "fts")
_verified_extensions: set[str] = set()
"""The extensions this process has loaded once with DuckDB's signature check. The check hashes the 44 MB of
extension files again in every new connection (170 ms of CPU: each writer step of a Dagster run opens one);
once both were verified, later connections in the process load the same files without it."""


def _extension_connection(*, extensions: bool = True) -> duckdb.DuckDBPyConnection:
    config = {"autoinstall_known_extensions": False, "autoload_known_extensions": False,
              "allow_unsigned_extensions": _verified_extensions.issuperset(EXTENSIONS)}
    conn = duckdb.connect(":memory:", config=config)
    if extensions:
        load_extensions(conn)
    return conn


def load_extensions(conn: duckdb.DuckDBPyConnection, names: Sequence[str] = EXTENSIONS) -> None:
    """Load vss (the HNSW index) and fts (`stem`) into a connection, also after a file was attached without them
    (its HNSW index is bound on first use): readers that need neither skip about 0.2 s of loading."""
    for name in names:
        conn.execute(f"LOAD '{extension_path(name)}'")
        _verified_extensions.add(name)
    if "vss" in names:
        conn.execute("SET hnsw_enable_experimental_persistence = true")


# ---- schema ------------------------------------------------------------------------------------------------

# Each migration takes the schema from version n-1 to n. Never edit a released migration: add one.
MIGRATIONS: dict[int, list[str]] = {
    1: [
        "CREATE TABLE meta (key VARCHAR, value VARCHAR)",
        """CREATE TABLE source_files (
            path VARCHAR, partition_key VARCHAR, source_root VARCHAR, format VARCHAR, size BIGINT,
            mtime_ns BIGINT, sha256 VARCHAR, consumed_bytes BIGINT, prefix_sha256 VARCHAR, status VARCHAR,
            session_ids VARCHAR[], message_count INTEGER, lines_read INTEGER, warning_count INTEGER,
            skipped JSON, last_indexed_at TIMESTAMPTZ)""",
        """CREATE TABLE quarantine (
            path VARCHAR, partition_key VARCHAR, reason VARCHAR, details VARCHAR, sha256 VARCHAR, size BIGINT,
            quarantined_at TIMESTAMPTZ)""",
        "CREATE TABLE parse_warnings (path VARCHAR, line INTEGER, reason VARCHAR, recorded_at TIMESTAMPTZ)",
        """CREATE TABLE sessions (
            session_id VARCHAR, partition_key VARCHAR, project VARCHAR, source_path VARCHAR, format VARCHAR,
            title VARCHAR, parent_session_id VARCHAR, cwd VARCHAR, git_branch VARCHAR, model VARCHAR,
            started_at TIMESTAMPTZ, ended_at TIMESTAMPTZ, message_count INTEGER, first_request VARCHAR,
            speakers VARCHAR[], metadata JSON, indexed_at TIMESTAMPTZ)""",
        """CREATE TABLE messages (
            session_id VARCHAR, seq INTEGER, message_id VARCHAR, role VARCHAR, kind VARCHAR, speaker VARCHAR,
            timestamp TIMESTAMPTZ, text VARCHAR, thinking VARCHAR, tool_calls JSON, source_path VARCHAR,
            source_line INTEGER, metadata JSON)""",
        """CREATE TABLE collapsed_messages (
            session_id VARCHAR, seq INTEGER, message_id VARCHAR, role VARCHAR, kind VARCHAR, speaker VARCHAR,
            timestamp TIMESTAMPTZ, text VARCHAR, thinking VARCHAR, tools JSON)""",
        """CREATE TABLE chunks (
            chunk_id VARCHAR, session_id VARCHAR, project VARCHAR, chunk_index INTEGER, message_ids VARCHAR[],
            ts_start TIMESTAMPTZ, ts_end TIMESTAMPTZ, speakers VARCHAR[], roles VARCHAR[], topics VARCHAR[],
            has_decision BOOLEAN, has_action BOOLEAN, continued BOOLEAN, token_count INTEGER, content VARCHAR,
            context VARCHAR, context_content VARCHAR, content_hash VARCHAR, context_hash VARCHAR)""",
        "CREATE TABLE embedding_cache (model VARCHAR, text_hash VARCHAR, embedding FLOAT[], created_at TIMESTAMPTZ)",
        """CREATE TABLE embedding_failures (
            chunk_id VARCHAR, session_id VARCHAR, model VARCHAR, error VARCHAR, attempts INTEGER,
            last_attempt_at TIMESTAMPTZ)""",
        """CREATE TABLE runs (
            run_id VARCHAR, trigger VARCHAR, started_at TIMESTAMPTZ, finished_at TIMESTAMPTZ, status VARCHAR,
            files_seen INTEGER, files_changed INTEGER, sessions INTEGER, messages INTEGER, chunks INTEGER,
            embedded INTEGER, quarantined INTEGER, seconds DOUBLE, details JSON)""",
    ],
    2: [
        """CREATE TABLE session_summaries (
            summary_id VARCHAR, session_id VARCHAR, version INTEGER, created_at TIMESTAMPTZ, model VARCHAR,
            input_hash VARCHAR, is_incremental BOOLEAN, parts INTEGER, first_message_id VARCHAR,
            last_message_id VARCHAR, message_count INTEGER, token_count INTEGER, overview VARCHAR,
            topics VARCHAR[], summary JSON, search_text VARCHAR, embedding FLOAT[])""",
        """CREATE TABLE memories (
            memory_id VARCHAR, content VARCHAR, timestamp TIMESTAMPTZ, session_id VARCHAR, importance DOUBLE,
            source VARCHAR, embedding FLOAT[])""",
        "CREATE TABLE topic_cache (model VARCHAR, content_hash VARCHAR, topics VARCHAR[], created_at TIMESTAMPTZ)",
        "CREATE TABLE dropped_messages (session_id VARCHAR, message_id VARCHAR, reason VARCHAR)",
        "ALTER TABLE sessions ADD COLUMN summary_version INTEGER",
        "ALTER TABLE sessions ADD COLUMN summary_overview VARCHAR",
        "ALTER TABLE sessions ADD COLUMN topics VARCHAR[]",
    ],
    3: [
        """CREATE TABLE session_threads (
            thread_id VARCHAR, session_id VARCHAR, position INTEGER, title VARCHAR, topics VARCHAR[],
            updated_at TIMESTAMPTZ)""",
    ],
    4: [
        """CREATE TABLE stage_state (
            stage VARCHAR, session_id VARCHAR, input_fp VARCHAR, stage_key VARCHAR, run_id VARCHAR,
            built_at TIMESTAMPTZ)""",
        "ALTER TABLE source_files ADD COLUMN stage_key VARCHAR",
        "ALTER TABLE sessions ADD COLUMN source_missing BOOLEAN DEFAULT false",
        "CREATE TABLE forgotten (session_id VARCHAR, project VARCHAR, forgotten_at TIMESTAMPTZ)",
    ],
    5: [
        # sessions the user's exclusions keep out (stages/privacy.py): which file, which session, why
        """CREATE TABLE excluded_sessions (
            path VARCHAR, session_id VARCHAR, kind VARCHAR, rule VARCHAR, reason VARCHAR, excluded_at TIMESTAMPTZ)""",
        # what the last scan of each source root could not read (stages/discover.py)
        """CREATE TABLE source_problems (
            root VARCHAR, path VARCHAR, kind VARCHAR, detail VARCHAR, recorded_at TIMESTAMPTZ)""",
    ],
    6: [  # the keyword index maintained per changed document (replaces the fts extension's rebuilt index)
        "CREATE TABLE kw_stopwords (word VARCHAR)",  # filled by Warehouse._seed_stopwords
        "CREATE TABLE kw_terms (corpus VARCHAR, term VARCHAR, term_id BIGINT, df BIGINT)",
        """CREATE TABLE kw_docs (
            corpus VARCHAR, doc_key BIGINT, doc_id VARCHAR, session_id VARCHAR, len INTEGER, doc_hash VARCHAR)""",
        "CREATE TABLE kw_postings (term_id BIGINT, doc_key BIGINT, tf INTEGER, len INTEGER)",  # len: the document's
        "CREATE TABLE kw_staging (doc_key BIGINT, term VARCHAR, tf INTEGER)",
        "DROP SCHEMA IF EXISTS fts_main_chunk_documents CASCADE",
        "DROP SCHEMA IF EXISTS fts_main_session_summaries CASCADE",
        "DROP SCHEMA IF EXISTS fts_main_memories CASCADE",
        # a warehouse with no documents yet is complete as it is; an older one is indexed once (ensure_keyword_index)
        """INSERT INTO meta SELECT 'kw_built', '1'
           WHERE NOT EXISTS (FROM chunks) AND NOT EXISTS (FROM session_summaries) AND NOT EXISTS (FROM memories)""",
    ],
    7: [  # work sent to a provider's Batch API (stages/provider_batches.py): recorded before it is submitted
        """CREATE TABLE provider_batches (
            local_id VARCHAR, stage VARCHAR, model VARCHAR, endpoint VARCHAR, batch_id VARCHAR, input_file_id VARCHAR,
            status VARCHAR, requests INTEGER, results INTEGER, error VARCHAR, created_at TIMESTAMPTZ,
            submitted_at TIMESTAMPTZ, checked_at TIMESTAMPTZ, finished_at TIMESTAMPTZ)""",
        # each request line of a batch: its custom_id, the fingerprint of the input it was made from, and the answer
        # when the stage keeps it here (a chat reply; vectors go to the embedding cache)
        "CREATE TABLE provider_batch_requests (local_id VARCHAR, custom_id VARCHAR, input_fp VARCHAR, answer VARCHAR)",
    ],
    8: [  # the session-start hook's recaps, made at index time (recaps.py): the hook then only reads text
        "CREATE TABLE session_recaps (session_id VARCHAR, budget INTEGER, input_fp VARCHAR, text VARCHAR, built_at TIMESTAMPTZ)",
    ],
    9: [  # what threads are updated from (stages/threads.py): the strong links (session_a < session_b), and the
        # input each session's links were computed from
        "CREATE TABLE thread_links (project VARCHAR, session_a VARCHAR, session_b VARCHAR)",
        "CREATE TABLE thread_inputs (session_id VARCHAR, project VARCHAR, input_fp VARCHAR)",
    ],
    10: [  # each session's thread input itself (stages/threads.py): its start, latest summary (id, version, whether
        # it has a vector), topics and files, so a change reads its unchanged neighbours from here and not from the
        # summaries' JSON; the next threads run rebuilds the threads, links and inputs
        "DROP TABLE thread_inputs",
        """CREATE TABLE thread_inputs (
            session_id VARCHAR, project VARCHAR, started_at TIMESTAMPTZ, summary_id VARCHAR, summary_version INTEGER,
            embedded BOOLEAN, topics VARCHAR[], files VARCHAR[])""",
        "DELETE FROM meta WHERE key = 'threads_built_from'",
    ],
    11: [  # when each stage_state row was recorded (a counter, meta 'stage_seq'), so a stage compares only the
        # upstream rows recorded since it was last seen up to date (Warehouse.stale_sessions)
        "ALTER TABLE stage_state ADD COLUMN recorded_seq BIGINT DEFAULT 0",
        "DELETE FROM meta WHERE key LIKE 'clean:%'",  # every row at 0: no stage is marked up to date yet
    ],
    12: [  # keyword documents whose text changed or went: their postings stay until compact_keyword_index drops
        # them in one pass (deleting a document's postings at once scanned every posting: 30 ms at 100k chunks)
        "CREATE TABLE kw_dead (doc_key BIGINT, session_id VARCHAR)",
    ],
    13: [  # the ingest key each keyword document's text was indexed under: when its session is ingested again
        # under another (new redaction rules, privacy settings), its dead documents' postings go at once
        "ALTER TABLE kw_dead ADD COLUMN ingest_key VARCHAR",
        "ALTER TABLE kw_docs ADD COLUMN ingest_key VARCHAR",
        """UPDATE kw_docs SET ingest_key = s.stage_key FROM stage_state s
           WHERE s.stage = 'ingest' AND s.session_id = kw_docs.session_id""",
    ],
    14: [  # the highest summary version a session has had, kept when a rewrite of its transcript replaces it whole
        # (its summaries go with it): its next summary is a new version, never a `<id>@1` readers saw before
        "ALTER TABLE sessions ADD COLUMN summary_versions_used INTEGER",
        "UPDATE sessions SET summary_versions_used = summary_version WHERE summary_version IS NOT NULL",
    ],
}


def _current_version(conn: duckdb.DuckDBPyConnection) -> int:
    exists = conn.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_catalog = ? AND table_name = 'schema_version'",
        [DATABASE],
    ).fetchone()[0]
    if not exists:
        return 0
    return conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]


def migrate(conn: duckdb.DuckDBPyConnection, target: int = SCHEMA_VERSION) -> list[int]:
    """Apply the missing migrations up to `target`, each in its own transaction; the versions applied."""
    applied = []
    version = _current_version(conn)
    if version > SCHEMA_VERSION:
        raise WarehouseError(
            f"warehouse schema version {version} is newer than this sessionmem ({SCHEMA_VERSION}); upgrade sessionmem"
        )
    if version == 0:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER, applied_at TIMESTAMPTZ)")
    for number in range(version + 1, target + 1):
        conn.execute("BEGIN")
        try:
            for statement in MIGRATIONS[number]:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?, ?)", [number, datetime.now(UTC)])
            conn.execute("COMMIT")
        except Exception:
            conn.execute("ROLLBACK")
            raise
        applied.append(number)
    return applied


# ---- opening -----------------------------------------------------------------------------------------------


def snapshot_path(warehouse: Path) -> Path:
    """`<stem>.search.duckdb` beside the live file."""
    return warehouse.with_name(f"{warehouse.stem}.search.duckdb")


def search_log_path(warehouse: Path) -> Path:
    return warehouse.with_name("search-log.jsonl")


def storage_error_path(warehouse: Path) -> Path:
    """The pause marker: present while the last write failed (spec 001: storage errors pause indexing)."""
    return warehouse.with_name(f"{warehouse.stem}.storage-error.json")


def record_storage_error(warehouse: Path, error: BaseException, where: str) -> None:
    """Write the pause marker. The disk may be as full for it as for the warehouse, so it never raises: a marker
    that could not be written in full still pauses (`read_storage_error`), and a shorter one is tried first."""
    marker = {"time": datetime.now(UTC).isoformat(), "where": where, "error": f"{type(error).__name__}: {error}"}
    for text in (json.dumps(marker), json.dumps({"where": where, "error": type(error).__name__})):
        try:
            warehouse.parent.mkdir(parents=True, exist_ok=True)
            storage_error_path(warehouse).write_text(text, encoding="utf-8")
            return
        except OSError:
            continue


def read_storage_error(warehouse: Path) -> dict[str, Any] | None:
    """The recorded storage error, or None; a marker cut short by a full disk still counts as one."""
    path = storage_error_path(warehouse)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
        moment = datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat()
    except FileNotFoundError:
        return None
    unknown = {"time": moment, "where": "unknown", "error": "the disk was too full to record the error in full"}
    try:
        marker = json.loads(text)
    except ValueError:
        return unknown
    return {**unknown, **marker} if isinstance(marker, dict) else unknown


def clear_storage_error(warehouse: Path) -> None:
    storage_error_path(warehouse).unlink(missing_ok=True)


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
DISK_FULL_WORDS = ("no space left", "file too large", "disk quota", "disk full")


def _disk_advice(warehouse: Path, error: BaseException) -> str:
    """What to do when a write failed for want of space ("" for other failures): how much room, where, next steps."""
    if getattr(error, "errno", None) not in DISK_FULL_ERRNOS and not any(
        word in str(error).lower() for word in DISK_FULL_WORDS
    ):
        return ""
    folder = warehouse.parent if warehouse.parent.exists() else Path.cwd()
    free = shutil.disk_usage(folder).free
    size = sum(p.stat().st_size for p in warehouse.parent.glob(f"{warehouse.name}*") if p.is_file())
    return (
        f". The disk (or the process's file size limit) is full: a write needs room for the warehouse's write-ahead "
        f"log and its published copy, up to {_megabytes(2 * size)} MB for this {_megabytes(size)} MB warehouse, and "
        f"{_megabytes(free)} MB are free in {folder}. Free space there (or move `warehouse` in the configuration), "
        "then run `sessionmem health`"
    )


def _megabytes(size: int) -> str:
    return f"{size / 1_000_000:.1f}"


@contextlib.contextmanager
def storage_guard(warehouse: Path, where: str) -> Iterator[None]:
    """Turn a failed write (DuckDB's, or a full disk's) into a recorded STORAGE_ERROR that pauses indexing
    (transactions roll back); its message names the file and, when space ran out, what to do."""
    from sessionmem_pipeline.core.errors import ErrorType, SessionMemoryError

    try:
        yield
    except (duckdb.Error, WarehouseError, OSError) as exc:
        if isinstance(exc, WarehouseBusyError) or (isinstance(exc, OSError) and exc.errno not in DISK_FULL_ERRNOS):
            raise
        record_storage_error(warehouse, exc, where)
        raise SessionMemoryError(
            ErrorType.STORAGE_ERROR,
            f"{warehouse}: {exc}; indexing is paused until `sessionmem health` finds the warehouse writable"
            + _disk_advice(warehouse, exc),
            {"where": where},
        ) from exc


def _lock_path(warehouse: Path) -> Path:
    return warehouse.with_name(f"{warehouse.name}.lock")


@contextlib.contextmanager
def writer_lock(warehouse: Path, *, timeout: float = 600.0, holder: str = "") -> Iterator[None]:
    """Exclusive right to write the live warehouse; released when the process ends, even by SIGKILL."""
    warehouse.parent.mkdir(parents=True, exist_ok=True)
    path = _lock_path(warehouse)
    with open(path, "a+") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.seek(0)
                    other = handle.read().strip() or "another process"
                    raise WarehouseBusyError(
                        f"{warehouse}: another writer holds the warehouse ({other}); wait for it to finish"
                    ) from None
                time.sleep(0.2)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} {holder}".strip())
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


FLOAT_COMPRESSION_OFF = "alp,alprd"
"""Floats are written uncompressed: ALPRD, DuckDB's choice for embeddings, decodes at ~14 µs a vector (a filtered
exact scan of 20k vectors at 100k chunks cost 300 ms, 75 ms plain) and saves little: real MiniLM vectors take 11%
less room than plain (86 vs 97 segments), the benchmark's synthetic ones 35% more (231 vs 149 MB at 100k)."""


def connect(path: Path, *, read_only: bool = False, extensions: bool = True) -> duckdb.DuckDBPyConnection:
    """A connection whose default database is the file at `path`, with vss and fts loaded first (unless
    `extensions` is off: loading them costs more than a short read of plain tables)."""
    conn = _extension_connection(extensions=extensions)
    conn.execute(f"SET disabled_compression_methods = '{FLOAT_COMPRESSION_OFF}'")
    mode = " (READ_ONLY)" if read_only else ""
    try:
        conn.execute(f"ATTACH {_sql_literal(str(path))} AS {DATABASE}{mode}")
    except duckdb.Error as exc:
        conn.close()
        raise WarehouseError(f"{path}: cannot open the warehouse: {exc}") from None
    conn.execute(f"USE {DATABASE}")
    return conn


def _sql_literal(text: str) -> str:
    """A string as an SQL literal (quotes doubled)."""
    return "'" + text.replace("'", "''") + "'"


def sql_string_list(values: Sequence[str]) -> str:
    """Strings as a comma-separated list of SQL literals, for `IN (...)`: binding a Python list of strings costs
    about 0.1 ms per item (27 ms for the 300 ids of one search), writing them as literals a tenth of that."""
    return ", ".join(map(_sql_literal, values)) or "NULL"


# ---- rows of the canonical records ---------------------------------------------------------------------------

SESSION_TABLES = (
    "stage_state",
    "messages",
    "collapsed_messages",
    "chunks",
    "dropped_messages",
    "embedding_failures",
    "session_summaries",
    "session_recaps",
    "sessions",
)


def message_row(message: Message) -> dict[str, Any]:
    return {
        "session_id": message.session_id,
        "seq": message.seq,
        "message_id": message.message_id,
        "role": message.role,
        "kind": message.kind,
        "speaker": message.speaker,
        "timestamp": message.timestamp,
        "text": message.text,
        "thinking": message.thinking,
        "tool_calls": to_json([vars(call) for call in message.tool_calls]),
        "source_path": message.source_path,
        "source_line": message.source_line,
        "metadata": to_json(message.metadata),
    }


def stored_message(message: Message, project: str, cwd: str | None) -> Message:
    """A message as `load_messages` will give it back once ingest stored it (what the stages after ingest read)."""
    return _message_from_row(message_row(message), project, cwd)


def _message_from_row(row: Mapping[str, Any], project: str, cwd: str | None) -> Message:
    return Message(
        session_id=row["session_id"],
        seq=row["seq"],
        message_id=row["message_id"],
        role=row["role"],
        text=row["text"] or "",
        timestamp=row["timestamp"],
        speaker=row["speaker"],
        kind=row["kind"],
        thinking=row["thinking"] or "",
        tool_calls=tuple(ToolCall(**call) for call in json.loads(row["tool_calls"] or "[]")),
        source_path=row["source_path"] or "",
        source_line=row["source_line"] or 0,
        project=project,
        cwd=cwd,
        metadata=json.loads(row["metadata"] or "{}"),
    )


def collapsed_row(message: CollapsedMessage) -> dict[str, Any]:
    return {
        "session_id": message.session_id,
        "seq": message.seq,
        "message_id": message.message_id,
        "role": message.role,
        "kind": message.kind,
        "speaker": message.speaker,
        "timestamp": message.timestamp,
        "text": message.text,
        "thinking": message.thinking,
        "tools": to_json([vars(tool) for tool in message.tools]),
    }


def collapsed_from_row(row: Mapping[str, Any]) -> CollapsedMessage:
    tools = tuple(
        ToolRecord(**{**tool, "files": tuple(tool.get("files") or ())}) for tool in json.loads(row["tools"] or "[]")
    )
    return CollapsedMessage(
        session_id=row["session_id"],
        seq=row["seq"],
        message_id=row["message_id"],
        role=row["role"],
        speaker=row["speaker"],
        timestamp=row["timestamp"],
        text=row["text"] or "",
        kind=row["kind"],
        thinking=row["thinking"] or "",
        tools=tools,
    )


_registered_tables = itertools.count()
"""Names of the Arrow tables registered on a connection (`_Queries._registered`), unique within the process."""


class _Queries:
    """Named reads of the canonical tables, shared by the writer (Warehouse) and readers (Snapshot)."""

    conn: duckdb.DuckDBPyConnection

    @contextlib.contextmanager
    def _registered(self, table: pa.Table) -> Iterator[str]:
        """An Arrow table readable by SQL under the name yielded, while the block runs."""
        name = f"_registered_{next(_registered_tables)}"
        self.conn.register(name, table)
        try:
            yield name
        finally:
            self.conn.unregister(name)

    @contextlib.contextmanager
    def _values(self, values: Sequence[Any]) -> Iterator[str]:
        """`values` as a registered one-column (`v`) Arrow table, for `IN (SELECT v FROM <name>)`: DuckDB's Python
        client binds a list parameter value by value, trying to import pandas for each (80 ms of CPU for 1,000
        ids where pandas is not installed, 2 ms through Arrow)."""
        import pyarrow as pa

        with self._registered(pa.table({"v": pa.array(list(values))})) as name:
            yield name

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        cursor = self.conn.execute(sql, params or [])
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        row = self.conn.execute(sql, params or []).fetchone()
        return row[0] if row else None

    def _table_exists(self, name: str) -> bool:
        return bool(
            self.scalar(
                "SELECT count(*) FROM information_schema.tables WHERE table_catalog = ? AND table_name = ?",
                [DATABASE, name],
            )
        )

    def load_chunks(self, session_id: str) -> list[Chunk]:
        rows = self.query("SELECT * FROM chunks WHERE session_id = ? ORDER BY chunk_index", [session_id])
        return [
            Chunk(
                session_id=r["session_id"],
                chunk_index=r["chunk_index"],
                message_ids=tuple(r["message_ids"] or ()),
                ts_start=r["ts_start"],
                ts_end=r["ts_end"],
                speakers=tuple(r["speakers"] or ()),
                roles=tuple(r["roles"] or ()),
                content=r["content"],
                token_count=r["token_count"],
                has_decision=r["has_decision"],
                has_action=r["has_action"],
                continued=r["continued"],
            )
            for r in rows
        ]

    def earlier_summary_vectors(self, session: Mapping[str, Any]) -> list[Sequence[float]]:
        """The vectors of the summaries a recap of this session (its `sessions` row) measures novelty against."""
        vectors = self.conn.execute(  # through Arrow: hundreds of vectors as Python floats cost ~50 ms a recap
            "SELECT v.embedding FROM "
            + EARLIER_SUMMARIES.format(project="$project", session="$session", start="$start"),
            {"project": session["project"], "session": session["session_id"], "start": session["started_at"]},
        ).to_arrow_table().column(0).combine_chunks()
        values, offsets = vectors.values.to_numpy(zero_copy_only=False), vectors.offsets.to_numpy()
        return [values[start:end] for start, end in zip(offsets[:-1], offsets[1:], strict=True)]

    def chunk_vectors(self, session_id: str) -> dict[int, list[float]]:
        if not self._table_exists("chunk_embeddings"):
            return {}
        # two scans filtered by session, joined here: the join in SQL cost ~7 ms CPU at 100k chunks, these ~2.5
        index_of = dict(self.conn.execute(
            "SELECT chunk_id, chunk_index FROM chunks WHERE session_id = ?", [session_id]
        ).fetchall())
        rows = self.conn.execute(
            "SELECT chunk_id, embedding FROM chunk_embeddings WHERE session_id = ?", [session_id]
        ).fetchall()
        return {index_of[chunk_id]: list(vector) for chunk_id, vector in rows if chunk_id in index_of}

    def source_state(self, path: str) -> tuple[IndexedState | None, dict[str, Any] | None]:
        return self.source_states([path]).get(path, (None, None))

    def source_states(self, paths: Sequence[str]) -> dict[str, tuple[IndexedState | None, dict[str, Any]]]:
        """Per stored path of these: its indexed state (None unless indexed) and the columns of its row that ingest
        reads (path, format, status, session_ids, stage_key), in one query (a scan's files are looked up together,
        not one query each; handed over as Arrow, since DuckDB converts a list parameter value by value; the other
        columns are left: converting their times cost more than the rest at 10,000 files)."""
        import pyarrow as pa  # the writer's path only: readers do not pay for it

        with self._registered(pa.table({"path": pa.array(list(paths), pa.string())})) as wanted:
            rows = self.query(
                f"""SELECT f.path, f.format, f.size, f.mtime_ns, f.sha256, f.consumed_bytes, f.prefix_sha256, f.status,
                           f.session_ids, f.stage_key
                    FROM source_files f SEMI JOIN {wanted} w ON w.path = f.path"""
            )
        return {
            row["path"]: (
                IndexedState(row["size"], row["mtime_ns"], row["sha256"], row["consumed_bytes"], row["prefix_sha256"])
                if row["status"] == "indexed" else None,
                row,
            )
            for row in rows
        }

    def settled_sources(
        self, walked: Sequence[tuple[str, str, int, int]], stage_key: str
    ) -> tuple[set[str], list[tuple[str | None, int, int, list[str]]]]:
        """Change detection for the walked files (path, partition key, size, mtime_ns), in one query: the paths
        whose stat differs from their indexed state under this ingest key (or that have none), which ingest must
        look at; and the others (settled: unchanged) per format as (format, files, sessions, partition keys),
        with no row per file handed back."""
        import pyarrow as pa  # the writer's path only: readers do not pay for it

        columns = list(zip(*walked, strict=True)) or [(), (), (), ()]
        kinds = {"path": pa.string(), "partition_key": pa.string(), "size": pa.int64(), "mtime_ns": pa.int64()}
        table = pa.table({name: pa.array(values, kind) for (name, kind), values in zip(kinds.items(), columns,
                                                                                       strict=True)})
        with self._registered(table) as files:
            groups = self.conn.execute(
                f"""SELECT f.path IS NOT NULL AS settled, f.format, count(*), coalesce(sum(len(f.session_ids)), 0),
                           list(w.partition_key) FILTER (f.path IS NOT NULL), list(w.path) FILTER (f.path IS NULL)
                    FROM {files} w LEFT JOIN source_files f ON f.path = w.path AND f.size = w.size
                        AND f.mtime_ns = w.mtime_ns AND f.status = 'indexed' AND f.stage_key = ?
                    GROUP BY 1, 2 ORDER BY 1, 2""",
                [stage_key],
            ).fetchall()
        pending = {path for settled, *_, paths in groups if not settled for path in paths}
        return pending, [(fmt, files, sessions, keys) for settled, fmt, files, sessions, keys, _ in groups if settled]

    def quarantined_sha256(self, path: str) -> str | None:
        return self.scalar("SELECT sha256 FROM quarantine WHERE path = ?", [path])

    def quarantined_paths(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT path FROM quarantine").fetchall()]

    def stored_files_besides(self, paths: Sequence[str]) -> list[dict[str, Any]]:
        """Path and partition key of the stored files not marked missing, other than these (the ones a scan just
        found: only the others can have gone)."""
        with self._values(paths) as found:
            return self.query(
                f"SELECT path, partition_key FROM source_files WHERE status <> 'missing' "
                f"AND path NOT IN (SELECT v FROM {found})"
            )

    def indexed_paths(self) -> list[dict[str, Any]]:
        return self.query("SELECT path, partition_key, session_ids FROM source_files")

    def forgotten_ids(self) -> set[str]:
        return {r[0] for r in self.conn.execute("SELECT session_id FROM forgotten").fetchall()}

    def sessions_of_partitions(self, partition_keys: Sequence[str]) -> list[str]:
        """The sessions of these files' partitions, in the order of the keys (one query however many)."""
        found = dict(self.conn.execute(
            "SELECT partition_key, session_ids FROM source_files WHERE partition_key IN (SELECT unnest(?)) "
            "AND status = 'indexed'",
            [list(partition_keys)],
        ).fetchall())
        return [session for key in partition_keys for session in found.get(key) or []]

    def message_keys(self, session_id: str) -> list[str]:
        rows = self.conn.execute(
            "SELECT message_id FROM messages WHERE session_id = ? ORDER BY seq", [session_id]
        ).fetchall()
        return [r[0] for r in rows]

    def summary_versions_used(self, session_ids: Sequence[str]) -> dict[str, int]:
        """The highest summary version each of these sessions has had (sessions.summary_versions_used)."""
        return dict(self.conn.execute(
            "SELECT session_id, summary_versions_used FROM sessions "
            "WHERE session_id IN (SELECT unnest(?)) AND summary_versions_used IS NOT NULL",
            [list(session_ids)],
        ).fetchall())

    def session_row(self, session_id: str) -> dict[str, Any] | None:
        rows = self.query("SELECT * FROM sessions WHERE session_id = ?", [session_id])
        return rows[0] if rows else None

    def load_messages(self, session_id: str) -> list[Message]:
        session = self.session_row(session_id) or {}
        rows = self.query("SELECT * FROM messages WHERE session_id = ? ORDER BY seq", [session_id])
        return [_message_from_row(r, session.get("project") or "", session.get("cwd")) for r in rows]

    def recap_fingerprints(self, session_ids: Sequence[str], rules: str) -> dict[str, str]:
        """Per session, a digest of everything its recap is made from (recaps.session_recap): its rows in every
        stage (their inputs and keys: messages, chunks, vectors, redaction), the summaries of its project's
        earlier sessions and the curated memories (novelty), and `rules` (the recap's version and budget)."""
        rows = self.conn.execute(
            f"""
            WITH wanted AS (
                SELECT session_id, project, started_at FROM sessions WHERE session_id IN (SELECT unnest($ids))),
            states AS (
                SELECT session_id, string_agg(stage || '=' || input_fp || '/' || stage_key, ',' ORDER BY stage) AS fp
                FROM stage_state WHERE session_id IN (SELECT session_id FROM wanted) GROUP BY session_id),
            earlier AS (  -- order-free, the ids neither sorted nor joined: ~40 sessions x ~500 summaries at 100k
                SELECT w.session_id, count(*) || ':' || bit_xor(hash(v.summary_id)) AS fp
                FROM wanted w,
                     {EARLIER_SUMMARIES.format(project="w.project", session="w.session_id", start="w.started_at")}
                GROUP BY w.session_id),
            known AS (
                SELECT md5(coalesce(string_agg(memory_id || ':' || content, ',' ORDER BY memory_id, content), '')) AS fp
                FROM memories WHERE embedding IS NOT NULL)
            SELECT w.session_id, md5(concat_ws('|', $rules, coalesce(st.fp, ''), coalesce(e.fp, ''), (FROM known)))
            FROM wanted w LEFT JOIN states st USING (session_id) LEFT JOIN earlier e USING (session_id)
            """,
            {"rules": rules, "ids": list(session_ids)},
        ).fetchall()
        return dict(rows)

    def stored_recap(self, session_id: str, budget: int) -> tuple[str, str] | None:
        """(input fingerprint, text) of the recap made at index time, if any (none before schema 8)."""
        return self.stored_recaps([session_id], budget).get(session_id)

    def stored_recaps(self, session_ids: Sequence[str], budget: int) -> dict[str, tuple[str, str]]:
        """Per session of these with a recap made at index time: (input fingerprint, text), in one query."""
        try:
            rows = self.conn.execute(
                "SELECT session_id, input_fp, text FROM session_recaps WHERE budget = ? "
                "AND session_id IN (SELECT unnest(?))",
                [budget, list(session_ids)],
            ).fetchall()
        except duckdb.CatalogException:
            return {}
        return {session_id: (input_fp, text) for session_id, input_fp, text in rows}

    def load_collapsed(self, session_id: str) -> list[CollapsedMessage]:
        rows = self.query("SELECT * FROM collapsed_messages WHERE session_id = ? ORDER BY seq", [session_id])
        return [collapsed_from_row(r) for r in rows]

    def delete_sessions(self, session_ids: Sequence[str], *, purge: bool = False) -> None:
        """Every row of these sessions, in every table (call inside a transaction). `purge`: their indexed
        vectors too, at once (see delete_vectors)."""
        if not session_ids:
            return
        for table in SESSION_TABLES:
            self.delete_where(table, "session_id", session_ids)
        self.delete_vectors("e.session_id IN (SELECT unnest(?))", [list(session_ids)], purge=purge)
        for corpus in ("chunks", "summaries"):
            self.sync_keyword_index(corpus, session_ids, purge=purge)

    def delete_session_caches(self, session_ids: Sequence[str]) -> None:
        """Topic and embedding cache entries made from these sessions' chunks (call before deleting the chunks):
        a forgotten session leaves nothing derived from its words behind."""
        hashes = [list(session_ids)]
        self.conn.execute(
            "DELETE FROM topic_cache WHERE content_hash IN (SELECT content_hash FROM chunks "
            "WHERE session_id IN (SELECT unnest(?)))",
            hashes,
        )
        self.conn.execute(
            "DELETE FROM embedding_cache WHERE text_hash IN (SELECT context_hash FROM chunks "
            "WHERE session_id IN (SELECT unnest(?)))",
            hashes,
        )
        self.conn.execute(  # what their texts were sent to the provider's Batch API as
            "DELETE FROM provider_batch_requests WHERE input_fp IN (SELECT context_hash FROM chunks "
            "WHERE session_id IN (SELECT unnest(?)))",
            hashes,
        )

    def chunks_without_embedding(self, session_ids: Sequence[str]) -> list[dict[str, Any]]:
        return self.query(
            """
            SELECT c.chunk_id, c.session_id, c.chunk_index, c.context_content, c.context_hash
            FROM chunks c LEFT JOIN (  -- these sessions' vectors only, not a join over every vector
                SELECT chunk_id, text_hash FROM chunk_embeddings WHERE session_id IN (SELECT unnest($ids))
            ) e ON e.chunk_id = c.chunk_id AND e.text_hash = c.context_hash
            WHERE c.session_id IN (SELECT unnest($ids)) AND e.chunk_id IS NULL
            ORDER BY c.session_id, c.chunk_index
            """,
            {"ids": list(session_ids)},
        )

    def delete_stale_embeddings(self, session_ids: Sequence[str]) -> int:
        """Vectors of chunks that no longer exist as they were (re-chunked or rewritten sessions)."""
        return self.delete_vectors(
            """e.session_id IN (SELECT unnest($ids)) AND NOT EXISTS (  -- these sessions' chunks: not a scan of all
                   SELECT 1 FROM chunks c WHERE c.session_id IN (SELECT unnest($ids))
                   AND c.chunk_id = e.chunk_id AND c.context_hash = e.text_hash)""",
            {"ids": list(session_ids)},
        )

    def delete_vectors(self, where: str, params: Sequence[Any] | Mapping[str, Any], *, purge: bool = False) -> int:
        """Chunk vectors matching `where` (alias e), from the delta and the indexed base (call inside a
        transaction). A row deleted from the HNSW-indexed base makes the next checkpoint write the whole index
        again and leak the old copy's blocks (vss 1.5.5), so a base vector is only unlinked (its chunk id set to
        NULL: searches skip it) and counted; maintain_vector_index rebuilds the base without them once they pass
        HNSW_DELETED_SHARE. `purge` (forgetting): nothing derived from the words may stay, so the index is
        dropped, the rows are deleted, and the next maintain_vector_index builds the index again. The base is
        written only when a row matches: any UPDATE or DELETE of it loads its whole HNSW index first (0.8 s of
        CPU at 100k chunks), also when it changes nothing."""
        if not self._table_exists(VECTOR_DELTA):
            return 0
        deleted = self.conn.execute(f"DELETE FROM {VECTOR_DELTA} e WHERE {where}", params).fetchone()[0]
        doomed = where if purge else f"e.chunk_id IS NOT NULL AND {where}"  # purged: also the unlinked ones
        if not self.scalar(f"SELECT count(*) FROM {VECTOR_BASE} e WHERE {doomed}", params):
            return deleted
        if purge:
            self.conn.execute(f"DROP INDEX IF EXISTS {VECTOR_INDEX}")
            return deleted + self.conn.execute(f"DELETE FROM {VECTOR_BASE} e WHERE {doomed}", params).fetchone()[0]
        unlinked = self.conn.execute(f"UPDATE {VECTOR_BASE} AS e SET chunk_id = NULL WHERE {doomed}", params).fetchone()[0]
        if unlinked:
            self.set_meta("hnsw_deleted", str(int(self.get_meta("hnsw_deleted") or 0) + unlinked))
        return deleted + unlinked

    # -- durable stage state (stages/registry.py) --

    def stale_sessions(
        self, stage: str, stage_key: str, upstream: str, upstream_key: str, scope: Sequence[str] | None = None
    ) -> dict[str, str]:
        """Sessions whose `stage` output is missing or out of date, each with the input fingerprint it must be
        built from: the upstream stage's output (its input fingerprint under its own, current key). Sessions whose
        upstream is itself out of date are not listed: they wait for it."""
        scoped = "AND u.session_id IN (SELECT unnest(?))" if scope is not None else ""
        params: list[Any] = [stage, upstream, upstream_key, stage_key] + ([list(scope)] if scope is not None else [])
        rows = self.conn.execute(
            f"""
            SELECT u.session_id, md5(u.input_fp || u.stage_key) AS expected
            FROM stage_state u LEFT JOIN stage_state d ON d.stage = ? AND d.session_id = u.session_id
            WHERE u.stage = ? AND u.stage_key = ?
              AND (d.session_id IS NULL OR d.stage_key <> ? OR d.input_fp <> md5(u.input_fp || u.stage_key))
              {scoped}
            ORDER BY u.session_id
            """,
            params,
        ).fetchall()
        return dict(rows)

    def stage_fingerprint(self, stages: Sequence[str]) -> str:
        """One fingerprint of every session's state in these stages: a global stage's input. An order-free
        combination of each row's hash (no sort, no string of every row: a quarter of the cost at 10,000 sessions);
        a DuckDB whose hash differs only makes the global stage run once more."""
        return self.scalar(
            """SELECT count(*) || ':' || coalesce(bit_xor(hash(stage, session_id, input_fp, stage_key)), 0)
               FROM stage_state WHERE stage IN (SELECT unnest(?))""",
            [list(stages)],
        )

    def stage_row(self, stage: str, session_id: str) -> dict[str, Any] | None:
        rows = self.query("SELECT * FROM stage_state WHERE stage = ? AND session_id = ?", [stage, session_id])
        return rows[0] if rows else None

    def stale_counts(self, keys: Mapping[str, tuple[str, str | None, str | None]]) -> dict[str, int]:
        """Per session stage, how many sessions it still has to build: `keys` maps a stage to its own key and its
        upstream stage and key (ingest, with no upstream, counts sessions stored under another key)."""
        counts = {}
        for stage, (key, upstream, upstream_key) in keys.items():
            if upstream is None:
                counts[stage] = self.scalar(
                    "SELECT count(*) FROM stage_state WHERE stage = ? AND stage_key <> ?", [stage, key]
                )
            else:
                counts[stage] = len(self.stale_sessions(stage, key, upstream, upstream_key))
        return counts

    def provider_batches_in(self, stage: str, statuses: Sequence[str]) -> list[dict[str, Any]]:
        if not self._table_exists("provider_batches"):  # a snapshot from before migration 7
            return []
        return self.query(
            "SELECT * FROM provider_batches WHERE stage = ? AND status IN (SELECT unnest(?)) ORDER BY created_at",
            [stage, list(statuses)],
        )

    def partitions_waiting_for_batches(self, stage: str, statuses: Sequence[str]) -> list[str]:
        """Partitions with sessions whose chunks' texts went in batches of `stage` in these statuses."""
        if not self._table_exists("provider_batches"):  # a snapshot from before migration 7
            return []
        rows = self.conn.execute(
            """SELECT DISTINCT s.partition_key
               FROM provider_batches b JOIN provider_batch_requests r USING (local_id)
               JOIN chunks c ON c.context_hash = r.input_fp JOIN sessions s ON s.session_id = c.session_id
               WHERE b.stage = ? AND b.status IN (SELECT unnest(?)) ORDER BY s.partition_key""",
            [stage, list(statuses)],
        ).fetchall()
        return [key for (key,) in rows]

    def generation(self) -> int:
        """Bumped by every transaction that changes what readers see; the snapshot carries the value it was
        published at, so a stale or missing snapshot is a fact to compare, not a guess."""
        return int(self.scalar("SELECT value FROM meta WHERE key = 'generation'") or 0)

    def cached_topics(self, model: str, content_hashes: Sequence[str]) -> dict[str, list[str]]:
        rows = self.conn.execute(
            "SELECT content_hash, topics FROM topic_cache WHERE model = ? AND content_hash IN (SELECT unnest(?))",
            [model, list(content_hashes)],
        ).fetchall()
        return {digest: list(topics) for digest, topics in rows}

    def cached_embeddings(self, model: str, text_hashes: Sequence[str]) -> dict[str, list[float]]:
        if not text_hashes:
            return {}
        with self._values(text_hashes) as wanted:
            rows = self.conn.execute(
                f"SELECT text_hash, embedding FROM embedding_cache WHERE model = ? AND text_hash IN (SELECT v FROM {wanted})",
                [model],
            ).fetchall()
        return {text_hash: vector for text_hash, vector in rows}


class Warehouse(_Queries):
    """A writer's handle on the live file: schema, per-session replacement, index maintenance."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = connect(self.path)
        migrate(self.conn)
        self._seed_stopwords()
        self._in_transaction = False
        self._generation_bumped = False  # in the open transaction
        self._aggregates_due: set[str] = set()  # sessions whose aggregates the open transaction refreshes

    def _seed_stopwords(self) -> None:
        """The fts extension's English stopword list, taken from a throwaway index in the in-memory database
        (its `create_fts_index` cannot run inside a migration's transaction)."""
        if self.scalar("SELECT count(*) FROM kw_stopwords"):
            return
        self.conn.execute("USE memory")
        try:
            self.conn.execute("CREATE OR REPLACE TABLE kw_seed (id VARCHAR, text VARCHAR)")
            self.conn.execute("PRAGMA create_fts_index('kw_seed', 'id', 'text', overwrite = 1)")
            self.conn.execute(f"INSERT INTO {DATABASE}.kw_stopwords SELECT sw FROM fts_main_kw_seed.stopwords")
        finally:
            self.conn.execute(f"USE {DATABASE}")

    def close(self) -> None:
        self.conn.close()

    def finish(self, *, measure: bool) -> tuple[int, bool]:
        """Close the file with every write in it, ready to publish: the generation readers would see, and (when
        `measure`) whether the file has outgrown its rows (then `rebuild_file` it).

        The write-ahead log is folded in by DuckDB's checkpoint on close, not by CHECKPOINT: that statement first
        loads every HNSW index of the file, also one no write touched (0.5-0.8 s of CPU and ~200 MB read at 100k
        chunks, in every run), the checkpoint on close writes an untouched index's blocks as they are. The close
        swallows a failed checkpoint, so a log left behind is checkpointed again by CHECKPOINT, which raises."""
        generation = self.generation()
        need = self._rows_need() if measure else None
        self.close()
        if _has_log(self.path):
            with contextlib.closing(connect(self.path)) as conn:
                conn.execute(f"CHECKPOINT {DATABASE}")
        return generation, measure and _outgrown(self.path.stat().st_size, need)

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """All of it or none of it, also when the process is killed halfway. Opened inside another transaction
        (files committed in one batch), it is part of that one: it commits or rolls back with it."""
        if self._in_transaction:
            yield self.conn
            return
        self.conn.execute("BEGIN")
        self._in_transaction = True
        try:
            try:
                yield self.conn
                if self._aggregates_due:
                    self._refresh_aggregates(sorted(self._aggregates_due))
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        finally:
            self._in_transaction = self._generation_bumped = False
            self._aggregates_due = set()

    def refresh_session_aggregates(self, session_ids: Sequence[str]) -> None:
        """Start, end, counts and speakers of sessions, from their messages: inside a transaction, once for every
        session it asked for, just before it commits (a batch of files costs one statement, not one per file)."""
        if self._in_transaction:
            self._aggregates_due.update(session_ids)
        else:
            self._refresh_aggregates(session_ids)

    def _refresh_aggregates(self, session_ids: Sequence[str]) -> None:
        self.conn.execute(
            """
            UPDATE sessions SET
                started_at = agg.started_at, ended_at = agg.ended_at, message_count = agg.message_count,
                speakers = agg.speakers
            FROM (
                SELECT session_id, min(timestamp) AS started_at, max(timestamp) AS ended_at,
                       count(*) AS message_count,
                       list(DISTINCT coalesce(speaker, role) ORDER BY coalesce(speaker, role))
                           FILTER (WHERE kind = 'message' AND role IN ('user', 'assistant')) AS speakers
                FROM messages WHERE session_id IN (SELECT unnest($ids)) GROUP BY session_id
            ) AS agg
            WHERE sessions.session_id = agg.session_id AND sessions.session_id IN (SELECT unnest($ids))
            """,  # the second filter: the sessions scan skips the others' columns (UPDATE of a list re-inserts rows)
            {"ids": list(session_ids)},
        )

    # -- generic row movement --

    def insert(self, table: str, rows: Sequence[Mapping[str, Any]] | pa.Table) -> int:
        """Bulk insert by column name through Arrow (call inside a transaction)."""
        import pyarrow as pa

        arrow = rows if isinstance(rows, pa.Table) else _to_arrow(rows)
        if arrow.num_rows == 0:
            return 0
        with self._registered(arrow) as incoming:
            self.conn.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {incoming}")
        return arrow.num_rows

    def set_session_topics(self, topics: Mapping[str, Sequence[str]]) -> None:
        """Each session's topics, in one statement (call inside a transaction)."""
        import pyarrow as pa

        if not topics:
            return
        table = pa.table(
            {"session_id": list(topics), "topics": [list(tags) for tags in topics.values()]},
            schema=pa.schema([("session_id", pa.string()), ("topics", pa.list_(pa.string()))]),
        )
        with self._registered(table) as incoming:
            self.conn.execute(
                f"UPDATE sessions SET topics = t.topics FROM {incoming} t WHERE sessions.session_id = t.session_id"
            )

    def delete_where(self, table: str, column: str, values: Sequence[Any]) -> None:
        if len(values) == 1:  # one key (a file's path): a plain parameter, no Arrow table to register
            self.conn.execute(f"DELETE FROM {table} WHERE {column} = ?", [values[0]])
        elif values:
            with self._values(values) as doomed:
                self.conn.execute(f"DELETE FROM {table} WHERE {column} IN (SELECT v FROM {doomed})")

    def replace(self, table: str, column: str, values: Sequence[Any], rows: Sequence[Mapping[str, Any]]) -> int:
        """Delete the rows keyed by `values` and insert `rows` (call inside a transaction)."""
        self.delete_where(table, column, values)
        return self.insert(table, rows)

    # -- meta --

    def get_meta(self, key: str) -> str | None:
        return self.scalar("SELECT value FROM meta WHERE key = ?", [key])

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("DELETE FROM meta WHERE key = ?", [key])
        self.conn.execute("INSERT INTO meta VALUES (?, ?)", [key, value])

    # -- embeddings --

    def ensure_embedding_table(self, model: str, dimensions: int, *, reset: bool = False) -> bool:
        """Make the chunk vector tables hold `dimensions`-wide vectors of `model`; True when they were (re)created,
        which means every chunk must be embedded again (the cache still saves the vectors it has). Vectors of a
        warehouse from before the delta layout move into the base unchanged."""
        current = (self.get_meta("embedding_model"), self.get_meta("embedding_dimensions"))
        same = not reset and current == (model, str(dimensions))
        if same and self._table_exists(VECTOR_DELTA):
            if not self.scalar(  # a view from before unlinked base rows (delete_vectors) existed
                "SELECT count(*) FROM duckdb_views() WHERE database_name = ? AND view_name = 'chunk_embeddings' "
                "AND sql LIKE '%chunk_id IS NOT NULL%'",
                [DATABASE],
            ):
                with self.transaction():
                    _create_vector_view(self.conn)
            return False
        older = self.scalar(
            "SELECT count(*) FROM information_schema.tables WHERE table_catalog = ? AND table_name = 'chunk_embeddings' "
            "AND table_type = 'BASE TABLE'",
            [DATABASE],
        )
        with self.transaction():
            self.conn.execute("DROP VIEW IF EXISTS chunk_embeddings")
            if older and same:
                self.conn.execute(f"DROP INDEX IF EXISTS {VECTOR_INDEX}")
                self.conn.execute(f"ALTER TABLE chunk_embeddings RENAME TO {VECTOR_BASE}")
            else:
                self.conn.execute("DROP TABLE IF EXISTS chunk_embeddings")
                self.conn.execute(f"DROP TABLE IF EXISTS {VECTOR_BASE}")
                self.conn.execute(
                    f"CREATE TABLE {VECTOR_BASE} (chunk_id VARCHAR, session_id VARCHAR, text_hash VARCHAR, "
                    f"embedding FLOAT[{int(dimensions)}])"
                )
            self.conn.execute(f"DROP TABLE IF EXISTS {VECTOR_DELTA}")
            _create_vector_delta_and_view(self.conn)
            self.set_meta("embedding_model", model)
            self.set_meta("embedding_dimensions", str(dimensions))
            self.set_meta("hnsw_deleted", "0")
        return not (older and same)

    def maintain_vector_index(self) -> str:
        """Fold the delta of new vectors into the HNSW base when it is due; what was done.

        The HNSW index is serialized whole at every checkpoint that follows a change to it, and vss 1.5.5 never
        frees the copy it replaces (measured: one index's worth of blocks per changed checkpoint, until the index
        is dropped). So the indexed base is never changed in place: new vectors wait in the small unindexed delta
        (searched exactly), deleted ones are only unlinked (delete_vectors), and when the delta passes
        VECTOR_DELTA_MAX or VECTOR_REBUILD_SHARE of the base ("merged"; "rebuilt" when there was no index, as
        for the first index), or the unlinked rows pass HNSW_DELETED_SHARE of it ("compacted"), the base is
        written again with its live rows and the delta and the index is built once over it, which frees the
        old table and index whole."""
        if not self._table_exists(VECTOR_DELTA):
            return "none"
        delta = self.scalar(f"SELECT count(*) FROM {VECTOR_DELTA}")
        base = self.scalar(f"SELECT count(*) FROM {VECTOR_BASE}")
        indexed = self.scalar("SELECT count(*) FROM duckdb_indexes() WHERE index_name = ?", [VECTOR_INDEX])
        deleted = int(self.get_meta("hnsw_deleted") or 0)
        if not indexed and (base or delta):
            done = "rebuilt"
        elif delta > VECTOR_DELTA_MAX or (delta and delta >= VECTOR_REBUILD_SHARE * base):
            done = "merged"
        elif deleted > HNSW_DELETED_SHARE * max(base, 1):
            done = "compacted"
        else:
            return "none"
        with self.transaction():
            self.conn.execute(f"DROP INDEX IF EXISTS {VECTOR_INDEX}")
            self.conn.execute(
                f"CREATE TABLE {VECTOR_BASE}_new AS FROM {VECTOR_BASE} WHERE chunk_id IS NOT NULL "
                f"UNION ALL BY NAME FROM {VECTOR_DELTA}"
            )
            self.conn.execute(f"DROP TABLE {VECTOR_BASE}")
            self.conn.execute(f"ALTER TABLE {VECTOR_BASE}_new RENAME TO {VECTOR_BASE}")
            self.conn.execute(f"DELETE FROM {VECTOR_DELTA}")
            self.conn.execute(
                f"CREATE INDEX {VECTOR_INDEX} ON {VECTOR_BASE} USING HNSW (embedding) WITH (metric = 'cosine')"
            )
            self.set_meta("hnsw_deleted", "0")
        return done

    # -- keyword index --

    def sync_keyword_index(
        self,
        corpus: str,
        session_ids: Sequence[str] | None = None,
        *,
        purge: bool = False,
        previous_chars: int = PREVIOUS_CHARS,
    ) -> int:
        """Bring the BM25 terms of these sessions' documents (of every document when None) up to date with their
        rows: documents whose text changed or that are gone are marked dead (their postings are deleted at once
        when their session was ingested again under another key since they were indexed; `purge`, forgetting: also
        those of the sessions' documents marked dead before), new texts get postings.
        Call inside the transaction that changed the rows. Returns how many documents were (re)indexed.
        (`previous_chars` other than PREVIOUS_CHARS: only for benchmarks/retrieval.py's tuning grid.)"""
        spec = KEYWORD_CORPORA[corpus]
        scoped = session_ids is not None and spec.scope_column is not None
        if scoped and not session_ids:
            return 0
        ids: dict[str, Any] = {"ids": list(session_ids)} if scoped else {}
        params: dict[str, Any] = {"corpus": corpus, **ids}
        rows_scope = f"{spec.scope_column} IN (SELECT unnest($ids))" if scoped else "TRUE"
        docs_scope = "d.session_id IN (SELECT unnest($ids))" if scoped else "TRUE"
        documents = f"""(SELECT doc_id, session_id, text, md5(coalesce(text, '')) AS doc_hash
                         FROM ({spec.documents.format(scope=rows_scope, previous_chars=previous_chars)}))"""
        sessions_scope = "session_id IN (SELECT unnest($ids))" if scoped else "TRUE"
        ingest_keys = f"(SELECT session_id, stage_key FROM stage_state WHERE stage = 'ingest' AND {sessions_scope})"
        gone = [
            row[0]
            for row in self.conn.execute(
                f"""SELECT d.doc_key FROM kw_docs d WHERE d.corpus = $corpus AND {docs_scope} AND NOT EXISTS (
                        SELECT 1 FROM {documents} x WHERE x.doc_id = d.doc_id AND x.doc_hash = d.doc_hash)""",
                params,
            ).fetchall()
        ]
        if gone:
            with self._values(gone) as keys:
                self.conn.execute(f"""INSERT INTO kw_dead SELECT doc_key, session_id, ingest_key FROM kw_docs
                                      WHERE doc_key IN (SELECT v FROM {keys})""")
                self.conn.execute(f"DELETE FROM kw_docs WHERE doc_key IN (SELECT v FROM {keys})")
        self._drop_dead_postings(  # indexed under rules the session's text was ingested again without (also when
            # none of its documents died now: the ones that died before still hold the old rules' words)
            f"""doc_key IN (SELECT dead.doc_key FROM kw_dead dead JOIN {ingest_keys} k USING (session_id)
                            WHERE dead.ingest_key IS DISTINCT FROM k.stage_key)""",
            ids,
        )
        if purge:
            self._drop_dead_postings(sessions_scope, ids)
        added = self.conn.execute(
            f"""INSERT INTO kw_docs
                SELECT $corpus, {content_key('$corpus', 'doc_id', 'doc_hash')}, doc_id, session_id, NULL, doc_hash,
                       k.stage_key
                FROM {documents} x LEFT JOIN {ingest_keys} k USING (session_id)
                WHERE NOT EXISTS (
                    SELECT 1 FROM kw_docs d WHERE d.corpus = $corpus AND {docs_scope}
                        AND d.doc_id = x.doc_id AND d.doc_hash = x.doc_hash)""",
            params,
        ).fetchone()[0]
        if added:
            self._drop_dead_postings(  # a text back to what a dead document held: the same key, postings anew
                f"doc_key IN (SELECT doc_key FROM kw_docs d WHERE d.corpus = $corpus AND d.len IS NULL AND {docs_scope})",
                params)
            self._index_new_documents(corpus, documents, params)
        return added

    def _drop_dead_postings(self, where: str = "TRUE", params: Mapping[str, Any] | None = None) -> int:
        """Delete the postings of the dead documents `where` keeps (of kw_dead) in one pass over the postings,
        take them out of their terms' document frequencies, and forget those documents; how many there were."""
        keys = [row[0] for row in self.conn.execute(f"SELECT DISTINCT doc_key FROM kw_dead WHERE {where}", params or {}).fetchall()]
        if not keys:
            return 0
        with self._values(keys) as dead:
            terms = [row[0] for row in self.conn.execute(
                f"DELETE FROM kw_postings WHERE doc_key IN (SELECT v FROM {dead}) RETURNING term_id"
            ).fetchall()]
            self.conn.execute(f"DELETE FROM kw_dead WHERE doc_key IN (SELECT v FROM {dead})")
        with self._values(terms) as lost:
            self.conn.execute(
                f"""UPDATE kw_terms SET df = df - g.n FROM (SELECT v, count(*) AS n FROM {lost} GROUP BY v) g
                    WHERE kw_terms.term_id = g.v"""
            )
            self.conn.execute(  # terms no document holds any more, as a build from scratch would not have them
                f"DELETE FROM kw_terms WHERE df = 0 AND term_id IN (SELECT v FROM {lost})"
            )
        return len(keys)

    def _index_new_documents(self, corpus: str, documents: str, params: dict[str, Any]) -> None:
        """Terms, document frequencies, postings and lengths of the documents inserted without a length."""
        self.conn.execute(
            f"""INSERT INTO kw_staging
                SELECT doc_key, stem(word, 'porter') AS term, count(*)::INTEGER FROM (
                    SELECT d.doc_key, unnest({tokens_sql('x.text')}) AS word
                    FROM kw_docs d JOIN {documents} x ON x.doc_id = d.doc_id
                    WHERE d.corpus = $corpus AND d.len IS NULL)
                WHERE word <> '' AND word NOT IN (SELECT word FROM kw_stopwords)
                GROUP BY ALL""",
            params,
        )
        self.conn.execute(
            f"""INSERT INTO kw_terms SELECT $corpus, term, {content_key('$corpus', 'term')}, 0 FROM (
                   SELECT DISTINCT term FROM kw_staging s WHERE NOT EXISTS (
                       SELECT 1 FROM kw_terms t WHERE t.corpus = $corpus AND t.term = s.term))""",
            {"corpus": corpus},
        )
        self.conn.execute(
            """UPDATE kw_terms SET df = df + s.n FROM (SELECT term, count(*) AS n FROM kw_staging GROUP BY term) s
               WHERE kw_terms.corpus = $corpus AND kw_terms.term = s.term""",
            {"corpus": corpus},
        )
        self.conn.execute(
            """UPDATE kw_docs SET len = coalesce(l.n, 0) FROM (
                   SELECT d.doc_key, sum(s.tf) AS n FROM kw_docs d LEFT JOIN kw_staging s USING (doc_key)
                   WHERE d.corpus = $corpus AND d.len IS NULL GROUP BY d.doc_key) l
               WHERE kw_docs.doc_key = l.doc_key""",
            {"corpus": corpus},
        )
        postings = self.conn.execute(
            """INSERT INTO kw_postings SELECT t.term_id, s.doc_key, s.tf, l.len
               FROM kw_staging s JOIN kw_terms t ON t.corpus = $corpus AND t.term = s.term
               JOIN (SELECT doc_key, sum(tf)::INTEGER AS len FROM kw_staging GROUP BY doc_key) l USING (doc_key)
               ORDER BY t.term_id""",
            {"corpus": corpus},
        ).fetchone()[0]
        self.conn.execute("DELETE FROM kw_staging")
        unsorted = int(self.get_meta("kw_unsorted_postings") or 0) + postings
        self.set_meta("kw_unsorted_postings", str(unsorted))

    def ensure_keyword_index(self) -> bool:
        """Index every document once (a warehouse from before the keyword index); True when it did."""
        if self.get_meta("kw_built"):
            return False
        with self.transaction():
            for corpus in KEYWORD_CORPORA:
                self.sync_keyword_index(corpus)
            self.set_meta("kw_built", "1")
        return True

    def compact_keyword_index(self, *, force: bool = False) -> bool:
        """Drop the dead documents' postings once they pass KEYWORD_DEAD_SHARE of the documents, and re-sort the
        postings by term once the rows appended since the last sort pass KEYWORD_RESORT_SHARE; whether it did."""
        dead, documents = self.conn.execute("SELECT (SELECT count(*) FROM kw_dead), (SELECT count(*) FROM kw_docs)").fetchone()
        dropped = False
        if dead and (force or dead > KEYWORD_DEAD_SHARE * documents):
            with self.transaction():
                dropped = bool(self._drop_dead_postings())
        unsorted = int(self.get_meta("kw_unsorted_postings") or 0)
        total = self.scalar("SELECT count(*) FROM kw_postings")
        if not force and unsorted <= KEYWORD_RESORT_SHARE * total:
            return dropped
        with self.transaction():
            self.conn.execute("CREATE TABLE kw_postings_sorted AS SELECT * FROM kw_postings ORDER BY term_id, doc_key")
            self.conn.execute("DROP TABLE kw_postings")
            self.conn.execute("ALTER TABLE kw_postings_sorted RENAME TO kw_postings")
            self.set_meta("kw_unsorted_postings", "0")
        return True

    # -- the session-start hook's recaps (recaps.py) --

    def recap_candidates(self, per_project: int) -> list[dict[str, Any]]:
        """The latest `per_project` top-level sessions of each project, in the order the hook picks them
        (SessionMemory.latest_session: the latest, or the one before it when the latest is starting now): the
        columns a recap reads of them (recaps.session_recap), not every column of every session."""
        return self.query(
            """SELECT session_id, project, started_at FROM (
                   SELECT session_id, project, started_at, row_number() OVER (PARTITION BY project
                       ORDER BY coalesce(ended_at, started_at) DESC NULLS LAST, session_id) AS place
                   FROM sessions WHERE parent_session_id IS NULL)
               WHERE place <= ? ORDER BY session_id""",
            [per_project],
        )

    def replace_recaps(self, recaps: Sequence[Mapping[str, Any]], keep: Sequence[str]) -> None:
        """Store these recaps (session_id, budget, input_fp, text) over any earlier one of their session and
        budget; drop those of sessions not in `keep` (call inside a transaction)."""
        with self._values(list(keep) or [""]) as kept:
            dropped = self.conn.execute(
                f"DELETE FROM session_recaps WHERE session_id NOT IN (SELECT v FROM {kept})"
            ).fetchone()[0]
        for recap in recaps:
            self.conn.execute(
                "DELETE FROM session_recaps WHERE session_id = ? AND budget = ?", [recap["session_id"], recap["budget"]]
            )
        self.insert("session_recaps", [{**recap, "built_at": datetime.now(UTC)} for recap in recaps])
        if dropped or recaps:
            self.bump_generation()

    # -- provider batches (stages/provider_batches.py) --

    def record_provider_batch(self, batch: Mapping[str, Any], requests: Mapping[str, str]) -> None:
        """A batch about to be submitted, with what each custom_id stands for (its input fingerprint)."""
        with self.transaction():
            self.insert("provider_batches", [batch])
            self.insert(
                "provider_batch_requests",
                [{"local_id": batch["local_id"], "custom_id": c, "input_fp": fp} for c, fp in requests.items()],
            )
            self.bump_generation()

    def update_provider_batch(self, local_id: str, *, visible: bool = True, **changes: Any) -> None:
        """Columns of one recorded batch (status, provider ids, times): its own transaction, committed at once.
        Not `visible` (only the time it was last asked about changes): the snapshot need not be published again."""
        assignments = ", ".join(f"{column} = ?" for column in changes)
        with self.transaction():
            self.conn.execute(
                f"UPDATE provider_batches SET {assignments} WHERE local_id = ?", [*changes.values(), local_id]
            )
            if visible:
                self.bump_generation()

    def provider_batch_requests(self, local_id: str) -> dict[str, str]:
        """custom_id -> input fingerprint of one batch."""
        rows = self.conn.execute(
            "SELECT custom_id, input_fp FROM provider_batch_requests WHERE local_id = ?", [local_id]
        ).fetchall()
        return dict(rows)

    def inputs_in_provider_batches(self, stage: str, model: str, statuses: Sequence[str]) -> set[str]:
        """Input fingerprints that batches of `stage` for `model` in these statuses were made for."""
        rows = self.conn.execute(
            """SELECT DISTINCT r.input_fp FROM provider_batch_requests r JOIN provider_batches b USING (local_id)
               WHERE b.stage = ? AND b.model = ? AND b.status IN (SELECT unnest(?))""",
            [stage, model, list(statuses)],
        ).fetchall()
        return {fp for (fp,) in rows}

    def store_batch_answers(self, local_id: str, answers: Mapping[str, str]) -> None:
        """Answers of one batch's requests, by custom_id (one statement however many)."""
        import pyarrow as pa

        if not answers:
            return
        table = pa.table({"custom_id": pa.array(list(answers), pa.string()),
                          "answer": pa.array(list(answers.values()), pa.string())})
        with self.transaction(), self._registered(table) as given:
            self.conn.execute(
                f"""UPDATE provider_batch_requests SET answer = a.answer FROM {given} a
                    WHERE provider_batch_requests.local_id = ? AND provider_batch_requests.custom_id = a.custom_id""",
                [local_id],
            )

    def clear_batch_answers(self, input_fps: Sequence[str] | None = None) -> None:
        """Forget the answers kept for these requests (all when None): used, or their session forgotten."""
        if input_fps is None:
            self.conn.execute("UPDATE provider_batch_requests SET answer = NULL WHERE answer IS NOT NULL")
        elif input_fps:
            self.conn.execute(
                "UPDATE provider_batch_requests SET answer = NULL WHERE input_fp IN (SELECT unnest(?))",
                [list(input_fps)],
            )

    def batch_answer(self, stage: str, model: str, input_fp: str) -> str | None:
        """The answer a batch of `stage` for `model` gave to a request made from `input_fp`, if any did."""
        return self.scalar(
            """SELECT r.answer FROM provider_batch_requests r JOIN provider_batches b USING (local_id)
               WHERE b.stage = ? AND b.model = ? AND r.input_fp = ? AND r.answer IS NOT NULL LIMIT 1""",
            [stage, model, input_fp],
        )

    def chunk_context_hashes(self, text_hashes: Sequence[str]) -> set[str]:
        """Those of these context hashes that some chunk still has (the others' text is gone)."""
        rows = self.conn.execute(
            "SELECT DISTINCT context_hash FROM chunks WHERE context_hash IN (SELECT unnest(?))", [list(text_hashes)]
        ).fetchall()
        return {digest for (digest,) in rows}

    # -- durable stage state --

    def bump_generation(self) -> None:
        """Call inside the transaction that changed data readers see (published by the next publish stage). Once
        per transaction is enough to republish it, however many of its writes call this."""
        if self._generation_bumped:
            return
        self.set_meta("generation", str(self.generation() + 1))
        self._generation_bumped = self._in_transaction

    def record_stage(
        self, stage: str, fingerprints: Mapping[str, str], stage_key: str, run_id: str, now: datetime
    ) -> None:
        """These sessions' `stage` output is built from these input fingerprints (call inside the transaction
        that wrote the output, so output and state commit together; the counter, the mark and the rows commit
        together in any case: a counter lost halfway would number new rows below a clean mark)."""
        if not fingerprints:
            return
        with self.transaction():
            seq = int(self.get_meta("stage_seq") or 0) + 1  # higher than any clean mark (stale_sessions)
            self.set_meta("stage_seq", str(seq))
            self.conn.execute(  # rows under another key void the stage's mark
                "DELETE FROM meta WHERE key = ? AND NOT starts_with(value, ?)", [f"clean:{stage}", f"{stage_key}|"])
            self.delete_where_stage(stage, list(fingerprints))
            self.insert(
                "stage_state",
                [
                    {"stage": stage, "session_id": s, "input_fp": fp, "stage_key": stage_key, "run_id": run_id,
                     "built_at": now, "recorded_seq": seq}
                    for s, fp in fingerprints.items()
                ],
            )
            self.bump_generation()

    def stale_sessions(
        self, stage: str, stage_key: str, upstream: str, upstream_key: str, scope: Sequence[str] | None = None
    ) -> dict[str, str]:
        """As a reader finds them, comparing only the upstream rows recorded after the stage's clean mark (meta
        `clean:<stage>`: its key, the upstream's key, a `recorded_seq`): every upstream row up to the mark had this
        stage's output up to date when the mark was set, and a row that changes since is recorded again with a
        higher seq, while the stage's own row is only ever written with the input it was found stale with (a
        change of either key voids the mark, and so does a row recorded under another key: record_stage).
        Unscoped, the mark then moves to just below the first stale row, so a run compares the rows of the last
        change, not every session."""
        name, keys = f"clean:{stage}", f"{stage_key}|{upstream_key}|"
        mark = self.get_meta(name) or ""
        after = int(mark.removeprefix(keys)) if mark.startswith(keys) else -1
        scoped = "AND session_id IN (SELECT unnest(?))" if scope is not None else ""
        recorded = {session_id: (expected, seq) for session_id, expected, seq in self.conn.execute(
            f"""SELECT session_id, md5(input_fp || stage_key), recorded_seq FROM stage_state
                WHERE recorded_seq > ? AND stage = ? AND stage_key = ? {scoped} ORDER BY session_id""",
            [after, upstream, upstream_key] + ([list(scope)] if scope is not None else []),
        ).fetchall()}
        if after < 0 or len(recorded) > STALE_NARROW_MAX:
            stale = super().stale_sessions(stage, stage_key, upstream, upstream_key, scope)
        else:
            built = self.stage_inputs(stage, list(recorded))
            stale = {s: fp for s, (fp, _) in recorded.items() if built.get(s) != (fp, stage_key)}
        if scope is None:  # a stale row at or below the mark (never expected) drops the mark: -1, full compare
            clean = min(recorded[s][1] if s in recorded else 0 for s in stale) - 1 if stale else max(
                (seq for _, seq in recorded.values()), default=after)
            if clean != after:
                with self.transaction():
                    self.set_meta(name, f"{keys}{clean}")
        return stale

    def delete_thread_links(self, session_ids: Sequence[str]) -> None:
        """The sessions' strong links and the inputs they were computed from (stages/threads.py)."""
        for table, column in (("thread_links", "session_a"), ("thread_links", "session_b"),
                              ("thread_inputs", "session_id")):
            self.delete_where(table, column, session_ids)

    def delete_where_stage(self, stage: str, session_ids: Sequence[str]) -> None:
        self.conn.execute(
            "DELETE FROM stage_state WHERE stage = ? AND session_id IN (SELECT unnest(?))", [stage, list(session_ids)]
        )

    def mark_source_missing(self, path: str) -> list[str]:
        """A source file that disappeared: its sessions stay, marked, until `forget` or an exclusion removes
        them (Claude Code deletes month-old transcripts; the memory of them must outlive that)."""
        session_ids = [r[0] for r in self.conn.execute(
            "SELECT session_id FROM sessions WHERE source_path = ?", [path]
        ).fetchall()]  # not the sessions a newer file (an overlapping export) has taken over
        self.conn.execute(
            "UPDATE sessions SET source_missing = true WHERE session_id IN (SELECT unnest(?))", [session_ids]
        )
        self.conn.execute("UPDATE source_files SET status = 'missing' WHERE path = ?", [path])
        self.delete_where("quarantine", "path", [path])
        self.bump_generation()
        return session_ids

    def session_owners(self, session_ids: Sequence[str]) -> dict[str, tuple[str, int | None]]:
        """Of these sessions, those already stored: the file each was last read from, and that file's mtime
        (None when the file is gone)."""
        if not session_ids:
            return {}
        rows = self.conn.execute(
            """SELECT s.session_id, s.source_path, CASE WHEN f.status = 'indexed' THEN f.mtime_ns END
               FROM sessions s LEFT JOIN source_files f ON f.path = s.source_path
               WHERE s.session_id IN (SELECT unnest(?))""",
            [list(session_ids)],
        ).fetchall()
        return {session_id: (path, mtime_ns) for session_id, path, mtime_ns in rows}

    def release_sessions(self, path: str, session_ids: Sequence[str]) -> None:
        """Other files than `path` no longer hold these sessions (`path` took them over)."""
        self.conn.execute(
            """UPDATE source_files SET session_ids = list_filter(session_ids, s -> NOT list_contains(?, s))
               WHERE path <> ? AND len(list_intersect(session_ids, ?)) > 0""",
            [list(session_ids), path, list(session_ids)],
        )

    def stage_inputs(self, stage: str, session_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """These sessions' recorded state of `stage`: input fingerprint and stage key."""
        rows = self.conn.execute(
            "SELECT session_id, input_fp, stage_key FROM stage_state WHERE stage = ? AND session_id IN (SELECT unnest(?))",
            [stage, list(session_ids)],
        ).fetchall()
        return {session_id: (input_fp, key) for session_id, input_fp, key in rows}

    def forget_sessions(self, session_ids: Sequence[str], now: datetime, *, remember: bool = True) -> None:
        """Remove sessions everywhere, with the topic and embedding cache entries made from their chunks, so
        nothing derived from their words is left (call inside a transaction). `remember`: record them as
        forgotten, so their files (if still there) are not indexed again; an exclusion does not, since lifting
        it brings them back."""
        ids = list(session_ids)
        rows = self.query("SELECT session_id, project FROM sessions WHERE session_id IN (SELECT unnest(?))", [ids])
        self.delete_session_caches(ids)
        self.clear_batch_answers()  # a chat answer is known only by its request's fingerprint: all are asked again
        self.delete_sessions(ids, purge=True)
        self.delete_where("session_threads", "session_id", ids)  # its thread_links: by the next threads run
        self.conn.execute(
            "UPDATE source_files SET session_ids = list_filter(session_ids, s -> NOT list_contains($ids, s)) "
            "WHERE list_has_any(session_ids, $ids)",
            {"ids": ids},
        )
        if remember:
            self.delete_where("forgotten", "session_id", ids)
            self.insert("forgotten", [{**r, "forgotten_at": now} for r in rows])
        self.bump_generation()

    def checkpoint(self) -> None:
        self.conn.execute(f"CHECKPOINT {DATABASE}")

    def _rows_need(self) -> float | None:
        """The bytes the rows held now need: the size of the file the last rebuild wrote (`rebuild_baseline`, a
        copy holding nothing but the data), its part beyond REBUILD_FIXED_BYTES scaled by the rows held now.
        None when there is no such measure, or the rows grew past REBUILD_ROWS_GROWTH times the measured ones:
        then any file over REBUILD_MIN_EXCESS is rebuilt, which measures it."""
        rows = _data_rows(self.conn)
        measured = json.loads(self.get_meta("rebuild_baseline") or "{}")
        if measured.get("bytes") is None or rows > REBUILD_ROWS_GROWTH * max(measured["rows"], 1):
            return None
        fixed = min(REBUILD_FIXED_BYTES, measured["bytes"])
        return fixed + (measured["bytes"] - fixed) * rows / max(measured["rows"], 1)


def _outgrown(size: int, need: float | None) -> bool:
    """Whether the (checkpointed) file holds more than REBUILD_GROWTH times what its rows need, by more than
    REBUILD_MIN_EXCESS bytes (see Warehouse._rows_need)."""
    if size <= REBUILD_MIN_EXCESS:
        return False
    return need is None or (size > REBUILD_GROWTH * need and size - need > REBUILD_MIN_EXCESS)


def _has_log(path: Path) -> bool:
    """Whether DuckDB's write-ahead log beside the file holds writes not yet checkpointed into it."""
    try:
        return os.stat(f"{path}.wal").st_size > 0
    except FileNotFoundError:
        return False


def _create_vector_delta_and_view(conn: duckdb.DuckDBPyConnection) -> None:
    """The delta beside an existing base, and the `chunk_embeddings` view searches read over both."""
    conn.execute(f"CREATE TABLE {VECTOR_DELTA} AS FROM {VECTOR_BASE} LIMIT 0")
    _create_vector_view(conn)


def _create_vector_view(conn: duckdb.DuckDBPyConnection) -> None:
    """`chunk_embeddings`: the live vectors of the base (not the unlinked ones) and the delta."""
    conn.execute(
        f"CREATE OR REPLACE VIEW chunk_embeddings AS FROM {VECTOR_BASE} WHERE chunk_id IS NOT NULL "
        f"UNION ALL BY NAME FROM {VECTOR_DELTA}"
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def to_json(value: Any) -> str:
    return json.dumps(value, default=_json_default, ensure_ascii=False, sort_keys=True)


def _to_arrow(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    import pyarrow as pa

    return pa.Table.from_pylist([dict(row) for row in rows])


# ---- snapshot ----------------------------------------------------------------------------------------------


def _data_rows(conn: duckdb.DuckDBPyConnection) -> int:
    present = {r[0] for r in conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_catalog = ?", [DATABASE]).fetchall()}
    return sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in SIZE_TABLES if t in present)


def rebuild_file(warehouse: Path) -> None:
    """Copy every table, view, sequence and index into a fresh file, verify each table's row count, then put it
    in place of the old one (which stays untouched until then). Call under the writer lock, file closed."""
    fresh = warehouse.with_name(f".{warehouse.name}.rebuild")
    fresh.unlink(missing_ok=True)
    conn = connect(warehouse)
    try:
        conn.execute(f"ATTACH {_sql_literal(str(fresh))} AS fresh")
        conn.execute(f"COPY FROM DATABASE {DATABASE} TO fresh")
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = ? AND table_type = 'BASE TABLE'",
            [DATABASE],
        ).fetchall()]
        for table in tables:
            old, new = (conn.execute(f"SELECT count(*) FROM {db}.{table}").fetchone()[0] for db in (DATABASE, "fresh"))
            if old != new:
                raise WarehouseError(f"{warehouse}: rebuild lost rows of {table} ({old} -> {new}); the old file is kept")
        conn.execute("CHECKPOINT fresh")
        conn.execute("DETACH fresh")
    except BaseException:
        fresh.unlink(missing_ok=True)
        raise
    finally:
        conn.close()
    with open(fresh, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(fresh, warehouse)
    _fsync_directory(warehouse.parent)
    compact = warehouse.stat().st_size
    with Warehouse(warehouse) as wh, wh.transaction():  # what the rows need, for _outgrown()
        wh.set_meta("rebuild_baseline", to_json({"bytes": compact, "rows": _data_rows(wh.conn)}))


PUBLISH_BLOCK = 1 << 20
FICLONE = 0x40049409  # linux/fs.h: share the source's extents (btrfs, xfs, ...): a copy in O(1)


def publish_snapshot(warehouse: Path) -> Path:
    """Make the (closed, checkpointed) live file the reader snapshot, never partially and without writing the
    whole file for a small change.

    The new snapshot is prepared under another name, fsynced and renamed over the old one: readers that have the
    old snapshot open keep reading it, new readers get the new one. It is prepared, cheapest first, as a
    copy-on-write clone (where the file system offers one), by rewriting only the blocks that differ in the
    spare (the snapshot before the current one, kept for this, when no reader has it open any more), or as a
    plain copy."""
    target = snapshot_path(warehouse)
    spare = target.with_name(f".{target.name}.spare")
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    if _clone(warehouse, temp):
        prepared = temp
    elif spare.exists() and not _in_use(spare):
        _rewrite_changed_blocks(warehouse, spare)
        prepared = spare
    else:
        _copy(warehouse, temp)
        prepared = temp
    keep = target.with_name(f".{target.name}.{os.getpid()}.keep")
    kept = target.exists()
    if kept:
        keep.unlink(missing_ok=True)
        os.link(target, keep)
    os.replace(prepared, target)
    if kept:
        os.replace(keep, spare)
    _fsync_directory(target.parent)
    return target


def _clone(source: Path, target: Path) -> bool:
    try:
        with open(source, "rb") as original, open(target, "wb") as clone:
            fcntl.ioctl(clone.fileno(), FICLONE, original.fileno())
            os.fsync(clone.fileno())
        return True
    except OSError:
        target.unlink(missing_ok=True)
        return False


def _copy(source: Path, target: Path) -> None:
    with open(source, "rb") as original, open(target, "wb") as copy:
        shutil.copyfileobj(original, copy, PUBLISH_BLOCK)
        copy.flush()
        os.fsync(copy.fileno())


def _rewrite_changed_blocks(source: Path, target: Path) -> int:
    """Make `target` byte-equal to `source` writing only the blocks that differ; how many were written."""
    written = 0
    with open(source, "rb") as original, open(target, "r+b") as copy:
        offset = 0
        while block := original.read(PUBLISH_BLOCK):
            copy.seek(offset)
            if copy.read(len(block)) != block:
                copy.seek(offset)
                copy.write(block)
                written += 1
            offset += len(block)
        copy.truncate(offset)
        copy.flush()
        os.fsync(copy.fileno())
    return written


def _in_use(path: Path) -> bool:
    """Whether a reader may have the file open: another process's DuckDB holds its lock on it, or this process
    has it open (its own locks never conflict with it; without /proc, assume so)."""
    identity = path.stat()
    try:
        descriptors = os.listdir("/proc/self/fd")
    except OSError:
        return True
    for name in descriptors:
        try:
            info = os.stat(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if (info.st_dev, info.st_ino) == (identity.st_dev, identity.st_ino):
            return True
    descriptor = os.open(path, os.O_RDWR)
    try:
        fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(descriptor)


def _fsync_directory(folder: Path) -> None:
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def keyword_search(
    conn: duckdb.DuckDBPyConnection,
    corpus: str,
    query: str,
    *,
    limit: int,
    scope: str | None = None,
    scope_params: Sequence[Any] = (),
    scope_keys: str | None = None,
    stats: tuple[int, float] | None = None,
    scope_share: float = 1.0,
) -> list[tuple[str, str | None, float]]:
    """(doc_id, session_id, BM25 score) best first, of the documents `scope` (a query of doc ids) or `scope_keys`
    (a query of their doc keys) keeps, either with `scope_params`; `stats` are the corpus's `corpus_stats`, which
    a reader of a snapshot may keep (else counted here); `scope_share`, the share of documents in scope if the
    caller knows it (it only decides whether pruning is worth a try).

    The same scores as DuckDB's fts `match_bm25`, reading only the postings of the query's terms (postings are
    sorted by term, so zone maps skip the rest, and carry their document's length) instead of scoring every row.
    Documents tied at the cut-off score may differ from a fresh build's (ties are broken by internal keys).

    Max-score pruning: a term in more than COMMON_TERM_SHARE of the documents adds less than idf x (k + 1) to any
    score (together: `bound`). When the rarer query terms hold at least `limit` documents in scope (by
    `scope_share`), those are scored by the rarer terms alone first (short posting lists); only the ones within
    `bound` of the limit-th best of those can reach the top, and they alone are scored in full (the common terms'
    postings read for them only). When the last of the best `limit` of them outscores `bound`, no document holding
    only common terms can enter either: they are the full computation's best, with its scores. Otherwise every
    posting is scored."""
    # literals, not bound parameters: those skip the pushdown, and DuckDB looks for pandas for each bound value
    stems = [row[0] for row in conn.execute(
        f"SELECT DISTINCT stem(unnest({tokens_sql(_sql_literal(query.replace(chr(0), ' ')))}), 'porter')"  # NUL: a separator
    ).fetchall()]
    if not stems:
        return []
    terms = conn.execute(
        f"SELECT term_id, df FROM kw_terms WHERE corpus = {_sql_literal(corpus)} AND df > 0 "
        f"AND term IN ({sql_string_list(stems)})"
    ).fetchall()
    if not terms:  # no query word is indexed
        return []
    dead = _dead_postings(conn, [int(term_id) for term_id, _ in terms])
    terms = [(term_id, df - (dead or {}).get(int(term_id), 0)) for term_id, df in terms]
    terms = [(term_id, df) for term_id, df in terms if df > 0]
    if not terms:
        return []
    alive = "AND doc_key NOT IN (SELECT doc_key FROM kw_dead)" if dead is not None else ""
    documents, average = stats or corpus_stats(conn, corpus)
    idf = {int(term_id): math.log((documents - df + 0.5) / (df + 0.5) + 1, 10) for term_id, df in terms}
    common = [int(term_id) for term_id, df in terms if df > COMMON_TERM_SHARE * documents]
    rare = [term_id for term_id in idf if term_id not in common]
    rare_postings = sum(df for term_id, df in terms if int(term_id) in rare)
    if scope:
        scope_keys = f"SELECT doc_key FROM kw_docs WHERE corpus = {_sql_literal(corpus)} AND doc_id IN ({scope})"
    in_scope = f"AND doc_key IN ({scope_keys})" if scope_keys else ""

    def scores(term_ids: Sequence[int], scoped: str = in_scope) -> str:
        """doc_key and its BM25 score over `term_ids`, of the documents `scoped` keeps holding any of them."""
        weights = ", ".join(f"({term_id}, {idf[term_id]!r}::DOUBLE)" for term_id in term_ids)
        return f"""
            SELECT doc_key, sum((idf * tf * ({BM25_K} + 1) / {SCORE_UNIT!r}::DOUBLE
                                 / (tf + {BM25_K} * (1 - {BM25_B} + {BM25_B} * len / {float(average)!r}::DOUBLE)))::BIGINT
                               ) * {SCORE_UNIT!r}::DOUBLE AS score
            FROM kw_postings JOIN (VALUES {weights}) q(term_id, idf) USING (term_id)
            WHERE term_id IN ({", ".join(map(str, term_ids))}) {scoped} {alive}"""

    def best(candidates: str = in_scope, reaching: str = "") -> list[tuple[str, str | None, float]]:
        return conn.execute(
            f"""
            {reaching}
            SELECT d.doc_id, d.session_id, top.score FROM (
                {scores(list(idf), candidates)} GROUP BY doc_key ORDER BY score DESC, doc_key LIMIT {int(limit)}
            ) top JOIN kw_docs d USING (doc_key) ORDER BY top.score DESC, d.doc_id""",
            list(scope_params),
        ).fetchall()

    if common and rare_postings * scope_share >= limit:  # else few candidates would reach the cut: no gain
        bound = sum(idf[t] for t in common) * (BM25_K + 1) + SCORE_SLACK
        found = best(  # the documents in reach are in scope: the full scores need not check it again
            "AND doc_key IN (SELECT doc_key FROM reaching)",
            f"""WITH by_rare AS MATERIALIZED ({scores(rare)} GROUP BY doc_key),
                reaching AS (SELECT doc_key FROM by_rare WHERE score >= (
                    SELECT score FROM by_rare ORDER BY score DESC LIMIT 1 OFFSET {int(limit) - 1}) - {bound!r})""",
        )
        if len(found) == limit and found[-1][2] >= bound:
            return found
    return best()


def _dead_postings(conn: duckdb.DuckDBPyConnection, term_ids: Sequence[int]) -> dict[int, int] | None:
    """Per term, how many dead documents (`kw_dead`, see KEYWORD_DEAD_SHARE) still have a posting of it: what
    its stored document frequency counts beyond the live documents. None when there are no dead documents (or no
    such table: a snapshot from before migration 12)."""
    try:
        if not conn.execute("SELECT count(*) FROM kw_dead").fetchone()[0]:
            return None
    except duckdb.CatalogException:
        return None
    return dict(conn.execute(
        f"""SELECT term_id, count(*) FROM kw_postings WHERE term_id IN ({", ".join(map(str, term_ids))})
            AND doc_key IN (SELECT doc_key FROM kw_dead) GROUP BY term_id"""
    ).fetchall())


def corpus_stats(conn: duckdb.DuckDBPyConnection, corpus: str) -> tuple[int, float]:
    """Documents and their average length in a keyword corpus (what BM25 normalizes by): a scan of every document."""
    return conn.execute("SELECT count(*), avg(len) FROM kw_docs WHERE corpus = ?", [corpus]).fetchone()


def snapshot_generation(warehouse: Path) -> int | None:
    """The generation the published snapshot was copied at; None when it is missing or cannot be read whole
    (a truncated or damaged snapshot is republished by the next run)."""
    target = snapshot_path(warehouse)
    if not target.is_file():
        return None
    try:
        conn = connect(target, read_only=True, extensions=False)  # reads plain tables only
    except WarehouseError:
        return None
    try:
        value = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        for table in ("sessions", "chunks", "stage_state"):
            conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    except duckdb.Error:
        return None
    finally:
        conn.close()
    return int(value[0]) if value else 0


def publish_if_stale(warehouse: Path, generation: int) -> Path | None:
    """Publish when the snapshot is missing, unreadable or older than the live file's `generation` (call with
    the writer lock held and the live file checkpointed and closed)."""
    if snapshot_generation(warehouse) == generation:
        return None
    return publish_snapshot(warehouse)


# ---- run marker ----------------------------------------------------------------------------------------------


def run_marker_path(warehouse: Path) -> Path:
    """`<stem>.run.json`: the last writer's run id and whether it finished, readable without the live file."""
    return warehouse.with_name(f"{warehouse.stem}.run.json")


def write_run_marker(warehouse: Path, run_id: str, status: str) -> None:
    marker = {"run_id": run_id, "status": status, "pid": os.getpid(), "time": datetime.now(UTC).isoformat()}
    path = run_marker_path(warehouse)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(marker), encoding="utf-8")
    os.replace(temp, path)


def read_run_marker(warehouse: Path) -> dict[str, Any] | None:
    try:
        return json.loads(run_marker_path(warehouse).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None


def writer_is_running(warehouse: Path) -> bool:
    """True while some process holds the writer lock (a run is under way)."""
    path = _lock_path(warehouse)
    if not path.exists():
        return False
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    return False


class Snapshot(_Queries):
    """A reader's handle: the named queries over a read-only connection."""

    def __init__(self, conn: duckdb.DuckDBPyConnection) -> None:
        self.conn = conn


class NothingIndexedYet(WarehouseError):
    """No snapshot has been published yet: readers answer empty ("nothing indexed yet") instead of failing."""


def empty_reader(*, extensions: bool = True) -> duckdb.DuckDBPyConnection:
    """An empty warehouse in memory, for readers before the first snapshot: every query answers empty."""
    conn = _extension_connection(extensions=extensions)
    conn.execute(f"ATTACH ':memory:' AS {DATABASE}")
    conn.execute(f"USE {DATABASE}")
    migrate(conn)
    conn.execute(f"CREATE TABLE {VECTOR_BASE} (chunk_id VARCHAR, session_id VARCHAR, text_hash VARCHAR, embedding FLOAT[])")
    _create_vector_delta_and_view(conn)
    return conn


def open_reader(warehouse: Path, *, extensions: bool = True) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the published snapshot beside `warehouse` (readers never open the live file,
    which a run may be writing); without `extensions`, load_extensions adds them when needed."""
    warehouse = Path(warehouse)
    snapshot = warehouse if warehouse.name.endswith(".search.duckdb") else snapshot_path(warehouse)
    if not snapshot.exists():
        raise NothingIndexedYet(f"{warehouse}: nothing indexed yet; run `sessionmem index` (or wait for it to finish)")
    return connect(snapshot, read_only=True, extensions=extensions)
