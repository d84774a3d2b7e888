package engine

import (
	"net/netip"
	"time"

	"github.com/dohfwd/dohfwd/engine/dnswire"
	"github.com/dohfwd/dohfwd/engine/wiretap"
)

// maxStackServers is how many servers a scope may list before the
// per-attempt scratch space leaves the ask's pooled buffers (askBuffers)
// for an allocation of its own.
const maxStackServers = 16

// ask asks one candidate name: attempts one at a time, each sent only after
// the previous one ended, to the server the order and the choice rule give,
// with a TCP retry to the same server after a truncated UDP reply.
//
// It writes how the candidate ended into r and, for an answer or
// NXDOMAIN, the transaction's result into res and the reply's entry, to
// be made by makeEntry, into *en (r.at:
// when it came, the transaction's end, which also ends the question:
// r.ends); r and res are the caller's zero values (as WebAssembly a
// found returned by value is a zeroing and copies, calls to the host's
// memmove, at every level), and res holds nothing to read for any other
// result.
func (qn *question) ask(name string, res *exchangeResult, r *found, en **entry) {
	e, cfg := qn.e, qn.cfg
	bufs := qn.first // the first attempt, when StartMiss began it
	begun := bufs != nil
	qn.first = nil
	if !begun {
		var err error
		if bufs, err = packQuery(&qn.client, name, qn.scope.forwardECS, qn.subnet); err != nil {
			// Nothing can be sent for a name that does not pack; no
			// server is at fault.
			r.result, r.reason = ResultUnavailable, ReasonAttemptsSpent
			return
		}
		// The scratch is in the pooled buffers, not arrays on the
		// stack, which Go zeroes at each ask: as WebAssembly zeroing
		// 128 bytes is seven calls to the host's memmove. until and
		// order are written before they are read; asked is cleared
		// here.
		bufs.asked = [maxStackServers]bool{}
		bufs.cand.reset(qn.scope.servers, bufs.until[:0], bufs.order[:0], bufs.asked[:0])
	}
	defer qn.putUnlessHeld(bufs)

	c := &bufs.cand     // in place: as WebAssembly a candidate returned by value is a zeroing and a copy
	var tcpTo *upstream // set after a truncated UDP reply
	// One transaction for every attempt, in the pooled buffers, its
	// fields set one by one at each (deadline and setBy in deadline):
	// as WebAssembly a literal per attempt, or a zeroed local, is calls
	// to the host's memmove.
	tx := &bufs.tx
	for {
		var now time.Time // the deadline's, the demotion marks' and the RTT's start
		var pick int
		if begun {
			begun = false
			now, pick = qn.goOn(bufs, res)
		} else {
			// Budget exhaustion is checked first: it is not a ceiling refusal.
			if qn.spent >= cfg.Attempts {
				r.result, r.reason = ResultUnavailable, ReasonAttemptsSpent
				return
			}
			tx.query, tx.bufs, tx.ended = bufs.query, bufs, time.Time{}
			now = time.Now()
			if !qn.deadline(tx, now) {
				*r = qn.ended()
				return // no time left: nothing is sent
			}
			pick = c.next(now.Sub(e.epoch), tcpTo)
			tx.server = c.servers[pick]
			tx.transport = tx.server.transportFor(e.first)
			if tcpTo != nil {
				tx.transport = TCP
			}
			tx.source = qn.scope.source(tx.server.addr)
			tx.cookies, tx.mixCase = qn.scope.cookies, qn.scope.mixCase
			if !e.inFlight.acquire() {
				if !qn.background {
					e.counters.refused.Add(1)
				}
				r.result, r.reason = ResultUnavailable, ReasonInFlightCeiling
				return
			}
			slot, ok := qn.acquireClient()
			if !ok {
				e.inFlight.release()
				r.result, r.reason = ResultUnavailable, ReasonClientInFlight
				return
			}
			if qn.spent > 0 {
				*res = exchangeResult{} // the last attempt's, to be written again
			}
			e.exchange(qn.ctx, tx, res)
			e.inFlight.release()
			if slot != nil {
				slot.ReleaseTransaction()
			}
		}
		if qn.attemptEnded(name, bufs, pick, now, res, r, en) {
			return
		}
		tcpTo = nil
		switch res.outcome {
		case OutcomeCancelled:
			*r = qn.ended()
			return
		case OutcomeTruncated:
			if qn.spent >= cfg.Attempts {
				r.result, r.reason = ResultUnavailable, ReasonTruncated
				return
			}
			tcpTo = tx.server
		}
	}
}

