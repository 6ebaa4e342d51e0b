"""Threads link related sessions and leave an unrelated one alone, on real offline embeddings of realistic sessions."""

import dataclasses
import json
import shutil
from datetime import UTC, datetime, timedelta

import pytest

from sessionmem_pipeline.core.context import SessionContext, contextual_prefix
from sessionmem_pipeline.core.threads import ThreadInput, build_threads, link_score
from sessionmem_pipeline.providers import LocalMiniLMEmbedder

# (day of March 2026, summary as text_for_embedding renders it, topics, files_modified, exchanges)
SESSIONS = {
    "checkout-1": (3, "Checkout fails with HTTP 500 when a customer applies a gift card after a coupon. Traced to the "
        "order of discounts in pricing.py: the gift card was charged before the coupon reduced the total. Decided to "
        "apply coupons first, then gift cards.\nTopics: checkout, gift card, coupon\nFiles: src/shop/pricing.py",
        ("checkout", "gift-card", "coupon"), ("src/shop/pricing.py",), [
        "User: Checkout throws a 500 when I use a gift card after a coupon.\n\nAssistant: The traceback points at "
        "apply_discounts in pricing.py; the gift card is charged before the coupon.",
        "User: So the order is wrong?\n\nAssistant: Yes. I'll apply coupons first, then gift cards, and clamp the "
        "balance at zero."]),
    "checkout-2": (12, "Follow-up on the gift card checkout bug: added a regression test for coupons combined with "
        "gift cards, and found that sale items skip the coupon check in pricing.py. Refunded order W-77120.\n"
        "Topics: gift card, checkout, regression test\nFiles: src/shop/pricing.py, tests/test_pricing.py",
        ("gift-card", "checkout", "regression-test"), ("src/shop/pricing.py", "tests/test_pricing.py"), [
        "User: The gift card bug is back for sale items.\n\nAssistant: Sale prices skip the coupon check in "
        "pricing.py, so the gift card sees the undiscounted total.",
        "User: Please refund order W-77120.\n\nAssistant: Refunded; I also added a regression test combining "
        "coupons and gift cards."]),
    "ci": (5, "Sped up the GitHub Actions workflow: cached the pip downloads, split the test job by marker and "
        "upgraded the runners to Python 3.12; a flaky Selenium test was quarantined.\nTopics: ci, github actions, "
        "python upgrade\nFiles: .github/workflows/test.yml, pyproject.toml",
        ("ci", "github-actions", "python-upgrade"), (".github/workflows/test.yml", "pyproject.toml"), [
        "User: CI takes 20 minutes, can we speed it up?\n\nAssistant: I'll cache pip downloads in the GitHub "
        "Actions workflow and split the tests by marker.",
        "User: The Selenium test keeps failing randomly.\n\nAssistant: It's flaky on the runner; I quarantined it "
        "and upgraded the runners to Python 3.12."]),
    "auth-1": (6, "Users are logged out after five minutes: the session cookie expiry ignored the remember-me flag "
        "in auth/session.py. Switched to refresh tokens with a 14 day lifetime.\nTopics: login, session expiry, "
        "refresh token\nFiles: src/shop/auth/session.py",
        ("login", "session-expiry", "refresh-token"), ("src/shop/auth/session.py",), [
        "User: People get logged out after five minutes.\n\nAssistant: The cookie expiry in auth/session.py "
        "ignores the remember-me flag.",
        "User: What do you suggest?\n\nAssistant: Refresh tokens with a 14 day lifetime and short access tokens."]),
    "auth-2": (20, "Refresh tokens from the login fix are not revoked on password change; added revocation and a "
        "test, and shortened access tokens to 15 minutes.\nTopics: refresh token, password change, login\n"
        "Files: src/shop/auth/session.py, tests/test_auth.py",
        ("refresh-token", "password-change", "login"), ("src/shop/auth/session.py", "tests/test_auth.py"), [
        "User: Changing the password doesn't log out other devices.\n\nAssistant: Refresh tokens are never revoked; "
        "I'll revoke them on password change.",
        "User: Add a test for it.\n\nAssistant: Done, and access tokens now last 15 minutes."]),
}


