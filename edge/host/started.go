package host

import (
	"context"
	"fmt"
	"time"

	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine"
)

// A miss begun on the reader, finished where its answer is delivered: the
// wazero host's form of the native server's two-step miss (doh.MissStarter,
// engine.MissContinuation). The HTTP/2 reader hands the module the
// question and has it begun in the same call (dohfwd_ask with
// abi.QueryStart: the module's first query is sent from there); no
// goroutine of the host waits for it. The poll that brings its answer
// (usually on the UDP socket's waiter, woken by the reply) copies it out of
// the module, and once that poll has let the instance go, the front end's
// stream finishes there (ResolveHere: its response appended to the
// connection's), each connection flushed once for all the questions that
// poll finished. Every other end takes the front end's other way
// (ResolveElsewhere, a worker): a poll on a reader's goroutine (which holds
// its connection's lock), a cancel, the instance's failure.

// start begins c's question in the module for the front end's reader,
// under a request number of its own, watched for its context's end. It
// reports whether it began it; then finishes it, exactly once. Otherwise
// c is as it was, or answered at once (c.answered), and nothing waits for
// it: the front end goes on with it on a worker (Pool.ResolveMiss).
//
// An instance with nothing in progress (one stream) is asked at once, on
// the reader (startNow: one dohfwd_ask, no goroutine woken). Otherwise the
// question is queued for a poll (startQueued): the reader begins its read
// batch's misses back to back, and one poll takes them all. Measured on
// distinct names, cache off, 4 connections x 10 streams (interleaved with
// the worker's way): a dohfwd_ask for each miss cost 1.26x its CPU per
// request (an ask per question and 0.19 polls), one poll for the batch
// 0.91x.
//
// A question dohfwd_ask did not see (the instance was busy) while asks
// still answer (askNow's run of misses is short: hits likely) is left to
// the worker's way, which asks it at once before any poll: begun, it
// would take a poll, which costs a hit several times an ask (measured on
// a repeated name, cache on: 1.17x the CPU per request).
func (in *Instance) start(ctx context.Context, c *call, then engine.MissContinuation) bool {
	if !c.asked && in.askMisses.Load() < askMissRun {
		return false
	}
	if in.inFlight.Load() == 0 && in.ask != nil && !in.cannotStart.Load() && in.calling.TryLock() {
		begun := in.startNow(ctx, c, then)
		if begun || c.answered || !in.cannotStart.Load() {
			return begun
		}
	}
	return in.startQueued(ctx, c, then)
}

// startQueued begins c's question by the next poll: its EventQuery queued,
// and a goroutine of its own to poll, unless one is on its way already
// (pollQueued), so that one poll takes the misses a reader begins back to
// back and finishes their answers where it runs. false when the instance
// failed.
func (in *Instance) startQueued(ctx context.Context, c *call, then engine.MissContinuation) bool {
	c.in, c.then, c.question = in, then, true
	q := abi.Query{Wire: c.query, Client: engine.ClientOf(ctx)}
	if t := engine.TraceFrom(ctx); t != nil {
		q.Trace, q.HasTrace = *t, true
	}
	// Watched before it is queued, so that no poll delivers its answer
	// first (unwatch); a cancel before it is in calls is a Close that
	// finds nothing to end: its answer is then dropped by the front end.
	c.watch(ctx)
	in.mu.Lock()
	if in.failed != nil {
		in.mu.Unlock()
		c.unwatch()
		c.then = nil
		return false
	}
	c.id = in.newID()
	in.calls[c.id] = c
	in.events = abi.AppendQueryEvent(in.events, c.id, &q)
	in.mu.Unlock()
	in.inFlight.Add(1)
	in.begunQueued.Add(1)
	if !in.pollQueued.Swap(true) {
		go in.pollForQueued()
	}
	return true
}

// pollForQueued is startQueued's poll, on a goroutine that holds no
// connection's lock, so it finishes the answers in place.
func (in *Instance) pollForQueued() {
	in.pollQueued.Store(false) // a question queued after this spawns another
	in.kick()
}

