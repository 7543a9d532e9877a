#!/usr/bin/env bash
# The gate: what CI runs on every submission, and what must pass before a
# commit lands on main. Keep it under 15 minutes on 2 cores.
#
#   scripts/test.sh            the whole gate
#   QMQ_TEST_PKGS=./pkg/... scripts/test.sh   a subset (local use)
#
# 1. gofmt: no file may need formatting.
# 2. go vet ./...
# 3. go build ./...
# 4. go test -short -race on the quick packages (then their TestTiming*
#    tests without -race), go test -short (no race) on the heavy ones (HEAVY below: long crash and cluster tests whose race
#    builds would not fit the budget). Long suites (full crash tests, long
#    fuzzing, benchmarks) are not here: see scripts/crash-*.sh, scripts/fuzz.sh
#    and scripts/bench.sh.
#
# producer/outbox's tests start their own PostgreSQL and MariaDB servers from
# the machine's binaries (Debian's postgresql and mariadb-server, which
# .ci/run installs) and skip with a message when those are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:$(go env GOPATH 2>/dev/null)/bin"

# Packages tested without -race (regular expression over import paths).
HEAVY='/(delay/store|metaserver|scripts/netlab/partition)($|/)'

step() { printf '\n== %s\n' "$*"; }

for db in postgresql:'/usr/lib/postgresql/*/bin/postgres' mariadb-server:/usr/sbin/mariadbd; do
  compgen -G "${db#*:}" >/dev/null || echo "note: ${db%%:*} is not installed; producer/outbox skips its tests on it"
done

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v '^scripts/peers/') 2>&1 || true)
if [ -n "$unformatted" ]; then
  echo "these files need gofmt -w:"
  echo "$unformatted"
  exit 1
fi

step "go vet"
go vet ./...

step "go build"
go build ./...

pkgs=$(go list ${QMQ_TEST_PKGS:-./...})
quick=$(echo "$pkgs" | grep -Ev "$HEAVY" || true)
heavy=$(echo "$pkgs" | grep -E "$HEAVY" || true)

status=0
if [ -n "$quick" ]; then
  step "go test -race -short (quick packages)"
  go test -race -short -count=1 -timeout 10m $quick || status=1
  # Tests named TestTiming* measure time and skip under the race detector;
  # they run here without it.
  timing=$(grep -rl --include='*_test.go' '^func TestTiming' . | xargs -r -n1 dirname | sort -u | sed 's|^\.|github.com/qmq-go/qmq|')
  timing=$(comm -12 <(echo "$timing" | sort) <(echo "$quick" | sort))
  if [ -n "$timing" ]; then
    step "go test -short -run TestTiming (no race)"
    go test -short -count=1 -timeout 5m -run '^TestTiming' $timing || status=1
  fi
fi
if [ -n "$heavy" ]; then
  step "go test -short (heavy packages)"
  go test -short -count=1 -timeout 12m $heavy || status=1
fi
if [ $status -ne 0 ]; then
  echo "gate: FAILED"
  exit 1
fi
echo "gate: passed"
