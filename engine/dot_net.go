//go:build !wasip1 && !js

package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// UpstreamTLS is the native build's TLS toward encrypted upstreams: the
// roots certificates are verified against (the system's, or a CA file's
// for private upstreams) and one client session cache, so that a
// connection re-opened to a server resumes its TLS session (TLS 1.3 PSK)
// instead of a full handshake. NativeNetwork uses it for DoT; the DoH
// client takes its tls.Config from ClientConfig, so both share roots and
// sessions. Safe for concurrent use.
type UpstreamTLS struct {
	roots atomic.Pointer[x509.CertPool] // nil: the system's
	cache tls.ClientSessionCache
}

// upstreamSessionCacheSize is how many TLS sessions the client keeps:
// one or two per encrypted server is what resumption needs.
const upstreamSessionCacheSize = 256

// NewUpstreamTLS returns the TLS of encrypted upstreams verifying against
// roots, or the system's roots when roots is nil.
func NewUpstreamTLS(roots *x509.CertPool) *UpstreamTLS {
	t := &UpstreamTLS{cache: tls.NewLRUClientSessionCache(upstreamSessionCacheSize)}
	t.roots.Store(roots)
	return t
}

// LoadCAFile reads a PEM file of CA certificates into a pool, for
// upstream_tls.ca_file.
func LoadCAFile(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", path)
	}
	return pool, nil
}

// SetRoots replaces the roots (a reload of upstream_tls.ca_file); nil
// takes the system's. Connections open stay; new ones verify against
// the new roots.
func (t *UpstreamTLS) SetRoots(roots *x509.CertPool) { t.roots.Store(roots) }

// ClientConfig is the tls.Config of a connection to ep: its name sent
// and verified, its pins checked, sessions kept, TLS 1.2 at least (1.3
// when the server has it, which Go prefers). nextProtos is the ALPN
// ("dot" for DoT, "h2" for DoH).
func (t *UpstreamTLS) ClientConfig(ep *Endpoint, nextProtos ...string) *tls.Config {
	c := &tls.Config{
		ServerName:         ep.Name,
		RootCAs:            t.roots.Load(),
		ClientSessionCache: t.cache,
		MinVersion:         tls.VersionTLS12,
		NextProtos:         nextProtos,
	}
	if len(ep.Pins) > 0 {
		pins := ep.Pins
		c.VerifyConnection = func(cs tls.ConnectionState) error { return checkPins(cs.PeerCertificates, pins) }
	}
	return c
}

// ErrPinMismatch is the handshake failure of a certificate chain none of
// whose keys has one of the server's pins.
var ErrPinMismatch = errors.New("no certificate of the chain has a pinned key")

// checkPins accepts a chain when one of its certificates' SPKI digest is
// among pins.
func checkPins(chain []*x509.Certificate, pins [][PinLen]byte) error {
	for _, cert := range chain {
		sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
		for _, p := range pins {
			if bytes.Equal(sum[:], p[:]) {
				return nil
			}
		}
	}
	return ErrPinMismatch
}

var (
	defaultUpstreamTLSOnce sync.Once
	defaultUpstreamTLS     *UpstreamTLS
)

// DefaultUpstreamTLS is the UpstreamTLS of a NativeNetwork whose TLS field
// is nil: the system's roots, one session cache for the process.
func DefaultUpstreamTLS() *UpstreamTLS {
	defaultUpstreamTLSOnce.Do(func() { defaultUpstreamTLS = NewUpstreamTLS(nil) })
	return defaultUpstreamTLS
}

// upstreamTLS is n's UpstreamTLS.
func (n NativeNetwork) upstreamTLS() *UpstreamTLS {
	if n.TLS != nil {
		return n.TLS
	}
	return DefaultUpstreamTLS()
}

// dotWriteTimeout bounds one write on a DoT connection: a server that
// stops reading fails the connection rather than holding every query
// behind the write.
const dotWriteTimeout = 2 * time.Second

// OpenTLS implements TLSOpener: a TCP connect and a TLS handshake to ep,
// both done by deadline.
func (n NativeNetwork) OpenTLS(ep *Endpoint, source netip.Addr, deadline time.Time) (Socket, ConnInfo, error) {
	d := net.Dialer{Deadline: deadline}
	if source.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(source, 0))
	}
	raw, err := d.Dial("tcp", ep.Addr.String())
	if err != nil {
		return nil, ConnInfo{}, classify("connect", err)
	}
	c := tls.Client(raw, n.upstreamTLS().ClientConfig(ep, "dot"))
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, ConnInfo{}, handshakeError(err, ctx)
	}
	cs := c.ConnectionState()
	return &tlsSocket{c: c, peer: ep.Addr}, ConnInfo{New: true, Resumed: cs.DidResume}, nil
}

// handshakeError classifies a failed TLS handshake: the deadline, the
// peer's hanging up, or (anything TLS itself refused: the certificate,
// its name, a pin, an alert) ErrTLS.
func handshakeError(err error, ctx context.Context) *SocketError {
	se := classify("handshake", err)
	if ctx.Err() != nil {
		se.Class = ErrTimeout
		return se
	}
	var certErr *tls.CertificateVerificationError
	var alert tls.AlertError
	var rec tls.RecordHeaderError
	switch {
	case errors.As(err, &certErr), errors.As(err, &alert), errors.As(err, &rec),
		errors.Is(err, ErrPinMismatch):
		se.Class = ErrTLS
	case se.Class == ErrOther:
		se.Class = ErrTLS
	}
	return se
}

// tlsSocket is an open DoT connection's plaintext stream.
type tlsSocket struct {
	c    *tls.Conn
	peer netip.AddrPort
}

func (s *tlsSocket) Send(b []byte) error {
	s.c.SetWriteDeadline(time.Now().Add(dotWriteTimeout))
	if _, err := s.c.Write(b); err != nil {
		return classify("send", err)
	}
	return nil
}

func (s *tlsSocket) Receive(b []byte, deadline time.Time) (int, netip.AddrPort, error) {
	if err := s.c.SetReadDeadline(deadline); err != nil {
		return 0, s.peer, classify("receive", err)
	}
	n, err := s.c.Read(b)
	if err != nil && n == 0 {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		return 0, s.peer, classify("receive", err)
	}
	return n, s.peer, nil
}

// Close closes the connection without waiting for a close_notify to go
// out to a peer that may not read it.
func (s *tlsSocket) Close() error { return s.c.NetConn().Close() }

// ExchangeHTTPS implements HTTPSExchanger through n.DoH, when set.
func (n NativeNetwork) ExchangeHTTPS(ctx context.Context, ep *Endpoint, source netip.Addr, query, buf []byte, deadline time.Time) (int, ConnInfo, error) {
	if n.DoH == nil {
		return 0, ConnInfo{}, &SocketError{Op: "connect", Class: ErrOther, Err: errors.New("no DoH client in this build")}
	}
	return n.DoH.ExchangeHTTPS(ctx, ep, source, query, buf, deadline)
}

// OpenConnections implements ConnStatser through n.DoH, when it does.
func (n NativeNetwork) OpenConnections(ep *Endpoint) int {
	if s, ok := n.DoH.(ConnStatser); ok {
		return s.OpenConnections(ep)
	}
	return 0
}
