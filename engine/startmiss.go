package engine

import (
	"context"
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/dohfwd/dohfwd/dnswire"
)

// A miss in two steps. A front end that reads a batch of requests on one
// goroutine and hands each miss to another (the HTTP/2 server's reader
// and its workers) would send the batch's upstream queries one by one, a
// goroutine switch and the engine's path apart; the upstream, faster than
// that, wakes for each (measured: nsd's CPU per question 1–2 µs more than
// for dnsdist's back-to-back sends). StartMiss sends a plain miss's first
// query on the reader's goroutine, so a batch's go out back to back, and
// ResolveWireMiss goes on with that transaction where it would otherwise
// have begun it: the same attempt, under the same rules (its deadline
// counted from before the send, its one event when it ends, its ceiling
// and client slots held until then, demotion and budgets as ever).

// started is the first attempt StartMiss began for a question: its
// transaction is in the ask's buffers (askBuffers.tx), its candidate's
// state in askBuffers.cand.
type started struct {
	at   time.Time  // the attempt's start: its deadline's, marks' and RTT's clock
	pick int        // its server, in the candidate's list
	slot ClientSlot // the client's slot, when one was taken
	x    exchanging
	// ended says the transaction ended at the start (no socket opened,
	// or the send failed): outcome, rcode and class say how, the ceiling
	// and client slots are given back and the socket closed.
	ended   bool
	outcome Outcome
	rcode   int
	class   ErrorClass
	// loop says the upstream loop runs the transaction (uploop_linux.go):
	// res is its result once it ended, at endedAt. nxEnds says an
	// NXDOMAIN ends the question (no search candidate may follow).
	loop    bool
	res     exchangeResult
	endedAt time.Time
	nxEnds  bool
}

// StartMiss begins the question ResolveWireImmediate read into m, when it
// is a plain question that leads its flight: no stale or live entry for
// it in the cache, not a search candidate, no forwarded ECS, UDP first
// (or TCP first on a Network whose TCP Open does not wait for the
// connect: ConnectsLater), and no flight asking it yet. It then begins the flight, takes the
// in-flight ceiling's slot and the client's (ctx's), picks the first
// server by the demotion order, takes a socket and sends the first
// attempt's query, all on the caller's goroutine, and returns.
// ResolveWireMiss goes on with that transaction: it waits for the reply
// until the attempt's deadline, counted from before the send, and makes
// any further attempts as ever. Otherwise StartMiss does nothing, or only
// begins the flight (as JoinWire does); ResolveWireMiss does the rest.
//
// Once it began anything (m.Started), m must be given to ResolveWireMiss
// under the same ctx, even when ctx has ended meanwhile: that ends the
// transaction (cancelled, not charged, its socket closed) and hands the
// flight on to its followers.
//
// A flight JoinWire began for m (it found none to join) is led by the
// question as it is: JoinWire looked in the cache and the flights just
// before.
//
// With then, the upstream loop may take the transaction (uploop_linux.go):
// StartMiss then reports true, and then runs exactly once when the
// transaction ended, on the loop's goroutine (ResolveHere) when it
// brought the answer, else handed elsewhere (ResolveElsewhere). The
// caller must not call ResolveWireMiss for m itself.
func (e *Engine) StartMiss(ctx context.Context, m *Miss, then MissContinuation) bool {
	rt, cq, sc := m.routes, &m.client, m.scope
	if rt == nil || m.first != nil || e.first == TCP && !e.openNow || len(sc.servers) == 0 ||
		len(sc.search) > 0 && dnswire.CountLabel(cq.name) == 1 || rt.cfg.ForwardECS && cq.ecs || ctx.Err() != nil {
		return false
	}
	start := time.Now()
	if m.led != nil {
		m.start = start
		return e.startAttempt(ctx, rt, cq, sc, start, m, then)
	}
	key := keyFor(cq, cq.name)
	if rt.cache != nil {
		if en, _ := rt.cache.get(key, start); en != nil {
			return false // live (landed meanwhile) or stale: ResolveWire's way
		}
	}
	h := key.hash()
	f := &rt.flights
	f.mu.Lock()
	if f.findHashed(key, h) != nil {
		f.mu.Unlock()
		return false // a follower: it waits on its own goroutine
	}
	m.led = f.start(key, h, TraceFrom(ctx))
	f.mu.Unlock()
	m.start = start
	return e.startAttempt(ctx, rt, cq, sc, start, m, then)
}

// Started reports whether StartMiss began m's question: m must then be
// given to ResolveWireMiss, whatever becomes of its client.
func (m *Miss) Started() bool { return m.led != nil }

