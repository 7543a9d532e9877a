#!/usr/bin/env bash
# Runs benchmark suites side by side with their peers and prints one line per
# figure: "metric <name> <value> <unit>".
#
#   scripts/bench.sh SUITE...      e.g. scripts/bench.sh rpc store
#
# Suites that compare against nsqd or NATS build the peers first
# (scripts/peers/build.sh, cached under scripts/peers/bin). Scratch data goes
# under $QMQ_BENCH_DIR (default: a temporary directory on the machine's disk).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  echo "usage: scripts/bench.sh SUITE..." >&2
  exit 2
fi
mkdir -p bin
go build -o bin/ ./scripts/qmqbench ./realtime/cmd/qmq-realtime ./delay/cmd/qmq-delay ./consumer/cmd/qmq-gateway
peers=""
for s in "$@"; do
  case "$s" in
    produce|consume|sync|delay|gateway) peers=yes ;;
  esac
done
if [ -n "$peers" ] && [ -x scripts/peers/build.sh ]; then
  scripts/peers/build.sh >&2
fi
args=()
[ -n "${QMQ_BENCH_DIR:-}" ] && mkdir -p "$QMQ_BENCH_DIR" && args+=(-dir "$QMQ_BENCH_DIR")
exec bin/qmqbench "${args[@]}" -bin "$PWD/bin" -peers "$PWD/scripts/peers/bin" "$@"
