//go:build wasip1

package main

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine"
)

// A question (abi.EventQuery) comes from a host that runs the DoH front
// end itself: the module answers it with its engine alone, behind the
// DDR names (the assembly's resolver), with none of the HTTP work that a
// whole request costs in wasm.

// question is one EventQuery on its way: its own copy of the query (the
// poll's buffer is reused for the result), the context its host may
// cancel, and the reply's buffer. Pooled: a question's state is the same
// size every time.
type question struct {
	id     uint32
	query  []byte
	trace  engine.Trace // the host's, when it sent one
	reply  []byte
	cancel engine.CancelContext
	ctx    context.Context        // cancel, naming the client and the trace as the host asked
	qctx   engine.QuestionContext // ctx when it names the client or carries the trace
	miss   engine.Miss
	// read is how much of its started TCP stream the poll has read into
	// the miss's buffer (engine.Miss.StartedWait) in awaits before the
	// one under way.
	read int
	// delivered is qn.deliver, made once: the engine's callback for a
	// question it attached to an identical question's flight.
	delivered func(*engine.Response)
}

var questions sync.Pool

func init() { // not in questions' declaration: deliver puts a question back in it
	questions.New = func() any {
		qn := &question{query: make([]byte, 0, 512), reply: make([]byte, 0, 1232)}
		qn.delivered = qn.deliver
		return qn
	}
}

// queryCounts are abi.Status.Queries; under requests' lock.
var queryCounts abi.QueryCounts

// ask answers an EventQuery: from memory in this poll when the engine can
// (a cache hit or a local name takes no goroutine); else, when an
// identical question is already upstream, by the engine once that one's
// answer comes (no goroutine either: engine.JoinFlight); else, for a plain
// miss, its first query sent in this poll (engine.StartMiss; over TCP on
// a connection the host is still opening) and its reply's read event
// finished in the poll that brings it (over TCP, its last piece), when
// that reply ends the question (finishWithReplies: no goroutine either); else on a
// worker goroutine. An answer that waited joins a later poll's result (or
// this one's, if it needs no network). The host's EventCancel ends it as
// a request's.
func ask(e *abi.Event) {
	q, err := abi.ParseQuery(e)
	if err != nil || dohfwd == nil {
		// A host bug or no dohfwd_init: the engine's answer to a query
		// it cannot read (an empty reply, which the front end turns
		// into SERVFAIL).
		answerQuery(e.ID, &engine.Response{Rcode: -1, Result: engine.ResultUnavailable, Reason: engine.ReasonAttemptsSpent}, &queryCounts.AtOnce)
		return
	}
	qn, trace := newQuestion(e.ID, &q)
	if r, ok := dohfwd.Resolver.AnswerNow(qn.query, qn.reply[:0], trace, &qn.miss); ok {
		answerQuery(qn.id, &r, &queryCounts.AtOnce)
		qn.done(r.Wire)
		return
	}
	qn.begin(q.Client, trace)
}

// newQuestion takes a pooled question for the host's id and q, its query
// copied (the buffer q reads is reused); trace is its trace, or nil.
func newQuestion(id uint32, q *abi.Query) (qn *question, trace *engine.Trace) {
	qn = questions.Get().(*question)
	qn.id = id
	qn.query = append(qn.query[:0], q.Wire...)
	if q.HasTrace {
		qn.trace = q.Trace // in qn, so that q stays on the stack
		trace = &qn.trace
	}
	return qn, trace
}

// begin goes on with a question the engine could not answer from memory
// (its miss read into qn.miss): attached to an identical question's
// flight, or its first query sent and its reply awaited without a
// goroutine, or else on a worker. It reports whether it readied a
// goroutine (a worker), which only a run of the scheduler (a poll) lets
// go on.
func (qn *question) begin(client netip.Addr, trace *engine.Trace) (readied bool) {
	// The front end's context, as natively (doh.Handler.answer): the
	// client for its share of transactions, the trace for the events.
	if client.IsValid() || trace != nil {
		qn.ctx = qn.qctx.Set(&qn.cancel, client, trace)
	} else {
		qn.ctx = &qn.cancel
	}
	requests.Lock()
	requests.cancel[qn.id] = &qn.cancel
	requests.Unlock()
	if dohfwd.Resolver.JoinFlight(qn.ctx, &qn.miss, qn.reply[:0], qn.delivered) {
		return false
	}
	// The miss was read by the engine itself (the DDR names answer at
	// once), so the engine's own StartMiss is the resolver's.
	eng.StartMiss(qn.ctx, &qn.miss, nil)
	if sock, b, deadline, ok := qn.miss.StartedWait(); ok {
		if s, ok := sock.(*hostSocket); ok && s.await(qn, b, deadline) {
			return false
		}
	}
	workers.Run(job{qn: qn})
	return true
}

