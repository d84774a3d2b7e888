//go:build !wasip1

// The listeners are the native server's; the edge module serves requests
// its host hands it, so it carries no HTTP/2 server of its own.

package doh

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"log"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/dohfwd/dohfwd/doh/workpool"
)

// Limits bound what one client may hold on a listener. Zero fields take
// the values of DefaultLimits.
type Limits struct {
	// MaxConcurrentStreams is how many requests one HTTP/2 connection may
	// have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
	MaxConcurrentStreams uint32
	// MaxReadFrameSize is the largest HTTP/2 frame the server reads
	// (SETTINGS_MAX_FRAME_SIZE; 16 KiB to 16 MiB).
	MaxReadFrameSize uint32
	// MaxHeaderBytes bounds request headers, the URL included
	// (SETTINGS_MAX_HEADER_LIST_SIZE in HTTP/2). A GET's dns parameter
	// must fit; bigger queries go by POST.
	MaxHeaderBytes int
	// ReadHeaderTimeout is how long a client may take to send headers;
	// ReadTimeout the whole request, body included.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	// WriteTimeout bounds writing a response; it must outlast the slowest
	// question (three 2 s attempts and some).
	WriteTimeout time.Duration
	// IdleTimeout closes connections without requests for that long
	// (HTTP/2 with a GOAWAY).
	IdleTimeout time.Duration
}

// DefaultLimits are the limits of a public DoH service: a browser keeps
// one connection with many streams; slow or idle clients are let go.
func DefaultLimits() Limits {
	return Limits{
		MaxConcurrentStreams: 250,
		MaxReadFrameSize:     16 << 10,
		MaxHeaderBytes:       16 << 10,
		ReadHeaderTimeout:    5 * time.Second,
		ReadTimeout:          10 * time.Second,
		WriteTimeout:         15 * time.Second,
		IdleTimeout:          2 * time.Minute,
	}
}

// withDefaults is l with each zero field taken from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	l.MaxConcurrentStreams = cmp.Or(l.MaxConcurrentStreams, d.MaxConcurrentStreams)
	l.MaxReadFrameSize = cmp.Or(l.MaxReadFrameSize, d.MaxReadFrameSize)
	l.MaxHeaderBytes = cmp.Or(l.MaxHeaderBytes, d.MaxHeaderBytes)
	l.ReadHeaderTimeout = cmp.Or(l.ReadHeaderTimeout, d.ReadHeaderTimeout)
	l.ReadTimeout = cmp.Or(l.ReadTimeout, d.ReadTimeout)
	l.WriteTimeout = cmp.Or(l.WriteTimeout, d.WriteTimeout)
	l.IdleTimeout = cmp.Or(l.IdleTimeout, d.IdleTimeout)
	return l
}

// maxIdleWorkers is how many resolving goroutines a server keeps for the
// next questions: more than the questions a busy server has in flight at
// once on a few cores, few enough that their stacks (shrunk by the
// garbage collector while they wait) cost little.
const maxIdleWorkers = 256

// maxUploadPerStream is the HTTP/2 flow-control window of one request:
// a body is at most one DNS message.
const maxUploadPerStream = MaxMessageSize + 1

// Server serves DoH on one listener. For a [*Handler] (the edge host's
// too: [HandlerFor]) it speaks HTTP/2 itself (over TLS with ALPN h2, and
// with prior knowledge on a plaintext listener) and leaves HTTP/1.1 to
// net/http; any other handler is served by net/http and
// golang.org/x/net/http2 entirely.
type Server struct {
	core   *Handler     // nil: h1 serves everything
	h1     *http.Server // HTTP/1.1, or everything
	tls    *tls.Config  // nil: plaintext
	limits Limits

	active  atomic.Int64        // requests in flight, both protocols
	workers *workpool.Pool[job] // resolve the HTTP/2 questions that wait on the network

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*h2conn]struct{}
	h1ln      *connQueue
	down      bool
}

// NewTLSServer returns a server for h that speaks HTTP/2 and HTTP/1.1 over
// TLS (ALPN h2, http/1.1), with l's limits. tlsConfig holds the
// certificates (Certificates or GetCertificate) and is not changed: the
// server gets a clone with TLS 1.2 as the least version and h2 and
// http/1.1 added to its protocols. Other protocols it lists (acme-tls/1)
// end after the handshake, which is all they need.
func NewTLSServer(h http.Handler, tlsConfig *tls.Config, l Limits) (*Server, error) {
	var c *tls.Config
	if tlsConfig != nil {
		c = tlsConfig.Clone()
	} else {
		c = new(tls.Config)
	}
	if c.MinVersion < tls.VersionTLS12 {
		c.MinVersion = tls.VersionTLS12
	}
	// Responses that leave together go in one record where they fit,
	// from the first byte on.
	c.DynamicRecordSizingDisabled = true
	for _, p := range []string{"http/1.1", "h2"} {
		if !slices.Contains(c.NextProtos, p) {
			c.NextProtos = append([]string{p}, c.NextProtos...)
		}
	}
	return newServer(h, c, l)
}

// NewPlainServer returns a server for h without TLS, for use behind a TLS
// proxy: HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on one port, with
// l's limits. h2c by Upgrade from HTTP/1.1 is not offered: TLS proxies
// speak h2c with prior knowledge, and an Upgrade request is simply served
// as HTTP/1.1.
func NewPlainServer(h http.Handler, l Limits) *Server {
	s, err := newServer(h, nil, l)
	if err != nil {
		// Only a TLS cipher-suite list can fail ConfigureServer, and there
		// is no TLS here.
		panic(err)
	}
	return s
}

