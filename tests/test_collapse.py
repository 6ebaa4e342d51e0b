"""Tool-call collapsing (spec 004): one test per rule of the table, then messages, redaction and tool usage."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionmem_pipeline.core.collapse import (
    collapse_messages,
    collapse_tool_call,
    first_error_line,
    is_read_only_command,
    parse_patch,
    shell_command,
    summarize_tools,
)
from sessionmem_pipeline.core.models import (
    CATEGORY_CONSEQUENTIAL,
    CATEGORY_META,
    CATEGORY_OBSERVATIONAL,
    CATEGORY_SHELL,
    CATEGORY_UNKNOWN,
    Message,
    ToolCall,
)
from sessionmem_pipeline.core.sanitize import sanitize_message

CWD = "/home/dev/shop"


def numbered(first: int, last: int) -> str:
    """A Claude Code Read result: `     1→text` lines."""
    return "".join(f"{n:>6}→line {n}\n" for n in range(first, last + 1))


PATCH = """*** Begin Patch
*** Update File: src/cart.py
@@ def total(cart):
-    return sum(i.price for i in cart)
+    subtotal = sum(i.price * i.qty for i in cart)
+    return round(subtotal * 1.2, 2)
*** Add File: tests/test_cart.py
+def test_total():
+    assert total([]) == 0
*** Delete File: src/legacy_cart.py
*** End Patch"""

CODEX_PYTEST_FAILURE = json.dumps(
    {
        "output": "F.\n=== FAILURES ===\n___ test_total ___\n>       assert total(cart) == 3\n"
        "E       AssertionError: expected 3\nFAILED tests/test_cart.py::test_total\n1 failed, 1 passed",
        "metadata": {"exit_code": 1, "duration_seconds": 0.8},
    }
)

# (call, category, line, files)
RULES = [
    pytest.param(
        ToolCall(
            "Write", {"file_path": f"{CWD}/bar.txt", "content": "x\n" * 20}, "File created successfully at: bar.txt"
        ),
        CATEGORY_CONSEQUENTIAL,
        "Wrote bar.txt (20 lines).",
        ("bar.txt",),
        id="write",
    ),
    pytest.param(
        ToolCall("Edit", {"file_path": f"{CWD}/src/app.py", "old_string": "x = 1", "new_string": "x = 2"}, "ok"),
        CATEGORY_CONSEQUENTIAL,
        'Edited src/app.py: replaced "x = 1" with "x = 2".',
        ("src/app.py",),
        id="edit",
    ),
    pytest.param(
        ToolCall(
            "Edit",
            {"file_path": "src/app.py", "old_string": "colour", "new_string": "color", "replace_all": True},
            "ok",
        ),
        CATEGORY_CONSEQUENTIAL,
        'Edited src/app.py: replaced every "colour" with "color".',
        ("src/app.py",),
        id="edit-replace-all",
    ),
    pytest.param(
        ToolCall("Edit", {"file_path": "a.py", "old_string": "def f():\n" + "    pass\n" * 30, "new_string": ""}, "ok"),
        CATEGORY_CONSEQUENTIAL,
        'Edited a.py: removed "def f(): pass pass pass pass pass pass pass pass pass pass pass pass pass pass…".',
        ("a.py",),
        id="edit-long-quote-single-lined-and-cut",
    ),
    pytest.param(
        ToolCall(
            "MultiEdit",
            {
                "file_path": "src/app.py",
                "edits": [
                    {"old_string": "a", "new_string": "b"},
                    {"old_string": "c", "new_string": "d"},
                    {"old_string": "e", "new_string": "f"},
                ],
            },
            "Applied 3 edits",
        ),
        CATEGORY_CONSEQUENTIAL,
        'Edited src/app.py (3 edits): replaced "a" with "b"; replaced "c" with "d"; and 1 more edit.',
        ("src/app.py",),
        id="multiedit",
    ),
    pytest.param(
        ToolCall(
            "NotebookEdit", {"notebook_path": "analysis.ipynb", "cell_number": 3, "new_source": "df.head()"}, "ok"
        ),
        CATEGORY_CONSEQUENTIAL,
        "Edited notebook analysis.ipynb cell 3.",
        ("analysis.ipynb",),
        id="notebookedit",
    ),
    pytest.param(
        ToolCall("apply_patch", {"input": PATCH}, "Success. Updated the following files:\nM src/cart.py"),
        CATEGORY_CONSEQUENTIAL,
        "Patched src/cart.py (updated, +2 -1), tests/test_cart.py (added, +2), src/legacy_cart.py (deleted).",
        ("src/cart.py", "tests/test_cart.py", "src/legacy_cart.py"),
        id="apply_patch",
    ),
    pytest.param(
        ToolCall("apply_patch", {"patch": PATCH}, "Done"),
        CATEGORY_CONSEQUENTIAL,
        "Patched src/cart.py (updated, +2 -1), tests/test_cart.py (added, +2), src/legacy_cart.py (deleted).",
        ("src/cart.py", "tests/test_cart.py", "src/legacy_cart.py"),
        id="apply_patch-patch-key",
    ),
    pytest.param(
        ToolCall("remember", {"abstract": "Checkout totals include 20% VAT, rounded to cents"}, "Stored memory #41"),
        CATEGORY_CONSEQUENTIAL,
        "Remembered: 'Checkout totals include 20% VAT, rounded to cents'.",
        (),
        id="remember",
    ),
    pytest.param(
        ToolCall(
            "AskUserQuestion",
            {"questions": [{"question": "Which database?", "header": "DB", "options": [{"label": "PostgreSQL"}]}]},
            'User has answered your questions: "Which database?"="PostgreSQL". You can now continue with the answers.',
        ),
        CATEGORY_CONSEQUENTIAL,
        "Asked user: 'Which database?'. Response: 'PostgreSQL'.",
        (),
        id="askuserquestion",
    ),
    pytest.param(
        ToolCall("ask", {"question": "Deploy now?"}, "Yes, go ahead"),
        CATEGORY_CONSEQUENTIAL,
        "Asked user: 'Deploy now?'. Response: 'Yes, go ahead'.",
        (),
        id="ask",
    ),
    pytest.param(
        ToolCall(
            "Task",
            {"description": "Find where totals are computed", "prompt": "Search…", "subagent_type": "Explore"},
            "## Findings\nThe total is computed in src/cart.py:42.\nIt ignores quantities.",
        ),
        CATEGORY_CONSEQUENTIAL,
        "Delegated to subagent (Explore): 'Find where totals are computed'. "
        "Result: The total is computed in src/cart.py:42.",
        (),
        id="task",
    ),
    pytest.param(
        ToolCall("ExitPlanMode", {"plan": "## Plan\n1. Fix total()\n2. Add a test"}, "User has approved your plan."),
        CATEGORY_CONSEQUENTIAL,
        "Proposed plan: Plan 1. Fix total() 2. Add a test",
        (),
        id="exitplanmode",
    ),
    pytest.param(
        ToolCall("Read", {"file_path": f"{CWD}/foo.txt"}, numbered(1, 15)),
        CATEGORY_OBSERVATIONAL,
        "Read foo.txt (15 lines).",
        ("foo.txt",),
        id="read",
    ),
    pytest.param(
        ToolCall("Read", {"file_path": "src/app.py", "offset": 10, "limit": 51}, numbered(10, 60)),
        CATEGORY_OBSERVATIONAL,
        "Read src/app.py (lines 10-60).",
        ("src/app.py",),
        id="read-range",
    ),
    pytest.param(
        ToolCall("read_file", {"absolute_path": f"{CWD}/README.md"}, "# Shop\n\nA small shop.\n"),
        CATEGORY_OBSERVATIONAL,
        "Read README.md (3 lines).",
        ("README.md",),
        id="read-gemini",
    ),
    pytest.param(
        ToolCall(
            "LS", {"path": f"{CWD}/src"}, "- /home/dev/shop/src/\n  - app.py\n  - cart.py\n  - api/\n    - routes.py\n"
        ),
        CATEGORY_OBSERVATIONAL,
        "Listed directory src/: app.py, cart.py, api/ (3 entries).",
        (),
        id="ls",
    ),
    pytest.param(
        ToolCall("list_directory", {"path": "src"}, "Directory listing for /home/dev/shop/src:\n[DIR] api\napp.py"),
        CATEGORY_OBSERVATIONAL,
        "Listed directory src/: api/, app.py (2 entries).",
        (),
        id="ls-gemini",
    ),
    pytest.param(
        ToolCall("Glob", {"pattern": "**/*.py"}, "\n".join(f"src/m{n}.py" for n in range(7))),
        CATEGORY_OBSERVATIONAL,
        'Found 7 files matching "**/*.py".',
        (),
        id="glob",
    ),
    pytest.param(
        ToolCall("Glob", {"pattern": "**/*.rs", "path": f"{CWD}/src"}, "No files found"),
        CATEGORY_OBSERVATIONAL,
        'Found no files matching "**/*.rs" in src.',
        (),
        id="glob-none",
    ),
    pytest.param(
        ToolCall(
            "Grep",
            {"pattern": "TODO", "path": "src/", "output_mode": "content"},
            "\n".join(f"src/a.py:{n}:# TODO" for n in range(12)),
        ),
        CATEGORY_OBSERVATIONAL,
        'Searched for "TODO" in src/ (12 matches).',
        (),
        id="grep",
    ),
    pytest.param(
        ToolCall("Grep", {"pattern": "def total"}, "Found 2 files\nsrc/cart.py\nsrc/legacy_cart.py"),
        CATEGORY_OBSERVATIONAL,
        'Searched for "def total" (2 files).',
        (),
        id="grep-files",
    ),
    pytest.param(
        ToolCall("WebFetch", {"url": "https://duckdb.org/docs/extensions/vss", "prompt": "HNSW options?"}, "…"),
        CATEGORY_OBSERVATIONAL,
        "Fetched https://duckdb.org/docs/extensions/vss.",
        (),
        id="webfetch",
    ),
    pytest.param(
        ToolCall("WebSearch", {"query": "duckdb hnsw persistence"}, "Web search results…"),
        CATEGORY_OBSERVATIONAL,
        'Searched the web for "duckdb hnsw persistence".',
        (),
        id="websearch",
    ),
    pytest.param(
        ToolCall("web_search", {"query": "tiktoken offline"}, None),  # Codex records no result for searches
        CATEGORY_OBSERVATIONAL,
        'Searched the web for "tiktoken offline".',
        (),
        id="web_search-codex",
    ),
    pytest.param(
        ToolCall("recall", {"query": "checkout"}, "1. VAT is 20%\n2. Totals round to cents\n3. Cart has qty"),
        CATEGORY_OBSERVATIONAL,
        'Recalled 3 memories about "checkout".',
        (),
        id="recall",
    ),
    pytest.param(
        ToolCall("recall_detail", {"id": 12}, "Full text…"),
        CATEGORY_OBSERVATIONAL,
        "Retrieved full text of memory #12.",
        (),
        id="recall_detail",
    ),
    pytest.param(
        ToolCall("TaskOutput", {"task_id": "b7f2"}, "running…"),
        CATEGORY_OBSERVATIONAL,
        "Checked background task b7f2.",
        (),
        id="taskoutput",
    ),
    pytest.param(
        ToolCall("list_mcp_resources", {"server": "docs"}, "[]"),
        CATEGORY_OBSERVATIONAL,
        "Listed MCP resources of server docs.",
        (),
        id="list_mcp_resources",
    ),
    pytest.param(
        ToolCall("Skill", {"skill": "pdf"}, "Loaded"), CATEGORY_OBSERVATIONAL, 'Used skill "pdf".', (), id="skill"
    ),
    pytest.param(
        ToolCall("Bash", {"command": "pytest -q", "description": "Run tests"}, "12 passed in 0.4s"),
        CATEGORY_SHELL,
        "Ran `pytest -q` (exit 0).",
        (),
        id="bash",
    ),
    pytest.param(
        ToolCall("shell", {"command": ["bash", "-lc", "pytest -q"], "workdir": CWD}, CODEX_PYTEST_FAILURE),
        CATEGORY_SHELL,
        "Ran `pytest -q` (exit 1): E AssertionError: expected 3",
        (),
        id="shell-codex-argv-failing",
    ),
    pytest.param(
        ToolCall(
            "shell",
            {"command": ["bash", "-lc", "cd /repo && sed -n '1,200p' src/app.py"]},
            json.dumps({"output": "…", "metadata": {"exit_code": 0}}),
        ),
        CATEGORY_OBSERVATIONAL,
        "Ran `cd /repo && sed -n '1,200p' src/app.py` (exit 0).",
        (),
        id="shell-read-only",
    ),
    pytest.param(
        ToolCall(
            "shell_command",
            {"command": "npm.cmd run build", "workdir": "D:\\web\\tickets", "timeout_ms": 120000},
            "Exit code: 0\nWall time: 9.1 seconds\nOutput:\nbuilt in 8.70s",
        ),
        CATEGORY_SHELL,
        "Ran `npm.cmd run build` (exit 0).",
        (),
        id="shell_command-codex-windows",
    ),
    pytest.param(
        ToolCall(
            "exec_command",
            {"cmd": "python manage.py migrate"},
            "Chunk ID: 9f\nWall time: 1.2 seconds\nProcess exited with code 1\nOriginal token count: 40\nOutput:\n"
            "Traceback (most recent call last):\n  File \"manage.py\", line 3, in <module>\n    import django\n"
            "ModuleNotFoundError: No module named 'django'\n",
        ),
        CATEGORY_SHELL,
        "Ran `python manage.py migrate` (exit 1): ModuleNotFoundError: No module named 'django'",
        (),
        id="exec_command-traceback",
    ),
    pytest.param(
        ToolCall(
            "exec_command",
            {"cmd": "npm run dev"},
            "Chunk ID: 1a\nWall time: 10.0 seconds\nProcess running with session ID 3\nOutput:\nready",
        ),
        CATEGORY_SHELL,
        "Started `npm run dev` in the background (session 3).",
        (),
        id="exec_command-running",
    ),
    pytest.param(
        ToolCall("write_stdin", {"session_id": 3, "chars": "q"}, "Process running with session ID 3"),
        CATEGORY_SHELL,
        "Sent input to the running command (session 3).",
        (),
        id="write_stdin",
    ),
    pytest.param(
        ToolCall("write_stdin", {"session_id": 3, "chars": ""}, "Process running with session ID 3"),
        CATEGORY_META,
        None,
        (),
        id="write_stdin-poll-dropped",
    ),
    pytest.param(
        ToolCall("shell", {"command": ["apply_patch", PATCH]}, "Done!"),
        CATEGORY_CONSEQUENTIAL,
        "Patched src/cart.py (updated, +2 -1), tests/test_cart.py (added, +2), src/legacy_cart.py (deleted).",
        ("src/cart.py", "tests/test_cart.py", "src/legacy_cart.py"),
        id="shell-apply_patch",
    ),
    pytest.param(
        ToolCall(
            "TodoWrite",
            {
                "todos": [
                    {"content": "Read the cart code", "status": "completed", "activeForm": "Reading"},
                    {"content": "Reproduce the bug", "status": "completed", "activeForm": "Reproducing"},
                    {"content": "Fix the checkout total", "status": "in_progress", "activeForm": "Fixing"},
                ]
            },
            "Todos have been modified successfully.",
        ),
        CATEGORY_META,
        'Updated todo list: 2 done, 1 in progress: "Fix the checkout total".',
        (),
        id="todowrite",
    ),
    pytest.param(
        ToolCall(
            "update_plan",
            {"plan": [{"step": "Write tests", "status": "in_progress"}, {"step": "Ship", "status": "pending"}]},
            "Plan updated",
        ),
        CATEGORY_META,
        'Updated plan: 1 in progress: "Write tests", 1 to do.',
        (),
        id="update_plan",
    ),
    pytest.param(
        ToolCall("EnterPlanMode", {}, "Entered plan mode"), CATEGORY_META, "Entered plan mode.", (), id="enterplanmode"
    ),
    pytest.param(ToolCall("status", {}, "idle"), CATEGORY_META, None, (), id="status-dropped"),
    pytest.param(
        ToolCall("edit", {"filePath": f"{CWD}/sync/upsert.py", "oldString": "(?)", "newString": "(?) ON CONFLICT"}, ""),
        CATEGORY_CONSEQUENTIAL,
        'Edited sync/upsert.py: replaced "(?)" with "(?) ON CONFLICT".',
        ("sync/upsert.py",),
        id="edit-opencode-names",
    ),
    pytest.param(
        ToolCall("done", {"summary": "Fixed the checkout total"}, "ok"),
        CATEGORY_META,
        "Finished: 'Fixed the checkout total'.",
        (),
        id="done",
    ),
]


@pytest.mark.parametrize(("call", "category", "line", "files"), RULES)
def test_each_rule_of_the_table(call: ToolCall, category: str, line: str | None, files: tuple[str, ...]) -> None:
    record = collapse_tool_call(call, cwd=CWD)
    assert (record.category, record.line, record.files) == (category, line, files)
    assert record.name == call.name


@pytest.mark.parametrize(
    ("call", "line"),
    [
        (
            ToolCall("mcp__linear__create_issue", {"title": "Bug", "teamId": "ENG"}, "{...}"),
            "Called mcp tool linear/create_issue with keys: title, teamId.",
        ),
        (
            ToolCall("frobnicate", {"a": 1, "b": 2}, "boom: widget jammed", is_error=True),
            "Called tool frobnicate with keys: a, b (failed: boom: widget jammed).",
        ),
        (
            ToolCall("mcp__claude_ai_Notion__notion-search", {}, "[]"),
            "Called mcp tool claude_ai_Notion/notion-search with no input.",
        ),
    ],
)
def test_unknown_and_mcp_tools_get_an_honest_generic_line(call: ToolCall, line: str) -> None:
    record = collapse_tool_call(call)
    assert (record.category, record.line) == (CATEGORY_UNKNOWN, line)


def test_a_failing_command_keeps_its_exit_status_and_first_error_line() -> None:
    output = "Exit code 2\nnpm ERR! code ELIFECYCLE\nnpm ERR! errno 2\nsome trailing noise"
    record = collapse_tool_call(ToolCall("Bash", {"command": "npm test"}, output, is_error=True))
    assert record.line == "Ran `npm test` (exit 2): npm ERR! code ELIFECYCLE"
    assert record.is_error and record.command == "npm test"


def test_a_change_that_names_no_file_lists_none() -> None:
    """An empty file name broke the recap's file list (a tool naming its file under a key not known here)."""
    for name in ("write", "edit", "MultiEdit"):
        assert collapse_tool_call(ToolCall(name, {"content": "x"}, "ok"), cwd=CWD).files == ()


