// The module's socket interface (package edge/abi) on Workers: TCP only,
// from cloudflare:sockets connect(). The three calls that wait are wrapped
// in WebAssembly.Suspending (JSPI) so the module awaits them as if they
// blocked. Each returns 0, an engine.ErrorClass code, or Cancelled once the
// request being served has been abandoned by its client (request.signal,
// with the enable_request_signal compatibility flag).

import { connect } from "cloudflare:sockets";

// engine.ErrorClass values, abi.Cancelled, abi.TransportTCP and
// abi.RecvInfoSize: edge/abi's test checks them against the Go side.
export const ErrOther = 1;
export const ErrTimeout = 2;
export const ErrRefused = 3;
export const ErrUnreachable = 4;
export const ErrReset = 5;
export const ErrClosed = 6;
export const ErrLocal = 7;
// abi.Cancelled: the client went away; the module cancels the question.
export const Cancelled = 8;

const TransportTCP = 1;
const RecvInfoSize = 24;

// classify maps a socket error from workerd to an error class.
export function classify(err) {
  const m = String(err && err.message ? err.message : err).toLowerCase();
  if (m.includes("refused")) return ErrRefused;
  if (m.includes("unreachable") || m.includes("no route")) return ErrUnreachable;
  if (m.includes("reset") || m.includes("broken pipe") || m.includes("aborted")) return ErrReset;
  if (m.includes("closed")) return ErrClosed;
  if (m.includes("too many") || m.includes("not permitted") || m.includes("disallowed")) return ErrLocal;
  return ErrOther;
}

const TIMEOUT = Symbol("timeout");
const CANCELLED = Symbol("cancelled");

// until races p against an absolute deadline in Unix nanoseconds (0n: none)
// and against signal (null: none) aborting.
function until(p, deadline, signal) {
  const racers = [p];
  let timer, onAbort;
  if (deadline !== 0n) {
    const ms = Number(deadline / 1000000n) - Date.now();
    racers.push(ms <= 0 ? Promise.resolve(TIMEOUT) : new Promise((r) => (timer = setTimeout(() => r(TIMEOUT), ms))));
  }
  if (signal) {
    racers.push(new Promise((r) => {
      onAbort = () => r(CANCELLED);
      if (signal.aborted) onAbort();
      else signal.addEventListener("abort", onAbort, { once: true });
    }));
  }
  if (racers.length === 1) return p;
  return Promise.race(racers).finally(() => {
    clearTimeout(timer);
    if (onAbort) signal.removeEventListener("abort", onAbort);
  });
}

// parseAddr reads "ip:port" or "[ipv6]:port".
function parseAddr(s) {
  const i = s.lastIndexOf(":");
  let host = s.slice(0, i);
  if (host.startsWith("[")) host = host.slice(1, -1);
  return { hostname: host, port: Number(s.slice(i + 1)) };
}

// createSockets returns the "dohfwd" import namespace; memory() gives the
// module's memory at the time of a call. setSignal(s) names the AbortSignal
// of the request being served (null between calls).
export function createSockets(memory) {
  const open = new Map(); // fd -> { sock, reader, writer, pending, left, peer }
  let nextFd = 1;
  let signal = null;
  const gone = () => signal !== null && signal.aborted;
  const dec = new TextDecoder();
  const bytes = () => new Uint8Array(memory().buffer);
  const view = () => new DataView(memory().buffer);

  const imports = {
    sock_open: new WebAssembly.Suspending(async (transport, addrPtr, addrLen, _srcPtr, _srcLen, deadline, fdPtr) => {
      // Workers have no UDP and choose their own egress address.
      if (transport !== TransportTCP) return ErrLocal;
      if (gone()) return Cancelled;
      const addr = dec.decode(bytes().slice(addrPtr, addrPtr + addrLen));
      const peer = parseAddr(addr);
      let sock;
      try {
        sock = connect(peer, { allowHalfOpen: false });
        const r = await until(sock.opened, deadline, signal);
        if (r === TIMEOUT || r === CANCELLED) {
          sock.close().catch(() => {});
          return r === TIMEOUT ? ErrTimeout : Cancelled;
        }
      } catch (err) {
        return classify(err);
      }
      const fd = nextFd++;
      open.set(fd, { sock, reader: sock.readable.getReader(), writer: sock.writable.getWriter(), pending: null, left: null, peer });
      view().setUint32(fdPtr, fd, true);
      return 0;
    }),

    sock_send: new WebAssembly.Suspending(async (fd, ptr, len) => {
      const s = open.get(fd);
      if (!s) return ErrOther;
      if (gone()) return Cancelled;
      try {
        await s.writer.write(bytes().slice(ptr, ptr + len));
      } catch (err) {
        return classify(err);
      }
      return 0;
    }),

    sock_recv: new WebAssembly.Suspending(async (fd, ptr, len, deadline, infoPtr) => {
      const s = open.get(fd);
      if (!s) return ErrOther;
      if (gone()) return Cancelled;
      let chunk = s.left;
      s.left = null;
      if (!chunk) {
        // A read that timed out stays pending for the next call.
        s.pending ??= s.reader.read();
        let r;
        try {
          r = await until(s.pending, deadline, signal);
        } catch (err) {
          s.pending = null;
          return classify(err);
        }
        if (r === TIMEOUT) return ErrTimeout;
        // The read stays pending; the module closes the socket next.
        if (r === CANCELLED) return Cancelled;
        s.pending = null;
        if (r.done) return ErrClosed;
        chunk = r.value;
      }
      const n = Math.min(len, chunk.length);
      bytes().set(chunk.subarray(0, n), ptr);
      if (n < chunk.length) s.left = chunk.subarray(n);
      const v = view();
      v.setUint32(infoPtr, n, true);
      v.setUint16(infoPtr + 4, s.peer.port, true);
      v.setUint16(infoPtr + 6, 0, true);
      writeAddr16(bytes(), infoPtr + 8, s.peer.hostname);
      return 0;
    }),

    sock_close(fd) {
      const s = open.get(fd);
      if (!s) return ErrOther;
      open.delete(fd);
      s.sock.close().catch(() => {});
      return 0;
    },
  };
  return {
    imports,
    closeAll: () => { for (const fd of [...open.keys()]) imports.sock_close(fd); },
    setSignal: (s) => { signal = s; },
  };
}

// writeAddr16 writes an IP address as 16 bytes (IPv4 mapped into IPv6).
function writeAddr16(b, off, host) {
  b.fill(0, off, off + 16);
  if (host.includes(".") && !host.includes(":")) {
    b[off + 10] = 0xff;
    b[off + 11] = 0xff;
    host.split(".").forEach((x, i) => (b[off + 12 + i] = Number(x)));
    return;
  }
  const [head, tail = ""] = host.split("::");
  const h = head ? head.split(":") : [];
  const t = tail ? tail.split(":") : [];
  const groups = host.includes("::") ? [...h, ...Array(8 - h.length - t.length).fill("0"), ...t] : h;
  groups.forEach((g, i) => {
    const x = parseInt(g, 16);
    b[off + 2 * i] = x >> 8;
    b[off + 2 * i + 1] = x & 0xff;
  });
}
