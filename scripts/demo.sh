#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the CPU demo: async RL under lag, SAT against its baselines.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh 2> >(grep -v "^WARNING: Location" >&2)
exec .venv/bin/sat-ext demo "$@"
