#!/usr/bin/env bash
# Create (or reuse) .venv and install sessionmem with its test extras. Idempotent: reinstalls only when
# pyproject.toml changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."

pick_python() {
  for candidate in "${PYTHON:-}" python3.11 python3 python; do
    if [ -n "$candidate" ] && command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 14) else 1)'; then
      echo "$candidate"
      return
    fi
  done
  echo "sessionmem needs Python 3.11 to 3.13 (set PYTHON=/path/to/python3.11)" >&2
  exit 1
}

if [ ! -x .venv/bin/python ]; then
  "$(pick_python)" -m venv .venv
fi
stamp=.venv/.sessionmem-installed
wanted=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test]"
  echo "$wanted" > "$stamp"
fi
