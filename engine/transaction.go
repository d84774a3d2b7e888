package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net/netip"
	"time"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// udpReceiveSize is the receive buffer of a UDP transaction. Queries
// advertise 1232 bytes; a larger datagram is cut and then ignored as garbage.
const udpReceiveSize = 4096

// budget says which of the three time budgets set a transaction's deadline.
type budget uint8

const (
	budgetTransaction budget = iota // the transaction's own timeout
	budgetQuestion                  // engine.question_timeout
	budgetClient                    // the client's context
)

// transaction is one exchange with one server: one socket that is its alone
// while it runs (fresh, or from the server's pool), one random ID, one
// deadline. query is the wire query with two bytes in front for the
// TCP length; the transaction writes its own ID into it.
type transaction struct {
	server    *upstream
	transport Transport
	source    netip.Addr
	query     []byte
	bufs      *askBuffers // the receive buffer and the IDs' random bytes
	deadline  time.Time
	setBy     budget
	// ended is when exchange saw the transaction end (zero when no
	// socket opened): one clock reading for the socket's return to its
	// pool, the attempt's RTT and the stored time of its answer.
	ended time.Time
	// cookies and mixCase are the scope's: DNS cookies (cookie.go) and
	// 0x20 (namecase.go) toward its servers.
	cookies, mixCase bool
	// What prepare wrote into the query as sent: a name whose reply must
	// keep its case, a server cookie; retried says the query went again
	// after a BADCOOKIE. baseLen is the query's length without its
	// COOKIE option.
	exactCase, sentServerCookie, retried bool
	// gotServerCookie says the reply matched carried a server cookie
	// with the client's (checkCookie).
	gotServerCookie bool
	baseLen         int
	// conn is how an encrypted transaction's connection came to be
	// (dot.go), for its attempt event; ConnNone otherwise.
	conn Conn
}

// begin readies tx's query for its first send (prepare).
func (tx *transaction) begin() {
	tx.baseLen, tx.retried = len(tx.query), false
	tx.prepare()
}

// prepare writes into tx's query what is the transaction's own: a random
// ID; the name's case, random under 0x20 or lower for a server that does
// not keep case; the COOKIE option for its server from its source; the
// TCP length. The query is the engine's own (appendQuery): one question,
// then its OPT record, the last.
func (tx *transaction) prepare() {
	q := tx.query[:tx.baseLen]
	ids := &tx.bufs.ids
	binary.BigEndian.PutUint16(q[2:], ids.newID())
	tx.exactCase, tx.sentServerCookie, tx.gotServerCookie = false, false, false
	if tx.mixCase || tx.cookies {
		qe := 2 + questionEnd(q[2:])
		if qe > 2 {
			if tx.mixCase {
				name := q[2+dnswire.HeaderLen : qe-4]
				if tx.server.caseless.Load() {
					lowerCase(name)
				} else {
					randomizeCase(name, ids)
					tx.exactCase = true
				}
			}
			// The OPT's fixed part: root, type, class, TTL, RDLENGTH.
			if tx.cookies && len(q) >= qe+dnswire.OPTFixedLen && q[qe] == 0 &&
				binary.BigEndian.Uint16(q[qe+1:]) == dnswire.TypeOPT {
				opts := len(q) - qe - dnswire.OPTFixedLen // the options appendQuery wrote
				q, tx.sentServerCookie = tx.server.cookie.appendOption(q, tx.source)
				binary.BigEndian.PutUint16(q[qe+dnswire.OPTFixedLen-2:], uint16(opts+len(q)-tx.baseLen))
			}
		}
	}
	binary.BigEndian.PutUint16(q, uint16(len(q)-2))
	tx.query = q
}

// retryBadCookie readies tx's query to go again when r is the server's
// BADCOOKIE (RFC 7873 §5.3): once per transaction, within its deadline,
// with the server cookie the reply carried (checkCookie learned it). It
// reports whether the query is to be sent again; r is then zero.
func (tx *transaction) retryBadCookie(r *exchangeResult) bool {
	if r.rcode != dnswire.RcodeBadCookie || !tx.gotServerCookie || tx.retried {
		return false
	}
	tx.retried = true
	tx.prepare()
	*r = exchangeResult{}
	return true
}

