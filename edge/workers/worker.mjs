// dohfwd on Cloudflare Workers: every request goes through the same
// WebAssembly module as the wazero host (dist/dohfwd.wasm), with the
// configuration from the DOHFWD_CONFIG binding (the YAML encoded by
// `dohfwd-edge -encode-config`: the module reads no YAML) and TCP as the only
// upstream transport.
//
// One instance per isolate answers every request the isolate gets, all at
// once, through the asynchronous ABI of package edge/abi: requests,
// cancels and socket results are events handed in with dohfwd_poll, which
// returns the finished answers and the time to call it again. Nothing
// waits inside the module, so no JSPI: a poll is an ordinary call, and the
// waiting is promises (sockets.mjs) and timers. The engine state
// (cache, coalescing, demotion marks) is the isolate's.
//
// A plain RFC 8484 request (rfc8484.mjs) goes in as its DNS question
// (EventQuery) and its response is written here, as the module's DoH
// handler would write it, when the module says nothing configured adds to
// that (abi.Front, read once from dohfwd_status): Go compiled to wasm is
// several times slower than V8 at the HTTP part. Every other request goes
// in whole (EventRequest), so its answer stays the handler's.

import wasmModule from "./dohfwd.wasm";
import { createWasi, ProcExit } from "./wasi.mjs";
import { createSockets } from "./sockets.mjs";
import { dnsParam, isDNSMessage, plainEnd, newTrace, response, MaxMessageSize, TraceSize } from "./rfc8484.mjs";

// abi.InitTCPOnly, the event kinds and sizes; edge/abi checks these
// constants against package abi.
const InitTCPOnly = 1;
const EventRequest = 1;
const EventCancel = 2;
const EventQuery = 5;
const QueryTrace = 2;
const EventHeaderSize = 36;
const PollHeaderSize = 8;

// After AskMissRun questions in a row that dohfwd_ask did not answer (a
// cache that is off, names all new), only one in AskMissProbe is asked
// until one is answered, as the wazero host does (edge/host askNow): an
// ask that answers nothing costs a call the poll repeats.
const AskMissRun = 8;
const AskMissProbe = 8;

// KeepAlive (ms) is how often a waiting request's own timer comes round
// when the instance's timer is in another request's context.
const KeepAlive = 5000;

// abi.ForwardedHeaders: the request headers the DoH handling reads; the rest stay here.
const FORWARDED = ["accept", "content-type", "content-length", "x-forwarded-for", "forwarded", "user-agent", "traceparent"];

const enc = new TextEncoder();
const dec = new TextDecoder();

let instance = null; // a promise of the isolate's instance
let ready = null; // the instance, once it is ready

// Instance drives one module instance: the only caller of its exports.
class Instance {
  constructor(exports, sockets) {
    this.exports = exports;
    this.sockets = sockets;
    this.events = []; // events for the next poll: [kind, id, code, data]
    this.eventBytes = 0; // their encoded length
    this.calls = new Map(); // request ID -> { resolve, reject }
    this.nextId = 1;
    this.scheduled = false;
    this.polling = false; // inside dohfwd_poll
    this.deadline = 0; // the module's next deadline (Date.now() ms)
    this.wakeAt = Infinity; // when the instance's timer fires
    this.wakeToken = null; // the live timer's { owner }
    this.broken = null;
    this.quietWaiters = []; // resolved when no request is in progress
    this.front = { path: "", questions: false, server_timing: false, trace_context: false }; // abi.Front
    this.canAsk = typeof exports.dohfwd_ask === "function"; // optional (abi.OptionalExports)
    this.askMisses = 0; // asks in a row that answered nothing
    this.askSkips = 0;
  }

  // ask answers a question (EventQuery's code and data) at once with
  // dohfwd_ask (abi.ExportAsk) when the module has it in memory (a cache
  // hit, a local name): no poll, no call ID, no timer, no promise, and the
  // response before any await. It asks only between polls: none under
  // way or scheduled and no event waiting, as the contract wants (a
  // deadline that passed meanwhile is the timer's poll, as before); null
  // when not asked or not answered (the module then started nothing: the
  // question goes by a poll). A trap fails the instance (broken).
  ask(code, data) {
    if (!this.canAsk || this.broken || this.polling || this.scheduled || this.events.length !== 0) return null;
    if (this.askMisses >= AskMissRun && ++this.askSkips % AskMissProbe !== 0) return null;
    this.events.push([EventQuery, 0, code, data]);
    this.eventBytes += EventHeaderSize + data.length;
    let n;
    try {
      n = this.exports.dohfwd_ask(this.encode()) >>> 0;
    } catch (err) {
      this.fail(err instanceof ProcExit ? new Error(err.message) : err);
      return null;
    }
    if (n === 0) {
      this.askMisses++;
      return null;
    }
    this.askMisses = 0;
    const ptr = this.exports.dohfwd_buffer(0) >>> 0;
    return new Uint8Array(this.exports.memory.buffer).slice(ptr, ptr + n); // the buffer is the next call's
  }

