package dohclient

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"net/netip"
	"time"

	"golang.org/x/net/http2"

	"github.com/dohfwd/dohfwd/engine"
)

// tlsConfig is ep's TLS client configuration: ep.Name verified (SNI and
// the certificate) against the client's roots, ALPN h2 only, TLS 1.3
// preferred, sessions resumed from the client's ticket cache, and ep's
// SPKI pins checked on top of the usual verification.
func tlsConfig(c *Client, ep *engine.Endpoint) *tls.Config {
	conf := &tls.Config{
		ServerName:         ep.Name,
		RootCAs:            c.cfg.RootCAs,
		NextProtos:         []string{"h2"},
		MinVersion:         tls.VersionTLS12,
		ClientSessionCache: c.sessions,
	}
	if len(ep.Pins) > 0 {
		pins := ep.Pins
		conf.VerifyConnection = func(cs tls.ConnectionState) error { return checkPins(cs, pins) }
	}
	return conf
}

// checkPins accepts a connection whose verified chain (or, resumed, the
// session's chain) holds a certificate whose SubjectPublicKeyInfo hashes
// to one of pins.
func checkPins(cs tls.ConnectionState, pins [][engine.PinLen]byte) error {
	for _, chain := range cs.VerifiedChains {
		for _, cert := range chain {
			sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
			for _, p := range pins {
				if sum == p {
					return nil
				}
			}
		}
	}
	return errPin
}

// dial opens one connection from source: TCP connect, TLS handshake,
// HTTP/2 preface, all by deadline (the attempt's that needed it). Errors
// are *engine.SocketError with Op "connect" or "handshake".
func (p *pool) dial(source netip.Addr, deadline time.Time) (cc *http2.ClientConn, resumed bool, err error) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	raw, err := p.c.cfg.Dial(ctx, source, p.ep.Addr)
	if err != nil {
		return nil, false, classifyError("connect", err)
	}
	tc := tls.Client(raw, p.tlsConf)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		se := classifyError("handshake", err)
		if ctx.Err() != nil {
			// A stalled handshake ends in whatever the closed
			// connection says; the deadline is why.
			se.Class = engine.ErrTimeout
		}
		return nil, false, se
	}
	st := tc.ConnectionState()
	if st.NegotiatedProtocol != "h2" {
		tc.Close()
		return nil, false, &engine.SocketError{Op: "handshake", Class: engine.ErrTLS, Err: errNoH2}
	}
	// The preface and SETTINGS are written under the same deadline.
	tc.SetWriteDeadline(deadline)
	cc, err = p.c.h2.NewClientConn(tc)
	tc.SetWriteDeadline(time.Time{})
	if err != nil {
		tc.Close()
		return nil, false, classifyError("connect", err)
	}
	return cc, st.DidResume, nil
}
