"""The README's commands work as written: the fenced commands between its `tested-commands` markers run, in order,
for a new user whose home holds one Claude Code transcript (offline, in a temporary HOME)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKED = re.compile(r"<!-- tested-commands[^>]*-->(?P<body>.*?)<!-- /tested-commands -->", re.DOTALL)
FENCE = re.compile(r"```bash\n(?P<code>.*?)```", re.DOTALL)


def commands_in_marked_sections(readme: str) -> list[str]:
    """Each command line of the bash blocks inside the marked sections (comments stay: bash skips them)."""
    return [
        line.strip()
        for section in MARKED.finditer(readme)
        for block in FENCE.finditer(section.group("body"))
        for line in block.group("code").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_the_marked_sections_are_found() -> None:
    readme = "intro\n<!-- tested-commands: x -->\n```bash\necho a   # say a\n\n# only a comment\n```\n" \
             "<!-- /tested-commands -->\n```bash\necho untested\n```\n"
    assert commands_in_marked_sections(readme) == ["echo a   # say a"]


@pytest.mark.slow
def test_readme_commands_run_for_a_new_user(tmp_path: Path) -> None:
    home = tmp_path / "home"
    transcripts = home / ".claude" / "projects"
    shutil.copytree(ROOT / "samples" / "claude", transcripts)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONMEM_")} | {"HOME": str(home)}
    commands = commands_in_marked_sections((ROOT / "README.md").read_text(encoding="utf-8"))
    assert any(c.startswith(".venv/bin/sessionmem init") for c in commands)
    outputs = []
    for command in commands:
        command = command.replace(".venv/bin/", f"{Path(sys.executable).parent}/")
        done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        outputs.append(done.stdout)
    assert (home / ".config/sessionmem/config.toml").is_file()
    assert (home / ".local/share/sessionmem/sessionmem.search.duckdb").is_file()
    memories = next(out for command, out in zip(commands, outputs, strict=True) if "sessionmem memories" in command)
    assert "Deploys go out on Tuesdays only." in memories


def benchmark_commands(readme: str) -> list[list[str]]:
    """The script (or `-m` module) of each command in the README's Benchmarks section."""
    section = readme.split("## Benchmarks", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"^\.venv/bin/python (-m \S+|\S+\.py)", section, flags=re.MULTILINE)
    return [entry.split() for entry in found]


def test_benchmark_sections_commands_are_found() -> None:
    readme = "## Benchmarks\n```bash\n.venv/bin/python benchmarks/a.py --x 1\n.venv/bin/python -m benchmarks.b\n```\n## Next\n"
    assert benchmark_commands(readme) == [["benchmarks/a.py"], ["-m", "benchmarks.b"]]


@pytest.mark.parametrize("command", benchmark_commands((ROOT / "README.md").read_text(encoding="utf-8")), ids=" ".join)
def test_each_readme_benchmark_starts_as_written(command: list[str]) -> None:
    """Run from a folder other than the clone, as a script, so an import that only works with `-m` shows."""
    absolute = [str(ROOT / part) if part.endswith(".py") else part for part in command]
    cwd = ROOT if command[0] == "-m" else ROOT.parent
    done = subprocess.run([sys.executable, *absolute, "--help"], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "usage" in done.stdout, done.stderr[-2000:]