  // quiet resolves once no request is in progress. A poll runs in the
  // context of whichever request's event or timer started it, and the
  // sockets and reads it sets up belong to that request: Workers cancel a
  // request's continuations once it has ended. Each request therefore
  // stays alive (waitUntil) until the instance is quiet.
  quiet() {
    if (this.calls.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.quietWaiters.push(resolve));
  }

  settle() {
    if (this.calls.size !== 0) return;
    // Every request ends now, and with them the timer: it is left to go
    // with its request rather than cleared, and does nothing if it fires.
    this.wakeToken = null;
    this.wakeAt = Infinity;
    const waiters = this.quietWaiters;
    this.quietWaiters = [];
    for (const resolve of waiters) resolve();
  }

  put(b) {
    const ptr = this.exports.dohfwd_buffer(b.length) >>> 0;
    new Uint8Array(this.exports.memory.buffer, ptr, b.length).set(b);
  }

  view(n) {
    const ptr = this.exports.dohfwd_buffer(0) >>> 0;
    return new Uint8Array(this.exports.memory.buffer, ptr, n >>> 0);
  }

  // event queues one event (abi.AppendEvent) and hands it in: at once,
  // in the context of the request or socket it comes from, unless a poll
  // is already due or under way (then it joins the next). workerd runs
  // the microtasks after each socket's or request's own turn, so a
  // microtask per event batched nothing and cost a hop per question.
  // owner is the request whose context this runs in, when known (0 if not).
  event(kind, id, code, data, owner = 0) {
    this.events.push([kind, id, code, data]);
    this.eventBytes += EventHeaderSize + (data ? data.length : 0);
    if (this.scheduled || this.polling) this.schedule();
    else this.poll(owner);
  }

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    queueMicrotask(() => {
      this.scheduled = false;
      this.poll();
    });
  }

  // encode writes the queued events into the module's buffer, as
  // abi.AppendEvent lays them out, and returns their length.
  encode() {
    const n = this.eventBytes;
    const ptr = this.exports.dohfwd_buffer(n) >>> 0;
    const mem = this.exports.memory.buffer;
    const b = new Uint8Array(mem, ptr, n);
    const v = new DataView(mem, ptr, n);
    let off = 0;
    for (const [kind, id, code, data] of this.events) {
      v.setUint32(off, kind, true);
      v.setUint32(off + 4, id, true);
      v.setUint32(off + 8, code, true);
      // The peer's port and address stay zero: over TCP the engine reads
      // only the stream, and a question names no client (abi.Front).
      b.fill(0, off + 12, off + 32);
      const len = data ? data.length : 0;
      v.setUint32(off + 32, len, true);
      if (len) b.set(data, off + EventHeaderSize);
      off += EventHeaderSize + len;
    }
    this.events = [];
    this.eventBytes = 0;
    return n;
  }

  // poll hands the events in, the answers out, and sets the timer for
  // the module's next deadline (wake), in the context it runs in, that of
  // request owner when known.
  poll(owner = 0) {
    if (this.broken) return;
    let n;
    this.polling = true;
    try {
      n = this.exports.dohfwd_poll(BigInt(Date.now()) * 1000000n, this.encode()) >>> 0;
    } catch (err) {
      return this.fail(err instanceof ProcExit ? new Error(err.message) : err);
    } finally {
      this.polling = false;
    }
    const ptr = this.exports.dohfwd_buffer(0) >>> 0;
    const mem = new Uint8Array(this.exports.memory.buffer);
    const v = new DataView(this.exports.memory.buffer, ptr, n);
    // The deadline in ms, without BigInt arithmetic (exact to well under 1 µs).
    const deadline = (v.getInt32(4, true) * 4294967296 + v.getUint32(0, true)) / 1e6;
    let off = PollHeaderSize;
    while (off < n) {
      const id = v.getUint32(off, true);
      const len = v.getUint32(off + 4, true);
      const start = ptr + off + 8;
      off += 8 + len;
      const c = this.calls.get(id);
      if (!c) continue;
      this.calls.delete(id);
      c.resolve(mem.slice(start, start + len)); // the buffer is the next poll's
    }
    this.settle();
    this.sockets.release(this.calls.size === 0);
    // Rounded up: a timer set for the deadline then finds it passed.
    this.deadline = Math.ceil(deadline);
    // While requests are in progress a timer that fires no later than
    // the deadline is kept (an early poll costs little, a new timer on
    // every poll does); once quiet there is no request left for one.
    if (this.calls.size !== 0 && this.deadline < this.wakeAt) this.wake(owner);
  }

  // wake sets the instance's timer for the deadline, in the current
  // context. A timer replaced by an earlier one is not cleared: it does
  // nothing when it fires, beyond keeping its owner's request alive.
  wake(owner) {
    const token = { owner };
    this.wakeToken = token;
    this.wakeAt = this.deadline;
    setTimeout(() => {
      if (this.wakeToken === token) {
        this.wakeToken = null;
        this.wakeAt = Infinity;
        if (this.calls.size !== 0) this.poll(owner);
      }
      if (owner !== 0 && this.calls.has(owner) && this.wakeToken?.owner !== owner) this.keep(owner);
    }, Math.max(1, this.deadline - Date.now()));
  }

  // keep gives the waiting call id's request a timer of its own. workerd
  // cancels a request as hung ("would never generate a response", HTTP
  // 500) when nothing is pending in its own context, and a follower of a
  // coalesced question (its answer comes from the leader's socket) or a
  // question whose socket another request's poll opened has nothing else
  // there (TestWorkerd "coalesced questions from 50 clients"). A
  // one-stream question's own poll sets the instance's timer in its
  // context, so it needs none.
  keep(id) {
    setTimeout(() => {
      if (this.calls.has(id)) this.keep(id);
    }, KeepAlive);
  }

  // fail ends every request with err; the next request starts a new instance.
  fail(err) {
    this.broken = err;
    this.sockets.closeAll();
    for (const c of this.calls.values()) c.reject(err);
    this.calls.clear();
    this.settle();
    if (this.promise === instance) instance = null;
    if (ready === this) ready = null;
  }

  // call hands one event in (an encoded request, or a question with its
  // flags in code) and
  // resolves to its answer; a signal that aborts tells the module its
  // client went away.
  call(kind, data, signal, code = 0) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.calls.set(id, { resolve, reject });
      this.event(kind, id, code, data, id);
      if (this.calls.has(id) && this.wakeToken?.owner !== id) this.keep(id);
      signal?.addEventListener("abort", () => {
        if (this.calls.has(id)) this.event(EventCancel, id, 0, null);
      }, { once: true });
    });
  }
}