def test_a_failed_edit_modifies_no_file() -> None:
    call = ToolCall(
        "Edit",
        {"file_path": "src/app.py", "old_string": "x", "new_string": "y"},
        "<tool_use_error>String to replace not found in file.</tool_use_error>",
        is_error=True,
    )
    record = collapse_tool_call(call)
    assert (
        record.line
        == "Tried to edit src/app.py (failed: <tool_use_error>String to replace not found in file.</tool_use_error>)."
    )
    assert record.is_error and record.files == ()


@pytest.mark.parametrize(
    ("call", "line"),
    [
        (ToolCall("Bash", {"command": "make deploy"}), "Ran `make deploy` (no result: interrupted)."),
        (ToolCall("Write", {"file_path": "a.txt", "content": "x"}), "Tried to write a.txt (no result: interrupted)."),
        (
            ToolCall("mcp__db__query", {"sql": "select 1"}),
            "Called mcp tool db/query with keys: sql (no result: interrupted).",
        ),
    ],
)
def test_a_call_without_result_says_it_was_interrupted(call: ToolCall, line: str) -> None:
    record = collapse_tool_call(call)
    assert record.line == line and record.files == ()


def test_a_clipped_line_never_cuts_a_placeholder_in_half() -> None:
    """Messages arrive sanitized at ingest: collapsing keeps their placeholders whole when it clips."""
    edit = ToolCall(
        "Edit",
        {
            "file_path": ".env",
            "old_string": "X=1\n" * 15 + "GITHUB_TOKEN=ghp_FAKEqcvGtAtIfNGpak8uNyPAbtVhbOrzUQ04",
            "new_string": "",
        },
        "ok",
    )
    line = collapse_messages([sanitize_message(message(0, "assistant", tool_calls=(edit,)))])[0].text
    assert "ghp_" not in line and "[REDACTED:github" not in line.replace("[REDACTED:github-token]", "")


