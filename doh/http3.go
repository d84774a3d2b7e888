//go:build !wasip1

package doh

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/dohfwd/dohfwd/doh/internal/quicconf"
)

// ProtoHTTP3 is Request.Proto and Exchange.Proto of a request that came
// over HTTP/3, as quic-go's http3 server names it.
const ProtoHTTP3 = "HTTP/3.0"

// H3Options are what an HTTP/3 listener adds to the HTTP listeners'
// limits: the client connection limits, which a QUIC connection meets
// at its handshake rather than at accept, and when to ask for address
// validation.
type H3Options struct {
	// Conns counts connections against the per-client and total limits;
	// nil counts none.
	Conns quicconf.ConnLimiter
	// RetryAbove is how many connection attempts a second come in before
	// new ones must first prove their address with a Retry; 0 =
	// quicconf.DefaultRetryAbove.
	RetryAbove int
}

// H3Server serves DoH over HTTP/3 (RFC 9114) on one UDP socket, with
// quic-go's http3 server in front of the same handler that answers
// HTTP/1.1 (ServeHTTP): every status, header and body is what the
// HTTP/2 and HTTP/1.1 listeners send for the same request.
type H3Server struct {
	srv    *http3.Server
	tls    *tls.Config
	quic   *quic.Config
	opts   H3Options
	active atomic.Int64 // requests in flight

	mu   sync.Mutex
	tr   *quic.Transport
	ln   *quic.Listener
	down bool
}

// NewH3Server returns an HTTP/3 server for h with l's limits (streams
// per connection, header size, read, write and idle timeouts). tlsConfig
// holds the certificates (GetCertificate, which is asked at each
// handshake, so renewed and reloaded certificates reach new connections
// while open ones keep theirs); it is not changed.
func NewH3Server(h http.Handler, tlsConfig *tls.Config, l Limits, o H3Options) *H3Server {
	l = l.withDefaults()
	if o.RetryAbove <= 0 {
		o.RetryAbove = quicconf.DefaultRetryAbove
	}
	s := &H3Server{
		tls: quicconf.TLS(tlsConfig, http3.NextProtoH3),
		quic: quicconf.Config(quicconf.Limits{
			MaxStreams:       int64(l.MaxConcurrentStreams),
			HandshakeTimeout: l.ReadHeaderTimeout,
			IdleTimeout:      l.IdleTimeout,
		}),
		opts: o,
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
	s.tr = quicconf.Transport(pc, s.opts.Conns, s.opts.RetryAbove)
	ln, err := s.tr.Listen(s.tls, s.quic)
	if err != nil {
		s.mu.Unlock()
		s.tr.Close()
		return fmt.Errorf("doh: http3 listener: %w", err)
	}
	s.ln = ln
	s.mu.Unlock()
	err = s.srv.ServeListener(ln)
	if errors.Is(err, quic.ErrServerClosed) {
		err = http.ErrServerClosed
	}
	return err
}

// Shutdown sends every connection a GOAWAY and waits until their
// requests are answered, or ctx ends; then it closes the socket.
func (s *H3Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	s.closeTransport()
	return err
}

// Close closes every connection and the socket.
func (s *H3Server) Close() error {
	err := s.srv.Close()
	s.closeTransport()
	return err
}

func (s *H3Server) closeTransport() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = true
	if s.ln != nil {
		s.ln.Close()
	}
	if s.tr != nil {
		s.tr.Close()
	}
}

// AltSvc is the Alt-Svc value that advertises HTTP/3 on port for a day
// (RFC 7838; RFC 9114 §3.1.1).
func AltSvc(port int) string { return `h3=":` + strconv.Itoa(port) + `"; ma=86400` }