func newServer(h http.Handler, tlsConfig *tls.Config, l Limits) (*Server, error) {
	l = l.withDefaults()
	s := &Server{tls: tlsConfig, limits: l, listeners: map[net.Listener]struct{}{}, conns: map[*h2conn]struct{}{},
		workers: workpool.New(maxIdleWorkers, resolveJob)}
	s.core, _ = h.(*Handler)
	s.h1 = &http.Server{
		Handler:           countRequests(h, &s.active),
		TLSConfig:         tlsConfig,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
	}
	if s.core != nil {
		// HTTP/2 is this package's; net/http gets HTTP/1.1 only.
		s.h1.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
		s.h1.Protocols = new(http.Protocols)
		s.h1.Protocols.SetHTTP1(true)
		return s, nil
	}
	err := http2.ConfigureServer(s.h1, &http2.Server{
		MaxConcurrentStreams:     l.MaxConcurrentStreams,
		MaxReadFrameSize:         l.MaxReadFrameSize,
		IdleTimeout:              l.IdleTimeout,
		MaxUploadBufferPerStream: maxUploadPerStream,
	})
	if err != nil {
		return nil, fmt.Errorf("doh: configuring HTTP/2: %w", err)
	}
	if tlsConfig == nil {
		s.h1.Protocols = new(http.Protocols)
		s.h1.Protocols.SetHTTP1(true)
		s.h1.Protocols.SetUnencryptedHTTP2(true)
	}
	return s, nil
}

// SetErrorLog sets where net/http logs what goes wrong with HTTP/1.1
// connections.
func (s *Server) SetErrorLog(l *log.Logger) { s.h1.ErrorLog = l }

// Active is the number of requests being answered.
func (s *Server) Active() int64 { return s.active.Load() }

// Serve accepts connections on ln until Shutdown or Close, which make it
// return http.ErrServerClosed.
func (s *Server) Serve(ln net.Listener) error {
	if s.core == nil {
		if s.tls != nil {
			return s.h1.ServeTLS(ln, "", "")
		}
		return s.h1.Serve(ln)
	}
	s.mu.Lock()
	if s.down {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	if s.h1ln == nil {
		s.h1ln = newConnQueue(ln.Addr())
		go s.h1.Serve(s.h1ln)
	}
	s.mu.Unlock()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			down := s.down
			s.mu.Unlock()
			if down {
				return http.ErrServerClosed
			}
			if te, ok := err.(interface{ Temporary() bool }); ok && te.Temporary() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		go s.handoff(nc)
	}
}

// handoff finds out what a new connection speaks and hands it to the
// HTTP/2 server or to net/http.
func (s *Server) handoff(nc net.Conn) {
	nc.SetDeadline(time.Now().Add(s.limits.ReadHeaderTimeout))
	if s.tls != nil {
		tc := tls.Server(nc, s.tls)
		if err := tc.Handshake(); err != nil {
			nc.Close()
			return
		}
		switch tc.ConnectionState().NegotiatedProtocol {
		case "h2":
			nc.SetDeadline(time.Time{})
			s.serveH2(tc, bufio.NewReaderSize(tc, readBufferSize))
		case "", "http/1.1":
			nc.SetDeadline(time.Time{})
			s.h1ln.push(tc)
		default: // acme-tls/1: the handshake was all
			tc.Close()
		}
		return
	}
	// Plaintext: HTTP/2 with prior knowledge starts with "PRI", which no
	// HTTP/1 request does.
	br := bufio.NewReaderSize(nc, readBufferSize)
	head, err := br.Peek(3)
	if err != nil {
		nc.Close()
		return
	}
	nc.SetDeadline(time.Time{})
	if string(head) == "PRI" {
		s.serveH2(nc, br)
		return
	}
	s.h1ln.push(&bufferedConn{Conn: nc, r: br})
}

func (s *Server) serveH2(nc net.Conn, br *bufio.Reader) {
	c := newH2Conn(s, nc, br)
	s.mu.Lock()
	if s.down {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	c.serve()
}

func (s *Server) forget(c *h2conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Shutdown stops accepting, sends every HTTP/2 connection a GOAWAY and
// waits until their open streams are answered and net/http's connections
// are idle, or ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.core == nil {
		return s.h1.Shutdown(ctx)
	}
	conns := s.stop()
	for _, c := range conns {
		c.drain()
	}
	h1 := make(chan error, 1)
	go func() { h1 <- s.h1.Shutdown(ctx) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 {
			return <-h1
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Close stops accepting and closes every connection.
func (s *Server) Close() error {
	if s.core == nil {
		return s.h1.Close()
	}
	for _, c := range s.stop() {
		c.mu.Lock()
		c.closeLocked()
		c.mu.Unlock()
	}
	return s.h1.Close()
}

// stop closes the listeners and returns the HTTP/2 connections.
func (s *Server) stop() []*h2conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = true
	s.workers.Stop()
	for ln := range s.listeners {
		ln.Close()
	}
	clear(s.listeners)
	if s.h1ln != nil {
		s.h1ln.Close()
	}
	conns := make([]*h2conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}

// countRequests wraps h so that active counts its requests in flight.
func countRequests(h http.Handler, active *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		active.Add(1)
		defer active.Add(-1)
		h.ServeHTTP(w, r)
	})
}

// connQueue is the listener net/http serves HTTP/1.1 from: connections
// the HTTP/2 server's accept loop found to speak HTTP/1.
type connQueue struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (q *connQueue) push(c net.Conn) {
	select {
	case q.ch <- c:
	case <-q.done:
		c.Close()
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }

// bufferedConn is a connection whose first bytes were read ahead.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }
