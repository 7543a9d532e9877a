// QMQ-Go web console: a single page over the meta server's admin API
// (/api/v1). Plain JavaScript, no build step. Pages are chosen by the URL
// hash; the admin token for changes is kept in localStorage.
"use strict";

const TOKEN_KEY = "qmq.token";
const pages = { overview, groups, subjects, consumers, dead };
let refreshTimer = null;

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
    throw new Error(resp.status === 401 ? "unauthorized: save the admin token first (" + msg + ")" : msg);
  }
  return data;
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
  const st = await api("GET", "/status");
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
    table(["TCP", "HTTP", "up since"], st.metaServers.map(m => el("tr", {}, el("td", {}, m.tcp), el("td", {}, m.http), el("td", {}, m.startedAt)))),
    el("p", { class: "muted" }, "etcd revision " + st.revision + ", key prefix " + st.prefix),
  ];
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
        ? el("button", { "data-action": "unmark-readonly", "data-group": g.name, onclick: () => act("unmark " + g.name + " readonly", "DELETE", "/groups/" + enc(g.name) + "/readonly") }, "Unmark readonly")
        : el("button", { "data-action": "mark-readonly", "data-group": g.name, onclick: () => act("mark " + g.name + " readonly", "POST", "/groups/" + enc(g.name) + "/readonly", {}) }, "Mark readonly"),
        g.master && g.slave ? [" ", el("button", { "data-action": "switchover", "data-group": g.name, title: "Hand the group to its slave", onclick: () => switchover(g) }, "Switch over")] : null));
  });
  const brows = bs.map(b => el("tr", { "data-broker": b.brokerId },
    el("td", {}, b.group), el("td", { class: "role" }, b.role), el("td", {}, b.kind), stateCell(b.state),
    el("td", { class: "epoch" }, b.epoch || "-"), el("td", {}, b.brokerId), el("td", {}, b.address),
    el("td", { class: "lag" }, lag(b.load.replicaLagBytes, b.load.replicaLagMillis)),
    el("td", {}, b.load.inPerSec), el("td", {}, b.load.outPerSec), el("td", {}, b.registeredAt)));
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
        el("td", {}, r.subject), el("td", {}, r.kind), el("td", {}, g.group), stateCell(g.state), el("td", {}, g.master || "-"),
        el("td", { class: "epoch" }, g.epoch || "-"),
        el("td", {}, el("button", {
          "data-action": "remove-group", onclick: () => confirm("Remove " + g.group + " from " + r.subject + "?") &&
            act("remove " + g.group + " from " + r.subject, "DELETE", "/routes/" + enc(r.subject) + "/groups/" + enc(g.group)),
        }, "Remove"))));
    }
  }
  const subject = el("input", { id: "add-subject", placeholder: "subject", required: true });
  const group = el("select", { id: "add-group" }, gs.map(g => el("option", { value: g.name }, g.name + " (" + (g.kind || "?") + ", " + g.state + ")")));
  const form = el("form", { class: "inline", id: "add-group-form", onsubmit: e => { e.preventDefault(); act("add " + group.value + " to " + subject.value, "POST", "/routes/" + enc(subject.value) + "/groups", { group: group.value }); } },
    "Add group", group, "to subject", subject, el("button", { type: "submit" }, "Add"));
  return [el("h2", {}, "Subjects and routes"), table(["subject", "kind", "group", "state", "master", "epoch", ""], rows), el("h2", {}, "Grow a route"), form];
}

async function consumers() {
  const cgs = await api("GET", "/consumers");
  const rows = cgs.map(cg => el("tr", { "data-subject": cg.subject, "data-group": cg.group },
    el("td", {}, cg.subject), el("td", {}, cg.group), el("td", { class: "backlog" }, cg.backlog), el("td", { class: "retry-backlog" }, cg.retryBacklog),
    el("td", {}, cg.perBroker.map(p => p.brokerGroup + ": " + p.backlog).join(", ") || "-"),
    el("td", {}, cg.consumers.length ? cg.consumers.map(c => el("div", {},
      c.clientId + " ", el("span", { class: c.online ? "state-rw" : "state-unavailable" }, c.online ? "online" : "offline"), " ",
      el("button", {
        "data-action": c.online ? "consumer-offline" : "consumer-online",
        onclick: () => act((c.online ? "take " : "bring ") + c.clientId + (c.online ? " offline" : " online"), "POST",
          "/consumers/" + enc(cg.subject) + "/" + enc(cg.group) + "/" + enc(c.clientId) + (c.online ? "/offline" : "/online")),
      }, c.online ? "Take offline" : "Bring online"))) : "-")));
  const subject = el("input", { id: "reset-subject", placeholder: "subject", required: true });
  const group = el("input", { id: "reset-group", placeholder: "consumer group", required: true });
  const to = el("input", { id: "reset-to", placeholder: "earliest | latest | 2026-01-02T15:04:05Z", required: true, size: 32 });
  const form = el("form", { class: "inline", id: "reset-form", onsubmit: e => { e.preventDefault(); act("reset " + subject.value + "/" + group.value + " to " + to.value, "POST", "/consumers/" + enc(subject.value) + "/" + enc(group.value) + "/reset", { to: to.value }); } },
    subject, group, to, el("button", { type: "submit" }, "Reset offset"));
  const errs = cgs.length && cgs[0].errors ? cgs[0].errors.map(e => el("p", { class: "muted" }, "broker group " + e.brokerGroup + " did not answer: " + e.error)) : [];
  return [el("h2", {}, "Consumer groups"), table(["subject", "group", "backlog", "retrying", "per broker group", "consumers"], rows), ...errs,
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
    el("td", {}, l.brokerGroup), el("td", {}, l.seq), el("td", {}, l.id), el("td", {}, l.attempts), el("td", {}, l.createdAt),
    el("td", {}, el("pre", {}, l.bodyBase64 ? "base64: " + l.body : l.body)),
    el("td", {},
      el("button", { "data-action": "redrive", onclick: () => act("re-drive " + l.id, "POST", base + "/redrive", { ids: [l.id] }) }, "Re-drive"), " ",
      el("button", { "data-action": "purge", onclick: () => confirm("Purge " + l.id + "?") && act("purge " + l.id, "POST", base + "/purge", { ids: [l.id] }) }, "Purge"))));
  out.push(el("p", { id: "dead-total" }, d.total + " dead letters in " + s0 + "/" + g0),
    table(["broker group", "seq", "id", "attempts", "created", "body", ""], rows),
    el("p", {},
      el("button", { "data-action": "redrive-all", onclick: () => act("re-drive all", "POST", base + "/redrive", {}) }, "Re-drive all"), " ",
      el("button", { "data-action": "purge-all", onclick: () => confirm("Purge every dead letter of " + s0 + "/" + g0 + "?") && act("purge all", "POST", base + "/purge", {}) }, "Purge all")));
  return out;
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
}

function showTokenState() {
  document.getElementById("token-state").textContent = localStorage.getItem(TOKEN_KEY) ? "token saved" : "read-only (no token)";
}

document.getElementById("token-form").addEventListener("submit", e => {
  e.preventDefault();
  const v = document.getElementById("token").value.trim();
  if (v) localStorage.setItem(TOKEN_KEY, v); else localStorage.removeItem(TOKEN_KEY);
  document.getElementById("token").value = "";
  showTokenState();
});
window.addEventListener("hashchange", () => { document.getElementById("flash").replaceChildren(); render(); });
showTokenState();
render();
