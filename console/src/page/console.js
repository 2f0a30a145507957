// The Sluice console's page: follows /events (server-sent events, one JSON picture each)
// and draws it; actions go to /actions with the access token. Everything a server or a
// tenant named is put in as text, never as markup.
"use strict";

const token = new URLSearchParams(location.search).get("token") || "";
const PALETTE = ["#1e5eff", "#e8590c", "#12b76a", "#9e77ed", "#f04438", "#0ba5ec", "#eaaa08", "#667085"];
const WINDOW_S = 90;
let picture = null;
let drawPending = false;
let colours = new Map();
// Render timing, read by the benchmark: the last picture's server time and when it was drawn.
// `latencies`: ms from each picture's making (server clock, the same machine) to its drawing;
// `drawMs`: the drawing's own time; `firstDrawn`: ms since navigation to the first picture.
window.sluiceConsole = { pictures: 0, lastAt: 0, lastDrawn: 0, lastLatencyMs: 0,
  firstDrawn: null, latencies: [], drawMs: [] };

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function colour(cluster) {
  if (!colours.has(cluster)) colours.set(cluster, PALETTE[colours.size % PALETTE.length]);
  return colours.get(cluster);
}

function since(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  return s < 90 ? `${s}s ago` : `${Math.round(s / 60)}m ago`;
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

const NEVER_PLACED = new Set(["kube-system", "kube-public", "kube-node-lease"]);
const PHASE_WORDS = {
  placed: "placed", moving: "adding the new cluster", shifting: "shifting traffic",
  draining: "draining", queued: "queued to leave", rolledBack: "rolled back",
  pending: "pending", unknown: "—",
};

async function act(body, what) {
  const out = document.getElementById("action-result");
  out.className = "";
  out.textContent = `${what}…`;
  try {
    const r = await fetch("/actions", {
      method: "POST",
      headers: { "content-type": "application/json", "x-console-token": token },
      body: JSON.stringify(body),
    });
    const j = await r.json().catch(() => ({ ok: false, message: `answered ${r.status}` }));
    out.className = j.ok ? "ok" : "bad";
    out.textContent = j.ok ? j.message : `Refused (${j.code || r.status}): ${j.message}`;
    out.dataset.code = j.ok ? "200" : String(j.code || r.status);
  } catch (e) {
    out.className = "bad";
    out.textContent = `Not sent: ${e}`;
  }
}

function quantity(cap, alloc, key) {
  const a = alloc && alloc[key] !== undefined ? alloc[key] : 0;
  const c = cap && cap[key] !== undefined ? cap[key] : "∞";
  return `${key} ${a}/${c}`;
}

// Keyed children: make a child once per key, update it when its item (or `salt`, what
// else it is drawn from) changed since it was last drawn, drop the gone.
function keyed(container, items, keyOf, make, update, salt = "") {
  const existing = new Map();
  for (const child of Array.from(container.children)) existing.set(child.dataset.key, child);
  let prev = null;
  for (const item of items) {
    const key = keyOf(item);
    let node = existing.get(key);
    if (!node) { node = make(item); node.dataset.key = key; }
    existing.delete(key);
    const sig = salt + JSON.stringify(item);
    if (node._sig !== sig) {
      update(node, item);
      node._sig = sig;
    }
    const want = prev ? prev.nextSibling : container.firstChild;
    if (want !== node) container.insertBefore(node, want);
    prev = node;
  }
  for (const gone of existing.values()) gone.remove();
}

function drawClusters(p) {
  const err = document.getElementById("clusters-error");
  err.hidden = !p.clustersError;
  err.textContent = p.clustersError ? `Clusters are not shown: ${p.clustersError}` : "";
  keyed(document.getElementById("clusters"), p.clusters, (c) => c.name, (c) => {
    const card = el("article", { class: "card", "aria-label": `Cluster ${c.name}` });
    card.append(el("h3"), el("div", { class: "cap" }), el("div", { class: "left" }),
      el("div", { class: "progress", hidden: true, role: "progressbar", "aria-label": `Drain of ${c.name}` }, el("div")),
      el("div", { class: "addr" }),
      el("div", { class: "row" },
        el("button", { "aria-label": `Cordon ${c.name}`, onclick: () => act({ action: "cordon", cluster: c.name }, `Cordoning ${c.name}`) }, "Cordon"),
        el("button", { "aria-label": `Drain ${c.name}`, onclick: () => act({ action: "drain", cluster: c.name }, `Draining ${c.name}`) }, "Drain"),
        el("button", { "aria-label": `Uncordon ${c.name}`, onclick: () => act({ action: "uncordon", cluster: c.name }, `Uncordoning ${c.name}`) }, "Uncordon")));
    card.dataset.max = "0";
    return card;
  }, (card, c) => {
    card.dataset.cluster = c.name;
    card.dataset.ready = c.ready;
    card.dataset.draining = c.draining;
    card.dataset.cordoned = c.cordoned;
    card.dataset.left = c.left;
    const h = card.querySelector("h3");
    h.replaceChildren(...[el("span", { class: "swatch" }), c.name,
      el("span", { class: `badge ${c.ready ? "ok" : "bad"}`, title: c.readyMessage }, c.ready ? "Ready" : "NotReady"),
      c.cordoned ? el("span", { class: "badge warn" }, "cordoned") : null,
      c.draining ? el("span", { class: "badge warn" }, "draining") : null].filter((x) => x !== null));
    h.querySelector(".swatch").style.background = colour(c.name);
    card.querySelector(".cap").textContent =
      `${c.placedNamespaces} namespace(s) placed · ${quantity(c.capacity, c.allocated, "pods")} · ${quantity(c.capacity, c.allocated, "cpu")} · ${quantity(c.capacity, c.allocated, "memory")}`;
    const max = Math.max(Number(card.dataset.max), c.left);
    card.dataset.max = c.draining ? String(max) : "0";
    card.querySelector(".left").textContent = c.draining
      ? (c.left ? `draining: ${c.left} namespace(s) left of ${max}` : "drained: nothing runs here") : "";
    const bar = card.querySelector(".progress");
    bar.hidden = !c.draining;
    const done = max ? (max - c.left) / max : 1;
    bar.firstChild.style.width = `${Math.round(done * 100)}%`;
    bar.setAttribute("aria-valuenow", String(Math.round(done * 100)));
    card.querySelector(".addr").textContent =
      `gateway ${c.gateways.join(", ") || "—"} · ingress ${c.ingresses.join(", ") || "—"}`;
  });
}

function drawNamespaces(p) {
  const filter = document.getElementById("filter").value.trim().toLowerCase();
  const shown = p.namespaces.filter((n) => !filter ||
    `${n.logicalCluster} ${n.name} ${n.clusters.join(" ")} ${n.phase} ${n.reason}`.toLowerCase().includes(filter));
  const names = p.clusters.map((c) => c.name);
  keyed(document.querySelector("#namespaces tbody"), shown, (n) => `${n.logicalCluster}/${n.name}`, (n) => {
    const key = `${n.logicalCluster}/${n.name}`;
    const select = el("select", { "aria-label": `Target cluster for ${key}` });
    return el("tr", {}, el("td"), el("td"), el("td"), el("td"), el("td", { class: "says" }),
      el("td", {}, select, " ", el("button", { "aria-label": `Move ${key}`, onclick: () => {
        act({ action: "move", logicalCluster: n.logicalCluster, namespace: n.name, cluster: select.value }, `Moving ${key} to ${select.value}`);
      } }, "Move")));
  }, (row, n) => {
    row.dataset.ns = `${n.logicalCluster}/${n.name}`;
    row.dataset.phase = n.phase;
    row.dataset.clusters = n.clusters.join(",");
    const cells = row.children;
    cells[0].textContent = n.logicalCluster;
    cells[1].textContent = n.name;
    cells[2].textContent = n.clusters.join(", ") || "—";
    cells[3].replaceChildren(el("span", { class: `phase-${n.phase}` }, PHASE_WORDS[n.phase] || n.phase));
    cells[4].textContent = n.message;
    const select = cells[5].querySelector("select");
    // Sluice never places these: no move to offer.
    const never = NEVER_PLACED.has(n.name);
    cells[5].style.visibility = never ? "hidden" : "";
    const options = names.join(",");
    if (select.dataset.options !== options) {
      const keep = select.value;
      select.replaceChildren(...names.map((c) => el("option", { value: c }, c)));
      select.value = names.includes(keep) ? keep : (n.pinned || names[0] || "");
      select.dataset.options = options;
    }
  }, names.join(","));
  keyed(document.querySelector("#placements tbody"), p.placements, (x) => `${x.logicalCluster}/${x.name}`,
    () => el("tr", {}, el("td"), el("td"), el("td"), el("td")), (row, x) => {
      const c = row.children;
      c[0].textContent = x.logicalCluster; c[1].textContent = x.name;
      c[2].textContent = x.selected.join(", ") || "—";
      c[3].textContent = x.ready ? "True" : `False ${x.message}`;
    });
}

function drawMoves(p) {
  const moved = p.namespaces.filter((n) => n.timeline.some((s) => s.phase !== "placed" && s.phase !== "unknown"));
  document.getElementById("moves-none").hidden = moved.length > 0;
  keyed(document.getElementById("moves"), moved, (n) => `${n.logicalCluster}/${n.name}`, (n) => {
    const key = `${n.logicalCluster}/${n.name}`;
    return el("div", { class: "move" }, el("strong", {}, key), el("ol", { class: "timeline", "aria-label": `Timeline of ${key}` }));
  }, (box, n) => {
    const ol = box.querySelector("ol");
    ol.dataset.ns = `${n.logicalCluster}/${n.name}`;
    const steps = n.timeline;
    ol.replaceChildren(...steps.map((s, i) => {
      const next = steps[i + 1];
      const took = next ? ` · ${((next.at - s.at) / 1000).toFixed(1)} s` : "";
      return el("li", { "data-phase": s.phase, class: s.done ? "done" : null, title: s.detail },
        el("span", { class: "t" }, clock(s.at) + took),
        el("b", {}, s.done ? "done" : (PHASE_WORDS[s.phase] || s.phase)), " ", s.detail);
    }));
  });
}

function chart(svg, seconds, now) {
  const W = 300, H = 100;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("preserveAspectRatio", "none");
  const clusters = [...new Set(seconds.flatMap(([, by]) => Object.keys(by)))].sort();
  const x = (t) => W - ((now - t) / WINDOW_S) * W;
  const paths = [];
  const base = seconds.map(() => 0);
  for (const c of clusters) {
    const top = [], bottom = [];
    seconds.forEach(([t, by], i) => {
      const total = Object.values(by).reduce((a, s) => a + s.requests, 0);
      const share = total > 0 && by[c] ? by[c].requests / total : 0;
      bottom.push([x(t), H - base[i] * H]);
      base[i] += share;
      top.push([x(t), H - base[i] * H]);
    });
    if (!top.length) continue;
    const d = "M" + top.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join("L") +
      "L" + bottom.reverse().map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join("L") + "Z";
    const path = document.createElementNS("http://www.w3.org/2000/svg", "path");
    path.setAttribute("d", d);
    path.setAttribute("fill", colour(c));
    path.setAttribute("fill-opacity", "0.8");
    paths.push(path);
  }
  svg.replaceChildren(...paths);
}

function drawTraffic(p) {
  const errs = document.getElementById("scrape-errors");
  errs.hidden = !p.scrapeErrors.length;
  errs.textContent = p.scrapeErrors.length ? `Not read: ${p.scrapeErrors.join("; ")}` : "";
  const now = p.at / 1000;
  document.getElementById("traffic-none").hidden = p.traffic.length > 0;
  keyed(document.getElementById("traffic"), p.traffic, (s) => `${s.logicalCluster}/${s.namespace}/${s.service}`, (s) => {
    const key = `${s.logicalCluster}/${s.namespace}/${s.service}`;
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("class", "chart");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", `Share of ${key}'s requests answered by each cluster`);
    return el("article", { class: "card", "aria-label": `Traffic of ${key}` }, el("h3", {}, key), svg, el("div", { class: "legend" }));
  }, (card, s) => {
    card.dataset.service = `${s.logicalCluster}/${s.namespace}/${s.service}`;
    chart(card.querySelector("svg"), s.seconds, now);
    // The last second with answers: each cluster's share and p99.
    const last = [...s.seconds].reverse().find(([, by]) => Object.values(by).some((x) => x.requests > 0));
    const by = last ? last[1] : {};
    const total = Object.values(by).reduce((a, x) => a + x.requests, 0);
    const clusters = Object.keys(by).sort();
    for (const k of Object.keys(card.dataset)) if (k.startsWith("share")) delete card.dataset[k];
    const items = clusters.map((c) => {
      const share = total ? by[c].requests / total : 0;
      card.dataset[`share${c.charAt(0).toUpperCase()}${c.slice(1)}`] = share.toFixed(3);
      const p99 = by[c].p99Ms === null || by[c].p99Ms === undefined ? "—" : `${by[c].p99Ms} ms`;
      return el("span", { "data-cluster": c }, el("span", { class: "swatch" }),
        `${c} ${(share * 100).toFixed(0)}% · p99 ${p99}`);
    });
    items.forEach((item) => { item.firstChild.style.background = colour(item.dataset.cluster); });
    card.querySelector(".legend").replaceChildren(...items, el("span", { class: "muted" }, `${total.toFixed(0)} req/s`));
  });
}

let eventsDrawn = "";
function drawEvents(p) {
  const sig = JSON.stringify(p.events);
  if (sig === eventsDrawn) return;
  eventsDrawn = sig;
  const body = document.querySelector("#events tbody");
  body.replaceChildren(...p.events.map((e) => el("tr", {},
    el("td", {}, e.time ? clock(Date.parse(e.time)) : ""), el("td", {}, `${e.logicalCluster}/${e.namespace}`),
    el("td", { class: e.kind === "Warning" ? "phase-pending" : null }, e.kind), el("td", {}, e.reason),
    el("td", {}, e.object), el("td", { class: "says" }, e.message))));
}

function draw() {
  const p = picture;
  if (!p || !p.clusters) return;
  const began = performance.now();
  for (const c of p.clusters) colour(c.name);
  document.getElementById("who").textContent = `${p.user || "?"} · ${p.scope === "*" ? "every logical cluster" : p.scope}`;
  drawClusters(p);
  drawTraffic(p);
  drawMoves(p);
  drawNamespaces(p);
  drawEvents(p);
  const s = window.sluiceConsole;
  s.pictures += 1;
  s.lastAt = p.at;
  s.lastDrawn = Date.now();
  s.lastLatencyMs = s.lastDrawn - p.at;
  if (s.firstDrawn === null) s.firstDrawn = performance.now();
  if (s.latencies.length < 100000) {
    s.latencies.push(s.lastLatencyMs);
    s.drawMs.push(performance.now() - began);
  }
}

function connect() {
  const live = document.getElementById("live");
  const source = new EventSource(`/events?token=${encodeURIComponent(token)}`);
  source.addEventListener("open", () => { live.textContent = "live"; live.className = "badge on"; });
  source.addEventListener("error", () => { live.textContent = "reconnecting…"; live.className = "badge off"; });
  source.addEventListener("picture", (e) => {
    try { picture = JSON.parse(e.data); } catch { return; }
    // Pictures that come faster than frames are drawn once, the newest.
    if (!drawPending) {
      drawPending = true;
      requestAnimationFrame(() => { drawPending = false; draw(); });
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("filter").addEventListener("input", draw);
  setInterval(() => {
    if (picture && picture.at) document.getElementById("updated").textContent = `updated ${since(picture.at)}`;
  }, 1000);
  connect();
});
