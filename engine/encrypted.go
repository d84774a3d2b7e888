package engine

import (
	"context"
	"net/netip"
	"time"
)

// The engine reaches encrypted servers through two optional interfaces a
// Network may implement, so that the engine itself links no crypto/tls
// and no HTTP: the native build's NativeNetwork does TLS with crypto/tls
// (dot_net.go) and hands DoH to its DoH field; an edge host supplies its
// own (its host opens TLS, or fetches).
//
// A Network without TLSOpener fails every attempt to a tls:// server with
// a connect_error of class "other" ("no TLS"), one without HTTPSExchanger
// every attempt to an https:// server: the rules apply as to any failure.

// TLSOpener is implemented by a Network that reaches DNS-over-TLS servers
// (RFC 7858). The engine keeps the connections it opens (at most
// Config.EncryptedConnections per server), frames messages on them as on
// TCP, pipelines queries and matches replies by ID and question.
type TLSOpener interface {
	// OpenTLS connects to ep.Addr (from source, when valid) and completes
	// a TLS handshake verifying ep.Name (SNI and the certificate, against
	// the Network's roots) and ep.Pins, giving up at deadline: connect and
	// handshake count inside the attempt that needs the connection. It
	// returns the plaintext byte stream: Send writes application data,
	// Receive reads it (from is ep.Addr), Close closes the connection.
	// Send may be called while a Receive waits on another goroutine;
	// Sends are not concurrent with each other (the engine serializes
	// them). Errors are *SocketError: Op "connect" for the TCP connect
	// (class refused, timeout, ...), Op "handshake" for the TLS handshake
	// (class ErrTLS for a certificate, name or pin that fails, ErrTimeout
	// for a stall to deadline, ErrClosed/ErrReset for a peer that hangs
	// up).
	OpenTLS(ep *Endpoint, source netip.Addr, deadline time.Time) (Socket, ConnInfo, error)
}

// HTTPSExchanger is implemented by a Network that reaches DoH servers
// (RFC 8484: POST, application/dns-message, over HTTP/2). It owns its
// connections (the HTTP/2 client's pool) and reports how each exchange
// went in ConnInfo.
type HTTPSExchanger interface {
	// ExchangeHTTPS posts query (a whole DNS message, no length prefix)
	// to https://ep.Name-or-Addr ep.Path on a connection to ep.Addr (from
	// source, when valid), verifying ep.Name and ep.Pins, and reads the
	// response body into buf, returning its length. It gives up at
	// deadline and when ctx ends (the client went away). A response
	// other than 200 with application/dns-message, or a body larger than
	// buf, is an error. Errors are *SocketError as for OpenTLS; Op
	// "receive" with class ErrOther for an HTTP status other than 200.
	// The engine matches the reply (ID and question) as any other.
	ExchangeHTTPS(ctx context.Context, ep *Endpoint, source netip.Addr, query, buf []byte, deadline time.Time) (n int, info ConnInfo, err error)
}

// ConnInfo says how an encrypted exchange's connection came to be, for
// the attempt event and the per-server counters.
type ConnInfo struct {
	// New says the connection was opened for this exchange (a TCP
	// connect and a handshake); false says an open one was reused.
	New bool
	// Resumed says the new connection's handshake resumed an earlier TLS
	// session (a TLS 1.3 PSK, no certificate sent).
	Resumed bool
}

// ConnStatser is implemented by an HTTPSExchanger that can say how many
// connections it holds open to an endpoint, for /status and /metrics.
type ConnStatser interface {
	OpenConnections(ep *Endpoint) int
}

// Conn says whether an attempt's connection was new, reused or resumed;
// "" for the plain transports, whose sockets the pool rules describe.
type Conn uint8

const (
	ConnNone    Conn = iota // plain UDP/TCP, or no connection was reached
	ConnNew                 // opened for this attempt, full handshake
	ConnResumed             // opened for this attempt, TLS session resumed
	ConnReused              // an open connection carried it
)

var connNames = [...]string{"", "new", "resumed", "reused"}

func (c Conn) String() string {
	if int(c) < len(connNames) {
		return connNames[c]
	}
	return ""
}

// connOf is the Conn a ConnInfo describes.
func connOf(info ConnInfo) Conn {
	switch {
	case !info.New:
		return ConnReused
	case info.Resumed:
		return ConnResumed
	default:
		return ConnNew
	}
}

// The defaults of the encrypted transports' connections.
const (
	// DefaultEncryptedConnections is how many connections the engine
	// keeps at most to one DoT server.
	DefaultEncryptedConnections = 4
	// DefaultEncryptedIdle is how long an unused DoT connection stays
	// open.
	DefaultEncryptedIdle = 30 * time.Second
)
