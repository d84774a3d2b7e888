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
// waiting is promises (sockets.mjs) and one timer. The engine state
// (cache, coalescing, demotion marks) is the isolate's.

import wasmModule from "./dohfwd.wasm";
import { createWasi, ProcExit } from "./wasi.mjs";
import { createSockets } from "./sockets.mjs";

// abi.InitTCPOnly, the event kinds and sizes; edge/abi checks these
// constants against package abi.
const InitTCPOnly = 1;
const EventRequest = 1;
const EventCancel = 2;
const EventHeaderSize = 36;
const PollHeaderSize = 8;

// abi.ForwardedHeaders: the request headers the DoH handling reads; the rest stay here.
const FORWARDED = ["accept", "content-type", "content-length", "x-forwarded-for", "forwarded", "user-agent"];

const enc = new TextEncoder();
const dec = new TextDecoder();

let instance = null; // a promise of the isolate's instance

// Instance drives one module instance: the only caller of its exports.
class Instance {
  constructor(exports, sockets) {
    this.exports = exports;
    this.sockets = sockets;
    this.events = []; // encoded events for the next poll
    this.calls = new Map(); // request ID -> { resolve, reject }
    this.nextId = 1;
    this.scheduled = false;
    this.timer = null;
    this.broken = null;
    this.quietWaiters = []; // resolved when no request is in progress
  }

  // quiet resolves once no request is in progress. A poll runs in the
  // context of whichever request's event or timer started it, and the
  // sockets, reads and timer it sets up belong to that request: Workers
  // cancel a request's continuations once it has ended. Each request
  // therefore stays alive (waitUntil) until the instance is quiet.
  quiet() {
    if (this.calls.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.quietWaiters.push(resolve));
  }

  settle() {
    if (this.calls.size !== 0) return;
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

  // event queues one event (abi.AppendEvent) and a poll to hand it in.
  event(kind, id, code, data) {
    const b = new Uint8Array(EventHeaderSize + (data ? data.length : 0));
    const v = new DataView(b.buffer);
    v.setUint32(0, kind, true);
    v.setUint32(4, id, true);
    v.setUint32(8, code, true);
    // The peer's port and address stay zero: over TCP the engine reads
    // only the stream.
    v.setUint32(32, data ? data.length : 0, true);
    if (data) b.set(data, EventHeaderSize);
    this.events.push(b);
    this.schedule();
  }

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    queueMicrotask(() => {
      this.scheduled = false;
      this.poll();
    });
  }

  // poll hands the events in, the answers out, and sets the timer for
  // the module's next deadline.
  poll() {
    if (this.broken) return;
    const events = this.events;
    this.events = [];
    const input = new Uint8Array(events.reduce((n, e) => n + e.length, 0));
    let off = 0;
    for (const e of events) {
      input.set(e, off);
      off += e.length;
    }
    let out;
    try {
      this.put(input);
      const n = this.exports.dohfwd_poll(BigInt(Date.now()) * 1000000n, input.length);
      out = this.view(n).slice();
    } catch (err) {
      return this.fail(err instanceof ProcExit ? new Error(err.message) : err);
    }
    const v = new DataView(out.buffer);
    const deadline = Number(v.getBigInt64(0, true) / 1000000n);
    off = PollHeaderSize;
    while (off < out.length) {
      const id = v.getUint32(off, true);
      const len = v.getUint32(off + 4, true);
      const resp = out.subarray(off + 8, off + 8 + len);
      off += 8 + len;
      const c = this.calls.get(id);
      this.calls.delete(id);
      if (c) c.resolve(resp);
    }
    this.settle();
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.poll(), Math.max(0, deadline - Date.now()));
  }

  // fail ends every request with err; the next request starts a new instance.
  fail(err) {
    this.broken = err;
    clearTimeout(this.timer);
    this.sockets.closeAll();
    for (const c of this.calls.values()) c.reject(err);
    this.calls.clear();
    this.settle();
    if (this.promise === instance) instance = null;
  }

  // serve hands one encoded request in and resolves to its encoded
  // response; a signal that aborts tells the module its client went away.
  serve(req, signal) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.calls.set(id, { resolve, reject });
      this.event(EventRequest, id, 0, req);
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
  return it;
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

export default {
  async fetch(request, env, ctx) {
    const url = new URL(request.url);
    const body = request.method === "POST" ? new Uint8Array(await request.arrayBuffer()) : new Uint8Array(0);
    const headers = [["Host", url.host]];
    for (const k of FORWARDED) {
      const v = request.headers.get(k);
      if (v !== null) headers.push([k, v]);
    }
    const ip = request.headers.get("cf-connecting-ip");
    const remote = ip ? (ip.includes(":") ? `[${ip}]:0` : `${ip}:0`) : "[::]:0";
    const req = encodeRequest(request.method, url.pathname + url.search, remote, body, headers);

    if (!instance) {
      instance = setup(env);
      instance.catch(() => { instance = null; });
    }
    const it = await instance;
    it.promise ??= instance;
    const answer = it.serve(req, request.signal ?? null);
    ctx?.waitUntil(it.quiet());
    const resp = decodeResponse(await answer);
    return new Response(resp.status === 204 || resp.status === 304 ? null : resp.body, {
      status: resp.status,
      headers: resp.headers,
    });
  },
};
