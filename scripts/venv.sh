#!/usr/bin/env bash
# Prints the path of a virtual environment holding mmspec's dependencies (the [dev] extra
# included) at the exact stack of constraints.txt, creating it when missing. The
# environment is keyed by the hash of constraints.txt, so every clone on a machine shares
# one several-GB torch install; set MMSPEC_VENV to use another path.
#
# mmspec itself is not installed there: a shared environment holding one clone's editable
# install would run that clone's code from every other clone. Each script runs its own
# clone's sources instead, with PYTHONPATH set to the clone (scripts/generate.sh and
# scripts/test.sh do), and `pip install .` is what puts mmspec in an environment of one's own.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
key=$(cat "$repo/constraints.txt" | sha256sum | cut -c1-12)
venv=${MMSPEC_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/mmspec/venv-$key}
if [ ! -x "$venv/bin/python" ]; then
    echo "creating $venv (first run: downloads the torch stack, a few minutes)" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip >&2
fi
# (re)install the dependencies when the declared ones or their constraints changed
stamp="$venv/.mmspec-deps-$(cat "$repo/pyproject.toml" "$repo/constraints.txt" | sha256sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
    requirements=$(mktemp)
    trap 'rm -f "$requirements"' EXIT
    # pyproject's dependencies and its [dev] extra, with the extras it names (mmspec[demo,...]) expanded
    "$venv/bin/python" - "$repo/pyproject.toml" > "$requirements" <<'EOF'
import re
import sys
import tomllib

project = tomllib.load(open(sys.argv[1], "rb"))["project"]
extras = project.get("optional-dependencies", {})


def expand(requirements, seen):
    for requirement in requirements:
        named = re.fullmatch(r"\s*mmspec\[([^\]]+)\]\s*", requirement)
        if named is None:
            yield requirement
            continue
        for extra in (e.strip() for e in named.group(1).split(",")):
            if extra not in seen:
                seen.add(extra)
                yield from expand(extras[extra], seen)


print("\n".join(expand([*project["dependencies"], *extras.get("dev", [])], {"dev"})))
EOF
    "$venv/bin/pip" install -q -c "$repo/constraints.txt" -r "$requirements" >&2
    touch "$stamp"
fi
echo "$venv"
