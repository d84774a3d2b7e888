// The plain RFC 8484 requests the glue answers itself (package abi, Front):
// their query is handed to the module as a question (abi.EventQuery) and
// the response written here exactly as the module's DoH handler writes it
// for the same request (doh.Handler's beginWire and writeWireBytes).
// Anything this file does not recognise as plain goes to the module whole,
// so its answer stays the handler's. No imports: glue_test.go runs these
// functions under node against the Go side.

// doh.MaxMessageSize, engine.PaddingBlock, abi.QueryAnswerHeaderSize and
// abi.QueryAnswerCacheable: edge/abi's test checks them.
export const MaxMessageSize = 65535;
export const PaddingBlock = 468;
export const QueryAnswerHeaderSize = 32;
export const QueryAnswerCacheable = 1;
export const QueryAnswerCacheHit = 2;
export const QueryAnswerShared = 4;
export const TraceSize = 34;
// engine.ResultLocal and engine.ResultStale.
export const ResultLocal = 3;
export const ResultStale = 5;

const HeaderSize = 12;
const RcodeServerFailure = 2;

// base64url digits: value + 1, 0 for any other byte.
const digits = new Uint8Array(128);
"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".split("").forEach((c, i) => {
  digits[c.charCodeAt(0)] = i + 1;
});

// dnsParam decodes a URL's search when it is exactly "?dns=" and unpadded
// base64url, as decodeDNSParam would; null for anything else (other
// parameters, escapes, padding, a bad length), which the module answers.
export function dnsParam(search) {
  if (!search.startsWith("?dns=")) return null;
  const n = search.length - 5;
  if (n === 0 || n % 4 === 1 || n > 87380) return null; // 87380: base64url of MaxMessageSize bytes
  const out = new Uint8Array((n * 3) >> 2);
  let acc = 0;
  let bits = 0;
  let o = 0;
  for (let i = 5; i < search.length; i++) {
    const c = search.charCodeAt(i);
    const d = c < 128 ? digits[c] : 0;
    if (d === 0) return null;
    acc = ((acc << 6) | (d - 1)) & 0xffffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (acc >> bits) & 0xff;
    }
  }
  return out;
}

// isDNSMessage reports whether a Content-Type is application/dns-message
// itself (ASCII case aside); a type with parameters goes to the module.
export function isDNSMessage(ct) {
  return ct !== null && ct.length === 23 && ct.toLowerCase() === "application/dns-message";
}

const TypeOPT = 41;
const TypeTSIG = 250;
const TypeTKEY = 249;
const TypeAXFR = 252;
const TypeIXFR = 251;
const TypeMAILA = 254;
const TypeMAILB = 253;

// plainEnd is doh's plainQueryType: the end of the question (after type
// and class) of a query with one question of ordinary labels, opcode
// QUERY, QR clear, no answer or authority records and at most an OPT
// with only Cookie and Padding options; 0 when the query is not plain.
export function plainEnd(q) {
  if (q.length < HeaderSize || (q[2] & 0xf8) !== 0 || q[4] !== 0 || q[5] !== 1 ||
      (q[6] | q[7] | q[8] | q[9]) !== 0 || q[10] !== 0 || q[11] > 1) {
    return 0;
  }
  let off = HeaderSize;
  for (;;) {
    if (off >= q.length) return 0;
    const n = q[off];
    if (n === 0) break;
    if (n > 63 || off + 1 + n > q.length) return 0;
    for (let i = off + 1; i <= off + n; i++) {
      const c = q[i] | 0x20; // letters in lower case; '-' (0x2d) and digits keep
      if (!(c >= 0x61 && c <= 0x7a || q[i] >= 0x30 && q[i] <= 0x39 || q[i] === 0x2d || q[i] === 0x5f)) return 0;
    }
    off += 1 + n;
  }
  const nameEnd = off + 1;
  if (nameEnd - HeaderSize > 255 || nameEnd + 4 > q.length) return 0;
  const qtype = (q[nameEnd] << 8) | q[nameEnd + 1];
  switch (qtype) {
    case TypeOPT: case TypeTSIG: case TypeTKEY: case TypeAXFR: case TypeIXFR: case TypeMAILA: case TypeMAILB:
      return 0;
  }
  off = nameEnd + 4;
  if (q[11] === 1 ? !plainOPT(q, off) : off !== q.length) return 0;
  return off;
}

