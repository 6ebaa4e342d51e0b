"""The keyword index maintained per changed document scores like one built from scratch and like DuckDB's fts."""

from __future__ import annotations

import random
from pathlib import Path

from sessionmem_pipeline.warehouse import KEYWORD_CORPORA, KEYWORD_IGNORE, PREVIOUS_CHARS, Warehouse, keyword_search

WORDS = (
    "deploy deployed deploying server servers postgres migration migrations error errors timeout port 8080 5432 "
    "v2 release released the a of and running runs ran fix fixed fixing cache caching résumé café order 10423 "
    "trip hiked marshmallows kubernetes pod pods restart restarted"
).split()
QUERIES = ["deploying servers", "error 10423", "port 8080 timeout", "the running caches", "cafe resume", "marshmallow trip"]


def _chunk(session: str, index: int, rng: random.Random) -> dict:
    content = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40)))
    return {
        "chunk_id": f"{session}:{index}:x",
        "session_id": session,
        "chunk_index": index,
        "content": content,
        "context_content": f"Project demo, {session}.\n\n{content}",
    }


def _write_session(wh: Warehouse, session: str, chunks: list[dict]) -> None:
    with wh.transaction():
        wh.replace("chunks", "session_id", [session], chunks)
        wh.sync_keyword_index("chunks", [session])


def _scores(wh: Warehouse, query: str) -> dict[str, float]:
    return {doc: round(score, 9) for doc, _, score in keyword_search(wh.conn, "chunks", query, limit=1000)}


def _documents() -> str:
    return KEYWORD_CORPORA["chunks"].documents.format(scope="TRUE", previous_chars=PREVIOUS_CHARS)


def _fts_scores(wh: Warehouse, query: str) -> dict[str, float]:
    """DuckDB's own BM25 over the same documents: the index this one replaces."""
    wh.conn.execute(f"CREATE OR REPLACE TABLE fts_docs AS {_documents()}")
    wh.conn.execute(f"PRAGMA create_fts_index('fts_docs', 'doc_id', 'text', ignore = '{KEYWORD_IGNORE}', overwrite = 1)")
    rows = wh.conn.execute(
        "SELECT doc_id, score FROM (SELECT doc_id, fts_main_fts_docs.match_bm25(doc_id, ?) AS score FROM fts_docs) "
        "WHERE score IS NOT NULL",
        [query],
    ).fetchall()
    return {doc: round(score, 9) for doc, score in rows}


def test_many_small_updates_score_like_a_fresh_build_and_like_duckdb_fts(tmp_path: Path) -> None:
    rng = random.Random(7)
    sessions: dict[str, list[dict]] = {}
    with Warehouse(tmp_path / "incremental.duckdb") as wh:
        for step in range(60):
            session = f"s{rng.randint(0, 7)}"
            chunks = sessions.setdefault(session, [])
            action = rng.random()
            if action < 0.6 or not chunks:  # a new exchange appended
                chunks.append(_chunk(session, len(chunks), rng))
            elif action < 0.85:  # an earlier chunk rewritten (its successor's document changes with it)
                index = rng.randrange(len(chunks))
                chunks[index] = _chunk(session, index, rng)
            else:  # the session's file deleted
                with wh.transaction():
                    wh.delete_where("chunks", "session_id", [session])
                    wh.delete_sessions([session])
                sessions.pop(session)
                continue
            _write_session(wh, session, chunks)
        assert wh.scalar("SELECT count(*) FROM kw_dead")  # changed texts are only marked dead: searches skip them
        incremental = {q: _scores(wh, q) for q in QUERIES}
        top_few = {q: [round(score, 9) for _, _, score in keyword_search(wh.conn, "chunks", q, limit=5)] for q in QUERIES}
        fts = {q: _fts_scores(wh, q) for q in QUERIES}
        assert wh.compact_keyword_index(force=True)  # their postings dropped in one pass
        assert not wh.scalar("SELECT count(*) FROM kw_dead")
        assert {q: _scores(wh, q) for q in QUERIES} == incremental
        incremental_rows = _index_rows(wh)

    with Warehouse(tmp_path / "fresh.duckdb") as fresh:
        with fresh.transaction():
            fresh.insert("chunks", [c for chunks in sessions.values() for c in chunks])
            fresh.sync_keyword_index("chunks")
        assert fresh.compact_keyword_index(force=True)
        scratch = {q: _scores(fresh, q) for q in QUERIES}
        scratch_rows = _index_rows(fresh)

    assert all(incremental[q] for q in QUERIES)
    assert incremental == scratch
    assert top_few == {q: sorted(incremental[q].values(), reverse=True)[:5] for q in QUERIES}  # pruning is exact
    assert incremental_rows == scratch_rows
    assert incremental == fts