@pytest.fixture(scope="module")
def webshop() -> dict[str, ThreadInput]:
    """The sessions as the pipeline stores them: summary vectors, and chunk vectors embedded with their prefix."""
    embedder = LocalMiniLMEmbedder()
    summaries = embedder.embed([summary for _, summary, *_ in SESSIONS.values()])
    inputs = {}
    for (sid, (day, _, topics, files, exchanges)), summary_vector in zip(SESSIONS.items(), summaries, strict=True):
        started = datetime(2026, 3, day, 10, tzinfo=UTC)
        context = SessionContext("webshop", started, exchanges[0].split("\n")[0].removeprefix("User: "), "UTC")
        prefix = contextual_prefix(context, ["user", "assistant"], [], None)
        chunk_vectors = embedder.embed([f"{prefix}\n\n{exchange}" for exchange in exchanges])
        inputs[sid] = ThreadInput(
            session_id=sid, project="webshop", started_at=started, ended_at=started + timedelta(minutes=40),
            topics=topics, files=files, summary_vector=list(summary_vector), chunk_vectors=[list(v) for v in chunk_vectors],
        )
    return inputs


def pick(webshop: dict[str, ThreadInput], *names: str) -> list[ThreadInput]:
    return [webshop[name] for name in names]


def test_two_related_sessions_share_a_thread_and_the_unrelated_one_is_in_none(webshop) -> None:
    (thread,) = build_threads(pick(webshop, "checkout-1", "ci", "checkout-2"))
    assert thread.session_ids == ("checkout-1", "checkout-2")  # time order; "ci" is in no thread
    assert thread.project == "webshop"
    assert thread.title == "checkout, gift card"  # the topics both sessions share
    assert 0.5 <= thread.cohesion <= 1


def test_threads_do_not_depend_on_input_order(webshop) -> None:
    sessions = list(webshop.values())
    assert build_threads(sessions) == build_threads(sessions[::-1]) == build_threads(sessions[2:] + sessions[:2])


def test_interleaved_discussions_form_separate_threads(webshop) -> None:
    threads = build_threads(list(webshop.values()))
    assert [t.session_ids for t in threads] == [("checkout-1", "checkout-2"), ("auth-1", "auth-2")]  # earliest first
    assert threads[1].title == "login, refresh token"
    assert len({t.thread_id for t in threads}) == 2


def test_related_sessions_score_above_unrelated_ones(webshop) -> None:
    related = [link_score(webshop["checkout-1"], webshop["checkout-2"]), link_score(webshop["auth-1"], webshop["auth-2"])]
    unrelated = [link_score(webshop[a], webshop[b]) for a, b in
                 [("checkout-1", "ci"), ("checkout-2", "auth-2"), ("ci", "auth-1"), ("checkout-1", "auth-1")]]
    assert min(related) > 0.5 > max(unrelated)
    assert link_score(webshop["checkout-1"], webshop["checkout-2"]) == link_score(webshop["checkout-2"], webshop["checkout-1"])


def test_time_weakens_a_link_and_a_long_gap_breaks_it(webshop) -> None:
    def later(days: int) -> ThreadInput:
        start = webshop["checkout-2"].started_at + timedelta(days=days)
        return dataclasses.replace(webshop["checkout-2"], started_at=start, ended_at=start + timedelta(hours=1))

    scores = [link_score(webshop["checkout-1"], later(days)) for days in (0, 30, 60)]
    assert scores == sorted(scores, reverse=True) and scores[-1] > 0
    assert link_score(webshop["checkout-1"], later(120)) == 0
    assert build_threads([webshop["checkout-1"], later(120)]) == []
    assert len(build_threads([webshop["checkout-1"], later(120)], max_gap_days=None)) == 1


def test_a_session_without_a_summary_joins_its_thread_through_chunks_topics_and_files(webshop) -> None:
    unsummarized = dataclasses.replace(webshop["checkout-2"], summary_vector=None)
    (thread,) = build_threads([webshop["checkout-1"], unsummarized, webshop["ci"]])
    assert thread.session_ids == ("checkout-1", "checkout-2")


def test_sessions_of_other_projects_are_never_linked(webshop) -> None:
    moved = dataclasses.replace(webshop["checkout-2"], project="other")
    assert build_threads([webshop["checkout-1"], moved, webshop["ci"]]) == []


def test_average_linkage_does_not_chain_unrelated_sessions(webshop) -> None:
    """A session touching both discussions joins at most one of them; the two stay apart."""
    bridge_topics = ("checkout", "gift-card", "login", "refresh-token")
    bridge = ThreadInput("bridge", "webshop", webshop["ci"].started_at, topics=bridge_topics,
                         files=("src/shop/pricing.py", "src/shop/auth/session.py"))
    threads = build_threads([*pick(webshop, "checkout-1", "checkout-2", "auth-1", "auth-2"), bridge])
    assert len(threads) == 2
    assert not any({"checkout-1", "auth-1"} <= set(t.session_ids) for t in threads)


