"""SessionMemory: the thin reader over the published snapshot (no Dagster import, never writes the warehouse).

Chunk search is hybrid: BM25 over chunk text and its contextual prefix, and cosine similarity over contextual
embeddings, fused by a convex combination of scores (`fuse_scores`), so exact names and paths (BM25) and
paraphrases (vectors) both find their chunk. Session and memory search fuse by reciprocal rank. Every search appends
one line (time, latency, result count) to `search-log.jsonl` beside the warehouse.

When the embedding provider fails (a remote server down or answering errors), searches answer from the keyword
index alone and say so in `SessionMemory.notice`. Inputs are checked first: an empty query or a limit below 1
raises `InvalidInputError` (a ValueError) with a one-line message the CLI and the MCP server pass on as is.
"""

from __future__ import annotations

import functools
import json
import math
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import duckdb

from sessionmem_pipeline.config import Settings, load_settings
from sessionmem_pipeline.core.context import zone
from sessionmem_pipeline.core.errors import InvalidInputError
from sessionmem_pipeline.core.timeline import TimelineDay, TimelineSession, default_window, first_line, group_by_day
from sessionmem_pipeline.core.timewindow import TimeWindow, time_bound, understood_window
from sessionmem_pipeline.warehouse import (
    DATABASE,
    VECTOR_BASE,
    VECTOR_DELTA,
    Snapshot,
    corpus_stats,
    empty_reader,
    keyword_search,
    load_extensions,
    open_reader,
    search_log_path,
    snapshot_path,
    sql_string_list,
)

CANDIDATES = 150  # per retriever, before fusion
SESSION_FILTERS = frozenset({"after", "before", "project", "session_id", "topics"})
EXACT_SCAN_MAX = 10_000
SELECTIVE_SHARE = 0.1
"""Filtered searches look among the matching chunks only (an exact scan of their vectors, a few µs each; BM25
scoped to them) when at most EXACT_SCAN_MAX match or fewer than this share of all chunks does (a selective
filter: the index's top-k would hold too few of them)."""
READER_THREADS = 1
"""A search's queries are small: DuckDB's parallel operators cost more than they save there (measured at 100k
chunks on 2 busy cores, CPU p50: fetching 5 results 32 -> 10 ms, a has_decision search 123 -> 85 ms)."""
OVERFETCH = 1.5
"""Otherwise the index's nearest limit x OVERFETCH / (share of chunks matching) are filtered: about limit x
OVERFETCH of them match (the search among the matching chunks is the fallback when fewer than `limit` do)."""
BM25_OVERFETCH_SHARE = 0.5
"""BM25 over-fetches the same way only when at least this share matches: scoped to 20% of 100k chunks it costs
what over-fetching does (27 vs 28 ms CPU p50), scoped to 80% twice as much (42 vs 22 ms)."""
FILTER_TABLES = 8
"""Filters that are not selective whose matching chunks a reader keeps per snapshot (`_filter_table`), at most."""


def require_query(query: str) -> str:
    """The query, unless it has no words to search for."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError("the query is empty: give the words or question to search for")
    return query


def require_positive(name: str, value: int) -> int:
    """`value`, unless it is below 1 (a count of results or a token budget)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{name} must be a whole number of at least 1, got {value!r}")
    return value


def vector_literal(vector: Sequence[float]) -> str:
    """A query vector as a SQL string to cast to FLOAT[N]: binding a Python list costs ~30 ms, this ~1 ms."""
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"


@dataclass(frozen=True)
class SearchResult:
    session_id: str
    project: str
    chunk_index: int
    timestamp: datetime | None
    speakers: list[str]
    topics: list[str]
    score: float
    content: str
    context: str
    message_ids: list[str]
    source_path: str
    stage: str | None = None
    thread_id: str | None = None  # the thread of related sessions this chunk's session belongs to

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["timestamp"] = self.timestamp.isoformat() if self.timestamp else None
        return data


@dataclass(frozen=True)
class Filters:
    """Chunk filters (INTERFACES.md); session-level ones are those `search_sessions` accepts too."""

    after: str | date | datetime | None = None
    before: str | date | datetime | None = None
    speaker: str | None = None
    role: str | None = None
    topics: Sequence[str] | None = None
    has_decision: bool | None = None
    has_action: bool | None = None
    project: str | None = None
    session_id: str | None = None
    timezone: str = field(default="UTC", compare=False)

    def _span_and_scope(self, start: str, end: str, alias: str) -> tuple[list[str], list[Any]]:
        """after/before against the given columns, and project, session_id, topics: what chunks and sessions share."""
        clauses: list[str] = []
        params: list[Any] = []
        for value, clause in (
            (self.after, f"{end} >= ?"),
            (self.before, f"{start} < ?"),
        ):
            if value is not None:
                clauses.append(clause)
                params.append(parse_moment(value, self.timezone))
        for value, clause in ((self.project, f"{alias}.project = ?"), (self.session_id, f"{alias}.session_id = ?")):
            if value:
                clauses.append(clause)
                params.append(value)
        if self.topics:
            clauses.append(f"list_has_any({alias}.topics, ?::VARCHAR[])")
            params.append([t.lower() for t in self.topics])
        return clauses, params

    def chunk_sql(self, alias: str = "c") -> tuple[str, list[Any]]:
        """WHERE text and parameters selecting chunks (`after` inclusive, `before` exclusive, on the chunk's start)."""
        clauses, params = self._span_and_scope(f"{alias}.ts_start", f"{alias}.ts_start", alias)
        if self.speaker:
            clauses.append(f"list_contains(list_transform({alias}.speakers, s -> lower(s)), lower(?))")
            params.append(self.speaker)
        for value, clause in (
            (self.role, f"list_contains({alias}.roles, ?)"),
            (self.has_decision, f"{alias}.has_decision = ?"),
            (self.has_action, f"{alias}.has_action = ?"),
        ):
            if value is not None:
                clauses.append(clause)
                params.append(value)
        return (" AND ".join(clauses) or "TRUE"), params

    def session_sql(self, alias: str = "s") -> tuple[str, list[Any]]:
        """WHERE text selecting sessions: a session matches `after`/`before` when its span overlaps them."""
        clauses, params = self._span_and_scope(
            f"{alias}.started_at", f"coalesce({alias}.ended_at, {alias}.started_at)", alias
        )
        return (" AND ".join(clauses) or "TRUE"), params


