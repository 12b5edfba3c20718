#!/usr/bin/env bash
# The main job: a grid of images from the shipped model, on CPU, one labelled row per
# class, and AR's wall time beside the method's. Extra flags go to `mmspec generate` (see
# --help); an existing outputs/grid.png is kept unless you pass --overwrite (or --out).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
exec scripts/mmspec generate "$@"
