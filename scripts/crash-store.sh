#!/usr/bin/env bash
# Full crash test of the realtime store: a child process appends with sync
# flush and is killed with SIGKILL at random moments (QMQ_CRASH_KILLS times,
# default 25); after each kill the store is reopened and every acknowledged
# message must be readable, in order, with a valid CRC, and the consume logs
# must agree with the message log. The gate runs a short variant (5 kills).
#
#   scripts/crash-store.sh            # 25 kills
#   QMQ_CRASH_KILLS=100 scripts/crash-store.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export QMQ_CRASH_KILLS="${QMQ_CRASH_KILLS:-25}"
exec go test -count=1 -timeout 30m -run '^TestCrashRecovery$' -v ./realtime/store/
