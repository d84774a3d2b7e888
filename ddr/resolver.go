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
	if m := r.table.Load().Answer(q); m != nil {
		return engine.Response{Msg: m, Result: engine.ResultLocal}
	}
	return r.next.Resolve(ctx, q)
}
