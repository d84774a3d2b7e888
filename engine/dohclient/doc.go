// Package dohclient is the engine's way to DoH upstream servers
// (https://IP[:PORT]/PATH#NAME): RFC 8484 POST of application/dns-message
// over HTTP/2 and TLS, as an [engine.HTTPSExchanger] for the native build.
//
// It lives beside the engine rather than in it because the engine links
// neither net/http nor crypto/tls (it builds into the edge module, whose
// host does the encryption); cmd/dohfwd hands a [Client] to
// engine.NativeNetwork, and a Go edge host can hand the same one to its
// module. It is not internal for that reason.
//
// # What one exchange is
//
// One engine attempt is one POST: the query as the engine wrote it (its
// random ID, its question, padded by the engine), the reply body handed
// back for the engine to match by ID and question like any upstream
// reply. A status other than 200, a content type other than
// application/dns-message, or a body that does not fit is a failed
// attempt of class "http" (engine.ErrHTTP), never an answer.
//
// # Connections
//
// Each endpoint (one configured server) has a small pool (pool.go): at
// most Config.MaxConns HTTP/2 connections, a question taking the least
// loaded one that has a free stream, a new one opened only when none has
// (so a busy server is carried by one connection with many streams, and
// never by more than the limit), closed by x/net's idle timer after
// Config.IdleTimeout without a stream. The TCP connect and the TLS
// handshake run inside the attempt's deadline; a handshake others wait
// for is bounded by the deadline of the attempt that began it. TLS
// prefers 1.3 and resumes sessions from a shared ticket cache, so a
// connection re-opened after an idle close costs no certificate.
//
// A connection the server closes or sends GOAWAY on is not used for new
// streams; a question whose stream it refused, or that it dropped
// unanswered, is posted again on another connection within the same
// attempt while the attempt's deadline allows (retry.go). A stream that
// times out makes its connection answer a PING, and a connection that
// does not is closed, so a dead pooled connection is found at once
// rather than after each of its questions' deadlines.
package dohclient
