// Package metrics holds dohfwd's Prometheus metrics, named dohfwd_*: the
// engine's totals read at scrape time, DoH requests by HTTP status and DNS
// rcode, and upstream attempt latency per server. It lives apart from the
// logs (package telemetry) so the WebAssembly module, which has no
// /metrics, does not carry the Prometheus client.
package metrics
