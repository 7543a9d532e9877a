#!/usr/bin/env bash
# Starts a whole QMQ-Go cluster on loopback: a meta server with an embedded
# etcd, two realtime broker groups (rt1, rt2) and a delay server (dl1), with
# all data under $QMQ_DATA (default ./data). It prints "ready", the endpoints
# and the console URL once every server answers; Ctrl-C stops everything.
# A second run reuses the data (and the admin token in $QMQ_DATA/admin-token).
#
# Ports (override with QMQ_PORT_BASE, default 20880): meta TCP base, meta HTTP
# base+100, etcd base+200/+201, realtime rt1 base+1 (HTTP base+11), rt2
# base+2 (HTTP base+12), delay base+3 (HTTP base+13).
#
# QMQ_SLAVES=1 also starts a slave for each group (rt1 base+4, rt2 base+5,
# dl1 base+6; HTTP +10 each): kill a master and its slave takes the group
# over; `bin/qmqctl switchover rt1` hands it over on purpose.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
DATA=${QMQ_DATA:-./data}
BASE=${QMQ_PORT_BASE:-20880}
mkdir -p "$DATA" bin
DATA=$(cd "$DATA" && pwd)

echo "building binaries into bin/ ..."
go build -o bin/ ./metaserver/cmd/qmq-metaserver ./metaserver/cmd/qmqctl ./realtime/cmd/qmq-realtime ./delay/cmd/qmq-delay

# The meta server generates the admin token into this file (mode 0600) on
# its first run; a file an older run left world-readable is made private.
TOKEN_FILE="$DATA/admin-token"
[ -f "$TOKEN_FILE" ] && chmod 600 "$TOKEN_FILE"

META="127.0.0.1:$BASE"
META_HTTP="127.0.0.1:$((BASE + 100))"
pids=()
stop() {
  trap - INT TERM EXIT
  echo
  echo "stopping ..."
  for ((i=${#pids[@]}-1; i>=0; i--)); do
    kill -TERM "${pids[$i]}" 2>/dev/null || true
    wait "${pids[$i]}" 2>/dev/null || true
  done
  echo "stopped"
}
trap stop INT TERM EXIT

start() { # name, then the command
  local name=$1; shift
  "$@" >>"$DATA/$name.log" 2>&1 &
  pids+=($!)
}

wait_ready() { # name, url
  for _ in $(seq 1 300); do
    if curl -fs "$2" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "${pids[-1]}" 2>/dev/null && [ "$1" = "$last" ]; then break; fi
    sleep 0.1
  done
  echo "run-local: $1 did not become ready; its log is $DATA/$1.log:" >&2
  tail -20 "$DATA/$1.log" >&2
  exit 1
}

last=metaserver
start metaserver bin/qmq-metaserver --addr "$META" --http-addr "$META_HTTP" --data-dir "$DATA/metaserver" \
  --etcd-listen "127.0.0.1:$((BASE + 200))" --etcd-peer "127.0.0.1:$((BASE + 201))" --admin-token-file "$TOKEN_FILE" --min-groups 2
wait_ready metaserver "http://$META_HTTP/readyz"

for i in 1 2; do
  last=rt$i
  start rt$i bin/qmq-realtime --group rt$i --addr "127.0.0.1:$((BASE + i))" --http-addr "127.0.0.1:$((BASE + 10 + i))" \
    --data-dir "$DATA/rt$i" --meta "$META"
done
last=dl1
start dl1 bin/qmq-delay --group dl1 --addr "127.0.0.1:$((BASE + 3))" --http-addr "127.0.0.1:$((BASE + 13))" \
  --data-dir "$DATA/dl1" --meta "$META"
for i in 1 2; do wait_ready rt$i "http://127.0.0.1:$((BASE + 10 + i))/readyz"; done
wait_ready dl1 "http://127.0.0.1:$((BASE + 13))/readyz"
SLAVES=""
if [ "${QMQ_SLAVES:-0}" = 1 ]; then
  for i in 1 2; do
    last=rt$i-s
    start rt$i-s bin/qmq-realtime --group rt$i --role slave --addr "127.0.0.1:$((BASE + 3 + i))" \
      --http-addr "127.0.0.1:$((BASE + 13 + i))" --data-dir "$DATA/rt$i-s" --meta "$META"
    wait_ready rt$i-s "http://127.0.0.1:$((BASE + 13 + i))/healthz"
  done
  last=dl1-s
  start dl1-s bin/qmq-delay --group dl1 --role slave --addr "127.0.0.1:$((BASE + 6))" --http-addr "127.0.0.1:$((BASE + 16))" \
    --data-dir "$DATA/dl1-s" --meta "$META"
  wait_ready dl1-s "http://127.0.0.1:$((BASE + 16))/healthz"
  SLAVES="
  slaves        rt1 127.0.0.1:$((BASE + 4)), rt2 127.0.0.1:$((BASE + 5)), dl1 127.0.0.1:$((BASE + 6))"
fi

# Wait until the meta server lists all three groups.
for _ in $(seq 1 100); do
  n=$(curl -fs "http://$META_HTTP/api/v1/groups" 2>/dev/null | grep -o '"name"' | wc -l || true)
  [ "${n:-0}" -ge 3 ] && break
  sleep 0.1
done

cat <<EOF2
ready: QMQ-Go local cluster (data in $DATA, logs in $DATA/*.log)
  meta server   $META (clients and brokers), admin API $META_HTTP
  console       http://$META_HTTP/
  realtime      rt1 127.0.0.1:$((BASE + 1)), rt2 127.0.0.1:$((BASE + 2))
  delay         dl1 127.0.0.1:$((BASE + 3))$SLAVES
  admin token   in $TOKEN_FILE (mode 0600; qmqctl --token-file $TOKEN_FILE, or export QMQ_TOKEN=\$(cat $TOKEN_FILE))
try it:
  go run ./scripts/example --meta $META       # sends a message and a delayed one, receives both
  bin/qmqctl --meta $META_HTTP status
Ctrl-C stops everything.
EOF2
wait
