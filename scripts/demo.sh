#!/usr/bin/env bash
# The main job from README.md, on the embedded default (SQLite file + local model, no server):
# build, install the default model (and e5-small, which `bib pack --hybrid` prefers), ingest
# the example wiki, ask it questions.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --locked --release -p bib
BIB=./target/release/bib
STORE=${BIB_DEMO_STORE:-.bib/demo.sqlite}

$BIB model install
$BIB ingest examples/wiki --store "$STORE"
$BIB ask --store "$STORE" "¿Cómo se restaura una copia de seguridad?"
$BIB ask --store "$STORE" --trim "How long does a rollback take?"
