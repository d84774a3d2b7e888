package engine

import (
	"context"
	"time"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// AnswerNow answers a query only if the engine has the answer in
// memory: a local name, or a live cache entry for the name as asked. Use
// it on the goroutine that read the request, which must not wait: a
// cache hit is answered there without a goroutine of its own and
// without unpacking anything. It appends the client's reply to dst and
// reports true, with the same counters and question event as Resolve;
// or it reports false having done nothing (no counter moved, no event,
// dst untouched): ask then with ResolveMiss when miss is Ready (after
// JoinFlight or StartMiss, if the caller uses them), else with Resolve. Search candidates, forwarded ECS, stale entries and
// compressed question names always take Resolve's way. trace, when
// not nil, is the client's trace for the question event. miss, when not
// nil, receives what a false answer read of query (its question and
// route), so the miss does not read it again; query must then stay as it
// is until ResolveMiss returns.
//
// The results are named and a miss returns them as they are (zero): as
// WebAssembly a Response literal is a zeroing of its own, several calls
// to the host's memmove, and a hit's Response is written in place.
func (e *Engine) AnswerNow(query, dst []byte, trace *Trace, miss *Miss) (resp Response, ok bool) {
	return e.readImmediate(e.routes.Load(), query, dst, trace, miss, nil)
}

// readImmediate is AnswerNow under rt, answering from mirror's
// published entries instead of the engine's own answers when mirror is
// not nil (HotEntries: rt is then mirror's routes).
//
// It also runs on a HotEntries's engine, which is partial (NewHotEntries):
// only observer, epoch, upstreams, counters and questionIDs are set, and
// routes are not (rt stands for them). With mirror set, this function,
// mirrorCache.hit and respond may read no other Engine field (cache,
// clients, network, publish, ...): it would be nil there, and the
// engine's own tests would not see it.
func (e *Engine) readImmediate(rt *routes, query, dst []byte, trace *Trace, miss *Miss, mirror *mirrorCache) (resp Response, ok bool) {
	// Fields set one by one: as WebAssembly a question literal is a
	// zeroing and a copy of its 248 bytes, the copy a host memmove call.
	var qn question
	qn.e, qn.cfg, qn.routes = e, rt.cfg, rt
	qn.ctx = context.Background() // answered now: nothing to cancel
	qn.trace = trace              // start: read by immediate once it may answer
	// Most questions asked here miss: their name is read into a pooled
	// buffer, and made a string of its own only when it is answered or
	// handed on.
	// The buffer goes back once the name is the question's own (no
	// defer: one costs more than the rest of a return as WebAssembly).
	buf := getNameBuffer()
	if !qn.client.parseInto(query, buf) {
		putNameBuffer(buf)
		return
	}
	qn.scope = rt.route(qn.client.name)
	var f found
	if mirror != nil {
		ok = mirror.hit(&qn, &f)
	} else {
		ok = qn.immediate(&f)
	}
	if ok || miss != nil {
		qn.client.own()
	}
	putNameBuffer(buf)
	if !ok {
		if miss != nil {
			miss.client, miss.scope, miss.routes = qn.client, qn.scope, rt
		}
		return
	}
	qn.id = e.questionIDs.Add(1)
	qn.respond(&resp, dst, &f)
	return
}

// Miss is what AnswerNow read of a query it could not answer
// at once (its question and its route, under the configuration then),
// for ResolveMiss. The zero Miss holds nothing. A front end keeps
// one with each request and clears it when the request is done.
type Miss struct {
	client clientQuery
	scope  *scope
	routes *routes
	// led is the flight JoinFlight or StartMiss began for the question to
	// lead; first, the ask's buffers holding the first attempt StartMiss
	// began (started), and start when StartMiss began the question.
	led   *flight
	first *askBuffers
	start time.Time
	// held is what a resolver that is not this engine keeps of its miss
	// (Hold).
	held any
}

// Ready reports whether m holds a query for ResolveMiss: one this
// engine read, or one another resolver holds (Hold).
func (m *Miss) Ready() bool { return m.routes != nil || m.held != nil }

// Hold makes m the miss of a resolver that is not an Engine but answers
// as one for a front end (doh.ImmediateResolver, doh.MissStarter: the
// edge host, whose engine runs in a WebAssembly module): v is what that
// resolver keeps to go on with the question, which the front end then
// hands to its StartMiss and ResolveMiss as it would an Engine's
// miss. m is Ready while it holds v (not nil); an Engine never reads v,
// and its own StartMiss and ResolveMiss take such a miss as one that
// holds no query. The zeroed Miss (a front end's reset) drops v.
func (m *Miss) Hold(v any) { m.held = v }

// Held is what Hold put in m, or nil.
func (m *Miss) Held() any { return m.held }

// ResolveMiss answers the query AnswerNow read into m and could not
// answer, as Resolve would, waiting upstream: use it on a goroutine that
// may wait, for every Ready miss that JoinFlight did not take (and that
// StartMiss did not hand to the upstream loop). It does not parse or
// route the query again. When StartMiss began the question, it goes on with the
// transaction StartMiss sent, and the question's time counts from then;
// when that transaction's end is known and ends the question (see
// started), it returns without waiting.
// It empties m. A Miss that is not Ready gets an empty reply (Rcode -1),
// as a query that does not read.
func (e *Engine) ResolveMiss(ctx context.Context, m *Miss, dst []byte) (resp Response) {
	if m.routes == nil {
		return Response{Wire: dst, Rcode: -1, Result: ResultUnavailable, Reason: ReasonAttemptsSpent}
	}
	var qn question
	qn.fromMiss(e, ctx, m)
	var f found
	if bufs := qn.first; bufs != nil && bufs.first.outside && endsHere(bufs.first.res.outcome) {
		qn.endKnown(&f)
	} else {
		qn.resolve(&f)
	}
	if qn.first != nil {
		qn.dropFirst() // not reached: resolve always asks the name it began
	}
	qn.respond(&resp, dst, &f)
	qn.release()
	return resp
}

// fromMiss makes qn the question m holds, asked under ctx, and empties
// m. Its fields are set one by one: see AnswerNow.
func (qn *question) fromMiss(e *Engine, ctx context.Context, m *Miss) {
	start := m.start // StartMiss's, when it began the question
	if start.IsZero() {
		start = time.Now()
	}
	qn.e, qn.ctx, qn.cfg, qn.routes = e, ctx, m.routes.cfg, m.routes
	qn.client, qn.scope = m.client, m.scope
	qn.id, qn.start, qn.trace, qn.proto = e.questionIDs.Add(1), start, TraceFrom(ctx), ProtoFrom(ctx)
	qn.led, qn.first = m.led, m.first
	*m = Miss{}
	qn.setBudget(start)
}

// immediate is resolve without the network: a local answer or a live
// cache entry for the name as asked, or false. It sets the question's
// start only when it may answer: a question that goes upstream without a
// cache to look in (the miss path with the cache off) reads no clock here.
// The answer is written into r, the caller's zero value (see resolve).
func (qn *question) immediate(r *found) bool {
	rt, asked := qn.routes, qn.client.name
	if m := rt.local.answer(&qn.client, asked); m != nil {
		qn.start = time.Now()
		r.reply, r.result = m, ResultLocal
		return true
	}
	if rt.cache == nil || !qn.cacheMayAnswer() {
		return false
	}
	qn.start = time.Now() // the cache lookup's clock
	if _, ok := qn.cached(keyFor(&qn.client, asked), r); !ok {
		return false
	}
	r.ends = hitEndsAtLookup // the lookup was the question's only reading
	qn.e.counters.cacheHits.Add(1)
	return true
}

// cacheMayAnswer reports whether a cache entry for the name as asked may
// answer qn at once: its scope has servers, the name is not one label to
// be tried under a search list, and no ECS option is to be forwarded.
func (qn *question) cacheMayAnswer() bool {
	return len(qn.scope.servers) > 0 && !(len(qn.scope.search) > 0 && dnswire.CountLabel(qn.client.name) == 1) &&
		!(qn.scope.forwardECS && qn.client.ecs)
}