// plainOPT is doh's plainOPT for the record at q[off:], the query's last.
function plainOPT(q, off) {
  if (q.length - off < 11 || q[off] !== 0 || q[off + 1] !== 0 || q[off + 2] !== TypeOPT || q[off + 6] !== 0) return false;
  const rdlen = (q[off + 9] << 8) | q[off + 10];
  let p = off + 11;
  if (q.length - p !== rdlen) return false;
  while (p < q.length) {
    if (q.length - p < 4) return false;
    if (q[p] !== 0 || q[p + 1] !== 10 && q[p + 1] !== 12) return false; // Cookie, Padding
    const n = 4 + ((q[p + 2] << 8) | q[p + 3]);
    if (n > q.length - p) return false;
    p += n;
  }
  return true;
}

// wantsPadding is engine.WantsPadding for a plain query ending its
// question at end: its OPT carries a Padding option.
function wantsPadding(q, end) {
  if (q[11] !== 1) return false;
  for (let p = end + 11; p + 4 <= q.length; p += 4 + ((q[p + 2] << 8) | q[p + 3])) {
    if (q[p] === 0 && q[p + 1] === 12) return true;
  }
  return false;
}

// servfail is the reply the handler writes for an empty one, for a plain
// query q whose question ends at end: engine.AppendErrorReply(q,
// SERVFAIL), then engine.PadReply when the query wants padding.
export function servfail(q, end) {
  const opt = q[11] === 1;
  let size = end + (opt ? 11 : 0);
  let pad = -1;
  if (opt && wantsPadding(q, end)) {
    pad = (PaddingBlock - ((size + 4) % PaddingBlock)) % PaddingBlock;
    if (size + 4 + pad > MaxMessageSize) pad = 0;
    size += 4 + pad;
  }
  const m = new Uint8Array(size);
  m[0] = q[0];
  m[1] = q[1];
  // QR, the opcode (QUERY: 0), RD and CD kept, RA, the rcode.
  m[2] = 0x80 | (q[2] & 0x01);
  m[3] = 0x80 | (q[3] & 0x10) | RcodeServerFailure;
  m[5] = 1;
  m[11] = opt ? 1 : 0;
  m.set(q.subarray(HeaderSize, end), HeaderSize);
  if (opt) {
    // root, OPT, UDP size 4096, TTL 0, then the Padding option's length.
    m.set([0, 0, TypeOPT, 0x10, 0, 0, 0, 0, 0], end);
    if (pad >= 0) {
      m[end + 9] = (4 + pad) >> 8;
      m[end + 10] = (4 + pad) & 0xff;
      m[end + 12] = 12;
      m[end + 13] = pad >> 8;
      m[end + 14] = pad & 0xff;
    }
  }
  return m;
}

// serverTiming is doh.ServerTiming for a question answer a.
export function serverTiming(a, v) {
  const flags = a[14];
  const result = a[12];
  if (flags & QueryAnswerCacheHit) return "source;desc=cache, attempts;desc=0, upstream;dur=0";
  if (flags & QueryAnswerShared) return "source;desc=shared, attempts;desc=0, upstream;dur=0";
  if (result === ResultLocal) return "source;desc=local, attempts;desc=0, upstream;dur=0";
  const source = result === ResultStale ? "stale" : "upstream";
  let us = Math.trunc(Number(v.getBigInt64(24, true)) / 1000); // Duration.Microseconds
  let dur = "";
  if (us < 0) {
    dur = "-";
    us = -us;
  }
  dur += Math.trunc(us / 1000);
  const frac = us % 1000;
  if (frac !== 0) dur += "." + String(frac).padStart(3, "0").replace(/0+$/, "");
  return `source;desc=${source}, attempts;desc=${v.getUint32(8, true)}, upstream;dur=${dur}`;
}

