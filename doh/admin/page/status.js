// dohfwd's status page: reads /status and /metrics every REFRESH ms and
// draws the servers of each scope (state, demotion countdown, recent
// outcomes, attempt latency percentiles), the rates and the counters.
"use strict";

const REFRESH = 2000;
let offset = 0;     // server clock minus browser clock, ms
let prev = null;    // the previous /metrics sample, for rates and windows
let status = null;

// Short marks for the recent outcomes.
const MARK = { answer: "✓", nxdomain: "n", truncated: "t", timeout: "T", rcode: "R",
  send_error: "S", recv_error: "E", connect_error: "C", local_error: "L", cancelled: "c" };

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}

// parseMetrics reads the Prometheus text format into samples.
function parseMetrics(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    const re = /(\w+)="((?:[^"\\]|\\.)*)"/g;
    let l;
    while ((l = re.exec(m[3] || "")) !== null) labels[l[1]] = l[2].replace(/\\(.)/g, "$1");
    out.push({ name: m[1], labels, value: parseFloat(m[4]) });
  }
  return out;
}

function sum(samples, name, match) {
  let s = 0;
  for (const x of samples) if (x.name === name && (!match || match(x.labels))) s += x.value;
  return s;
}

// histograms returns, per server, the cumulative bucket counts by le.
function histograms(samples) {
  const h = {};
  for (const x of samples) {
    if (x.name !== "dohfwd_upstream_attempt_duration_seconds_bucket") continue;
    (h[x.labels.server] ||= {})[x.labels.le] = x.value;
  }
  return h;
}

// quantile of a cumulative histogram {le: count}, interpolated in its bucket.
function quantile(buckets, q) {
  const les = Object.keys(buckets).map(le => [le === "+Inf" ? Infinity : parseFloat(le), buckets[le]])
    .sort((a, b) => a[0] - b[0]);
  const total = les.length ? les[les.length - 1][1] : 0;
  if (!total) return null;
  const rank = q * total;
  let lo = 0, below = 0;
  for (const [le, n] of les) {
    if (n >= rank) {
      if (le === Infinity) return lo;
      return lo + (le - lo) * ((rank - below) / Math.max(n - below, 1));
    }
    lo = le; below = n;
  }
  return lo;
}

function ms(s) { return s === null ? "–" : (s * 1000).toFixed(s < 0.01 ? 2 : 1) + " ms"; }

function countdown(untilISO) {
  const left = Math.max(0, Date.parse(untilISO) - (Date.now() + offset));
  const s = Math.ceil(left / 1000);
  return (s >= 60 ? Math.floor(s / 60) + "m " : "") + (s % 60) + "s";
}

function drawScopes(st, hist, window) {
  const root = document.getElementById("scopes");
  root.replaceChildren();
  const scopes = (st.scopes || []).map(s => ({ name: s.name, domains: s.domains || [], servers: s.servers }));
  scopes.push({ name: "fallback", domains: [], servers: (st.fallback_servers || []).map(a => ({ address: a, fallback: true })) });
  for (const sc of scopes) {
    const box = el("div", { class: "scope", "data-scope": sc.name });
    box.append(el("h3", {}, sc.name + (sc.domains.length ? "  (" + sc.domains.join(", ") + ")" : "")));
    const t = el("table");
    t.append(el("thead", {}, el("tr", {}, ...["server", "state", "demoted for", "recent outcomes", "p50", "p90", "p99", "attempts"].map(h => el("th", {}, h)))));
    const body = el("tbody");
    if (!sc.servers.length) body.append(el("tr", {}, el("td", { colspan: "8", class: "muted" }, "no servers")));
    for (const sv of sc.servers) {
      const state = sv.fallback ? "fallback" : sv.demoted ? "demoted" : "ok";
      const cum = hist.cur[sv.address] || {};
      const win = window ? hist.delta[sv.address] : null;
      const use = win && win["+Inf"] > 0 ? win : cum;
      const cd = el("td", { class: "countdown" }, sv.demoted && sv.demoted_until ? countdown(sv.demoted_until) : "");
      if (sv.demoted && sv.demoted_until) cd.setAttribute("data-until", sv.demoted_until);
      const outcomes = el("td", { class: "outcomes" });
      for (const o of sv.recent || []) outcomes.append(el("span", { class: "o-" + o, title: o }, MARK[o] || "?"));
      body.append(el("tr", { class: "server", "data-address": sv.address, "data-state": state },
        el("td", {}, sv.address), el("td", { class: "state" }, state), cd, outcomes,
        el("td", { class: "num" }, ms(quantile(use, 0.5))), el("td", { class: "num" }, ms(quantile(use, 0.9))),
        el("td", { class: "num" }, ms(quantile(use, 0.99))), el("td", { class: "num" }, String(cum["+Inf"] || 0))));
    }
    t.append(body);
    box.append(t);
    root.append(box);
  }
}