// startNow is start's dohfwd_ask with abi.QueryStart; the caller holds
// in.calling, which startNow lets go.
func (in *Instance) startNow(ctx context.Context, c *call, then engine.MissContinuation) bool {
	if in.closed || !in.memory.enter() {
		in.unlock(finishOnWorker)
		return false
	}
	in.mu.Lock()
	if in.failed != nil {
		in.mu.Unlock()
		in.memory.leave()
		in.unlock(finishOnWorker)
		return false
	}
	c.id, c.in, c.then, c.question = in.newID(), in, then, true
	in.calls[c.id] = c
	in.mu.Unlock()
	in.inFlight.Add(1)
	q := abi.Query{Wire: c.query, Client: engine.ClientOf(ctx), Start: true}
	if t := engine.TraceFrom(ctx); t != nil {
		q.Trace, q.HasTrace = *t, true
	}
	in.asking.Store(true)
	begun, err := in.askStartLocked(c, &q)
	in.asking.Store(false)
	in.memory.leave()
	if err != nil {
		in.closed = true
		in.unlock(finishOnWorker)
		in.fail(err) // c is in calls: fail hands it to then, which answers SERVFAIL
		return true
	}
	if !begun {
		in.mu.Lock()
		delete(in.calls, c.id)
		in.mu.Unlock()
		in.inFlight.Add(-1)
		c.then = nil
	} else {
		// Watched before the instance is let go, so no poll can
		// deliver its answer first (unwatch).
		c.watch(ctx)
		in.begun.Add(1)
	}
	in.unlock(finishOnWorker)
	in.kickIfPending(finishOnWorker)
	return begun
}

// askStartLocked is start's call; the caller holds in.calling and the
// memory. It reports whether the module began the question (and then
// sees that the timer fires by the deadline the module returned); else c
// holds its answer at once (c.answered), or the module started nothing
// (it does not know abi.QueryStart: no question is asked so again; or
// it did not read the event, abi.AskUnreadable: this one goes by a poll).
func (in *Instance) askStartLocked(c *call, q *abi.Query) (bool, error) {
	in.askIn = abi.AppendQueryEvent(in.askIn[:0], c.id, q)
	return in.askEventLocked(c, in.askIn)
}

// askEventLocked is askStartLocked for the event it encoded.
func (in *Instance) askEventLocked(c *call, event []byte) (bool, error) {
	ctx := in.pollCtx
	if err := in.put(ctx, event); err != nil {
		return false, err
	}
	in.askCalls.Add(1)
	n, err := in.call(ctx, in.ask, uint64(len(event)))
	if err != nil {
		return false, fmt.Errorf("edge: ask: %w", err)
	}
	switch uint32(n) {
	case abi.AskStarted:
		out, err := in.view(ctx, abi.PollHeaderSize)
		if err != nil {
			return false, err
		}
		deadline, err := abi.ParseAskStarted(out)
		if err != nil {
			return false, fmt.Errorf("edge: ask result: %w", err)
		}
		if next := time.Unix(0, deadline); !next.After(time.Now()) {
			in.due.Store(true) // a worker of the module's waits to run
		} else if next.Before(in.timerAt) {
			in.timerAt = next
			in.timer.Reset(time.Until(next))
		}
		return true, nil
	case 0: // a module before QueryStart
		in.cannotStart.Store(true)
		c.asked = true
		return false, nil
	case abi.AskUnreadable: // this event alone: the next is begun again
		c.asked = true
		return false, nil
	}
	out, err := in.view(ctx, uint32(n))
	if err != nil {
		return false, err
	}
	resp, err := abi.ParseQueryAnswer(out)
	if err != nil {
		return false, fmt.Errorf("edge: ask result: %w", err)
	}
	if abi.Published(out) {
		in.due.Store(true) // hit records wait: the caller's kickIfPending polls for them
	}
	c.wire = append(c.wire[:0], resp.Wire...)
	resp.Wire, resp.Answered = nil, time.Now()
	c.resp, c.answered = resp, true
	in.askedNow.Add(1)
	in.askMisses.Store(0)
	return false, nil
}

// deliverBegun takes the answer of a question start began, at now, out
// of the poll's result (the module's memory, reused by its next call)
// into c, and lists c to be finished once the instance is let go
// (unlock). The caller holds in.calling and took c out of in.calls.
func (in *Instance) deliverBegun(c *call, answer []byte, now time.Time) {
	in.inFlight.Add(-1)
	c.unwatch()
	resp, err := abi.ParseQueryAnswer(answer)
	if err == nil {
		c.wire = append(c.wire[:0], resp.Wire...)
		resp.Wire, resp.Answered = nil, now
	}
	c.resp, c.err, c.answered = resp, err, true
	if in.finishedLast == nil {
		in.finishedFirst = c
	} else {
		in.finishedLast.next = c
	}
	in.finishedLast = c
}

