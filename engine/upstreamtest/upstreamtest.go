// Package upstreamtest runs a programmable DNS server on real loopback UDP
// and TCP sockets, for integration tests of the engine and the server.
//
// A Handler sees each query the server reads and returns what to do with
// it: reply (after a delay, with any rcode, TC, a wrong ID, garbage, half a
// TCP message), stay silent, or hang up. The server listens on 127.0.0.1
// with one port for both transports and logs every query it reads.
package upstreamtest

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Query is one query as the server read it.
type Query struct {
	Msg       *dns.Msg // nil if it did not parse
	Transport string   // "udp" or "tcp"
	From      netip.AddrPort
	At        time.Time
	// N counts the queries read before this one, over both transports.
	N int
}

// Handler decides what the server does with one query.
type Handler func(Query) Action

// Action is what the server does with one query. The zero Action is a
// server that never answers (over TCP it keeps the connection open).
type Action struct {
	Replies []Reply
	// Close hangs up the TCP connection after the replies.
	Close bool
}

// Reply is one datagram (UDP) or one framed message (TCP).
type Reply struct {
	Delay time.Duration // after the query was read (and Until closed)
	// Until, if set, holds the reply until it is closed (see Gather).
	Until <-chan struct{}
	Msg   *dns.Msg
	Raw   []byte // sent instead of Msg: garbage
	Cut   bool   // TCP: send only the first half of the framed message
}

// Server is a running programmable upstream.
type Server struct {
	addr netip.AddrPort
	h    Handler
	udp  *net.UDPConn
	tcp  *net.TCPListener

	mu      sync.Mutex
	queries []Query
	closeRd bool // TCP: hang up before reading the query
	conns   map[net.Conn]bool
	wg      sync.WaitGroup
	done    chan struct{}
}

// Start runs a server for h on 127.0.0.1 (UDP and TCP on one port) until
// the test ends.
func Start(t testing.TB, h Handler) *Server {
	t.Helper()
	s := &Server{h: h, conns: map[net.Conn]bool{}, done: make(chan struct{})}
	var err error
	for range 20 {
		s.udp, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatalf("upstreamtest: listen udp: %v", err)
		}
		s.addr = s.udp.LocalAddr().(*net.UDPAddr).AddrPort()
		s.tcp, err = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(s.addr))
		if err == nil {
			break
		}
		s.udp.Close() // that port is taken for TCP: try another
	}
	if err != nil {
		t.Fatalf("upstreamtest: listen tcp: %v", err)
	}
	s.wg.Add(2)
	go s.serveUDP()
	go s.serveTCP()
	t.Cleanup(s.Close)
	return s
}

// Addr is the server's address, for both transports.
func (s *Server) Addr() netip.AddrPort { return s.addr }

// String is the address as configuration takes it.
func (s *Server) String() string { return s.addr.String() }

// Queries returns every query read so far, in order.
func (s *Server) Queries() []Query {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Query(nil), s.queries...)
}

// HangUpBeforeRead makes the TCP side close each connection as soon as it
// is accepted, before reading the query.
func (s *Server) HangUpBeforeRead(on bool) {
	s.mu.Lock()
	s.closeRd = on
	s.mu.Unlock()
}

// CloseTCP stops the TCP side only: connections to the port are refused.
func (s *Server) CloseTCP() { s.tcp.Close() }

// Close stops the server and waits for its goroutines.
func (s *Server) Close() {
	select {
	case <-s.done:
		return
	default:
	}
	close(s.done)
	s.udp.Close()
	s.tcp.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// log records q and returns it with its number.
func (s *Server) log(m []byte, transport string, from netip.AddrPort) Query {
	q := Query{Transport: transport, From: from, At: time.Now()}
	msg := new(dns.Msg)
	if msg.Unpack(m) == nil {
		q.Msg = msg
	}
	s.mu.Lock()
	q.N = len(s.queries)
	s.queries = append(s.queries, q)
	s.mu.Unlock()
	return q
}

func (s *Server) serveUDP() {
	defer s.wg.Done()
	buf := make([]byte, 65535)
	for {
		n, from, err := s.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		q := s.log(buf[:n], "udp", from)
		a := s.h(q)
		for _, r := range a.Replies {
			b := r.wire()
			if b == nil {
				continue
			}
			s.after(r.Until, r.Delay, func() { s.udp.WriteToUDPAddrPort(b, from) })
		}
	}
}

// after runs f once until is closed (nil: at once) and d has passed,
// unless the server stops first.
func (s *Server) after(until <-chan struct{}, d time.Duration, f func()) {
	if until == nil && d <= 0 {
		f()
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if s.wait(until, d) {
			f()
		}
	}()
}

func (s *Server) serveTCP() {
	defer s.wg.Done()
	for {
		c, err := s.tcp.AcceptTCP()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = true
		hangUp := s.closeRd
		s.mu.Unlock()
		if hangUp {
			c.SetLinger(0) // a reset, as a server that drops the connection
			s.drop(c)
			continue
		}
		s.wg.Add(1)
		go s.serveConn(c)
	}
}

func (s *Server) drop(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *Server) serveConn(c *net.TCPConn) {
	defer s.wg.Done()
	defer s.drop(c)
	from := c.RemoteAddr().(*net.TCPAddr).AddrPort()
	var lenBuf [2]byte
	for {
		if _, err := io.ReadFull(c, lenBuf[:]); err != nil {
			return
		}
		m := make([]byte, binary.BigEndian.Uint16(lenBuf[:]))
		if _, err := io.ReadFull(c, m); err != nil {
			return
		}
		a := s.h(s.log(m, "tcp", from))
		for _, r := range a.Replies {
			if !s.wait(r.Until, r.Delay) {
				return
			}
			b := r.wire()
			framed := make([]byte, 2+len(b))
			binary.BigEndian.PutUint16(framed, uint16(len(b)))
			copy(framed[2:], b)
			if r.Cut {
				framed = framed[:len(framed)/2]
			}
			if _, err := c.Write(framed); err != nil {
				return
			}
		}
		if a.Close {
			return
		}
	}
}

// wait waits for until to close (nil: no wait), then d; false if the
// server stopped meanwhile.
func (s *Server) wait(until <-chan struct{}, d time.Duration) bool {
	if until != nil {
		select {
		case <-until:
		case <-s.done:
			return false
		}
	}
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	}
}

func (r Reply) wire() []byte {
	if r.Raw != nil {
		return r.Raw
	}
	if r.Msg == nil {
		return nil
	}
	b, err := r.Msg.Pack()
	if err != nil {
		panic("upstreamtest: reply does not pack: " + err.Error())
	}
	return b
}

// ClosedPort returns a loopback UDP and TCP address where nothing listens:
// a UDP query there draws ICMP port-unreachable, a TCP connect a reset.
func ClosedPort(t testing.TB) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatalf("upstreamtest: %v", err)
	}
	ap := c.LocalAddr().(*net.UDPAddr).AddrPort()
	c.Close()
	return ap
}
