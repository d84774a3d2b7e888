package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// DNS over TLS upstreams (RFC 7858) under the same rules as UDP and TCP:
// one attempt is one query to that server over its transport, bounded by
// the attempt's deadline, its failures charged like any other. What
// differs is the connection, which is worth keeping:
//
//   - connections are kept per server (encryptedState), at most
//     Config.EncryptedConnections, and shared: queries are pipelined on
//     them, each reply matched to its query by ID and question on that
//     connection (never by order);
//   - each query waits on its own deadline (a timer of its own), never on
//     the connection's read deadline, so a dead connection costs at most
//     one attempt's time and a busy one cannot keep a stuck query
//     waiting (the pdns#17707 bug: a read deadline moved by every new
//     query never fires);
//   - a connection is opened by the attempt that needs one, its connect
//     and handshake bounded by that attempt's deadline; others that find
//     the ceiling reached wait for it, or for a free one, within theirs;
//   - one reader per connection reads replies as they come; the peer's
//     close (EOF, reset) is seen at once and the connection leaves the
//     pool, so the next question opens a new one instead of failing on
//     a dead one; the queries it carried go again on a new connection
//     within their attempt when time allows;
//   - a connection unused for Config.EncryptedIdle is closed by its
//     reader;
//   - TLS 1.3 session resumption is the TLSOpener's (its client session
//     cache): a connection re-opened after an idle close or a server's
//     close resumes, counted in handshakes and resumed.
//
// Queries are padded to a multiple of 128 octets (RFC 8467 §4.1); DNS
// cookies and 0x20 are not used on encrypted transports (TLS already
// keeps off-path forgers out). TC does not apply: a reply is used as it
// is.

// dotPipelineDepth is how many queries a connection carries at once before
// the engine prefers opening another (below the per-server bound).
const dotPipelineDepth = 64

// dotQueryBlock is the padding block of queries (RFC 8467 §4.1).
const dotQueryBlock = 128

// maxDoTRetries is how many times an attempt's query goes again on a new
// connection after its connection closed under it.
const maxDoTRetries = 2

// errNoTLS is the failure of a DoT attempt when the Network has no
// TLSOpener (an edge host without TLS).
var errNoTLS = &SocketError{Op: "connect", Class: ErrOther, Err: errors.New("the network has no TLS")}

// encryptedState is an encrypted server's connections and counters.
type encryptedState struct {
	mu      sync.Mutex
	conns   []*dotConn
	opening int           // connections being opened
	changed chan struct{} // closed and replaced when conns or opening change
	closed  bool          // the server left the configuration

	// Counters for /status and /metrics.
	handshakes atomic.Uint64 // connections opened (each a handshake)
	resumed    atomic.Uint64 // of which resumed a TLS session
	reused     atomic.Uint64 // queries sent on a connection already open
	failures   atomic.Uint64 // connects or handshakes that failed
}

// broadcast wakes the attempts waiting for a connection. Under st.mu.
func (st *encryptedState) broadcast() {
	if st.changed != nil {
		close(st.changed)
		st.changed = nil
	}
}

// waitChan is the channel the next broadcast closes. Under st.mu.
func (st *encryptedState) waitChan() chan struct{} {
	if st.changed == nil {
		st.changed = make(chan struct{})
	}
	return st.changed
}

// openConns is how many connections are open.
func (st *encryptedState) openConns() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.conns)
}

// close closes every connection; final says the server left the
// configuration and none is opened again. Queries on them end as on a
// connection the peer closed (they go again on a new one unless final).
func (st *encryptedState) close(final bool) {
	st.mu.Lock()
	st.closed = st.closed || final
	conns := st.conns
	st.conns = nil
	st.broadcast()
	st.mu.Unlock()
	for _, c := range conns {
		c.fail(errConnClosedLocally)
	}
}

var errConnClosedLocally = &SocketError{Op: "receive", Class: ErrClosed, Err: errors.New("connection closed: the server left the configuration")}

// closeEncrypted closes an encrypted server's connections; final says it
// left the configuration.
func (u *upstream) closeEncrypted(final bool) {
	if u.enc != nil {
		u.enc.close(final)
	}
}

// dotConn is one open DoT connection: its socket, the queries waiting on
// it by ID, its reader.
type dotConn struct {
	st   *encryptedState
	e    *Engine
	sock Socket
	idle time.Duration

	wmu sync.Mutex // one Send at a time

	mu      sync.Mutex
	waiting map[uint16]*dotWaiter // by ID; a rare second query with the same ID chains on next
	n       int                   // queries waiting
	last    time.Time             // when the last query was sent or the last reply came
	dead    bool
	err     error         // why it died
	gone    chan struct{} // closed when it dies
}