// CancelWatcher is implemented by a client's context that can close a
// transaction's socket when it is cancelled for less than
// context.AfterFunc costs (five allocations a transaction: the callback,
// its context, the parent's child entry, the Done channel, the stop
// function). The engine uses it, when the context Resolve is given has
// it (through a QuestionContext), to end a transaction at once
// when its client goes away; other contexts get context.AfterFunc.
type CancelWatcher interface {
	// CloseOnCancel closes c when the context is cancelled, at once if
	// it already is. The engine watches one socket a question at a time,
	// but an implementation must accept several.
	CloseOnCancel(c io.Closer)
	// StopClosing ends the watch of c. It reports false when c was, or
	// is being, closed for the cancel: the socket must not be reused.
	StopClosing(c io.Closer) bool
}

// CancelWatcherOf returns the CancelWatcher ctx is, or wraps with the
// engine's own contexts (QuestionContext), or nil: a resolver that stands
// in for an Engine (see Miss.Hold) watches a question's context as the
// engine does, without context.AfterFunc's allocations.
func CancelWatcherOf(ctx context.Context) CancelWatcher { return cancelWatcherOf(ctx) }

// cancelWatcherOf is CancelWatcherOf.
func cancelWatcherOf(ctx context.Context) CancelWatcher {
	for {
		switch c := ctx.(type) {
		case *QuestionContext:
			ctx = c.Context
		case CancelWatcher:
			return c
		default:
			return nil
		}
	}
}

// closeOnCancel arranges for sock to be closed when ctx is cancelled: by
// ctx's CancelWatcher, when it has one, else by context.AfterFunc, whose
// stop function it returns. Not inlined, as stopClosing: their variables
// would stay in exchange's frame while the transaction waits, and the
// question's goroutine would outgrow its first stack.
//
//go:noinline
func closeOnCancel(ctx context.Context, sock Socket) (stop func() bool) {
	// The front ends' own context first, without interface conversions:
	// each (the switch in cancelWatcherOf, the socket made an io.Closer)
	// looks in the runtime's interface tables as WebAssembly.
	if c, ok := ctx.(*CancelContext); ok {
		c.closeOnCancel(sock)
		return nil
	}
	if w := cancelWatcherOf(ctx); w != nil {
		w.CloseOnCancel(sock)
		return nil
	}
	if ctx.Done() != nil {
		return context.AfterFunc(ctx, func() { sock.Close() })
	}
	return nil
}

// stopClosing ends what closeOnCancel arranged. It reports false when the
// socket was closed for the cancel.
//
//go:noinline
func stopClosing(ctx context.Context, sock Socket, stop func() bool) bool {
	if stop != nil {
		return stop()
	}
	if c, ok := ctx.(*CancelContext); ok {
		return c.stopClosing(sock)
	}
	if w := cancelWatcherOf(ctx); w != nil {
		return w.StopClosing(sock)
	}
	return true
}

// exchangeResult is what a transaction brings back. It is written in
// place, through a pointer, down to the reply's walk: returned by value it
// was copied (and its zero value filled) at each of five calls, which as
// WebAssembly is a call to the host's memmove each time.
type exchangeResult struct {
	outcome Outcome
	reply   []byte      // the matched reply, where it was received (the ask's buffers, or the TCP stream's); only an answer's and an NXDOMAIN's are used, the rest only shown to the wiretap
	walked  walkedReply // what the walk of reply found
	rcode   int         // -1 without a reply
	class   ErrorClass  // the socket error's class, for a socket failure
	// clean says the socket may serve another transaction: a UDP reply
	// was used (answer, NXDOMAIN or truncated) and nothing else came.
	clean bool
	// cookieless says a reply was ignored for lacking the COOKIE option
	// of a server that had sent one (checkCookie).
	cookieless bool
}

