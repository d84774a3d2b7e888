package engine

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// Followers without a goroutine. A question whose key a flight
// already asks, and that would only wait for it, need not wait on a
// goroutine of its own: JoinFlight attaches it to the flight as a waiter,
// and the leader, once it lands, writes the waiter's reply and hands it
// to the front end's deliver. As WebAssembly a goroutine's park and wake
// cost ~3 µs (the worker hand-off, follow's select, the channel
// CancelContext.Done makes), a quarter of a coalesced question's time.
//
// Exactly one of three ends delivers a waiter, whichever takes its state
// first (waiter.state): the flight's landing, its client's cancel
// (waiter.Close, which its context calls), its budget's timer. A leader
// that abandons the flight hands it on: the first waiter leads a new one
// on a goroutine of its own (a rare path) and the others wait for that.

// The states of a waiter: waiting, ended (by one of the three), or
// leading a flight of its own after its leader abandoned.
const (
	waiterPending int32 = iota
	waiterEnded
	waiterLeading
)

// waiter is a question attached to a flight (flight.waiters) without a
// goroutine. Its fields are set before it is attached and only read
// after, except fl (under flights.mu) and state.
type waiter struct {
	q question
	// resp and shared are q's Response and sharedTraces, in the one
	// allocation a waiter costs (each was one of its own).
	resp    Response
	shared  sharedTraces
	dst     []byte
	deliver func(*Response)
	state   atomic.Int32
	// fl is the flight it is attached to; nil when it is not (not yet,
	// or taken off by a landing or its end). Under flights.mu.
	fl      *flight
	flights *flights
	// cc, or else watch, is the client's context that calls Close on a
	// cancel; neither when it cannot be cancelled.
	cc    *CancelContext
	watch CancelWatcher
	timer *time.Timer // the question's budget, when it has one
}

// JoinFlight attaches the miss AnswerNow read into m to the flight
// already asking the same question upstream, so that it waits without a
// goroutine of its own. Use it before handing a miss to a goroutine
// where a goroutine's park and wake are dear (the edge module's poll).
// It takes the question only when it is a plain follower: no
// stale or live entry for it in the cache, not a search candidate, no
// forwarded ECS, and ctx is one the engine can watch (a CancelContext or
// another CancelWatcher, or one never cancelled). It reports true having
// taken the question: m is emptied, and deliver is called exactly once
// with its Response (Wire appended to dst) as ResolveMiss would have
// returned it, on the goroutine of the flight's leader, of its budget's
// timer, or, after a cancel, of its own (never inside the context's
// Cancel, whose caller may hold a lock that deliver takes). dst, the query
// m was read from and ctx's trace must stay as they are until then.
//
// It reports false when the question must be asked with
// ResolveMiss (under ctx), which the caller then must do: when no
// flight asks it yet, JoinFlight begins the flight the question leads, so
// that identical questions handed in before its goroutine runs (a batch
// of the edge module's poll) join it.
func (e *Engine) JoinFlight(ctx context.Context, m *Miss, dst []byte, deliver func(*Response)) bool {
	rt, cq, sc := m.routes, &m.client, m.scope
	if rt == nil || m.led != nil || len(sc.servers) == 0 || len(sc.search) > 0 && dnswire.CountLabel(cq.name) == 1 ||
		sc.forwardECS && cq.ecs || sc.ecsAdd || ctx.Err() != nil {
		return false
	}
	cc, _ := ctx.(*CancelContext)
	if qc, ok := ctx.(*QuestionContext); ok {
		cc, _ = qc.Context.(*CancelContext) // the front ends' (no interface look-up)
	}
	var watch CancelWatcher
	if cc == nil {
		if watch = cancelWatcherOf(ctx); watch == nil && ctx.Done() != nil {
			return false
		}
	}
	key := keyFor(cq, cq.name)
	var start time.Time
	if rt.cache != nil {
		start = time.Now()
		if en, _ := rt.cache.get(key, start); en != nil {
			return false // live (landed meanwhile) or stale: Resolve's way
		}
	}
	h := key.hash()
	f := &rt.flights
	f.mu.Lock()
	if f.findHashed(key, h) == nil {
		m.led = f.start(key, h, TraceFrom(ctx)) // most misses: the question leads
		f.mu.Unlock()
		return false
	}
	f.mu.Unlock()
	if start.IsZero() {
		start = time.Now()
	}
	w := &waiter{dst: dst, deliver: deliver, flights: f, cc: cc, watch: watch}
	qn := &w.q // fields set one by one: see AnswerNow
	qn.e, qn.ctx, qn.cfg, qn.routes = e, ctx, rt.cfg, rt
	qn.client, qn.scope = m.client, m.scope
	qn.id, qn.start, qn.trace, qn.proto = e.questionIDs.Add(1), start, TraceFrom(ctx), ProtoFrom(ctx)
	qn.shared = &w.shared // joined and served stay nil unless set
	qn.setBudget(start)
	if !qn.budgetEnd.IsZero() {
		w.timer = time.AfterFunc(qn.budgetEnd.Sub(start), w.expire)
	}
	w.watchCancel() // may Close at once: state then says so
	f.mu.Lock()
	fl := f.findHashed(key, h)
	attached := fl != nil && w.state.Load() == waiterPending
	if attached {
		f.attach(fl, w)
	}
	f.mu.Unlock()
	if !attached && w.state.CompareAndSwap(waiterPending, waiterEnded) {
		w.unwatch() // the flight landed meanwhile: ask as usual
		return false
	}
	*m = Miss{}
	return true
}