// attemptEnded accounts for the attempt that began at now to server pick
// of the ask in bufs and ended with res: its spending, its server's
// charge, its event. It reports true when the outcome ends the ask (an
// answer or NXDOMAIN), written into r and *en as ask returns them.
func (qn *question) attemptEnded(name string, bufs *askBuffers, pick int, now time.Time, res *exchangeResult, r *found, en **entry) bool {
	e, c, tx := qn.e, &bufs.cand, &bufs.tx
	if tx.ended.IsZero() { // no socket: exchange read no clock
		tx.ended = time.Now()
	}
	rtt := tx.ended.Sub(now)

	qn.spent++
	c.asked[pick] = true
	c.n++
	demoted := e.settle(tx.server, res.outcome, questionAttempt, qn.cfg.DemotionPeriod).demote
	qn.attempted(name, tx, pick, res.outcome, res.rcode, res.class, now, rtt, demoted)
	if e.wiretap != nil {
		tapAttempt(e.wiretap, tx, res.reply, now)
	}
	switch res.outcome {
	case OutcomeAnswer:
		r.result, r.at, r.ends = ResultAnswer, tx.ended, true
	case OutcomeNXDomain:
		r.result, r.at, r.ends = ResultNXDomain, tx.ended, true
	default:
		return false
	}
	if tx.mixCase && name == qn.client.name {
		restoreCase(res.reply, tx.query[2:], qn.client.qname)
	}
	*en = qn.replyEntry(bufs, res.reply)
	return true
}

// replyEntry returns the entry for reply, the answer an ask in bufs
// brought, its msg the reply's bytes and the rest for makeEntry to fill.
// With the cache off, the question's first such entry is bufs' own, the
// reply where it was received, and the question holds bufs until its
// reply is written (release): nothing is allocated for an answer that is
// not stored; a flight that shares it copies it (flights.land). Else the
// reply is copied into a new entry.
func (qn *question) replyEntry(bufs *askBuffers, reply []byte) *entry {
	if qn.routes.cache == nil && qn.held == nil {
		qn.held = bufs
		en := &bufs.entry
		*en = entry{}
		en.msg = reply
		return en
	}
	en := entryFor(len(reply) + dnswire.OPTFixedLen)
	en.msg = append(en.msg, reply...)
	return en
}

// putUnlessHeld returns an ask's buffers to the pool, unless the question
// holds them (replyEntry).
func (qn *question) putUnlessHeld(bufs *askBuffers) {
	if qn.held != bufs {
		askBuffersPool.Put(bufs)
	}
}

// attempted records an attempt that ended: its event, its place in the
// Extended DNS Error's list and its time. Not inlined, so the event is not
// in ask's frame while the next transaction runs. The event's end is start
// plus rtt: the wall time without reading the clock again.
//
//go:noinline
func (qn *question) attempted(name string, tx *transaction, pick int, o Outcome, rcode int, class ErrorClass, start time.Time, rtt time.Duration, demoted bool) {
	qn.e.observer.Attempt(AttemptEvent{
		Question: qn.id, QName: name, QType: qn.client.qtype, Scope: qn.scope.name,
		Attempt: qn.spent, Server: tx.server.addr, Transport: tx.transport, Conn: tx.conn,
		Outcome: o, Class: class, Rcode: rcode, RTT: rtt, End: start.Add(rtt), Demoted: demoted, Trace: qn.trace,
		Proto: qn.proto,
	})
	tx.conn = ConnNone
	qn.upstream += rtt
	// The list is made at the first attempt after which the question
	// may still end unavailable: an answer ends it, and so does an
	// NXDOMAIN unless a search candidate may follow.
	if qn.tried == nil {
		if o == OutcomeAnswer || o == OutcomeNXDomain && len(qn.scope.search) == 0 {
			return
		}
		qn.tried = new(tried)
	}
	qn.tried.add(qn.scope, pick, tx.transport, o, rcode, class)
}

// deadline sets tx's deadline at now: its own timeout, or the question's or
// the client's budget when that ends first. It reports false when the
// question has no time left (or its client has gone).
func (qn *question) deadline(tx *transaction, now time.Time) bool {
	if qn.ctx.Err() != nil {
		return false
	}
	tx.deadline, tx.setBy = now.Add(qn.cfg.TransactionTimeout), budgetTransaction
	if qn.budgetEnd.IsZero() {
		return true
	}
	if !qn.budgetEnd.After(now) {
		return false
	}
	if qn.budgetEnd.Before(tx.deadline) {
		tx.deadline, tx.setBy = qn.budgetEnd, qn.budgetBy
	}
	return true
}

