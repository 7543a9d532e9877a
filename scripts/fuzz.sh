#!/usr/bin/env bash
# Runs every fuzz target of the project for a while each (default 60s):
#   scripts/fuzz.sh [fuzztime] [package pattern]   e.g. scripts/fuzz.sh 10m ./realtime/...
# Fuzzing is not in the gate; findings land in testdata/fuzz/ of the package
# and then run as regular tests. Every target runs even after one fails; the
# failures are listed at the end (and the script exits 1).
set -uo pipefail
cd "$(dirname "$0")/.."
t=${1:-60s}
failed=()
for pkg in $(go list "${2:-./...}"); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "== $pkg $f ($t)"
    if ! out=$(go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg" 2>&1); then
      printf '%s\n' "$out" | grep -v '^fuzz: elapsed' | tail -40
      failed+=("$pkg $f")
    else
      printf '%s\n' "$out" | tail -1
    fi
  done
done
if [ ${#failed[@]} -gt 0 ]; then
  printf '\nfuzz targets that failed:\n'
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
