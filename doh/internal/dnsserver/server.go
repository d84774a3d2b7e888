package dnsserver

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/wiretap"
)

// Resolver answers one checked query given as bytes, appending the reply
// to dst (Response.Wire): QR clear, opcode QUERY, exactly one question.
// ctx ends when the client goes away. *engine.Engine and *ddr.Resolver
// satisfy it.
type Resolver interface {
	Resolve(ctx context.Context, query, dst []byte) engine.Response
}

// Limits bound what one client may hold. Zero fields take the values of
// DefaultLimits.
type Limits struct {
	// MaxQuerySize is the largest query a stream may frame; a longer
	// length prefix closes the connection. Queries are small; 65535 is
	// what the frame allows, not what a client needs.
	MaxQuerySize int
	// MaxInFlight is how many questions one stream connection may have
	// open at once; past it the server stops reading until one ends.
	MaxInFlight int
	// ReadTimeout is how long a query, once its first byte is in, may
	// take to arrive whole; also the TLS handshake's bound.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing one answer.
	WriteTimeout time.Duration
	// IdleTimeout closes a stream without a query or an answer owed for
	// that long.
	IdleTimeout time.Duration
}

// DefaultLimits are the DoH listener's limits in DNS terms: as many open
// questions per connection as HTTP/2 streams, the same timeouts.
func DefaultLimits() Limits {
	return Limits{
		MaxQuerySize: 4096,
		MaxInFlight:  250,
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 15 * time.Second,
		IdleTimeout:  2 * time.Minute,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	l.MaxQuerySize = min(cmp.Or(l.MaxQuerySize, d.MaxQuerySize), maxMessageSize)
	l.MaxInFlight = cmp.Or(l.MaxInFlight, d.MaxInFlight)
	l.ReadTimeout = cmp.Or(l.ReadTimeout, d.ReadTimeout)
	l.WriteTimeout = cmp.Or(l.WriteTimeout, d.WriteTimeout)
	l.IdleTimeout = cmp.Or(l.IdleTimeout, d.IdleTimeout)
	return l
}

// Server serves DNS queries from Resolver on stream listeners (TCP, or
// TLS for DoT) and packet connections (UDP). One Server may serve several
// listeners; Shutdown and Close end them all.
type Server struct {
	Resolver Resolver
	Limits   Limits
	// TLSConfig, when set, makes ServeStream speak DoT: the server takes a
	// clone whose only ALPN protocol is "dot" (RFC 7858 with ALPN, RFC
	// 9461's alpn=dot).
	TLSConfig *tls.Config
	// OnDrop, if set, is told of each connection closed for breaking the
	// rules (a failed handshake, a bad length, not a query, a stall), for
	// logs. It must not block.
	OnDrop func(peer net.Addr, reason string)
	// Admit, if set, is asked for each question about to be resolved,
	// with the client's address; a refused client gets REFUSED with EDE
	// 18 (Prohibited) and the resolver is not asked. The resolver's
	// context names the client (engine.WithClient) either way.
	Admit func(client netip.Addr) (ok bool, retryAfter time.Duration)
	// HoldConn, if set, counts each accepted QUIC connection against the
	// connection limits (limits.Limiter.HoldConn): a refused one is closed
	// with DOQ_EXCESSIVE_LOAD, else release is called when it ends. TCP
	// connections are counted by their listener.
	HoldConn func(client netip.Addr) (release func(), ok bool)
	// Proto, if set, names the protocol on the question's attempt and
	// question events (engine.QuestionContext.SetProto): dot, doq, dns.
	Proto string
	// Wiretap, if set, is handed each question's query and answer
	// (dnstap's CLIENT_QUERY and CLIENT_RESPONSE): UDP, TCP, or DoT
	// with TLSConfig.
	Wiretap wiretap.Tap

	mu        sync.Mutex
	limits    Limits
	tlsConfig *tls.Config
	listeners map[net.Listener]struct{}
	packets   map[net.PacketConn]struct{}
	conns     map[*stream]struct{}
	// QUIC listeners and connections (quic.go).
	quicListeners map[QUICListener]struct{}
	quicConns     map[*quic.Conn]struct{}
	closing       bool
	done          chan struct{} // closed by Shutdown or Close
	// stopCtx ends with done: QUIC's accept calls wait on it.
	stopCtx context.Context
	stopNow context.CancelFunc
	// ctx is the UDP questions' context: Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc

	inFlight  atomic.Int64   // questions from arrival until their answer is sent
	questions atomic.Uint64  // questions put to the resolver (or refused by Admit)
	serving   sync.WaitGroup // packet questions and stream connections
}

// ErrServerClosed is what the Serve methods return after Shutdown or
// Close.
var ErrServerClosed = errors.New("dnsserver: server closed")

func (s *Server) init() {
	if s.conns != nil {
		return
	}
	s.limits = s.Limits.withDefaults()
	if s.TLSConfig != nil {
		c := s.TLSConfig.Clone()
		c.NextProtos = []string{"dot"}
		if c.MinVersion < tls.VersionTLS12 {
			c.MinVersion = tls.VersionTLS12
		}
		s.tlsConfig = c
	}
	s.listeners = map[net.Listener]struct{}{}
	s.packets = map[net.PacketConn]struct{}{}
	s.conns = map[*stream]struct{}{}
	s.quicListeners = map[QUICListener]struct{}{}
	s.quicConns = map[*quic.Conn]struct{}{}
	s.done = make(chan struct{})
	s.stopCtx, s.stopNow = context.WithCancel(context.Background())
	s.ctx, s.cancel = context.WithCancel(context.Background())
}

// InFlight is the number of questions being answered now: resolved or
// their answers written.
func (s *Server) InFlight() int64 { return s.inFlight.Load() }

// Questions counts the questions this server put to its resolver or
// refused for the client's limits, for the per-transport counters.
func (s *Server) Questions() uint64 { return s.questions.Load() }

// resolve is the one place the server asks its resolver, so that another
// resolver API can be put in here alone.
func (s *Server) resolve(ctx context.Context, q *dns.Msg, client netip.Addr) *dns.Msg {
	s.questions.Add(1)
	if s.Admit != nil {
		if ok, _ := s.Admit(client); !ok {
			return refusedReply(q)
		}
	}
	// The client is named to the engine for its limits and a scope's
	// ECS add.
	qc := new(engine.QuestionContext)
	ctx = qc.Set(ctx, client, nil)
	qc.SetProto(s.Proto)
	// The query is packed again and the reply unpacked: packReply
	// truncates and pads an unpacked reply.
	raw, err := q.Pack()
	if err != nil {
		return new(dns.Msg).SetRcode(q, dns.RcodeServerFailure)
	}
	r := s.Resolver.Resolve(ctx, raw, nil)
	m := new(dns.Msg)
	if err := m.Unpack(r.Wire); err != nil || len(r.Wire) == 0 {
		return new(dns.Msg).SetRcode(q, dns.RcodeServerFailure)
	}
	return m
}

// Shutdown stops accepting, closes idle connections and waits for the
// questions in flight to be answered, then closes the rest. When ctx ends
// first it closes everything and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.stopAcceptingLocked()
	for c := range s.conns {
		c.wake() // an idle reader sees the deadline and ends the stream
	}
	s.mu.Unlock()

	all := make(chan struct{})
	go func() { s.serving.Wait(); close(all) }()
	var err error
	select {
	case <-all:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.Close()
	return err
}

// Close closes every listener and connection now.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopAcceptingLocked()
	for pc := range s.packets {
		pc.Close()
	}
	s.cancel()
	for c := range s.conns {
		c.abort()
	}
	for c := range s.quicConns {
		c.CloseWithError(DoQNoError, "")
	}
	for ln := range s.quicListeners {
		ln.Close()
	}
	return nil
}

