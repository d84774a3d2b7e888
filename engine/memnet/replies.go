package memnet

import (
	"net/netip"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// Respond returns a handler that always sends replies.
func Respond(replies ...Reply) Handler {
	return func(Conn) Action { return Action{Replies: replies} }
}

// Silent is a server that never answers.
func Silent() Handler { return func(Conn) Action { return Action{} } }

// Fail returns an error of class c for operation op ("open", "send" or
// "receive").
func Fail(op string, c engine.ErrorClass) Handler {
	err := &engine.SocketError{Op: op, Class: c}
	return func(Conn) Action {
		switch op {
		case "open", "bind", "connect":
			return Action{OpenError: err}
		case "send":
			return Action{SendError: err}
		}
		return Action{ReceiveError: err}
	}
}

// ByTransport is a server that behaves as udp over UDP and tcp over TCP.
func ByTransport(udp, tcp Handler) Handler {
	return func(c Conn) Action {
		if c.Transport == engine.TCP {
			return tcp(c)
		}
		return udp(c)
	}
}

// Answer replies NOERROR with the records rrs (zone-file text, the
// question's name written as "@").
func Answer(rrs ...string) Reply {
	return Reply{Msg: func(q *dns.Msg) *dns.Msg { return upstreamtest.ReplyTo(q, dns.RcodeSuccess, rrs...) }}
}

// Rcode replies with rcode and no records; codes above 15 use EDNS.
func Rcode(rcode int) Reply {
	return Reply{Msg: func(q *dns.Msg) *dns.Msg { return upstreamtest.ReplyTo(q, rcode) }}
}

// Truncated replies NOERROR with TC set and rcode.
func Truncated(rcode int) Reply {
	return Reply{Msg: func(q *dns.Msg) *dns.Msg {
		m := upstreamtest.ReplyTo(q, rcode)
		m.Truncated = true
		return m
	}}
}

// WrongID is r with its ID changed, so it does not match.
func WrongID(r Reply) Reply {
	return Edit(r, func(m *dns.Msg) { m.Id++ })
}

// Edit is r changed by f after it is built.
func Edit(r Reply, f func(*dns.Msg)) Reply {
	build := r.Msg
	r.Msg = func(q *dns.Msg) *dns.Msg { m := build(q); f(m); return m }
	return r
}

// Garbage is bytes that do not parse as a DNS message.
func Garbage() Reply { return Reply{Raw: []byte{0xde, 0xad, 0xbe, 0xef, 0x01}} }

// After is r delayed by d from the send.
func After(d time.Duration, r Reply) Reply { r.Delay = d; return r }

// FromAddr is r arriving from addr instead of the server.
func FromAddr(addr netip.AddrPort, r Reply) Reply { r.From = addr; return r }

// Cut is r with only its first half sent (TCP).
func Cut(r Reply) Reply { r.Cut = true; return r }
