package dnsserver

import (
	"net"
	"slices"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/wiretap"
)

// ServePacket answers the queries that arrive on pc (UDP), each on its
// own, cut to the client's EDNS payload size with TC set when the answer
// does not fit. Datagrams that are not queries are dropped. It returns
// ErrServerClosed after Shutdown or Close.
func (s *Server) ServePacket(pc net.PacketConn) error {
	s.mu.Lock()
	s.init()
	if s.closing {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.packets[pc] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.packets, pc)
		s.mu.Unlock()
	}()

	buf := make([]byte, maxMessageSize)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if s.isClosing() {
				return ErrServerClosed
			}
			if isTimeout(err) {
				continue
			}
			return err
		}
		// The query outlives buf's next read.
		raw := slices.Clone(buf[:n])
		var received time.Time // for the wiretap only
		if s.Wiretap != nil {
			received = time.Now()
		}
		q, reply, err := checkQuery(raw)
		if err != nil {
			continue
		}
		if reply != nil {
			s.sendPacket(pc, addr, reply, q, raw, received)
			continue
		}
		if !s.startPacket() {
			continue // shutting down: the client will ask again elsewhere
		}
		s.inFlight.Add(1)
		go func() {
			defer func() { s.inFlight.Add(-1); s.serving.Done() }()
			s.sendPacket(pc, addr, s.resolve(s.ctx, q, clientOf(addr)), q, raw, received)
		}()
	}
}

// startPacket counts a question in flight unless the server is closing.
func (s *Server) startPacket() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.serving.Add(1)
	return true
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// sendPacket answers q (raw, received at received) with reply.
func (s *Server) sendPacket(pc net.PacketConn, addr net.Addr, reply, q *dns.Msg, raw []byte, received time.Time) {
	wire, err := packReply(reply, q, udpLimit(q), nil)
	if err != nil {
		wire = nil
	} else {
		pc.WriteTo(wire, addr)
	}
	if s.Wiretap != nil {
		wiretap.Client(s.Wiretap, wiretap.UDP, wiretap.AddrPort(addr), wiretap.AddrPort(pc.LocalAddr()), raw, received, wire, time.Now())
	}
}
