#!/usr/bin/env bash
# A QMQ-Go gateway round trip with curl (and python3 only to read JSON):
# publish (raw body with headers, a raw batch of lines, JSON text, delayed),
# pull, ack, nack and see the retry. Usage: roundtrip.sh BASE_URL SUBJECT. Prints "ok".
set -euo pipefail
[ -z "${QMQ_TRACE:-}" ] || { PS4='+ $(date +%T.%N) '; set -x; }
BASE=$1 SUBJECT=$2 GROUP=curl CONSUMER=curl-consumer-1
PULLS="$BASE/v1/subjects/$SUBJECT/groups/$GROUP"
fail() { echo "FAIL: $*" >&2; exit 1; }
# The interpreter itself, not a version manager's shim (pyenv's costs a second a call on a busy machine).
PY=$(python3 -c 'import sys; print(sys.executable)')
field() { "$PY" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# One message as a raw body, described by headers.
out=$(curl -sS -f -X POST "$BASE/v1/subjects/$SUBJECT/publish" -H 'QMQ-Tags: t1,t2' \
  -H 'QMQ-Properties: lang=shell' --data-binary 'hello')
HELLO=$(echo "$out" | field 'd["results"][0]["id"]')
# A raw batch: one body a line, as nsqd's /mpub takes them; the headers describe each.
out=$(curl -sS -f -X POST "$BASE/v1/subjects/$SUBJECT/publish" -H 'Content-Type: application/vnd.qmq.mpub' \
  -H 'QMQ-Tags: batch' --data-binary $'line-1\nline-2\n')
[ "$(echo "$out" | field '",".join(r["status"] for r in d["results"])')" = "ok,ok" ] || fail "raw batch: $out"
LINE1=$(echo "$out" | field 'd["results"][0]["id"]')
LINE2=$(echo "$out" | field 'd["results"][1]["id"]')
# A batch: one text, one delayed (its delay counts from when the gateway got it: after START).
START=$(date +%s%N)
out=$(curl -sS -f -X POST "$BASE/v1/publish" -H 'Content-Type: application/json' \
  -d "{\"messages\":[{\"subject\":\"$SUBJECT\",\"body\":\"again\"},{\"subject\":\"$SUBJECT\",\"body\":\"later\",\"delay\":\"1500ms\"}]}")
[ "$(echo "$out" | field '",".join(r["status"] for r in d["results"])')" = "ok,ok" ] || fail "publish: $out"
AGAIN=$(echo "$out" | field 'd["results"][0]["id"]')
LATER=$(echo "$out" | field 'd["results"][1]["id"]')

declare -A seen attempts
pull_until() { # ids…
  local end=$((SECONDS + 30)) out id
  while [ $SECONDS -lt $end ]; do
    local missing=0
    for id in "$@"; do [ -n "${seen[$id]:-}" ] || missing=1; done
    [ $missing = 0 ] && return 0
    out=$(curl -sS -f "$PULLS/messages?consumer=$CONSUMER&max=10&wait=2s&start=earliest")
    while read -r id body n; do
      [ -n "$id" ] || continue
      seen[$id]=$(date +%s%N); attempts[$id]=$n
      [ "$id" != "$HELLO" ] || [ "$body" = hello ] || fail "hello came back as $body"
      [ "$id" != "$LINE2" ] || [ "$body" = line-2 ] || fail "line-2 came back as $body"
    done < <(echo "$out" | "$PY" -c 'import json,sys
for m in json.load(sys.stdin)["messages"]: print(m["id"], m["body"], m["attempts"])')
  done
  fail "pulled ${!seen[*]}, want $*"
}

pull_until "$HELLO" "$AGAIN" "$LINE1" "$LINE2"
out=$(curl -sS -f -X POST "$PULLS/ack" -d "{\"consumer\":\"$CONSUMER\",\"ids\":[\"$HELLO\",\"$LINE1\",\"$LINE2\"]}")
[ "$(echo "$out" | field 'd["done"]')" = 3 ] || fail "ack: $out"
out=$(curl -sS -f -X POST "$PULLS/nack" -d "{\"consumer\":\"$CONSUMER\",\"ids\":[\"$AGAIN\"],\"retryAfter\":\"1s\"}")
[ "$(echo "$out" | field 'd["done"]')" = 1 ] || fail "nack: $out"
unset "seen[$AGAIN]"
pull_until "$AGAIN" "$LATER" # the delayed one may have come already
[ "${attempts[$AGAIN]}" -ge 1 ] || fail "the retry has attempts ${attempts[$AGAIN]}"
[ $(( (${seen[$LATER]} - START) / 1000000 )) -ge 1500 ] || fail "the delayed message came before its time"
curl -sS -f -X POST "$PULLS/ack" -d "{\"consumer\":\"$CONSUMER\",\"ids\":[\"$AGAIN\",\"$LATER\"]}" >/dev/null

# Acking again: a problem document naming the unknown id.
tmp=$(mktemp)
code=$(curl -sS -o "$tmp" -w '%{http_code} %{content_type}' -X POST "$PULLS/ack" \
  -d "{\"consumer\":\"$CONSUMER\",\"ids\":[\"$HELLO\"]}")
[ "$code" = "404 application/problem+json" ] || fail "second ack answered $code"
grep -q "$HELLO" "$tmp" || fail "the problem does not name the unknown id: $(cat "$tmp")"
rm -f "$tmp"
echo ok
