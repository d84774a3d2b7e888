// Package memnet is an in-memory engine.Network for tests that run under
// testing/synctest.
//
// Each server address gets a Handler that decides, per transaction, how the
// server behaves: which error Open, Send or Receive returns, which replies
// arrive and when, whether the peer closes. Waiting uses timers on the
// caller's clock, so inside a synctest bubble a 2 s timeout takes no real
// time. Every transaction opened is recorded (server, transport, source,
// times, query) so tests can assert order and timing exactly.
package memnet

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/miekg/dns"
)

// Conn describes a transaction as its server sees it when it is opened.
type Conn struct {
	Server    netip.AddrPort
	Transport engine.Transport
	Source    netip.Addr
	// N counts the transactions this server has been opened for before
	// this one (0 for the first).
	N int
}

// Handler decides how a server behaves for one transaction.
type Handler func(Conn) Action

// Action is a server's behaviour for one transaction. The zero Action is
// a server that never answers.
type Action struct {
	OpenError    *engine.SocketError // Open fails with it
	SendError    *engine.SocketError // Send fails with it
	ReceiveError *engine.SocketError // Receive fails with it, ReceiveDelay after the send
	ReceiveDelay time.Duration       // e.g. the round trip of an ICMP port-unreachable
	// OpenDelay is how long Open takes (a slow TCP connect); past the
	// deadline Open fails with a timeout.
	OpenDelay time.Duration
	Replies   []Reply // delivered after the query is sent
	// Close makes the peer hang up after the replies: Receive returns a
	// SocketError of class ErrClosed (EOF for TCP).
	Close bool
}

// Reply is one datagram (UDP) or one piece of the stream (TCP).
type Reply struct {
	Delay time.Duration  // after the query was sent
	From  netip.AddrPort // zero: the server itself
	// Msg builds the reply from the query the server received.
	Msg func(q *dns.Msg) *dns.Msg
	// Raw is sent instead of Msg (garbage). Over TCP every reply is
	// framed with its two-byte length.
	Raw []byte
	// Cut sends only the first half of the framed message (TCP).
	Cut bool
}

// Transaction is the record of one Open.
type Transaction struct {
	Server    netip.AddrPort
	Transport engine.Transport
	Source    netip.Addr
	Opened    time.Time
	Sent      time.Time // zero if nothing was sent
	Closed    time.Time // zero while open
	Query     *dns.Msg  // the query sent, parsed; nil if none
	OpenError bool      // Open failed
}

// Network is the in-memory engine.Network. The zero value is not usable:
// call New.
type Network struct {
	mu       sync.Mutex
	handlers map[netip.AddrPort]Handler
	seen     map[netip.AddrPort]int
	log      []*Transaction
	open     int
	// tlsOpened counts the DoT connections opened (dot.go); each after
	// the first resumes a session.
	tlsOpened int
}

// New returns an empty network: every server is silent until handled.
func New() *Network {
	return &Network{handlers: map[netip.AddrPort]Handler{}, seen: map[netip.AddrPort]int{}}
}

// Handle sets the behaviour of server; later transactions use it.
func (n *Network) Handle(server netip.AddrPort, h Handler) {
	n.mu.Lock()
	n.handlers[server] = h
	n.mu.Unlock()
}

// Transactions returns a copy of the record of every transaction so far.
func (n *Network) Transactions() []Transaction {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]Transaction, len(n.log))
	for i, t := range n.log {
		out[i] = *t
	}
	return out
}

// Reset forgets the recorded transactions (handlers stay).
func (n *Network) Reset() {
	n.mu.Lock()
	n.log = nil
	n.mu.Unlock()
}

// OpenSockets returns the number of sockets opened and not yet closed.
func (n *Network) OpenSockets() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.open
}

// Open implements engine.Network.
func (n *Network) Open(t engine.Transport, server netip.AddrPort, source netip.Addr, deadline time.Time) (engine.Socket, error) {
	n.mu.Lock()
	h := n.handlers[server]
	c := Conn{Server: server, Transport: t, Source: source, N: n.seen[server]}
	n.seen[server]++
	rec := &Transaction{Server: server, Transport: t, Source: source, Opened: time.Now()}
	n.log = append(n.log, rec)
	n.mu.Unlock()

	var a Action
	if h != nil {
		a = h(c)
	}
	if a.OpenDelay > 0 {
		if wait := time.Until(deadline); !deadline.IsZero() && wait < a.OpenDelay {
			time.Sleep(wait)
			a.OpenError = &engine.SocketError{Op: "connect", Class: engine.ErrTimeout}
		} else {
			time.Sleep(a.OpenDelay)
		}
	}
	if a.OpenError != nil {
		n.mu.Lock()
		rec.OpenError, rec.Closed = true, rec.Opened
		n.mu.Unlock()
		return nil, a.OpenError
	}
	n.mu.Lock()
	n.open++
	n.mu.Unlock()
	return &socket{n: n, rec: rec, action: a, transport: t, server: server, done: make(chan struct{})}, nil
}

