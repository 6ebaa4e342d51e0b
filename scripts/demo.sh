#!/usr/bin/env bash
# The README's first command: set up, then index the bundled sample sessions with the offline defaults
# (no API key, no network) and show what was built.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/sessionmem index --config samples/sessionmem.toml
echo
.venv/bin/sessionmem status --config samples/sessionmem.toml
echo
echo '$ sessionmem search "why did checkout fail with a gift card" --limit 2'
.venv/bin/sessionmem search "why did checkout fail with a gift card" --limit 2 --config samples/sessionmem.toml
