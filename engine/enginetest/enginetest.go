// Package enginetest lets tests speak to the engine, and to the front
// ends' resolvers, in unpacked messages (miekg/dns) while the engine
// speaks wire: it packs the query and unpacks the reply. Native tests
// only: nothing the edge module links imports it.
package enginetest

import (
	"context"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// WireResolver answers wire queries: *engine.Engine, *ddr.Resolver.
type WireResolver interface {
	Resolve(ctx context.Context, query, dst []byte) engine.Response
}

// Response is a resolver's response with its reply unpacked.
type Response struct {
	engine.Response
	Msg *dns.Msg
}

// Resolve asks r for q and unpacks the reply. A reply that is missing
// or does not unpack is a SERVFAIL with EDE 22 (as the engine answers a
// question whose attempts are spent), so a test reads a message either way.
func Resolve(r WireResolver, ctx context.Context, q *dns.Msg) Response {
	raw, err := q.Pack()
	if err != nil {
		raw = nil
	}
	resp := Response{Response: r.Resolve(ctx, raw, nil)}
	m := new(dns.Msg)
	if err := m.Unpack(resp.Wire); err != nil || resp.Wire == nil {
		m = servfail(q)
	}
	resp.Msg = m
	return resp
}

func servfail(q *dns.Msg) *dns.Msg {
	m := new(dns.Msg).SetRcode(q, dns.RcodeServerFailure)
	m.RecursionAvailable = true
	opt := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
	opt.SetUDPSize(dns.DefaultMsgSize)
	opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: dnswire.ExtendedErrorCodeNoReachableAuthority})
	m.Extra = append(m.Extra, opt)
	return m
}

// Explain explains q's question (engine.Explain on q packed); a query
// that does not pack or read explains nothing (the zero Explanation).
func Explain(e *engine.Engine, q *dns.Msg) engine.Explanation {
	raw, err := q.Pack()
	if err != nil {
		return engine.Explanation{}
	}
	x, _ := e.Explain(raw)
	return x
}

// MsgResolver is a test's resolver that answers unpacked.
type MsgResolver interface {
	ResolveMsg(ctx context.Context, q *dns.Msg) Response
}

// ResolveByMsg answers the wire query from r: the query unpacked, r's
// reply packed after dst with the query's ID (Wire, Rcode, and TTL and
// Cacheable by engine.WireTTL; the rest of the response as r gives it).
// A query that does not unpack, or a nil reply, gets an empty Wire and
// Rcode -1.
func ResolveByMsg(r MsgResolver, ctx context.Context, query, dst []byte) engine.Response {
	q := new(dns.Msg)
	if err := q.Unpack(query); err != nil {
		return engine.Response{Wire: dst, Rcode: -1, Result: engine.ResultUnavailable, Reason: engine.ReasonAttemptsSpent}
	}
	resp := r.ResolveMsg(ctx, q)
	out := resp.Response
	out.Wire, out.Rcode = dst, -1
	if resp.Msg == nil {
		return out
	}
	m := resp.Msg.Copy()
	m.Id, m.Compress = q.Id, true
	wire, err := m.Pack()
	if err != nil {
		return out
	}
	out.Wire, out.Rcode = append(dst, wire...), resp.Msg.Rcode
	out.TTL, out.Cacheable = engine.WireTTL(wire)
	return out
}
