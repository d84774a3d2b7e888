package engine

import (
	"context"
	"net/netip"
	"sync/atomic"
)

// inFlight counts upstream transactions outstanding, against the ceiling.
type inFlight struct {
	n       atomic.Int64
	ceiling atomic.Int64
}

// acquire takes a slot, or reports that the ceiling is reached.
func (f *inFlight) acquire() bool {
	if refusedAt(f.n.Add(1)-1, f.ceiling.Load()) {
		f.n.Add(-1)
		return false
	}
	return true
}

func (f *inFlight) release() { f.n.Add(-1) }

// refusedAt is the ceiling rule: with n transactions outstanding, one more
// is refused when it would exceed ceiling.
func refusedAt(n, ceiling int64) bool { return n+1 > ceiling }

// ClientLimiter shares upstream transactions out among clients, so one
// client cannot take the whole ceiling: the engine asks it for a slot for
// each transaction of a question whose context names its client
// (WithClient), after the ceiling's own slot.
type ClientLimiter interface {
	// AcquireTransaction takes a slot of client's; false refuses the
	// transaction. A nil slot means nothing was counted.
	AcquireTransaction(client netip.Addr) (ClientSlot, bool)
}

// ClientSlot is one transaction counted against a client.
type ClientSlot interface{ ReleaseTransaction() }

type clientKey struct{}

// WithClient says whose question ctx carries: the front end's client
// address (after trusted proxies and PROXY protocol).
func WithClient(ctx context.Context, client netip.Addr) context.Context {
	return &QuestionContext{Context: ctx, client: client, hasClient: true}
}

// ClientOf is the client WithClient put in ctx (the zero Addr if none).
func ClientOf(ctx context.Context) netip.Addr {
	if c, ok := ctx.(*QuestionContext); ok && c.hasClient {
		return c.client
	}
	a, _ := ctx.Value(clientKey{}).(netip.Addr)
	return a
}

// acquireClient takes the question's client slot; it reports false when
// the client is at its limit.
func (qn *question) acquireClient() (ClientSlot, bool) {
	cl := qn.e.clients
	if cl == nil || qn.background {
		return nil, true
	}
	client := ClientOf(qn.ctx)
	if !client.IsValid() {
		return nil, true
	}
	return cl.AcquireTransaction(client)
}