async function setup(env) {
  const wasi = createWasi({ log: console });
  let it = null;
  let exports = null;
  const sockets = createSockets(() => exports.memory, (kind, fd, code, _peer, data) => it.event(kind, fd, code, data));
  const inst = await WebAssembly.instantiate(wasmModule, {
    wasi_snapshot_preview1: wasi.imports(wasmModule),
    dohfwd: sockets.imports,
  });
  exports = inst.exports;
  wasi.setMemory(exports.memory);
  it = new Instance(exports, sockets);
  exports._initialize();
  const config = enc.encode(env.DOHFWD_CONFIG || "");
  it.put(config);
  const errLen = exports.dohfwd_init(config.length, InitTCPOnly);
  if (errLen !== 0) {
    throw new Error("dohfwd config: " + dec.decode(it.view(errLen)));
  }
  it.front = status(it).front ?? it.front;
  return it;
}

// status is the module's dohfwd_status (abi.Status).
function status(it) {
  return JSON.parse(dec.decode(it.view(it.exports.dohfwd_status())));
}

function appendField(parts, v) {
  const b = typeof v === "string" ? enc.encode(v) : v;
  const len = new Uint8Array(4);
  new DataView(len.buffer).setUint32(0, b.length, true);
  parts.push(len, b);
}