// finishWithReplies ends the questions whose started transaction's wait
// ended (hostSocket.await): on the poll's goroutine when the reply ends
// the question on its own (engine.FinishWithReply); else on a worker,
// which goes on through ResolveMiss as ever, its socket's next
// Receive returning what ended the wait (a reply that did not end the
// question, the deadline, a close for a cancel).
//
// A TCP stream's reply may come in pieces: while it holds no whole
// message (engine.Miss.StartedReadsOn), the socket awaits the rest into
// the buffer past what came, until the same deadline; what it then
// gives back to a worker is the stream from its start.
func finishWithReplies() {
	endedScratch = network.takeEnded(endedScratch[:0])
	for i := range endedScratch {
		e := &endedScratch[i]
		qn := e.qn
		if e.r.code == 0 && !e.r.connect {
			read := e.buf[:e.r.n]
			if e.s.stream {
				_, all, deadline, _ := qn.miss.StartedWait()
				read = all[:qn.read+e.r.n]
				if e.r.n > 0 && qn.miss.StartedReadsOn(read) {
					qn.read = len(read)
					if e.s.await(qn, all[len(read):], deadline) {
						continue
					}
				}
				e.r.n, e.buf = len(read), all
			}
			if r, ok := eng.FinishWithReply(qn.ctx, &qn.miss, read, e.r.from, qn.reply[:0]); ok {
				requests.Lock() // once for both: the map and the answer
				delete(requests.cancel, qn.id)
				queryCounts.Finished++
				requests.scratch = abi.AppendQueryAnswer(requests.scratch[:0], &r)
				requests.answers = abi.AppendAnswer(requests.answers, qn.id, requests.scratch)
				requests.Unlock()
				qn.done(r.Wire)
				continue
			}
		}
		network.giveBack(e)
		workers.Run(job{qn: qn})
	}
	clear(endedScratch) // no question or socket kept past its end
}

// endedScratch is finishWithReplies's list (no goroutine runs beside a poll).
var endedScratch []ended

// deliver is the answer to a question the engine attached to an identical
// question's flight (engine.JoinFlight).
func (qn *question) deliver(r *engine.Response) {
	requests.Lock() // once for both: the map and the answer
	delete(requests.cancel, qn.id)
	queryCounts.Joined++
	requests.scratch = abi.AppendQueryAnswer(requests.scratch[:0], r)
	requests.answers = abi.AppendAnswer(requests.answers, qn.id, requests.scratch)
	requests.Unlock()
	qn.done(r.Wire)
}

// resolve asks the engine on a worker goroutine.
func (qn *question) resolve() {
	var r engine.Response
	if qn.miss.Ready() {
		r = dohfwd.Resolver.ResolveMiss(qn.ctx, &qn.miss, qn.reply[:0])
	} else {
		r = dohfwd.Resolver.Resolve(qn.ctx, qn.query, qn.reply[:0])
	}
	requests.Lock()
	delete(requests.cancel, qn.id)
	requests.Unlock()
	answerQuery(qn.id, &r, &queryCounts.Waited)
	qn.done(r.Wire)
}

// answerQuery adds the answer to question id to the next poll result,
// counted in count (one of queryCounts').
func answerQuery(id uint32, r *engine.Response, count *uint64) {
	requests.Lock()
	*count++
	requests.scratch = abi.AppendQueryAnswer(requests.scratch[:0], r)
	requests.answers = abi.AppendAnswer(requests.answers, id, requests.scratch)
	requests.Unlock()
}

