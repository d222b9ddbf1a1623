#!/usr/bin/env bash
# Create (or reuse) the Python virtualenv the server end-to-end tests drive: the official MCP
# Python SDK (PyPI package `mcp`) as a real client of `bib mcp` and `bib serve`.
#
#   scripts/python-test-env.sh            # creates .venv-test/ at the repository root
#   BIB_TEST_VENV=/path scripts/python-test-env.sh
#
# Idempotent: an existing venv that already imports `mcp` is left as it is.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${BIB_TEST_VENV:-$root/.venv-test}"
python="${PYTHON:-python3}"
# Pinned to the version the tests were written against (the streamable HTTP client needs >= 1.8).
spec="${BIB_MCP_SPEC:-mcp==2.3.0}"

if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import mcp.client.stdio, mcp.client.streamable_http' 2>/dev/null; then
    echo "python test env ready: $venv ($("$venv/bin/python" -c 'import importlib.metadata as m; print("mcp", m.version("mcp"))'))"
    exit 0
fi
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "$spec"
"$venv/bin/python" -c 'import mcp.client.stdio, mcp.client.streamable_http'
echo "python test env ready: $venv ($("$venv/bin/python" -c 'import importlib.metadata as m; print("mcp", m.version("mcp"))'))"
