// A QMQ-Go gateway round trip with Node's built-in fetch only: publish
// (text, base64, delayed, a raw batch of lines), pull, ack, nack and see the retry.
// Usage: node roundtrip.mjs BASE_URL SUBJECT. Prints "ok" and exits 0 on success.
const [base, subject] = process.argv.slice(2);
const group = "node", consumer = "node-consumer-1";

async function call(method, path, body) {
  const res = await fetch(base + path, {
    method,
    headers: { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, type: res.headers.get("content-type"), json: await res.json() };
}

function must(cond, what) {
  if (!cond) {
    console.error("FAIL:", what);
    process.exit(1);
  }
}

const sentAt = Date.now(); // the delay counts from when the gateway got the request: later
let r = await call("POST", "/v1/publish", {
  messages: [
    { subject, body: "hello", tags: ["t1"], properties: { lang: "node" } },
    { subject, body: Buffer.from([255, 0, 98, 105, 110]).toString("base64"), bodyEncoding: "base64" },
    { subject, body: "later", delay: "1500ms" },
  ],
});
must(r.status === 200, `publish answered ${r.status} ${JSON.stringify(r.json)}`);
must(r.json.results.every((x) => x.status === "ok"), `publish statuses ${JSON.stringify(r.json)}`);
const [helloID, binID, laterID] = r.json.results.map((x) => x.id);
// A raw batch: one body a line, as nsqd's /mpub takes them; the headers describe each.
const rawRes = await fetch(`${base}/v1/subjects/${subject}/publish`, {
  method: "POST",
  headers: { "Content-Type": "application/vnd.qmq.mpub", "QMQ-Properties": "lang=node", Prefer: "return=minimal" },
  body: "line one\nline two",
});
const rawJSON = await rawRes.json();
must(rawRes.status === 200 && rawJSON.stored === 2, `raw batch answered ${rawRes.status} ${JSON.stringify(rawJSON)}`);
const pulls = `/v1/subjects/${subject}/groups/${group}`;

async function pullUntil(want) {
  const got = new Map();
  const end = Date.now() + 30000;
  while (!want.every((id) => got.has(id)) && Date.now() < end) {
    const p = await call("GET", `${pulls}/messages?consumer=${consumer}&max=10&wait=2s&start=earliest`);
    must(p.status === 200, `pull answered ${p.status} ${JSON.stringify(p.json)}`);
    for (const m of p.json.messages) got.set(m.id, { m, at: Date.now() });
  }
  must(want.every((id) => got.has(id)), `pulled ${[...got.keys()]}, want ${want}`);
  return got;
}

let got = await pullUntil([helloID, binID]);
{
  // The raw batch's lines come as messages of their own (their ids were not asked for).
  const lines = new Map();
  const isLine = (m) => m.body.startsWith("line ");
  for (const { m } of got.values()) if (isLine(m)) lines.set(m.body, m);
  const end = Date.now() + 30000;
  while (lines.size < 2 && Date.now() < end) {
    const p = await call("GET", `${pulls}/messages?consumer=${consumer}&max=10&wait=2s&start=earliest`);
    for (const m of p.json.messages) {
      if (isLine(m)) lines.set(m.body, m);
      else got.set(m.id, { m, at: Date.now() });
    }
  }
  must(["line one", "line two"].every((b) => lines.has(b) && lines.get(b).properties.lang === "node"), `raw batch lines ${[...lines.keys()]}`);
  r = await call("POST", `${pulls}/ack`, { consumer, ids: [...lines.values()].map((m) => m.id) });
  must(r.status === 200 && r.json.done === 2, `ack of the raw batch ${r.status} ${JSON.stringify(r.json)}`);
}
let seenLater = got.get(laterID);

r = await call("POST", `${pulls}/ack`, { consumer, ids: [helloID] });
must(r.status === 200 && r.json.done === 1, `ack ${r.status} ${JSON.stringify(r.json)}`);
r = await call("POST", `${pulls}/nack`, { consumer, ids: [binID], retryAfter: "1s" });
must(r.status === 200 && r.json.done === 1, `nack ${r.status} ${JSON.stringify(r.json)}`);

got = await pullUntil(seenLater ? [binID] : [binID, laterID]);
seenLater = seenLater || got.get(laterID);
must(got.get(binID).m.attempts >= 1, "the retry counts its attempt");
must(seenLater.at >= sentAt + 1500, "the delayed message came before its time");
r = await call("POST", `${pulls}/ack`, { consumer, ids: [binID, laterID] });
must(r.status === 200 && r.json.done === 2, `ack ${r.status} ${JSON.stringify(r.json)}`);

r = await call("POST", `${pulls}/ack`, { consumer, ids: [helloID] });
must(r.status === 404 && r.type === "application/problem+json" && r.json.unknown[0] === helloID, `second ack ${r.status}`);
console.log("ok");
