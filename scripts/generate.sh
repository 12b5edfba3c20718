#!/usr/bin/env bash
# The main job: a grid of images from the shipped model, on CPU. Extra flags go to
# `mmspec generate` (see --help).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$("$repo/scripts/venv.sh")
cd "$repo"
export HF_HUB_OFFLINE=1 PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
exec "$venv/bin/python" -m mmspec.cli generate "$@"