def test_index_builds_threads_and_search_results_name_theirs(tmp_path) -> None:
    from sessionmem_pipeline.cli import main
    from sessionmem_pipeline.client import SessionMemory
    from sessionmem_pipeline.config import load_settings
    from sessionmem_pipeline.stages.run import index_sources

    root = tmp_path / "sources" / "webshop"
    root.mkdir(parents=True)
    conversations = {
        "a": ("2026-03-03", [
            "Checkout returns a 500 when a gift card is applied after a coupon.",
            "The discounts run in the wrong order in pricing.py; I'll apply coupons first, then gift cards.",
        ]),
        "b": ("2026-03-09", [
            "The gift card checkout bug is back for coupons on sale items.",
            "Coupons still apply before gift cards in pricing.py, but sale prices skip the coupon check; fixed.",
        ]),
        "c": ("2026-03-05", [
            "Let's plan the team offsite in Lisbon for June.",
            "I'll shortlist three venues near the river and a dinner budget.",
        ]),
    }
    for name, (day, turns) in conversations.items():
        lines = [
            json.dumps({"role": role, "content": text, "timestamp": f"{day}T10:0{n}:00Z"})
            for n, (role, text) in enumerate(zip(["user", "assistant"], turns, strict=True))
        ]
        (root / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    settings = load_settings(flags={"warehouse": str(tmp_path / "w.duckdb"), "sources": [str(tmp_path / "sources")]}, env={})
    assert index_sources(settings).threads == 1
    memory = SessionMemory(settings=settings)
    (thread,) = memory.threads(project="webshop")
    assert thread["session_ids"] == ["webshop/a", "webshop/b"]
    hit = memory.search("gift card coupon order in pricing.py", limit=1)[0]
    assert hit.thread_id == thread["thread_id"]
    assert memory.search("offsite venue in Lisbon", limit=1)[0].thread_id is None
    assert main(["threads", "--warehouse", str(settings.warehouse), "--json"]) == 0


def _thread_rows(wh) -> list[tuple]:
    return wh.conn.execute(
        "SELECT thread_id, session_id, position, title, topics FROM session_threads ORDER BY ALL"
    ).fetchall()


def test_a_change_rebuilds_only_its_projects_threads_and_matches_a_full_rebuild(tmp_path) -> None:
    from sessionmem_pipeline.config import load_settings
    from sessionmem_pipeline.stages.run import forget, index_sources
    from sessionmem_pipeline.stages.threads import THREADS_BUILT, refresh_threads
    from sessionmem_pipeline.warehouse import Warehouse

    def write(project: str, name: str, day: str, turns: list[str]) -> None:
        folder = tmp_path / "sources" / project
        folder.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps({"role": role, "content": text, "timestamp": f"{day}T10:0{n}:00Z"})
                 for n, (role, text) in enumerate(zip(["user", "assistant"], turns, strict=True))]
        (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")

    gift_card = ["Checkout returns a 500 when a gift card is applied after a coupon.",
                 "The discounts run in the wrong order in pricing.py; I'll apply coupons first, then gift cards."]
    ci = ["CI takes 20 minutes; cache the pip downloads in the GitHub Actions workflow.",
          "Cached pip in the workflow and split the test job by marker; CI now takes 8 minutes."]
    for project, turns in (("webshop", gift_card), ("infra", ci)):
        write(project, "a", "2026-03-03", turns)
        write(project, "b", "2026-03-09", turns[::-1])
    settings = load_settings(flags={"warehouse": str(tmp_path / "w.duckdb"), "sources": [str(tmp_path / "sources")]},
                             env={})
    assert index_sources(settings).threads == 2

    def infra_rows() -> list[tuple]:
        with Warehouse(settings.warehouse) as wh:
            return wh.conn.execute(
                "SELECT thread_id, session_id, updated_at FROM session_threads WHERE session_id LIKE 'infra/%' "
                "ORDER BY ALL").fetchall()

    def matches_a_full_rebuild() -> bool:
        with Warehouse(settings.warehouse) as wh:
            incremental = _thread_rows(wh)
        copy = tmp_path / "copy" / "w.duckdb"
        copy.parent.mkdir(exist_ok=True)
        shutil.copy(settings.warehouse, copy)
        with Warehouse(copy) as wh:
            with wh.transaction():
                wh.conn.execute("DELETE FROM meta WHERE key = ?", [THREADS_BUILT])
            refresh_threads(wh, "any key")
            return _thread_rows(wh) == incremental and len(incremental) > 0

    infra_before = infra_rows()
    write("webshop", "c", "2026-03-12", ["The gift card checkout bug is back for coupons on sale items.",
                                         "Sale prices skip the coupon check in pricing.py; fixed the order again."])
    report = index_sources(settings)
    assert report.threads == 1  # webshop's thread only
    assert infra_rows() == infra_before  # infra's threads were not rebuilt
    assert matches_a_full_rebuild()

    forget(settings, session_id="webshop/a")
    assert index_sources(settings).threads == 1
    assert infra_rows() == infra_before
    assert matches_a_full_rebuild()


class _Project:
    """Sessions written straight into a real warehouse (sessions + latest summaries), mutated at random: each
    session's vector, topics and files come from one of a few themes, so strong components and threads form."""

    THEMES = 6

    def __init__(self, wh, seed: int) -> None:
        import numpy as np

        self.wh, self.rng = wh, np.random.default_rng(seed)
        self.centers = self.rng.normal(size=(self.THEMES, 24))
        self.sessions: dict[str, int] = {}  # id -> latest summary version
        self.count = 0

    def _summary(self, session_id: str, version: int) -> dict:
        theme = int(self.rng.integers(self.THEMES))
        vocabulary = [f"theme{theme}-{n}" for n in range(4)] + [f"misc-{n}" for n in range(6)]
        vector = self.centers[theme] + self.rng.normal(scale=0.6, size=24)
        summary = {"topics": list(self.rng.choice(vocabulary, size=3, replace=False)),
                   "files_modified": [f"src/{name}.py" for name in self.rng.choice(vocabulary, size=2)]}
        return {"summary_id": f"{session_id}@{version}", "session_id": session_id, "version": version,
                "summary": json.dumps(summary),
                "embedding": None if self.rng.random() < 0.05 else [float(x) for x in vector]}

    def _start(self):
        if self.rng.random() < 0.03:
            return None
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=float(self.rng.uniform(0, 240)))

    def add(self) -> None:
        self.count += 1
        session_id = f"s{self.count:03d}"
        project = "main" if self.rng.random() < 0.85 else "side"
        with self.wh.transaction():
            self.wh.insert("sessions", [{"session_id": session_id, "project": project, "started_at": self._start(),
                                         "summary_version": 1}])
            self.wh.insert("session_summaries", [self._summary(session_id, 1)])
        self.sessions[session_id] = 1

    def pick(self) -> str:
        return str(self.rng.choice(sorted(self.sessions)))

    def resummarize(self) -> str:
        session_id = self.pick()
        version = self.sessions[session_id] = self.sessions[session_id] + 1
        with self.wh.transaction():
            self.wh.insert("session_summaries", [self._summary(session_id, version)])
            self.wh.conn.execute("UPDATE sessions SET summary_version = ? WHERE session_id = ?", [version, session_id])
        return session_id

    def fill_vector(self) -> bool:
        """A latest summary without a vector gets it (as the embed step does later); False when all have one."""
        missing = self.wh.conn.execute(
            """SELECT v.session_id FROM sessions s JOIN session_summaries v
               ON v.session_id = s.session_id AND v.version = s.summary_version WHERE v.embedding IS NULL
               ORDER BY v.session_id"""
        ).fetchall()
        if not missing:
            return False
        session_id = missing[int(self.rng.integers(len(missing)))][0]
        with self.wh.transaction():
            self.wh.conn.execute(
                "UPDATE session_summaries SET embedding = ? WHERE session_id = ? AND version = ?",
                [[float(x) for x in self.centers[0]], session_id, self.sessions[session_id]],
            )
        return True

    def update(self, column: str, value) -> None:
        with self.wh.transaction():
            self.wh.conn.execute(f"UPDATE sessions SET {column} = ? WHERE session_id = ?", [value, self.pick()])

    def delete(self) -> None:
        session_id = self.pick()
        del self.sessions[session_id]
        with self.wh.transaction():
            self.wh.conn.execute("DELETE FROM sessions WHERE session_id = ?", [session_id])

    def step(self) -> str:
        kind = str(self.rng.choice(["add", "add", "resummarize", "resummarize", "delete", "move", "project",
                                    "embed"]))
        if kind == "embed" and not self.fill_vector():
            kind = "resummarize"
        if kind == "add":
            self.add()
        elif kind == "resummarize":
            self.resummarize()
        elif kind == "delete":
            self.delete()
        elif kind == "embed":
            pass
        elif kind == "move":
            self.update("started_at", self._start())
        else:
            self.update("project", str(self.rng.choice(["main", "side"])))
        return kind