def test_collapsing_sanitized_messages_redacts_nothing_again() -> None:
    """Redaction happens once, at ingest (core/sanitize.py): tool lines, text and thinking show it as it was."""
    command = "AWS_ACCESS_KEY_ID=AKIAFAKE7Q2MZKD4RW6N aws s3 ls s3://shop-assets --recursive"
    call = ToolCall("Bash", {"command": command}, "ok")
    raw = message(0, "assistant", "Done.", tool_calls=(call,), thinking="The key is AKIAFAKE7Q2MZKD4RW6N.")
    (collapsed,) = collapse_messages([sanitize_message(raw)])
    assert collapsed.text == "Done.\nRan `AWS_ACCESS_KEY_ID=[REDACTED:aws-key] aws s3 ls s3://shop-assets --recursive` (exit 0)."
    assert collapsed.thinking == "The key is [REDACTED:aws-key]."
    assert collapsed.tools[0].command == "AWS_ACCESS_KEY_ID=[REDACTED:aws-key] aws s3 ls s3://shop-assets --recursive"


@pytest.mark.parametrize(
    ("arguments", "command"),
    [
        ({"command": ["bash", "-lc", "cd x && sed -n '1,200p' f"]}, "cd x && sed -n '1,200p' f"),
        ({"command": ["/bin/zsh", "-c", "ls"]}, "ls"),
        ({"command": ["rg", "-n", "TODO", "src dir"]}, "rg -n TODO 'src dir'"),
        ({"cmd": "npm test"}, "npm test"),
        ({"command": "git status"}, "git status"),
        ({}, ""),
        ({"command": 7}, ""),
    ],
)
def test_shell_command_unwraps_every_shape(arguments: dict, command: str) -> None:
    assert shell_command(arguments) == command


