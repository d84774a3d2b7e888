// Package doh is the DNS-over-HTTPS front end: it turns HTTP requests into
// checked DNS queries for a [Resolver] and its answers into HTTP responses.
//
// It speaks RFC 8484 (GET with a base64url "dns" parameter, POST with an
// application/dns-message body) and the JSON form of public DoH services
// (GET /resolve?name=&type=, or the DoH path with Accept:
// application/dns-json). Bad input is answered here with a 4xx status and a
// short text saying what is wrong; it never reaches the resolver. The
// request context is the resolver's context, so a client that goes away
// cancels its question.
//
// The handler builds for WebAssembly (GOOS=wasip1) as well, so the edge
// module serves requests with the same code. [NewTLSServer] and
// [NewPlainServer] serve a [Handler] with an HTTP/2 server built for DoH
// on golang.org/x/net/http2's Framer, with its own HPACK decoder and
// encoder (h2hpackdecode.go, h2hpack.go) (ALPN h2 over TLS, prior
// knowledge on plaintext), and HTTP/1.1 with net/http; both go through
// one transport-neutral core (core.go).
//
// # Why an HTTP/2 server of its own
//
// A DoH request is one small header block and one small answer, and a
// browser sends dozens on one connection. golang.org/x/net/http2's Server
// gives every stream a goroutine, an http.Request, header maps and a
// flush of its own; for DoH that bookkeeping is most of the work. This
// server keeps x/net's Framer and answers a cache hit on the connection's
// goroutine, batching the writes of one read: on one loopback connection
// with 50 streams at a time, the same handler answered a hit in 1.5 µs
// and 2 allocations per request here against 31 µs and 38 allocations
// through x/net's Server (BenchmarkH2Servers:
// go test -run '^$' -bench BenchmarkH2Servers -benchtime 20000x ./doh).
// Its HPACK decoder (h2hpackdecode.go: a 12-bit Huffman table, a ring for
// the dynamic table, literals handed over uncopied) decodes a DoH GET's
// header block in 250 ns against x/net hpack.Decoder's 520 ns
// (BenchmarkHPACKDecodeRequest); h2spec (h2spec_test.go), the attack
// tests (attacks_test.go) and FuzzReqDecoder, which checks it against
// x/net's decoder, keep it honest. HTTP/1.1 stays on net/http.
package doh
