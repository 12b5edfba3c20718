#!/usr/bin/env bash
# The whole test suite, on a fresh machine too: creates the environment when missing.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$("$repo/scripts/venv.sh")
cd "$repo"
export HF_HUB_OFFLINE=1 PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
# one worker per core (pytest-xdist), an idle worker taking queued tests from the busy one
# (worksteal: the slowest tests do not end the run on one core); the tests set torch to one thread each
exec "$venv/bin/python" -m pytest -q -n auto --dist worksteal "$@"