@pytest.mark.parametrize(
    ("command", "read_only"),
    [
        ("cat src/app.py", True),
        ("sed -n '1,80p' src/app.py", True),
        ("rg -n 'def total' src | head -20", True),
        ("git status && git diff --stat", True),
        ("git -C repo log --oneline -5", True),
        ("find . -name '*.pyc'", True),
        ("ls -la 2>/dev/null", True),
        ("rg -n 'def report|--format' ledger", True),
        ("cd src\nrm -rf build", False),
        ("sed -i 's/a/b/' src/app.py", False),
        ("find . -name '*.pyc' -delete", False),
        ("echo hi > notes.txt", False),
        ("cat <<'EOF' > f.txt\nx\nEOF", False),
        ("git commit -m 'fix total'", False),
        ("pytest -q", False),
        ("rm -rf build", False),
    ],
)
def test_read_only_shell_commands_are_observational(command: str, read_only: bool) -> None:
    assert is_read_only_command(command) is read_only


@pytest.mark.parametrize(
    ("output", "line"),
    [
        (
            "collected 2 items\n\nE       AssertionError: expected 3\nFAILED t.py::test",
            "E       AssertionError: expected 3",
        ),
        (
            "Traceback (most recent call last):\n  File \"a.py\", line 1\n    raise KeyError('x')\nKeyError: 'total'\n",
            "KeyError: 'total'",
        ),
        ("Cloning into 'x'...\nfatal: repository 'https://x' not found", "fatal: repository 'https://x' not found"),
        (
            "src/main.rs:3:5: error[E0308]: mismatched types\n  expected u32",
            "src/main.rs:3:5: error[E0308]: mismatched types",
        ),
        ("step one\nstep two\nstep three\n\n", "step three"),
        ("", ""),
    ],
)
def test_first_error_line_picks_the_telling_line(output: str, line: str) -> None:
    assert first_error_line(output) == line


