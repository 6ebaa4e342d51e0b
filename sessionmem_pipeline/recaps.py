"""The recap of a stored session, and the session-start hook's recaps made at index time.

The hook runs at every agent session start and must answer fast. Making a recap of a long session loads the
recap rules (about 300 regular expressions), numpy and the cl100k tokenizer: about 0.3 s of CPU in a new process.
So the index stage makes, for the latest sessions of each project (the ones the hook asks for), the recap at the
hook's default budget and stores it with a fingerprint of what it was made from (`Warehouse.recap_fingerprints`:
the session's rows in every stage, the summaries of its project's earlier sessions, the curated memories, and
RECAP_RULES). The hook reads it when the fingerprint still matches the snapshot, and otherwise (another budget, a
chat model configured, a change written outside a run's index stage, an older warehouse) makes it as before: the
text is always the one `SessionMemory.recap` gives.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sessionmem_pipeline.core.llm_protocol import ChatModel
    from sessionmem_pipeline.core.recap import Recap
    from sessionmem_pipeline.warehouse import Warehouse, _Queries

HOOK_BUDGET = 800
"""The hook's default budget (cl100k tokens; core.recap.DEFAULT_BUDGET, not imported here: the hook does not load
the recap rules when the stored recap answers)."""
RECAP_RULES = "2"  # 2: the earlier summaries in the fingerprint as a count and xor of their ids' hashes
"""The version of what a recap is made by (core.recap, core.ending, the tokenizer) and of its fingerprint: bump it
when a change there alters a recap's text or what the fingerprint covers, so stored recaps are not used and the
next run's index stage makes them again."""
PER_PROJECT = 2
"""Sessions per project whose recaps are kept: the latest, and the one before it for a hook whose own session
(`exclude`) is already indexed as the latest."""


def rules(budget: int) -> str:
    return f"{RECAP_RULES}/{budget}"


RECAPS_MADE_BY = rules(HOOK_BUDGET)
"""What the index stage's recaps are made by: part of that stage's input, so a new RECAP_RULES makes them again."""


def session_recap(reader: _Queries, session: Mapping[str, Any], budget: int, llm: ChatModel | None = None) -> Recap:
    """The recap of a stored session (its `sessions` row) from what the warehouse holds: its messages, chunks and
    vectors, against the summaries of its project's earlier sessions and the curated memories."""
    from sessionmem_pipeline.core.recap import recap_session

    sid = session["session_id"]
    memories = reader.query("SELECT embedding FROM memories WHERE embedding IS NOT NULL")
    return recap_session(
        reader.load_messages(sid),
        chunks=reader.load_chunks(sid) or None,
        chunk_vectors=reader.chunk_vectors(sid),
        memory_vectors=[m["embedding"] for m in memories],
        earlier_summary_vectors=reader.earlier_summary_vectors(session),
        budget=budget,
        llm=llm,
    )


def stored_recap_text(reader: _Queries, session_id: str, budget: int) -> str | None:
    """The recap made at index time, when it was made from what the snapshot holds now; else None."""
    stored = reader.stored_recap(session_id, budget)
    if stored is None:
        return None
    current = reader.recap_fingerprints([session_id], rules(budget)).get(session_id)
    return stored[1] if stored[0] == current else None


def refresh_recaps(wh: Warehouse) -> int:
    """Make the hook's recaps whose inputs changed, for the latest PER_PROJECT sessions of each project, and drop
    the others (call inside a transaction). Returns how many were made."""
    sessions = wh.recap_candidates(PER_PROJECT)
    ids = [s["session_id"] for s in sessions]
    fingerprints = wh.recap_fingerprints(ids, RECAPS_MADE_BY)
    stored = {sid: input_fp for sid, (input_fp, _) in wh.stored_recaps(ids, HOOK_BUDGET).items()}
    made = []
    for session in sessions:
        sid = session["session_id"]
        if stored.get(sid) != fingerprints[sid]:
            text = session_recap(wh, session, HOOK_BUDGET).text
            made.append({"session_id": sid, "budget": HOOK_BUDGET, "input_fp": fingerprints[sid], "text": text})
    wh.replace_recaps(made, ids)
    return len(made)
