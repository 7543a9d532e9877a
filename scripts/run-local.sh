#!/usr/bin/env bash
# Starts a whole QMQ-Go cluster on loopback: a meta server with an embedded
# etcd, two realtime broker groups (rt1, rt2) and a delay server (dl1), with
# all data under $QMQ_DATA (default ./data). It prints "ready", the endpoints
# and the console URL once every server answers; Ctrl-C stops everything.
# A second run reuses the data (and the admin token in $QMQ_DATA/admin-token).
#
# Ports (override with QMQ_PORT_BASE, default 20880): meta TCP base, meta HTTP
# base+100, etcd base+200/+201, realtime rt1 base+1 (HTTP base+11), rt2
# base+2 (HTTP base+12), delay base+3 (HTTP base+13), HTTP gateway
# (qmq-gateway) base+20.
#
# Small segments: the realtime brokers run with --segment-size
# $QMQ_SEGMENT_SIZE (default 16 MiB instead of the servers' 1 GiB, which each
# broker preallocates), so a fresh local cluster takes about 350 MB instead
# of over 2 GB: what remains is preallocated at 64 MiB a file (etcd's WAL, each
# realtime broker's action log, the delay server's WAL). "ready" prints the
# disk use of $QMQ_DATA.
#
# QMQ_SLAVES=1 also starts a slave for each group (rt1 base+4, rt2 base+5,
# dl1 base+6; HTTP +10 each): kill a master and its slave takes the group
# over; `bin/qmqctl switchover rt1` hands it over on purpose.
#
# QMQ_SECURE=1 starts the same cluster with TLS on every port (TCP, HTTP and
# the embedded etcd, which also requires client certificates) and --auth
# everywhere: a local CA and certificates are made in $QMQ_DATA/tls by
# scripts/certs (each broker's certificate proves its group), an application
# identity "demo" is created with a secret in $QMQ_DATA/tls/demo.credentials
# (mode 0600), and the lines a client needs are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
DATA=${QMQ_DATA:-./data}
BASE=${QMQ_PORT_BASE:-20880}
SEGMENT=${QMQ_SEGMENT_SIZE:-16777216}
mkdir -p "$DATA" bin
DATA=$(cd "$DATA" && pwd)

echo "building binaries into bin/ ..."
go build -o bin/ ./metaserver/cmd/qmq-metaserver ./metaserver/cmd/qmqctl ./realtime/cmd/qmq-realtime ./delay/cmd/qmq-delay \
  ./consumer/cmd/qmq-gateway

# The meta server generates the admin token into this file (mode 0600) on
# its first run; a file an older run left world-readable is made private.
TOKEN_FILE="$DATA/admin-token"
[ -f "$TOKEN_FILE" ] && chmod 600 "$TOKEN_FILE"

META="127.0.0.1:$BASE"
META_HTTP="127.0.0.1:$((BASE + 100))"
SCHEME=http
META_TLS=()
CURL=(curl -fs)
tls_for() { :; } # name: the TLS flags of a server (none unless QMQ_SECURE=1)
if [ "${QMQ_SECURE:-0}" = 1 ]; then
  TLS="$DATA/tls"
  echo "making certificates in $TLS ..."
  go run ./scripts/certs -dir "$TLS" -server 127.0.0.1,localhost -node admin:meta \
    -node broker:rt1 -node broker:rt2 -node broker:dl1 -client admin:admin -client app:demo >/dev/null
  SCHEME=https
  CURL=(curl -fs --cacert "$TLS/ca.pem")
  META_TLS=(--tls-ca "$TLS/ca.pem" --tls-cert "$TLS/admin-meta.pem" --tls-key "$TLS/admin-meta-key.pem" --auth)
  tls_for() { # kind-name of the certificate
    echo --tls-ca "$TLS/ca.pem" --tls-cert "$TLS/$1.pem" --tls-key "$TLS/$1-key.pem" --auth
  }
fi
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
    if "${CURL[@]}" "$2" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "${pids[-1]}" 2>/dev/null && [ "$1" = "$last" ]; then break; fi
    sleep 0.1
  done
  echo "run-local: $1 did not become ready; its log is $DATA/$1.log:" >&2
  tail -20 "$DATA/$1.log" >&2
  exit 1
}

last=metaserver
start metaserver bin/qmq-metaserver --addr "$META" --http-addr "$META_HTTP" --data-dir "$DATA/metaserver" \
  --etcd-listen "127.0.0.1:$((BASE + 200))" --etcd-peer "127.0.0.1:$((BASE + 201))" --admin-token-file "$TOKEN_FILE" --min-groups 2 \
  "${META_TLS[@]}"
wait_ready metaserver "$SCHEME://$META_HTTP/readyz"

for i in 1 2; do
  last=rt$i
  start rt$i bin/qmq-realtime --group rt$i --segment-size "$SEGMENT" --addr "127.0.0.1:$((BASE + i))" --http-addr "127.0.0.1:$((BASE + 10 + i))" \
    --data-dir "$DATA/rt$i" --meta "$META" $(tls_for broker-rt$i)
done
last=dl1
start dl1 bin/qmq-delay --group dl1 --addr "127.0.0.1:$((BASE + 3))" --http-addr "127.0.0.1:$((BASE + 13))" \
  --data-dir "$DATA/dl1" --meta "$META" $(tls_for broker-dl1)
