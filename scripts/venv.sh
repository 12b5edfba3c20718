#!/usr/bin/env bash
# Prints the path of a virtual environment holding mmspec and the exact stack of
# constraints.txt, creating it when missing. The environment is keyed by the hash of
# constraints.txt, so every clone on a machine shares one several-GB torch install;
# set MMSPEC_VENV to use another path.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
key=$(cat "$repo/constraints.txt" | sha256sum | cut -c1-12)
venv=${MMSPEC_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/mmspec/venv-$key}
if [ ! -x "$venv/bin/python" ]; then
    echo "creating $venv (first run: downloads the torch stack, a few minutes)" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip >&2
fi
# (re)install mmspec itself when its declared dependencies changed; editable, so this
# clone's sources are what runs
stamp="$venv/.mmspec-$(cat "$repo/pyproject.toml" "$repo/constraints.txt" | sha256sum | cut -c1-12)-$(echo "$repo" | sha256sum | cut -c1-8)"
if [ ! -f "$stamp" ]; then
    "$venv/bin/pip" install -q -c "$repo/constraints.txt" -e "$repo[dev]" >&2
    touch "$stamp"
fi
echo "$venv"