def test_parse_patch_counts_lines_and_moves() -> None:
    patch = "*** Begin Patch\n*** Update File: a.py\n*** Move to: b.py\n@@\n-x\n+y\n*** End Patch"
    (moved,) = parse_patch(patch)
    assert (moved.path, moved.action, moved.moved_to, moved.added, moved.removed) == ("a.py", "moved", "b.py", 1, 1)


def test_tolerates_odd_inputs_without_crashing() -> None:
    for call in (
        ToolCall("Edit", {"file_path": None, "old_string": 3}, None),
        ToolCall("MultiEdit", {"edits": "not a list"}, "ok"),
        ToolCall("MultiEdit", {"edits": 3}, "ok"),
        ToolCall("AskUserQuestion", {"questions": 7}, "ok"),
        ToolCall("Read", {}, ""),
        ToolCall("TodoWrite", {"todos": None}, "ok"),
        ToolCall("AskUserQuestion", {"questions": [1, None]}, "", is_error=True),
        ToolCall("shell", "not a dict", "Exit code: 3"),  # type: ignore[arg-type]
        ToolCall("", {}, None),
    ):
        record = collapse_tool_call(call)
        assert record.line is None or record.line.strip()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=8,
)
TOOL_NAMES = [
    "Write",
    "Edit",
    "MultiEdit",
    "NotebookEdit",
    "apply_patch",
    "remember",
    "AskUserQuestion",
    "Task",
    "ExitPlanMode",
    "Read",
    "LS",
    "Glob",
    "Grep",
    "WebFetch",
    "web_search",
    "recall",
    "recall_detail",
    "Bash",
    "shell",
    "exec_command",
    "write_stdin",
    "TodoWrite",
    "update_plan",
    "status",
    "done",
    "mcp__a__b",
    "x",
]
KEYS = [
    "file_path",
    "content",
    "old_string",
    "new_string",
    "edits",
    "questions",
    "command",
    "cmd",
    "todos",
    "plan",
    "input",
    "query",
    "pattern",
    "path",
    "offset",
    "limit",
    "replace_all",
    "cell_number",
    "edit_mode",
]


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(TOOL_NAMES),
    arguments=st.dictionaries(st.sampled_from(KEYS), JSON, max_size=5),
    output=st.none() | st.text(max_size=200),
    is_error=st.booleans(),
)
def test_never_crashes_on_whatever_a_transcript_holds(
    name: str, arguments: dict, output: str | None, is_error: bool
) -> None:
    record = collapse_tool_call(ToolCall(name, arguments, output, is_error), cwd=CWD)
    assert record.line is None or (record.line.strip() and "\n" not in record.line)