// candidate is the server-choice state of one candidate name: which
// servers it has asked and how many attempts it has made.
type candidate struct {
	servers []*upstream
	asked   []bool
	n       int             // attempts made for this candidate
	until   []time.Duration // scratch: the marks at this attempt
	order   []int           // scratch: the order at this attempt
}

// reset makes c the state of a fresh candidate, its scratch space in the
// caller's buffers when they are big enough (the ask's pooled buffers,
// for the scopes anyone configures). Every field is set one by one.
func (c *candidate) reset(servers []*upstream, until []time.Duration, order []int, asked []bool) {
	if len(servers) > cap(until) {
		until, order = make([]time.Duration, len(servers)), make([]int, 0, len(servers))
		asked = make([]bool, len(servers))
	}
	c.servers, c.until, c.order, c.asked, c.n = servers, until, order, asked[:len(servers)], 0
}

// next returns the index of the server for the next attempt: after a
// truncated reply the same server (over TCP); otherwise the choice rule
// over the order computed afresh from the marks at now.
func (c *candidate) next(now time.Duration, tcpTo *upstream) int {
	if tcpTo != nil {
		for i, s := range c.servers {
			if s == tcpTo {
				return i
			}
		}
	}
	// Written in place, never appended: the scratch stays in the
	// caller's buffers.
	until := c.until[:len(c.servers)]
	for i, s := range c.servers {
		until[i] = s.markUntil()
	}
	return chooseServer(serverOrder(c.order[:0], until, now), c.asked, c.n)
}

// attemptKind says who made an attempt: a client's question, or a
// background probe of a demoted server.
type attemptKind uint8

const (
	questionAttempt attemptKind = iota
	probeAttempt
)

// charge is what one attempt's outcome does to its server and counters.
type charge struct {
	clearMark bool // the server answered: its mark goes
	demote    bool // a failure charged to the server demotes it
	failed    bool // counts upstream_failed
}

// chargeFor is the one rule for what outcome o of an attempt of kind k
// does. A used NOERROR or NXDOMAIN reply clears the mark. A truncated UDP
// reply does nothing to a question (the TCP retry decides) but clears a
// probe's server: a probe has no retry, and a server that answers is
// alive. A failure demotes; for a question it also counts upstream_failed
// (probes spend no question's attempts and are counted apart). A local
// error spends the attempt and counts upstream_failed without demoting;
// a cancelled transaction is not the server's fault.
func chargeFor(o Outcome, k attemptKind) charge {
	question := k == questionAttempt
	switch {
	case o == OutcomeAnswer || o == OutcomeNXDomain:
		return charge{clearMark: true}
	case o == OutcomeTruncated:
		return charge{clearMark: !question}
	case o.failure():
		return charge{demote: true, failed: question}
	case o == OutcomeLocalError:
		return charge{failed: question}
	}
	return charge{}
}

// settle applies the charge of outcome o of an attempt of kind k to server
// and the counters, and returns it.
func (e *Engine) settle(server *upstream, o Outcome, k attemptKind, period time.Duration) charge {
	ch := chargeFor(o, k)
	switch {
	case ch.clearMark:
		server.clear()
	case ch.demote:
		server.demote(e.now(), period)
	}
	if ch.failed {
		e.counters.upstreamFailed.Add(1)
	}
	if k == probeAttempt {
		e.counters.probes[o].Add(1)
		return ch
	}
	if o == OutcomeCancelled {
		e.counters.cancelled.Add(1)
	}
	e.counters.attempts[o].Add(1)
	server.note(o)
	return ch
}

// tapAttempt hands the wiretap an attempt that began at start and ended
// at tx.ended: its query as sent (without TCP's length) and its reply,
// when one matched (nil otherwise: a timeout, a socket failure), in the
// buffers they are in, which the tap copies.
//
//go:noinline
func tapAttempt(tap wiretap.Tap, tx *transaction, reply []byte, start time.Time) {
	m := wiretap.Message{
		Kind: wiretap.ForwarderQuery, Protocol: wiretap.UDP,
		ResponseAddr: tx.server.addr,
		Query:        tx.query[2:],
		QueryTime:    start,
	}
	if tx.transport == TCP {
		m.Protocol = wiretap.TCP
	}
	if tx.source.IsValid() {
		m.QueryAddr = netip.AddrPortFrom(tx.source, 0)
	}
	tap.Tap(m)
	m.Kind, m.Response, m.ResponseTime = wiretap.ForwarderResponse, reply, tx.ended
	tap.Tap(m)
}
