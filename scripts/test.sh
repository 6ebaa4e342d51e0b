#!/usr/bin/env bash
# The README's second command: set up (or reuse) the environment and run the whole test suite, slow tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