// newID returns a random 16-bit ID from the cryptographic source. The
// source is read 128 IDs at a time into the buffer (pooled, with the
// rest of an ask's buffers): one read per ID was a system call's worth of
// work per transaction. Each ID is used once; an off-path attacker sees
// none of the buffer before its ID leaves.
func (ids *idBuffer) newID() uint16 {
	if ids.next >= len(ids.b) {
		rand.Read(ids.b[:])
		ids.next = 0
	}
	id := binary.BigEndian.Uint16(ids.b[ids.next:])
	ids.next += 2
	return id
}

// idBuffer holds random bytes for newID; next is the first unused (the
// buffer's length: none).
type idBuffer struct {
	b    [256]byte
	next int
}

// exchange runs one transaction to its end: a matching reply, the
// deadline, a socket failure, or ctx ending (the client gone). A reply that
// does not match, garbage included, does not end it: it is counted and
// ignored, and the wait goes on until the deadline.
//
// A UDP socket may come from the server's pool (pool.go) and goes back to
// it only when the transaction ended cleanly; any failure closes it. The
// result is written into r, which must be zero.
func (e *Engine) exchange(ctx context.Context, tx *transaction, r *exchangeResult) {
	if tx.transport >= DoT {
		e.exchangeEncrypted(ctx, tx, r)
		return
	}
	var x exchanging
	if !e.openExchange(ctx, tx, &x, r) {
		return
	}
	e.transact(ctx, tx, x.ps.sock, x.ps.x, tx.query[2:], r)
	e.endExchange(ctx, tx, &x, r)
}

// exchanging is a transaction's socket while it runs: where it came from
// and what watches it for the client's cancel.
type exchanging struct {
	pool *socketPool // the pool it goes back to, if any
	ps   pooledSocket
	stop func() bool // closeOnCancel's
}

// openExchange gives tx its random ID and its socket, pooled or fresh,
// watched for ctx's cancel. It reports false when no socket opened: r
// then holds the failure and tx.ended is zero.
func (e *Engine) openExchange(ctx context.Context, tx *transaction, x *exchanging, r *exchangeResult) bool {
	tx.begin()

	if e.reuse && tx.transport == UDP {
		x.pool = tx.server.pools.get(tx.source)
	}
	ok := false
	if x.pool != nil {
		x.ps, ok = x.pool.take(tx.deadline)
	}
	if !ok {
		sock, err := e.open(ctx, tx)
		if err != nil {
			if tx.transport == TCP {
				e.socketFailure(ctx, tx, err, OutcomeConnectError, r)
				return false
			}
			e.socketFailure(ctx, tx, err, OutcomeSendError, r)
			return false
		}
		x.ps = pooledSocket{sock: sock, born: time.Now()}
		if tx.transport == UDP {
			x.ps.x, _ = sock.(DatagramExchanger)
		}
	}
	x.stop = closeOnCancel(ctx, x.ps.sock)
	return true
}

// endExchange ends the watch of tx's socket and returns it to its pool
// when the transaction ended cleanly, else closes it. It reads the clock
// for tx.ended.
func (e *Engine) endExchange(ctx context.Context, tx *transaction, x *exchanging, r *exchangeResult) {
	e.endExchangeAt(ctx, tx, x, r, time.Now())
}

// endExchangeAt is endExchange for a transaction seen to end at ended
// (the upstream loop's read, FinishWithReply's): no second clock reading.
func (e *Engine) endExchangeAt(ctx context.Context, tx *transaction, x *exchanging, r *exchangeResult, ended time.Time) {
	sock := x.ps.sock
	// A socket closed under the transaction by its client's leaving is
	// not reused either.
	stopped := stopClosing(ctx, sock, x.stop)
	tx.ended = ended
	if r.cookieless && r.outcome == OutcomeTimeout {
		// Only replies without a cookie came: the server stopped
		// sending them.
		tx.server.cookie.forget()
	}
	if x.pool != nil && r.clean && stopped {
		x.pool.put(x.ps, ended)
	} else {
		sock.Close()
	}
}