for i in 1 2; do wait_ready rt$i "$SCHEME://127.0.0.1:$((BASE + 10 + i))/readyz"; done
wait_ready dl1 "$SCHEME://127.0.0.1:$((BASE + 13))/readyz"
SLAVES=""
if [ "${QMQ_SLAVES:-0}" = 1 ]; then
  for i in 1 2; do
    last=rt$i-s
    start rt$i-s bin/qmq-realtime --group rt$i --segment-size "$SEGMENT" --role slave --addr "127.0.0.1:$((BASE + 3 + i))" \
      --http-addr "127.0.0.1:$((BASE + 13 + i))" --data-dir "$DATA/rt$i-s" --meta "$META" $(tls_for broker-rt$i)
    wait_ready rt$i-s "$SCHEME://127.0.0.1:$((BASE + 13 + i))/healthz"
  done
  last=dl1-s
  start dl1-s bin/qmq-delay --group dl1 --role slave --addr "127.0.0.1:$((BASE + 6))" --http-addr "127.0.0.1:$((BASE + 16))" \
    --data-dir "$DATA/dl1-s" --meta "$META" $(tls_for broker-dl1)
  wait_ready dl1-s "$SCHEME://127.0.0.1:$((BASE + 16))/healthz"
  SLAVES="
  slaves        rt1 127.0.0.1:$((BASE + 4)), rt2 127.0.0.1:$((BASE + 5)), dl1 127.0.0.1:$((BASE + 6))"
fi

# Wait until the meta server lists all three groups.
for _ in $(seq 1 100); do
  n=$("${CURL[@]}" -H "Authorization: Bearer $(cat "$TOKEN_FILE")" "$SCHEME://$META_HTTP/api/v1/groups" 2>/dev/null | grep -o '"name"' | wc -l || true)
  [ "${n:-0}" -ge 3 ] && break
  sleep 0.1
done

CTL="bin/qmqctl --meta-http $META_HTTP"
EXAMPLE="go run ./scripts/example --meta $META"
SECURE_NOTE=""
if [ "${QMQ_SECURE:-0}" = 1 ]; then
  CTL="bin/qmqctl --meta-http $META_HTTP --tls-ca $TLS/ca.pem"
  # The application identity "demo": its secret in a file only you can read.
  if [ ! -s "$TLS/demo.secret" ]; then
    (umask 077; head -c 32 /dev/urandom | base64 | tr -d '/+=\n' > "$TLS/demo.secret")
  fi
  $CTL --token-file "$TOKEN_FILE" identity show demo >/dev/null 2>&1 ||
    $CTL --token-file "$TOKEN_FILE" identity add demo --kind app --secret-file "$TLS/demo.secret" \
      --publish '*' --consume '*' --consumer-group '*' >/dev/null
  (umask 077; printf 'demo:%s\n' "$(cat "$TLS/demo.secret")" > "$TLS/demo.credentials")
  EXAMPLE="go run ./scripts/example --meta $META --tls-ca $TLS/ca.pem --credentials-file $TLS/demo.credentials"
  SECURE_NOTE="
secure: TLS on every port, --auth everywhere (certificates and keys in $TLS)
  CA            $TLS/ca.pem (clients verify servers with it)
  app identity  demo: credentials in $TLS/demo.credentials (mode 0600), or the client
                certificate $TLS/app-demo.pem with its key app-demo-key.pem
  in Go         cfg, _ := tlsconfig.Client(tlsconfig.Files{CA: \"$TLS/ca.pem\"}, \"\")
                producer.New(producer.WithResolver(routes), producer.WithTLS(cfg),
                    producer.WithCredentialsFile(\"$TLS/demo.credentials\"))   (metaclient and consumer alike)"
fi

# The HTTP gateway (plain HTTP on loopback; in secure mode it reaches the
# cluster over TLS as the identity demo, or as the bearer credential a
# request carries).
GATEWAY="127.0.0.1:$((BASE + 20))"
GATEWAY_FLAGS=()
if [ "${QMQ_SECURE:-0}" = 1 ]; then
  GATEWAY_FLAGS=(--broker-tls-ca "$TLS/ca.pem" --credentials-file "$TLS/demo.credentials")
fi
last=gateway
start gateway bin/qmq-gateway --addr "$GATEWAY" --meta "$META" "${GATEWAY_FLAGS[@]}"
SECURE_CURL=("${CURL[@]}"); CURL=(curl -fs)
wait_ready gateway "http://$GATEWAY/readyz"
CURL=("${SECURE_CURL[@]}")

cat <<EOF2
ready: QMQ-Go local cluster (data in $DATA, logs in $DATA/*.log)
  meta server   $META (clients and brokers), admin API $META_HTTP
  console       $SCHEME://$META_HTTP/
  realtime      rt1 127.0.0.1:$((BASE + 1)), rt2 127.0.0.1:$((BASE + 2))
  delay         dl1 127.0.0.1:$((BASE + 3))$SLAVES
  HTTP gateway  http://$GATEWAY (API at http://$GATEWAY/openapi.json)
  disk use      $(du -sh "$DATA" | cut -f1) in $DATA (realtime segments of $((SEGMENT >> 20)) MiB: QMQ_SEGMENT_SIZE)
  admin token   in $TOKEN_FILE (mode 0600; qmqctl --token-file $TOKEN_FILE, or export QMQ_TOKEN=\$(cat $TOKEN_FILE))$SECURE_NOTE
try it:
  $EXAMPLE       # sends a message and a delayed one, receives both
  $CTL --token-file $TOKEN_FILE status
  curl -s -X POST http://$GATEWAY/v1/publish -d '{"messages":[{"subject":"demo","body":"hi"}]}'
  curl -s 'http://$GATEWAY/v1/subjects/demo/groups/g/messages?consumer=c1&start=earliest'
Ctrl-C stops everything.
EOF2
wait