// encodeRequest lays out a request as package edge/abi does.
function encodeRequest(method, target, remote, body, headers) {
  const parts = [];
  appendField(parts, method);
  appendField(parts, target);
  appendField(parts, remote);
  appendField(parts, body);
  for (const [k, v] of headers) {
    appendField(parts, k);
    appendField(parts, v);
  }
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

function decodeResponse(b) {
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const status = v.getUint32(0, true);
  let off = 4;
  const field = () => {
    const n = v.getUint32(off, true);
    const f = b.subarray(off + 4, off + 4 + n);
    off += 4 + n;
    return f;
  };
  const body = field();
  const headers = new Headers();
  while (off < b.length) {
    const k = dec.decode(field());
    headers.append(k, dec.decode(field()));
  }
  return { status, body, headers };
}

// question answers a plain RFC 8484 request whose query is q (its
// question ending at end) with the module's engine alone: at once when
// the module has the answer in memory (Instance.ask), else by a poll. Not
// an async function, nor is fetch on this path: each await and each async
// return is a promise hop per question.
function question(it, q, end, request, ctx) {
  let code = 0;
  let data = q;
  let trace = null;
  if (it.front.trace_context) {
    trace = newTrace(request.headers.get("traceparent"));
    code = QueryTrace;
    data = new Uint8Array(TraceSize + q.length);
    data.set(trace);
    data.set(q, TraceSize);
  }
  const a = it.ask(code, data);
  if (a !== null) {
    const resp = response(q, end, a, it.front, trace);
    return new Response(resp.body, { status: resp.status, headers: resp.headers });
  }
  if (it.broken) return Promise.reject(it.broken);
  const answer = it.call(EventQuery, data, request.signal ?? null, code);
  ctx?.waitUntil(it.quiet());
  return answer.then((a) => {
    const resp = response(q, end, a, it.front, trace);
    return new Response(resp.body, { status: resp.status, headers: resp.headers });
  });
}

export default {
  // fetch answers a plain GET at once on the ready instance (question
  // returns the response's promise); every other request is serve's.
  fetch(request, env, ctx) {
    const it = ready;
    if (it !== null && !it.broken) {
      const plain = plainGET(it, request);
      if (plain) return question(it, plain.query, plain.end, request, ctx);
    }
    return serve(request, env, ctx);
  },
};

// plainGET returns a plain GET's query and its question's end, read off the
// URL as it came when it needs no normalising, or null: the URL parser
// then decides.
function plainGET(it, request) {
  if (!it.front.questions || request.method !== "GET") return null;
  const u = request.url;
  const start = u.indexOf("/", u.indexOf("//") + 2);
  const q = u.indexOf("?", start);
  if (start <= 0 || q <= 0 || u.slice(start, q) !== it.front.path) return null;
  const query = dnsParam(u.slice(q));
  const end = query ? plainEnd(query) : 0;
  return end ? { query, end } : null;
}

// serve answers any request fetch did not: it waits for the instance on
// the first, which may be a plain GET too.
async function serve(request, env, ctx) {
  let it = ready;
  if (it === null || it.broken) {
    if (!instance) {
      instance = setup(env);
      instance.catch(() => { instance = null; });
    }
    it = await instance;
    it.promise ??= instance;
    if (!it.broken) ready = it;
    const plain = plainGET(it, request);
    if (plain) return question(it, plain.query, plain.end, request, ctx);
  }
  const url = new URL(request.url);

  // DOHFWD_STATUS_PATH, when bound, serves the module's status there
  // (the tests read it; keep it unset or secret in production).
  if (env.DOHFWD_STATUS_PATH && url.pathname === env.DOHFWD_STATUS_PATH) {
    return Response.json(status(it));
  }

  let body = null;
  if (it.front.questions && url.pathname === it.front.path) {
    let q = null;
    if (request.method === "GET") {
      q = dnsParam(url.search);
    } else if (request.method === "POST" && isDNSMessage(request.headers.get("content-type"))) {
      const cl = request.headers.get("content-length");
      body = new Uint8Array(await request.arrayBuffer());
      if (body.length <= MaxMessageSize && (cl === null || Number(cl) <= MaxMessageSize)) q = body;
    }
    const end = q ? plainEnd(q) : 0;
    if (end) return question(it, q, end, request, ctx);
  }

  if (body === null) {
    body = request.method === "POST" ? new Uint8Array(await request.arrayBuffer()) : new Uint8Array(0);
  }
  const headers = [["Host", url.host]];
  for (const k of FORWARDED) {
    const v = request.headers.get(k);
    if (v !== null) headers.push([k, v]);
  }
  const ip = request.headers.get("cf-connecting-ip");
  const remote = ip ? (ip.includes(":") ? `[${ip}]:0` : `${ip}:0`) : "[::]:0";
  const req = encodeRequest(request.method, url.pathname + url.search, remote, body, headers);
  const answer = it.call(EventRequest, req, request.signal ?? null);
  ctx?.waitUntil(it.quiet());
  const resp = decodeResponse(await answer);
  return new Response(resp.status === 204 || resp.status === 304 ? null : resp.body, {
    status: resp.status,
    headers: resp.headers,
  });
}