// transact sends the query on sock and waits for the matching reply,
// written into r. x is sock as a DatagramExchanger, if it is one (UDP):
// asserted once per socket, not per transaction, since an assertion to an
// interface type looks in the runtime's tables each time as WebAssembly.
func (e *Engine) transact(ctx context.Context, tx *transaction, sock Socket, x DatagramExchanger, msg []byte, r *exchangeResult) {
	if tx.transport == TCP {
		if err := sock.Send(tx.query); err != nil {
			e.socketFailure(ctx, tx, err, connectOr(err, OutcomeSendError), r)
			return
		}
		e.receiveTCP(ctx, tx, sock, msg, r)
		return
	}
	if x == nil {
		if err := sock.Send(msg); err != nil {
			e.socketFailure(ctx, tx, err, OutcomeSendError, r)
			return
		}
	}
	e.receiveUDP(ctx, tx, sock, x, msg, r)
}

// open opens tx's socket. A TCP connect may take until the deadline; a
// client that goes away meanwhile ends the wait at once, and the socket,
// should it still connect, is closed as soon as it does. A Network that
// ConnectsLater does not wait, so it is not watched.
func (e *Engine) open(ctx context.Context, tx *transaction) (Socket, error) {
	t, server, source, deadline := tx.transport, tx.server.addr, tx.source, tx.deadline
	if t != TCP || e.openNow || ctx.Done() == nil {
		return e.network.Open(t, server, source, deadline)
	}
	type opened struct {
		sock Socket
		err  error
	}
	done := make(chan opened, 1)
	go func() {
		s, err := e.network.Open(t, server, source, deadline)
		done <- opened{s, err}
	}()
	select {
	case o := <-done:
		return o.sock, o.err
	case <-ctx.Done():
		go func() {
			if o := <-done; o.sock != nil {
				o.sock.Close()
			}
		}()
		return nil, &SocketError{Op: "connect", Class: ErrClosed, Err: ctx.Err()}
	}
}

// receiveUDP waits for the reply to query, written into r. With x, the
// query is not sent yet: x sends it and reads the first datagram in one
// call.
func (e *Engine) receiveUDP(ctx context.Context, tx *transaction, sock Socket, x DatagramExchanger, query []byte, r *exchangeResult) {
	buf := tx.bufs.recv[:]
	strays := false // anything but the reply makes the socket unfit to reuse
	for {
		var n int
		var from netip.AddrPort
		var err error
		if x != nil {
			n, from, err = x.Exchange(query, buf, tx.deadline)
			x = nil
			if se, ok := err.(*SocketError); ok && se.Op == "send" {
				e.socketFailure(ctx, tx, err, OutcomeSendError, r)
				return
			}
		} else {
			n, from, err = sock.Receive(buf, tx.deadline)
		}
		if err != nil {
			e.socketFailure(ctx, tx, err, OutcomeRecvError, r)
			return
		}
		if from != tx.server.addr {
			e.counters.mismatchedReplies.Add(1)
			strays = true
			continue
		}
		if e.matched(tx, buf[:n], UDP, r) {
			if tx.retryBadCookie(r) {
				if err := sock.Send(tx.query[2:]); err != nil {
					e.socketFailure(ctx, tx, err, OutcomeSendError, r)
					return
				}
				continue
			}
			r.clean = !strays && usedCleanly(r.outcome)
			return
		}
		strays = true
	}
}

func (e *Engine) receiveTCP(ctx context.Context, tx *transaction, sock Socket, query []byte, r *exchangeResult) {
	var pending []byte
	var chunk [2048]byte
	for {
		// Take every whole message already read.
		for {
			m, rest, ok := nextFrame(pending)
			if !ok {
				break
			}
			pending = rest
			if e.matched(tx, m, TCP, r) {
				if tx.retryBadCookie(r) {
					if err := sock.Send(tx.query); err != nil {
						e.socketFailure(ctx, tx, err, connectOr(err, OutcomeSendError), r)
						return
					}
					continue
				}
				return
			}
		}
		n, _, err := sock.Receive(chunk[:], tx.deadline)
		if err != nil {
			e.socketFailure(ctx, tx, err, connectOr(err, OutcomeRecvError), r)
			return
		}
		pending = append(pending, chunk[:n]...)
	}
}

