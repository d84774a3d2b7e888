package engine

import (
	"time"

	"github.com/miekg/dns"
)

// ResolveImmediate answers q only when it can without waiting on the
// network: a local name, or a live cache entry for the name as asked. ok
// false means nothing happened (no counter moved, no event): ask with
// Resolve. A front end calls it on the goroutine that read the request,
// so a cache hit is answered there; everything else takes Resolve's way.
// Search candidates and forwarded ECS always take Resolve's way.
func (e *Engine) ResolveImmediate(q *dns.Msg) (r Response, ok bool) {
	start := time.Now()
	rt := e.routes.Load()
	qs := q.Question[0]
	qn := question{e: e, cfg: rt.cfg, routes: rt, client: q, scope: rt.route(qs.Name), start: start}
	if m := rt.local.answer(q, qs.Name); m != nil {
		r = Response{Msg: m, Result: ResultLocal}
	} else {
		if len(qn.scope.servers) == 0 || len(qn.scope.search) > 0 && dns.CountLabel(qs.Name) == 1 ||
			rt.cfg.ForwardECS && sendsECS(q) {
			return Response{}, false
		}
		if r, ok = qn.cached(keyFor(q, qs.Name)); !ok {
			return Response{}, false
		}
		e.counters.cacheHits.Add(1)
	}
	qn.id = e.questionIDs.Add(1)
	r.Question, r.Scope = qn.id, qn.scope.name
	r.Msg.Id = q.Id
	e.counters.questions[r.Result].Add(1)
	e.observer.Question(QuestionEvent{
		Question: qn.id, QName: qs.Name, QType: qs.Qtype, Scope: qn.scope.name,
		Result: r.Result, CacheHit: r.CacheHit, Duration: time.Since(start),
	})
	return r, true
}