def parse_moment(value: str | date | datetime, timezone: str) -> datetime:
    """An ISO date or datetime; a bare date is that day's start in the configured zone; naive times too."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    else:
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"not an ISO date or datetime: {value!r} (expected e.g. 2026-03-02 or 2026-03-02T14:00)")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone(timezone))
    return moment.astimezone(UTC)


def deduplicate(results: Sequence[SearchResult]) -> list[SearchResult]:
    """Best first, dropping a result that overlaps one already kept (the parts of one long exchange share their
    opening message), so one exchange counts once."""
    kept: list[SearchResult] = []
    seen: dict[str, set[str]] = {}
    for result in results:
        ids = set(result.message_ids)
        if ids & seen.get(result.session_id, set()):
            continue
        seen.setdefault(result.session_id, set()).update(ids)
        kept.append(result)
    return kept


def _nearest_sql(vector: str, limit: int) -> str:
    """The nearest `limit` chunk vectors to `vector` (a typed SQL expression): the HNSW index's top over the base,
    and an exact scan of the small delta of vectors not yet in the index (`+ 0` keeps the optimizer from the index
    there). Base rows with a NULL chunk id were unlinked (warehouse.delete_vectors) and are dropped after the
    index's top."""
    return f"""
        SELECT chunk_id, distance FROM (
            (SELECT chunk_id, array_cosine_distance(embedding, {vector}) AS distance
             FROM {VECTOR_BASE} ORDER BY distance LIMIT {int(limit)})
            UNION ALL
            (SELECT chunk_id, array_cosine_distance(embedding, {vector}) + 0 AS distance FROM {VECTOR_DELTA})
        ) WHERE chunk_id IS NOT NULL ORDER BY distance, chunk_id LIMIT {int(limit)}"""


def _similarities(rows: Sequence[tuple[str, float]]) -> dict[str, float]:
    return {chunk_id: 1.0 - distance for chunk_id, distance in rows}


def fuse_scores(
    bm25: dict[str, float],
    vector: dict[str, float],
    *,
    bm25_weight: float = 1.0,
    vector_weight: float = 1.0,
    bm25_limit: int = CANDIDATES,
) -> dict[str, float]:
    """bm25_weight x BM25 / best BM25 + vector_weight x cosine similarity, best first.

    A convex combination of scores rather than of ranks: when one retriever is much sharper than the other (BM25
    on names and rare words against a small embedding model), ranks alone let the weaker one push good hits down
    (measured in benchmarks/retrieval.py). A candidate the vector search did not return gets its lowest returned
    similarity, a bound on what it would have had. BM25 scores every chunk holding a query term, so when it
    returned fewer than `bm25_limit` chunks the others hold none and score 0: a rare term's only match keeps
    its whole keyword credit instead of lending it to every vector-only candidate.
    """
    top = max(bm25.values(), default=0.0) or 1.0
    bm25_floor = min(bm25.values(), default=0.0) if len(bm25) >= bm25_limit else 0.0
    vector_floor = min(vector.values(), default=0.0)
    fused = {
        chunk_id: bm25_weight * bm25.get(chunk_id, bm25_floor) / top
        + vector_weight * vector.get(chunk_id, vector_floor)
        for chunk_id in bm25.keys() | vector.keys()
    }
    return dict(sorted(fused.items(), key=lambda item: (-item[1], item[0])))


def keyword_ranking(query: str, memories: Sequence[MemoryResult]) -> list[str]:
    """Memory ids holding the most of the query's words first (those holding none left out): a keyword ranking
    for the few inbox memories no BM25 index covers yet. A word matches another it begins ("deploy", "deploys")."""
    words = set(re.findall(r"\w{3,}", query.lower()))

    def matches(content: str) -> int:
        found = set(re.findall(r"\w{3,}", content.lower()))
        return sum(any(w.startswith(q) or q.startswith(w) for w in found) for q in words)

    hits = {m.memory_id: matches(m.content) for m in memories}
    return sorted((mid for mid, n in hits.items() if n), key=lambda mid: (-hits[mid], mid))


def cosine_similarities(
    query_vector: Sequence[float], keys: Sequence[str], vectors: Sequence[Sequence[float]]
) -> dict[str, float]:
    """Cosine similarity of each vector to the query vector, by key."""
    import numpy as np

    matrix = np.asarray(vectors, dtype=np.float32).reshape(len(keys), -1)
    query = np.asarray(query_vector, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(query) or 1.0)
    scores = matrix @ query / np.where(norms == 0, 1.0, norms)
    return {key: float(score) for key, score in zip(keys, scores, strict=True)}