// done returns qn to the pool, keeping the reply's buffer when it grew
// within bounds.
func (qn *question) done(reply []byte) {
	if cap(reply) <= 4096 {
		qn.reply = reply[:0]
	}
	qn.cancel = engine.CancelContext{} // nothing resolves under it now
	qn.ctx, qn.miss, qn.read = nil, engine.Miss{}, 0
	if cap(qn.query) <= 4096 {
		questions.Put(qn)
	}
}

// askReply is dohfwd_ask's reply scratch (no goroutine runs beside it).
var askReply = make([]byte, 0, 1232)

// exportAsk is dohfwd_ask (abi.ExportAsk): the EventQuery in the buffer
// answered from memory, its QueryAnswer's length returned; or 0 having
// done nothing, when it needs the network (or does not read: the poll
// answers it as such); or, with abi.QueryStart, begun under its ID as a
// poll would (askStart), or abi.AskUnreadable when it does not read.
//
//go:wasmexport dohfwd_ask
func exportAsk(n uint32) uint32 {
	e, _, err := abi.ParseEvent(buf[:n])
	if err == nil && e.Code&abi.QueryStart != 0 && (e.Kind != abi.EventQuery || dohfwd == nil) {
		return abi.AskUnreadable
	}
	if err != nil || e.Kind != abi.EventQuery || dohfwd == nil {
		return 0
	}
	q, err := abi.ParseQuery(&e)
	if err != nil {
		if q.Start {
			return abi.AskUnreadable // not 0: the host would ask no question so again
		}
		return 0
	}
	if q.Start {
		return askStart(&e, &q)
	}
	var trace *engine.Trace
	if q.HasTrace {
		trace = &askTrace
		askTrace = q.Trace
	}
	r, ok := dohfwd.Resolver.AnswerNow(q.Wire, askReply[:0], trace, nil)
	if !ok {
		return 0
	}
	if cap(r.Wire) <= 4096 {
		askReply = r.Wire[:0]
	}
	return returnAtOnce(&r)
}

// returnAtOnce is dohfwd_ask's result for an answer from memory, counted
// as a poll's would be.
func returnAtOnce(r *engine.Response) uint32 {
	requests.Lock()
	queryCounts.AtOnce++
	published := len(requests.published) > 0
	requests.Unlock()
	// Straight into the buffer: the question in it is read already. A
	// longer answer moves it, as a poll's result does.
	out := abi.AppendQueryAnswer(buf[:0], r)
	if published {
		abi.MarkPublished(out) // the host polls for them at once
	}
	buf = out[:cap(out)]
	return uint32(len(out))
}

// askStart is dohfwd_ask for a question with abi.QueryStart: answered
// from memory as without it, or else begun under the host's ID exactly as
// a poll's EventQuery (ask), so that the host's question costs one call,
// not an ask and a poll. The result is then abi.AskStarted with the
// deadline by which to poll: now when begin readied a worker (only a
// poll's run of the scheduler lets it go on), else the poll's own rule.
func askStart(e *abi.Event, q *abi.Query) uint32 {
	qn, trace := newQuestion(e.ID, q)
	if r, ok := dohfwd.Resolver.AnswerNow(qn.query, qn.reply[:0], trace, &qn.miss); ok {
		n := returnAtOnce(&r)
		qn.done(r.Wire)
		return n
	}
	readied := qn.begin(q.Client, trace)
	now := time.Now()
	requests.Lock()
	next := nextPoll(now)
	requests.Unlock()
	if readied {
		next = now
	}
	out := abi.AppendAskStarted(buf[:0], next.UnixNano())
	buf = out[:cap(out)]
	return abi.AskStarted
}

// askTrace is the trace of dohfwd_ask's question, kept off its stack.
var askTrace engine.Trace

// publishHit is the engine's PublishHotEntries hook (abi.InitPublishHotEntries): the
// record joins the next poll result. It runs on the question's goroutine
// (a poll's, an ask's or a worker's), never under requests' lock.
func publishHit(record []byte) {
	requests.Lock()
	requests.published = abi.AppendHitRecord(requests.published, record)
	requests.Unlock()
}

// dropPublished drops the hit records not handed over yet: after a
// reload they may be of the old configuration, and the engine publishes
// its entries again under the new one.
func dropPublished() {
	requests.Lock()
	requests.published = requests.published[:0]
	requests.Unlock()
}