// startAttempt begins the first attempt of the question cq, routed to sc
// under rt, at now (see StartMiss): the ask's buffers with its
// transaction sent, or nil when it begins none (no time left, a refusal
// by the ceiling or the client's limit, a name that does not pack), which
// the question's ask then finds for itself as ever. It sets m.first and
// reports whether the upstream loop took the transaction (then).
func (e *Engine) startAttempt(ctx context.Context, rt *routes, cq *clientQuery, sc *scope, now time.Time, m *Miss, then MissContinuation) bool {
	bufs, err := packQuery(cq, cq.name, false)
	if err != nil {
		return false
	}
	// The question's parts that the deadline and the client's slot read.
	var qn question
	qn.e, qn.ctx, qn.cfg = e, ctx, rt.cfg
	qn.setBudget(now)
	tx := &bufs.tx
	tx.query, tx.bufs, tx.ended = bufs.query, bufs, time.Time{}
	if rt.cfg.Attempts < 1 || !qn.deadline(tx, now) {
		askBuffersPool.Put(bufs)
		return false
	}
	bufs.asked = [maxStackServers]bool{}
	c := &bufs.cand
	c.reset(sc.servers, bufs.until[:0], bufs.order[:0], bufs.asked[:0])
	pick := c.next(now.Sub(e.epoch), nil)
	tx.server, tx.transport = c.servers[pick], e.first
	tx.source = sc.source(tx.server.addr)
	if !e.inFlight.acquire() {
		askBuffersPool.Put(bufs)
		return false
	}
	slot, ok := qn.acquireClient()
	if !ok {
		e.inFlight.release()
		askBuffersPool.Put(bufs)
		return false
	}
	s := &bufs.first
	s.at, s.pick, s.slot, s.ended = now, pick, slot, false
	s.nxEnds = len(sc.search) == 0
	m.first = bufs
	if then != nil && e.loopStart(ctx, tx, s, then) {
		return true
	}
	var r exchangeResult
	if e.openExchange(ctx, tx, &s.x, &r) {
		q := tx.query[2:]
		if tx.transport == TCP {
			q = tx.query // framed with its length
		}
		if err := s.x.ps.sock.Send(q); err == nil {
			return false
		} else {
			// As transact: a TCP connect that failed after Open
			// handed the socket over is the connect's failure.
			e.socketFailure(ctx, tx, err, connectOr(err, OutcomeSendError), &r)
		}
		e.endExchange(ctx, tx, &s.x, &r) // closes it: r is not clean
	}
	s.x = exchanging{}
	s.ended, s.outcome, s.rcode, s.class = true, r.outcome, r.rcode, r.class
	e.inFlight.release()
	if slot != nil {
		slot.ReleaseTransaction()
	}
	s.slot = nil
	return false
}

// goOn ends the transaction StartMiss began in bufs (see ask): it waits
// for the reply on its socket until its deadline, as exchange would have,
// and gives back its slots. The result is written into res, which must
// be zero. It returns the attempt's start and server.
func (qn *question) goOn(bufs *askBuffers, res *exchangeResult) (time.Time, int) {
	s, tx := &bufs.first, &bufs.tx
	switch {
	case s.ended:
		res.outcome, res.rcode, res.class = s.outcome, s.rcode, s.class
	case s.loop:
		*res = s.res // the loop ended it
	case tx.transport == TCP:
		qn.e.receiveTCP(qn.ctx, tx, s.x.ps.sock, tx.query[2:], res)
	default:
		qn.e.receiveUDP(qn.ctx, tx, s.x.ps.sock, nil, tx.query[2:], res)
	}
	return qn.endStarted(bufs, res)
}

// endStarted ends the transaction StartMiss began in bufs, its reply
// read into res: its socket back in the pool when clean (else closed),
// its slots given back. It returns the attempt's start and server.
func (qn *question) endStarted(bufs *askBuffers, res *exchangeResult) (time.Time, int) {
	e, s, tx := qn.e, &bufs.first, &bufs.tx
	if !s.ended {
		if s.loop { // the loop saw it end: no second clock reading
			e.endLoopExchange(qn.ctx, tx, &s.x, res, s.endedAt)
		} else {
			e.endExchange(qn.ctx, tx, &s.x, res)
		}
		e.inFlight.release()
		if s.slot != nil {
			s.slot.ReleaseTransaction()
		}
	}
	at, pick := s.at, s.pick
	*s = started{}
	return at, pick
}

// StartedWait is the wait of the transaction StartMiss began for m and
// sent: its socket, the buffer its reply is read into and its deadline.
// ok is false when none waits (StartMiss began none, or it ended at
// once). A front end that learns of the socket's reply without waiting
// on it (the edge module, from its host's read event) hands it to
// FinishStarted. Over TCP the stream is read into buf from its start, in
// as many reads as StartedReadsOn asks for.
func (m *Miss) StartedWait() (sock Socket, buf []byte, deadline time.Time, ok bool) {
	bufs := m.first
	if bufs == nil || bufs.first.ended {
		return nil, nil, time.Time{}, false
	}
	return bufs.first.x.ps.sock, bufs.recv[:], bufs.tx.deadline, true
}

