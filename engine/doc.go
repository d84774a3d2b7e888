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
package engine
