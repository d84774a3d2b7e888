package engine

import (
	"context"
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// A miss in two steps. A front end that reads a batch of requests on one
// goroutine and hands each miss to another (the HTTP/2 server's reader
// and its workers) would send the batch's upstream queries one by one, a
// goroutine switch and the engine's path apart; the upstream, faster than
// that, wakes for each (measured: nsd's CPU per question 1–2 µs more than
// for dnsdist's back-to-back sends). StartMiss sends a plain miss's first
// query on the reader's goroutine, so a batch's go out back to back, and
// ResolveMiss goes on with that transaction where it would otherwise
// have begun it: the same attempt, under the same rules (its deadline
// counted from before the send, its one event when it ends, its ceiling
// and client slots held until then, demotion and budgets as ever).

// started is the first attempt StartMiss began for a question: its
// transaction is in the ask's buffers (askBuffers.tx), its candidate's
// state in askBuffers.cand.
//
// Its end may be learned before ResolveMiss goes on with it (goOn):
// at the start (ended), by the upstream loop (uploop_linux.go), or by a
// front end that read the reply itself (FinishWithReply). It is then
// written into res, and goOn takes it from there rather than waiting: a
// started miss ends one way, through ResolveMiss, whoever saw its
// transaction end.
type started struct {
	at   time.Time  // the attempt's start: its deadline's, marks' and RTT's clock
	pick int        // its server, in the candidate's list
	slot ClientSlot // the client's slot, when one was taken
	x    exchanging
	// ended says the transaction ended at the start (no socket opened,
	// or the send failed): res says how, the ceiling and client slots
	// are given back and the socket closed.
	ended bool
	// outside says the transaction's end is learned outside goOn: res
	// once it ended, at endedAt. The upstream loop sets it when it takes
	// the transaction (it owns the socket until then), FinishWithReply
	// when it read the reply.
	outside bool
	res     exchangeResult
	endedAt time.Time
}

// endsHere reports whether a started transaction's end with outcome o
// ends its question, so that ResolveMiss goes on with it without
// waiting for anything (no further attempt; a started question has no
// search candidate to follow an NXDOMAIN: StartMiss takes none).
func endsHere(o Outcome) bool { return o == OutcomeAnswer || o == OutcomeNXDomain }

// StartMiss sends the first upstream query of the miss AnswerNow read
// into m, on the caller's goroutine, and returns without waiting. Use it
// on a reader that hands its misses to other goroutines (the HTTP/2
// server, the edge module's poll), so that a batch's queries go out back
// to back; the miss then ends in ResolveMiss (or FinishWithReply). It
// sends only when the question is a plain one that leads its flight: no stale or live entry for
// it in the cache, not a search candidate, no forwarded ECS, UDP first
// (or TCP first on a Network whose TCP Open does not wait for the
// connect: ConnectsLater), and no flight asking it yet. It then begins the flight, takes the
// in-flight ceiling's slot and the client's (ctx's), picks the first
// server by the demotion order, takes a socket and sends the first
// attempt's query, all on the caller's goroutine, and returns.
// ResolveMiss goes on with that transaction: it waits for the reply
// until the attempt's deadline, counted from before the send, and makes
// any further attempts as ever. Otherwise StartMiss does nothing, or only
// begins the flight (as JoinFlight does); ResolveMiss does the rest.
//
// Once it began anything (m.Started), m must be given to ResolveMiss
// under the same ctx, even when ctx has ended meanwhile: that ends the
// transaction (cancelled, not charged, its socket closed) and hands the
// flight on to its followers.
//
// A flight JoinFlight began for m (it found none to join) is led by the
// question as it is: JoinFlight looked in the cache and the flights just
// before.
//
// With then, the upstream loop may take the transaction (uploop_linux.go):
// StartMiss then reports true, and then runs exactly once when the
// transaction ended, its end written into the started attempt: on the
// loop's goroutine (ResolveHere) when that end ends the question
// (endsHere), else handed elsewhere (ResolveElsewhere). Either way
// ResolveMiss goes on from that end. The caller must not call
// ResolveMiss for m itself.
func (e *Engine) StartMiss(ctx context.Context, m *Miss, then MissContinuation) bool {
	rt, cq, sc := m.routes, &m.client, m.scope
	if rt == nil || m.first != nil || e.first == TCP && !e.openNow || len(sc.servers) == 0 ||
		len(sc.search) > 0 && dnswire.CountLabel(cq.name) == 1 || sc.forwardECS && cq.ecs || sc.ecsAdd || ctx.Err() != nil {
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
			return false // live (landed meanwhile) or stale: Resolve's way
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
// given to ResolveMiss, whatever becomes of its client.
func (m *Miss) Started() bool { return m.led != nil }

// startAttempt begins the first attempt of the question cq, routed to sc
// under rt, at now (see StartMiss): the ask's buffers with its
// transaction sent, or nil when it begins none (no time left, a refusal
// by the ceiling or the client's limit, a name that does not pack), which
// the question's ask then finds for itself as ever. It sets m.first and
// reports whether the upstream loop took the transaction (then).
func (e *Engine) startAttempt(ctx context.Context, rt *routes, cq *clientQuery, sc *scope, now time.Time, m *Miss, then MissContinuation) bool {
	bufs, err := packQuery(cq, cq.name, false, netip.Prefix{})
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
	if c.servers[pick].enc != nil {
		// An encrypted server's attempt waits for its connection:
		// the question's ask makes it, on a goroutine that may wait.
		askBuffersPool.Put(bufs)
		return false
	}
	tx.server, tx.transport = c.servers[pick], e.first
	tx.source = sc.source(tx.server.addr)
	tx.cookies, tx.mixCase = sc.cookies, sc.mixCase
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
	m.first = bufs
	if then != nil && e.loopStart(ctx, tx, s, then) {
		return true
	}
	r := &s.res
	*r = exchangeResult{}
	if e.openExchange(ctx, tx, &s.x, r) {
		q := tx.query[2:]
		if tx.transport == TCP {
			q = tx.query // framed with its length
		}
		if err := s.x.ps.sock.Send(q); err == nil {
			return false
		} else {
			// As transact: a TCP connect that failed after Open
			// handed the socket over is the connect's failure.
			e.socketFailure(ctx, tx, err, connectOr(err, OutcomeSendError), r)
		}
		e.endExchange(ctx, tx, &s.x, r) // closes it: r is not clean
	}
	s.x = exchanging{}
	s.ended = true
	e.inFlight.release()
	if slot != nil {
		slot.ReleaseTransaction()
	}
	s.slot = nil
	return false
}

// goOn ends the transaction StartMiss began in bufs (see ask): it takes
// its end when it is known (started), else waits for the reply on its
// socket until its deadline, as exchange would have; then its socket goes
// back in the pool when clean (else closed) and its slots are given back.
// The result is written into res, which must be zero. It returns the
// attempt's start and server.
func (qn *question) goOn(bufs *askBuffers, res *exchangeResult) (time.Time, int) {
	e, s, tx := qn.e, &bufs.first, &bufs.tx
	switch {
	case s.ended || s.outside:
		*res = s.res
	case tx.transport == TCP:
		e.receiveTCP(qn.ctx, tx, s.x.ps.sock, tx.query[2:], res)
	default:
		e.receiveUDP(qn.ctx, tx, s.x.ps.sock, nil, tx.query[2:], res)
	}
	if !s.ended {
		if s.outside { // seen to end at endedAt: no second clock reading
			e.endExchangeAt(qn.ctx, tx, &s.x, res, s.endedAt)
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

// endKnown is resolve for a started question whose transaction's end is
// known and ends it (outside, endsHere): what lookup, lead, askUpstream
// and ask do for it, through the same steps, without their frames and
// checks, none of which can apply (StartMiss took a name with no search
// candidate, no forwarded ECS, servers to ask and the flight to lead; the
// cache is not looked in again; no second attempt). The upstream loop's
// answers and FinishWithReply's end here, on the goroutine that saw them.
func (qn *question) endKnown(r *found) {
	bufs, fl, name := qn.first, qn.led, qn.client.name
	qn.led, qn.first = nil, nil
	key := keyFor(&qn.client, name)
	fl.abandoned, fl.leaderID = true, qn.id // as lead
	var res exchangeResult
	var en *entry
	now, pick := qn.goOn(bufs, &res)
	qn.attemptEnded(name, bufs, pick, now, &res, r, &en)
	qn.putUnlessHeld(bufs)
	qn.setFlight(key, fl, qn.answerEntry(false, &res, en, r), r)
	qn.land(key, fl)
}

// StartedWait is the wait of the transaction StartMiss began for m and
// sent: its socket, the buffer its reply is read into and its deadline.
// ok is false when none waits (StartMiss began none, or it ended at
// once). A front end that learns of the socket's reply without waiting
// on it (the edge module, from its host's read event) hands it to
// FinishWithReply. Over TCP the stream is read into buf from its start, in
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
// from its start), needs more before FinishWithReply can take it: no whole
// message yet, and room for it in the buffer. The caller then reads on
// into the buffer past read, until the same deadline. False for UDP,
// whose datagram comes whole, and for a message longer than the buffer,
// which FinishWithReply leaves to ResolveMiss.
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

// FinishWithReply ends the question StartMiss began in m with a reply the
// caller read from the started transaction's socket itself: use it where
// no goroutine waits on that socket (the edge module, whose host reports
// the reply's arrival in a poll; see Miss.StartedWait). reply is the
// first datagram its transaction's socket received (from from; read into
// StartedWait's buffer, or anywhere else), or over TCP the stream's bytes
// received so far, when that ends the question on its own: it matches
// the query and its server (ID, question, peer; over TCP, the stream's
// first message) and is an answer or NXDOMAIN. The reply is then the
// transaction's end, and ResolveMiss goes on with it on the caller's
// goroutine, as it goes on with one the upstream loop read (see started):
// the socket back in the pool, the slots given back, the server's charge,
// the attempt's event, the counters, the flight landed (followers and
// waiters answered), the cache, and the client's reply appended to dst,
// returned with ok true; m is emptied.
//
// Otherwise (a reply that does not match or does not end the question,
// a stream with no whole message, ctx ended, a reload since m was read)
// it reports false having done nothing: m must go to ResolveMiss as
// ever, and the socket's next Receives must return reply again, for the
// rules to apply to it there.
func (e *Engine) FinishWithReply(ctx context.Context, m *Miss, reply []byte, from netip.AddrPort, dst []byte) (resp Response, ok bool) {
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
	s := &bufs.first
	if replyEnds(tx, reply, tx.transport, &s.res) != matchExact || !endsHere(s.res.outcome) {
		s.res = exchangeResult{}
		return resp, false
	}
	if tx.transport == UDP {
		s.res.clean = usedCleanly(s.res.outcome) // the first datagram: no strays
	}
	s.outside, s.endedAt = true, time.Now()
	return e.ResolveMiss(ctx, m, dst), true
}

// dropFirst ends the first attempt StartMiss began for a question that
// did not go on with it (none does: resolve asks the name it began
// first): its socket closed, its slots given back, no attempt counted.
func (qn *question) dropFirst() {
	bufs, e := qn.first, qn.e
	qn.first = nil
	if s := &bufs.first; !s.ended && !s.outside {
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
