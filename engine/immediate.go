package engine

import (
	"context"
	"sync"
	"time"

	"github.com/dohfwd/dohfwd/dnswire"
)

// ResolveWireImmediate is ResolveWire for an answer the engine has in
// memory: a local name, or a live cache entry for the name as asked. It
// appends the client's reply to dst and reports true, with the same
// counters and question event as ResolveWire; or it reports false having
// done nothing (no counter moved, no event, dst untouched): ask with
// ResolveWire. A front end calls it on the goroutine that read the
// request, so a cache hit is answered there without a goroutine of its
// own and without unpacking anything. Search candidates, forwarded ECS,
// stale entries and compressed question names always take ResolveWire's
// way. trace, when not nil, is the client's trace for the question event.
func (e *Engine) ResolveWireImmediate(query, dst []byte, trace *Trace) (Response, bool) {
	start := time.Now()
	rt := e.routes.Load()
	qn := question{
		e:      e,
		ctx:    context.Background(), // answered now: nothing to cancel
		cfg:    rt.cfg,
		routes: rt,
		start:  start,
		trace:  trace,
	}
	// Most questions asked here miss: their name is read into a pooled
	// buffer, and made a string of its own only when it is answered.
	buf := nameBuffers.Get().(*[maxNameText]byte)
	defer nameBuffers.Put(buf)
	if !qn.client.parseInto(query, buf) {
		return Response{}, false
	}
	qn.scope = rt.route(qn.client.name)
	f, ok := qn.immediate()
	if !ok {
		return Response{}, false
	}
	qn.client.own()
	qn.id = e.questionIDs.Add(1)
	return qn.respond(dst, f), true
}

// nameBuffers hold the names ResolveWireImmediate borrows.
var nameBuffers = sync.Pool{New: func() any { return new([maxNameText]byte) }}

// immediate is resolve without the network: a local answer or a live
// cache entry for the name as asked, or false.
func (qn *question) immediate() (found, bool) {
	rt, asked := qn.routes, qn.client.name
	if m := rt.local.answer(&qn.client, asked); m != nil {
		return found{reply: m, result: ResultLocal}, true
	}
	if len(qn.scope.servers) == 0 || len(qn.scope.search) > 0 && dnswire.CountLabel(asked) == 1 ||
		rt.cfg.ForwardECS && qn.client.ecs {
		return found{}, false
	}
	r, _, ok := qn.cached(keyFor(&qn.client, asked))
	if !ok {
		return found{}, false
	}
	qn.e.counters.cacheHits.Add(1)
	return r, true
}
