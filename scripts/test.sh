#!/usr/bin/env bash
# Set up (scripts/setup.sh), lint (ruff, configured in pyproject.toml) and run the whole test suite. Exit code 5
# (no tests collected) is a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh 2> >(grep -v "^WARNING: Location" >&2) || exit 1
.venv/bin/python -m ruff check . || exit 1
.venv/bin/python -m ruff format --check . || exit 1
.venv/bin/python -m pytest -q "$@"
rc=$?
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit "$rc"