// attach adds w to fl's waiters. The caller holds f.mu.
func (f *flights) attach(fl *flight, w *waiter) {
	w.fl = fl
	fl.waiters = append(fl.waiters, w)
	if w.q.trace != nil {
		fl.served = append(fl.served, *w.q.trace)
	}
}

// detach takes w off its flight, if it is still on one.
func (w *waiter) detach() {
	f := w.flights
	f.mu.Lock()
	if fl := w.fl; fl != nil {
		if i := slices.Index(fl.waiters, w); i >= 0 {
			fl.waiters = slices.Delete(fl.waiters, i, i+1)
		}
		w.fl = nil
	}
	f.mu.Unlock()
}

// watchCancel has the client's context Close w on a cancel.
func (w *waiter) watchCancel() {
	switch {
	case w.cc != nil:
		w.cc.closeOnCancel(w)
	case w.watch != nil:
		w.watch.CloseOnCancel(w)
	}
}

// unwatch ends the watch of the client's context and the budget's timer:
// w has ended, or leads, by other means.
func (w *waiter) unwatch() {
	if w.timer != nil {
		w.timer.Stop()
	}
	switch {
	case w.cc != nil:
		w.cc.stopClosing(w)
	case w.watch != nil:
		w.watch.StopClosing(w)
	}
}

// Close is the client's cancel (CancelWatcher): w ends cancelled, with
// nothing charged, unless it has ended or leads already. It delivers on a
// goroutine of its own: Close runs inside the context's Cancel.
func (w *waiter) Close() error {
	if !w.state.CompareAndSwap(waiterPending, waiterEnded) {
		return nil
	}
	w.detach()
	if w.timer != nil {
		w.timer.Stop()
	}
	go w.end(w.q.ended())
	return nil
}

// expire is the budget's timer: w ends unavailable (its question
// timeout) or cancelled (its client's deadline), unless it has ended or
// leads already.
func (w *waiter) expire() {
	if !w.state.CompareAndSwap(waiterPending, waiterEnded) {
		return
	}
	w.detach()
	w.unwatch()
	w.end(w.q.ended())
}

// end writes w's reply for f and delivers it.
func (w *waiter) end(f found) {
	w.q.respond(&w.resp, w.dst, &f)
	w.deliver(&w.resp)
}

// answer ends the waiters ws of fl, which has landed, on its leader's
// goroutine: each gets its reply from the leader's result, as a
// follower does (follow), with one clock reading for all. When the
// leader abandoned fl they wait for a new flight instead (relead).
func (f *flights) answer(fl *flight, ws []*waiter) {
	if fl.abandoned {
		f.relead(fl.key, fl.hash, ws)
		return
	}
	now := time.Now()
	for _, w := range ws {
		if !w.state.CompareAndSwap(waiterPending, waiterEnded) {
			continue // its cancel or its timer delivers it
		}
		w.unwatch()
		qn := &w.q
		qn.joined(fl, false)
		var r found
		if fl.entry == nil {
			// Unavailable: the client's SERVFAIL names the leader's
			// attempts (read only from here on).
			qn.tried = fl.tried
			r.result, r.reason, r.shared = fl.result, fl.reason, true
		} else {
			r.en, r.at, r.result, r.shared, r.ends = fl.entry, now, fl.entry.result, true, true
		}
		w.end(r)
	}
}

// relead hands on the flight for key (hash h) whose leader abandoned it
// (its client left, its own timeout ran out) to its waiters ws: they wait
// for a flight that another question started meanwhile; else the first
// still waiting leads a new one, on a goroutine of its own, and the
// others wait for it.
func (f *flights) relead(key cacheKey, h uint64, ws []*waiter) {
	var first *waiter
	f.mu.Lock()
	fl := f.findHashed(key, h)
	if fl == nil {
		for i, w := range ws {
			if w.state.CompareAndSwap(waiterPending, waiterLeading) {
				first, ws = w, ws[i+1:]
				break
			}
		}
		if first == nil {
			f.mu.Unlock()
			return // every one ended meanwhile
		}
		fl = f.start(key, h, first.q.trace)
	}
	for _, w := range ws {
		if w.state.Load() == waiterPending {
			f.attach(fl, w)
		}
	}
	f.mu.Unlock()
	if first != nil {
		first.unwatch() // its question watches its own sockets now
		go first.lead(key, fl)
	}
}

// lead asks key upstream for w's question, as the leader of fl, and
// delivers its answer.
func (w *waiter) lead(key cacheKey, fl *flight) {
	qn := &w.q
	var r found
	qn.lead(qn.client.name, key, fl, false, &r)
	if r.cacheHit {
		qn.e.counters.cacheHits.Add(1)
	}
	qn.respond(&w.resp, w.dst, &r)
	qn.release()
	w.deliver(&w.resp)
}
