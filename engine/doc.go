// Package engine forwards DNS questions to classic upstream servers.
//
// It owns everything between "a question needs an answer" and "the question
// has its result": routing to a scope, the choice of server for each
// attempt, transactions over UDP and TCP, matching replies, demotion of
// failing servers, the in-flight ceiling and the time budgets. The rules are
// resolvd's (servers, attempts, timeouts, demotion); each rule names its tag
// in the tests that prove it.
//
// The engine's only network I/O goes through [Network], a small socket
// interface, so the same engine runs natively (package net) and inside a
// WebAssembly module whose host supplies the sockets. The engine knows
// nothing of HTTP.
//
// # Pooled upstream sockets: the floor, the idle expiry, the count at rest
//
// A UDP transaction may reuse a connected socket an earlier one left in
// good order (pool.go), one transaction at a time, any failure closing
// it, none older than 60 s. Three numbers decide how many a server's
// pool holds:
//
//   - the floor, 256 idle sockets: a socket is reused only when the pool
//     holds at least 256, chosen among them at random, so that with a
//     random 16-bit ID an off-path attacker guesses among at least 2^24
//     (port, ID) pairs, as against a fresh socket's kernel-chosen port.
//     Below the floor every transaction opens a fresh socket and puts it
//     back when it ended cleanly, so a busy server's pool climbs to the
//     floor and reuse begins (from about five clean transactions a second,
//     within the 60 s life);
//   - the idle expiry, 10 s: a socket unused that long is closed when the
//     pool holds more than the floor (the sockets a burst added go 10 s
//     after the burst), and the floor itself is kept only while the
//     server is in use, a transaction having ended cleanly on one of its
//     sockets within 10 s;
//   - the count at rest, 0: 10 s after a server's last clean transaction
//     (and a sweep, once a second) its pool is empty, so a process back
//     at rest holds no upstream socket; a failing server holds none at
//     any time, since failures close their sockets.
//
// On Linux a server has two such pools, each under these rules: the
// upstream loop's (uploop_linux.go: the first attempts the HTTP/2 server
// begins) and the ordinary path's (further attempts, other front ends).
// /status reports the sockets held (upstream_sockets, and pooled_sockets
// per server, both pools).
package engine