// finishAt is where the caller of unlock (and of kickOn, kickIfPending)
// finishes the begun questions the polls it ran answered.
type finishAt bool

const (
	// finishOnCaller: on the caller's goroutine, which holds no HTTP/2
	// connection's lock (a UDP waiter, the timer, pollForQueued, a
	// worker), so it may finish a stream in place.
	finishOnCaller finishAt = true
	// finishOnWorker: each on a worker of the front end's, for a caller
	// on an HTTP/2 reader, whose goroutine holds its connection's lock,
	// which finishing in place takes.
	finishOnWorker finishAt = false
)

// unlock lets the instance go and then finishes the begun questions its
// polls answered, at at. Not under in.calling: a stream's finish may wait
// for its connection's lock, whose holder may wait for the instance.
func (in *Instance) unlock(at finishAt) {
	c := in.finishedFirst
	in.finishedFirst, in.finishedLast = nil, nil
	in.calling.Unlock()
	if c != nil {
		in.finishBegun(c, at)
	}
}

// finishBegun finishes the list of begun questions from c on (see
// unlock), and flushes each connection that finished any in place once,
// after the last.
func (in *Instance) finishBegun(c *call, at finishAt) {
	var seen [8]engine.Flusher
	flushers := seen[:0]
	for c != nil {
		next, then := c.next, c.then
		c.next = nil // c may be another question's once then returns
		if at == finishOnWorker {
			in.finishedOnWorker.Add(1)
			then.ResolveElsewhere()
			c = next
			continue
		}
		in.finishedInPlace.Add(1)
		if f := then.ResolveHere(); f != nil && !containsFlusher(flushers, f) {
			flushers = append(flushers, f)
		}
		c = next
	}
	for _, f := range flushers {
		f.Flush()
	}
}

func containsFlusher(all []engine.Flusher, f engine.Flusher) bool {
	for _, g := range all {
		if g == f {
			return true
		}
	}
	return false
}

// watch ends c's question in the module when ctx ends, as the engine
// watches a transaction's: through ctx's CancelWatcher (the front end's
// stream context) with no allocation, else context.AfterFunc. c.in is
// set.
func (c *call) watch(ctx context.Context) {
	if w := engine.CancelWatcherOf(ctx); w != nil {
		c.watcher = w
		w.CloseOnCancel(c)
		return
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { c.Close() })
		// A ctx done already has Close running at once, on a goroutine
		// of its own: the stop is recorded under the lock Close clears it
		// under, and not after a Close (c is then kept, watched no more).
		in := c.in
		in.mu.Lock()
		if !c.kept {
			c.stopWatch = stop
		}
		in.mu.Unlock()
	}
}

// unwatch ends watch. When the cancel is under way already, its Close
// may still come: c then never goes back to the pool (it would close
// another question).
func (c *call) unwatch() {
	switch {
	case c.watcher != nil:
		c.kept = !c.watcher.StopClosing(c)
	case c.stopWatch != nil:
		c.kept = !c.stopWatch()
	}
	c.watcher, c.stopWatch = nil, nil
}

// Close is the end of a begun question's context (its client went away),
// called by its CancelWatcher: the module is told (EventCancel: its engine
// ends the transaction as natively, cancelled and not charged) and the
// answer that still comes back is dropped. The front end hears of it
// through then, on a worker: Close may run on a reader that holds its
// connection's lock. An answer already taken by a poll goes on as it is.
func (c *call) Close() error {
	in := c.in
	in.mu.Lock()
	if in.calls[c.id] != c {
		in.mu.Unlock()
		return nil // answered, or the instance failed: that end reaches then
	}
	delete(in.calls, c.id)
	in.events = abi.AppendEvent(in.events, &abi.Event{Kind: abi.EventCancel, ID: c.id})
	c.watcher, c.stopWatch, c.kept = nil, nil, true // under the lock: see watch
	in.mu.Unlock()
	in.inFlight.Add(-1)
	c.err, c.answered = context.Canceled, true
	// Polled from a goroutine of its own: the canceller may be a reader
	// holding its connection's lock, and a poll finishes streams.
	go in.kick()
	c.then.ResolveElsewhere()
	return nil
}