// nextFrame splits the first whole message off a TCP stream's bytes (its
// two-byte length in front): ok is false while it is not all there.
func nextFrame(stream []byte) (m, rest []byte, ok bool) {
	if len(stream) < 2 {
		return nil, stream, false
	}
	l := 2 + int(binary.BigEndian.Uint16(stream))
	if len(stream) < l {
		return nil, stream, false
	}
	return stream[2:l], stream[l:], true
}

// connectOr is otherwise, or OutcomeConnectError for the failure of a
// connect that went on after Network.Open handed the socket over.
func connectOr(err error, otherwise Outcome) Outcome {
	if se, ok := err.(*SocketError); ok && se.Op == "connect" {
		return OutcomeConnectError
	}
	return otherwise
}

// matched checks one reply to tx and reports whether it ended the
// transaction, its result then written into r (zero before the call). A
// reply that does not match, or matches but does not walk, or carries a
// cookie not the server's, counts as mismatched and is ignored: r's walk
// may then hold it, which the next reply's overwrites. Only the header
// and question are compared and the records walked: the reply is not
// unpacked.
func (e *Engine) matched(tx *transaction, m []byte, t Transport, r *exchangeResult) bool {
	switch replyEnds(tx, m, t, r) {
	case matchExact:
		if tx.exactCase {
			caseKept(tx.server)
		}
		return true
	case matchCaseOnly:
		e.caseDiffered(tx.server)
	}
	e.counters.mismatchedReplies.Add(1)
	return false
}

// usedCleanly reports whether a UDP reply with outcome o leaves its
// socket fit for another transaction (when nothing else came on it).
func usedCleanly(o Outcome) bool {
	return o == OutcomeAnswer || o == OutcomeNXDomain || o == OutcomeTruncated
}

// replyEnds is matched without its counter: whether m ends tx
// (matchExact), its result then written into r. matchCaseOnly is a reply
// that would, but for the case of its name.
func replyEnds(tx *transaction, m []byte, t Transport, r *exchangeResult) match {
	k := replyMatches(m, tx.query[2:], tx.exactCase)
	if k == matchNone {
		return matchNone
	}
	w := &r.walked
	if !walkReplyInto(m, nil, w) {
		if k == matchExact && t == UDP && m[dnswire.OffFlags]&0x02 != 0 {
			// Truncated, its last record cut: the TCP retry gets it
			// whole, and nothing in it is used.
			r.outcome, r.rcode, r.reply = OutcomeTruncated, int(m[3]&0x0F), m
			return matchExact
		}
		return matchNone
	}
	switch tx.checkCookie(w.optData) {
	case cookieWrong:
		return matchNone
	case cookieMissing:
		r.cookieless = true
		return matchNone
	}
	if k == matchCaseOnly {
		return matchCaseOnly
	}
	r.rcode = w.rcode
	switch {
	case w.tc && t == UDP:
		// Over TCP there is nothing bigger to retry with: the reply
		// is used as it is.
		r.outcome = OutcomeTruncated
	case w.rcode == dnswire.RcodeSuccess:
		r.outcome = OutcomeAnswer
	case w.rcode == dnswire.RcodeNameError:
		r.outcome = OutcomeNXDomain
	default:
		r.outcome = OutcomeRcode
	}
	// Bytes after the last record are dropped: kept, they would sit
	// between the records and the OPT written for the client, and the
	// client could not read its answer (found by FuzzUpstreamReply).
	r.reply = m[:w.end]
	return matchExact
}

// socketFailure turns a socket error into the attempt's outcome. A deadline
// set by the client's or the question's budget, or a socket closed because
// the client went away, is not the server's fault: cancelled.
func (e *Engine) socketFailure(ctx context.Context, tx *transaction, err error, otherwise Outcome, r *exchangeResult) {
	class := classOf(err)
	r.rcode, r.class = -1, class
	switch {
	case ctx.Err() != nil:
		r.outcome = OutcomeCancelled
	case class == ErrTimeout && tx.setBy != budgetTransaction:
		r.outcome = OutcomeCancelled
	case class == ErrTimeout:
		r.outcome = OutcomeTimeout
	case class == ErrLocal:
		r.outcome = OutcomeLocalError
	default:
		r.outcome = otherwise
	}
}