// socket is one transaction's socket.
type socket struct {
	n         *Network
	rec       *Transaction
	action    Action
	transport engine.Transport
	server    netip.AddrPort

	mu        sync.Mutex
	closed    bool
	done      chan struct{} // closed by Close
	sent      time.Time
	query     *dns.Msg
	recvError bool // ReceiveError already returned
	next      int  // index of the next reply to deliver
	pending   []byte
	from      netip.AddrPort
}

func (s *socket) Send(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return &engine.SocketError{Op: "send", Class: engine.ErrClosed, Err: errors.New("memnet: socket closed")}
	}
	if s.action.SendError != nil {
		return s.action.SendError
	}
	msg := b
	if s.transport == engine.TCP {
		if len(b) < 2 || int(binary.BigEndian.Uint16(b)) != len(b)-2 {
			return &engine.SocketError{Op: "send", Class: engine.ErrOther, Err: errors.New("memnet: TCP query not framed as one message")}
		}
		msg = b[2:]
	}
	q := new(dns.Msg)
	if err := q.Unpack(msg); err != nil {
		q = nil
	}
	s.sent, s.query = time.Now(), q
	s.n.mu.Lock()
	s.rec.Sent, s.rec.Query = s.sent, q
	s.n.mu.Unlock()
	return nil
}

func (s *socket) Receive(b []byte, deadline time.Time) (int, netip.AddrPort, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return 0, netip.AddrPort{}, &engine.SocketError{Op: "receive", Class: engine.ErrClosed, Err: errors.New("memnet: socket closed")}
		}
		now := time.Now()
		if !now.Before(deadline) {
			// What is due at the deadline comes too late, as with a real
			// socket's read deadline.
			s.mu.Unlock()
			return 0, netip.AddrPort{}, &engine.SocketError{Op: "receive", Class: engine.ErrTimeout, Err: errors.New("memnet: deadline exceeded")}
		}
		wake := deadline
		if !s.sent.IsZero() {
			if e := s.action.ReceiveError; e != nil && !s.recvError {
				due := s.sent.Add(s.action.ReceiveDelay)
				if !now.Before(due) {
					s.recvError = true
					s.mu.Unlock()
					return 0, netip.AddrPort{}, e
				}
				if due.Before(wake) {
					wake = due
				}
			}
			if len(s.pending) > 0 {
				n := copy(b, s.pending)
				s.pending = s.pending[n:]
				from := s.from
				s.mu.Unlock()
				return n, from, nil
			}
			if s.next < len(s.action.Replies) {
				r := s.action.Replies[s.next]
				due := s.sent.Add(r.Delay)
				if !now.Before(due) {
					s.next++
					s.pending, s.from = s.wire(r), r.From
					if !s.from.IsValid() {
						s.from = s.server
					}
					if s.transport == engine.UDP {
						// A datagram is read whole or cut, never split.
						n := copy(b, s.pending)
						s.pending = nil
						s.mu.Unlock()
						return n, s.from, nil
					}
					s.mu.Unlock()
					continue
				}
				if due.Before(wake) {
					wake = due
				}
			} else if s.action.Close {
				s.mu.Unlock()
				return 0, s.server, &engine.SocketError{Op: "receive", Class: engine.ErrClosed, Err: errors.New("memnet: EOF")}
			}
		}
		s.mu.Unlock()
		t := time.NewTimer(wake.Sub(now))
		select {
		case <-t.C:
		case <-s.done:
		}
		t.Stop()
	}
}

// wire returns the bytes of reply r as they reach the socket.
func (s *socket) wire(r Reply) []byte {
	b := r.Raw
	if b == nil && r.Msg != nil && s.query != nil {
		m := r.Msg(s.query.Copy())
		var err error
		if b, err = m.Pack(); err != nil {
			panic("memnet: reply does not pack: " + err.Error())
		}
	}
	if s.transport == engine.TCP {
		framed := make([]byte, 2+len(b))
		binary.BigEndian.PutUint16(framed, uint16(len(b)))
		copy(framed[2:], b)
		b = framed
		if r.Cut {
			b = b[:len(b)/2]
		}
	}
	return b
}

func (s *socket) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.done)
	s.n.mu.Lock()
	s.rec.Closed = time.Now()
	s.n.open--
	s.n.mu.Unlock()
	return nil
}
