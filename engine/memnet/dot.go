package memnet

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
)

// DNS over TLS in memory: OpenTLS is a connection (its "handshake" the
// Open of the Handler's first transaction), and every query sent on it is
// one transaction, recorded and handed to the server's Handler as UDP and
// TCP transactions are, with Conn.Transport engine.DoT. Over one
// connection the Handler's replies come in the order their delays give,
// framed; a transaction's ReceiveError or Close ends the whole connection
// (as a reset or the peer's close does), at ReceiveDelay after its query
// or after its last reply.
//
// OpenSockets counts the connections open.

// OpenTLS implements engine.TLSOpener. The Handler's Action for the
// connection's first transaction decides the open: OpenError fails it
// (give it Op "handshake" and class engine.ErrTLS for a failed
// handshake), OpenDelay is the connect and handshake's time.
func (n *Network) OpenTLS(ep *engine.Endpoint, source netip.Addr, deadline time.Time) (engine.Socket, engine.ConnInfo, error) {
	a, rec := n.transaction(ep.Addr, engine.DoT, source)
	if a.OpenDelay > 0 {
		if wait := time.Until(deadline); !deadline.IsZero() && wait < a.OpenDelay {
			time.Sleep(wait)
			a.OpenError = &engine.SocketError{Op: "handshake", Class: engine.ErrTimeout}
		} else {
			time.Sleep(a.OpenDelay)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if a.OpenError != nil {
		rec.OpenError, rec.Closed = true, time.Now()
		return nil, engine.ConnInfo{}, a.OpenError
	}
	n.open++
	n.tlsOpened++
	resumed := n.tlsOpened > 1
	return &stream{n: n, server: ep.Addr, source: source, first: &a, firstRec: rec, wake: make(chan struct{}, 1), done: make(chan struct{})},
		engine.ConnInfo{New: true, Resumed: resumed}, nil
}

// transaction records a transaction to server and asks its Handler what
// it does.
func (n *Network) transaction(server netip.AddrPort, t engine.Transport, source netip.Addr) (Action, *Transaction) {
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
	return a, rec
}

// TLSConnections is how many DoT connections were opened so far.
func (n *Network) TLSConnections() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.tlsOpened
}

// stream is one DoT connection's plaintext.
type stream struct {
	n        *Network
	server   netip.AddrPort
	source   netip.Addr
	first    *Action      // the first transaction's, decided at the open
	firstRec *Transaction // its record

	mu      sync.Mutex
	closed  bool
	events  []event // what reaches the reader, by due time
	pending []byte
	wake    chan struct{} // an event was added
	done    chan struct{} // closed by Close
}

// event is bytes, or the connection's end (err), due at a time.
type event struct {
	due  time.Time
	b    []byte
	err  *engine.SocketError
	rec  *Transaction // the transaction the bytes answer
	last bool         // its last reply: the record closes
}

func (s *stream) Send(b []byte) error {
	if len(b) < 2 || int(binary.BigEndian.Uint16(b)) != len(b)-2 {
		return &engine.SocketError{Op: "send", Class: engine.ErrOther, Err: errors.New("memnet: DoT query not framed as one message")}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return &engine.SocketError{Op: "send", Class: engine.ErrClosed, Err: errors.New("memnet: connection closed")}
	}
	a, rec := s.first, s.firstRec
	s.first, s.firstRec = nil, nil
	s.mu.Unlock()
	if a == nil {
		var x Action
		x, rec = s.n.transaction(s.server, engine.DoT, s.source)
		a = &x
	}
	if a.SendError != nil {
		return a.SendError
	}
	q := new(dns.Msg)
	if err := q.Unpack(b[2:]); err != nil {
		q = nil
	}
	now := time.Now()
	s.n.mu.Lock()
	rec.Sent, rec.Query = now, q
	s.n.mu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	end := now
	for i, r := range a.Replies {
		w := wireOf(r, q)
		framed := binary.BigEndian.AppendUint16(nil, uint16(len(w)))
		framed = append(framed, w...)
		if r.Cut {
			framed = framed[:len(framed)/2]
		}
		due := now.Add(r.Delay)
		s.add(event{due: due, b: framed, rec: rec, last: i == len(a.Replies)-1})
		if due.After(end) {
			end = due
		}
	}
	switch {
	case a.ReceiveError != nil:
		s.add(event{due: now.Add(a.ReceiveDelay), err: a.ReceiveError})
	case a.Close:
		s.add(event{due: end, err: &engine.SocketError{Op: "receive", Class: engine.ErrClosed, Err: errors.New("memnet: EOF")}})
	}
	return nil
}

// add puts ev among the events by due time, after those due with it.
// Under s.mu.
func (s *stream) add(ev event) {
	i := len(s.events)
	for i > 0 && s.events[i-1].due.After(ev.due) {
		i--
	}
	s.events = append(s.events, event{})
	copy(s.events[i+1:], s.events[i:])
	s.events[i] = ev
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *stream) Receive(b []byte, deadline time.Time) (int, netip.AddrPort, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return 0, netip.AddrPort{}, &engine.SocketError{Op: "receive", Class: engine.ErrClosed, Err: errors.New("memnet: connection closed")}
		}
		if len(s.pending) > 0 {
			n := copy(b, s.pending)
			s.pending = s.pending[n:]
			s.mu.Unlock()
			return n, s.server, nil
		}
		now := time.Now()
		if len(s.events) > 0 && !now.Before(s.events[0].due) {
			ev := s.events[0]
			s.events = s.events[1:]
			if ev.err != nil {
				s.mu.Unlock()
				return 0, s.server, ev.err
			}
			s.pending = ev.b
			if ev.last {
				s.n.mu.Lock()
				ev.rec.Closed = now
				s.n.mu.Unlock()
			}
			s.mu.Unlock()
			continue
		}
		if !deadline.IsZero() && !now.Before(deadline) {
			s.mu.Unlock()
			return 0, netip.AddrPort{}, &engine.SocketError{Op: "receive", Class: engine.ErrTimeout, Err: errors.New("memnet: deadline exceeded")}
		}
		var wait <-chan time.Time
		wake := deadline
		if len(s.events) > 0 && (wake.IsZero() || s.events[0].due.Before(wake)) {
			wake = s.events[0].due
		}
		s.mu.Unlock()
		var t *time.Timer
		if !wake.IsZero() {
			t = time.NewTimer(wake.Sub(now))
			wait = t.C
		}
		select {
		case <-wait:
		case <-s.wake:
		case <-s.done:
		}
		if t != nil {
			t.Stop()
		}
	}
}

func (s *stream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.done)
	s.n.mu.Lock()
	s.n.open--
	s.n.mu.Unlock()
	return nil
}

// wireOf is reply r's message to q, packed.
func wireOf(r Reply, q *dns.Msg) []byte {
	if r.Raw != nil {
		return r.Raw
	}
	if r.Msg == nil || q == nil {
		return nil
	}
	b, err := r.Msg(q.Copy()).Pack()
	if err != nil {
		panic("memnet: reply does not pack: " + err.Error())
	}
	return b
}
