package dohclient

import (
	"context"
	"crypto/tls"
	"net/netip"
	"time"

	"golang.org/x/net/http2"

	"github.com/dohfwd/dohfwd/engine"
)

// dial opens one connection from source: TCP connect, TLS handshake,
// HTTP/2 preface, all by deadline (the attempt's that needed it). Errors
// are *engine.SocketError with Op "connect" or "handshake".
func (p *pool) dial(source netip.Addr, deadline time.Time) (cc *http2.ClientConn, resumed bool, err error) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	raw, err := p.c.cfg.Dial(ctx, source, p.ep.Addr)
	if err != nil {
		return nil, false, engine.ClassifyError("connect", err, nil)
	}
	// The configuration is made per connection: a reload's new roots
	// apply to the connections opened after it.
	tc := tls.Client(raw, p.c.cfg.TLS.ClientConfig(&p.ep, "h2"))
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, false, engine.ClassifyError("handshake", err, ctx)
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
		return nil, false, engine.ClassifyError("connect", err, nil)
	}
	return cc, st.DidResume, nil
}