// StartedReadsOn reports whether the started transaction's TCP stream,
// of which read holds the bytes received so far (StartedWait's buffer
// from its start), needs more before FinishStarted can take it: no whole
// message yet, and room for it in the buffer. The caller then reads on
// into the buffer past read, until the same deadline. False for UDP,
// whose datagram comes whole, and for a message longer than the buffer,
// which FinishStarted leaves to ResolveWireMiss.
func (m *Miss) StartedReadsOn(read []byte) bool {
	bufs := m.first
	if bufs == nil || bufs.first.ended || bufs.tx.transport != TCP {
		return false
	}
	if _, _, whole := nextFrame(read); whole {
		return false
	}
	return len(read) < 2 || 2+int(binary.BigEndian.Uint16(read)) <= len(bufs.recv)
}

// FinishStarted ends the question StartMiss began in m with reply, the
// first datagram its transaction's socket received (from from; read into
// StartedWait's buffer, or anywhere else), or over TCP the stream's bytes
// received so far, when that ends the question on its own: it matches
// the query and its server (ID, question, peer; over TCP, the stream's
// first message) and is an answer or NXDOMAIN. It then does what ResolveWireMiss would have
// done from that reply on, on the caller's goroutine: the socket back in
// the pool, the slots given back, the server's charge, the attempt's
// event, the counters, the flight landed (followers and waiters
// answered), the cache, and the client's reply appended to dst, returned
// with ok true; m is emptied.
//
// Otherwise (a reply that does not match or does not end the question,
// a stream with no whole message, ctx ended, a reload since m was read)
// it reports false having done nothing: m must go to ResolveWireMiss as
// ever, and the socket's next Receives must return reply again, for the
// rules to apply to it there.
func (e *Engine) FinishStarted(ctx context.Context, m *Miss, reply []byte, from netip.AddrPort, dst []byte) (resp Response, ok bool) {
	bufs := m.first
	if bufs == nil || bufs.first.ended || ctx.Err() != nil || e.routes.Load() != m.routes {
		return resp, false
	}
	tx := &bufs.tx
	if tx.transport == UDP && from != tx.server.addr || len(reply) > len(bufs.recv) {
		return resp, false
	}
	if len(reply) > 0 && &reply[0] != &bufs.recv[0] {
		reply = bufs.recv[:copy(bufs.recv[:], reply)]
	}
	if tx.transport == TCP {
		// The stream's first message, as receiveTCP takes it; bytes
		// after it are not read.
		var whole bool
		if reply, _, whole = nextFrame(reply); !whole {
			return resp, false
		}
	}
	var res exchangeResult
	if !replyEnds(reply, tx.query[2:], tx.transport, &res) || res.outcome != OutcomeAnswer && res.outcome != OutcomeNXDomain {
		return resp, false
	}
	if tx.transport == UDP {
		res.clean = usedCleanly(res.outcome) // the first datagram: no strays
	}
	// As ResolveWireMiss, resolve, lookup, lead, askUpstream and ask
	// would go on for the started question, whose name is the one asked.
	var qn question
	qn.fromMiss(e, ctx, m)
	fl, name := qn.led, qn.client.name
	qn.led, qn.first = nil, nil
	key := keyFor(&qn.client, name)
	fl.abandoned, fl.leaderID = true, qn.id
	now, pick := qn.endStarted(bufs, &res)
	var f found
	var en *entry
	qn.attemptEnded(name, bufs, pick, now, &res, &f, &en)
	qn.putUnlessHeld(bufs)
	qn.setFlight(key, fl, qn.answerEntry(false, &res, en, &f), &f)
	qn.land(key, fl)
	qn.respond(&resp, dst, &f)
	qn.release()
	return resp, true
}

// dropFirst ends the first attempt StartMiss began for a question that
// did not go on with it (none does: resolve asks the name it began
// first): its socket closed, its slots given back, no attempt counted.
func (qn *question) dropFirst() {
	bufs, e := qn.first, qn.e
	qn.first = nil
	if s := &bufs.first; !s.ended && !s.loop {
		stopClosing(qn.ctx, s.x.ps.sock, s.x.stop)
		s.x.ps.sock.Close()
		e.inFlight.release()
		if s.slot != nil {
			s.slot.ReleaseTransaction()
		}
	}
	bufs.first = started{}
	askBuffersPool.Put(bufs)
}