// dotWaiter is one query waiting on a connection.
type dotWaiter struct {
	query []byte      // the wire query, for matching
	got   chan []byte // the reply that matched ID and question, once
	next  *dotWaiter
}

// exchangeEncrypted is exchange for an encrypted transaction.
func (e *Engine) exchangeEncrypted(ctx context.Context, tx *transaction, r *exchangeResult) {
	// No cookies and no 0x20 on encrypted transports: TLS authenticates
	// the server, and a DoH server behind a cache would see every
	// random-case name as a new one.
	tx.cookies, tx.mixCase = false, false
	tx.begin()
	// Padded in a copy: the query's OPT is the ask's, which the next
	// attempt sends again (to a plain server, unpadded).
	tx.query = padQuery(append(make([]byte, 0, len(tx.query)+dotQueryBlock+4), tx.query...))
	if tx.transport == DoH {
		e.exchangeDoH(ctx, tx, r)
	} else {
		e.exchangeDoT(ctx, tx, r)
	}
	tx.ended = time.Now()
}

// padQuery pads the framed query q (its two-byte length in front, its OPT
// the last record) with an EDNS(0) Padding option to a multiple of
// dotQueryBlock octets, and rewrites the length.
func padQuery(q []byte) []byte {
	m := q[2:]
	w, ok := walkReply(m, nil)
	if !ok || !w.optLast {
		return q
	}
	size := len(m) + 4
	n := (dotQueryBlock - size%dotQueryBlock) % dotQueryBlock
	rdlen := 2 + w.optStart + dnswire.OPTFixedLen - 2
	binary.BigEndian.PutUint16(q[rdlen:], binary.BigEndian.Uint16(q[rdlen:])+uint16(4+n))
	q = binary.BigEndian.AppendUint16(q, dnswire.EDNS0PADDING)
	q = binary.BigEndian.AppendUint16(q, uint16(n))
	q = append(q, zeros[:n]...)
	binary.BigEndian.PutUint16(q, uint16(len(q)-2))
	return q
}

// exchangeDoH hands the transaction to the Network's HTTPSExchanger.
func (e *Engine) exchangeDoH(ctx context.Context, tx *transaction, r *exchangeResult) {
	x, ok := e.network.(HTTPSExchanger)
	st := tx.server.enc
	if !ok {
		e.socketFailure(ctx, tx, &SocketError{Op: "connect", Class: ErrOther, Err: errors.New("the network has no DoH")}, OutcomeConnectError, r)
		return
	}
	bp := dohBuffers.Get().(*[dnswire.MaxMsgSize]byte)
	defer dohBuffers.Put(bp)
	buf := bp[:]
	for {
		n, info, err := x.ExchangeHTTPS(ctx, &tx.server.ep, tx.source, tx.query[2:], buf, tx.deadline)
		if err == nil || info.New {
			st.count(info)
			tx.conn = connOf(info)
		}
		if err != nil {
			e.socketFailure(ctx, tx, err, encryptedFailure(err), r)
			return
		}
		// The reply outlives the buffer (the answer's entry may hold it).
		if e.matched(tx, append([]byte(nil), buf[:n]...), DoH, r) {
			return
		}
		// A body that does not match ends nothing: the question goes
		// again (a new stream) while the attempt has time.
		if !time.Now().Before(tx.deadline) {
			e.socketFailure(ctx, tx, &SocketError{Op: "receive", Class: ErrTimeout}, OutcomeTimeout, r)
			return
		}
	}
}

// dohBuffers are the response buffers of DoH exchanges: a DNS message's
// largest size, which a response on a stream may have.
var dohBuffers = sync.Pool{New: func() any { return new([dnswire.MaxMsgSize]byte) }}

// count adds an exchange's connection to the server's counters.
func (st *encryptedState) count(info ConnInfo) {
	if !info.New {
		st.reused.Add(1)
		return
	}
	st.handshakes.Add(1)
	if info.Resumed {
		st.resumed.Add(1)
	}
}

// encryptedFailure is the outcome of an encrypted transport's socket error
// by the step that failed.
func encryptedFailure(err error) Outcome {
	var se *SocketError
	if errors.As(err, &se) {
		switch se.Op {
		case "handshake":
			return OutcomeHandshakeError
		case "connect", "open", "bind":
			return OutcomeConnectError
		case "send":
			return OutcomeSendError
		}
	}
	return OutcomeRecvError
}