def message(
    seq: int,
    role: str,
    text: str = "",
    *,
    tool_calls: tuple[ToolCall, ...] = (),
    thinking: str = "",
    speaker: str | None = None,
) -> Message:
    return Message(
        session_id="s1",
        seq=seq,
        message_id=f"m{seq}",
        role=role,
        text=text,
        tool_calls=tool_calls,
        thinking=thinking,
        speaker=speaker,
        cwd=CWD,
        timestamp=datetime(2025, 6, 1, 12, seq, tzinfo=timezone.utc),
    )


SESSION = [
    message(0, "user", "The checkout total ignores quantities. Can you fix it?"),
    message(
        1,
        "assistant",
        "Let me look at the cart code.",
        thinking="Probably sum() without qty.",
        tool_calls=(
            ToolCall("Read", {"file_path": f"{CWD}/src/cart.py"}, numbered(1, 40)),
            ToolCall(
                "Bash",
                {"command": "pytest -q tests/test_cart.py"},
                "Exit code 1\nE   AssertionError: expected 3",
                is_error=True,
            ),
        ),
    ),
    message(2, "user", ""),  # a bare tool-result carrier
    message(
        3,
        "assistant",
        "",
        tool_calls=(
            ToolCall(
                "Edit",
                {"file_path": f"{CWD}/src/cart.py", "old_string": "i.price", "new_string": "i.price * i.qty"},
                "ok",
            ),
            ToolCall("Edit", {"file_path": f"{CWD}/src/api.py", "old_string": "a", "new_string": "b"}, "ok"),
            ToolCall("Bash", {"command": "pytest -q"}, "3 passed"),
        ),
    ),
    message(4, "assistant", "", tool_calls=(ToolCall("status", {}, "idle"),)),
    message(5, "assistant", "", thinking="All green now."),
    message(6, "assistant", "Fixed: the total now multiplies by quantity. DB is postgres://db/shop."),
]