def test_a_text_back_to_what_a_dead_document_held_is_indexed_once(tmp_path: Path) -> None:
    rng = random.Random(5)
    first, second = _chunk("s", 0, rng), _chunk("s", 0, rng)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        for chunk in (first, second, first):  # the first text's document dies, then comes back under its old key
            _write_session(wh, "s", [chunk])
        query = " ".join(first["content"].split()[:3])
        scores = _scores(wh, query)
        wh.compact_keyword_index(force=True)  # drops the second text's postings, not the first's
        rows = _index_rows(wh)
    with Warehouse(tmp_path / "fresh.duckdb") as fresh:
        _write_session(fresh, "s", [first])
        assert _scores(fresh, query) == scores
        assert _index_rows(fresh) == rows


def _ingested_under(wh: Warehouse, session: str, key: str) -> None:
    """The session's ingest stage row, as ingest records it (its key holds the redaction rules' version)."""
    with wh.transaction():
        wh.conn.execute("DELETE FROM stage_state WHERE stage = 'ingest' AND session_id = ?", [session])
        wh.conn.execute("INSERT INTO stage_state (stage, session_id, input_fp, stage_key) VALUES ('ingest', ?, 'fp', ?)",
                        [session, key])


def test_a_text_ingested_again_under_other_rules_leaves_no_word_behind_at_once(tmp_path: Path) -> None:
    """Dead documents' words wait for compaction only while the rules are the ones they were indexed under: a
    session ingested again under a new key (redaction rules, privacy settings) loses them in that transaction,
    also when other sessions were re-ingested under the new key in an earlier run."""
    rng = random.Random(9)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        for i in range(60):  # one dead document among 60 stays under KEYWORD_DEAD_SHARE
            _ingested_under(wh, f"o{i}", "rules-1")
            _write_session(wh, f"o{i}", [_chunk(f"o{i}", 0, rng)])
        _ingested_under(wh, "s", "rules-1")
        _write_session(wh, "s", [{**_chunk("s", 0, rng), "context_content": "token zqx7secret in the log"}])
        _write_session(wh, "s", [{**_chunk("s", 0, rng), "context_content": "token zqx7secret in the logs"}])
        assert wh.scalar("SELECT count(*) FROM kw_terms WHERE term = 'zqx7secret'") == 1  # same rules: dead only
        assert wh.scalar("SELECT count(*) FROM kw_dead WHERE session_id = 's'") == 1
        _ingested_under(wh, "o0", "rules-2")  # an earlier, scoped run re-redacted another session
        _write_session(wh, "o0", [{**_chunk("o0", 0, rng), "context_content": "something else"}])
        wh.compact_keyword_index()
        assert wh.scalar("SELECT count(*) FROM kw_terms WHERE term = 'zqx7secret'") == 1  # still only dead
        _ingested_under(wh, "s", "rules-2")
        _write_session(wh, "s", [{**_chunk("s", 0, rng), "context_content": "token [REDACTED] in the log"}])
        assert not wh.scalar("SELECT count(*) FROM kw_terms WHERE term = 'zqx7secret'")
        assert not wh.scalar("SELECT count(*) FROM kw_dead WHERE session_id = 's'")  # both earlier texts' postings
        assert not keyword_search(wh.conn, "chunks", "zqx7secret", limit=5)


def test_a_session_ingested_again_with_no_text_changed_still_drops_its_earlier_dead_words(tmp_path: Path) -> None:
    rng = random.Random(12)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        _ingested_under(wh, "s", "rules-1")
        _write_session(wh, "s", [{**_chunk("s", 0, rng), "context_content": "token zqx7secret in the log"}])
        kept = {**_chunk("s", 0, rng), "context_content": "a later text without it"}
        _write_session(wh, "s", [kept])  # the first text dies under rules-1, its words only marked dead
        _ingested_under(wh, "s", "rules-2")
        _write_session(wh, "s", [kept])  # ingested again, the text the same: no document dies now
        assert not wh.scalar("SELECT count(*) FROM kw_terms WHERE term = 'zqx7secret'")
        assert not wh.scalar("SELECT count(*) FROM kw_dead")


def test_queries_of_no_indexed_word_find_nothing_while_documents_are_dead(tmp_path: Path) -> None:
    rng = random.Random(1)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        _write_session(wh, "s", [_chunk("s", 0, rng)])
        _write_session(wh, "s", [_chunk("s", 0, rng)])
        assert wh.scalar("SELECT count(*) FROM kw_dead") == 1
        assert keyword_search(wh.conn, "chunks", "zzyzx", limit=5) == []  # a word no document holds
        assert keyword_search(wh.conn, "chunks", "the", limit=5) == []  # stopwords only


def test_forgetting_drops_the_sessions_dead_postings_at_once(tmp_path: Path) -> None:
    rng = random.Random(9)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        _write_session(wh, "t", [{**_chunk("t", 0, rng), "context_content": "private name quokkabert"}])
        _write_session(wh, "t", [{**_chunk("t", 0, rng), "context_content": "private name wombatina"}])
        assert wh.scalar("SELECT count(*) FROM kw_dead WHERE session_id = 't'") == 1
        with wh.transaction():
            wh.delete_where("chunks", "session_id", ["t"])
            wh.delete_sessions(["t"], purge=True)  # forgetting: nothing derived from its words stays
        for word in ("quokkabert", "wombatina"):
            assert not wh.scalar("SELECT count(*) FROM kw_terms WHERE term = ?", [word])
        assert not wh.scalar("SELECT count(*) FROM kw_dead")
        assert not wh.scalar("SELECT count(*) FROM kw_postings")


