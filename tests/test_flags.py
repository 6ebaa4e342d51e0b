"""Decision and action detection (issue 5 item 6): each cue, its look-alikes, and the labelled sets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sessionmem_pipeline.core.flags import has_action, has_decision, shell_command_changes_state
from sessionmem_pipeline.core.models import ToolRecord

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "text",
    [
        "User: ok let's go with visx then",
        "We decided yesterday that the mobile app won't support offline mode in v1.",
        "I'll use a small hand-rolled loop with exponential backoff.",
        "We'll use Sentry for error tracking.",
        "The team voted and we're going with Tailwind for the redesign.",
        "Of the two fixes, pinning numpy<2 is the least risky, so I went with that.",
        "We settled on ISO 8601 with an explicit UTC offset.",
        "The plan is to launch the newsletter on March 1.",
        "Agreed on option A for now, we can revisit in Q3.",
        "Agreed, SQLite it is.",
        "right, 404 it is",
        "Zod then.",
        "Instead of polling the directory, we'll rely on file watcher events.",
        "Rather than a nightly rebuild, let's do incremental indexing.",
        "A lock serializes every request, so I implemented the per-thread cache instead.",
        "Decision: we keep the free tier but cap it at 3 projects.",
        "Fine, sessionmem. Final answer.",
        "yes, local by default",
        "After profiling, the conclusion is that JSON parsing is not the bottleneck.",
        "We decided not to add a deprecation period.",
        "Going forward, all new endpoints get an OpenAPI description.",
        "Sounds good, ship it.",
        "We're dropping 5.7.",
        "bottom tabs, good.",
    ],
)
def test_decision_cues(text: str) -> None:
    assert has_decision(text)


@pytest.mark.parametrize(
    "text",
    [
        "Should we go with GraphQL or stick with REST?",
        "If we decided to move to Kubernetes, how long would the migration take?",
        "We haven't decided between Vue and Svelte yet.",
        "What did you decide about the caching layer?",
        "I can't decide whether the email should come from the founder.",
        "Which one would you pick, Poetry or uv?",
        "I think we should maybe use Kafka, but I'm not sure yet.",
        "Last time you suggested going with Redis, but would Memcached be simpler?",
        "hmm, going with the flow for now",
        "The `decided_at` column is nullable; the `settled` flag tracks payment state.",
        "It is what it is.",
        "Ok then.",
        "okay cool",
        "Yes, that needs doing soon.",
        "Redis sorted sets make the rate limiter simple.",
        "Thanks, I'll keep an eye on it.",
        "I'll keep you posted.",
        "User: ok continue",
        "yes go on",
        "ok, good.",
        "",
    ],
)
def test_decision_look_alikes(text: str) -> None:
    assert not has_decision(text)


@pytest.mark.parametrize(
    "text",
    [
        "TODO before release: update the changelog and tag v0.4.0.",
        "TODO for you: write the migration that enforces the cap.",
        "Next steps: (1) add the index, (2) backfill the timestamps.",
        "remind me tomorrow to call the accountant",
        "I'll follow up with the design team about the empty states.",
        "@marco please review the migration PR before the standup.",
        "Send the draft to Jason by Friday please.",
        "Add a test for the empty-file case in the parser.",
        "Can you fix it?",
        "I'll write the migration and a rollback script.",
        "We need to rotate the Stripe key this week.",
        "we must migrate off the deprecated v1 endpoints before June.",
        "Action items: Sam writes the onboarding doc, I set up the staging DB.",
        "Will do.",
        "Renaming it across the codebase now.",
        "Plan for tomorrow: finish the export endpoint, then open the PR.",
        "Ben owns it, target by end of month.",
        "don't forget to bump the version before you publish",
    ],
)
def test_action_cues(text: str) -> None:
    assert has_action(text)


@pytest.mark.parametrize(
    "text",
    [
        "Can you explain what the lru_cache on the encoder does?",
        "I'll be honest, I don't really understand the event loop.",
        "The function needs to return a list, but it returns a generator.",
        "We're building a todo list app for the workshop.",
        "What's the next step in the OAuth flow after the redirect?",
        "The follow-up question I had was about tax rules.",
        "Most of the TODO comments are in the legacy importer.",
        "I'm going to grab lunch, back in an hour.",
        "Do we need to worry about GDPR for the analytics events?",
        "I don't think we need to rewrite the parser.",
        "Can you tell me what the retention policy is?",
        "That makes sense.",
    ],
)
def test_action_look_alikes(text: str) -> None:
    assert not has_action(text)


def tool(category: str, command: str | None = None) -> ToolRecord:
    return ToolRecord(name="Bash" if command else "Edit", category=category, line=None, command=command)


@pytest.mark.parametrize(
    ("tools", "expected"),
    [
        ((tool("consequential"),), True),
        ((tool("observational"),), False),
        ((tool("meta"),), False),
        ((tool("unknown"),), False),
        ((tool("shell", "git push origin main"),), True),
        ((tool("shell", "git status --short"),), False),
        ((tool("observational"), tool("shell", "rm -rf dist")), True),
    ],
)
def test_state_changing_tools_are_actions(tools: tuple[ToolRecord, ...], expected: bool) -> None:
    assert has_action("Here is what I found.", tools) is expected


@pytest.mark.parametrize(
    "command",
    [
        "git status --short",
        "git log --oneline -5",
        "git diff HEAD~1 -- src/",
        "git branch",
        "ls -la src/",
        "grep -rn API_URL src/ | head -20",
        "cat pyproject.toml",
        "pytest -q tests/test_chunk.py",
        "uv run pytest -x",
        "python -m pytest",
        "npm run build",
        "docker ps",
        "docker logs api --tail 50",
        "kubectl get pods -n prod",
        "ruff check .",
        "sed -n 10,20p src/app.py",
        "find . -name '*.py' 2>/dev/null",
        "pip list",
        "grep -i -w todo notes.md",
        "sudo docker ps",
        "FOO=1 uv run pytest -q",
    ],
)
def test_read_only_commands(command: str) -> None:
    assert not shell_command_changes_state(command)


@pytest.mark.parametrize(
    "command",
    [
        "git commit -am 'Fix pagination'",
        "git push origin fix/pagination",
        "git branch -D tmp/spike-1",
        "git branch new-feature",
        "git stash",
        "rm -rf dist build",
        "npm install date-fns",
        "pip install -r requirements.txt",
        "sed -i 's/get_data/fetch_sessions/g' src/*.py",
        "ruff format .",
        "ruff check --fix .",
        "echo 'API_URL=http://localhost' > .env",
        "git status && git add -A",
        "alembic upgrade head",
        "kubectl rollout undo deployment/api",
        "pg_dump staging > backups/staging.sql",
        "./deploy.sh production",
        "find . -name '*.pyc' -delete",
        "sed -i.bak 's/a/b/' config.ini",
        "npx prettier --write .",
    ],
)
def test_state_changing_commands(command: str) -> None:
    assert shell_command_changes_state(command)


def test_labelled_sets_reach_precision_and_recall_of_0_8() -> None:
    """Through the benchmark command itself, so its numbers are the ones reported."""
    completed = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "flags.py"), "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    scores = json.loads(completed.stdout)["scores"]
    assert {s["file"] for s in scores} >= {"labelled.jsonl", "holdout.jsonl", "fresh.jsonl"}
    assert sum(s["examples"] for s in scores if s["detector"] == "has_decision") >= 80
    for score in scores:
        assert score["precision"] >= 0.8, score
        assert score["recall"] >= 0.8, score


def test_labelled_set_is_balanced_with_hard_negatives() -> None:
    rows = [json.loads(line) for line in (ROOT / "tests/fixtures/flags/labelled.jsonl").read_text().splitlines()]
    assert len(rows) >= 80
    for flag in ("has_decision", "has_action"):
        positives = sum(row[flag] for row in rows)
        assert 0.3 <= positives / len(rows) <= 0.6, flag
    assert sum(not row["has_decision"] and not row["has_action"] for row in rows) >= 25
