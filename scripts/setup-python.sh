#!/usr/bin/env bash
# Makes (or reuses) the venv at .venv and installs the pinned Python tools of bindings-python.
# Idempotent: a second run with unchanged pins does nothing but check a stamp.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
reqs="$root/bindings-python/requirements-dev.txt"
stamp="$venv/.ratewindow-python-requirements"

python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup-python: Python 3.11 or later is needed (found $("$python" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
want="$(sha256sum "$reqs" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$reqs"
echo "$want" > "$stamp"
