#!/usr/bin/env bash
# The main job: a grid of images from the shipped model, on CPU, one labelled row per
# class, and AR's wall time beside the method's. Extra flags go to `mmspec generate` (see
# --help); an existing outputs/grid.png is kept unless you pass --overwrite (or --out).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$("$repo/scripts/venv.sh")
cd "$repo"
export HF_HUB_OFFLINE=1 PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
exec "$venv/bin/python" -m mmspec.commands.cli generate "$@"
