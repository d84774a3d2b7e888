// dohfwd on Cloudflare Workers: every request goes through the same
// WebAssembly module as the wazero host (dist/dohfwd.wasm), with the
// configuration YAML from the DOHFWD_CONFIG binding and TCP as the only
// upstream transport.
//
// An instance runs one call at a time: the module is single-threaded and
// its stack is suspended (JSPI) while it waits for a socket or a timer, so
// calls are queued on a promise chain. Concurrency comes from the platform
// running many isolates (each with its own instance) side by side; engine
// state (demotion marks, cache) is per instance, as on the wazero host.

import wasmModule from "./dohfwd.wasm";
import { createWasi, ProcExit } from "./wasi.mjs";
import { createSockets } from "./sockets.mjs";

// abi.InitTCPOnly; edge/abi checks these constants against package abi.
const InitTCPOnly = 1;

// abi.ForwardedHeaders: the request headers the DoH handling reads; the rest stay here.
const FORWARDED = ["accept", "content-type", "content-length", "x-forwarded-for", "forwarded", "user-agent"];

let instance = null; // { call(name, ...args), put(bytes), result(n) } once set up
let queue = Promise.resolve();

async function setup(env) {
  const wasi = createWasi({ log: console });
  let exports;
  const sockets = createSockets(() => exports.memory);
  const inst = await WebAssembly.instantiate(wasmModule, {
    wasi_snapshot_preview1: wasi.imports(wasmModule),
    dohfwd: sockets.imports,
  });
  exports = inst.exports;
  wasi.setMemory(exports.memory);
  const promising = {};
  for (const name of ["_initialize", "dohfwd_buffer", "dohfwd_init", "dohfwd_serve", "dohfwd_status"]) {
    promising[name] = WebAssembly.promising(exports[name]);
  }
  const it = {
    call: (name, ...args) => promising[name](...args),
    async put(b) {
      const ptr = (await it.call("dohfwd_buffer", b.length)) >>> 0;
      new Uint8Array(exports.memory.buffer, ptr, b.length).set(b);
    },
    async result(n) {
      const ptr = (await it.call("dohfwd_buffer", 0)) >>> 0;
      return new Uint8Array(exports.memory.buffer, ptr, n >>> 0).slice();
    },
    closeAll: sockets.closeAll,
    setSignal: sockets.setSignal,
  };
  await it.call("_initialize");
  const yaml = new TextEncoder().encode(env.DOHFWD_CONFIG || "");
  await it.put(yaml);
  const errLen = await it.call("dohfwd_init", yaml.length, InitTCPOnly);
  if (errLen !== 0) {
    throw new Error("dohfwd config: " + new TextDecoder().decode(await it.result(errLen)));
  }
  return it;
}

// serialise runs f after every call queued before it.
function serialise(f) {
  const run = queue.then(f, f);
  queue = run.catch(() => {});
  return run;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

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
  async fetch(request, env) {
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

    const out = await serialise(async () => {
      try {
        instance ??= await setup(env);
        // The socket imports give up (abi.Cancelled) once the client has
        // gone, so the module's engine cancels the question as natively.
        instance.setSignal(request.signal ?? null);
        await instance.put(req);
        const n = await instance.call("dohfwd_serve", req.length);
        return await instance.result(n);
      } catch (err) {
        // A trapped or exited instance is replaced on the next request.
        if (instance) instance.closeAll();
        instance = null;
        throw err instanceof ProcExit ? new Error(err.message) : err;
      } finally {
        instance?.setSignal(null);
      }
    });
    const resp = decodeResponse(out);
    return new Response(resp.status === 204 || resp.status === 304 ? null : resp.body, {
      status: resp.status,
      headers: resp.headers,
    });
  },
};
