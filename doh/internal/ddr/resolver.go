package ddr

import (
	"context"
	"sync/atomic"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// Next is the resolver behind the designation: the engine.
type Next interface {
	Resolve(ctx context.Context, query, dst []byte) engine.Response
}

// Resolver answers the resolver.arpa names from its table and hands every
// other query to the next resolver. The table is set once the listeners'
// ports are known, and may be replaced at any time.
type Resolver struct {
	next Next
	// immediate and join are next as an immediateNext and a joiner, or
	// nil: asserted once here, since as WebAssembly an assertion per
	// question is a getitab walk (no itab cache there).
	immediate immediateNext
	join      joiner
	starter   starter
	table     atomic.Pointer[Table]
}

// Wrap puts a Resolver in front of next; until Designate, the
// designation is empty.
func Wrap(next Next) *Resolver {
	immediate, _ := next.(immediateNext)
	j, _ := next.(joiner)
	s, _ := next.(starter)
	return &Resolver{next: next, immediate: immediate, join: j, starter: s}
}

// Designate sets what _dns.resolver.arpa answers.
func (r *Resolver) Designate(d Designation) { r.table.Store(NewTable(d)) }

// Resolve answers a resolver.arpa query from the table, after dst,
// and hands every other query to the next resolver as bytes.
func (r *Resolver) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	if inZone(query) {
		if resp, ok := r.answer(query, dst); ok {
			return resp
		}
	}
	return r.next.Resolve(ctx, query, dst)
}

// answer is the table's reply to query, after dst, padded when the
// query was; false when the table has none (a name outside the zone, or a
// query whose question does not read: the next resolver reads it).
func (r *Resolver) answer(query, dst []byte) (engine.Response, bool) {
	out, ok := r.table.Load().AppendAnswer(dst, query)
	if !ok {
		return engine.Response{}, false
	}
	start := len(dst)
	if engine.WantsPadding(query) {
		out = engine.PadReply(out, start)
	}
	reply := out[start:]
	resp := engine.Response{Wire: out, Rcode: int(reply[3] & 0xF), Result: engine.ResultLocal}
	if p, ok := dnswire.NewParser(reply); ok {
		if q, ok := p.Question(); ok {
			resp.QName, _, _ = dnswire.UnpackName(reply, q.NameOff)
		}
	}
	resp.TTL, resp.Cacheable = engine.WireTTL(reply)
	return resp, true
}

// immediateNext is a Next that can answer some queries at once, from
// memory (*engine.Engine).
type immediateNext interface {
	AnswerNow(query, dst []byte, trace *engine.Trace, miss *engine.Miss) (engine.Response, bool)
	ResolveMiss(ctx context.Context, miss *engine.Miss, dst []byte) engine.Response
}

// AnswerNow passes a query outside resolver.arpa to the next
// resolver's AnswerNow, when it has one. A resolver.arpa name
// is never answered at once (false, miss left alone): it takes
// Resolve's way, which answers from the table.
func (r *Resolver) AnswerNow(query, dst []byte, trace *engine.Trace, miss *engine.Miss) (engine.Response, bool) {
	if r.immediate == nil || inZone(query) {
		return engine.Response{}, false
	}
	return r.immediate.AnswerNow(query, dst, trace, miss)
}

// ResolveMiss passes a miss to the next resolver: only its
// AnswerNow fills one (a query outside resolver.arpa).
func (r *Resolver) ResolveMiss(ctx context.Context, miss *engine.Miss, dst []byte) engine.Response {
	if r.immediate != nil {
		return r.immediate.ResolveMiss(ctx, miss, dst)
	}
	return engine.Response{Wire: dst, Rcode: -1, Result: engine.ResultUnavailable, Reason: engine.ReasonAttemptsSpent}
}

// joiner is a Next that can attach a miss to an identical question's
// flight (*engine.Engine).
type joiner interface {
	JoinFlight(ctx context.Context, miss *engine.Miss, dst []byte, deliver func(*engine.Response)) bool
}

// JoinFlight passes a miss to the next resolver's JoinFlight, when it has
// one: only its AnswerNow fills a miss (a query outside
// resolver.arpa). False: nothing was done.
func (r *Resolver) JoinFlight(ctx context.Context, miss *engine.Miss, dst []byte, deliver func(*engine.Response)) bool {
	if r.join == nil || !miss.Ready() {
		return false
	}
	return r.join.JoinFlight(ctx, miss, dst, deliver)
}

// starter is a Next that can begin a miss on its reader's goroutine
// (*engine.Engine).
type starter interface {
	StartMiss(ctx context.Context, miss *engine.Miss, then engine.MissContinuation) bool
}

// StartMiss passes a miss to the next resolver's StartMiss, when it has
// one: only its AnswerNow fills a miss.
func (r *Resolver) StartMiss(ctx context.Context, miss *engine.Miss, then engine.MissContinuation) bool {
	if r.starter != nil && miss.Ready() {
		return r.starter.StartMiss(ctx, miss, then)
	}
	return false
}

// inZone reports whether the question of the wire query query is in
// resolver.arpa, reading only the header and the question name. A name
// it cannot read (compressed, cut short) counts as in the zone, so the
// caller unpacks it and decides there.
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