// exchangeDoT runs a DoT transaction: a connection (open or opened for
// it), the query sent on it, the wait for its reply until the deadline.
func (e *Engine) exchangeDoT(ctx context.Context, tx *transaction, r *exchangeResult) {
	st := tx.server.enc
	timer := time.NewTimer(time.Until(tx.deadline))
	defer timer.Stop()
	for tries := 0; ; tries++ {
		c, info, err := e.dotConnFor(ctx, tx, timer.C)
		if err != nil {
			e.socketFailure(ctx, tx, err, encryptedFailure(err), r)
			return
		}
		if tx.conn == ConnNone || info.New {
			tx.conn = connOf(info)
		}
		if !info.New {
			st.reused.Add(1)
		}
		w := &dotWaiter{query: tx.query[2:], got: make(chan []byte, 1)}
		if !c.add(w) {
			continue // it died meanwhile: another
		}
		if err := c.send(tx.query); err != nil {
			c.remove(w)
			c.fail(err)
			if tries < maxDoTRetries && time.Now().Before(tx.deadline) {
				continue
			}
			e.socketFailure(ctx, tx, err, OutcomeSendError, r)
			return
		}
		for {
			select {
			case m := <-w.got:
				if e.matched(tx, m, DoT, r) {
					return
				}
				// Matched the ID and question but did not walk:
				// ignored, counted; the wait goes on.
				if !c.add(w) {
					break
				}
				continue
			case <-c.gone:
				c.remove(w)
				// Replies that came before it died.
				select {
				case m := <-w.got:
					if e.matched(tx, m, DoT, r) {
						return
					}
				default:
				}
				if tries < maxDoTRetries && time.Now().Before(tx.deadline) && ctx.Err() == nil {
					break
				}
				e.socketFailure(ctx, tx, c.err, OutcomeRecvError, r)
				return
			case <-timer.C:
				c.remove(w)
				e.socketFailure(ctx, tx, &SocketError{Op: "receive", Class: ErrTimeout}, OutcomeTimeout, r)
				return
			case <-ctx.Done():
				c.remove(w)
				e.socketFailure(ctx, tx, &SocketError{Op: "receive", Class: ErrClosed, Err: ctx.Err()}, OutcomeRecvError, r)
				return
			}
			break
		}
	}
}

// dotConnFor returns a connection for tx: an open one with room, or one
// opened for it when the server has fewer than the bound, or the first to
// come free or open while it waits. It waits no later than the deadline
// (timeout: the timer's channel) or ctx's end. info.New says the
// connection was opened for tx.
func (e *Engine) dotConnFor(ctx context.Context, tx *transaction, timeout <-chan time.Time) (*dotConn, ConnInfo, error) {
	st := tx.server.enc
	limit := e.routes.Load().cfg.EncryptedConnections
	for {
		st.mu.Lock()
		if st.closed {
			st.mu.Unlock()
			return nil, ConnInfo{}, errConnClosedLocally
		}
		best := st.leastBusy()
		if best != nil && (best.load() < dotPipelineDepth || len(st.conns)+st.opening >= limit) {
			st.mu.Unlock()
			return best, ConnInfo{}, nil
		}
		if len(st.conns)+st.opening < limit {
			st.opening++
			st.mu.Unlock()
			return e.openDoT(ctx, tx, timeout)
		}
		wait := st.waitChan()
		st.mu.Unlock()
		select {
		case <-wait:
		case <-timeout:
			return nil, ConnInfo{}, &SocketError{Op: "connect", Class: ErrTimeout, Err: errors.New("no DoT connection came free")}
		case <-ctx.Done():
			return nil, ConnInfo{}, &SocketError{Op: "connect", Class: ErrClosed, Err: ctx.Err()}
		}
	}
}

// leastBusy is the open connection with the fewest queries waiting, or
// nil. Under st.mu.
func (st *encryptedState) leastBusy() *dotConn {
	var best *dotConn
	bestN := 0
	for _, c := range st.conns {
		if n := c.load(); best == nil || n < bestN {
			best, bestN = c, n
		}
	}
	return best
}

