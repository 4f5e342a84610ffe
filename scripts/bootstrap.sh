#!/usr/bin/env bash
# Idempotent developer/CI set-up: a virtualenv in .venv with laminar (editable) and its dev extras.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${LAMINAR_VENV:-$root/.venv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -e ".[dev]"