def reciprocal_rank_fusion(rankings: Sequence[tuple[Sequence[str], float]], k: int = 60) -> dict[str, float]:
    """Σ weight / (k + rank) over the rankings that list an item (rank from 1)."""
    scores: dict[str, float] = {}
    for ranked, weight in rankings:
        for rank, item in enumerate(ranked, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return scores


def _one_snapshot(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a search against one snapshot: whether a newer one was published is looked at once, when it starts (a
    search asks for its connection about twenty times, and each look is a stat of the snapshot file, 0.15 ms on a
    busy disk)."""

    @functools.wraps(method)
    def pinned(self: SessionMemory, *args: Any, **kwargs: Any) -> Any:
        outer = self._pinned
        if not outer:
            self.connection()
            self._per_snapshot("searches", lambda conn: [0])[0] += 1
            self._pinned = True
        try:
            return method(self, *args, **kwargs)
        finally:
            self._pinned = outer

    return pinned


class SessionMemory:
    """Search the memory built by `sessionmem index` or the Dagster job."""

    def __init__(
        self,
        warehouse: str | Path | None = None,
        *,
        config: str | Path | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.settings = settings or load_settings(config, {"warehouse": str(warehouse) if warehouse else None})
        if settings is not None and warehouse is not None:
            self.settings = settings.with_overrides({"warehouse": str(warehouse)})
        self.warehouse = self.settings.warehouse
        self._conn: duckdb.DuckDBPyConnection | None = None
        self._second: duckdb.DuckDBPyConnection | None = None  # `_cursor`
        self._pinned = False  # inside a search: the snapshot it started with (`_one_snapshot`)
        self._vector_search: Future | None = None  # `_vectors_meanwhile`'s search on `_second`
        self._opened: tuple[int, int] | None = None
        self._embedder = None
        self._embedding: tuple[Any, str, Future] | None = None  # (embedder, query, its vectors) of this search
        self._embedding_thread: ThreadPoolExecutor | None = None
        self._facts: dict[str, Any] = {}  # what `_per_snapshot` read from the connection `_facts_of`
        self._facts_of: duckdb.DuckDBPyConnection | None = None
        self.notice: str | None = None
        """Set by the last search when it could not use every retriever (keyword-only results), else None."""

    # -- connection to the newest snapshot --

    def _snapshot_identity(self) -> tuple[int, int] | None:
        try:
            info = snapshot_path(self.warehouse).stat()
        except FileNotFoundError:
            return None
        return info.st_ino, info.st_mtime_ns

    def connection(self) -> duckdb.DuckDBPyConnection:
        """The reader connection, reopened when a newer snapshot has been published; before the first one, an
        empty warehouse, so every call answers empty while the first index runs. It reads plain tables: the
        retrievers take `_search_connection`."""
        if self._pinned and self._conn is not None:
            return self._conn
        identity = self._snapshot_identity()
        if self._conn is None or identity != self._opened:
            self._close_connections()
            self._conn = open_reader(self.warehouse, extensions=False) if identity is not None else empty_reader()
            self._conn.execute(f"SET threads = {READER_THREADS}")
            self._opened = identity
        return self._conn

    def _search_connection(self, *extensions: str) -> duckdb.DuckDBPyConnection:
        """The reader connection with the given extensions loaded, once per opened snapshot: fts for BM25
        (`stem`), vss for the HNSW index. A recap or a listing needs neither, and loading vss costs 0.1-0.3 s."""
        conn = self.connection()
        loaded = self._per_snapshot("extensions", lambda conn: set())
        missing = [name for name in extensions if name not in loaded]
        if missing:
            load_extensions(conn, missing)
            loaded.update(missing)
        return conn

    def _use_index(self) -> bool:
        """Whether a vector search goes through the HNSW index: not in the first search of an opened snapshot,
        which scans exactly instead (however many vector searches it runs: a date named in the query ranks twice).
        Loading the index costs more than the scan it saves once (100k chunks, CPU: the first search through the
        index 320-400 ms, an exact scan 210 ms cold and 55 ms warm, against 8 ms through the index once loaded),
        so a one-off search (the CLI) never loads it, nor vss."""
        return self._searched_before()

    @property
    def indexed(self) -> bool:
        """False until the first snapshot is published ("nothing indexed yet")."""
        return self._snapshot_identity() is not None

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        """A second connection to the open snapshot (its tables, extensions and `memory` database), for a query
        that runs beside one on `connection()`."""
        if self._second is None:
            self._second = self.connection().cursor()
            self._second.execute(f"USE {DATABASE}")
        return self._second

    def _close_connections(self) -> None:
        """Close both connections, once the vector search still running on the second one is done (a newer snapshot
        may be opened in the middle of a search; closing a connection closes its cursors)."""
        if self._vector_search is not None:
            wait([self._vector_search])
            self._vector_search = None
        for conn in (self._second, self._conn):
            if conn is not None:
                conn.close()
        self._second = self._conn = None

    def close(self) -> None:
        self._close_connections()
        if self._embedding_thread is not None:
            self._embedding_thread.shutdown()
            self._embedding_thread = None

    def _per_snapshot(self, key: str, compute: Callable[[duckdb.DuckDBPyConnection], Any]) -> Any:
        """What `compute` reads from the open snapshot, computed once (fixed until a newer snapshot is opened)."""
        conn = self.connection()
        if self._facts_of is not conn:
            self._facts, self._facts_of = {}, conn
        if key not in self._facts:
            self._facts[key] = compute(conn)
        return self._facts[key]

    def _searched_before(self) -> bool:
        """Whether an earlier search (not the one running: `_one_snapshot` counts each once) ran on the open
        snapshot."""
        return self._per_snapshot("searches", lambda conn: [0])[0] > 1

    def _filter_table(self, filters: Filters) -> str | None:
        """A table (in the connection's memory) of the chunks a filter keeps, with their BM25 document keys and
        rows in the HNSW base (`chunk_id`, `doc_key`, `vector_row`), built once per snapshot for a filter that is
        not selective (`_overfetched`), from the snapshot's second search on (a one-off search would pay more to
        build it than it saves); None otherwise. BM25 and the index's over-fetch then join it instead of looking
        up every chunk and document per search (has_decision at 100k chunks: both joined 100k rows of ids). Not
        for a time window: its bounds move from search to search ("last month" against the clock)."""
        if filters.after is not None or filters.before is not None or not self._searched_before():
            return None
        where, params = filters.chunk_sql()
        if not self._overfetched(where, params, CANDIDATES):
            return None
        tables: dict[str, str] = self._per_snapshot("filter tables", lambda conn: {})
        key = f"{where}:{params!r}"
        if key not in tables:
            conn = self.connection()
            if len(tables) >= FILTER_TABLES:
                conn.execute(f"DROP TABLE {tables.pop(next(iter(tables)))}")
            name = f"memory.main.matching_{abs(hash(key)):x}"
            conn.execute(
                f"""CREATE TABLE {name} AS
                    SELECT c.chunk_id, d.doc_key, e.rowid AS vector_row FROM chunks c
                    LEFT JOIN kw_docs d ON d.corpus = 'chunks' AND d.doc_id = c.chunk_id
                    LEFT JOIN {VECTOR_BASE} e ON e.chunk_id = c.chunk_id
                    WHERE {where}""",
                params,
            )
            tables[key] = name
        return tables[key]

    def _chunk_keys(self) -> str | None:
        """A table (in the connection's memory) of every chunk's row in `chunks`, BM25 document key and hash of its
        id (`chunk_row`, `doc_key`, `id_hash`), built once per snapshot from its second search on (1M chunks:
        0.5 s, 33 MB), so that a selective filter's BM25 scope and the fetch of the results shown find chunks by
        row instead of joining their ids, a scan of every id (1M chunks: ~25 ms of scoping BM25 to a project,
        ~10 ms of fetching 5 results). None in a snapshot's first search (a one-off search would pay more to
        build it than it saves) and before the keyword index."""
        if not self._searched_before():
            return None

        def build(conn: duckdb.DuckDBPyConnection) -> str | None:
            try:
                conn.execute(
                    """CREATE TABLE memory.main.chunk_keys AS
                       SELECT c.rowid AS chunk_row, d.doc_key, hash(c.chunk_id) AS id_hash FROM chunks c
                       LEFT JOIN kw_docs d ON d.corpus = 'chunks' AND d.doc_id = c.chunk_id"""
                )
            except duckdb.CatalogException:
                return None
            return "memory.main.chunk_keys"

        return self._per_snapshot("chunk keys", build)

    def _embedded_count(self) -> int:
        """Vectors in the open snapshot."""
        count = "SELECT count(*) FROM chunk_embeddings"
        return self._per_snapshot("vectors", lambda conn: conn.execute(count).fetchone()[0])

    def _keyword_search(self, corpus: str, query: str, **options: Any) -> list[tuple[str, str | None, float]]:
        """warehouse.keyword_search over the snapshot, its corpus statistics counted once per snapshot."""
        conn = self._search_connection("fts")
        stats = self._per_snapshot(f"stats:{corpus}", lambda conn: corpus_stats(conn, corpus))
        return keyword_search(conn, corpus, query, stats=stats, **options)

    def _meta(self, key: str) -> str | None:
        """A meta value of the open snapshot (a search asks for the embedding model several times)."""

        def read(conn: duckdb.DuckDBPyConnection) -> str | None:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
            return row[0] if row else None

        return self._per_snapshot(f"meta:{key}", read)

    def embedder(self):
        """The configured embedder; it must be the model the warehouse was built with."""
        if self._embedder is None:
            from sessionmem_pipeline.providers import embedder_from_settings

            self._embedder = embedder_from_settings(self.settings)
        stored = self._meta("embedding_model")
        if stored and stored != self._embedder.model_id:
            raise ValueError(
                f"{self.warehouse}: indexed with {stored} but configured for {self._embedder.model_id}; "
                "run `sessionmem reembed` (or change embedding.* back)"
            )
        return self._embedder

    def _start(self) -> float:
        """Begin a search: clear the previous one's notice and query embedding; the start time for `_log`."""
        self.notice = None
        self._embedding = None
        return time.perf_counter()

    def _embed_query(self, query: str) -> Future | None:
        """The query's embedding, started in a worker thread once per search (a cold process loads the model
        there, ~0.3 s, while BM25 runs); None without vectors or after the provider failed in this search."""
        if self.notice is not None or not self._meta("embedding_model"):
            return None
        embedder = self.embedder()
        if self._embedding is None or self._embedding[:2] != (embedder, query):
            if self._embedding_thread is None:
                self._embedding_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sessionmem-embed")
            self._embedding = (embedder, query, self._embedding_thread.submit(embedder.embed, [query]))
        return self._embedding[2]

    def _query_vector(self, query: str) -> str | None:
        """The query's embedding as a vector literal; None without vectors, or when the provider fails (then the
        search is keyword-only and `notice` says why; later retrievers of the same search do not ask again)."""
        pending = self._embed_query(query)
        if pending is None:
            return None
        from sessionmem_pipeline.providers.embedders import EmbeddingError

        try:
            vector = pending.result()[0]
        except Exception as exc:
            self._embedding = None  # asked again by the next search
            if not isinstance(exc, EmbeddingError):
                raise
            self.notice = f"keyword-only results: the embedding provider failed ({exc})"
            return None
        return vector_literal(vector)

    def _log(self, kind: str, started: float, results: int) -> None:
        line = {
            "time": datetime.now(UTC).isoformat(),
            "kind": kind,
            "latency_ms": round((time.perf_counter() - started) * 1000, 2),
            "results": results,
        }
        try:
            with open(search_log_path(self.warehouse), "a", encoding="utf-8") as log:
                log.write(json.dumps(line) + "\n")
        except OSError:
            pass  # metrics are best effort: a read-only folder must not break search

    # -- chunk search --

    def _filters(self, now: datetime | None = None, **filters: Any) -> Filters:
        """Filters with `after`/`before` read as instants: ISO dates and datetimes, or dates as people say them
        ("yesterday", "last week", "since Monday"), against `now` (default: the machine's clock)."""
        zone_name = self.settings.timezone
        for key in ("after", "before"):
            if filters.get(key) is not None:
                filters[key] = time_bound(filters[key], now or datetime.now(UTC), zone_name)
        return Filters(**filters, timezone=zone_name)

    def time_window(
        self, query: str, *, after: Any = None, before: Any = None, now: datetime | None = None
    ) -> tuple[TimeWindow | None, str | None, str]:
        """What a search understands by time (core.timewindow.understood_window) in the configured zone."""
        return understood_window(query, after, before, now or datetime.now(UTC), self.settings.timezone)

    def bm25_ranking(self, query: str, filters: Filters, limit: int = CANDIDATES) -> dict[str, float]:
        """Chunk ids and BM25 scores, best first (each chunk read with the end of the one before it, see
        warehouse.KEYWORD_CORPORA)."""
        try:
            if filters.chunk_sql()[0] == "TRUE":
                rows = self._keyword_search("chunks", query, limit=limit)
            else:
                rows = self._filtered_bm25(query, filters, limit)
        except duckdb.CatalogException:
            return {}  # a snapshot from before the keyword index: `sessionmem index` builds it
        return {chunk_id: score for chunk_id, _, score in rows}

    def _filtered_bm25(self, query: str, filters: Filters, limit: int) -> list[tuple[str, str | None, float]]:
        """The best `limit` chunks the filter keeps. When it keeps most of them (`_overfetched`), the best
        unfiltered limit x OVERFETCH / share are checked against it first: if at least `limit` of them pass (or
        they are every chunk holding a query term), they are exactly the best that pass (one left out scores
        below all of them). Else the search is scoped to the filter, which joins every passing chunk."""
        where, params = filters.chunk_sql()
        fetch = self._overfetched(where, params, limit, BM25_OVERFETCH_SHARE)
        table = self._filter_table(filters)
        if fetch:
            rows = self._keyword_search("chunks", query, limit=fetch)
            matching, matching_params = (table, []) if table else (f"(FROM chunks c WHERE {where})", params)
            passing = {
                r[0]
                for r in self.connection().execute(
                    f"SELECT chunk_id FROM {matching} WHERE chunk_id IN ({sql_string_list([r[0] for r in rows])})",
                    matching_params,
                ).fetchall()
            }
            kept = [row for row in rows if row[0] in passing]
            if len(kept) >= limit or len(rows) < fetch:
                return kept[:limit]
        if table:
            return self._keyword_search("chunks", query, limit=limit, scope_keys=f"SELECT doc_key FROM {table}")
        keys = self._chunk_keys()
        if keys:
            scope_keys = f"SELECT doc_key FROM {keys} WHERE chunk_row IN (SELECT c.rowid FROM chunks c WHERE {where})"
            share = self._matching(where, params) / max(1, self._embedded_count())
            return self._keyword_search(
                "chunks", query, limit=limit, scope_keys=scope_keys, scope_params=params, scope_share=share
            )
        scope = f"SELECT c.chunk_id FROM chunks c WHERE {where}"
        return self._keyword_search("chunks", query, limit=limit, scope=scope, scope_params=params)

    def _overfetched(self, where: str, params: list[Any], limit: int, min_share: float = SELECTIVE_SHARE) -> int:
        """How many of the unfiltered best to fetch so that about limit x OVERFETCH pass the filter; 0 for
        selective or small filters (fewer than `min_share` or EXACT_SCAN_MAX of the chunks pass), which are
        searched among the passing chunks directly."""
        total = self._embedded_count()
        if total <= EXACT_SCAN_MAX:
            return 0
        matching = self._matching(where, params)
        if matching <= EXACT_SCAN_MAX or matching < min_share * total:
            return 0
        return min(total, math.ceil(limit * OVERFETCH * total / matching))

    def _matching(self, where: str, params: list[Any]) -> int:
        """Chunks a filter keeps, counted once per snapshot."""
        return self._per_snapshot(
            f"matching:{where}:{params!r}",
            lambda conn: conn.execute(f"SELECT count(*) FROM chunks c WHERE {where}", params).fetchone()[0],
        )

    def vector_ranking(self, query: str, filters: Filters, limit: int = CANDIDATES) -> dict[str, float]:
        """Chunk ids and cosine similarities to the query, best first (see `_vector_plan`)."""
        vector = self._query_vector(query)
        if vector is None:
            return {}
        return _similarities(self._vector_plan(filters, limit)(self.connection(), vector))

    def _vector_plan(
        self, filters: Filters, limit: int
    ) -> Callable[[duckdb.DuckDBPyConnection, str], list[tuple[str, float]]]:
        """The nearest `limit` chunks the filters keep, as a function of a connection to the open snapshot and
        the query's vector literal: decided (and the tables it reads loaded) here, so that it may run on
        another cursor of the snapshot (`_vectors_meanwhile`).

        Plans around the HNSW index's trap: a WHERE filter is applied after its top-k, so a filtered query
        through the index returns too few rows. Unfiltered queries use the index; filtered ones matching many
        chunks and a large share of them (has_decision, about 20%) over-fetch from the index in proportion to
        that share and keep those the filter's table holds (`_filter_table`; without one, those of the chunks
        the filter keeps); selective or small ones (or when the over-fetch is short) scan the matching chunks'
        vectors exactly (`+ 0` keeps the optimizer from using the index there). A snapshot's first vector search
        scans exactly (`_use_index`).
        """
        dimensions = self.embedder().dimensions
        indexed = self._use_index()
        if indexed:
            self._search_connection("vss")
        where, params = filters.chunk_sql()
        fetch = self._overfetched(where, params, limit) if indexed and where != "TRUE" else 0
        table = self._filter_table(filters) if fetch else None

        def nearest(conn: duckdb.DuckDBPyConnection, vector: str) -> list[tuple[str, float]]:
            cast = f"'{vector}'::FLOAT[{dimensions}]"  # literals: DuckDB looks for pandas for every bound value
            if where == "TRUE" and indexed:
                return conn.execute(_nearest_sql(cast, limit)).fetchall()
            if table:
                fetched = conn.execute(
                    f"""
                    SELECT chunk_id, distance FROM (
                        (SELECT f.chunk_id, hits.distance FROM (
                            SELECT rowid AS vector_row, array_cosine_distance(embedding, {cast}) AS distance
                            FROM {VECTOR_BASE} ORDER BY distance LIMIT {int(fetch)}
                        ) hits JOIN {table} f USING (vector_row))
                        UNION ALL
                        (SELECT chunk_id, array_cosine_distance(embedding, {cast}) + 0 AS distance FROM {VECTOR_DELTA}
                         WHERE chunk_id IN (SELECT chunk_id FROM {table}))
                    ) ORDER BY distance, chunk_id LIMIT {int(limit)}
                    """
                ).fetchall()
            elif fetch:
                fetched = conn.execute(
                    f"""
                    SELECT chunk_id, distance FROM ({_nearest_sql(cast, fetch)}) hits JOIN chunks c USING (chunk_id)
                    WHERE {where} ORDER BY distance, chunk_id LIMIT {int(limit)}
                    """,
                    params,
                ).fetchall()
            if fetch and len(fetched) >= limit:
                return fetched
            scope = "TRUE" if where == "TRUE" else f"e.chunk_id IN (SELECT c.chunk_id FROM chunks c WHERE {where})"
            return conn.execute(
                f"""
                SELECT chunk_id, distance FROM (
                    SELECT e.chunk_id, array_cosine_distance(e.embedding, {cast}) + 0 AS distance
                    FROM chunk_embeddings e WHERE {scope}
                ) ORDER BY distance, chunk_id LIMIT {int(limit)}
                """,
                params,
            ).fetchall()

        return nearest

    def _vectors_meanwhile(self, query: str, filters: Filters) -> Callable[[], dict[str, float]]:
        """Start the vector search of `query` on a second cursor of the snapshot, in the embedding thread once the
        query is embedded, so that it runs while the caller runs BM25 (DuckDB releases the GIL: two cores, the
        search's wall time is about the longer of the two instead of their sum); returns what waits for it."""
        pending = self._embed_query(query)
        if pending is None:
            return dict
        plan = self._vector_plan(filters, CANDIDATES)
        cursor = self._cursor()

        def search() -> list[tuple[str, float]] | None:
            try:
                vector = pending.result()[0]
            except Exception:  # noqa: BLE001 (the caller's _query_vector says why)
                return None
            return plan(cursor, vector_literal(vector))

        job = self._vector_search = self._embedding_thread.submit(search)

        def result() -> dict[str, float]:
            rows = job.result()
            if rows is None:
                self._query_vector(query)  # raises, or keyword-only results with a notice
                return {}
            return _similarities(rows)

        return result

    @_one_snapshot
    def search(
        self,
        query: str,
        *,
        limit: int = 5,
        after: str | date | datetime | None = None,
        before: str | date | datetime | None = None,
        speaker: str | None = None,
        role: str | None = None,
        topics: Sequence[str] | None = None,
        has_decision: bool | None = None,
        has_action: bool | None = None,
        project: str | None = None,
        session_id: str | None = None,
        now: datetime | None = None,
    ) -> list[SearchResult]:
        """The chunks that best match `query`, best first (hybrid BM25 + vector, fused scores).

        `after`/`before` filter and accept dates as people say them, read against `now` (default: the machine's
        clock) in the configured zone. Without them, a date named in the query ("what did we decide last week
        about X") is not searched as words: chunks from that window get a boost (`search.time_boost`).
        """
        require_query(query)
        require_positive("limit", limit)
        started = self._start()
        window, source, words = self.time_window(query, after=after, before=before, now=now)
        filters = self._filters(
            now=now,
            after=after,
            before=before,
            speaker=speaker,
            role=role,
            topics=topics,
            has_decision=has_decision,
            has_action=has_action,
            project=project,
            session_id=session_id,
        )
        scores = self._fused_chunk_scores(words, filters)
        if source == "query":
            scores = self._boost_window(words, filters, window, scores)
        results = self._top_results(scores, limit)
        self._log("search", started, len(results))
        return results

    def _boost_window(
        self, query: str, filters: Filters, window: TimeWindow, scores: dict[str, float]
    ) -> dict[str, float]:
        """Chunks inside the window, scored among themselves (so ones the whole search ranked too low to return
        still compete), times 1 + search.time_boost; the others keep their scores."""
        inside = replace(filters, after=window.after, before=window.before)
        boost = 1.0 + self.settings["search.time_boost"]
        boosted = dict(scores)
        for chunk_id, score in self._fused_chunk_scores(query, inside).items():
            boosted[chunk_id] = max(score, scores.get(chunk_id, score)) * boost
        return boosted

    # -- sessions, two-stage recall, memories, recap --

    @_one_snapshot
    def search_sessions(self, query: str, *, limit: int = 3, **filters: Any) -> list[SessionResult]:
        """Sessions whose latest summary best matches `query` (hybrid BM25 + vector over summaries)."""
        require_query(query)
        require_positive("limit", limit)
        started = self._start()
        results = self._rank_sessions(query, limit, self._filters(**filters))
        self._log("search_sessions", started, len(results))
        return results

    def _rank_sessions(self, query: str, limit: int, filters: Filters) -> list[SessionResult]:
        conn = self.connection()
        where, params = filters.session_sql()
        latest = f"""FROM session_summaries v JOIN sessions s
                     ON s.session_id = v.session_id AND s.summary_version = v.version WHERE {where}"""
        try:
            bm25 = self._keyword_search(
                "summaries", query, limit=CANDIDATES, scope=f"SELECT v.summary_id {latest}", scope_params=params
            )
        except duckdb.CatalogException:
            bm25 = []
        vector = self._query_vector(query)
        semantic = []
        if vector is not None:
            semantic = conn.execute(
                f"""SELECT v.session_id {latest} AND v.embedding IS NOT NULL
                    ORDER BY list_cosine_similarity(v.embedding, ?::FLOAT[]) DESC, v.session_id LIMIT ?""",
                [*params, vector, CANDIDATES],
            ).fetchall()
        s = self.settings
        fused = reciprocal_rank_fusion(
            [([r[1] for r in bm25], s["search.bm25_weight"]), ([r[0] for r in semantic], s["search.vector_weight"])],
            k=s["search.rrf_k"],
        )
        top = sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:limit]
        if not top:
            return []
        rows = conn.execute(
            """SELECT s.session_id, s.project, v.overview, v.summary, s.started_at, s.ended_at, s.message_count,
                      v.version
               FROM sessions s JOIN session_summaries v ON s.session_id = v.session_id AND s.summary_version = v.version
               WHERE s.session_id IN (SELECT unnest(?))""",
            [[sid for sid, _ in top]],
        ).fetchall()
        by_id = {row[0]: row for row in rows}
        results = []
        for session_id, score in top:
            row = by_id[session_id]
            summary = json.loads(row[3])
            results.append(
                SessionResult(
                    session_id=session_id,
                    project=row[1] or "",
                    summary=row[2],
                    topics=list(summary.get("topics", [])),
                    decisions=list(summary.get("decisions", [])),
                    started_at=row[4].astimezone(UTC) if row[4] else None,
                    ended_at=row[5].astimezone(UTC) if row[5] else None,
                    message_count=row[6] or 0,
                    version=row[7],
                    score=round(score, 6),
                )
            )
        return results

    @_one_snapshot
    def recall(self, query: str, *, sessions: int = 3, limit: int = 5, **filters: Any) -> list[SearchResult]:
        """Two-stage retrieval: the best sessions by summary first, then chunk search in which chunks of those
        sessions get a boost (`search.session_boost`) and chunks found only inside them join the candidates.
        Each result's `stage` says whether it came from a top session or from the plain chunk search."""
        require_query(query)
        require_positive("limit", limit)
        require_positive("sessions", sessions)
        started = self._start()
        chunk_filters = self._filters(**filters)
        session_level = {k: v for k, v in filters.items() if k in SESSION_FILTERS}
        top_sessions = self._rank_sessions(query, sessions, self._filters(**session_level))
        top_ids = {session.session_id for session in top_sessions}
        scores = self._fused_chunk_scores(query, chunk_filters)
        floor = min(scores.values(), default=0.0)
        for session_id in top_ids - {chunk_id.rsplit(":", 2)[0] for chunk_id in list(scores)[:limit]}:
            scoped = Filters(**{**asdict(chunk_filters), "session_id": session_id})
            for chunk_id in list(self._fused_chunk_scores(query, scoped))[:limit]:
                scores.setdefault(chunk_id, floor)
        boost = 1.0 + self.settings["search.session_boost"]
        boosted = {cid: score * boost if cid.rsplit(":", 2)[0] in top_ids else score for cid, score in scores.items()}
        results = [
            replace(r, stage="session" if r.session_id in top_ids else "global")
            for r in self._top_results(boosted, limit)
        ]
        self._log("recall", started, len(results))
        return results

    @_one_snapshot
    def search_memories(self, query: str, *, limit: int = 5) -> list[MemoryResult]:
        """Curated memories (what agents chose to remember), hybrid BM25 + vector, importance as a tie-breaker.
        Memories `remember` put in the inbox since the last index are searched too (keywords and vectors)."""
        require_query(query)
        require_positive("limit", limit)
        started = self._start()
        conn = self.connection()
        try:
            bm25 = [r[0] for r in self._keyword_search("memories", query, limit=CANDIDATES)]
        except duckdb.CatalogException:
            bm25 = []
        stored_rows = conn.execute("SELECT memory_id, content, timestamp, session_id, importance FROM memories")
        rows = [
            MemoryResult(r[0], r[1], r[2].astimezone(UTC) if r[2] else None, r[3], r[4], 0.0)
            for r in stored_rows.fetchall()
        ]
        stored = {m.memory_id for m in rows}
        pending = [m for m in self._inbox_memories() if m.memory_id not in stored]
        similarity: dict[str, float] = {}
        vector = self._query_vector(query)
        if vector is not None:
            similarity = dict(conn.execute(
                """SELECT memory_id, list_cosine_similarity(embedding, ?::FLOAT[]) FROM memories
                   WHERE embedding IS NOT NULL ORDER BY 2 DESC, memory_id LIMIT ?""",
                [vector, CANDIDATES],
            ).fetchall())
            similarity |= self._inbox_similarities(query, pending)
        semantic = sorted(similarity, key=lambda memory_id: (-similarity[memory_id], memory_id))
        fused = reciprocal_rank_fusion(
            [(bm25, 1.0), (keyword_ranking(query, pending), 1.0), (semantic, 1.0)], k=self.settings["search.rrf_k"]
        )
        results = sorted(
            (replace(m, score=round(fused[m.memory_id], 6)) for m in rows + pending if m.memory_id in fused),
            key=lambda m: (-m.score, -(m.importance or 0), m.memory_id),
        )[:limit]
        self._log("search_memories", started, len(results))
        return results

    def _inbox_similarities(self, query: str, pending: Sequence[MemoryResult]) -> dict[str, float]:
        """Cosine similarity of each inbox memory (embedded now: they are few) to the query; none when the
        provider fails (`notice` says so)."""
        from sessionmem_pipeline.providers.embedders import EmbeddingError

        if not pending:
            return {}
        try:
            query_vector, *vectors = self.embedder().embed([query, *(m.content for m in pending)])
        except EmbeddingError as exc:
            self.notice = f"keyword-only results: the embedding provider failed ({exc})"
            return {}
        return cosine_similarities(query_vector, [m.memory_id for m in pending], vectors)

    def _inbox_memories(self) -> list[MemoryResult]:
        """The memories in the inbox beside the warehouse (already sanitized when parsed)."""
        from sessionmem_pipeline.stages.memories import memory_inbox, parse_memories

        inbox = memory_inbox(self.warehouse)
        if not inbox.is_file():
            return []
        memories, _ = parse_memories(inbox)
        return [
            MemoryResult(m["memory_id"], m["content"], m["timestamp"], m["session_id"], m["importance"], 0.0)
            for m in memories
        ]

    def recap(self, *, session_id: str | None = None, project: str | None = None, budget: int = 800):
        """The recap of the given session, or of the latest top-level session (of `project`): what was being
        done, the plan and unfinished work, each line citing its message ids."""
        from sessionmem_pipeline.recaps import session_recap

        require_positive("budget", budget)
        llm = None
        if self.settings.llm_enabled:  # importing the openai package costs half a second: only when needed
            from sessionmem_pipeline.providers import chat_model_from_settings

            llm = chat_model_from_settings(self.settings)
        session = self.latest_session(session_id=session_id, project=project)
        return session_recap(Snapshot(self.connection()), session, budget, llm)

    def recap_text(self, session_id: str, *, budget: int = 800) -> str:
        """`recap(session_id=...).text`, read from the recap the index stage made when it is still current
        (recaps.py: the session-start hook then loads neither the recap rules nor the tokenizer)."""
        require_positive("budget", budget)
        if not self.settings.llm_enabled:
            from sessionmem_pipeline.recaps import stored_recap_text

            stored = stored_recap_text(Snapshot(self.connection()), session_id, budget)
            if stored is not None:
                return stored
        return self.recap(session_id=session_id, budget=budget).text

    # -- the agent tools that change memory (issue 10): through the pipeline's own writer lock or inbox --

    def summarize_session(self, session_id: str, *, incremental: bool = True) -> dict[str, Any]:
        """Summarize a session now: incremental by default, `incremental=False` rebuilds from the start."""
        from sessionmem_pipeline.stages.run import summarize_now

        version, summary, _, _ = summarize_now(self.settings, session_id, full=not incremental, lock_timeout=60)
        return {
            "summary": summary.to_dict(),
            "version": version,
            "is_incremental": summary.is_incremental,
            "messages_processed": summary.messages_processed,
        }

    def get_history(self, session_id: str, *, include_summaries: bool = True) -> dict[str, Any]:
        """A session's messages (collapsed, redacted) and, optionally, every summary version."""
        from sessionmem_pipeline.status import session_history

        history = session_history(self.settings, session_id, full=True)
        if not include_summaries:
            history.pop("summaries")
        return history

    def remember(self, content: str, *, importance: float | None = None, session_id: str | None = None) -> dict:
        """Store a curated memory in the inbox; `search_memories` finds it at once (the next run indexes it)."""
        from sessionmem_pipeline.stages.memories import remember

        return remember(self.warehouse, content, importance=importance, session_id=session_id)

    def timeline(
        self,
        *,
        after: str | date | datetime | None = None,
        before: str | date | datetime | None = None,
        project: str | None = None,
        now: datetime | None = None,
    ) -> list[TimelineDay]:
        """Top-level sessions grouped by the local day they started on, newest day first (core.timeline).
        `after`/`before` take the same dates as search; with neither, the last 7 days up to `now`."""
        now = now or datetime.now(UTC)
        if after is None and before is None:
            window = default_window(now, self.settings.timezone)
            after, before = window.after, window.before
        where, params = self._filters(now=now, after=after, before=before, project=project).session_sql()
        rows = Snapshot(self.connection()).query(
            f"""SELECT s.session_id, s.project, s.format, s.started_at, s.ended_at, s.message_count,
                       s.summary_overview, v.summary, s.source_missing
                FROM sessions s LEFT JOIN session_summaries v
                  ON v.session_id = s.session_id AND v.version = s.summary_version
                WHERE s.parent_session_id IS NULL AND {where}""",
            params,
        )
        sessions = [
            TimelineSession(
                session_id=row["session_id"],
                project=row["project"] or "",
                agent=row["format"] or "",
                started_at=row["started_at"].astimezone(UTC) if row["started_at"] else None,
                ended_at=row["ended_at"].astimezone(UTC) if row["ended_at"] else None,
                message_count=row["message_count"] or 0,
                summary=first_line(row["summary_overview"]),
                decisions=list(json.loads(row["summary"]).get("decisions", [])) if row["summary"] else [],
                source_missing=bool(row["source_missing"]),
            )
            for row in rows
        ]
        return group_by_day(sessions, self.settings.timezone)

    def threads(self, *, project: str | None = None) -> list[dict[str, Any]]:
        """Threads of related sessions (newest activity first), each with its sessions in time order."""
        rows = Snapshot(self.connection()).query(
            """SELECT t.thread_id, any_value(t.title) AS title, any_value(t.topics) AS topics,
                      list(t.session_id ORDER BY t.position) AS session_ids, any_value(s.project) AS project,
                      min(s.started_at) AS started_at, max(s.ended_at) AS ended_at
               FROM session_threads t JOIN sessions s USING (session_id)
               WHERE ? IS NULL OR s.project = ?
               GROUP BY t.thread_id ORDER BY max(s.ended_at) DESC NULLS LAST, t.thread_id""",
            [project, project],
        )
        return rows

    def latest_session(
        self, *, session_id: str | None = None, project: str | None = None, exclude: str | None = None
    ) -> dict[str, Any]:
        """The session row asked for, else the most recent top-level session (of `project`, other than
        `exclude`, the session that is starting now)."""
        reader = Snapshot(self.connection())
        if session_id:
            row = reader.session_row(session_id)
            if row is None:
                raise ValueError(f"no session {session_id!r} in {self.warehouse}")
            return row
        rows = reader.query(
            """SELECT * FROM sessions WHERE parent_session_id IS NULL AND (? IS NULL OR project = ?)
                 AND session_id IS DISTINCT FROM ?
               ORDER BY coalesce(ended_at, started_at) DESC NULLS LAST, session_id LIMIT 1""",
            [project, project, exclude],
        )
        if not rows:
            raise ValueError(f"no sessions{' in project ' + repr(project) if project else ''} in {self.warehouse}")
        return rows[0]

    def _fused_chunk_scores(self, query: str, filters: Filters) -> dict[str, float]:
        """Chunk ids and their fused BM25 + vector scores, best first."""
        s = self.settings
        nearest = self._vectors_meanwhile(query, filters)
        try:
            bm25 = self.bm25_ranking(query, filters, CANDIDATES)
        except BaseException:
            if self._vector_search is not None:  # never leave it reading the snapshot behind a failed search
                wait([self._vector_search])
            raise
        return fuse_scores(
            bm25,
            nearest(),
            bm25_weight=s["search.bm25_weight"],
            vector_weight=s["search.vector_weight"],
            bm25_limit=CANDIDATES,
        )

    def _top_results(self, scores: dict[str, float], limit: int) -> list[SearchResult]:
        """The best `limit` results without overlaps (`deduplicate`), reading the rows of the candidates in score
        order only until enough are kept: a search shows 5 of ~300 fused candidates, and each row read costs
        about 3 ms (its text is decompressed with the 2,048 rows stored around it)."""
        ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
        kept: list[SearchResult] = []
        start = 0
        while len(kept) < limit and start < len(ranked):
            page = ranked[start : start + limit - len(kept)]  # overlaps are rare: most searches read one page
            kept = deduplicate(kept + self.chunks_by_id(dict(page)))
            start += len(page)
        return kept[:limit]

    def chunks_by_id(self, scores: dict[str, float], stage: str | None = None) -> list[SearchResult]:
        """Results for chunk ids, in the order of their scores (rows found first, by the hashes of their ids in
        `_chunk_keys` or else by id, then read by rowid: a join on the ids would read the text of every chunk;
        a row whose id only shares a hash is left out; their sessions' rows apart: joined, both tables were
        read whole, a quarter of the time it takes to fetch 5 results)."""
        if not scores:
            return []
        conn = self.connection()
        ids = sql_string_list(list(scores))
        keys = self._chunk_keys()
        found = (f"SELECT chunk_row FROM {keys} WHERE id_hash IN (SELECT hash(unnest([{ids}])))" if keys
                 else f"SELECT rowid FROM chunks WHERE chunk_id IN ({ids})")
        rows = conn.execute(
            f"""
            SELECT c.chunk_id, c.session_id, c.project, c.chunk_index, c.ts_start, c.speakers, c.topics, c.content,
                   c.context, c.message_ids
            FROM chunks c WHERE c.rowid IN ({found})
            """
        ).fetchall()
        session_rows = conn.execute(
            f"""SELECT s.session_id, s.source_path, t.thread_id FROM sessions s LEFT JOIN session_threads t
                USING (session_id) WHERE s.session_id IN ({sql_string_list(sorted({row[1] for row in rows}))})"""
        ).fetchall()
        sessions = {session_id: (source_path, thread_id) for session_id, source_path, thread_id in session_rows}
        by_id = {row[0]: (*row, *sessions.get(row[1], (None, None))) for row in rows}
        results = []
        for chunk_id, score in sorted(scores.items(), key=lambda item: (-item[1], item[0])):
            row = by_id.get(chunk_id)
            if row is None:
                continue
            results.append(
                SearchResult(
                    session_id=row[1],
                    project=row[2] or "",
                    chunk_index=row[3],
                    timestamp=row[4].astimezone(UTC) if row[4] else None,
                    speakers=list(row[5] or []),
                    topics=list(row[6] or []),
                    score=round(score, 6),
                    content=row[7],
                    context=row[8] or "",
                    message_ids=list(row[9] or []),
                    source_path=row[10] or "",
                    stage=stage,
                    thread_id=row[11],
                )
            )
        return results



@dataclass(frozen=True)
class SessionResult:
    session_id: str
    project: str
    summary: str
    topics: list[str]
    decisions: list[str]
    started_at: datetime | None
    ended_at: datetime | None
    message_count: int
    version: int
    score: float

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("started_at", "ended_at"):
            data[key] = data[key].isoformat() if data[key] else None
        return data


@dataclass(frozen=True)
class MemoryResult:
    memory_id: str
    content: str
    timestamp: datetime | None
    session_id: str | None
    importance: float | None
    score: float

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["timestamp"] = self.timestamp.isoformat() if self.timestamp else None
        return data