// load is how many queries wait on c.
func (c *dotConn) load() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// openDoT opens a connection for tx (st.opening counts it already), its
// connect and handshake bounded by tx's deadline. The open goes on when
// tx's client goes away (ctx), since the connection will serve the next
// question: its result then goes into the pool alone.
func (e *Engine) openDoT(ctx context.Context, tx *transaction, timeout <-chan time.Time) (*dotConn, ConnInfo, error) {
	st := tx.server.enc
	opener, ok := e.network.(TLSOpener)
	if !ok {
		st.mu.Lock()
		st.opening--
		st.broadcast()
		st.mu.Unlock()
		return nil, ConnInfo{}, errNoTLS
	}
	type opened struct {
		c    *dotConn
		info ConnInfo
		err  error
	}
	done := make(chan opened, 1)
	ep, source, deadline := &tx.server.ep, tx.source, tx.deadline
	idle := e.routes.Load().cfg.EncryptedIdle
	go func() {
		sock, info, err := opener.OpenTLS(ep, source, deadline)
		st.mu.Lock()
		st.opening--
		var c *dotConn
		if err == nil && st.closed {
			sock.Close()
			err = errConnClosedLocally
		}
		if err == nil {
			info.New = true
			c = &dotConn{st: st, e: e, sock: sock, idle: idle, waiting: map[uint16]*dotWaiter{},
				last: time.Now(), gone: make(chan struct{})}
			st.conns = append(st.conns, c)
			st.handshakes.Add(1)
			if info.Resumed {
				st.resumed.Add(1)
			}
			go c.read()
		} else {
			st.failures.Add(1)
		}
		st.broadcast()
		st.mu.Unlock()
		done <- opened{c, info, err}
	}()
	select {
	case o := <-done:
		return o.c, o.info, o.err
	case <-timeout:
		return nil, ConnInfo{}, &SocketError{Op: "handshake", Class: ErrTimeout, Err: errors.New("TLS connect and handshake did not end in the attempt's time")}
	case <-ctx.Done():
		return nil, ConnInfo{}, &SocketError{Op: "connect", Class: ErrClosed, Err: ctx.Err()}
	}
}

// add registers w on c; false when c is dead.
func (c *dotConn) add(w *dotWaiter) bool {
	id := binary.BigEndian.Uint16(w.query)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return false
	}
	w.next = c.waiting[id]
	c.waiting[id] = w
	c.n++
	c.last = time.Now()
	return true
}

// remove takes w off c, if it is still there.
func (c *dotConn) remove(w *dotWaiter) {
	id := binary.BigEndian.Uint16(w.query)
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := c.waiting[id]; p != nil; p = p.next {
		if p == w {
			c.unlink(id, w)
			return
		}
	}
}

// unlink takes w, which is there, off the chain of id. Under c.mu.
func (c *dotConn) unlink(id uint16, w *dotWaiter) {
	head := c.waiting[id]
	if head == w {
		if w.next == nil {
			delete(c.waiting, id)
		} else {
			c.waiting[id] = w.next
		}
	} else {
		for p := head; p != nil; p = p.next {
			if p.next == w {
				p.next = w.next
				break
			}
		}
	}
	w.next = nil
	c.n--
}

// send writes the framed query q.
func (c *dotConn) send(q []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.sock.Send(q)
}

// fail marks c dead with err, takes it out of the pool and closes its
// socket; its waiters see gone.
func (c *dotConn) fail(err error) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead, c.err = true, err
	close(c.gone)
	c.mu.Unlock()
	c.sock.Close()
	st := c.st
	st.mu.Lock()
	for i, x := range st.conns {
		if x == c {
			st.conns = append(st.conns[:i], st.conns[i+1:]...)
			break
		}
	}
	st.broadcast()
	st.mu.Unlock()
}

// read reads c's replies until it dies: each whole message goes to the
// query it matches by ID and question; one that matches none is counted
// (mismatched_replies) and dropped. It closes c after its idle time
// without a query waiting.
func (c *dotConn) read() {
	var pending []byte
	chunk := make([]byte, 16<<10)
	for {
		for {
			m, rest, ok := nextFrame(pending)
			if !ok {
				break
			}
			c.deliver(m)
			pending = rest
		}
		if len(pending) == 0 {
			pending = nil // do not hold a large reply's array
		}
		c.mu.Lock()
		idleEnd := c.last.Add(c.idle)
		c.mu.Unlock()
		n, _, err := c.sock.Receive(chunk, idleEnd)
		if err != nil {
			if classOf(err) == ErrTimeout {
				c.mu.Lock()
				stillIdle := c.n == 0 && !time.Now().Before(c.last.Add(c.idle))
				c.mu.Unlock()
				if !stillIdle {
					continue
				}
				err = &SocketError{Op: "receive", Class: ErrClosed, Err: errors.New("idle")}
			}
			c.fail(err)
			return
		}
		pending = append(pending, chunk[:n]...)
	}
}

// deliver hands reply m to the query on c it answers, a copy of it.
func (c *dotConn) deliver(m []byte) {
	if len(m) < dnswire.HeaderLen {
		c.e.counters.mismatchedReplies.Add(1)
		return
	}
	id := binary.BigEndian.Uint16(m)
	c.mu.Lock()
	c.last = time.Now()
	for w := c.waiting[id]; w != nil; w = w.next {
		if replyMatches(m, w.query, false) == matchExact {
			c.unlink(id, w)
			c.mu.Unlock()
			w.got <- append([]byte(nil), m...)
			return
		}
	}
	c.mu.Unlock()
	c.e.counters.mismatchedReplies.Add(1)
}
