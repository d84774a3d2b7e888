//go:build !wasip1

package doh

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/dohfwd/dohfwd/doh/internal/quicconf"
	"github.com/dohfwd/dohfwd/doh/workpool"
)

// ProtoHTTP3 is Request.Proto and Exchange.Proto of a request that came
// over HTTP/3, as quic-go's http3 server names it.
const ProtoHTTP3 = "HTTP/3.0"

// H3Options are what an HTTP/3 listener adds to the HTTP listeners'
// limits: the connection limits, which a QUIC connection meets once its
// handshake has validated its address rather than at accept, and the
// address-validation policy.
type H3Options struct {
	// HoldConn counts each connection against the per-client and total
	// connection limits (limits.Limiter.HoldConn); nil counts none.
	HoldConn func(client netip.Addr) (release func(), ok bool)
	// Gate decides when new connections must prove their address with a
	// Retry; nil: never.
	Gate *quicconf.Gate
}

// H3Server serves DoH over HTTP/3 (RFC 9114) on one UDP socket: every
// status, header and body is what the HTTP/2 and HTTP/1.1 listeners send
// for the same request. A [*Handler] is served on quic-go's streams
// directly (h3conn.go), through the same core as the HTTP/2 server; any
// other http.Handler through quic-go's http3.Server. The direct path
// spends about half the CPU per cache hit (scripts/bench-http3.sh);
// TestH3ServersAgree holds the two to the same answers, events and
// counters.
type H3Server struct {
	srv    *http3.Server // the http.Handler path; nil on the direct one
	tls    *tls.Config
	quic   *quic.Config
	opts   H3Options
	active atomic.Int64 // requests in flight

	// The direct path.
	handler              *Handler
	limits               Limits
	maxList              int
	pool                 *workpool.Pool[h3job]
	graceCtx, closeCtx   context.Context // end at Shutdown, and at Close
	graceStop, closeStop context.CancelFunc
	conns                sync.WaitGroup // connections being served

	mu   sync.Mutex
	ln   *quicconf.Listener
	down bool
}

// NewH3Server returns an HTTP/3 server for h with l's limits (streams
// per connection, header size, read, write and idle timeouts). tlsConfig
// holds the certificates (GetCertificate, which is asked at each
// handshake, so renewed and reloaded certificates reach new connections
// while open ones keep theirs); it is not changed. 0-RTT is off
// (quicconf).
func NewH3Server(h http.Handler, tlsConfig *tls.Config, l Limits, o H3Options) *H3Server {
	dh, _ := h.(*Handler)
	return newH3Server(h, dh, tlsConfig, l, o)
}

// newH3Server serves direct on quic-go's streams when direct is not nil,
// else h through http3.Server.
func newH3Server(h http.Handler, direct *Handler, tlsConfig *tls.Config, l Limits, o H3Options) *H3Server {
	l = l.withDefaults()
	s := &H3Server{
		tls: quicconf.TLS(tlsConfig, http3.NextProtoH3),
		quic: quicconf.Config(quicconf.Limits{
			MaxStreams:       int(l.MaxConcurrentStreams),
			UniStreams:       true, // HTTP/3's control and QPACK streams
			IdleTimeout:      l.IdleTimeout,
			HandshakeTimeout: l.ReadHeaderTimeout,
		}),
		opts: o,
	}
	if direct != nil {
		s.handler, s.limits, s.maxList = direct, l, l.MaxHeaderBytes
		s.pool = workpool.New(maxIdleWorkers, runH3Job)
		s.graceCtx, s.graceStop = context.WithCancel(context.Background())
		s.closeCtx, s.closeStop = context.WithCancel(context.Background())
		return s
	}
	read, write := l.ReadTimeout, l.WriteTimeout
	s.srv = &http3.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.active.Add(1)
			defer s.active.Add(-1)
			// A stream's request must come whole within ReadTimeout and
			// its answer leave within WriteTimeout, as over HTTP/2.
			if d, ok := w.(deadliner); ok {
				now := time.Now()
				d.SetReadDeadline(now.Add(read))
				d.SetWriteDeadline(now.Add(write))
			}
			h.ServeHTTP(w, r)
		}),
		MaxHeaderBytes: l.MaxHeaderBytes,
		IdleTimeout:    l.IdleTimeout,
	}
	return s
}

