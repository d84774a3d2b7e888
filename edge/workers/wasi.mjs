// A small WASI (preview 1) shim for a Go wasip1 reactor on Workers.
//
// Only what the Go runtime needs at run time is real: clocks, random bytes,
// stdout/stderr to the console. Nothing here waits: the module never sleeps
// inside an export (package edge/abi), so poll_oneoff, which the Go runtime
// calls only when every goroutine sleeps, answers at once that its
// earliest clock is due. Every other call answers ENOSYS, and there are no
// preopened directories.

const ESUCCESS = 0;
const EBADF = 8;
const EINVAL = 28;
const ENOSYS = 52;

const CLOCK_REALTIME = 0;
const EVENTTYPE_CLOCK = 0;

export class ProcExit extends Error {
  constructor(code) {
    super(`wasi: proc_exit(${code})`);
    this.code = code;
  }
}

// createWasi returns { imports, setMemory } for the module.
export function createWasi({ args = ["dohfwd"], env = {}, log = console } = {}) {
  let memory;
  // One DataView while the memory keeps its buffer (it changes only when
  // the memory grows): the Go runtime reads the clock several times a poll.
  let dv = null;
  const view = () => {
    const buf = memory.buffer;
    if (dv === null || dv.buffer !== buf) dv = new DataView(buf);
    return dv;
  };
  const bytes = () => new Uint8Array(memory.buffer);
  const enc = new TextEncoder();
  const dec = new TextDecoder();
  const argv = args.map((a) => enc.encode(a + "\0"));
  const envv = Object.entries(env).map(([k, v]) => enc.encode(`${k}=${v}\0`));
  const lines = { 1: "", 2: "" };

  const sizes = (list) => (countPtr, sizePtr) => {
    view().setUint32(countPtr, list.length, true);
    view().setUint32(sizePtr, list.reduce((n, b) => n + b.length, 0), true);
    return ESUCCESS;
  };
  const get = (list) => (ptrsPtr, bufPtr) => {
    const v = view();
    for (const b of list) {
      v.setUint32(ptrsPtr, bufPtr, true);
      bytes().set(b, bufPtr);
      ptrsPtr += 4;
      bufPtr += b.length;
    }
    return ESUCCESS;
  };

  // Workers advance Date.now() only across I/O, which is all the engine
  // needs: deadlines are checked after awaiting sockets and timers. The
  // monotonic clock counts from instantiation.
  // Date.now() stands still between I/O, and the Go runtime reads the
  // clock about nine times a question: the last reading's nanoseconds
  // are kept, not made again as two BigInts each time.
  const origin = Date.now();
  let lastMs = -1;
  let lastReal = 0n;
  let lastMono = 0n;
  const nowNanos = (id) => {
    const now = Date.now();
    if (now !== lastMs) {
      lastMs = now;
      lastReal = BigInt(now) * 1000000n;
      lastMono = BigInt(now - origin + 1) * 1000000n;
    }
    return id === CLOCK_REALTIME ? lastReal : lastMono;
  };

  const wasi = {
    args_sizes_get: sizes(argv),
    args_get: get(argv),
    environ_sizes_get: sizes(envv),
    environ_get: get(envv),
    clock_res_get(_id, resPtr) {
      view().setBigUint64(resPtr, 1000000n, true);
      return ESUCCESS;
    },
    clock_time_get(id, _precision, timePtr) {
      view().setBigUint64(timePtr, nowNanos(id), true);
      return ESUCCESS;
    },
    random_get(ptr, len) {
      for (let off = 0; off < len; off += 65536) {
        crypto.getRandomValues(new Uint8Array(memory.buffer, ptr + off, Math.min(65536, len - off)));
      }
      return ESUCCESS;
    },
    fd_write(fd, iovs, iovsLen, nwrittenPtr) {
      if (fd !== 1 && fd !== 2) return EBADF;
      const v = view();
      let n = 0;
      let text = "";
      for (let i = 0; i < iovsLen; i++) {
        const p = v.getUint32(iovs + i * 8, true);
        const l = v.getUint32(iovs + i * 8 + 4, true);
        text += dec.decode(new Uint8Array(memory.buffer, p, l));
        n += l;
      }
      const all = lines[fd] + text;
      const parts = all.split("\n");
      lines[fd] = parts.pop();
      for (const line of parts) (fd === 2 ? log.error : log.log)(line);
      v.setUint32(nwrittenPtr, n, true);
      return ESUCCESS;
    },
    // Only clock subscriptions are supported: the earliest is reported due.
    poll_oneoff(inPtr, outPtr, nsubs, neventsPtr) {
      const v = view();
      let wait = Infinity;
      let first = -1;
      for (let i = 0; i < nsubs; i++) {
        const s = inPtr + i * 48;
        if (v.getUint8(s + 8) !== EVENTTYPE_CLOCK) continue;
        const clock = v.getUint32(s + 16, true);
        let timeout = Number(v.getBigUint64(s + 24, true)) / 1e6;
        const flags = v.getUint16(s + 40, true);
        if (flags & 1) timeout -= Number(nowNanos(clock)) / 1e6; // absolute
        if (timeout < wait) {
          wait = timeout;
          first = i;
        }
      }
      if (first < 0) return EINVAL;
      const s = inPtr + first * 48;
      const e = outPtr;
      v.setBigUint64(e, v.getBigUint64(s, true), true); // userdata
      v.setUint16(e + 8, ESUCCESS, true);
      v.setUint8(e + 10, EVENTTYPE_CLOCK);
      v.setUint32(neventsPtr, 1, true);
      return ESUCCESS;
    },
    sched_yield: () => ESUCCESS,
    proc_exit(code) {
      throw new ProcExit(code);
    },
    fd_prestat_get: () => EBADF,
    fd_prestat_dir_name: () => EBADF,
    fd_close: () => ESUCCESS,
    fd_fdstat_get(fd, ptr) {
      if (fd > 2) return EBADF;
      const v = view();
      for (let i = 0; i < 24; i++) v.setUint8(ptr + i, 0);
      v.setUint8(ptr, 2); // character device
      return ESUCCESS;
    },
  };

  return {
    // imports fills in ENOSYS for every WASI function the module imports
    // that the shim does not implement.
    imports(module) {
      const ns = { ...wasi };
      for (const imp of WebAssembly.Module.imports(module)) {
        if (imp.module === "wasi_snapshot_preview1" && imp.kind === "function" && !(imp.name in ns)) {
          ns[imp.name] = () => ENOSYS;
        }
      }
      return ns;
    },
    setMemory(m) {
      memory = m;
    },
  };
}
