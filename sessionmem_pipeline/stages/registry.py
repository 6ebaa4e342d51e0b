"""The one ordered stage registry that `sessionmem index` and the Dagster assets both drive.

Where the work stands lives in the warehouse (`stage_state`), never in a run's memory: per session and stage, the
fingerprint of the input its output was built from and the stage's key (its version constant, the configuration
keys it reads, and the models it uses). A session stage's input fingerprint is its upstream stage's output
fingerprint, so each stage selects its own stale work with one query, and whatever a crash, kill or exception
left undone is simply stale on the next plain run. Bumping a stage's version (or changing a key it reads) makes
its output stale everywhere, so existing warehouses update themselves.

Stages, in order: ingest (per file) -> collapse -> chunk -> embed, and collapse -> summarize (per session); then
threads, memories and index (over everything); publishing the reader snapshot follows (`publish_if_stale`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from sessionmem_pipeline.config import Settings
from sessionmem_pipeline.core.llm_protocol import ChatModel
from sessionmem_pipeline.core.redact import REDACTION_VERSION
from sessionmem_pipeline.providers import Embedder, chat_model_from_settings, embedder_from_settings

SUMMARIZE_DUE = "due"
"""Summaries only for sessions that are due (idle or enough new messages): `index` and the sensors."""
SUMMARIZE_NOW = "now"
"""Summaries for every stale session now: a materialization a person launched."""

FAULT_VARIABLE = "FAULT_INJECT_SESSIONMEM"
"""(Not SESSIONMEM_*: that prefix is the configuration's.)"""
"""Fault injection for the crash tests: `exit-after:STAGE` ends the process hard once STAGE has committed;
`raise-in:STAGE` raises inside STAGE after its first unit of work has committed."""


class InjectedFault(RuntimeError):
    """Raised by `raise-in:STAGE` (tests only)."""


def fault_point(stage: str, moment: str) -> None:
    """Where a test may kill the process or raise (`moment` is "after" or "in")."""
    wanted = os.environ.get(FAULT_VARIABLE, "")
    if wanted == f"exit-after:{stage}" and moment == "after":
        os._exit(137)
    if wanted == f"raise-in:{stage}" and moment == "in":
        raise InjectedFault(f"injected fault in stage {stage}")


@dataclass(frozen=True)
class Stage:
    """One stage: its version constant, the configuration keys it reads, and the stage its input comes from."""

    name: str
    version: int
    config_keys: tuple[str, ...] = ()
    upstream: str | None = None
    per_session: bool = True
    uses_embedder: bool = False
    uses_llm: bool = False
    uses_redaction: bool = False


INGEST = Stage(
    "ingest",
    7,  # 2: parser changes (recap); 3: privacy exclusions and <private> spans; 4: agent formats, per-session ingest;
    # 5: too-deep lines skipped, implausible timestamps clamped; 6: OpenCode, Copilot Chat and Cursor parsers;
    # 7: Claude Code warmup sidechains are no sessions
    ("validation.max_bad_line_share", "privacy.exclude_paths", "privacy.exclude_projects"),
    uses_redaction=True,
)
COLLAPSE = Stage("collapse", 4, upstream="ingest")
"""2: OpenCode's filePath/oldString/newString, no empty file names; 3: Codex `shell_command` calls read as shell
commands; 4: no second redaction (messages come redacted from ingest)."""
CHUNK = Stage(
    "chunk", 4, ("chunking.max_tokens", "chunking.max_chunks", "timezone"), "collapse", uses_embedder=True,
    uses_llm=True,
)
"""4: parts of a huge message start at the length the window ratio of the part before predicts."""
EMBED = Stage("embed", 2, upstream="chunk", uses_embedder=True)
SUMMARIZE = Stage("summarize", 3, upstream="collapse", uses_embedder=True, uses_llm=True)
THREADS = Stage("threads", 2, upstream="summarize", per_session=False)  # 2: rebuilt per changed project
MEMORIES = Stage("memories", 2, per_session=False, uses_embedder=True)  # 2: <private> spans removed too
INDEX = Stage("index", 1, per_session=False)

STAGES: tuple[Stage, ...] = (INGEST, COLLAPSE, CHUNK, EMBED, SUMMARIZE, THREADS, MEMORIES, INDEX)
SESSION_STAGES = tuple(s for s in STAGES if s.per_session)
GLOBAL = "*"
"""The session id under which a stage over everything records its state."""
INDEX_INPUTS = ("chunk", "embed", "summarize", "memories")


@dataclass
class Providers:
    """The embedder and chat model, built on first use (a run that has nothing to embed never loads the model)."""

    settings: Settings
    given_embedder: Embedder | None = None

    @cached_property
    def embedder(self) -> Embedder:
        return self.given_embedder or embedder_from_settings(self.settings)

    @cached_property
    def llm(self) -> ChatModel | None:
        return chat_model_from_settings(self.settings)

    def embedder_id(self) -> str:
        """The model's id and width (building an embedder is cheap: the model itself loads on first use)."""
        return f"{self.embedder.model_id}/{self.embedder.dimensions}"

    def llm_id(self) -> str:
        return self.llm.model if self.llm is not None else "none"


def stage_key(stage: Stage, settings: Settings, providers: Providers) -> str:
    """The stage's version constant, the configuration it reads and the models it uses, as one digest."""
    parts: dict[str, Any] = {"stage": stage.name, "version": stage.version}
    parts["config"] = {key: settings[key] for key in stage.config_keys}
    if stage.uses_embedder:
        parts["embedder"] = providers.embedder_id()
    if stage.uses_llm:
        parts["llm"] = providers.llm_id()
    if stage.uses_redaction:
        parts["redaction"] = REDACTION_VERSION
    return hashlib.md5(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def stage_keys(settings: Settings, providers: Providers) -> dict[str, str]:
    """Every stage's key: what a compute step and the commit must agree on for a staged result to be used."""
    return {stage.name: stage_key(stage, settings, providers) for stage in STAGES}


@dataclass
class StageContext:
    """What a stage is handed: the warehouse, settings, providers, who is running, and the scope of the run."""

    wh: Any  # warehouse.Warehouse (typed loosely to keep this module import-light for the CLI)
    settings: Settings
    providers: Providers
    run_id: str
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    scope: Sequence[str] | None = None  # sessions this run may touch (Dagster partitions); None: all
    partition_keys: Sequence[str] | None = None  # the files this run covers (Dagster partitions); None: all
    summarize: str = SUMMARIZE_DUE
    progress: Callable[[str, int, int], None] = lambda stage, done, total: None

    @cached_property
    def keys(self) -> dict[str, str]:
        return stage_keys(self.settings, self.providers)

    def stale(self, stage: Stage) -> dict[str, str]:
        """Sessions (within the scope) whose output of this session stage must be built, with their input."""
        upstream = stage.upstream or ""
        return self.wh.stale_sessions(stage.name, self.keys[stage.name], upstream, self.keys[upstream], self.scope)

    def record(self, stage: Stage, fingerprints: Mapping[str, str]) -> None:
        """Call inside the transaction that wrote these sessions' output."""
        self.wh.record_stage(stage.name, fingerprints, self.keys[stage.name], self.run_id, self.now)

    def global_input(self, stages: Sequence[str], extra: str = "") -> str:
        return hashlib.md5(f"{self.wh.stage_fingerprint(stages)}|{extra}".encode()).hexdigest()

    def global_is_stale(self, stage: Stage, input_fp: str) -> bool:
        row = self.wh.stage_row(stage.name, GLOBAL)
        return row is None or row["input_fp"] != input_fp or row["stage_key"] != self.keys[stage.name]

    def stale_report(self) -> dict[str, int]:
        """Per session stage, how many sessions a run would still build (health and status read this from the
        snapshot). Summaries that wait for their session to go idle are not counted, only those built by
        another summarizer version or model."""
        keys = {
            s.name: (self.keys[s.name], None if s is SUMMARIZE else s.upstream, self.keys[s.upstream] if s.upstream else None)
            for s in SESSION_STAGES
        }
        return self.wh.stale_counts(keys)