// deadliner is what http3's response writer offers besides
// http.ResponseWriter to bound a stream.
type deadliner interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// Active is the number of requests being answered.
func (s *H3Server) Active() int64 { return s.active.Load() }

// Serve serves HTTP/3 on pc until Shutdown or Close, which make it
// return http.ErrServerClosed; pc is the server's from then on.
func (s *H3Server) Serve(pc net.PacketConn) error {
	s.mu.Lock()
	if s.down {
		s.mu.Unlock()
		pc.Close()
		return http.ErrServerClosed
	}
	ln, err := quicconf.Listen(pc, s.tls, s.quic, s.opts.Gate)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("doh: http3 listener: %w", err)
	}
	s.ln = ln
	if s.srv == nil {
		s.conns.Add(1) // the accept loop's, so that Shutdown waits for it too
	}
	s.mu.Unlock()
	if s.srv == nil {
		err = s.serveDirect(limitedListener{ln, s.opts.HoldConn})
	} else {
		err = s.srv.ServeListener(limitedListener{ln, s.opts.HoldConn})
	}
	if errors.Is(err, quic.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		err = http.ErrServerClosed
	}
	return err
}

// serveDirect accepts connections and serves each on quic-go's streams
// until the listener stops accepting.
func (s *H3Server) serveDirect(ln limitedListener) error {
	defer s.conns.Done()
	for {
		qc, err := ln.Accept(s.closeCtx)
		if err != nil {
			return err
		}
		s.conns.Add(1)
		go func() {
			defer s.conns.Done()
			newH3Conn(s, qc).serve()
		}()
	}
}

// Shutdown sends every connection a GOAWAY and waits until their
// requests are answered, or ctx ends; then it closes the socket.
func (s *H3Server) Shutdown(ctx context.Context) error {
	s.stopAccepting()
	if s.srv != nil {
		err := s.srv.Shutdown(ctx)
		s.close()
		return err
	}
	s.graceStop()
	done := make(chan struct{})
	go func() { s.conns.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.Close()
	return err
}

// Close closes every connection and the socket.
func (s *H3Server) Close() error {
	if s.srv != nil {
		err := s.srv.Close()
		s.close()
		return err
	}
	s.stopAccepting()
	s.graceStop()
	s.closeStop()
	s.conns.Wait()
	s.close()
	s.pool.Stop()
	return nil
}

func (s *H3Server) stopAccepting() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = true
	if s.ln != nil {
		s.ln.StopAccepting()
	}
}

func (s *H3Server) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = true
	if s.ln != nil {
		s.ln.Close()
	}
}

// h3ExcessiveLoad is H3_EXCESSIVE_LOAD (RFC 9114 §8.1): a connection
// over the connection limits is closed with it.
const h3ExcessiveLoad = 0x0107

// limitedListener counts each accepted connection (its address validated
// by the handshake) against the connection limits, as a TCP connection is
// counted at accept, and closes one over them.
type limitedListener struct {
	*quicconf.Listener
	hold func(client netip.Addr) (release func(), ok bool)
}

func (l limitedListener) Accept(ctx context.Context) (*quic.Conn, error) {
	for {
		c, err := l.Listener.Accept(ctx)
		if err != nil || l.hold == nil {
			return c, err
		}
		var client netip.Addr
		if u, ok := c.RemoteAddr().(*net.UDPAddr); ok {
			client = u.AddrPort().Addr().Unmap()
		}
		release, ok := l.hold(client)
		if !ok {
			c.CloseWithError(h3ExcessiveLoad, "too many connections")
			continue
		}
		context.AfterFunc(c.Context(), release)
		return c, nil
	}
}
