#!/usr/bin/env bash
# The test command from README.md: installs the default embedding model if it is missing
# (the tests use the real model, never a stand-in), then runs the whole workspace test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --locked -p bib
./target/debug/bib model install use-m3

cargo test --locked --workspace "$@"