def test_messages_become_narrative_with_tool_lines_in_order() -> None:
    collapsed = collapse_messages(SESSION)
    assert [c.message_id for c in collapsed] == ["m0", "m1", "m3", "m5", "m6"]  # empty m2 and status-only m4 dropped
    assert collapsed[1].text == (
        "Let me look at the cart code.\n"
        "Read src/cart.py (40 lines).\n"
        "Ran `pytest -q tests/test_cart.py` (exit 1): E AssertionError: expected 3"
    )
    assert [c.speaker for c in collapsed] == ["User", "Assistant", "Assistant", "Assistant", "Assistant"]
    assert collapsed[1].timestamp == SESSION[1].timestamp and collapsed[1].seq == 1


def test_thinking_is_kept_apart() -> None:
    collapsed = collapse_messages([message(0, "assistant", "Done.", thinking="The key is in the vault, hide it.")])
    assert collapsed[0].text == "Done."
    assert collapsed[0].thinking == "The key is in the vault, hide it."
    thinking_only = collapse_messages([SESSION[5]])
    assert thinking_only[0].text == "" and thinking_only[0].thinking == "All green now."


def test_speakers_resolve_from_message_then_mapping_then_defaults() -> None:
    messages = [
        message(0, "user", "hi", speaker="Caroline"),
        message(1, "user", "hi"),
        message(2, "assistant", "hello"),
        message(3, "system", "note"),
    ]
    speakers = [c.speaker for c in collapse_messages(messages, speaker_names={"user": "Mel"})]
    assert speakers == ["Caroline", "Mel", "Assistant", "System"]