def _rebuilt_from_scratch(wh) -> list[tuple]:
    """The rows a clustering of every whole project gives (core build_threads over all current inputs)."""
    from sessionmem_pipeline.stages.threads import _inputs

    ids = [row[0] for row in wh.conn.execute("SELECT session_id FROM sessions").fetchall()]
    return sorted(
        (thread.thread_id, sid, n, thread.title, list(thread.topics))
        for thread in build_threads(_inputs(wh, ids))
        for n, sid in enumerate(thread.session_ids)
    )


@pytest.fixture
def threaded(tmp_path):
    """A warehouse of 40 random sessions whose threads are built, and the project that mutates them."""
    from sessionmem_pipeline.stages.threads import refresh_threads
    from sessionmem_pipeline.warehouse import Warehouse

    with Warehouse(tmp_path / "w.duckdb") as wh:
        project = _Project(wh, seed=7)
        for _ in range(40):
            project.add()
        refresh_threads(wh, "key")
        yield wh, project


def test_threads_updated_change_by_change_equal_a_full_clustering_after_every_change(threaded) -> None:
    from sessionmem_pipeline.stages.threads import refresh_threads

    wh, project = threaded
    assert _thread_rows(wh) == _rebuilt_from_scratch(wh)
    kinds = set()
    for _ in range(60):
        kinds.add(project.step())
        refresh_threads(wh, "key")
        assert _thread_rows(wh) == _rebuilt_from_scratch(wh)
    assert kinds == {"add", "resummarize", "delete", "move", "project", "embed"}
    assert len({row[0] for row in _thread_rows(wh)}) >= 4  # several threads, so components were kept apart
    assert refresh_threads(wh, "key") is None  # nothing changed: nothing clustered


