// The module's socket interface (package edge/abi) on Workers: TCP only,
// from cloudflare:sockets connect(). No import waits: a connect and a read
// run as promises, and their ends come back to the module as events
// (onEvent) that the next dohfwd_poll hands in. Each import returns 0 or an
// engine.ErrorClass code.

import { connect } from "cloudflare:sockets";

// engine.ErrorClass values, the event kinds, abi.TransportTCP:
// edge/abi's test checks them against the Go side.
export const ErrOther = 1;
export const ErrTimeout = 2;
export const ErrRefused = 3;
export const ErrUnreachable = 4;
export const ErrReset = 5;
export const ErrClosed = 6;
export const ErrLocal = 7;

export const EventConnected = 3;
export const EventRead = 4;

const TransportTCP = 1;

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

// parseAddr reads "ip:port" or "[ipv6]:port".
function parseAddr(s) {
  const i = s.lastIndexOf(":");
  let host = s.slice(0, i);
  if (host.startsWith("[")) host = host.slice(1, -1);
  return { hostname: host, port: Number(s.slice(i + 1)) };
}

// createSockets returns the "dohfwd" import namespace; memory() gives the
// module's memory at the time of a call, onEvent(kind, fd, code, peer,
// data) takes each socket event for the next poll.
export function createSockets(memory, onEvent) {
  const open = new Map(); // fd -> { sock, reader, writer, reading, left, failed, peer }
  let nextFd = 1;
  const dec = new TextDecoder();
  const bytes = () => new Uint8Array(memory().buffer);
  const view = () => new DataView(memory().buffer);
  // The engine connects to the same few servers again and again: the last
  // address's bytes and their decoded peer spare a decode per question.
  let lastAddr = new Uint8Array(0);
  let lastPeer = null;
  const peerOf = (addrPtr, addrLen) => {
    const b = new Uint8Array(memory().buffer, addrPtr, addrLen);
    let same = lastPeer !== null && addrLen === lastAddr.length;
    for (let i = 0; same && i < addrLen; i++) same = b[i] === lastAddr[i];
    if (same) return lastPeer;
    lastAddr = b.slice();
    lastPeer = parseAddr(dec.decode(lastAddr));
    return lastPeer;
  };
  const ignore = () => {};
  const dropped = []; // sockets the module closed, for release

  // read answers the module's wait on s with one chunk of at most max
  // bytes. It reads at once, connected or not: a read asked for while
  // connecting ends when the connect does, so a question's read costs no
  // wait on opened first. Only a read that fails asks whether the connect
  // did: a failed connect is reported by its own event (EventConnected,
  // connect_error), not the read's.
  const read = (fd, s, max) => {
    if (s.left) {
      // The rest of a chunk: after this poll, as every event.
      const chunk = s.left;
      s.left = null;
      queueMicrotask(() => deliver(fd, s, max, chunk));
      return;
    }
    s.reader.read().then(
      (r) => deliver(fd, s, max, r.done ? null : r.value),
      (err) => {
        s.reading = false;
        if (open.get(fd) !== s) return; // closed meanwhile: no event
        const code = classify(err);
        s.sock.opened.then(
          () => { if (open.get(fd) === s) onEvent(EventRead, fd, s.failed || code, s.peer, null); },
          (cerr) => { if (open.get(fd) === s) onEvent(EventConnected, fd, classify(cerr), s.peer, null); },
        );
      },
    );
  };

  // deliver ends a read with chunk, or with the stream's end (null).
  const deliver = (fd, s, max, chunk) => {
    s.reading = false;
    if (open.get(fd) !== s) return; // closed meanwhile: no event
    if (chunk === null) return onEvent(EventRead, fd, s.failed || ErrClosed, s.peer, null);
    if (chunk.length > max) {
      s.left = chunk.subarray(max);
      chunk = chunk.subarray(0, max);
    }
    onEvent(EventRead, fd, 0, s.peer, chunk);
  };

  const imports = {
    sock_open(transport, addrPtr, addrLen, _srcPtr, _srcLen, _deadline, fdPtr) {
      // Workers have no UDP and choose their own egress address.
      if (transport !== TransportTCP) return ErrLocal;
      const peer = peerOf(addrPtr, addrLen);
      let sock;
      try {
        sock = connect(peer, { allowHalfOpen: false });
      } catch (err) {
        return classify(err);
      }
      const fd = nextFd++;
      // The module sends its query and asks for the read in the same poll
      // (package abi): the writer queues the bytes until the connection
      // is open, and the read ends once it is (or fails). A connect that
      // succeeds sends no event; one that fails sends EventConnected, when
      // the read fails. The module keeps the connect's deadline: it
      // closes the socket then.
      const s = { sock, reader: sock.readable.getReader(), writer: sock.writable.getWriter(), reading: false, left: null, failed: 0, peer };
      // A connect that fails after the module closed the socket (its
      // deadline) has no read left to ask about it: handled here, so
      // it is no unhandled rejection.
      sock.opened.catch(ignore);
      open.set(fd, s);
      view().setUint32(fdPtr, fd, true);
      return 0;
    },

    // The write goes on after the call (once connected); a failure is the
    // next read's.
    sock_send(fd, ptr, len) {
      const s = open.get(fd);
      if (!s) return ErrOther;
      if (s.failed) return s.failed;
      s.writer.write(bytes().slice(ptr, ptr + len)).catch((err) => {
        s.failed ||= classify(err);
      });
      return 0;
    },

    // The module waits on fd; a read already under way answers it too.
    sock_recv(fd, max, _deadline) {
      const s = open.get(fd);
      if (!s) return ErrOther;
      if (!s.reading) {
        s.reading = true;
        read(fd, s, max);
      }
      return 0;
    },

    // The socket is closed by release, after the poll.
    sock_close(fd) {
      const s = open.get(fd);
      if (!s) return ErrOther;
      open.delete(fd);
      dropped.push(s.sock);
      return 0;
    },
  };

  // release ends the sockets the module closed during a poll. When no
  // request is left in progress (quiet) they are only let go: every
  // request then ends, and workerd closes a request's sockets with it, for
  // less than a close() costs here (a bare worker's question: 0.8x the
  // latency and CPU without its close()), and after the response. While
  // requests are in progress their contexts may live on, so each is
  // closed now.
  const release = (quiet) => {
    if (dropped.length === 0) return;
    if (!quiet) for (const sock of dropped) sock.close().catch(ignore);
    dropped.length = 0;
  };
  return {
    imports,
    release,
    closeAll: () => {
      for (const fd of [...open.keys()]) imports.sock_close(fd);
      release(false);
    },
  };
}
