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
// The life of a question. A caller that may wait hands the query to
// [Engine.Resolve], which answers it from memory or upstream and returns
// the client's reply: the DNS server, the JSON form and the tests do.
// A front end whose reader must not wait (the HTTP/2 server, the edge
// module's poll) splits that call in two: [Engine.AnswerNow] on the
// reader answers from memory (a local name, a live cache entry) or
// reads the query into a [Miss], and [Engine.ResolveMiss] answers the
// miss on a goroutine that may wait. Between the two, on the reader,
// [Engine.JoinFlight] may attach the miss to the identical question
// already upstream (its reply then comes to a callback, with no
// goroutine of its own), and [Engine.StartMiss] may send its first
// upstream query at once, so that a batch's queries leave back to back;
// a started miss still ends in ResolveMiss, or in
// [Engine.FinishWithReply] when the caller read its reply itself (the
// edge module, whose host delivers the socket's reads). Every way ends
// in one Response and one question event, counted alike. At the edge,
// [Engine.PublishHotEntries] hands the hot cache entries out of the
// WebAssembly module and [HotEntries] answers their hits natively, with
// this package's code. The steps are methods on Engine over a Miss the
// front end keeps in its pooled request, rather than a Question value
// of their own, so that a question costs no allocation for its state.
package engine