def test_threads_built_before_inputs_were_recorded_whole_are_rebuilt_once(threaded) -> None:
    """A warehouse from before migration 10 (thread_inputs held a fingerprint only) rebuilds its threads, links and
    inputs in its next run, then follows changes again."""
    from sessionmem_pipeline.stages.threads import THREADS_BUILT, refresh_threads
    from sessionmem_pipeline.warehouse import Warehouse

    wh, project = threaded
    with wh.transaction():  # back to the shape migration 9 left
        wh.conn.execute("DROP TABLE thread_inputs")
        wh.conn.execute("CREATE TABLE thread_inputs (session_id VARCHAR, project VARCHAR, input_fp VARCHAR)")
        wh.conn.execute("ALTER TABLE stage_state DROP COLUMN recorded_seq")  # and before migration 11
        wh.conn.execute("DROP TABLE kw_dead")  # and 12, 13
        wh.conn.execute("ALTER TABLE kw_docs DROP COLUMN ingest_key")
        wh.conn.execute("ALTER TABLE sessions DROP COLUMN summary_versions_used")  # and 14
        wh.conn.execute("DELETE FROM schema_version WHERE version >= 10")
    path = wh.path
    wh.close()
    with Warehouse(path) as upgraded:
        assert upgraded.get_meta(THREADS_BUILT) is None
        assert refresh_threads(upgraded, "key") == len({row[0] for row in _thread_rows(upgraded)}) > 0
        assert _thread_rows(upgraded) == _rebuilt_from_scratch(upgraded)
        assert refresh_threads(upgraded, "key") is None
        project.wh = upgraded
        project.resummarize()
        assert refresh_threads(upgraded, "key") is not None
        assert _thread_rows(upgraded) == _rebuilt_from_scratch(upgraded)


