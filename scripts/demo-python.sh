#!/usr/bin/env bash
# Runs the Python demo (a small API handler with per-user and global limits) on the installed package.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup-python.sh"
py="$root/.venv/bin/python"
if ! "$py" -c 'import ratewindow' 2>/dev/null; then
  VIRTUAL_ENV="$root/.venv" PATH="$root/.venv/bin:$PATH" \
    "$py" -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps "$root/bindings-python"
fi
exec "$py" "$root/examples/python/service.py" "$@"
