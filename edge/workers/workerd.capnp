# Local run of the Worker under workerd:
#   make wasm-workers && npx workerd serve workerd.capnp --experimental
# DoH is then on http://127.0.0.1:8787/dns-query. The module reaches
# upstream servers on loopback only through the "local" network service.
using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "dohfwd", worker = .dohfwd),
    (name = "local", network = (allow = ["local"])),
  ],
  sockets = [
    (name = "http", address = "127.0.0.1:8787", http = (), service = "dohfwd"),
  ],
);

const dohfwd :Workerd.Worker = (
  modules = [
    (name = "worker.mjs", esModule = embed "worker.mjs"),
    (name = "wasi.mjs", esModule = embed "wasi.mjs"),
    (name = "sockets.mjs", esModule = embed "sockets.mjs"),
    (name = "rfc8484.mjs", esModule = embed "rfc8484.mjs"),
    (name = "dohfwd.wasm", wasm = embed "dohfwd.wasm"),
  ],
  bindings = [
    (name = "DOHFWD_CONFIG", text = embed "dohfwd.config.json"),
  ],
  compatibilityDate = "2025-09-01",
  # request.signal aborts when the client goes away: the module then
  # cancels the question (abi.EventCancel).
  compatibilityFlags = ["enable_request_signal"],
  globalOutbound = "local",
);
