#!/usr/bin/env bash
# Runs the ava suite and prints the plain closing line CI reads.
set -uo pipefail
cd "$(dirname "$0")/.."
# Proxies log every connection at info; tests read metrics instead.
export ZMESH_LOG=${ZMESH_LOG:-error}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
pnpm exec ava --tap "$@" | tee "$out" | node scripts/tap-summary.mjs
status=${PIPESTATUS[0]}
exit "$status"