const hexDigits = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));

function hex(b) {
  let s = "";
  for (let i = 0; i < b.length; i++) s += hexDigits[b[i]];
  return s;
}

// newTrace is doh.NewTrace for a request's traceparent header (null for
// none; several values arrive joined by commas and so do not parse):
// abi's TraceSize bytes, ID (16), Parent (8), Span (8), Flags, HasParent.
export function newTrace(traceparent) {
  const t = new Uint8Array(TraceSize);
  if (traceparent !== null && parseTraceparent(traceparent, t)) {
    t[33] = 1;
    while (zero(t, 24, 32)) crypto.getRandomValues(t.subarray(24, 32));
    return t;
  }
  t.fill(0);
  crypto.getRandomValues(t.subarray(0, 32)); // the ID, the parent (cleared), the span
  t.fill(0, 16, 24);
  while (zero(t, 0, 16)) crypto.getRandomValues(t.subarray(0, 16));
  while (zero(t, 24, 32)) crypto.getRandomValues(t.subarray(24, 32));
  return t;
}

function zero(b, from, to) {
  for (let i = from; i < to; i++) if (b[i] !== 0) return false;
  return true;
}

// parseTraceparent is doh's parseTraceparent into the trace bytes t.
function parseTraceparent(v, t) {
  if (v.length < 55 || v[2] !== "-" || v[35] !== "-" || v[52] !== "-") return false;
  const version = lowerHex(v, 0, 1);
  if (version === null || version[0] === 0xff) return false;
  if (version[0] === 0 && v.length !== 55 || v.length > 55 && v[55] !== "-") return false;
  const id = lowerHex(v, 3, 16);
  const parent = lowerHex(v, 36, 8);
  const flags = lowerHex(v, 53, 1);
  if (id === null || parent === null || flags === null) return false;
  t.set(id, 0);
  t.set(parent, 16);
  t[32] = flags[0];
  return id.some((x) => x !== 0) && parent.some((x) => x !== 0);
}

function lowerHex(s, off, n) {
  const out = new Uint8Array(n);
  for (let i = 0; i < 2 * n; i++) {
    const c = s.charCodeAt(off + i);
    let d;
    if (c >= 0x30 && c <= 0x39) d = c - 0x30;
    else if (c >= 0x61 && c <= 0x66) d = c - 0x61 + 10;
    else return null;
    out[i >> 1] |= i & 1 ? d : d << 4;
  }
  return out;
}

// traceResponse is doh.AppendTraceResponse for the trace bytes t.
export function traceResponse(t) {
  return `00-${hex(t.subarray(0, 16))}-${hex(t.subarray(24, 32))}-${hex(t.subarray(32, 33))}`;
}

// response is the handler's response to the plain query q (question
// ending at end) from a question answer a (abi.QueryAnswer), with the
// operator headers front (abi.Front) asks for; trace is the question's
// (newTrace) when front.trace_context. It returns the status, the body
// and the headers (name: value) in the handler's order.
export function response(q, end, a, front, trace) {
  const v = new DataView(a.buffer, a.byteOffset, a.byteLength);
  let off = QueryAnswerHeaderSize;
  off += 4 + v.getUint32(off, true); // QName
  off += 4 + v.getUint32(off, true); // Scope
  const n = v.getUint32(off, true);
  let wire = a.subarray(off + 4, off + 4 + n);
  let cc = "no-store";
  if (wire.length < HeaderSize) {
    wire = servfail(q, end);
  } else if (a[14] & QueryAnswerCacheable) {
    cc = "max-age=" + v.getUint32(4, true);
  }
  // A record, not a list of pairs: workerd's Response takes it faster
  // (a V8 profile), and its keys keep this order.
  const headers = {
    "content-type": "application/dns-message",
    "content-length": String(wire.length),
    "cache-control": cc,
    "vary": "Accept",
  };
  if (front.server_timing) headers["server-timing"] = serverTiming(a, v);
  if (front.trace_context) headers["traceresponse"] = traceResponse(trace);
  return { status: 200, body: wire, headers };
}
