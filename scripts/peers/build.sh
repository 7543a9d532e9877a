#!/usr/bin/env bash
# Builds the peer systems the benchmarks compare against into scripts/peers/bin:
# nsqd v1.3.0 with bench_writer/bench_reader, nats-server v2.15.2 and natscli
# v0.5.0 (`nats bench`), all from the Go module proxy through this separate
# module (go.mod pins them; nsq needs the go-svc replace its own go.mod has),
# and delaypeer, our delayed-delivery tool for nsqd DPUB and NATS schedules.
# Skips the peers already built.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$PATH:/usr/local/go/bin"
mkdir -p bin
# delaypeer is ours: always rebuilt (the Go build cache keeps that quick).
go build -o bin/ ./delaypeer
want=(nsqd bench_writer bench_reader nats-server nats)
missing=0
for b in "${want[@]}"; do [ -x "bin/$b" ] || missing=1; done
[ $missing -eq 0 ] && exit 0
echo "peers: building ${want[*]} into scripts/peers/bin" >&2
go build -o bin/ \
  github.com/nsqio/nsq/apps/nsqd \
  github.com/nsqio/nsq/bench/bench_writer \
  github.com/nsqio/nsq/bench/bench_reader \
  github.com/nats-io/nats-server/v2 \
  github.com/nats-io/natscli/nats
