// Package quicconf is the QUIC set-up dohfwd's QUIC listeners share (DoH
// over HTTP/3, RFC 9114; DNS over QUIC, RFC 9250): the TLS configuration
// taken from the TLS listeners' certificate source, the transport limits,
// the address-validation (Retry) policy and the per-client connection
// limits. 0-RTT is off: a replayed early request could be a question the
// engine forwards upstream again, and the handshake round trip it saves
// is small beside a DNS round trip upstream.
package quicconf

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// Limits bound what one QUIC connection may hold.
type Limits struct {
	// MaxStreams is how many request streams a connection may have open
	// at once (the initial_max_streams_bidi transport parameter, renewed
	// as streams end); the HTTP/2 listener's SETTINGS_MAX_CONCURRENT_STREAMS.
	MaxStreams int64
	// HandshakeTimeout bounds a handshake: an unfinished one holds state.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection without packets for that long.
	IdleTimeout time.Duration
}

// TLS is base (the TLS listeners' configuration, whose GetCertificate
// always hands out the current certificate, so a renewal or a reloaded
// file reaches new QUIC handshakes at once and open connections keep
// theirs) for a QUIC listener speaking alpn: TLS 1.3 only (RFC 9001),
// ALPN alpn alone (acme-tls/1 is a TCP affair), no early data.
func TLS(base *tls.Config, alpn ...string) *tls.Config {
	c := base.Clone()
	c.MinVersion = tls.VersionTLS13
	c.NextProtos = alpn
	return c
}

// Config is the quic.Config of a listener with l's limits. Flow-control
// windows are small: a request and its answer are one DNS message each
// (at most 64 KiB), so a connection never needs the default megabytes.
func Config(l Limits) *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout:           l.HandshakeTimeout,
		MaxIdleTimeout:                 l.IdleTimeout,
		MaxIncomingStreams:             l.MaxStreams,
		MaxIncomingUniStreams:          8, // HTTP/3 needs 3 (control, QPACK encoder and decoder); DoQ none
		InitialStreamReceiveWindow:     64 << 10,
		MaxStreamReceiveWindow:         128 << 10,
		InitialConnectionReceiveWindow: 256 << 10,
		MaxConnectionReceiveWindow:     1 << 20,
		Allow0RTT:                      false,
	}
}

// ConnLimiter is what counts client connections (limits.Limiter):
// OpenConn takes a slot for a connection from client, or reports false
// when the client's or the total limit is reached; release gives it back.
type ConnLimiter interface {
	OpenConn(client net.Addr) (release func(), ok bool)
}

// ErrTooManyConnections refuses a connection over the limits; quic-go
// closes it with CONNECTION_REFUSED.
var ErrTooManyConnections = errors.New("quic: too many connections from this client")

// Transport is a QUIC transport on pc with dohfwd's policy:
//   - a new connection attempt must first prove its address with a Retry
//     (RFC 9000 §8.1.2) once more than retryAbove attempts a second come
//     in (a flood of Initial packets from spoofed addresses then costs a
//     stateless Retry each, not a handshake);
//   - a connection counts against conns (limits.connections and
//     limits.client_connections) as its handshake starts, and is
//     refused over them; it gives its slot back
//     when it ends.
//
// The amplification limit (three times the bytes received before the
// address is validated, RFC 9000 §8) is quic-go's own. conns may be nil.
func Transport(pc net.PacketConn, conns ConnLimiter, retryAbove int) *quic.Transport {
	g := &retryGate{max: retryAbove}
	t := &quic.Transport{
		Conn:                pc,
		VerifySourceAddress: func(net.Addr) bool { return g.tooMany(time.Now()) },
	}
	if conns != nil {
		t.ConnContext = func(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
			release, ok := conns.OpenConn(info.RemoteAddr)
			if !ok {
				return ctx, ErrTooManyConnections
			}
			context.AfterFunc(ctx, release) // ctx ends with the connection
			return ctx, nil
		}
	}
	return t
}

// DefaultRetryAbove is how many connection attempts a second a listener
// takes before it asks for address validation, when limits.connections
// does not say less: a busy replica sees a few hundred new clients a
// second; a Retry costs them one round trip.
const DefaultRetryAbove = 1000

// retryGate counts connection attempts in one-second windows.
type retryGate struct {
	max int

	mu     sync.Mutex
	window time.Time
	n      int
}

func (g *retryGate) tooMany(now time.Time) bool {
	if g.max <= 0 {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Sub(g.window) >= time.Second {
		g.window, g.n = now, 0
	}
	g.n++
	return g.n > g.max
}