function rows(id, list) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren(...list.map(r => el("tr", {}, el("td", {}, r[0]), ...r.slice(1).map(v => el("td", { class: "num" }, v)))));
}

function drawRates(cur, dt) {
  const rate = (name, match) => {
    const now = sum(cur, name, match);
    if (!prev || dt <= 0) return ["–", String(now)];
    return [((now - sum(prev.samples, name, match)) / dt).toFixed(1), String(now)];
  };
  const list = [["DoH requests", ...rate("dohfwd_doh_requests_total")]];
  for (const r of ["answer", "nxdomain", "local", "unavailable", "cancelled"])
    list.push(["questions " + r, ...rate("dohfwd_questions_total", l => l.result === r)]);
  list.push(["upstream attempts", ...rate("dohfwd_attempts_total")]);
  list.push(["upstream failed", ...rate("dohfwd_upstream_failed_total")]);
  list.push(["cache hits", ...rate("dohfwd_cache_hits_total")]);
  rows("rates", list);
}

function drawCounters(st) {
  const c = st.counters || {};
  const list = [["in flight", st.in_flight + " / " + st.in_flight_ceiling]];
  for (const k of ["upstream_failed", "refused", "cancelled", "mismatched_replies", "cache_hits"]) list.push([k, String(c[k] ?? 0)]);
  for (const [k, v] of Object.entries(c.attempts || {}).sort()) list.push(["attempts " + k, String(v)]);
  rows("counters", list);
}

function tick() {
  for (const td of document.querySelectorAll("td.countdown[data-until]")) td.textContent = countdown(td.dataset.until);
}

async function refresh() {
  try {
    const [sr, mr] = await Promise.all([fetch("/status", { cache: "no-store" }), fetch("/metrics", { cache: "no-store" })]);
    if (!sr.ok) throw new Error("/status: " + sr.status);
    status = await sr.json();
    const samples = mr.ok ? parseMetrics(await mr.text()) : [];
    const at = Date.now();
    offset = Date.parse(status.now) - at;
    const cur = histograms(samples);
    const delta = {};
    if (prev) {
      for (const [srv, b] of Object.entries(cur)) {
        delta[srv] = {};
        for (const [le, n] of Object.entries(b)) delta[srv][le] = n - ((prev.hist[srv] || {})[le] || 0);
      }
    }
    const dt = prev ? (at - prev.at) / 1000 : 0;
    document.getElementById("version").textContent = "version " + status.version;
    document.getElementById("config").textContent = "config " + status.config;
    document.getElementById("uptime").textContent = "up " + Math.round((Date.parse(status.now) - Date.parse(status.started)) / 1000) + " s";
    drawScopes(status, { cur, delta }, !!prev);
    drawRates(samples, dt);
    drawCounters(status);
    prev = { samples, hist: cur, at };
    document.getElementById("updated").textContent = "updated " + new Date(at).toLocaleTimeString();
    document.getElementById("error").hidden = true;
    document.body.dataset.loaded = "1";
  } catch (err) {
    const e = document.getElementById("error");
    e.textContent = "cannot refresh: " + err.message;
    e.hidden = false;
  }
}

refresh();
setInterval(refresh, REFRESH);
setInterval(tick, 1000);
