// QMQ-Go web console: a single page over the meta server's admin API
// (/api/v1). Plain JavaScript, no build step. Pages are chosen by the URL
// hash. The credential typed into the login form (name:secret, or the
// admin token alone) is kept in localStorage and sent as a bearer token;
// /whoami says who it is and what it may do: change buttons are disabled
// for an identity that may not change anything (the server refuses such
// changes anyway).
"use strict";

const TOKEN_KEY = "qmq.token";
const pages = { overview, groups, subjects, subject: subjectPage, consumers, dead, find, identities };
let refreshTimer = null;
let me = null; // the /whoami answer for the stored credential

// el builds an element: el("td", {class: "x"}, "text", child, ...).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function table(headers, rows) {
  return el("table", {}, el("thead", {}, el("tr", {}, headers.map(h => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows : [el("tr", {}, el("td", { colspan: headers.length, class: "muted" }, "none"))]));
}

function stateCell(state) {
  return el("td", { class: "state-" + state }, state);
}

async function api(method, path, body) {
  const headers = {};
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch("/api/v1" + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    const msg = (data && data.error) || resp.statusText;
    const err = new Error(resp.status === 401 ? "unauthorized: log in with a credential first (" + msg + ")" : msg);
    err.status = resp.status;
    throw err;
  }
  return data;
}

// locked reports whether the logged-in identity may not change anything.
function locked() { return !!(me && me.authenticated && !me.canWrite); }

// changeButton is a button that changes something: disabled for an
// identity without admin write.
function changeButton(attrs, label) {
  const a = Object.assign({}, attrs);
  if (locked()) {
    a.disabled = "disabled";
    a.title = "needs admin write; you are " + me.kind + ":" + me.name + " (" + me.admin + ")";
  }
  return el("button", a, label);
}

function flash(ok, text) {
  const f = document.getElementById("flash");
  f.replaceChildren(el("p", { class: ok ? "ok" : "err", id: ok ? "flash-ok" : "flash-err" }, text));
}

// act performs an admin change and re-renders the page.
async function act(what, method, path, body) {
  try {
    const res = await api(method, path, body);
    let text = what + ": done";
    if (res && res.errors && res.errors.length) {
      text += " (failed on " + res.errors.map(e => e.brokerGroup + ": " + e.error).join("; ") + ")";
    }
    flash(true, text);
    await render();
    return res;
  } catch (err) {
    flash(false, what + ": " + err.message);
  }
}

const enc = encodeURIComponent;

async function overview() {
  const [st, h] = await Promise.all([api("GET", "/status"), api("GET", "/history").catch(err => ({ error: err }))]);
  const card = (label, n, id) => el("div", { class: "card" }, el("div", { class: "n", id }, n), el("div", {}, label));
  return [
    el("h2", {}, "Cluster"),
    el("div", { class: "cards" },
      card("meta servers", st.metaServers.length, "n-meta"),
      card("brokers", st.brokers, "n-brokers"),
      card("groups (" + st.groups.rw + " rw, " + st.groups.readonly + " readonly, " + st.groups.unavailable + " unavailable)", st.groups.total, "n-groups"),
      card("groups with a slave (" + st.replication.withoutSlave + " without; largest lag " +
        lag(st.replication.maxLag.bytes, st.replication.maxLag.millis) + ")", st.replication.withSlave, "n-replicated"),
      card("subjects", st.subjects, "n-subjects"),
      card("consumers", st.consumers, "n-consumers"),
      card("msg/s in", st.inPerSec, "n-in"),
      card("msg/s out", st.outPerSec, "n-out")),
    el("h2", {}, "Meta servers"),
    table(["TCP", "HTTP", "up since"], st.metaServers.map(m => el("tr", {}, el("td", {}, m.tcp), el("td", {}, m.http), el("td", {}, localTime(m.startedAt))))),
    el("p", { class: "muted" }, "etcd revision " + st.revision + ", key prefix " + st.prefix),
    el("h2", {}, "Last hour"),
    historyCharts(h),
    el("h2", {}, "Groups with dead letters"),
    deadOverview(h),
  ];
}

// historyCharts draws the meta server's samples of the last hour: message
// rates in and out, the consumer groups' backlog and the delay servers'
// pending messages, as SVG line charts with local-time labels.
function historyCharts(h) {
  if (h.error) return el("p", { class: "muted", id: "history" }, "no history: " + h.error.message);
  const ss = h.samples || [];
  const times = ss.map(x => new Date(x.at).getTime());
  return el("div", { id: "history", class: "charts" },
    lineChart("chart-rates", "messages per second", times, [
      { name: "in", color: "#2a7", values: ss.map(x => x.inPerSec) },
      { name: "out", color: "#27c", values: ss.map(x => x.outPerSec) }]),
    lineChart("chart-backlog", "backlog (messages)", times, [{ name: "backlog", color: "#c72", values: ss.map(x => x.backlog) }]),
    lineChart("chart-pending", "delay pending (messages)", times, [{ name: "pending", color: "#85c", values: ss.map(x => x.delayPending) }]));
}

// lineChart is an SVG chart of series over times (ms), one polyline each.
function lineChart(id, title, times, series) {
  const W = 360, H = 120, P = 4;
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  svg.setAttribute("class", "chart");
  const t0 = Math.min(...times), t1 = Math.max(...times);
  const top = Math.max(1, ...series.flatMap(s => s.values));
  for (const s of series) {
    if (!times.length) break;
    const pts = s.values.map((v, i) => {
      const x = t1 > t0 ? P + (times[i] - t0) / (t1 - t0) * (W - 2 * P) : W / 2;
      const y = H - P - v / top * (H - 2 * P);
      return x.toFixed(1) + "," + y.toFixed(1);
    });
    const line = document.createElementNS(NS, "polyline");
    line.setAttribute("points", pts.join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", s.color);
    line.setAttribute("stroke-width", "2");
    line.setAttribute("data-series", s.name);
    svg.append(line);
  }
  const last = series.map(s => s.name + " " + (s.values.length ? s.values[s.values.length - 1] : "-")).join(", ");
  const range = times.length ? new Date(t0).toLocaleTimeString() + " – " + new Date(t1).toLocaleTimeString() : "no samples yet";
  return el("figure", { id, class: "chart" }, svg, el("figcaption", {}, title + ": " + last + " (" + range + ", max " + top + ")"));
}

// deadOverview lists every consumer group that holds dead letters (as
// the meta server's last history sample found them), each linking to its
// dead-letter page.
function deadOverview(h) {
  if (h.error) return el("p", { class: "muted", id: "dead-overview" }, "cannot ask the brokers: " + h.error.message);
  const rows = (h.deadLetters || []).map(g => el("tr", { "data-subject": g.subject, "data-group": g.group },
    el("td", {}, g.subject), el("td", {}, g.group),
    el("td", { class: "dead-count" }, el("a", { href: "#dead/" + enc(g.subject) + "/" + enc(g.group) }, g.deadLetters))));
  return el("div", { id: "dead-overview" }, table(["subject", "group", "dead letters"], rows));
}

// localTime shows an RFC 3339 time of the API in the browser's time zone.
function localTime(iso) {
  if (!iso) return "-";
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toLocaleString();
}

// bytes prints a byte count with a binary unit.
function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + units[i];
}

function lag(b, ms) { return bytes(b) + " " + ms + "ms"; }

function seat(id, addr) { return addr ? (id && id !== addr ? id + "@" + addr : addr) : "-"; }

// switchover asks the meta server to hand a group to its slave and reports
// the old and the new master.
async function switchover(g) {
  if (!confirm("Switch " + g.name + " over from " + seat(g.masterId, g.master) + " to " + seat(g.slaveId, g.slave) + "?")) return;
  flash(true, "switching " + g.name + " over…");
  try {
    const r = await api("POST", "/groups/" + enc(g.name) + "/switchover", {});
    flash(true, "switch " + g.name + " over: " + seat(r.from.brokerId, r.from.address) + " (epoch " + r.from.epoch + ") → " +
      seat(r.to.brokerId, r.to.address) + " (epoch " + r.to.epoch + ") in " + r.tookMillis + " ms");
  } catch (err) {
    flash(false, "switch " + g.name + " over: " + err.message);
  }
  await render();
}

async function groups() {
  const [gs, bs] = await Promise.all([api("GET", "/groups"), api("GET", "/brokers")]);
  const rows = gs.map(g => {
    const all = (g.readonly || []).includes("*");
    let slave = seat(g.slaveId, g.slave);
    if (g.slave && g.slaveEpoch !== g.epoch) slave += " (epoch " + (g.slaveEpoch || "-") + ")";
    return el("tr", { "data-group": g.name },
      el("td", {}, g.name), el("td", {}, g.kind || "-"), stateCell(g.state),
      el("td", { class: "writes", title: g.writeReason || "" }, g.writeState || "-"),
      el("td", { class: "epoch" }, g.epoch || "-"),
      el("td", { class: "master" }, seat(g.masterId, g.master)), el("td", { class: "slave" }, slave),
      el("td", { class: "eligible" }, g.eligible ? g.eligible + (g.sync ? " (sync)" : "") + (g.released ? " released" : "") : "-"),
      el("td", { class: "lag" }, g.lag ? lag(g.lag.bytes, g.lag.millis) : "-"),
      el("td", {}, g.routes),
      el("td", {}, g.load.inPerSec), el("td", {}, g.load.outPerSec),
      el("td", { class: "pending" }, g.kind === "delay" ? String(g.load.pending || 0) : "-"),
      el("td", {}, (g.readonly || []).join(", ") || "-"),
      el("td", {}, all
        ? changeButton({ "data-action": "unmark-readonly", "data-group": g.name, onclick: () => act("unmark " + g.name + " readonly", "DELETE", "/groups/" + enc(g.name) + "/readonly") }, "Unmark readonly")
        : changeButton({ "data-action": "mark-readonly", "data-group": g.name, onclick: () => act("mark " + g.name + " readonly", "POST", "/groups/" + enc(g.name) + "/readonly", {}) }, "Mark readonly"),
        g.master && g.slave ? [" ", changeButton({ "data-action": "switchover", "data-group": g.name, title: "Hand the group to its slave", onclick: () => switchover(g) }, "Switch over")] : null));
  });
  const brows = bs.map(b => el("tr", { "data-broker": b.brokerId },
    el("td", {}, b.group), el("td", { class: "role" }, b.role), el("td", {}, b.kind), stateCell(b.state),
    el("td", { class: "epoch" }, b.epoch || "-"), el("td", {}, b.brokerId), el("td", {}, b.address),
    el("td", { class: "lag" }, lag(b.load.replicaLagBytes, b.load.replicaLagMillis)),
    el("td", {}, b.load.inPerSec), el("td", {}, b.load.outPerSec), el("td", {}, localTime(b.registeredAt))));
  return [el("h2", {}, "Broker groups"),
    table(["group", "kind", "state", "writes", "epoch", "master", "slave", "eligible", "replica lag", "routes", "in msg/s", "out msg/s", "pending (delay)", "readonly for", ""], rows),
    el("h2", {}, "Brokers"),
    table(["group", "role", "kind", "state", "epoch", "broker id", "address", "replica lag", "in msg/s", "out msg/s", "registered"], brows)];
}

async function subjects() {
  const [routes, gs] = await Promise.all([api("GET", "/routes"), api("GET", "/groups")]);
  const rows = [];
  for (const r of routes) {
    for (const g of r.groups) {
      rows.push(el("tr", { "data-subject": r.subject },
        el("td", {}, el("a", { href: "#subject/" + enc(r.subject) }, r.subject)), el("td", {}, r.kind), el("td", {}, g.group), stateCell(g.state), el("td", {}, g.master || "-"),
        el("td", { class: "epoch" }, g.epoch || "-"),
        el("td", {}, changeButton({
          "data-action": "remove-group", onclick: () => confirm("Remove " + g.group + " from " + r.subject + "?") &&
            act("remove " + g.group + " from " + r.subject, "DELETE", "/routes/" + enc(r.subject) + "/groups/" + enc(g.group)),
        }, "Remove"))));
    }
  }
  const subject = el("input", { id: "add-subject", placeholder: "subject", required: true });
  const group = el("select", { id: "add-group" }, gs.map(g => el("option", { value: g.name }, g.name + " (" + (g.kind || "?") + ", " + g.state + ")")));
  const form = el("form", { class: "inline", id: "add-group-form", onsubmit: e => { e.preventDefault(); act("add " + group.value + " to " + subject.value, "POST", "/routes/" + enc(subject.value) + "/groups", { group: group.value }); } },
    "Add group", group, "to subject", subject, changeButton({ type: "submit" }, "Add"));
  return [el("h2", {}, "Subjects and routes"), table(["subject", "kind", "group", "state", "master", "epoch", ""], rows), el("h2", {}, "Grow a route"), form];
}

// subjectPage shows one subject (#subject/<name>): its routes, the
// messages its brokers hold and take a second, its consumer groups'
// backlog, and their consumers with what they hold un-acked and when they
// last pulled. It refreshes every two seconds.
async function subjectPage(arg) {
  const name = decodeURIComponent(arg || "");
  const input = el("input", { id: "subject-name", placeholder: "subject", value: name, required: true });
  const form = el("form", { class: "inline", id: "subject-form", onsubmit: e => { e.preventDefault(); location.hash = "subject/" + enc(input.value); } },
    input, el("button", { type: "submit" }, "Show subject"));
  const out = [el("h2", {}, name ? "Subject " + name : "Subject"), form];
  if (!name) return out;
  const s = await api("GET", "/subjects/" + enc(name));
  out.push(el("p", { id: "subject-summary" }, el("span", { id: "subject-messages" }, s.messages), " messages held, ",
    el("span", { id: "subject-rate" }, s.inPerSec), " msg/s in"));
  const routeRows = s.routes.flatMap(r => r.groups.map(g => el("tr", { "data-group": g.group },
    el("td", {}, r.kind), el("td", {}, g.group), stateCell(g.state), el("td", {}, g.master || "-"), el("td", {}, g.epoch || "-"))));
  out.push(el("h3", {}, "Routes"), table(["kind", "broker group", "state", "master", "epoch"], routeRows));
  const groupRows = s.groups.map(cg => el("tr", { "data-group": cg.group },
    el("td", {}, cg.group), el("td", { class: "out-rate" }, cg.outPerSec || 0), el("td", { class: "backlog" }, cg.backlog), el("td", { class: "retry-backlog" }, cg.retryBacklog),
    el("td", { class: "dead-count" }, cg.deadLetters ? el("a", { href: "#dead/" + enc(s.subject) + "/" + enc(cg.group) }, cg.deadLetters) : "0"),
    el("td", {}, cg.perBroker.map(p => p.brokerGroup + ": " + p.backlog + " of " + p.messages).join(", ") || "-")));
  out.push(el("h3", {}, "Consumer groups"), table(["group", "out msg/s", "backlog", "retrying", "dead", "per broker group (backlog of messages)"], groupRows));
  const consumerRows = s.groups.flatMap(cg => cg.consumers.map(c => el("tr", { "data-group": cg.group, "data-consumer": c.clientId },
    el("td", {}, cg.group), el("td", {}, c.clientId),
    el("td", {}, el("span", { class: c.online ? "state-rw" : "state-unavailable" }, c.online ? "online" : "offline")),
    el("td", { class: "unacked" }, c.unacked), el("td", { class: "last-pull" }, localTime(c.lastPull)),
    el("td", {}, c.since && !c.since.startsWith("0001") ? localTime(c.since) : "not registered here"))));
  out.push(el("h3", {}, "Consumers"), table(["group", "consumer", "state", "un-acked", "last pull", "registered"], consumerRows));
  for (const e of s.errors || []) out.push(el("p", { class: "muted" }, "broker group " + e.brokerGroup + " did not answer: " + e.error));
  return out;
}

async function consumers() {
  const cgs = await api("GET", "/consumers");
  const rows = cgs.map(cg => el("tr", { "data-subject": cg.subject, "data-group": cg.group },
    el("td", {}, el("a", { href: "#subject/" + enc(cg.subject) }, cg.subject)), el("td", {}, cg.group), el("td", { class: "backlog" }, cg.backlog), el("td", { class: "retry-backlog" }, cg.retryBacklog),
    el("td", { class: "dead-count" }, cg.deadLetters ? el("a", { href: "#dead/" + enc(cg.subject) + "/" + enc(cg.group) }, cg.deadLetters) : "0"),
    el("td", {}, cg.perBroker.map(p => p.brokerGroup + ": " + p.backlog).join(", ") || "-"),
    el("td", {}, cg.consumers.length ? cg.consumers.map(c => el("div", {},
      c.clientId + " ", el("span", { class: c.online ? "state-rw" : "state-unavailable" }, c.online ? "online" : "offline"), " ",
      changeButton({
        "data-action": c.online ? "consumer-offline" : "consumer-online",
        onclick: () => act((c.online ? "take " : "bring ") + c.clientId + (c.online ? " offline" : " online"), "POST",
          "/consumers/" + enc(cg.subject) + "/" + enc(cg.group) + "/" + enc(c.clientId) + (c.online ? "/offline" : "/online")),
      }, c.online ? "Take offline" : "Bring online"))) : "-")));
  const subject = el("input", { id: "reset-subject", placeholder: "subject", required: true });
  const group = el("input", { id: "reset-group", placeholder: "consumer group", required: true });
  const to = el("input", { id: "reset-to", placeholder: "earliest | latest | 2026-01-02T15:04:05Z", required: true, size: 32 });
  // A reset of a group no broker knows is refused unless "create" is ticked
  // (a typo must not make a new group).
  const create = el("input", { id: "reset-create", type: "checkbox" });
  const form = el("form", { class: "inline", id: "reset-form", onsubmit: e => { e.preventDefault(); act((create.checked ? "create " : "reset ") + subject.value + "/" + group.value + " at " + to.value, "POST", "/consumers/" + enc(subject.value) + "/" + enc(group.value) + "/reset", { to: to.value, create: create.checked }); } },
    subject, group, to, el("label", { title: "create the group at this position if no broker has it yet" }, create, " create the group if it is new"), changeButton({ type: "submit" }, "Reset offset"));
  const errs = cgs.length && cgs[0].errors ? cgs[0].errors.map(e => el("p", { class: "muted" }, "broker group " + e.brokerGroup + " did not answer: " + e.error)) : [];
  return [el("h2", {}, "Consumer groups"), table(["subject", "group", "backlog", "retrying", "dead", "per broker group", "consumers"], rows), ...errs,
    el("h2", {}, "Reset a group's offset"), form];
}

// dead shows a group's dead letters; the subject and group come from the
// hash (#dead/<subject>/<group>) so a listing survives refreshes.
async function dead(arg) {
  const [s0, g0] = (arg || "").split("/").map(decodeURIComponent);
  const subject = el("input", { id: "dead-subject", placeholder: "subject", value: s0 || "", required: true });
  const group = el("input", { id: "dead-group", placeholder: "consumer group", value: g0 || "", required: true });
  const form = el("form", { class: "inline", id: "dead-form", onsubmit: e => { e.preventDefault(); location.hash = "dead/" + enc(subject.value) + "/" + enc(group.value); } },
    subject, group, el("button", { type: "submit" }, "List dead letters"));
  const out = [el("h2", {}, "Dead letters"), form];
  if (!s0 || !g0) return out;
  const base = "/deadletters/" + enc(s0) + "/" + enc(g0);
  const d = await api("GET", base + "?max=100");
  const rows = d.letters.map(l => el("tr", { "data-id": l.id },
    el("td", {}, l.brokerGroup), el("td", {}, l.seq), el("td", {}, l.id), el("td", {}, l.attempts), el("td", {}, localTime(l.createdAt)),
    el("td", { class: "died" }, localTime(l.failedAt)), el("td", { class: "dead-why" }, l.deadWhy || "-"),
    el("td", { class: "last-error" }, l.lastError ? el("pre", {}, l.lastError) : "-"),
    el("td", {}, l.bodyHidden ? el("span", { class: "muted body-hidden" }, "hidden (needs read bodies)") : el("pre", {}, l.bodyBase64 ? "base64: " + l.body : l.body)),
    el("td", {},
      changeButton({ "data-action": "redrive", onclick: () => act("re-drive " + l.id, "POST", base + "/redrive", { ids: [l.id] }) }, "Re-drive"), " ",
      changeButton({ "data-action": "purge", onclick: () => confirm("Purge " + l.id + "?") && act("purge " + l.id, "POST", base + "/purge", { ids: [l.id] }) }, "Purge"))));
  out.push(el("p", { id: "dead-total" }, d.total + " dead letters in " + s0 + "/" + g0),
    table(["broker group", "seq", "id", "attempts", "created", "died", "why", "last error", "body", ""], rows),
    el("p", {},
      changeButton({ "data-action": "redrive-all", onclick: () => confirm("Re-drive every dead letter of " + s0 + "/" + g0 + " (" + d.total + ") back to the group?") && act("re-drive all", "POST", base + "/redrive", {}) }, "Re-drive all"), " ",
      changeButton({ "data-action": "purge-all", onclick: () => confirm("Purge every dead letter of " + s0 + "/" + g0 + "?") && act("purge all", "POST", base + "/purge", {}) }, "Purge all")));
  return out;
}

// find is the "Find a message" page: a message id or key, from the hash
// (#find/id/<id> or #find/key/<key>), its life (trace) and its stored
// copies, bodies only for identities that may read them.
async function find(arg) {
  // #find/<by>/<value>[/<subject>]: both encoded, so each is one segment.
  const [by0, v0, s0] = (arg || "").split("/");
  const value0 = decodeURIComponent(v0 || ""), subject0 = decodeURIComponent(s0 || "");
  const by = el("select", { id: "find-by" }, el("option", { value: "id" }, "message id"), el("option", { value: "key" }, "key"));
  by.value = by0 === "key" ? "key" : "id";
  const value = el("input", { id: "find-value", placeholder: "message id or key", value: value0, required: true, size: 40 });
  const subject = el("input", { id: "find-subject", placeholder: "subject (for a schedule key)", value: subject0, size: 30 });
  const form = el("form", { class: "inline", id: "find-form", onsubmit: e => { e.preventDefault(); location.hash = "find/" + by.value + "/" + enc(value.value) + (subject.value ? "/" + enc(subject.value) : ""); } },
    by, value, subject, el("button", { type: "submit" }, "Find"));
  const out = [el("h2", {}, "Find a message"), form];
  if (!value0) return out;
  const q = (by.value === "key" ? "key=" : "id=") + enc(value0) + (subject0 ? "&subject=" + enc(subject0) : "");
  let traces, found;
  try {
    [traces, found] = await Promise.all([api("GET", "/trace?" + q), api("GET", "/messages?" + q)]);
  } catch (err) {
    out.push(el("p", { id: "find-result", class: err.status === 404 ? "muted" : "err" }, err.status === 404 ? "not found: no message with " + by.value + " " + value0 : err.message));
    return out;
  }
  if (!Array.isArray(traces)) traces = [traces];
  const div = el("div", { id: "find-result" });
  for (const t of traces) {
    const rows = t.events.map(e => el("tr", { "data-event": e.event },
      el("td", {}, localTime(e.at)), el("td", { class: "event" }, e.event), el("td", {}, e.group || "-"), el("td", {}, e.consumer || "-"),
      el("td", {}, e.brokerGroup || "-"), el("td", {}, e.attempt || "-"),
      el("td", {}, e.error ? el("span", { class: "state-unavailable" }, "error: " + e.error) : null, e.error && e.detail ? " — " : null, e.detail || null,
        e.nextDue ? " (next due " + localTime(e.nextDue) + ")" : null)));
    div.append(el("h3", { "data-id": t.id }, "Message " + t.id + " of " + t.subject),
      table(["time", "event", "group", "consumer", "broker group", "attempt", "detail"], rows));
  }
  const copies = found.messages.map(m => el("tr", { "data-id": m.id, "data-kind": m.kind },
    el("td", {}, m.id), el("td", {}, m.kind + (m.group ? " (" + m.group + ")" : "") + (m.scheduleState ? ": " + m.scheduleState + ", due " + localTime(m.deliverAt) : "")), el("td", {}, m.storedSubject),
    el("td", {}, m.brokerGroup + " @" + m.offset), el("td", {}, localTime(m.storedAt)), el("td", {}, m.attempts),
    el("td", {}, Object.entries(m.properties || {}).map(([k, v]) => el("div", {}, k + "=" + v))),
    el("td", {}, m.bodyHidden ? el("span", { class: "muted body-hidden" }, "hidden (needs read bodies)") : el("pre", {}, m.bodyBase64 ? "base64: " + m.body : m.body))));
  div.append(el("h3", {}, "Stored copies"), table(["id", "kind", "stored as", "where", "stored", "attempts", "properties", "body"], copies));
  for (const e of found.errors || []) div.append(el("p", { class: "muted" }, "broker group " + e.brokerGroup + " did not answer: " + e.error));
  out.push(div);
  return out;
}

// showSecret shows a secret the server generated, once: it is not kept
// anywhere by the console.
function showSecret(what, res) {
  if (!res) return;
  const f = document.getElementById("flash");
  if (!res.secret) {
    f.replaceChildren(el("p", { class: "ok", id: "flash-ok" }, what + ": done (with the secret you chose)"));
    return;
  }
  f.replaceChildren(el("div", { class: "ok secret", id: "flash-ok" },
    el("p", {}, what + ": done. The secret is shown this once; the server keeps only its hash. Put the credentials in a file only the client's user can read (chmod 600)."),
    el("p", {}, "credentials ", el("code", { id: "new-credentials" }, res.credentials))));
}

// identityAct performs an identity change; a secret in the answer is
// shown once.
async function identityAct(what, method, path, body) {
  try {
    const res = await api(method, path, body);
    if (res && res.identity) showSecret(what, res); else flash(true, what + ": done");
    await render();
  } catch (err) {
    flash(false, what + ": " + err.message);
  }
}

// patterns splits a comma-separated list of patterns.
function patterns(v) { return v.split(",").map(x => x.trim()).filter(x => x); }

// identities lists identities with their grants, and adds, rotates,
// enables, disables, removes them and grants and revokes rights.
async function identities() {
  if (!me || !me.canReadIdentities) {
    return [el("h2", {}, "Identities"), el("p", { id: "identities-locked", class: "muted" }, "Log in as an admin (read or write) to see identities.")];
  }
  const ids = await api("GET", "/identities");
  const rows = ids.map(id => el("tr", { "data-identity": id.name },
    el("td", {}, id.name), el("td", {}, id.kind), el("td", {}, id.group || "-"),
    el("td", { class: id.disabled ? "state-unavailable" : "state-rw" }, id.disabled ? "disabled" : "enabled"),
    el("td", {}, id.hasSecret ? "hashed" : "certificate only"),
    el("td", { class: "publish" }, (id.grants.publish || []).join(", ") || "-"),
    el("td", { class: "consume" }, (id.grants.consume || []).join(", ") || "-"),
    el("td", { class: "groups" }, (id.grants.groups || []).join(", ") || "-"),
    el("td", { class: "admin" }, id.grants.admin || "none"), el("td", {}, id.grants.readBodies ? "yes" : "-"),
    el("td", {},
      changeButton({ "data-action": "rotate", onclick: () => confirm("Give " + id.name + " a new secret? The old one stops working.") &&
        identityAct("rotate " + id.name, "POST", "/identities/" + enc(id.name) + "/rotate", {}) }, "Rotate secret"), " ",
      changeButton({ "data-action": id.disabled ? "enable" : "disable", onclick: () => identityAct((id.disabled ? "enable " : "disable ") + id.name, "POST",
        "/identities/" + enc(id.name) + (id.disabled ? "/enable" : "/disable")) }, id.disabled ? "Enable" : "Disable"), " ",
      changeButton({ "data-action": "remove", onclick: () => confirm("Remove identity " + id.name + "?") &&
        identityAct("remove " + id.name, "DELETE", "/identities/" + enc(id.name)) }, "Remove"))));

  const name = el("input", { id: "id-name", placeholder: "name", required: true });
  const kind = el("select", { id: "id-kind" }, ["app", "broker", "admin"].map(k => el("option", { value: k }, k)));
  const group = el("input", { id: "id-group", placeholder: "broker group (default: name)" });
  const role = el("select", { id: "id-admin" }, ["none", "read", "write"].map(r => el("option", { value: r }, "admin " + r)));
  const addForm = el("form", { class: "inline", id: "identity-form", onsubmit: e => {
    e.preventDefault();
    identityAct("add " + name.value, "POST", "/identities", { name: name.value, kind: kind.value, group: kind.value === "broker" ? group.value : "",
      grants: { admin: kind.value === "admin" ? role.value : "" } });
  } }, name, kind, group, role, changeButton({ type: "submit" }, "Add identity"));

  const who = el("select", { id: "grant-identity" }, ids.map(id => el("option", { value: id.name }, id.name + " (" + id.kind + ")")));
  const publish = el("input", { id: "grant-publish", placeholder: "publish: order.*, invoice" });
  const consume = el("input", { id: "grant-consume", placeholder: "consume: order.*" });
  const groups = el("input", { id: "grant-groups", placeholder: "consumer groups: billing*" });
  const grole = el("select", { id: "grant-admin" }, ["", "none", "read", "write"].map(r => el("option", { value: r }, r ? "admin " + r : "admin: unchanged")));
  const bodies = el("input", { id: "grant-bodies", type: "checkbox" });
  const grant = () => identityAct("grant " + who.value, "POST", "/identities/" + enc(who.value) + "/grant",
    { publish: patterns(publish.value), consume: patterns(consume.value), groups: patterns(groups.value), admin: grole.value, readBodies: bodies.checked });
  const revoke = () => identityAct("revoke " + who.value, "POST", "/identities/" + enc(who.value) + "/revoke",
    { publish: patterns(publish.value), consume: patterns(consume.value), groups: patterns(groups.value), admin: grole.value !== "", readBodies: bodies.checked });
  const grantForm = el("form", { class: "inline", id: "grant-form", onsubmit: e => { e.preventDefault(); grant(); } },
    who, publish, consume, groups, grole, el("label", {}, bodies, " read bodies"),
    changeButton({ type: "submit", "data-action": "grant" }, "Grant"), changeButton({ type: "button", "data-action": "revoke", onclick: revoke }, "Revoke"));
  return [el("h2", {}, "Identities"),
    table(["name", "kind", "group", "state", "secret", "publish", "consume", "consumer groups", "admin", "bodies", ""], rows),
    el("h2", {}, "Add an identity"), addForm,
    el("p", { class: "muted" }, "The server generates the secret and shows it once. Apps get rights with Grant; a broker may register as its group."),
    el("h2", {}, "Grant or revoke rights"), grantForm,
    el("p", { class: "muted" }, "Patterns: exact names, * for everything, or a prefix ending in * (order.*). Revoke removes the listed patterns; a chosen admin role or read bodies is dropped.")];
}

let rendering = false;
let renderAgain = false;

// render draws the page the hash names; a render asked for while one is in
// flight runs right after it, so a quick hash change is never lost.
async function render() {
  if (rendering) {
    renderAgain = true;
    return;
  }
  rendering = true;
  renderAgain = false;
  const [name, ...rest] = (location.hash.slice(1) || "overview").split("/");
  const page = pages[name] || overview;
  document.querySelectorAll("nav a").forEach(a => a.classList.toggle("active", a.dataset.page === name));
  try {
    await loadMe();
    const content = await page(rest.join("/"));
    document.getElementById("page").replaceChildren(...content);
    document.body.dataset.loaded = name;
  } catch (err) {
    document.getElementById("page").replaceChildren(el("p", { class: "state-unavailable", id: "page-error" }, "Cannot load " + name + ": " + err.message));
  } finally {
    rendering = false;
  }
  clearTimeout(refreshTimer);
  if (renderAgain) return render();
  if (name === "overview" || name === "groups" || !pages[name]) refreshTimer = setTimeout(render, 1000);
  else if (name === "subject" && rest.length && rest[0]) refreshTimer = setTimeout(render, 2000);
}

// loadMe asks who the stored credential is; a credential the server
// refuses is reported in the header (and kept, so a retry can log in).
async function loadMe() {
  try {
    me = await api("GET", "/whoami");
  } catch (err) {
    me = { authenticated: false, refused: err.status === 401, admin: "none" };
  }
  showTokenState();
}

function showTokenState() {
  const state = document.getElementById("token-state");
  const stored = !!localStorage.getItem(TOKEN_KEY);
  document.getElementById("logout").hidden = !stored;
  if (!me) {
    state.textContent = stored ? "credential saved" : "not logged in";
  } else if (me.refused) {
    state.textContent = "credential refused: log in again";
  } else if (me.authenticated) {
    state.textContent = "logged in as " + me.kind + ":" + me.name + " (admin " + me.admin + (me.canReadBodies && me.admin !== "write" ? ", bodies" : "") + ")";
  } else {
    state.textContent = "not logged in" + (me.canRead ? " (read-only)" : "");
  }
  state.dataset.identity = me && me.authenticated ? me.name : "";
}

// The login form stores the credential at once (so a click right after
// uses it), then asks the server who it is.
document.getElementById("token-form").addEventListener("submit", async e => {
  e.preventDefault();
  const v = document.getElementById("token").value.trim();
  if (v) localStorage.setItem(TOKEN_KEY, v); else localStorage.removeItem(TOKEN_KEY);
  document.getElementById("token").value = "";
  await loadMe();
  if (me.refused) flash(false, "log in: the server refused the credential");
  else if (me.authenticated) flash(true, "logged in as " + me.kind + ":" + me.name);
  render();
});
document.getElementById("logout").addEventListener("click", () => {
  localStorage.removeItem(TOKEN_KEY);
  me = null;
  flash(true, "logged out");
  render();
});
window.addEventListener("hashchange", () => { document.getElementById("flash").replaceChildren(); render(); });
showTokenState();
render();