// stopAcceptingLocked marks the server closing, once, and closes its
// listeners. s.mu is held.
func (s *Server) stopAcceptingLocked() {
	s.init()
	if !s.closing {
		s.closing = true
		close(s.done)
		s.stopNow()
	}
	for ln := range s.listeners {
		ln.Close()
	}
	for ln := range s.quicListeners {
		ln.StopAccepting()
	}
}

// track adds or removes a listener; it reports false when the server is
// closing.
func (s *Server) trackListener(ln net.Listener, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	if add {
		if s.closing {
			return false
		}
		s.listeners[ln] = struct{}{}
	} else {
		delete(s.listeners, ln)
	}
	return true
}

// ServeStream accepts connections on ln (TCP) and serves each one's
// queries, over TLS when TLSConfig is set. It returns ErrServerClosed after
// Shutdown or Close.
func (s *Server) ServeStream(ln net.Listener) error {
	if !s.trackListener(ln, true) {
		return ErrServerClosed
	}
	defer s.trackListener(ln, false)
	var delay time.Duration // backoff on temporary accept errors, as net/http
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return ErrServerClosed
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTooManyFiles) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		st := s.newStream(c)
		if st == nil {
			c.Close()
			return ErrServerClosed
		}
		go st.serve()
	}
}

// clientOf is the address of a peer (the client, behind PROXY protocol).
func clientOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap()
	case *net.UDPAddr:
		return a.AddrPort().Addr().Unmap()
	case nil:
		return netip.Addr{}
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap.Addr().Unmap()
}
