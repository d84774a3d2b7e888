// Package wiretap is the seam between the places DNS messages pass
// through dohfwd and whatever records them (dnstap, in the server's
// doh/internal/dnstap): the front ends hand it each client query and
// response, the engine each upstream attempt's query and reply. It holds
// only the message type and the interface, so the engine, the front ends
// and the WebAssembly module link no recorder.
//
// A Tap that is nil is off: callers check for nil and do nothing else, so
// a server without dnstap pays one comparison per message.
package wiretap

import (
	"net"
	"net/netip"
	"time"
)

// Tap records messages. Tap is called on the question's goroutine: it must
// not block, and it must copy what it keeps of the message's slices, which
// are the caller's buffers. The message is passed by value: through an
// interface a pointer would put each on the heap.
type Tap interface {
	Tap(m Message)
}

// Kind says which exchange a message belongs to and which half it is, as
// dnstap's Message.Type does.
type Kind uint8

const (
	ClientQuery       Kind = iota + 1 // a client's query, as a front end received it
	ClientResponse                    // the answer a front end sent its client
	ForwarderQuery                    // an upstream attempt's query, as sent
	ForwarderResponse                 // an upstream attempt's end: its reply, when one came
)

// Protocol is the transport a message went over.
type Protocol uint8

const (
	UDP Protocol = iota + 1 // DNS over UDP (RFC 1035)
	TCP                     // DNS over TCP (RFC 1035, RFC 7766)
	DoT                     // DNS over TLS (RFC 7858)
	DoH                     // DNS over HTTPS (RFC 8484), over HTTP/1.1, HTTP/2 or HTTP/3
	DoQ                     // DNS over QUIC (RFC 9250)
)

// Message is one DNS message and where and when it went. QueryAddr is the
// side that asked (the client, or dohfwd's own address for an upstream
// attempt when it is known), ResponseAddr the side that answered (the
// front end's listener, or the upstream server); an address not known is
// the zero AddrPort.
type Message struct {
	Kind     Kind
	Protocol Protocol

	QueryAddr    netip.AddrPort
	ResponseAddr netip.AddrPort

	// Query is the query's wire form; Response the response's, nil when
	// none came (an attempt that timed out). A response message may carry
	// its query too.
	Query    []byte
	Response []byte

	// QueryTime is when the query was received (client) or sent
	// (forwarder); ResponseTime when the response was sent or received,
	// or when the attempt ended without one. Zero for a query message's
	// ResponseTime.
	QueryTime    time.Time
	ResponseTime time.Time
}

// Client hands tap one question of a front end: CLIENT_QUERY, then, when
// a reply was sent (reply not nil), CLIENT_RESPONSE. Every front end (DoH,
// DoT, DNS over UDP and TCP, DoQ) calls it once per question, after its
// answer was sent or the question given up; tap nil is off and costs this
// comparison only. client is the peer, server the listener's address, p
// the transport; query and reply are copied by tap.
func Client(tap Tap, p Protocol, client, server netip.AddrPort, query []byte, received time.Time, reply []byte, answered time.Time) {
	if tap == nil {
		return
	}
	m := Message{Kind: ClientQuery, Protocol: p, QueryAddr: client, ResponseAddr: server, Query: query, QueryTime: received}
	tap.Tap(m)
	if reply != nil {
		m.Kind, m.Response, m.ResponseTime = ClientResponse, reply, answered
		tap.Tap(m)
	}
}

// AddrPort is a socket address as a message names it: address (an
// IPv4-mapped one unmapped) and port; the zero AddrPort when it has none.
func AddrPort(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	default:
		if a != nil {
			ap, _ = netip.ParseAddrPort(a.String())
		}
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
