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
package doh
