package ddr

import (
	"context"
	"sync/atomic"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
)

// Next is the resolver behind the designation: the engine.
type Next interface {
	Resolve(ctx context.Context, q *dns.Msg) engine.Response
	ResolveWire(ctx context.Context, query, dst []byte) engine.Response
}

// Resolver answers the resolver.arpa names from its table and hands every
// other query to the next resolver. The table is set once the listeners'
// ports are known, and may be replaced at any time.
type Resolver struct {
	next  Next
	table atomic.Pointer[Table]
}

// Wrap puts a Resolver in front of next; until Designate, the
// designation is empty.
func Wrap(next Next) *Resolver { return &Resolver{next: next} }

// Designate sets what _dns.resolver.arpa answers.
func (r *Resolver) Designate(d Designation) { r.table.Store(NewTable(d)) }

// Resolve answers q.
func (r *Resolver) Resolve(ctx context.Context, q *dns.Msg) engine.Response {
	// The table speaks wire form; this form of the question goes away with
	// Resolve itself once the front end asks by bytes alone.
	if raw, err := q.Pack(); err == nil {
		if wire, ok := r.table.Load().AppendAnswer(nil, raw); ok {
			m := new(dns.Msg)
			if m.Unpack(wire) == nil {
				return engine.Response{Msg: m, Result: engine.ResultLocal}
			}
		}
	}
	return r.next.Resolve(ctx, q)
}

// ResolveWire hands every query outside resolver.arpa to the next
// resolver as bytes. For a resolver.arpa name it answers nothing (an empty
// Wire), so the caller asks Resolve, which answers from the table: these
// names are rare and a dns.Msg is what the table speaks.
func (r *Resolver) ResolveWire(ctx context.Context, query, dst []byte) engine.Response {
	if inZone(query) {
		return engine.Response{Wire: dst, Rcode: -1, Result: engine.ResultLocal}
	}
	return r.next.ResolveWire(ctx, query, dst)
}

// immediateNext is a Next that can answer some queries at once, from
// memory (*engine.Engine).
type immediateNext interface {
	ResolveWireImmediate(query, dst []byte, trace *engine.Trace) (engine.Response, bool)
}

// ResolveWireImmediate passes a query outside resolver.arpa to the next
// resolver's ResolveWireImmediate, when it has one. A resolver.arpa name
// is never answered at once (false): it takes ResolveWire's way, and from
// there Resolve's, which answers from the table.
func (r *Resolver) ResolveWireImmediate(query, dst []byte, trace *engine.Trace) (engine.Response, bool) {
	next, ok := r.next.(immediateNext)
	if !ok || inZone(query) {
		return engine.Response{}, false
	}
	return next.ResolveWireImmediate(query, dst, trace)
}

// inZone reports whether the question of the wire query query is in
// resolver.arpa, reading only the header and the question name. A name
// it cannot read (compressed, cut short) counts as in the zone, so the
// caller takes the unpacking path and decides there.
func inZone(query []byte) bool {
	const header = 12
	if len(query) < header+1 {
		return true
	}
	// The offsets of the last two labels.
	last, prev := -1, -1
	for off := header; ; {
		if off >= len(query) {
			return true
		}
		n := int(query[off])
		if n == 0 {
			break
		}
		if n&0xC0 != 0 || off+1+n > len(query) {
			return true
		}
		prev, last = last, off
		off += 1 + n
	}
	return prev >= 0 && labelIs(query, prev, "resolver") && labelIs(query, last, "arpa")
}

// labelIs reports whether the label at off equals want, ignoring ASCII case.
func labelIs(m []byte, off int, want string) bool {
	n := int(m[off])
	if n != len(want) {
		return false
	}
	for i := 0; i < n; i++ {
		c := m[off+1+i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}
