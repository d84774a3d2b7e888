// Package quicconf is the QUIC set-up every dohfwd QUIC listener shares
// (DNS over QUIC, RFC 9250; DoH over HTTP/3): the TLS configuration taken
// from the TLS listeners' certificate source, the quic.Config limits, and
// the address-validation policy that makes new connections prove their
// address with a Retry (RFC 9000, section 8.1.2) when they come too fast.
//
// 0-RTT is off: listeners are made with quic.Transport.Listen, never
// ListenEarly, and Config leaves Allow0RTT false. Early data can be
// replayed by anyone who saw it (RFC 9250, section 4.5; RFC 8446, section
// 8); dohfwd's answers are cheap enough that the round trip it saves is
// not worth proving, for every question a client may send, that a replay
// changes nothing.
package quicconf

import (
	"cmp"
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
)

// TLS is the QUIC listener's TLS configuration: a clone of base, the TLS
// listeners' own, so that its GetCertificate (certs.Manager's) serves
// whatever certificate is current. A renewal or a reload reaches the next
// handshake; open connections keep the keys they agreed. QUIC needs TLS
// 1.3 (RFC 9001, section 4.2); alpn is the only protocol offered.
func TLS(base *tls.Config, alpn string) *tls.Config {
	c := base.Clone()
	c.NextProtos = []string{alpn}
	c.MinVersion = tls.VersionTLS13
	return c
}

// Limits bound one QUIC connection.
type Limits struct {
	// MaxStreams is how many bidirectional streams a client may have open
	// at once (a question each for DoQ; HTTP/3's requests).
	MaxStreams int
	// UniStreams allows unidirectional streams (HTTP/3's control and
	// QPACK streams); DoQ has none.
	UniStreams bool
	// IdleTimeout closes a connection without traffic for that long.
	IdleTimeout time.Duration
	// HandshakeTimeout bounds the handshake; 0 = 5 s.
	HandshakeTimeout time.Duration
	// MaxStreamWindow bounds what a client may send unread on one
	// stream; 0 = 16 KiB, plenty for a DNS query or an HTTP request.
	MaxStreamWindow uint64
}

// Config is the quic.Config for l. 0-RTT stays off.
func Config(l Limits) *quic.Config {
	uni := int64(-1)
	if l.UniStreams {
		uni = 16
	}
	window := cmp.Or(l.MaxStreamWindow, 16<<10)
	return &quic.Config{
		HandshakeIdleTimeout:           cmp.Or(l.HandshakeTimeout, 5*time.Second),
		MaxIdleTimeout:                 l.IdleTimeout,
		MaxIncomingStreams:             int64(max(l.MaxStreams, 1)),
		MaxIncomingUniStreams:          uni,
		InitialStreamReceiveWindow:     window,
		MaxStreamReceiveWindow:         window,
		InitialConnectionReceiveWindow: 4 * window,
		MaxConnectionReceiveWindow:     64 * window,
		Allow0RTT:                      false,
	}
}

// DefaultMaxHandshakes is how many connections from unvalidated addresses
// may be mid-handshake at once before new ones must answer a Retry. Each
// holds state until its handshake ends or times out; a flood of Initial
// packets from spoofed addresses would otherwise hold one per packet.
const DefaultMaxHandshakes = 64

// Gate is the address-validation policy: an Initial packet from an
// address not yet validated gets a Retry, and no connection state, when
// new connections arrive faster than Rate per second (a token bucket of
// Burst), or when MaxHandshakes connections of unvalidated addresses are
// mid-handshake. Retry costs a well-behaved client one round trip; a
// spoofing one never answers it. quic-go itself keeps to the 3x
// amplification limit (RFC 9000, section 8.1) before validation.
type Gate struct {
	// Rate and Burst: the new connections per second let in without a
	// Retry; Rate 0 = no rate (the handshake bound alone).
	Rate  float64
	Burst int
	// MaxHandshakes: 0 = DefaultMaxHandshakes.
	MaxHandshakes int

	mu     sync.Mutex
	tokens float64
	last   time.Time

	handshakes atomic.Int64
	retries    atomic.Uint64
}

// Retries counts the Retry packets asked for.
func (g *Gate) Retries() uint64 { return g.retries.Load() }

// Handshakes is how many connections of unvalidated addresses are
// mid-handshake now.
func (g *Gate) Handshakes() int64 { return g.handshakes.Load() }

// verifySourceAddress is quic.Transport.VerifySourceAddress: true asks
// for a Retry.
func (g *Gate) verifySourceAddress(net.Addr) bool {
	retry := g.handshakes.Load() >= int64(cmp.Or(g.MaxHandshakes, DefaultMaxHandshakes)) || !g.take()
	if retry {
		g.retries.Add(1)
	}
	return retry
}

// take spends a token of the new-connection bucket.
func (g *Gate) take() bool {
	if g.Rate <= 0 {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	burst := float64(max(g.Burst, 1))
	if g.last.IsZero() {
		g.tokens = burst
	} else {
		g.tokens = min(burst, g.tokens+now.Sub(g.last).Seconds()*g.Rate)
	}
	g.last = now
	if g.tokens < 1 {
		return false
	}
	g.tokens--
	return true
}

type handshakeKey struct{}

// connContext counts a connection of an unvalidated address as mid-
// handshake until it is accepted (established) or ends.
func (g *Gate) connContext(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
	if info.AddrVerified {
		return ctx, nil
	}
	g.handshakes.Add(1)
	var once sync.Once
	done := func() { once.Do(func() { g.handshakes.Add(-1) }) }
	context.AfterFunc(ctx, done)
	return context.WithValue(ctx, handshakeKey{}, done), nil
}

// established ends c's handshake count.
func established(c *quic.Conn) {
	if done, ok := c.Context().Value(handshakeKey{}).(func()); ok {
		done()
	}
}

// Listener is a QUIC listener on its own UDP socket: the transport and
// the server closed together.
type Listener struct {
	pc net.PacketConn
	tr *quic.Transport
	ln *quic.Listener
}

// Listen serves QUIC on pc with tlsConf and conf, under gate's
// address-validation policy (nil: none). The listener owns pc.
func Listen(pc net.PacketConn, tlsConf *tls.Config, conf *quic.Config, gate *Gate) (*Listener, error) {
	tr := &quic.Transport{Conn: pc}
	if gate != nil {
		tr.VerifySourceAddress = gate.verifySourceAddress
		tr.ConnContext = gate.connContext
	}
	conf = conf.Clone()
	conf.Allow0RTT = false
	ln, err := tr.Listen(tlsConf, conf)
	if err != nil {
		tr.Close()
		pc.Close()
		return nil, err
	}
	return &Listener{pc: pc, tr: tr, ln: ln}, nil
}

// Accept waits for the next connection whose handshake is complete.
func (l *Listener) Accept(ctx context.Context) (*quic.Conn, error) {
	c, err := l.ln.Accept(ctx)
	if err == nil {
		established(c)
	}
	return c, err
}

// Addr is the UDP address served.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// StopAccepting closes the listener alone: handshakes under way are
// refused, connections accepted before go on.
func (l *Listener) StopAccepting() error { return l.ln.Close() }

// Close stops accepting and closes the socket; connections accepted
// before are closed with it.
func (l *Listener) Close() error {
	l.ln.Close()
	l.tr.Close()
	return l.pc.Close()
}
