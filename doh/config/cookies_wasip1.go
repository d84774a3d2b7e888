//go:build wasip1

package config

// upstreamCookies is off in the WebAssembly edge module: under the
// Workers glue (edge/workers) its queries with a COOKIE option were
// answered for the wrong question (TestWorkerd), which is not understood
// yet. The native server and dohfwd-edge's own engine keep cookies on.
const upstreamCookies = false
