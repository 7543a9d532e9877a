#!/usr/bin/env bash
# Runs every fuzz target of the project for a while each (default 60s):
#   scripts/fuzz.sh [fuzztime]        e.g. scripts/fuzz.sh 10m
# Fuzzing is not in the gate; findings land in testdata/fuzz/ of the package
# and then run as regular tests.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-60s}
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "== $pkg $f ($t)"
    go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg" 2>&1 | tail -3
  done
done