def _index_rows(wh: Warehouse) -> dict[str, list[tuple]]:
    return {table: sorted(wh.conn.execute(f"FROM {table}").fetchall()) for table in ("kw_terms", "kw_docs", "kw_postings")}


def test_filtered_search_keeps_only_the_documents_in_scope(tmp_path: Path) -> None:
    rng = random.Random(3)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        for session in ("a", "b"):
            _write_session(wh, session, [_chunk(session, i, rng) for i in range(5)] + [
                {**_chunk(session, 5, rng), "context_content": "error 10423 on port 8080"}
            ])
        hits = keyword_search(
            wh.conn, "chunks", "error 10423", limit=10,
            scope="SELECT chunk_id FROM chunks WHERE session_id = ?", scope_params=["b"],
        )
    assert hits and {session for _, session, _ in hits} == {"b"}
    assert hits[0][0] == "b:5:x"


def test_a_chunk_is_found_by_the_end_of_the_chunk_before_it_unless_the_tuning_grid_asks_for_none(
    tmp_path: Path,
) -> None:
    question = {"chunk_id": "s:0:x", "session_id": "s", "chunk_index": 0, "content": "How was the trip?"}
    answer = {"chunk_id": "s:1:x", "session_id": "s", "chunk_index": 1, "content": "We hiked and roasted marshmallows"}
    with Warehouse(tmp_path / "w.duckdb") as wh:
        _write_session(wh, "s", [{**c, "context_content": c["content"]} for c in (question, answer)])
        assert {doc for doc, _, _ in keyword_search(wh.conn, "chunks", "trip", limit=10)} == {"s:0:x", "s:1:x"}
        with wh.transaction():
            assert wh.sync_keyword_index("chunks", previous_chars=0) == 1  # only the answer's document changed
        assert {doc for doc, _, _ in keyword_search(wh.conn, "chunks", "trip", limit=10)} == {"s:0:x"}


def test_a_common_term_beside_a_rare_one_keeps_the_exact_best_documents(tmp_path: Path) -> None:
    rng = random.Random(11)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        for session in range(20):
            chunks = []
            for index in range(10):
                words = ["deploy"] * rng.randint(1, 4) + [rng.choice(WORDS) for _ in range(rng.randint(5, 30))]
                words += ["quokka"] * rng.randint(1, 3) * ((session * 10 + index) % 25 == 0)  # 8 of 200: rare
                rng.shuffle(words)
                chunks.append({**_chunk(f"s{session}", index, rng), "context_content": " ".join(words)})
            _write_session(wh, f"s{session}", chunks)
        everything = keyword_search(wh.conn, "chunks", "deploy quokka", limit=1000)
        best = keyword_search(wh.conn, "chunks", "deploy quokka", limit=5)
        best_of_one = keyword_search(wh.conn, "chunks", "deploy quokka", limit=1)
        scoped = {"scope": "SELECT chunk_id FROM chunks WHERE session_id < 's5'", "scope_share": 0.75}  # 15 of 20
        everything_in_scope = keyword_search(wh.conn, "chunks", "deploy quokka", limit=1000, **scoped)
        best_in_scope = keyword_search(wh.conn, "chunks", "deploy quokka", limit=3, **scoped)
    assert len(everything) == 200  # every document holds the common term
    assert best == everything[:5]  # the same documents, order and scores, to the last bit
    assert best_of_one == everything[:1]
    assert len(everything_in_scope) == 150 and best_in_scope == everything_in_scope[:3]


def test_an_upgraded_warehouse_knows_the_ingest_key_of_every_indexed_document(tmp_path: Path) -> None:
    """Migration 13 records the session's ingest key on the documents indexed before it, so the first death of one
    after an upgrade is tombstoned like any other, and one re-ingested under new rules still loses its words."""
    rng = random.Random(4)
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as wh:
        _ingested_under(wh, "s", "rules-1")
        _write_session(wh, "s", [_chunk("s", 0, rng), _chunk("s", 1, rng)])
        with wh.transaction():  # back to the shape migration 11 left
            wh.conn.execute("DROP TABLE kw_dead")
            wh.conn.execute("ALTER TABLE kw_docs DROP COLUMN ingest_key")
            wh.conn.execute("ALTER TABLE sessions DROP COLUMN summary_versions_used")  # and 14
            wh.conn.execute("DELETE FROM schema_version WHERE version >= 12")
    with Warehouse(path) as upgraded:
        assert upgraded.conn.execute("SELECT DISTINCT ingest_key FROM kw_docs").fetchall() == [("rules-1",)]
        _write_session(upgraded, "s", [_chunk("s", 0, rng), _chunk("s", 1, rng)])
        assert upgraded.scalar("SELECT count(*) FROM kw_dead") == 2  # same rules: only marked dead