def test_summary_vectors_cleared_relink_like_a_full_rebuild(threaded) -> None:
    """`reembed` clears the summaries' vectors (a provider failing leaves them empty): the sessions' own columns do
    not change, and their links must still follow."""
    from sessionmem_pipeline.stages.threads import refresh_threads

    wh, _ = threaded
    assert _thread_rows(wh) == _rebuilt_from_scratch(wh)
    with wh.transaction():
        wh.conn.execute("UPDATE session_summaries SET embedding = NULL")
    assert refresh_threads(wh, "key") is not None
    assert _thread_rows(wh) == _rebuilt_from_scratch(wh)


def test_a_change_replaces_only_the_threads_of_its_strong_component(threaded) -> None:
    from sessionmem_pipeline.core.threads import strong_components
    from sessionmem_pipeline.stages.threads import refresh_threads

    wh, project = threaded
    stored = "SELECT thread_id, session_id, updated_at FROM session_threads"
    before = wh.conn.execute(stored).fetchall()

    def component_of(session_id: str) -> set[str]:
        sessions = [row[0] for row in wh.conn.execute("SELECT session_id FROM sessions").fetchall()]
        links = wh.conn.execute("SELECT session_a, session_b FROM thread_links").fetchall()
        return next(c for c in strong_components(sessions, links) if session_id in c)

    changed = project.resummarize()
    touched = component_of(changed)
    refresh_threads(wh, "key")
    touched |= component_of(changed)
    after = wh.conn.execute(stored).fetchall()
    untouched = [sorted(row for row in rows if row[1] not in touched) for rows in (before, after)]
    assert untouched[0] == untouched[1]
    assert len({row[0] for row in after if row[1] not in touched}) >= 2  # other threads were there, untouched
    assert not set(after) & {row for row in before if row[1] in touched}  # the component's threads were replaced
    assert _thread_rows(wh) == _rebuilt_from_scratch(wh)
    # a new stage key rebuilds everything
    assert refresh_threads(wh, "new key") == len({row[0] for row in after})
    assert not set(after) & set(wh.conn.execute(stored).fetchall())


def test_a_link_score_does_not_depend_on_the_sessions_computed_with_it() -> None:
    import numpy as np

    from sessionmem_pipeline.core.threads import link_scores

    rng = np.random.default_rng(5)
    sessions = [
        ThreadInput(session_id=f"s{n}", project="p", started_at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=n),
                    topics=tuple(rng.choice(["a", "b", "c", "d"], size=2)), files=("x.py",) if n % 3 else (),
                    summary_vector=list(rng.normal(size=384)) if n % 7 else None,
                    chunk_vectors=[list(v) for v in rng.normal(size=(int(rng.integers(0, 20)), 384))])
        for n in range(60)
    ]
    whole = link_scores(sessions, sessions)
    assert (whole == whole.T).all() and (whole > 0).any()
    for _ in range(5):
        rows, cols = sorted(rng.choice(60, size=7, replace=False)), list(rng.choice(60, size=23, replace=False))
        part = link_scores([sessions[i] for i in rows], [sessions[j] for j in cols])
        assert np.array_equal(part, whole[np.ix_(rows, cols)])


def _merges_by_scanning_the_matrix(links, threshold: float) -> list[list[int]]:
    """Average linkage by its definition: merge the first maximum of the whole matrix, in row-major order."""
    import numpy as np

    groups = [[i] for i in range(len(links))]
    between = links.astype(np.float64, copy=True)
    np.fill_diagonal(between, -np.inf)
    while len(links) > 1:
        i, j = divmod(int(np.argmax(between)), len(links))
        if between[i, j] < threshold:
            return [sorted(group) for group in groups if group]
        merged = (between[i] * len(groups[i]) + between[j] * len(groups[j])) / (len(groups[i]) + len(groups[j]))
        between[i], between[:, i], between[j], between[:, j] = merged, merged, -np.inf, -np.inf
        between[i, i] = -np.inf
        groups[i], groups[j] = groups[i] + groups[j], []
    return [sorted(group) for group in groups if group]


def test_average_linkage_merges_the_first_maximum_of_the_matrix_also_among_ties() -> None:
    import numpy as np

    from sessionmem_pipeline.core.threads import _average_linkage

    rng = np.random.default_rng(2)
    for trial in range(400):
        size = int(rng.integers(0, 30))
        links = np.triu(np.round(rng.random((size, size)) * (4 if trial % 2 else 1000)) / (4 if trial % 2 else 1000), 1)
        for threshold in (0.25, 0.5, 0.75):
            assert _average_linkage(links + links.T, threshold) == _merges_by_scanning_the_matrix(links + links.T,
                                                                                                  threshold)
