// Package limits is what one client may take of dohfwd: a query rate (a
// token bucket), upstream transactions in flight and open connections,
// each counted per client prefix (/24 for IPv4 and /56 for IPv6 unless
// configured otherwise), and open connections in total. Every limit is
// off (0) by default.
//
// The client is the address the front ends work out: after
// listen.trusted_proxies for DoH, and after the PROXY protocol header
// (the connection's RemoteAddr) for every listener.
//
// Per-prefix state lives in a bounded table (see table.go): under a flood
// of distinct prefixes it holds at most MaxPrefixes idle entries, plus the
// entries that hold a connection or a transaction right now, which the
// connection limits and the engine's in-flight ceiling bound.
package limits
