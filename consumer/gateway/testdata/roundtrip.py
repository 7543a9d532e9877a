#!/usr/bin/env python3
"""A QMQ-Go gateway round trip with Python's standard library only:
publish (text, base64, delayed, a raw binary batch), pull, ack, nack and
see the retry.
Usage: roundtrip.py BASE_URL SUBJECT. Prints "ok" and exits 0 on success."""
import base64
import json
import struct
import sys
import time
import urllib.error
import urllib.request

BASE, SUBJECT = sys.argv[1], sys.argv[2]
GROUP, CONSUMER = "py", "py-consumer-1"


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers.get("Content-Type"), json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), json.loads(e.read())


def must(cond, what):
    if not cond:
        print("FAIL:", what, file=sys.stderr)
        sys.exit(1)


sent_at = time.time()  # the delay counts from when the gateway got the request: later
status, _, res = call("POST", "/v1/publish", {"messages": [
    {"subject": SUBJECT, "body": "hello", "tags": ["t1"], "properties": {"lang": "python"}},
    {"subject": SUBJECT, "body": base64.b64encode(b"\xff\x00binary").decode(), "bodyEncoding": "base64"},
    {"subject": SUBJECT, "body": "later", "delay": "1500ms"},
]})
must(status == 200, f"publish answered {status} {res}")
must([r["status"] for r in res["results"]] == ["ok"] * 3, f"publish statuses {res}")
hello_id, bin_id, later_id = (r["id"] for r in res["results"])

# A raw batch in nsqd's binary form: a 4-byte count, then each body after its 4-byte length.
raw_bodies = [b"\xff\x00raw", b"two\nlines", b""]
batch = struct.pack(">I", len(raw_bodies)) + b"".join(struct.pack(">I", len(b)) + b for b in raw_bodies)
req = urllib.request.Request(f"{BASE}/v1/subjects/{SUBJECT}/publish", data=batch, method="POST",
                             headers={"Content-Type": "application/vnd.qmq.mpub-binary", "QMQ-Tags": "raw"})
with urllib.request.urlopen(req, timeout=30) as resp:
    status, res = resp.status, json.loads(resp.read())
must(status == 200 and [r["status"] for r in res["results"]] == ["ok"] * 3, f"raw batch answered {status} {res}")
raw_ids = [r["id"] for r in res["results"]]

pulls = f"/v1/subjects/{SUBJECT}/groups/{GROUP}"


def pull_until(want, deadline_s=30):
    got = {}
    end = time.time() + deadline_s
    while not want <= set(got) and time.time() < end:
        status, _, res = call("GET", f"{pulls}/messages?consumer={CONSUMER}&max=10&wait=2s&start=earliest")
        must(status == 200, f"pull answered {status} {res}")
        for m in res["messages"]:
            got[m["id"]] = (m, time.time())
    must(want <= set(got), f"pulled {sorted(got)}, want {sorted(want)}")
    return got


got = pull_until({hello_id, bin_id} | set(raw_ids))
must(got[hello_id][0]["body"] == "hello" and got[hello_id][0]["properties"] == {"lang": "python"}, f"hello {got[hello_id]}")


def body(m):
    return base64.b64decode(m["body"]) if m["bodyEncoding"] == "base64" else m["body"].encode()


must(body(got[bin_id][0]) == b"\xff\x00binary", f"binary {got[bin_id]}")
for rid, want in zip(raw_ids, raw_bodies):
    m = got[rid][0]
    must(body(m) == want and m["tags"] == ["raw"], f"raw batch message {m}, want body {want!r}")
status, _, res = call("POST", f"{pulls}/ack", {"consumer": CONSUMER, "ids": raw_ids})
must(status == 200 and res["done"] == 3, f"ack of the raw batch answered {status} {res}")
seen_later = got.get(later_id)

status, _, res = call("POST", f"{pulls}/ack", {"consumer": CONSUMER, "ids": [hello_id]})
must(status == 200 and res["done"] == 1, f"ack answered {status} {res}")
status, _, res = call("POST", f"{pulls}/nack", {"consumer": CONSUMER, "ids": [bin_id], "retryAfter": "1s"})
must(status == 200 and res["done"] == 1, f"nack answered {status} {res}")

got = pull_until({bin_id} if seen_later else {bin_id, later_id})
seen_later = seen_later or got[later_id]
must(got[bin_id][0]["attempts"] >= 1, f"retry has attempts {got[bin_id][0]['attempts']}")
must(seen_later[1] >= sent_at + 1.5, "the delayed message came before its time")
status, _, res = call("POST", f"{pulls}/ack", {"consumer": CONSUMER, "ids": [bin_id, later_id]})
must(status == 200 and res["done"] == 2, f"ack answered {status} {res}")

status, ctype, res = call("POST", f"{pulls}/ack", {"consumer": CONSUMER, "ids": [hello_id]})
must(status == 404 and ctype == "application/problem+json" and res["unknown"] == [hello_id], f"second ack {status} {res}")
print("ok")