def test_an_unchanged_todo_list_is_dropped() -> None:
    todos = {"todos": [{"content": "Fix total", "status": "in_progress"}]}
    messages = [
        message(0, "assistant", "", tool_calls=(ToolCall("TodoWrite", todos, "ok"),)),
        message(1, "assistant", "Still on it.", tool_calls=(ToolCall("TodoWrite", todos, "ok"),)),
    ]
    first, second = collapse_messages(messages)
    assert first.text == 'Updated todo list: 1 in progress: "Fix total".'
    assert second.text == "Still on it." and second.tools[0].line is None


def test_summarize_tools_reports_tools_files_commands_and_failures() -> None:
    usage = summarize_tools(collapse_messages(SESSION))
    assert [(t.name, t.count) for t in usage.tools] == [("Read", 1), ("Bash", 2), ("Edit", 2)]
    assert usage.tools[1].notable_uses == (
        "Ran `pytest -q tests/test_cart.py` (exit 1): E AssertionError: expected 3",
        "Ran `pytest -q` (exit 0).",
    )
    assert usage.files_modified == ("src/cart.py", "src/api.py")
    assert usage.files_read == ("src/cart.py",)
    assert usage.commands == ("pytest -q tests/test_cart.py", "pytest -q")
    assert usage.failures == ("Ran `pytest -q tests/test_cart.py` (exit 1): E AssertionError: expected 3",)
    assert usage.call_count == 5
